"""Send messages with the blocking API, as code written for the official ``rocketmq``
package does (only the import differs).

    python examples/produce.py --namesrv 127.0.0.1:9876 --topic TopicTest --count 10

Prints one line per message (its send status, message id and queue offset), then a summary.
With ``--batch``, the messages go in one ``send_batch`` request.
"""

# ruff: noqa: T201

import argparse

from pyrmq.client import Message, Producer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicTest")
    parser.add_argument("--group", default="example-producer")
    parser.add_argument("--tags", default="TagA")
    parser.add_argument("--count", type=int, default=10, help="messages to send")
    parser.add_argument("--batch", action="store_true", help="send them in one batch")
    args = parser.parse_args()

    producer = Producer(args.group, timeout=5000)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    try:
        messages = []
        for i in range(args.count):
            msg = Message(args.topic)
            msg.set_keys(f"key-{i}")
            msg.set_tags(args.tags)
            msg.set_body(f"message {i}")
            messages.append(msg)
        if args.batch:
            ret = producer.send_batch(messages)
            print(f"sent batch of {args.count}: status={ret.status.name} offset={ret.offset}")
        else:
            for i, msg in enumerate(messages):
                ret = producer.send_sync(msg)
                print(
                    f"sent 'message {i}': status={ret.status.name} msg_id={ret.msg_id} "
                    f"offset={ret.offset}"
                )
    finally:
        producer.shutdown()
    print(f"sent {args.count} messages to {args.topic}")


if __name__ == "__main__":
    main()
