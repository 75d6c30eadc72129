"""ProcessQueue: the messages of one queue pulled but not yet consumed, by queue offset.

The pull loop adds batches; consume threads remove messages as they finish, in any order. The
offset a consumer may commit is the smallest offset still in flight, so a crash redelivers
only what was unfinished (and perhaps a little after it), never skips anything.

Pulled batches, not messages, are the entries of the sorted map: a batch of 32 costs one
insertion, and finishing a message is a flag found by subtraction (a batch of consecutive
offsets, as a pull without a tag filter brings) or by bisection. The commit offset is the first
unfinished message of the oldest batch.
"""

import asyncio
import bisect
import collections
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from sortedcontainers import SortedDict

from pyrmq._core import received_extent
from pyrmq.client.message import MessageExt

__all__ = ["LOCK_MAX_LIVE_MS", "OrderlyProcessQueue", "ProcessQueue"]

LOCK_MAX_LIVE_MS: Final = 30_000
"""How long an orderly consumer trusts its broker lock without a renewal: half the broker's
60 s, so that it stops consuming well before the broker would give the queue to another."""


class _Batch:
    __slots__ = ("dense", "done", "last", "left", "low", "msgs", "offsets", "size")

    def __init__(self, msgs: Sequence[MessageExt]) -> None:
        self.msgs = msgs = msgs if isinstance(msgs, list) else list(msgs)
        extent = received_extent(msgs)
        self.offsets: Sequence[int]
        self.dense = extent is not None and extent[2]
        """Consecutive offsets (a pull without a tag filter): a message's index is its
        offset minus the first."""
        if self.dense:
            assert extent is not None
            self.offsets = range(extent[0], extent[1] + 1)
        else:
            self.offsets = [m.queue_offset for m in msgs]
        self.last = self.offsets[-1]
        self.size = extent[3] if extent is not None else sum(m.store_size for m in msgs)
        """Store size of the whole batch."""
        self.done = bytearray(len(msgs))
        self.left = len(msgs)
        self.low = 0
        """Index of the first unfinished message."""


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class ProcessQueue:
    """In-flight messages of one queue, with counters for flow control.

    >>> class M:
    ...     def __init__(self, o): self.queue_offset, self.store_size = o, 100
    >>> pq = ProcessQueue()
    >>> pq.put([M(5), M(6), M(7)])
    >>> pq.put([M(9)])
    >>> pq.remove([M(6)])  # 5 is still in flight
    5
    >>> pq.remove([M(5), M(7)])
    9
    >>> (pq.msg_count, pq.msg_size, pq.span())
    (1, 100, 0)
    >>> pq.remove([M(9)])  # nothing left: commit past the last one seen
    10
    """

    __slots__ = (
        "_batches",
        "_count",
        "_first",
        "_held_back",
        "_hint",
        "_hint_key",
        "_lock",
        "dropped",
        "handing_over",
        "last_consume_ms",
        "last_pull_ms",
        "max_finished",
        "max_offset_seen",
        "msg_size",
        "room_waiter",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: SortedDict = SortedDict()
        self._count = 0
        self._hint: _Batch | None = None
        self._first: _Batch | None = None
        """The oldest batch, which holds the commit offset."""
        self._hint_key = 0
        self.msg_size = 0
        """Bytes of the records in flight."""
        self.max_offset_seen = -1
        self.max_finished = -1
        """The highest offset finished."""
        self.dropped = False
        self.handing_over = False
        """Set while the queue goes to another consumer: see :meth:`gate`."""
        self._held_back: list[tuple[int, int, Callable[[], None]]] = []
        self.last_pull_ms = self.last_consume_ms = _now_ms()
        self.room_waiter: asyncio.Future[None] | None = None
        """Set while the queue's pull loop waits out flow control; whoever finishes
        messages resolves it once the queue has room again."""

    def is_dropped(self) -> bool:
        """``dropped``, read through a call: it changes under awaits and in other threads."""
        return self.dropped

    @property
    def msg_count(self) -> int:
        return self._count

    def put(self, msgs: Sequence[MessageExt]) -> None:
        """Adds a pulled batch (ascending offsets); offsets already seen are skipped."""
        with self._lock:
            if msgs and msgs[0].queue_offset <= self.max_offset_seen:
                msgs = [m for m in msgs if m.queue_offset > self.max_offset_seen]
            if not msgs:
                return
            batch = _Batch(msgs)
            self._batches[batch.offsets[0]] = batch
            if self._first is None:  # batches come in offset order: only the first is first
                self._first = batch
            self._count += len(msgs)
            self.msg_size += batch.size
            self.max_offset_seen = batch.offsets[-1]

    def remove(self, msgs: Iterable[MessageExt]) -> int:
        """Marks messages finished; returns the offset to commit, or -1 if none is known."""
        with self._lock:
            if isinstance(msgs, list) and len(msgs) > 1 and self._remove_run(msgs):
                self.last_consume_ms = _now_ms()
                if msgs[-1].queue_offset > self.max_finished:
                    self.max_finished = msgs[-1].queue_offset
                return self._commit_offset()
            batches = self._batches
            batch, key = self._hint, self._hint_key
            for m in msgs:
                offset = m.queue_offset
                if offset > self.max_finished:
                    self.max_finished = offset
                # Messages finish roughly in pull order: try the batch of the last one first.
                if batch is None or not key <= offset <= batch.last or not batch.left:
                    at = batches.bisect_right(offset) - 1
                    if at < 0:
                        batch = None
                        continue
                    key, batch = batches.peekitem(at)
                    if offset > batch.last:
                        continue
                if batch.dense:
                    i = offset - key
                else:
                    i = bisect.bisect_left(batch.offsets, offset)
                    if batch.offsets[i] != offset:
                        continue
                if batch.done[i]:
                    continue
                batch.done[i] = 1
                batch.left -= 1
                self._count -= 1
                self.msg_size -= m.store_size
                if batch.left == 0:
                    self._drop(key, batch)
                    batch = None
                elif i == batch.low:
                    low = i + 1
                    while batch.done[low]:
                        low += 1
                    batch.low = low
            self._hint, self._hint_key = batch, key
            self.last_consume_ms = _now_ms()
            return self._commit_offset()

    def gate(self, msgs: Sequence[MessageExt], rerun: Callable[[], None]) -> bool:
        """Whether a listener call on ``msgs`` may begin. While the queue is handed over, a
        call past every finished message is held back instead (``rerun`` begins it later):
        left unfinished, it goes to the next owner, and nothing after it was consumed here.
        One that a finished message comes after must run, or the next owner, starting at
        the first unfinished message, would consume that one again."""
        if not self.handing_over:
            return True
        first = min(m.queue_offset for m in msgs)
        with self._lock:
            if first < self.max_finished:
                return True
            self._held_back.append((first, len(msgs), rerun))
            return False

    def hand_over_step(self) -> tuple[list[Callable[[], None]], int]:
        """The held-back calls a finished message has come to pass since they were held back
        (they must run after all), and how many messages are in flight but not held back:
        read together, so that no call finishing in between can hide a due one."""
        with self._lock:
            max_finished = self.max_finished
            due = [c for c in self._held_back if c[0] < max_finished]
            if due:
                self._held_back = [c for c in self._held_back if c[0] >= max_finished]
            held = sum(n for _, n, _ in self._held_back)
            return [rerun for _, _, rerun in due], self._count - held

    def _remove_run(self, msgs: list[MessageExt]) -> bool:
        """Removes ``msgs`` at once if they are a run of one batch, none finished yet (how
        the consume service hands them out); False, touching nothing, otherwise."""
        first = msgs[0].queue_offset
        batch = self._first
        if batch is None:
            return False
        key = batch.offsets[0]
        if first > batch.last:  # not the oldest batch (usually it is: calls finish in order)
            at = self._batches.bisect_right(first) - 1
            key, batch = self._batches.peekitem(at)
        elif first < key:
            return False
        i = first - key if batch.dense else bisect.bisect_left(batch.offsets, first)
        j = i + len(msgs)
        if batch.msgs[i:j] != msgs or batch.done.find(1, i, j) != -1:
            return False
        batch.done[i:j] = b"\x01" * (j - i)
        batch.left -= j - i
        self._count -= j - i
        whole = j - i == len(batch.msgs)
        self.msg_size -= batch.size if whole else sum(m.store_size for m in msgs)
        if batch.left == 0:
            self._drop(key, batch)
        elif i == batch.low:
            low = j
            while batch.done[low]:
                low += 1
            batch.low = low
        return True

    def _drop(self, key: int, batch: _Batch) -> None:
        """Forgets a batch whose messages have all finished."""
        del self._batches[key]
        if batch is self._first:
            self._first = self._batches.peekitem(0)[1] if self._batches else None

    def _commit_offset(self) -> int:
        first = self._first
        if first is not None:
            return first.offsets[first.low]
        return self.max_offset_seen + 1 if self.max_offset_seen >= 0 else -1

    def span(self) -> int:
        """From the oldest message in flight to the newest pulled: RocketMQ's span, or a
        little more when the newest have finished already (until the next pull brings newer
        ones, when RocketMQ's is the same again)."""
        with self._lock:
            first = self._first
            if first is None:
                return 0
            return self.max_offset_seen - first.offsets[first.low]

    def clear(self) -> None:
        """Forgets every message (the queue's offset was moved)."""
        with self._lock:
            self._batches.clear()
            self._first = None
            self._hint = None
            self._count = 0
            self.msg_size = 0
            self.max_offset_seen = -1

    def in_flight(self) -> list[MessageExt]:
        """The unfinished messages, oldest first."""
        with self._lock:
            return [
                m
                for b in self._batches.values()
                for m, done in zip(b.msgs, b.done, strict=True)
                if not done
            ]

    def snapshot(self) -> dict[str, int]:
        """Figures for GET_CONSUMER_RUNNING_INFO."""
        with self._lock:
            first = self._commit_offset() if self._batches else 0
            last = self._batches.peekitem(-1)[1].offsets[-1] if self._batches else 0
            return {
                "cachedMsgCount": self._count,
                "cachedMsgSizeInMiB": self.msg_size >> 20,
                "cachedMsgMinOffset": first,
                "cachedMsgMaxOffset": last,
                "lastPullTimestamp": self.last_pull_ms,
                "lastConsumeTimestamp": self.last_consume_ms,
                "droped": int(self.dropped),
            }


class OrderlyProcessQueue:
    """The messages of one queue an orderly consumer pulled, consumed strictly by offset.

    Messages wait in offset order; :meth:`take` hands out the oldest, and they stay taken
    until :meth:`commit` (consumed: the offset moves past them) or :meth:`give_back` (to be
    consumed again, first). Pulls only ever add offsets past every one seen, and given-back
    messages precede all that wait, so a deque keeps the order RocketMQ keeps in two sorted
    maps.

    ``consuming`` says a consume run owns the queue: :meth:`put` asks for one only when
    none does, and :meth:`take` gives the queue up when nothing is left, under one lock, so
    exactly one run is ever scheduled.

    >>> class M:
    ...     def __init__(self, o): self.queue_offset, self.store_size = o, 100
    >>> pq = OrderlyProcessQueue()
    >>> pq.put([M(5), M(6), M(7)])  # a run is needed
    True
    >>> [m.queue_offset for m in pq.take(2)]
    [5, 6]
    >>> pq.put([M(8)])  # the run is still going
    False
    >>> pq.commit()  # 5 and 6 consumed: commit 7
    7
    >>> again = pq.take(1)
    >>> pq.give_back(again)
    >>> [m.queue_offset for m in pq.take(5)]
    [7, 8]
    >>> (pq.commit(), pq.take(1), pq.consuming, pq.msg_count)
    (9, [], False, 0)
    """

    __slots__ = (
        "_lock",
        "_taken",
        "_waiting",
        "consume_lock",
        "consuming",
        "dropped",
        "dropping",
        "last_consume_ms",
        "last_lock_ms",
        "last_pull_ms",
        "locked",
        "max_offset_seen",
        "msg_count",
        "msg_size",
        "queue_lock",
        "room_waiter",
        "try_unlock_times",
    )

    def __init__(self, consume_lock: "threading.Lock | None" = None) -> None:
        self._lock = threading.Lock()
        self._waiting: collections.deque[MessageExt] = collections.deque()
        self._taken: list[MessageExt] = []
        self.msg_count = 0
        """Messages pulled and not consumed, taken ones included (as RocketMQ counts)."""
        self.msg_size = 0
        self.max_offset_seen = -1
        self.consuming = False
        self.dropped = False
        self.dropping = False
        """A rebalance waits for ``consume_lock`` to drop the queue: runs stop between calls."""
        self.locked = False
        """This client holds the queue's broker lock (clustering)."""
        self.last_lock_ms = 0
        """When the broker last granted the lock (``time.monotonic_ns()`` ms)."""
        self.try_unlock_times = 0
        self.queue_lock = threading.Lock()
        """Held by the consume run: one thread at a time consumes the queue."""
        self.consume_lock = threading.Lock() if consume_lock is None else consume_lock
        """Held around each listener call and its commit; a rebalance takes it before it
        drops the queue, so that the queue never moves mid-call (the next owner would
        consume the message again). One lock per queue, shared by the ProcessQueues the
        queue has in turn (see ``PushConsumer``)."""
        self.last_pull_ms = self.last_consume_ms = _now_ms()
        self.room_waiter: asyncio.Future[None] | None = None

    def is_dropped(self) -> bool:
        return self.dropped

    def holds_lock(self) -> bool:
        """Locked at the broker, and renewed within :data:`LOCK_MAX_LIVE_MS`."""
        return self.locked and _now_ms() - self.last_lock_ms <= LOCK_MAX_LIVE_MS

    def put(self, msgs: Sequence[MessageExt]) -> bool:
        """Adds a pulled batch (ascending offsets; offsets already seen are skipped); True if
        the queue now needs a consume run, which the caller must start."""
        with self._lock:
            fresh = [m for m in msgs if m.queue_offset > self.max_offset_seen]
            if fresh:
                self._waiting.extend(fresh)
                self.msg_count += len(fresh)
                self.msg_size += sum(m.store_size for m in fresh)
                self.max_offset_seen = fresh[-1].queue_offset
            if self.consuming or not self._waiting:
                return False
            self.consuming = True
            return True

    def take(self, n: int) -> list[MessageExt]:
        """Takes up to ``n`` of the oldest waiting messages. With none waiting, the run
        gives the queue up (``consuming`` false) and gets []."""
        with self._lock:
            waiting = self._waiting
            msgs = [waiting.popleft() for _ in range(min(n, len(waiting)))]
            self._taken.extend(msgs)
            if not msgs and not self._taken:
                self.consuming = False
            self.last_consume_ms = _now_ms()
            return msgs

    def give_back(self, msgs: Sequence[MessageExt]) -> None:
        """Returns taken messages to the front, to be taken again first."""
        with self._lock:
            back = set(map(id, msgs))
            self._taken = [m for m in self._taken if id(m) not in back]
            self._waiting.extendleft(reversed(msgs))

    def commit(self) -> int:
        """Marks every taken message consumed; returns the offset to commit (one past the
        last of them), or -1 if none was taken."""
        with self._lock:
            taken, self._taken = self._taken, []
            if not taken:
                return -1
            self.msg_count -= len(taken)
            self.msg_size -= sum(m.store_size for m in taken)
            return taken[-1].queue_offset + 1

    def span(self) -> int:
        with self._lock:
            first = self._taken[0] if self._taken else self._waiting[0] if self._waiting else None
            return 0 if first is None else self.max_offset_seen - first.queue_offset

    def snapshot(self) -> dict[str, int]:
        """Figures for GET_CONSUMER_RUNNING_INFO."""
        with self._lock:
            held = self._taken + list(self._waiting)
            return {
                "cachedMsgCount": self.msg_count,
                "cachedMsgSizeInMiB": self.msg_size >> 20,
                "cachedMsgMinOffset": min((m.queue_offset for m in held), default=0),
                "cachedMsgMaxOffset": max((m.queue_offset for m in held), default=0),
                "transactionMsgCount": len(self._taken),
                "locked": self.locked,
                "tryUnlockTimes": self.try_unlock_times,
                "lastLockTimestamp": self.last_lock_ms,
                "lastPullTimestamp": self.last_pull_ms,
                "lastConsumeTimestamp": self.last_consume_ms,
                "droped": int(self.dropped),
            }
