"""ProcessQueue against a model: a dict of the messages in flight."""

import random
from collections.abc import Callable
from typing import Any

import pytest

from pyrmq import _core
from pyrmq.client.process_queue import ProcessQueue

POOL = 2_400
"""Queue offsets a model run can reach: 300 steps, at most 35% pulls of up to 6 messages
3 offsets apart."""


class Msg:
    __slots__ = ("queue_offset", "store_size")

    def __init__(self, offset: int, size: int) -> None:
        self.queue_offset = offset
        self.store_size = size


def received_pool(open_store: Callable[..., Any]) -> list[Any]:
    """Messages at queue offsets 0..POOL-1 as a pull decodes them, of assorted sizes."""
    store = open_store()
    rng = random.Random(0)
    for _ in range(POOL // 32):
        store.put_batch("TopicPQ", [b"x" * rng.randint(1, 200) for _ in range(32)])
    pool: list[Any] = []
    while len(pool) < POOL:
        got = store.get("TopicPQ", 0, len(pool), max_count=32)
        pool += _core.decode_received(got.buffer, "broker-a")
    return pool


@pytest.mark.parametrize("kind", ["plain", "received"])
@pytest.mark.parametrize("seed", range(40))
def test_commit_offset_is_the_oldest_message_in_flight(
    seed: int, kind: str, open_store: Callable[..., Any]
) -> None:
    # "received" messages are the client's own, whose batches the queue reads in one pass
    # (consecutive offsets become a range); "plain" ones go through their attributes.
    rng = random.Random(seed)
    pool = received_pool(open_store) if kind == "received" else None
    pq = ProcessQueue()
    in_flight: dict[int, Any] = {}
    batches: list[list[Any]] = []
    offset = seen = -1
    for _ in range(300):
        roll = rng.random()
        if roll < 0.35:  # a pull: ascending offsets, gapless or with the gaps of a tag filter
            batch = []
            gaps = rng.random() < 0.5
            for _ in range(rng.randint(1, 6)):
                offset += rng.randint(1, 3) if gaps else 1
                size = rng.randint(1, 200)
                batch.append(Msg(offset, size) if pool is None else pool[offset])
            pq.put(batch)
            batches.append(batch)
            in_flight.update((m.queue_offset, m) for m in batch)
            seen = offset
            continue
        if roll < 0.6 and batches:  # a consume batch: a run of one pull, maybe done already
            batch = rng.choice(batches)
            i = rng.randrange(len(batch))
            done = batch[i : rng.randint(i + 1, len(batch))]
        elif in_flight:  # single messages, any order
            done = [in_flight[o] for o in rng.sample(sorted(in_flight), min(3, len(in_flight)))]
        else:
            continue
        committed = pq.remove(done)
        for m in done:
            in_flight.pop(m.queue_offset, None)
        assert committed == (min(in_flight) if in_flight else seen + 1)
        assert pq.msg_count == len(in_flight)
        assert pq.msg_size == sum(m.store_size for m in in_flight.values())
        if in_flight:
            assert max(in_flight) - min(in_flight) <= pq.span() <= seen - min(in_flight)


def test_offsets_already_seen_are_not_added_twice() -> None:
    pq = ProcessQueue()
    pq.put([Msg(1, 10), Msg(2, 10)])
    pq.put([Msg(2, 10), Msg(3, 10)])

    assert (pq.msg_count, pq.msg_size) == (3, 30)
    assert [m.queue_offset for m in pq.in_flight()] == [1, 2, 3]
