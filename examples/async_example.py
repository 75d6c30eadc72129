"""The asyncio API: ``async with`` a producer, ``await producer.send(...)``, and
``async for msg in consumer``; then the lite pull consumer re-reads one queue from its start.

    python examples/async_example.py --namesrv 127.0.0.1:9876 --count 5

Prints each send result, each message the push consumer yields, and what the lite pull
consumer read back. Stops after ``--count`` messages or ``--timeout`` seconds.
"""

# ruff: noqa: T201

import argparse
import asyncio
import sys
import uuid

from pyrmq.client.aio import LitePullConsumer, Message, Producer, PushConsumer


async def main(args: argparse.Namespace) -> int:
    run = uuid.uuid4().hex[:8]  # tells this run's messages from earlier runs'

    async with Producer("example-async-producer", args.namesrv) as producer:
        for i in range(args.count):
            msg = Message(args.topic, f"{run} message {i}", tags="TagA", keys=[f"{run}-{i}"])
            result = await producer.send(msg)
            print(
                f"sent message {i}: {result.status.name} msg_id={result.msg_id} "
                f"queue={result.message_queue.queue_id} offset={result.queue_offset}"
            )
        first_queue = result.message_queue

    # A new group starting from the first offset reads the topic from its beginning; this
    # run's messages are the ones with its run id.
    consumer = PushConsumer(
        "example-async-consumer", args.namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    consumer.subscribe(args.topic, "TagA")
    received = 0
    async with consumer:
        try:
            async with asyncio.timeout(args.timeout):
                async for msg in consumer:  # consumed once the loop asks for the next one
                    if not msg.body.startswith(run.encode()):
                        continue
                    received += 1
                    print(
                        f"received {msg.body.decode()!r} tags={msg.tags} "
                        f"queue={msg.queue_id} offset={msg.queue_offset}"
                    )
                    if received == args.count:
                        break
        except TimeoutError:
            print(f"timed out after {args.timeout} s")

    # The lite pull consumer takes exact queues and positions: read the queue of the last
    # send from its start.
    async with LitePullConsumer("example-async-lite", args.namesrv, auto_commit=False) as lite:
        lite.assign([first_queue])
        await lite.seek_to_begin(first_queue)
        mine = []
        async with asyncio.timeout(args.timeout):
            while not any(m.body == f"{run} message {args.count - 1}".encode() for m in mine):
                mine += [m for m in await lite.poll(1.0) if m.body.startswith(run.encode())]
        print(f"lite pull read {len(mine)} of this run's messages from {first_queue}")

    print(f"received {received}/{args.count} messages")
    return 0 if received == args.count else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicAsync")
    parser.add_argument("--count", type=int, default=5, help="messages to send")
    parser.add_argument("--timeout", type=float, default=30.0, help="longest wait (s)")
    sys.exit(asyncio.run(main(parser.parse_args())))
