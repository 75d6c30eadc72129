"""Broadcasting: every consumer of a broadcasting group gets every message (in clustering, the
default, the group's consumers share them).

    python examples/broadcast.py --namesrv 127.0.0.1:9876 --consumers 2 --count 5

Starts ``--consumers`` consumers of one broadcasting group in this process, sends ``--count``
messages, and prints what each consumer received. Broadcasting consumers keep their progress
in local files, under ``$PYRMQ_OFFSETS_DIR`` (default ``~/.rocketmq_offsets``).
"""

# ruff: noqa: T201

import argparse
import sys
import threading
import time
import uuid

from pyrmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer
from pyrmq.client.exceptions import PullConsumerFetchMQFailed


def wait_for_topic(namesrv: str, topic: str, timeout_s: float = 10.0) -> None:
    """Consumers find a topic's queues when they start (or at their next route refresh, 30 s
    later): wait until the name server knows the topic."""
    probe = PullConsumer("example-broadcast-probe")
    probe.set_namesrv_addr(namesrv)
    probe.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                probe.fetch_message_queues(topic)
            except PullConsumerFetchMQFailed:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            else:
                return
    finally:
        probe.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicBroadcast")
    parser.add_argument("--group", default="example-broadcast")
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--count", type=int, default=5, help="messages to send")
    parser.add_argument("--timeout", type=float, default=30.0, help="longest wait (s)")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]  # tells this run's messages from earlier runs'

    producer = Producer("example-broadcast-producer")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    try:
        # The first send creates the topic; the consumers start after it, at the end of each
        # queue, so they get only what follows.
        producer.send_sync(Message(args.topic, f"{run} topic check"))
        wait_for_topic(args.namesrv, args.topic)

        lock = threading.Lock()
        received: list[list[str]] = [[] for _ in range(args.consumers)]
        all_done = threading.Event()

        def callback_of(n: int):
            def callback(msg):
                body = msg.body.decode()
                if not body.startswith(f"{run} message"):
                    return
                with lock:
                    received[n].append(body)
                    print(f"consumer-{n} received {body!r}")
                    if all(len(r) >= args.count for r in received):
                        all_done.set()

            return callback

        consumers = []
        for n in range(args.consumers):
            consumer = PushConsumer(args.group, message_model=MessageModel.BROADCASTING)
            consumer.set_namesrv_addr(args.namesrv)
            consumer.set_instance_name(f"broadcast-{n}")  # one client instance per consumer
            consumer.subscribe(args.topic, callback_of(n))
            consumer.start()
            consumers.append(consumer)
        try:
            for i in range(args.count):
                producer.send_sync(Message(args.topic, f"{run} message {i}"))
            with lock:  # the consumers print from their threads
                print(f"sent {args.count} messages")
            all_done.wait(args.timeout)
        finally:
            for consumer in consumers:
                consumer.shutdown()
    finally:
        producer.shutdown()

    for n, got in enumerate(received):
        print(f"consumer-{n} received {len(got)}/{args.count} messages")
    return 0 if all(len(r) == args.count for r in received) else 1


if __name__ == "__main__":
    sys.exit(main())
