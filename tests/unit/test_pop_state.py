"""The pop state's file, encoded in slices while the loop goes on changing the queues."""

import asyncio
import contextlib
import json
import random

from pyrmq.proxy import pop_state
from pyrmq.proxy.pop import PopQueue

KEY = ("group", "topic", 0)


def test_a_state_encoded_while_messages_come_and_go_skips_none_that_stay_in_flight() -> None:
    queue = PopQueue(0)
    for offset in range(20_000):
        queue.delivered(offset, offset, 30.0, "c", auto_renew=False)
    queue.moved_cursor(20_000)
    rng = random.Random(11)
    ever: set[int] = set(queue.inflight)

    async def churn(stop: asyncio.Event) -> int:
        turns = 0
        while not stop.is_set() and turns < 10_000:
            # A receive of new messages, acks at random, a nack.
            for _ in range(8):
                offset = queue.cursor
                queue.delivered(offset, offset, 40.0, "c", auto_renew=False)
                queue.moved_cursor(offset + 1)
                ever.add(offset)
            for _ in range(8):
                queue.finish(rng.randrange(queue.cursor))
            held = queue.inflight.get(rng.randrange(queue.cursor))
            if held is not None:
                queue.hidden(held, held.generation + 1, 50.0)
            turns += 1
            await asyncio.sleep(0)
        return turns

    async def main() -> tuple[bytes, int]:
        stop = asyncio.Event()
        churner = asyncio.create_task(churn(stop))
        await asyncio.sleep(0)
        data = await pop_state.Encoder().encode_in_slices({KEY: queue}, entries_per_slice=256)
        stop.set()
        return data, await churner

    data, turns = asyncio.run(main())
    assert turns > 10  # the queue changed while it was encoded
    restored = pop_state.decode(json.loads(data), renew_grace_s=30.0)[KEY]
    # Below the restored cursor, every message still in flight is in the file: none skipped.
    still = {o for o in queue.inflight if o < restored.cursor}
    assert still <= set(restored.inflight)
    assert set(restored.inflight) <= ever
    assert all(o < restored.cursor for o in restored.inflight)
    # A restored queue reads on from its cursor and commits from the oldest it holds.
    assert restored.committed == min(restored.inflight, default=restored.cursor)


def test_an_encoder_gives_the_whole_state_when_nothing_changed_since() -> None:
    queue = PopQueue(0)
    for offset in range(5_000):
        queue.delivered(offset, offset, 30.0, "c", auto_renew=offset % 2 == 0)
    queue.moved_cursor(5_000)
    encoder = pop_state.Encoder()
    first = encoder.encode({KEY: queue})
    assert encoder.encode({KEY: queue}) == first
    queue.finish(4_321)
    again = json.loads(encoder.encode({KEY: queue}))
    assert [e[0] for e in again["queues"][0]["inflight"]] == [o for o in range(5_000) if o != 4_321]
    # A queue gone from the groups is gone from the file.
    assert json.loads(encoder.encode({}))["queues"] == []


def test_a_save_after_an_encode_cut_short_is_whole() -> None:
    """The broker's stop cancels its periodic write mid-way, then saves: the changes the
    cancelled write took from the queues must not be lost to the save."""
    queue = PopQueue(0)
    queues = {KEY: queue}
    encoder = pop_state.Encoder()
    for offset in range(1_000):
        queue.delivered(offset, offset, 30.0, "c", auto_renew=False)
    queue.moved_cursor(1_000)
    encoder.encode(queues)
    for offset in range(1_000, 21_000):
        queue.delivered(offset, offset, 30.0, "c", auto_renew=False)
    queue.moved_cursor(21_000)

    async def cut_short() -> None:
        task = asyncio.create_task(encoder.encode_in_slices(queues, entries_per_slice=1024))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not task.done()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(cut_short())
    restored = pop_state.decode(json.loads(encoder.encode(queues)), renew_grace_s=30.0)[KEY]
    assert set(restored.inflight) == set(queue.inflight)


def test_the_plain_encode_leaves_the_queues_changes_to_the_broker_s_encoder() -> None:
    queue = PopQueue(0)
    encoder = pop_state.Encoder()
    queue.delivered(0, 0, 30.0, "c", auto_renew=False)
    encoder.encode({KEY: queue})
    queue.finish(0)
    queue.delivered(1, 1, 30.0, "c", auto_renew=False)
    queue.moved_cursor(2)
    pop_state.encode({KEY: queue})
    kept = json.loads(encoder.encode({KEY: queue}))
    assert [e[0] for e in kept["queues"][0]["inflight"]] == [1]
