"""Concurrent consumption: pulled messages go to the listener in batches of
``consume_message_batch_max_size`` on a thread pool, or, for a coroutine listener, in the event
loop (started at once; a task only for one that waits, at most ``consume_thread_max`` of those
at a time); each finished batch leaves its ProcessQueue and moves the queue's offset.

A failed batch (RECONSUME_LATER, or the listener raised) is sent back to the broker, which
redelivers it through ``%RETRY%<group>``; messages whose send-back failed are consumed again
locally after 5 s. Broadcasting consumers do not send back: a failed message is dropped and
logged, as in RocketMQ.
"""

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import enum
import functools
import inspect
import logging
import resource
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from pyrmq.client.message import RETRY_PREFIX, MessageExt, MessageQueue, unreadable
from pyrmq.client.process_queue import ProcessQueue
from pyrmq.errors import PyrmqError
from pyrmq.eventloop import listener_task

if TYPE_CHECKING:
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["ConcurrentConsumeService", "ConsumeContext", "ConsumeStatus", "Listener"]

log = logging.getLogger(__name__)

LOCAL_RETRY_DELAY_S: Final = 5.0
DEAD_LETTER_LEVEL: Final = -1
"""The delay level of a send-back that goes straight to the group's DLQ."""
FANOUT_AFTER_S: Final = 0.002
FANOUT_BELOW_CPU: Final = 0.75
RETIRE_FROM_CPU: Final = 0.9
HAND_OVER_CALLS: Final = 32
HAND_OVER_AFTER_S: Final = 0.002
HAND_OVER_WAIT_S: Final = 0.001


def wake(waiter: "asyncio.Future[None] | None") -> None:
    """Resolves ``waiter`` unless it is None or done (a waiter its owner gave up on)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


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


def awaits(listener: object) -> bool:
    """Whether calling ``listener`` gives a coroutine: a coroutine function, or an object whose
    class has an async ``__call__``."""
    return inspect.iscoroutinefunction(listener) or inspect.iscoroutinefunction(
        getattr(type(listener), "__call__", None)  # noqa: B004 (the class's own, if any)
    )


def succeeded(status: object, group: str, told: set[str]) -> bool:
    """Whether a listener's answer commits its batch: None, or a status of success (0). An
    answer that is no status (a string, a bool) is a failure, logged once per type in
    ``told``: taken silently, it had the batch redelivered until its dead-letter queue.

    >>> succeeded(ConsumeStatus.CONSUME_SUCCESS, "G", set()), succeeded(None, "G", set())
    (True, True)
    >>> succeeded("CONSUME_SUCCESS", "G", set())
    False
    """
    if status is None:
        return True
    if isinstance(status, int) and not isinstance(status, bool):
        return status == 0
    kind = type(status).__name__
    if kind not in told:
        told.add(kind)
        log.warning(
            "a listener of %s returned %r, which is no consume status: its messages are "
            "consumed again later (return ConsumeStatus.CONSUME_SUCCESS or None)",
            group,
            status,
        )
    return False


async def in_daemon_thread(fn: Callable[..., None], *args: Any) -> None:
    """Runs ``fn(*args)`` on a daemon thread of its own and waits for it: a wait for stuck
    listener calls that a shutdown gives up (``await_termination_s``) then holds up no
    interpreter exit, as a thread of asyncio's default executor would."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if done.done():
            return
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            fn(*args)
        except BaseException as e:  # handed to the waiter
            error = e
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(settle, error)

    threading.Thread(target=run, name="pyrmq-consume-shutdown", daemon=True).start()
    await done


def _outcome(task: "asyncio.Task[Any]") -> tuple[Any, BaseException | None]:
    """A finished listener task's (status, error)."""
    if task.cancelled():
        return None, asyncio.CancelledError()
    error = task.exception()
    return (None if error else task.result()), error


def _user_cpu_s() -> float:
    """The process's user CPU time: Python runs there, under the interpreter lock, while
    system time (context switches, sockets) does not need it."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


class _ConsumeThreads:
    """Up to ``size`` threads running queued calls.

    A call wakes a thread only when no thread is awake; the one that slept last (its memory
    still in cache). Calls queued behind a busy thread wait for it, unless the oldest has
    waited ``FANOUT_AFTER_S`` while the process ran Python (user CPU) on less than
    ``FANOUT_BELOW_CPU`` of a core: then the busy threads are blocked (I/O, sleep, a lock)
    rather than computing, and a check in the event loop wakes one more thread. Threads that
    only share the interpreter lock cannot run at once, so adding them to quick calls just
    makes them hand it back and forth (with RocketMQ's one message per call, a third of the
    throughput); from ``RETIRE_FROM_CPU`` of a core, the check sends threads beyond one back
    to sleep after their call.

    Calls of a queue with a backlog (:meth:`submit_batched`) do not wake a thread one by one:
    while every thread sleeps they gather until ``HAND_OVER_CALLS`` wait, the oldest has
    waited ``HAND_OVER_AFTER_S`` or the loop has nothing else to do (:meth:`hand_over`). The
    loop then wakes a thread and waits, without the interpreter lock, until that thread has
    begun (at most ``HAND_OVER_WAIT_S``). A thread woken while the loop keeps running would
    wait for the lock, woken in vain each time the loop lets go of it between callbacks;
    handed over, it runs the gathered calls in one stretch while the loop waits once.
    """

    def __init__(
        self,
        size: int,
        name: str,
        loop: asyncio.AbstractEventLoop,
        cpu_clock: Callable[[], float] = _user_cpu_s,
    ) -> None:
        self._size = max(1, size)
        self._name = name
        self._loop = loop
        self._cpu_clock = cpu_clock
        self._lock = threading.Lock()
        self._calls: collections.deque[tuple[Callable[..., None], tuple[Any, ...], float]] = (
            collections.deque()
        )
        self._threads: list[threading.Thread] = []
        self._idle: list[threading.Lock] = []
        """The wake locks of sleeping threads, the latest to sleep last."""
        self._awake = 0
        """Threads woken (or started) and not asleep again: running calls or about to."""
        self._retire = 0
        """Threads asked to sleep after their current call although calls wait."""
        self._checking = False
        """A check of waiting calls is scheduled in the loop."""
        self._last_check = (0.0, 0.0)
        """(monotonic time, ``cpu_clock()``) at the last check or its scheduling."""
        self._loop_thread: int | None = None
        self._begun = threading.Event()
        """Set by the thread a hand-over wakes (or starts), once it runs."""
        self._begun_wanted = False
        """A hand-over waits for ``_begun``: an Event costs a thread about 8 µs of CPU per
        wake-up to set, so the others leave it alone."""
        self._hand_over_timer: asyncio.TimerHandle | None = None
        self._closed = False

    def submit(self, fn: Callable[..., None], *args: Any) -> None:
        """Queues ``fn(*args)`` (from any thread); raises RuntimeError after :meth:`shutdown`."""
        with self._lock:
            if self._closed:
                raise RuntimeError("consume threads are shut down")
            self._calls.append((fn, args, time.monotonic()))
            if not self._awake:
                self._wake_one()
                return
            if self._checking:
                return
            self._checking = True
        if threading.get_ident() == self._loop_thread:
            self._schedule_check()
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: only shutdown is left
            self._loop.call_soon_threadsafe(self._schedule_check)

    def submit_batched(self, fn: Callable[..., None], *args: Any) -> None:
        """:meth:`submit` from the loop, for a queue with a backlog: with every thread asleep,
        the call waits to be handed over with others."""
        with self._lock:
            if self._closed:
                raise RuntimeError("consume threads are shut down")
            gathered = not self._awake
            if gathered:
                self._calls.append((fn, args, time.monotonic()))
                if len(self._calls) < HAND_OVER_CALLS:
                    if self._hand_over_timer is None:
                        self._hand_over_timer = self._loop.call_later(
                            HAND_OVER_AFTER_S, self.hand_over
                        )
                    return
        if gathered:
            self.hand_over()
        else:
            self.submit(fn, *args)

    def hand_over(self) -> None:
        """In the loop: wakes a thread for the calls gathered, if every thread sleeps, and
        lets it begin."""
        if self._hand_over_timer is not None:
            self._hand_over_timer.cancel()
            self._hand_over_timer = None
        with self._lock:
            if self._awake or not self._calls or self._closed:
                return
            self._begun.clear()
            self._begun_wanted = True
            self._wake_one()
        self._begun.wait(HAND_OVER_WAIT_S)

    def take_calls(
        self, which: Callable[[Callable[..., None], tuple[Any, ...]], bool]
    ) -> list[tuple[Callable[..., None], tuple[Any, ...]]]:
        """Removes the queued calls ``which(fn, args)`` picks and returns them."""
        with self._lock:
            if not self._calls:
                return []
            taken = []
            kept: collections.deque[tuple[Callable[..., None], tuple[Any, ...], float]] = (
                collections.deque()
            )
            for call in self._calls:
                if which(call[0], call[1]):
                    taken.append((call[0], call[1]))
                else:
                    kept.append(call)
            if taken:
                self._calls.clear()
                self._calls.extend(kept)
            return taken

    def _schedule_check(self) -> None:
        self._loop_thread = threading.get_ident()
        self._last_check = (time.monotonic(), self._cpu_clock())
        self._loop.call_later(FANOUT_AFTER_S, self._check)

    def _check(self) -> None:
        """In the loop, every ``FANOUT_AFTER_S`` while calls wait."""
        now, cpu = time.monotonic(), self._cpu_clock()
        then, cpu_then = self._last_check
        load = (cpu - cpu_then) / max(now - then, 1e-6)
        self._last_check = (now, cpu)
        with self._lock:
            calls = self._calls
            if not calls or self._closed:
                self._checking = False
                return
            if load >= RETIRE_FROM_CPU:
                self._retire = max(0, self._awake - 1)
            elif load < FANOUT_BELOW_CPU and now - calls[0][2] >= FANOUT_AFTER_S:
                self._retire = 0
                self._wake_one()
        self._loop.call_later(FANOUT_AFTER_S, self._check)

    def _wake_one(self) -> None:
        """Wakes a sleeping thread, or starts one; holding ``_lock``. With every thread awake
        the calls wait for the first to finish."""
        if self._idle:
            self._awake += 1
            self._idle.pop().release()
        elif len(self._threads) < self._size:
            t = threading.Thread(
                target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
            )
            t.start()
            self._awake += 1
            self._threads.append(t)

    def _work(self) -> None:
        wake = threading.Lock()
        wake.acquire()
        lock, calls = self._lock, self._calls
        self._began()
        while True:
            with lock:
                if calls and not self._retire:
                    fn, args, _ = calls.popleft()
                elif self._closed:
                    self._awake -= 1
                    return
                else:
                    if self._retire:
                        self._retire -= 1
                    self._awake -= 1
                    self._idle.append(wake)
                    fn = None
            if fn is None:
                wake.acquire()
                self._began()
                continue
            try:
                fn(*args)
            except Exception:
                log.exception("consume call %r failed", fn)

    def _began(self) -> None:
        if self._begun_wanted:
            self._begun_wanted = False
            self._begun.set()

    def shutdown(self, leave: int | None = None) -> None:
        """Drops the calls not started, lets the running ones finish, joins every thread but
        the one whose ident is ``leave``."""
        with self._lock:
            self._closed = True
            self._calls.clear()
            while self._idle:
                self._awake += 1
                self._idle.pop().release()
            threads = [t for t in self._threads if t.ident != leave]
        for t in threads:
            t.join()


class _Run:
    """The listener calls of one pull still to start, shared by the threads that take them."""

    __slots__ = ("chunks", "helper_queued", "listener", "mq", "pq")

    def __init__(
        self,
        listener: SyncListener,
        chunks: list[list[MessageExt]],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        self.listener = listener
        self.chunks = collections.deque(chunks)
        self.pq = pq
        self.mq = mq
        self.helper_queued = False


class ConcurrentConsumeService:
    """Runs listeners for one push consumer."""

    def __init__(self, consumer: "PushConsumer", loop: asyncio.AbstractEventLoop) -> None:
        self._consumer = consumer
        self._loop = loop
        self._batch = max(1, consumer.consume_message_batch_max_size)
        self._pool = _ConsumeThreads(
            consumer.consume_thread_max, f"pyrmq-consume-{consumer.group}", loop
        )
        # Coroutine listeners: at most consume_thread_max waiting at once; more batches queue.
        self._async_max = max(1, consumer.consume_thread_max)
        self._async_running = 0
        self._async_queued: collections.deque[
            tuple[AsyncListener, list[MessageExt], ProcessQueue, MessageQueue]
        ] = collections.deque()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._timers: set[asyncio.TimerHandle] = set()
        self._closed = threading.Event()
        # The kinds of odd listener answers logged already (see succeeded).
        self._told: set[str] = set()
        self._last_kind: tuple[object, bool] = (None, False)
        """The last listener asked about, and whether it is a coroutine function: asked twice
        per pull, of the same listener but for consumers of several topics."""

    def _is_async(self, listener: Listener) -> bool:
        last, is_async = self._last_kind
        if last is not listener:
            is_async = awaits(listener)
            self._last_kind = (listener, is_async)
        return is_async

    def hand_over(self) -> None:
        """Hands the backlog calls gathered to a consume thread now; called in the loop when
        it has nothing else to do (a queue waits for room)."""
        self._pool.hand_over()

    def runs_where(self, topic: str) -> Literal["loop", "threads"] | None:
        """Where the listener of ``topic`` runs: in the loop (a coroutine function), on the
        consume threads (a function), or nowhere (no listener: ``async for``)."""
        listener = self._consumer.listener_for(topic)
        if listener is None:
            return None
        return "loop" if self._is_async(listener) else "threads"

    def submit(
        self,
        msgs: Sequence[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
        begun: "asyncio.Future[None] | None" = None,
        *,
        backlog: bool = False,
    ) -> None:
        """Hands pulled messages (already in ``pq``) to the listeners; called in the loop.

        ``begun`` is resolved once a consume thread has begun on them (at once if they do
        not go to the threads, or cannot). With ``backlog`` (more messages wait at the broker)
        they may wait to be handed to the threads together with other pulls'."""
        listener_for = self._consumer.listener_for
        if not mq.topic.startswith(RETRY_PREFIX):
            # One topic, so one listener: slice instead of routing each message.
            only = listener_for(mq.topic)
            step = self._batch
            chunks = [list(msgs[i : i + step]) for i in range(0, len(msgs), step)]
            if only is not None and not self._is_async(only):
                submit = self._pool.submit_batched if backlog else self._pool.submit
                try:
                    submit(self._consume_sync_run, only, chunks, pq, mq, begun)
                except RuntimeError:  # pool shut down: left uncommitted
                    wake(begun)
                return
            wake(begun)
            for part in chunks:
                self._run(only, part, pq, mq)
            return
        wake(begun)
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
        if self._is_async(listener):
            if self._async_running < self._async_max:
                self._consume_async(cast(AsyncListener, listener), chunk, pq, mq)
            else:
                self._async_queued.append((cast(AsyncListener, listener), chunk, pq, mq))
        else:
            with contextlib.suppress(RuntimeError):  # pool shut down: left uncommitted
                self._pool.submit(self._consume_sync, cast(SyncListener, listener), chunk, pq, mq)

    def hold_back(self, pq: ProcessQueue) -> None:
        """In the loop, while ``pq`` is handed over: takes its calls still queued (behind other
        queues' calls, or for a coroutine slot) to its gate at once, so the hand-over waits
        only for the calls that have begun."""
        taken = self._pool.take_calls(functools.partial(self._holdable, pq))
        for fn, args in taken:
            if fn == self._consume_sync_run:
                listener, chunks, _, mq, begun = args
                wake(begun)
            elif fn == self._consume_sync:
                listener, chunk, _, mq = args
                chunks = [chunk]
            else:  # a helper of a run
                run = args[0]
                listener, mq, chunks = run.listener, run.mq, []
                with contextlib.suppress(IndexError):
                    while True:
                        chunks.append(run.chunks.popleft())
            for chunk in chunks:
                if pq.gate(chunk, self._rerun(listener, chunk, pq, mq)):
                    self._run(listener, chunk, pq, mq)
        if self._async_queued:
            kept: collections.deque[
                tuple[AsyncListener, list[MessageExt], ProcessQueue, MessageQueue]
            ] = collections.deque()
            for item in self._async_queued:
                listener, chunk, owner, mq = item
                if owner is not pq or pq.gate(chunk, self._rerun(listener, chunk, pq, mq)):
                    kept.append(item)
            self._async_queued = kept

    def _holdable(self, pq: ProcessQueue, fn: Callable[..., None], args: tuple[Any, ...]) -> bool:
        """Whether a queued call is on ``pq``'s messages, all of them past every one finished
        (the gate would hold it back). One that must run stays where it is in the queue."""
        try:
            if fn == self._help:
                run = args[0]
                if run.pq is not pq:
                    return False
                chunk = run.chunks[0]
            elif args[2] is not pq:
                return False
            elif fn == self._consume_sync_run:
                chunk = args[1][0]
            elif fn == self._consume_sync:
                chunk = args[1]
            else:
                return False
        except IndexError:  # a run's last chunk taken meanwhile
            return False
        first: int = min(m.queue_offset for m in chunk)
        max_finished: int = pq.max_finished
        return first >= max_finished

    def _rerun(
        self, listener: Listener, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue
    ) -> Callable[[], None]:
        """Begins a call held back during a hand-over, from the loop."""
        return lambda: self._run(listener, msgs, pq, mq)

    def _consume_sync_run(
        self,
        listener: SyncListener,
        chunks: list[list[MessageExt]],
        pq: ProcessQueue,
        mq: MessageQueue,
        begun: "asyncio.Future[None] | None",
    ) -> None:
        """The listener calls of one pull, in order, on this thread and on at most one helper
        at a time: one hand-over to a consume thread for the lot when the calls are quick,
        instead of one per call (each waking a thread that then waits for the interpreter
        lock), while calls that block still spread over the free threads."""
        if begun is not None:
            self._loop.call_soon_threadsafe(wake, begun)
        if len(chunks) == 1:  # one call (a pull within the consume batch): no helper to arrange
            self._consume_sync(listener, chunks[0], pq, mq)
        else:
            self._drain(_Run(listener, chunks, pq, mq))

    def _help(self, run: _Run) -> None:
        run.helper_queued = False
        self._drain(run)

    def _drain(self, run: _Run) -> None:
        # Runs every call it takes, even once shutting down: a call of this pull left out
        # while a later one finished would hold back the queue's offset, and the consumer
        # taking the queue over would get the later one again.
        chunks = run.chunks
        while True:
            try:
                chunk = chunks.popleft()
            except IndexError:  # also when another thread took the last one
                return
            if chunks and not run.helper_queued:
                # In case this call blocks: a helper takes the next calls meanwhile, and
                # queues a helper of its own before it blocks in turn.
                run.helper_queued = True
                with contextlib.suppress(RuntimeError):  # shutting down: this thread goes on
                    self._pool.submit(self._help, run)
            self._consume_sync(run.listener, chunk, run.pq, run.mq)

    def _consume_sync(
        self,
        listener: SyncListener,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if pq.dropped:
            return
        if pq.handing_over and not pq.gate(msgs, self._rerun(listener, msgs, pq, mq)):
            return
        ctx = ConsumeContext(self._consumer.shown(mq))
        try:
            status = listener(msgs, ctx)
        except Exception:
            log.exception(
                "listener of %s failed on %d message(s) of %s", self._group, len(msgs), mq
            )
            status = ConsumeStatus.RECONSUME_LATER
        if succeeded(status, self._group, self._told):
            self._done(msgs, pq, mq)
            return
        if self._closed.is_set():
            return
        future = asyncio.run_coroutine_threadsafe(
            self._handle_failure(msgs, ctx, pq, mq), self._loop
        )
        with contextlib.suppress(concurrent.futures.CancelledError):
            future.result()

    def _consume_async(
        self,
        listener: AsyncListener,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        """Runs a coroutine listener in a task of its own, started at once where Python has
        eager tasks; one that waits holds a slot until it returns."""
        if pq.dropped or self._closed.is_set():
            return
        if pq.handing_over and not pq.gate(msgs, self._rerun(listener, msgs, pq, mq)):
            return
        ctx = ConsumeContext(self._consumer.shown(mq))
        try:
            coro = cast(Coroutine[Any, Any, ConsumeStatus | None], listener(msgs, ctx))
        except Exception as e:  # a listener that cannot be called with (msgs, ctx)
            self._async_done(None, e, msgs, ctx, pq, mq)
            return
        task = listener_task(self._loop, coro)
        if task.done():  # an eager task that did not wait
            self._async_done(*_outcome(task), msgs, ctx, pq, mq)
            return
        self._async_running += 1
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._async_waited(t, msgs, ctx, pq, mq))

    def _async_waited(
        self,
        task: "asyncio.Task[Any]",
        msgs: list[MessageExt],
        ctx: ConsumeContext,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        self._tasks.discard(task)
        self._async_running -= 1
        self._async_done(*_outcome(task), msgs, ctx, pq, mq)
        while self._async_queued and self._async_running < self._async_max:
            self._consume_async(*self._async_queued.popleft())

    def _async_done(
        self,
        status: ConsumeStatus | None,
        error: BaseException | None,
        msgs: list[MessageExt],
        ctx: ConsumeContext,
        pq: ProcessQueue,
        mq: MessageQueue,
    ) -> None:
        if error is not None:
            log.error(
                "listener of %s failed on %d message(s)", self._group, len(msgs), exc_info=error
            )
            status = ConsumeStatus.RECONSUME_LATER
        if succeeded(status, self._group, self._told):
            self._done(msgs, pq, mq)
        elif not self._closed.is_set():
            task = self._loop.create_task(self._handle_failure(msgs, ctx, pq, mq))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @property
    def _group(self) -> str:
        return self._consumer.group

    def _done(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self._consumer.finish(msgs, pq, mq)

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
            level = ctx.delay_level_when_next_consume
            if unreadable(m):
                log.error("%s cannot read the body of %s; it goes to the DLQ", self._group, m.id)
                level = DEAD_LETTER_LEVEL
            try:
                await consumer.send_back(m, level)
                sent.append(m)
            except PyrmqError as e:
                log.warning("send-back of %s failed, retrying locally: %s", m.id, e)
                # As RocketMQ's client: the listener sees this delivery counted (a broker
                # without a master cannot take send-backs for as long as it is away).
                m.count_local_retry()
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

    async def shutdown(self, leave: int | None = None) -> None:
        """Lets running listeners (threads and coroutines alike) finish and record their
        progress; batches not started yet are left uncommitted, to be delivered again. The
        call running on thread ``leave`` (a listener that shuts its consumer down) is not
        waited for: its messages are delivered again."""
        self._closed.set()
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        await in_daemon_thread(self._pool.shutdown, leave)
        # Coroutine batches not started are left uncommitted; those running finish.
        self._async_queued.clear()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
