"""RangePuller against a model of a queue that answers pulls as a broker does: at most a few
messages each, tag filters that skip ahead, offsets below the minimum gone. Whatever the
stride, depth, filter and range, the puller returns exactly the queue's matching messages of
the range, in order, once each, and reports the gone offsets."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrmq.client.api import PullResult, PullStatus
from pyrmq.client.message import MessageQueue
from pyrmq.errors import PyrmqError
from pyrmq.spark.pulls import RangePuller

MQ = MessageQueue("T", "b", 0)


@dataclasses.dataclass(frozen=True)
class Stored:
    queue_offset: int
    tag: int
    store_size: int = 200


@dataclasses.dataclass
class Queue:
    """Offsets ``[low, high)`` stored, the first ``low`` gone; the broker's limit per pull,
    and how many units a filtered pull scans at most."""

    tags: list[int]
    low: int
    cap: int
    scan: int = 64
    pulls: int = 0
    in_flight: int = 0
    beside: list[int] = dataclasses.field(default_factory=list)
    """How many other pulls were in flight as each began."""

    @property
    def high(self) -> int:
        return len(self.tags)

    def answer(self, offset: int, count: int, wanted: int | None) -> PullResult:
        self.pulls += 1

        def result(status: PullStatus, after: int, found: list[Stored] | None = None) -> PullResult:
            return PullResult(status, after, self.low, self.high, found or [])  # type: ignore[arg-type]

        if offset < self.low:
            return result(PullStatus.OFFSET_ILLEGAL, self.low)
        if offset > self.high:
            return result(PullStatus.OFFSET_ILLEGAL, self.high)
        if offset == self.high:
            return result(PullStatus.NO_NEW_MSG, offset)
        found: list[Stored] = []
        at = offset
        while at < self.high and len(found) < min(count, self.cap) and at - offset < self.scan:
            if wanted is None or self.tags[at] == wanted:
                found.append(Stored(at, self.tags[at]))
            at += 1
        if not found:
            return result(PullStatus.NO_MATCHED_MSG, at)
        return result(PullStatus.FOUND, at, found)


def read(
    queue: Queue, start: int, end: int, *, batch: int, depth: int, wanted: int | None
) -> tuple[list[int], list[str]]:
    lost: list[str] = []

    async def pull(offset: int, count: int) -> PullResult:
        queue.beside.append(queue.in_flight)
        queue.in_flight += 1
        await asyncio.sleep(0)  # answers arrive out of turn with the loop's other work
        queue.in_flight -= 1
        return queue.answer(offset, count, wanted)

    async def main() -> list[int]:
        puller = RangePuller(pull, MQ, start, end, batch=batch, depth=depth, lost=lost.append)
        out: list[int] = []
        while (got := await puller.next(7, 10_000)) is not None:
            assert got, "an empty batch instead of None"
            out += [m.queue_offset for m in got]
        assert not puller._flight
        return out

    return asyncio.run(main()), lost


@settings(max_examples=300, deadline=None)
@given(
    tags=st.lists(st.integers(0, 3), min_size=0, max_size=120),
    data=st.data(),
    cap=st.integers(1, 40),
    batch=st.integers(1, 64),
    depth=st.integers(1, 5),
    filtered=st.booleans(),
)
def test_a_range_is_read_whole_in_order_once(
    tags: list[int], data: st.DataObject, cap: int, batch: int, depth: int, filtered: bool
) -> None:
    low = data.draw(st.integers(0, len(tags)))
    start = data.draw(st.integers(0, len(tags)))
    end = data.draw(st.integers(start, len(tags)))
    wanted = 1 if filtered else None
    queue = Queue(tags, low, cap)
    got, lost = read(queue, start, end, batch=batch, depth=depth, wanted=wanted)
    kept = range(max(start, low), end)
    assert got == [i for i in kept if wanted is None or tags[i] == wanted]
    if start < min(low, end):
        assert lost == [f"offsets [{start}, {min(low, end)}) of {MQ} are gone"]
    else:
        assert lost == []


def test_pulls_run_ahead_and_learn_the_brokers_limit() -> None:
    queue = Queue([0] * 320, low=0, cap=32)
    got, _ = read(queue, 0, 320, batch=256, depth=4, wanted=None)
    assert got == list(range(320))
    # The first answer (32 of 256) teaches the stride: the offsets the two wide pulls left
    # out go in pulls 32 apart, three at a time beside the one still in flight.
    assert queue.pulls <= 10 + 2
    assert queue.beside.count(2) >= 2


def test_a_queue_that_ends_before_the_range_is_reported_gone() -> None:
    queue = Queue([0] * 10, low=0, cap=4)
    got, lost = read(queue, 0, 15, batch=4, depth=3, wanted=None)
    assert got == list(range(10))
    assert lost == [f"offsets [10, 15) of {MQ} are gone"]


def test_a_pull_that_does_not_move_is_an_error() -> None:
    async def stuck(offset: int, count: int) -> PullResult:
        return PullResult(PullStatus.NO_MATCHED_MSG, offset, 0, 10, [])

    async def main() -> None:
        puller = RangePuller(stuck, MQ, 0, 10, batch=4, depth=2, lost=print)
        try:
            await puller.next(10, 10_000)
        finally:
            await puller.close()

    with pytest.raises(PyrmqError, match=r"pull of T@b:0 at 0 did not move \(NO_MATCHED_MSG\)"):
        asyncio.run(main())
