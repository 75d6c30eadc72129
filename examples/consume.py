"""Consume messages with the blocking push consumer: a callback per message.

    python examples/consume.py --namesrv 127.0.0.1:9876 --topic TopicTest --count 10

Prints each message (id, tags, body, delivery count) and stops after ``--count`` messages or
``--timeout`` seconds. A new group starts at the first message of each queue, so it reads what
``produce.py`` sent before; the group's progress is kept on the broker, so a second run goes
on where the first stopped. ``--fail-first`` makes the callback answer RECONSUME_LATER (raising
does the same) on each message's first delivery, to show that failed messages come back, with
``reconsume_times`` 1.
"""

# ruff: noqa: T201

import argparse
import sys
import threading
import time

from pyrmq.client import ConsumeStatus, PushConsumer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicTest")
    parser.add_argument("--group", default="example-consumer")
    parser.add_argument("--expression", default="*", help="tag expression, e.g. 'TagA || TagB'")
    parser.add_argument("--count", type=int, default=10, help="stop after this many messages")
    parser.add_argument("--timeout", type=float, default=30.0, help="stop after this long (s)")
    parser.add_argument("--fail-first", action="store_true", help="fail each first delivery")
    args = parser.parse_args()

    lock = threading.Lock()
    consumed: list[str] = []
    done = threading.Event()

    def callback(msg):  # the official client's callback: one message, a ConsumeStatus
        with lock:  # callbacks run on several threads
            if args.fail_first and msg.reconsume_times == 0:
                print(f"failing {msg.id} body={msg.body.decode()!r} (it will come back)")
                return ConsumeStatus.RECONSUME_LATER
            consumed.append(msg.id)
            print(
                f"received {msg.id} tags={msg.tags.decode()} body={msg.body.decode()!r} "
                f"reconsume_times={msg.reconsume_times}"
            )
            if len(consumed) >= args.count:
                done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(args.group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_consume_from_where("CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(args.topic, callback, args.expression)
    consumer.start()
    started = time.monotonic()
    try:
        done.wait(args.timeout)
    finally:
        consumer.shutdown()
    print(f"received {len(consumed)} messages in {time.monotonic() - started:.1f} s")
    return 0 if len(consumed) >= args.count else 1


if __name__ == "__main__":
    sys.exit(main())
