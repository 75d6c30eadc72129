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

    @property
    def body(self) -> bytes:
        """Inflated: stored compressed to a tenth."""
        return bytes(self.store_size * 10)


@dataclasses.dataclass
class Queue:
    """Offsets ``[low, high)`` stored, the first ``low`` gone; the broker's limits per pull
    (messages, and bytes after the first), and how many units a filtered pull scans at
    most."""

    tags: list[int]
    low: int
    cap: int
    sizes: dict[int, int] = dataclasses.field(default_factory=dict)
    """Stored sizes other than 200 bytes, by offset."""
    byte_cap: int = 256 << 10
    cold_below: int = 0
    """Offsets below this are read from disk: 8 messages a pull at most, as in RocketMQ."""
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
        size = 0
        at = offset
        cap = min(self.cap, 8) if offset < self.cold_below else self.cap
        while at < self.high and len(found) < min(count, cap) and at - offset < self.scan:
            if wanted is None or self.tags[at] == wanted:
                stored = Stored(at, self.tags[at], self.sizes.get(at, 200))
                if found and size + stored.store_size > self.byte_cap:
                    break
                found.append(stored)
                size += stored.store_size
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
    big=st.sets(st.integers(0, 119), max_size=6),
)
def test_a_range_is_read_whole_in_order_once(
    tags: list[int],
    data: st.DataObject,
    cap: int,
    batch: int,
    depth: int,
    filtered: bool,
    big: set[int],
) -> None:
    low = data.draw(st.integers(0, len(tags)))
    start = data.draw(st.integers(0, len(tags)))
    end = data.draw(st.integers(start, len(tags)))
    wanted = 1 if filtered else None
    # Messages of 100 KiB: the broker cuts answers by bytes too.
    queue = Queue(tags, low, cap, sizes=dict.fromkeys(big, 100 << 10))
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


def test_an_answer_cut_by_bytes_does_not_shrink_the_stride() -> None:
    """A big message (cut by the broker's byte limit) says nothing of the small ones after it;
    a stride once cut by count grows back after a run of full answers."""
    queue = Queue([0] * 2_000, low=0, cap=32, sizes={0: 300 << 10, 1: 200 << 10})
    got, _ = read(queue, 0, 2_000, batch=32, depth=4, wanted=None)
    assert got == list(range(2_000))
    assert queue.pulls <= 2_000 // 32 + 8
    # The first 200 from disk, 8 a pull; the rest from memory, 32 a pull. Had the stride
    # stayed at 8, it would take 250 pulls.
    warming = Queue([0] * 2_000, low=0, cap=32, cold_below=200)
    got, _ = read(warming, 0, 2_000, batch=32, depth=4, wanted=None)
    assert got == list(range(2_000))
    assert warming.pulls < 130


def test_a_batch_stops_at_its_bytes_of_bodies() -> None:
    """Counted as bodies, not as stored (compressed) sizes: Spark's binary column holds at most
    2 GiB a batch."""
    queue = Queue([0] * 100, low=0, cap=32, sizes=dict.fromkeys(range(100), 10 << 10))

    async def main() -> list[int]:
        async def pull(offset: int, count: int) -> PullResult:
            return queue.answer(offset, count, None)

        puller = RangePuller(pull, MQ, 0, 100, batch=32, depth=2, lost=print)
        sizes = []
        while (got := await puller.next(2048, 1 << 20)) is not None:
            sizes.append(len(got))
        return sizes

    sizes = asyncio.run(main())
    assert sum(sizes) == 100
    # An answer holds 25 (256 KiB stored, 2.5 MiB of bodies): a batch stops after the one
    # that takes it past 1 MiB.
    assert max(sizes) <= 32


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
