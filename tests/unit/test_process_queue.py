"""ProcessQueue against a model: a dict of the messages in flight."""

import random

import pytest

from pyrmq.client.process_queue import ProcessQueue


class Msg:
    __slots__ = ("queue_offset", "store_size")

    def __init__(self, offset: int, size: int) -> None:
        self.queue_offset = offset
        self.store_size = size


@pytest.mark.parametrize("seed", range(40))
def test_commit_offset_is_the_oldest_message_in_flight(seed: int) -> None:
    rng = random.Random(seed)
    pq = ProcessQueue()
    in_flight: dict[int, Msg] = {}
    batches: list[list[Msg]] = []
    offset = seen = -1
    for _ in range(300):
        roll = rng.random()
        if roll < 0.35:  # a pull: ascending offsets with gaps, as a tag filter leaves them
            batch = []
            for _ in range(rng.randint(1, 6)):
                offset += rng.randint(1, 3)
                batch.append(Msg(offset, rng.randint(1, 200)))
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
