"""Waiting in an event loop for SYNC_FLUSH appends to reach the disk.

A put with ``wait_for_flush=False`` returns as soon as its group is stored and visible, with the
group-commit flush requested, so an event loop can append without blocking. This waiter watches
the store's flushed fd with ``loop.add_reader``; when a flush lands it completes every waiter
whose group that flush covered. One fsync thus answers every append in flight, however many, and
no thread is blocked per append (RocketMQ's GroupCommitService completes its requests' futures
the same way). A waiter still not covered after ``timeout_s`` completes with ``False``: the
messages are stored and visible, but not known to be durable (RocketMQ's FLUSH_DISK_TIMEOUT).
"""

import asyncio
import collections
import logging
from collections.abc import Callable

from pyrmq.store.message_store import MessageStore

__all__ = ["FlushWaiter"]

log = logging.getLogger(__name__)


class FlushWaiter:
    """Completes callbacks when the store's flushed offset passes their appends.

    >>> import asyncio, tempfile
    >>> from pyrmq.config import StoreConfig
    >>> async def main(root: str) -> bool:
    ...     config = StoreConfig(flush_disk_type="SYNC_FLUSH", mapped_file_size_commit_log=1 << 20)
    ...     with MessageStore.open(root, config) as store:
    ...         waiter = FlushWaiter(store, timeout_s=5.0)
    ...         waiter.start()
    ...         sent = store.put("TopicTest", b"hello", wait_for_flush=False)
    ...         durable = await waiter.durable(sent.end_offset)
    ...         waiter.stop()
    ...         return durable and store.flushed_phy_offset >= sent.end_offset
    >>> with tempfile.TemporaryDirectory() as root:
    ...     asyncio.run(main(root))
    True
    """

    def __init__(self, store: MessageStore, *, timeout_s: float) -> None:
        self.store = store
        self.timeout_s = timeout_s
        # (end offset, deadline, callback) in the order of the appends, so deadlines ascend.
        # Ends ascend too for appends made in this loop; one made elsewhere that ends before an
        # earlier waiter's end completes with it, late but never early.
        self._waiting: collections.deque[tuple[int, float, Callable[[bool], None]]] = (
            collections.deque()
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.store.flushed_fd(), self._on_flushed)

    def stop(self) -> None:
        """Stops watching; waiters not yet covered complete with ``False``."""
        if self._loop is not None:
            self._loop.remove_reader(self.store.flushed_fd())
            self._loop = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        waiting, self._waiting = self._waiting, collections.deque()
        for _, _, callback in waiting:
            self._complete(callback, False)

    def when_durable(self, end_offset: int, callback: Callable[[bool], None]) -> None:
        """Calls ``callback(True)`` in the loop once the CommitLog is durable up to
        ``end_offset`` (a put's ``end_offset``), or ``callback(False)`` after the timeout.
        Waiters complete in the order they were registered."""
        loop = self._loop
        assert loop is not None, "the flush waiter is not started"
        # A flush that covered the append before it was registered may have signalled nothing.
        # With waiters queued, the flush that covers them is still to be read from the fd:
        # queue behind them, so that appends complete in their order.
        if not self._waiting and self.store.flushed_phy_offset >= end_offset:
            callback(True)
            return
        deadline = loop.time() + self.timeout_s
        self._waiting.append((end_offset, deadline, callback))
        if self._timer is None:
            self._timer = loop.call_at(deadline, self._expire)

    async def durable(self, end_offset: int) -> bool:
        """Waits until the CommitLog is durable up to ``end_offset``; False after the timeout."""
        assert self._loop is not None, "the flush waiter is not started"
        done: asyncio.Future[bool] = self._loop.create_future()

        def complete(durable: bool) -> None:
            if not done.done():
                done.set_result(durable)

        self.when_durable(end_offset, complete)
        return await done

    @property
    def pending(self) -> int:
        return len(self._waiting)

    def _on_flushed(self) -> None:
        flushed = self.store.drain_flushed()
        waiting = self._waiting
        while waiting and waiting[0][0] <= flushed:
            self._complete(waiting.popleft()[2], True)

    def _expire(self) -> None:
        self._timer = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        waiting = self._waiting
        late = 0
        while waiting and waiting[0][1] <= now:
            self._complete(waiting.popleft()[2], False)
            late += 1
        if late:
            log.warning(
                "%d appends not flushed within %.1f s (flushed offset %d)",
                late,
                self.timeout_s,
                self.store.flushed_phy_offset,
            )
        if waiting:
            self._timer = loop.call_at(waiting[0][1], self._expire)

    @staticmethod
    def _complete(callback: Callable[[bool], None], durable: bool) -> None:
        try:
            callback(durable)
        except Exception:
            log.exception("flush waiter callback failed")
