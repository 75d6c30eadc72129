"""ProcessQueue against a model: a dict of the messages in flight; OrderlyProcessQueue against
the offsets pulled."""

import random
from collections.abc import Callable
from typing import Any

import pytest

from pyrmq import _core
from pyrmq.client import process_queue
from pyrmq.client.process_queue import LOCK_MAX_LIVE_MS, OrderlyProcessQueue, ProcessQueue

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


def test_a_queue_handed_over_holds_back_calls_past_every_finished_message() -> None:
    pq = ProcessQueue()
    msgs = [Msg(i, 10) for i in range(10)]
    pq.put(msgs)
    reruns: list[int] = []
    assert pq.gate(msgs[:2], lambda: reruns.append(0))  # not handed over: every call begins
    pq.remove(msgs[3:4])
    pq.handing_over = True
    assert pq.gate(msgs[2:3], lambda: reruns.append(2))  # 3 finished after it: it must run
    assert not pq.gate(msgs[5:7], lambda: reruns.append(5))
    assert not pq.gate(msgs[8:10], lambda: reruns.append(8))
    # In flight and not held back: 0, 1, 2, 4 and 7.
    assert pq.hand_over_step() == ([], 5)
    # 7 finishes after 5 and 6 were held back: they must run after all, and the step sees
    # the call due and the count without it together.
    pq.remove(msgs[7:8])
    due, pending = pq.hand_over_step()
    assert pending == 6
    for rerun in due:
        rerun()
    assert reruns == [5]
    assert pq.hand_over_step() == ([], 6)
    # The next owner starts at the first unfinished message; 8 and 9 go to it.
    pq.remove([msgs[i] for i in (0, 1, 2, 4, 5, 6)])
    assert pq.hand_over_step() == ([], 0)
    assert pq.in_flight() == msgs[8:]


# --- OrderlyProcessQueue ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_orderly_queue_hands_out_every_offset_in_order_once_despite_retries(seed: int) -> None:
    """Random pulls (some overlapping what was seen), takes, retries and commits: the
    offsets committed are exactly those pulled, in order; a retried batch comes back first;
    one run at a time is asked for; the counters match the model."""
    rng = random.Random(seed)
    pq = OrderlyProcessQueue()
    next_offset = 0
    pulled: list[int] = []
    consumed: list[int] = []
    committed = -1
    run = False
    for _ in range(300):
        action = rng.random()
        if action < 0.35:
            start = max(0, next_offset - rng.randint(0, 3))  # a pull may repeat a few
            batch = [Msg(o, 10) for o in range(start, next_offset + rng.randint(1, 5))]
            new = [m.queue_offset for m in batch if m.queue_offset >= next_offset]
            pulled += new
            next_offset = max(next_offset, batch[-1].queue_offset + 1)
            wanted = pq.put(batch)
            assert not (wanted and run), "a second run asked for"
            run = run or wanted
        elif run:
            taken = pq.take(rng.randint(1, 4))
            if not taken:
                assert not pq.consuming
                run = False
                continue
            offsets = [m.queue_offset for m in taken]
            assert offsets == pulled[len(consumed) : len(consumed) + len(offsets)]
            if rng.random() < 0.3:
                pq.give_back(taken)
            else:
                consumed += offsets
                committed = pq.commit()
                assert committed == offsets[-1] + 1
        assert pq.msg_count == len(pulled) - len(consumed)
        assert pq.msg_size == 10 * pq.msg_count
    assert consumed == pulled[: len(consumed)]
    assert committed in (-1, consumed[-1] + 1 if consumed else -1)


def test_orderly_queue_lock_counts_as_held_for_30_s_after_a_renewal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1_000_000]
    monkeypatch.setattr(process_queue, "_now_ms", lambda: now[0])
    pq = OrderlyProcessQueue()
    assert not pq.holds_lock()
    pq.locked, pq.last_lock_ms = True, now[0]
    now[0] += LOCK_MAX_LIVE_MS
    assert pq.holds_lock()
    now[0] += 1
    assert not pq.holds_lock()
    pq.last_lock_ms = now[0]
    assert pq.holds_lock()
    pq.locked = False
    assert not pq.holds_lock()


def test_orderly_queue_commit_without_a_take_is_minus_one_and_snapshot_names_the_lock() -> None:
    pq = OrderlyProcessQueue()
    assert pq.commit() == -1
    assert pq.put([Msg(3, 7), Msg(4, 7)])
    pq.locked = True
    pq.take(1)
    info = pq.snapshot()
    assert info["cachedMsgCount"] == 2
    assert (info["cachedMsgMinOffset"], info["cachedMsgMaxOffset"]) == (3, 4)
    assert info["transactionMsgCount"] == 1
    assert info["locked"] is True
    assert pq.span() == 1
