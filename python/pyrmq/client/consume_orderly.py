"""Orderly consumption: each queue is consumed by one client, one batch at a time, strictly
in offset order.

A clustering consumer takes a queue only once its broker has locked the queue for it, renews
its locks every 20 s, and consumes a queue only while its lock is fresh
(:meth:`OrderlyProcessQueue.holds_lock`). One consume run per queue takes the oldest
messages, calls the listener with the queue's consume lock held, and commits them before it
takes more; a rebalance takes that lock before it gives the queue away, so the queue never
changes hands in the middle of a call.

A failed batch (``SUSPEND_CURRENT_QUEUE_A_MOMENT``, ``RECONSUME_LATER``, or the listener
raised) is not sent back: the queue stops for ``suspend_current_queue_time_ms`` and the same
batch is delivered again, first, with ``reconsume_times`` one higher. Everything behind it
waits. Once a batch has been retried ``max_reconsume_times`` times (by default without end,
as in RocketMQ's client), it goes to the group's dead-letter queue and the queue moves on.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import logging
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, cast

from pyrmq.client.consume_service import (
    DEAD_LETTER_LEVEL,
    ConsumeStatus,
    awaits,
    in_daemon_thread,
    succeeded,
)
from pyrmq.client.message import RETRY_PREFIX, MessageExt, MessageQueue, unreadable
from pyrmq.client.process_queue import OrderlyProcessQueue
from pyrmq.errors import PyrmqError

if TYPE_CHECKING:
    from pyrmq.client.push_consumer import PushConsumer

__all__ = [
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "OrderlyConsumeService",
    "OrderlyListener",
]

log = logging.getLogger(__name__)

MAX_TIME_CONSUME_CONTINUOUSLY_S: Final = 60.0
"""A run yields its thread after this long, so that one busy queue cannot starve others."""
SUSPEND_MIN_MS: Final = 10
SUSPEND_MAX_MS: Final = 30_000
RELOCK_AFTER_S: Final = 0.1
"""A run that finds its lock stale tries to lock the queue again after this pause ..."""
RELOCK_FAILED_RETRY_S: Final = 3.0
"""... and after this one when the broker refused."""
YIELD_RETRY_S: Final = 0.01
LOOP_SLICE_S: Final = 0.001
"""A run in the loop lets other queues' pulls and runs in after this long, if its listener
did not wait."""


class ConsumeOrderlyStatus(enum.IntEnum):
    """What an orderly listener returns. :class:`ConsumeStatus` works too:
    ``RECONSUME_LATER`` means ``SUSPEND_CURRENT_QUEUE_A_MOMENT``."""

    SUCCESS = 0
    SUSPEND_CURRENT_QUEUE_A_MOMENT = 1


@dataclasses.dataclass(slots=True)
class ConsumeOrderlyContext:
    """Passed to an orderly listener with each batch."""

    message_queue: MessageQueue
    suspend_current_queue_time_ms: int = -1
    """How long the queue pauses after this batch fails; -1 takes the consumer's
    ``suspend_current_queue_time_ms`` (1 s by default)."""


_Status = ConsumeOrderlyStatus | ConsumeStatus | None
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], _Status | Awaitable[_Status]]
"""``(messages, context) -> status``, a function or a coroutine function; returning None
counts as success and raising as a failure."""


def _unreadable_listener(msgs: list[MessageExt], ctx: object) -> None:
    """Stands for the listener of a message whose body does not inflate, which is not called."""


class OrderlyConsumeService:
    """Runs one push consumer's listeners queue by queue, in order.

    A queue whose topic has a coroutine listener is consumed by a task in the event loop;
    every other queue (a function listener, or the retry topic, whose messages may belong to
    several listeners) by a consume thread, which reaches a coroutine listener through the
    loop.
    """

    def __init__(self, consumer: "PushConsumer", loop: asyncio.AbstractEventLoop) -> None:
        self._consumer = consumer
        self._loop = loop
        # The kinds of odd listener answers logged already (see succeeded).
        self._told: set[str] = set()
        self._batch = max(1, consumer.consume_message_batch_max_size)
        # A plain pool: a run keeps its thread while its queue has messages, so runs of
        # other queues need threads of their own rather than a turn after it.
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max(1, consumer.consume_thread_max), f"pyrmq-orderly-{consumer.group}"
        )
        self._waiting_runs = 0
        """Runs submitted to the pool and not begun: a busy run then yields between batches."""
        self._waiting_lock = threading.Lock()
        self._running = threading.Condition()
        self._running_threads: set[int] = set()
        """Idents of the threads in a run, which shutdown waits for."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = threading.Event()
        self._loop_thread = threading.get_ident()  # made in the loop, by start()

    @property
    def retry_limit(self) -> int:
        """Retries before the dead-letter queue: -1 means without end, as RocketMQ's client
        reads ``maxReconsumeTimes`` for an orderly consumer."""
        limit = self._consumer.max_reconsume_times
        return sys.maxsize if limit == -1 else limit

    # --- scheduling (in the loop) --------------------------------------------------------

    def submit(self, pq: OrderlyProcessQueue, mq: MessageQueue, delay_s: float = 0.0) -> None:
        """Starts a consume run of ``mq``, now or after ``delay_s``."""
        if self._closed.is_set() or pq.dropped:
            return
        if delay_s > 0:
            now = self._loop.time()
            self._timers = {t for t in self._timers if not t.cancelled() and t.when() > now}
            self._timers.add(self._loop.call_later(delay_s, self.submit, pq, mq))
            return
        if self._in_loop(mq):
            task = self._loop.create_task(self._run_async(pq, mq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            with self._waiting_lock:
                self._waiting_runs += 1
            try:
                self._pool.submit(self._run_in_thread, pq, mq)
            except RuntimeError:  # shut down: left for the next owner
                with self._waiting_lock:
                    self._waiting_runs -= 1

    def _in_loop(self, mq: MessageQueue) -> bool:
        if mq.topic.startswith(RETRY_PREFIX):
            return False
        listener = self._consumer.listener_for(mq.topic)
        return listener is not None and awaits(listener)

    def _from_thread(self, pq: OrderlyProcessQueue, mq: MessageQueue, delay_s: float) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self._loop.call_soon_threadsafe(self.submit, pq, mq, delay_s)

    def _relock_later(self, pq: OrderlyProcessQueue, mq: MessageQueue) -> None:
        """A run found its lock stale: lock the queue again, then resume it."""
        if self._closed.is_set():
            return
        task = self._loop.create_task(self._relock(pq, mq))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relock(self, pq: OrderlyProcessQueue, mq: MessageQueue) -> None:
        await asyncio.sleep(RELOCK_AFTER_S)
        locked = await self._consumer.lock_queues([mq])
        self.submit(pq, mq, YIELD_RETRY_S if mq in locked else RELOCK_FAILED_RETRY_S)

    # --- one consume run -----------------------------------------------------------------

    def _next(
        self, pq: OrderlyProcessQueue, mq: MessageQueue, deadline: float, began: bool
    ) -> tuple[list[MessageExt], Any] | Callable[[], None] | None:
        """What a run does next (``began``: it has consumed a batch already): consume a
        batch with its listener; or stop, then call the returned function (in the loop) to
        resume later; or stop (None: the queue was dropped, or nothing waits)."""
        if pq.dropped or self._closed.is_set():
            return None
        if pq.dropping:  # a rebalance waits for the consume lock: let it have it
            return lambda: self.submit(pq, mq, RELOCK_AFTER_S)
        if self._consumer.clustering and not pq.holds_lock():
            return lambda: self._relock_later(pq, mq)
        if time.monotonic() >= deadline:
            return lambda: self.submit(pq, mq, YIELD_RETRY_S)
        if began and self._waiting_runs and not self._in_loop(mq):
            # Every thread is busy and another queue waits for one: take turns.
            return lambda: self.submit(pq, mq)
        msgs = pq.take(self._batch)
        if not msgs:
            return None
        listener_for = self._consumer.listener_for
        listener = listener_for(msgs[0].topic)
        # A retry queue holds several topics' messages: a batch goes to one listener.
        same = 1
        while same < len(msgs) and listener_for(msgs[same].topic) is listener:
            same += 1
        if same < len(msgs):
            pq.give_back(msgs[same:])
            del msgs[same:]
        # A message no listener can read goes to the DLQ alone, in its turn.
        bad = next((i for i, m in enumerate(msgs) if unreadable(m)), None)
        if bad is not None:
            keep = bad or 1
            pq.give_back(msgs[keep:])
            del msgs[keep:]
            if bad == 0:
                return msgs, _unreadable_listener
        return msgs, listener

    def _settle(
        self,
        msgs: list[MessageExt],
        succeeded: bool,
        ctx: ConsumeOrderlyContext,
        pq: OrderlyProcessQueue,
        mq: MessageQueue,
    ) -> bool | None:
        """Commits a consumed batch (True: the run goes on), or gives a failed one back and
        resumes the queue after the suspension (False: the run stops). None: the batch has
        used up its retries and must go to the dead-letter queue first."""
        if succeeded:
            self._consumer.moved(pq, mq, pq.commit())
            return True
        if min(m.reconsume_times for m in msgs) >= self.retry_limit or unreadable(msgs[0]):
            return None
        for m in msgs:
            m.count_local_retry()
        self._suspend(msgs, ctx, pq, mq)
        return False

    def _suspend(
        self,
        msgs: list[MessageExt],
        ctx: ConsumeOrderlyContext,
        pq: OrderlyProcessQueue,
        mq: MessageQueue,
    ) -> None:
        pq.give_back(msgs)
        ms = ctx.suspend_current_queue_time_ms
        if ms < 0:
            ms = self._consumer.suspend_current_queue_time_ms
        delay_s = min(max(ms, SUSPEND_MIN_MS), SUSPEND_MAX_MS) / 1000
        if threading.get_ident() == self._loop_thread:
            self.submit(pq, mq, delay_s)
        else:
            self._from_thread(pq, mq, delay_s)

    async def _dead_letter(
        self,
        msgs: list[MessageExt],
        ctx: ConsumeOrderlyContext,
        pq: OrderlyProcessQueue,
        mq: MessageQueue,
    ) -> bool:
        """Sends a batch out of retries to the dead-letter queue and commits it (True: the
        run goes on). A broadcasting consumer has none and drops the batch; one that cannot
        reach its broker suspends the queue and tries again."""
        consumer = self._consumer
        if consumer.clustering:
            try:
                for m in msgs:
                    if unreadable(m):
                        # The broker copies the stored bytes, which no listener could read.
                        await consumer.send_back(m, DEAD_LETTER_LEVEL)
                    else:
                        await consumer.send_to_dead_letters(m, min(self.retry_limit, 2**31 - 1))
            except PyrmqError as e:
                log.warning("%s cannot send a message of %s to its DLQ: %s", consumer.group, mq, e)
                self._suspend(msgs, ctx, pq, mq)
                return False
            log.warning(
                "%s sent %d message(s) of %s to its DLQ after %d retries%s",
                consumer.group,
                len(msgs),
                mq,
                msgs[0].reconsume_times,
                ": its body does not inflate" if unreadable(msgs[0]) else "",
            )
        else:
            log.warning(
                "broadcasting consumer %s dropped %d message(s) of %s after %d retries",
                consumer.group,
                len(msgs),
                mq,
                msgs[0].reconsume_times,
            )
        consumer.moved(pq, mq, pq.commit())
        return True

    def _run_in_thread(self, pq: OrderlyProcessQueue, mq: MessageQueue) -> None:
        me = threading.get_ident()
        with self._running:
            self._running_threads.add(me)
        try:
            self._run_sync(pq, mq)
        finally:
            with self._running:
                self._running_threads.discard(me)
                self._running.notify_all()

    def _run_sync(self, pq: OrderlyProcessQueue, mq: MessageQueue) -> None:
        """A consume run on a consume thread."""
        with self._waiting_lock:
            self._waiting_runs -= 1
        deadline = time.monotonic() + MAX_TIME_CONSUME_CONTINUOUSLY_S
        began = False
        with pq.queue_lock:
            while True:
                step = self._next(pq, mq, deadline, began)
                began = True
                if step is None:
                    return
                if callable(step):
                    with contextlib.suppress(RuntimeError):
                        self._loop.call_soon_threadsafe(step)
                    return
                msgs, listener = step
                ctx = ConsumeOrderlyContext(self._consumer.shown(mq))
                with pq.consume_lock:
                    if pq.dropped:
                        return
                    settled = self._settle(msgs, self._call_sync(listener, msgs, ctx), ctx, pq, mq)
                    if settled is None:
                        future = asyncio.run_coroutine_threadsafe(
                            self._dead_letter(msgs, ctx, pq, mq), self._loop
                        )
                        try:
                            settled = future.result()
                        except concurrent.futures.CancelledError:
                            return
                if not settled:
                    return

    def _call_sync(self, listener: Any, msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> bool:
        if listener is _unreadable_listener:
            return False
        if listener is None:
            self._orphans(msgs, ctx.message_queue)
            return True
        try:
            if awaits(listener):
                coro = cast(Coroutine[Any, Any, object], listener(msgs, ctx))
                status = asyncio.run_coroutine_threadsafe(coro, self._loop).result()
            else:
                status = listener(msgs, ctx)
        except Exception:
            self._log_failure(msgs, ctx.message_queue)
            return False
        return succeeded(status, self._consumer.group, self._told)

    async def _run_async(self, pq: OrderlyProcessQueue, mq: MessageQueue) -> None:
        """A consume run in the loop, for a queue whose listener is a coroutine function."""
        deadline = time.monotonic() + MAX_TIME_CONSUME_CONTINUOUSLY_S
        yielded = time.monotonic()
        while True:
            step = self._next(pq, mq, deadline, False)
            if step is None:
                return
            if callable(step):
                step()
                return
            msgs, listener = step
            ctx = ConsumeOrderlyContext(self._consumer.shown(mq))
            # Only a rebalance about to drop the queue holds it, briefly: then stop.
            if not pq.consume_lock.acquire(blocking=False):
                pq.give_back(msgs)
                self.submit(pq, mq, RELOCK_AFTER_S)
                return
            try:
                if pq.dropped:
                    return
                succeeded = await self._call_async(listener, msgs, ctx)
                settled = self._settle(msgs, succeeded, ctx, pq, mq)
                if settled is None:
                    settled = await self._dead_letter(msgs, ctx, pq, mq)
            finally:
                pq.consume_lock.release()
            if not settled:
                return
            if time.monotonic() - yielded >= LOOP_SLICE_S:
                await asyncio.sleep(0)
                yielded = time.monotonic()

    async def _call_async(
        self, listener: Any, msgs: list[MessageExt], ctx: ConsumeOrderlyContext
    ) -> bool:
        if listener is _unreadable_listener:
            return False
        if listener is None:
            self._orphans(msgs, ctx.message_queue)
            return True
        try:
            status = await listener(msgs, ctx)
        except Exception:
            self._log_failure(msgs, ctx.message_queue)
            return False
        return succeeded(status, self._consumer.group, self._told)

    def _log_failure(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        log.exception(
            "orderly listener of %s failed on %d message(s) of %s",
            self._consumer.group,
            len(msgs),
            mq,
        )

    def _orphans(self, msgs: list[MessageExt], mq: MessageQueue) -> None:
        # Retries of a topic this consumer no longer subscribes to, with nowhere to go.
        log.warning(
            "%s has no listener for %d message(s) of %s (topic %s); skipping them",
            self._consumer.group,
            len(msgs),
            mq,
            msgs[0].topic,
        )

    async def shutdown(self, leave: int | None = None) -> None:
        """Lets running listener calls finish and commit; later batches are left for the
        queue's next owner. The run on thread ``leave`` (a listener that shuts its consumer
        down) is not waited for: the messages it was given are delivered again."""
        self._closed.set()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        await in_daemon_thread(self._wait_for_runs, leave)
        await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _wait_for_runs(self, leave: int | None) -> None:
        with self._running:
            self._running.wait_for(lambda: self._running_threads <= {leave})
