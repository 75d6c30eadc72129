"""Ordered messages: every step of one order goes to the same queue, so a reader of that queue
sees the steps in the order they were sent, even with the orders interleaved.

    python examples/ordered.py --namesrv 127.0.0.1:9876 --orders 4

Sends the steps of ``--orders`` orders with ``send_orderly`` (the order id picks the queue),
then reads the topic back with the pull consumer and prints each order's steps as stored.
Exits 1 if an order's steps came back out of order.
"""

# ruff: noqa: T201

import argparse
import sys
import uuid

from pyrmq.client import Message, Producer, PullConsumer

STEPS = ("created", "paid", "shipped", "delivered")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicOrdered")
    parser.add_argument("--orders", type=int, default=4, help="number of orders")
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]  # tells this run's messages from earlier runs'

    producer = Producer("example-ordered-producer")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    try:
        for step in STEPS:  # the orders' steps interleave: order 0 created, order 1 created, ...
            for order in range(args.orders):
                msg = Message(args.topic)
                msg.set_keys(f"{run}-order-{order}")
                msg.set_tags(step)
                msg.set_body(f"order {order} {step}")
                ret = producer.send_orderly(msg, order)  # queue = order % number of queues
                print(f"sent order {order} {step}: queue offset {ret.offset}")
    finally:
        producer.shutdown()

    steps: dict[int, list[str]] = {order: [] for order in range(args.orders)}
    queues: dict[int, set[int]] = {order: set() for order in range(args.orders)}
    consumer = PullConsumer("example-ordered-reader")
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    try:
        for msg in consumer.pull(args.topic):  # queue by queue, each in stored order
            run_of, _, order = msg.keys.decode().partition("-order-")
            if run_of == run:
                steps[int(order)].append(msg.tags.decode())
                queues[int(order)].add(msg.queue_id)
    finally:
        consumer.shutdown()

    in_order = True
    for order in range(args.orders):
        print(f"order {order} (queue {sorted(queues[order])}): {' -> '.join(steps[order])}")
        in_order = in_order and tuple(steps[order]) == STEPS and len(queues[order]) == 1
    print("every order kept its order" if in_order else "ORDER BROKEN")
    return 0 if in_order else 1


if __name__ == "__main__":
    sys.exit(main())
