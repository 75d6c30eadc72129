"""One queue range ``[start, end)`` read with several pulls in flight.

A pull answers at most the broker's per-pull limit (32 messages by default, fewer when they
are large), so a range is many pulls, and one at a time a task waits a round trip for each.
Ranges without a tag filter are therefore pulled ahead at consecutive offsets, the stride
learnt from the first answer the broker cut short. With a tag filter the broker skips ahead
past unmatched messages by itself, and pulls ahead would fetch the same matches again, so those
ranges go one pull at a time.
"""

import asyncio
import collections
from collections.abc import Awaitable, Callable

from pyrmq.client.api import PullResult, PullStatus
from pyrmq.client.message import MessageExt, MessageQueue
from pyrmq.errors import PyrmqError

__all__ = ["RangePuller"]

# RocketMQ cuts a pull at 64 KiB read from disk and 256 KiB from memory: an answer under this
# was cut by its count.
_COUNT_CUT_BYTES = 32 << 10
_GROW_AFTER = 16

Pull = Callable[[int, int], Awaitable[PullResult]]
"""Pulls up to ``count`` messages from ``offset``."""


class RangePuller:
    """The messages of ``[start, end)`` of ``mq`` in offset order, in batches.

    ``lost`` is told of offsets that are gone (retention, a deleted queue); it raises to stop
    the read or returns to skip them.
    """

    def __init__(
        self,
        pull: Pull,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        batch: int,
        depth: int,
        lost: Callable[[str], None],
    ) -> None:
        self._pull = pull
        self.mq = mq
        self.pos = start
        """Every offset below this has been returned or skipped."""
        self.end = end
        self.batch = batch
        self.stride = batch
        self._full = 0
        """Answers in a row that held all they were asked for."""
        self.depth = depth
        self._lost = lost
        self._issued = start
        self._flight: collections.deque[tuple[int, int, asyncio.Future[PullResult]]]
        self._flight = collections.deque()

    def _issue(self, offset: int, count: int, *, first: bool = False) -> None:
        entry = (offset, count, asyncio.ensure_future(self._pull(offset, count)))
        if first:
            self._flight.appendleft(entry)
        else:
            self._flight.append(entry)

    def _top_up(self) -> None:
        self._issued = max(self._issued, self.pos)
        while len(self._flight) < self.depth and self._issued < self.end:
            count = min(self.stride, self.end - self._issued)
            self._issue(self._issued, count)
            self._issued += count

    def _fill(self) -> None:
        """Pulls for the offsets a short answer left before the next pull in flight, as many
        as the depth allows (one at least), ahead of that pull."""
        gap_end = min(self._flight[0][0] if self._flight else self._issued, self.end)
        fills: list[tuple[int, int]] = []
        at = self.pos
        while at < gap_end and (not fills or len(self._flight) + len(fills) < self.depth):
            count = min(self.stride, gap_end - at)
            fills.append((at, count))
            at += count
        for offset, count in reversed(fills):
            self._issue(offset, count, first=True)

    async def next(self, rows: int, size: int) -> list[MessageExt] | None:
        """The next messages of the range, ``rows`` of them or ``size`` bytes of bodies
        (inflated), whichever comes first (fewer at its end); None once all of it is read.
        Pulls go on in the background only while the loop runs, so asking for many at a time
        keeps them moving."""
        out: list[MessageExt] = []
        taken = 0
        while self.pos < self.end and len(out) < rows and taken < size:
            self._top_up()
            offset, count, pulled = self._flight.popleft()
            result = await pulled
            if offset + count <= self.pos:
                continue  # a filtered answer skipped past this one
            messages = self._take(offset, count, result)
            if messages is None:
                break
            out += messages
            taken += sum(len(m.body) for m in messages)
            self._fill()
        if self.pos >= self.end:
            await self.close()
            if not out:
                return None
        return out

    def _take(self, offset: int, count: int, result: PullResult) -> list[MessageExt] | None:
        """What ``result`` adds to the range (None when the queue ends before the range);
        moves :attr:`pos` past it."""
        after = result.next_begin_offset
        status = result.status
        if status is PullStatus.OFFSET_ILLEGAL and after > offset:
            gone = max(offset, self.pos), min(after, self.end)
            if gone[0] < gone[1]:
                self._lost(f"offsets [{gone[0]}, {gone[1]}) of {self.mq} are gone")
            self.pos = max(self.pos, after)
            return []
        if status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
            # The queue ends before the range does: it was deleted, or emptied.
            self._lost(f"offsets [{self.pos}, {self.end}) of {self.mq} are gone")
            self.pos = self.end
            return None
        if after <= offset:
            raise PyrmqError(f"pull of {self.mq} at {offset} did not move ({status.name})")
        taken: list[MessageExt] = []
        if status is PullStatus.FOUND:
            got = result.messages
            self._learn(got, count, after == offset + len(got))
            taken = [m for m in got if self.pos <= m.queue_offset < self.end]
        self.pos = max(self.pos, after)
        return taken

    def _learn(self, got: list[MessageExt], count: int, contiguous: bool) -> None:
        """Fits the stride to the broker's limit on messages per pull. A short answer of few
        bytes was cut by that limit; one of many bytes by the limit on bytes, which says
        nothing about the next messages. After a run of full answers the stride grows back
        towards the batch, as a range may go from disk (8 messages a pull in RocketMQ) to
        memory (32)."""
        if len(got) < count and contiguous:
            self._full = 0
            if sum(m.store_size for m in got) < _COUNT_CUT_BYTES:
                self.stride = max(1, len(got))
        elif len(got) == count:
            self._full += 1
            if self._full >= _GROW_AFTER and self.stride < self.batch:
                self.stride = min(self.batch, self.stride * 2)
                self._full = 0

    async def close(self) -> None:
        """Drops the pulls still in flight."""
        pending = [pulled for _, _, pulled in self._flight]
        self._flight.clear()
        for pulled in pending:
            pulled.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
