"""Concurrent consumption: pulled messages go to the listener in batches of
``consume_message_batch_max_size`` on a thread pool (or as tasks, for a coroutine listener);
each finished batch leaves its ProcessQueue and moves the queue's offset.

A failed batch (RECONSUME_LATER, or the listener raised) is sent back to the broker, which
redelivers it through ``%RETRY%<group>``; messages whose send-back failed are consumed again
locally after 5 s. Broadcasting consumers do not send back: a failed message is dropped and
logged, as in RocketMQ.
"""

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import enum
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, cast

from pyrmq.client.message import RETRY_PREFIX, MessageExt, MessageQueue
from pyrmq.client.process_queue import ProcessQueue
from pyrmq.errors import PyrmqError

if TYPE_CHECKING:
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["ConcurrentConsumeService", "ConsumeContext", "ConsumeStatus", "Listener"]

log = logging.getLogger(__name__)

LOCAL_RETRY_DELAY_S: Final = 5.0


class ConsumeStatus(enum.IntEnum):
    """What a listener returns: the batch is done, or should be delivered again later."""

    CONSUME_SUCCESS = 0
    RECONSUME_LATER = 1


@dataclasses.dataclass(slots=True)
class ConsumeContext:
    """Passed to the listener with each batch."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    """For RECONSUME_LATER: 0 lets the broker choose (3 + reconsume times), -1 sends the
    messages straight to the dead-letter queue, n > 0 uses delay level n."""


SyncListener = Callable[[list[MessageExt], ConsumeContext], ConsumeStatus | None]
AsyncListener = Callable[[list[MessageExt], ConsumeContext], Awaitable[ConsumeStatus | None]]
Listener = SyncListener | AsyncListener
"""``(messages, context) -> ConsumeStatus``; returning None counts as CONSUME_SUCCESS and
raising as RECONSUME_LATER."""


class ConcurrentConsumeService:
    """Runs listeners for one push consumer."""

    def __init__(self, consumer: "PushConsumer", loop: asyncio.AbstractEventLoop) -> None:
        self._consumer = consumer
        self._loop = loop
        self._batch = max(1, consumer.consume_message_batch_max_size)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            consumer.consume_thread_max, thread_name_prefix=f"pyrmq-consume-{consumer.group}"
        )
        self._async_slots = asyncio.Semaphore(consumer.consume_thread_max)
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = threading.Event()

    def submit(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Hands pulled messages (already in ``pq``) to the listeners; called in the loop."""
        listener_for = self._consumer.listener_for
        if not mq.topic.startswith(RETRY_PREFIX):
            # One topic, so one listener: slice instead of routing each message.
            only = listener_for(mq.topic)
            step = self._batch
            for i in range(0, len(msgs), step):
                self._run(only, list(msgs[i : i + step]), pq, mq)
            return
        chunk: list[MessageExt] = []
        listener: Listener | None = None
        for m in msgs:
            this = listener_for(m.topic)
            if chunk and (this is not listener or len(chunk) >= self._batch):
                self._run(listener, chunk, pq, mq)
                chunk = []
            listener = this
            chunk.append(m)
        if chunk:
            self._run(listener, chunk, pq, mq)

    def _run(
        self, listener: Listener | None, chunk: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        assert listener is not None, "messages without a listener go to the inbox"
        if inspect.iscoroutinefunction(listener):
            task = self._loop.create_task(self._consume_async(listener, chunk, pq, mq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            with contextlib.suppress(RuntimeError):  # pool shut down: left uncommitted
                self._pool.submit(self._consume_sync, cast(SyncListener, listener), chunk, pq, mq)

    def _consume_sync(
        self,
        listener: SyncListener,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if pq.dropped or self._closed.is_set():
            return
        ctx = ConsumeContext(mq)
        try:
            status = listener(msgs, ctx)
        except Exception:
            log.exception(
                "listener of %s failed on %d message(s) of %s", self._group, len(msgs), mq
            )
            status = ConsumeStatus.RECONSUME_LATER
        if status is None:
            status = ConsumeStatus.CONSUME_SUCCESS
        if status == ConsumeStatus.CONSUME_SUCCESS:
            self._done(msgs, pq, mq)
            return
        if self._closed.is_set():
            return
        future = asyncio.run_coroutine_threadsafe(
            self._handle_failure(msgs, ctx, pq, mq), self._loop
        )
        with contextlib.suppress(concurrent.futures.CancelledError):
            future.result()

    async def _consume_async(
        self,
        listener: AsyncListener,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        async with self._async_slots:
            if pq.dropped or self._closed.is_set():
                return
            ctx = ConsumeContext(mq)
            try:
                status = await listener(msgs, ctx)
            except Exception:
                log.exception("listener of %s failed on %d message(s)", self._group, len(msgs))
                status = ConsumeStatus.RECONSUME_LATER
            if status is None or status == ConsumeStatus.CONSUME_SUCCESS:
                self._done(msgs, pq, mq)
            else:
                await self._handle_failure(msgs, ctx, pq, mq)

    @property
    def _group(self) -> str:
        return self._consumer.group

    def _done(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        offset = pq.remove(msgs)
        if offset >= 0 and not pq.dropped:
            self._consumer.offset_store.update(mq, offset)

    async def _handle_failure(
        self, msgs: list[MessageExt], ctx: ConsumeContext, pq: ProcessQueue, mq: MessageQueue
    ) -> None:
        consumer = self._consumer
        if not consumer.clustering:
            log.warning(
                "broadcasting consumer %s dropped %d failed message(s) of %s",
                self._group,
                len(msgs),
                mq,
            )
            self._done(msgs, pq, mq)
            return
        failed = []
        sent = []
        for m in msgs:
            try:
                await consumer.send_back(m, ctx.delay_level_when_next_consume)
                sent.append(m)
            except PyrmqError as e:
                log.warning("send-back of %s failed, retrying locally: %s", m.id, e)
                failed.append(m)
        if sent:
            self._done(sent, pq, mq)
        if failed and not self._closed.is_set():
            handle = self._loop.call_later(LOCAL_RETRY_DELAY_S, self._retry_locally, failed, pq, mq)
            self._timers.add(handle)

    def _retry_locally(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self._timers = {
            t for t in self._timers if not t.cancelled() and t.when() > self._loop.time()
        }
        if not pq.dropped and not self._closed.is_set():
            self.submit(msgs, pq, mq)

    async def shutdown(self) -> None:
        """Lets running listeners (threads and coroutines alike) finish and record their
        progress; batches not started yet are left uncommitted, to be delivered again."""
        self._closed.set()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await asyncio.to_thread(self._pool.shutdown, wait=True, cancel_futures=True)
        # Coroutine batches waiting for a slot see the closed flag and return.
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
