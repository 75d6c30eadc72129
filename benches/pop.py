"""What a gRPC group's pop state costs the broker's loop per receive, ack and nack, by how many
messages the group holds in flight.

    python benches/pop.py            # 1,000 / 100,000 / 1,000,000 in flight
    python benches/pop.py --quick    # 1,000 and 10,000, for CI

Each row times :class:`pyrmq.proxy.pop.PopQueue` as the service drives it, on one queue:

- ``receive, none due``: a receive's scan for due messages and its next wake-up time, while all
  are invisible (a group working through what it holds);
- ``receive, 32 due``: the same when 32 have come due, delivered again;
- ``ack in order`` and ``ack at random``: an ack and the committed offset after it, over half
  of what is in flight;
- ``nack``: ChangeInvisibleDuration of a random message;
- ``save after 32 acks``: the state's file encoded again after 32 acks in order and 32 at random
  (:class:`pyrmq.proxy.pop_state.Encoder`, which encodes only the chunks that changed).

The last column is the cost at that size over the cost at the smallest: flat is the aim.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyrmq.proxy.pop import PopQueue
from pyrmq.proxy.pop_state import Encoder

BATCH = 32
HOLD_S = 30.0


def filled(n: int) -> PopQueue:
    """A queue with ``n`` messages in flight, invisible for 1 to 2 hold times, in a spread."""
    queue = PopQueue(0)
    rng = random.Random(n)
    for offset in range(n):
        queue.delivered(offset, offset, HOLD_S * (1 + rng.random()), "c", auto_renew=False)
    queue.moved_cursor(n)
    return queue


def receive_none_due(n: int, calls: int) -> float:
    queue, now, alive = filled(n), 0.0, {"c"}
    start = time.perf_counter()
    for _ in range(calls):
        list(itertools.islice(queue.due(now, alive), BATCH))
        queue.next_visible_at(now)
    return time.perf_counter() - start


def receive_due(n: int, calls: int) -> float:
    queue, alive = filled(n), {"c"}
    generation = itertools.count(n)
    # Each call's clock passes just enough messages' times for BATCH of them to be due.
    times = sorted(e.visible_at for e in queue.inflight.values())
    start = time.perf_counter()
    for call in range(calls):
        now = times[min(len(times) - 1, (call + 1) * BATCH - 1)]
        for entry in itertools.islice(queue.due(now, alive), BATCH):
            queue.redelivered(entry, next(generation), now + 10 * HOLD_S, "c", auto_renew=False)
        queue.next_visible_at(now)
    return time.perf_counter() - start


def ack(n: int, calls: int, *, shuffled: bool) -> float:
    queue = filled(n)
    offsets = list(range(n))
    if shuffled:
        random.Random(7).shuffle(offsets)
    # Half of them, so that acks in order reach far past the first.
    calls = n // 2
    start = time.perf_counter()
    for offset in offsets[:calls]:
        queue.finish(offset)
        _ = queue.committed
    return (time.perf_counter() - start) / calls


def nack(n: int, calls: int) -> float:
    queue, rng = filled(n), random.Random(3)
    start = time.perf_counter()
    for call in range(calls):
        queue.hidden(queue.inflight[rng.randrange(n)], n + call, 2 * HOLD_S + call)
    return time.perf_counter() - start


def save(n: int, calls: int) -> float:
    queue, rng = filled(n), random.Random(5)
    encoder, queues = Encoder(), {("group", "topic", 0): queue}
    encoder.encode(queues)
    first = 0
    start = time.perf_counter()
    for _ in range(calls):
        for offset in range(first, first + BATCH):
            queue.finish(offset)
        first += BATCH
        for _ in range(BATCH):
            queue.finish(rng.randrange(n))
        encoder.encode(queues)
    return time.perf_counter() - start


def per_call(run: Callable[[int, int], float]) -> Callable[[int, int], float]:
    return lambda n, calls: run(n, calls) / calls


ROWS: list[tuple[str, Callable[[int, int], float]]] = [
    # Seconds per call, given how many are in flight and how many calls to make at most.
    ("receive, none due", per_call(receive_none_due)),
    (f"receive, {BATCH} due", per_call(receive_due)),
    ("ack in order", lambda n, calls: ack(n, calls, shuffled=False)),
    ("ack at random", lambda n, calls: ack(n, calls, shuffled=True)),
    ("nack", per_call(nack)),
    (f"save after {BATCH} acks", per_call(save)),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 and 10,000 in flight")
    args = parser.parse_args(argv)
    sizes = (1_000, 10_000) if args.quick else (1_000, 100_000, 1_000_000)
    calls = 200 if args.quick else 1_000
    print("| row | in flight | µs per call | over the smallest |")
    print("| --- | ---: | ---: | ---: |")
    for name, run in ROWS:
        first = None
        for n in sizes:
            # Calls that never run out of messages (an ack takes one, a due receive BATCH).
            count = min(calls, n // BATCH // 2)
            us = run(n, count) * 1e6
            first = first or us
            print(f"| {name} | {n:,} | {us:.2f} | {us / first:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
