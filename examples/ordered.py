"""Ordered messages: every step of one order goes to the same queue, so a reader of that queue
sees the steps in the order they were sent, even with the orders interleaved.

    python examples/ordered.py --namesrv 127.0.0.1:9876 --orders 4

Sends the steps of ``--orders`` orders with ``send_orderly`` (the order id picks the queue),
then consumes them with an orderly push consumer, which gets each queue's messages in the
order they were stored, one at a time, and prints each order's steps as they arrived. Exits 1
if an order's steps came out of order, or did not all arrive within ``--timeout`` seconds.
"""

# ruff: noqa: T201

import argparse
import sys
import threading
import uuid

from pyrmq.client import ConsumeStatus, Message, Producer, PushConsumer, RecvMessage

STEPS = ("created", "paid", "shipped", "delivered")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namesrv", default="127.0.0.1:9876", help="name server host:port")
    parser.add_argument("--topic", default="TopicOrdered")
    parser.add_argument("--orders", type=int, default=4, help="number of orders")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait")
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
    all_arrived = threading.Event()

    def on_message(msg: RecvMessage) -> ConsumeStatus:
        # Never called for two messages of one queue at once, nor out of their order.
        run_of, _, order = msg.keys.decode().partition("-order-")
        if run_of == run:
            steps[int(order)].append(msg.tags.decode())
            queues[int(order)].add(msg.queue_id)
            if sum(map(len, steps.values())) == len(STEPS) * args.orders:
                all_arrived.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("example-ordered-consumer", orderly=True)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_consume_from_where("CONSUME_FROM_FIRST_OFFSET")
    consumer.subscribe(args.topic, on_message)
    consumer.start()
    try:
        arrived = all_arrived.wait(args.timeout)
    finally:
        consumer.shutdown()

    in_order = arrived
    for order in range(args.orders):
        print(f"order {order} (queue {sorted(queues[order])}): {' -> '.join(steps[order])}")
        in_order = in_order and tuple(steps[order]) == STEPS and len(queues[order]) == 1
    print("every order kept its order" if in_order else "ORDER BROKEN")
    return 0 if in_order else 1


if __name__ == "__main__":
    sys.exit(main())
