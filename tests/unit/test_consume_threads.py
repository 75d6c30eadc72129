"""The push consumer's consume threads: started only when no thread is awake, never more than
the limit, the warmest woken first, quick calls kept to one thread, blocked calls fanned out
while the process idles and surplus threads sent back to sleep while it computes, backlog calls
handed over together, surviving a failing call, and shutting down without running what was not
started."""

import asyncio
import threading
import time
import types
from collections.abc import Callable, Iterator

import pytest

from pyrmq.client.consume_service import (
    FANOUT_AFTER_S,
    HAND_OVER_AFTER_S,
    HAND_OVER_CALLS,
    ConcurrentConsumeService,
    _ConsumeThreads,
)
from pyrmq.client.process_queue import ProcessQueue


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop running in a thread of its own, as the consumer's is."""
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    runner.join(10)
    loop.close()


class FakeCpu:
    """A process CPU clock that counts a whole core (busy) or stands still (idle)."""

    def __init__(self, busy: bool) -> None:
        self.busy = busy
        self._at = time.monotonic()
        self._cpu = 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if self.busy:
            self._cpu += now - self._at
        self._at = now
        return self._cpu


def wait_until(cond: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.001)


def wait_for(cond: "threading.Event", what: str) -> None:
    assert cond.wait(10), what


def in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    """Runs ``fn`` in one callback of ``loop`` and waits for it."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        finally:
            done.set()

    loop.call_soon_threadsafe(run)
    wait_for(done, "the loop callback")


def call_and_settle(pool: _ConsumeThreads, threads: int, fn: Callable[[], object]) -> None:
    """Runs ``fn`` on the pool, then waits until its ``threads`` threads all sleep again."""
    done = threading.Event()

    def call() -> None:
        fn()
        done.set()

    pool.submit(call)
    wait_for(done, "the call")
    deadline = time.monotonic() + 10
    while len(pool._idle) < threads and time.monotonic() < deadline:
        time.sleep(0.001)


def test_calls_one_after_another_keep_to_one_thread(loop: asyncio.AbstractEventLoop) -> None:
    pool = _ConsumeThreads(20, "t", loop)
    try:
        for _ in range(50):
            call_and_settle(pool, 1, lambda: None)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown()


def test_the_thread_that_slept_last_takes_the_next_call(loop: asyncio.AbstractEventLoop) -> None:
    pool = _ConsumeThreads(3, "t", loop)
    barrier = threading.Barrier(3, timeout=10)
    finished: list[str] = []
    order_lock = threading.Lock()

    def meet(pause_s: float) -> None:
        barrier.wait()
        time.sleep(pause_s)
        with order_lock:
            finished.append(threading.current_thread().name)

    try:
        # Three calls that can only finish together start all three threads; they then go
        # back to sleep one after another.
        for pause in (0.0, 0.05, 0.1):
            pool.submit(meet, pause)
        deadline = time.monotonic() + 10
        while len(pool._idle) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(finished) == 3
        names: list[str] = []
        for _ in range(20):
            call_and_settle(pool, 3, lambda: names.append(threading.current_thread().name))
        assert set(names) == {finished[-1]}
    finally:
        pool.shutdown()


def test_a_burst_of_blocking_calls_runs_on_as_many_threads_at_once(
    loop: asyncio.AbstractEventLoop,
) -> None:
    pool = _ConsumeThreads(8, "t", loop)
    barrier = threading.Barrier(8, timeout=10)
    met: list[int] = []

    def meet(i: int) -> None:
        barrier.wait()  # breaks (and fails the test) unless all 8 run at the same time
        met.append(i)

    try:
        for i in range(8):
            pool.submit(meet, i)
        deadline = time.monotonic() + 15
        while len(met) < 8 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sorted(met) == list(range(8))
        assert not barrier.broken
    finally:
        pool.shutdown()


def test_blocked_calls_grow_the_threads_up_to_the_limit_and_the_rest_wait(
    loop: asyncio.AbstractEventLoop,
) -> None:
    pool = _ConsumeThreads(3, "t", loop)
    release = threading.Event()
    started: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        with lock:
            started.append(i)
        release.wait(10)

    try:
        for i in range(5):
            pool.submit(call, i)
        deadline = time.monotonic() + 10
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        assert sorted(started) == [0, 1, 2]  # the other two wait for a thread
        assert len(pool._threads) == 3
        release.set()
        while len(started) < 5 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sorted(started) == [0, 1, 2, 3, 4]
        assert len(pool._threads) == 3
    finally:
        release.set()
        pool.shutdown()


def test_a_failing_call_is_logged_and_its_thread_goes_on(
    loop: asyncio.AbstractEventLoop, caplog: pytest.LogCaptureFixture
) -> None:
    pool = _ConsumeThreads(1, "t", loop)
    done = threading.Event()

    def boom() -> None:
        raise RuntimeError("on purpose")

    try:
        pool.submit(boom)
        pool.submit(done.set)
        wait_for(done, "the call after the failing one")
    finally:
        pool.shutdown()
    assert "on purpose" in caplog.text


def test_shutdown_finishes_running_calls_drops_queued_ones_and_refuses_new_ones(
    loop: asyncio.AbstractEventLoop,
) -> None:
    pool = _ConsumeThreads(1, "t", loop)
    running = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def slow() -> None:
        running.set()
        release.wait(10)
        ran.append("slow")

    pool.submit(slow)
    wait_for(running, "the slow call")
    pool.submit(ran.append, "queued")
    stopper = threading.Thread(target=pool.shutdown)
    stopper.start()
    time.sleep(0.05)
    assert stopper.is_alive()  # waits for the running call
    release.set()
    stopper.join(10)
    assert not stopper.is_alive()
    assert ran == ["slow"]
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError):
        pool.submit(ran.append, "late")


def test_calls_queued_behind_a_quick_one_keep_to_its_thread(
    loop: asyncio.AbstractEventLoop,
) -> None:
    pool = _ConsumeThreads(20, "t", loop, cpu_clock=FakeCpu(busy=False))
    names: list[str] = []
    waits: list[float] = []

    def call(submitted: float) -> None:
        waits.append(time.monotonic() - submitted)
        names.append(threading.current_thread().name)

    try:
        for _ in range(20):
            threads, waits[:] = len(pool._threads), []
            for _ in range(10):  # submitted while the first of them runs
                pool.submit(call, time.monotonic())
            wait_until(lambda: len(pool._idle) == len(pool._threads), "the calls")
            # A loaded machine may stall a quick call past the fan-out delay: only then may
            # another thread have been woken for it.
            assert len(pool._threads) == max(threads, 1) or max(waits) >= FANOUT_AFTER_S
        assert len(names) == 200
        assert len(set(names)) == len(pool._threads)
    finally:
        pool.shutdown()


def test_while_the_process_computes_a_blocked_call_gets_no_helper(
    loop: asyncio.AbstractEventLoop,
) -> None:
    cpu = FakeCpu(busy=True)
    pool = _ConsumeThreads(4, "t", loop, cpu_clock=cpu)
    release = threading.Event()
    ran: list[str] = []
    try:
        pool.submit(release.wait, 10)
        pool.submit(ran.append, "queued")
        time.sleep(50 * FANOUT_AFTER_S)
        assert ran == []  # computing on a core: another thread could not run meanwhile
        assert len(pool._threads) == 1
        cpu.busy = False
        wait_until(lambda: ran == ["queued"], "the queued call once the process idles")
        # A helper ran it (on a loaded machine a later check may wake one more before it
        # has begun).
        assert len(pool._threads) >= 2
    finally:
        release.set()
        pool.shutdown()


def test_while_the_process_computes_surplus_threads_go_back_to_sleep(
    loop: asyncio.AbstractEventLoop,
) -> None:
    cpu = FakeCpu(busy=False)
    pool = _ConsumeThreads(4, "t", loop, cpu_clock=cpu)
    release = threading.Event()
    names: list[str] = []
    try:
        for _ in range(4):
            pool.submit(release.wait, 10)
        wait_until(lambda: len(pool._threads) == 4, "a thread per blocked call")
        cpu.busy = True
        for _ in range(30):
            pool.submit(lambda: (time.sleep(0.005), names.append(threading.current_thread().name)))
        release.set()
        wait_until(lambda: len(names) == 30, "the queued calls", timeout_s=20)
        assert len(set(names[-10:])) == 1
    finally:
        release.set()
        pool.shutdown()


@pytest.fixture
def pool(loop: asyncio.AbstractEventLoop) -> Iterator[_ConsumeThreads]:
    """Consume threads as a push consumer has them by default (20), shut down afterwards."""
    threads = _ConsumeThreads(20, "t", loop)
    yield threads
    threads.shutdown()


class Calls:
    """Calls that record when and on which thread they ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[int, str, float]] = []
        self.lock = threading.Lock()

    def call(self, i: int) -> None:
        with self.lock:
            self.ran.append((i, threading.current_thread().name, time.monotonic()))

    def assert_in_order_on_one_thread(self, n: int) -> None:
        assert [i for i, _, _ in self.ran] == list(range(n))
        assert len({name for _, name, _ in self.ran}) == 1


def test_backlog_calls_gathered_up_to_the_hand_over_count_go_to_one_thread_at_once(
    loop: asyncio.AbstractEventLoop, pool: _ConsumeThreads
) -> None:
    calls = Calls()
    awake_after: list[int] = []

    def submit_all() -> None:
        for i in range(HAND_OVER_CALLS):
            assert not pool._awake, "woken before the last call"
            pool.submit_batched(calls.call, i)
        # The last call handed them over: the thread has begun before the loop goes on.
        awake_after.append(pool._awake)

    in_loop(loop, submit_all)
    assert awake_after == [1]
    wait_until(lambda: len(calls.ran) == HAND_OVER_CALLS, "the calls")
    calls.assert_in_order_on_one_thread(HAND_OVER_CALLS)
    assert len(pool._threads) == 1


def test_only_a_hand_over_has_its_thread_signal_that_it_began(
    loop: asyncio.AbstractEventLoop, pool: _ConsumeThreads
) -> None:
    calls = Calls()
    in_loop(loop, lambda: pool.submit(calls.call, 0))
    wait_until(lambda: len(calls.ran) == 1 and not pool._awake, "the call and the thread's sleep")
    # A call that just wakes a thread leaves the hand-over's event alone (it costs the thread
    # a few microseconds per wake-up).
    assert not pool._begun.is_set()

    def hand_over_some() -> None:
        for i in range(1, 4):
            pool.submit_batched(calls.call, i)
        pool.hand_over()

    in_loop(loop, hand_over_some)
    wait_until(pool._begun.is_set, "the handed-over thread's signal")
    wait_until(lambda: len(calls.ran) == 4, "the handed-over calls")
    calls.assert_in_order_on_one_thread(4)


def test_fewer_backlog_calls_wait_the_hand_over_time_then_run_together(
    loop: asyncio.AbstractEventLoop, pool: _ConsumeThreads
) -> None:
    calls = Calls()
    submitted: list[float] = []

    def submit_some() -> None:
        submitted.append(time.monotonic())
        for i in range(3):
            pool.submit_batched(calls.call, i)

    in_loop(loop, submit_some)
    wait_until(lambda: len(calls.ran) == 3, "the calls after the hand-over time")
    calls.assert_in_order_on_one_thread(3)
    assert calls.ran[0][2] - submitted[0] >= HAND_OVER_AFTER_S


def test_a_call_that_wakes_a_thread_takes_the_gathered_backlog_calls_along(
    loop: asyncio.AbstractEventLoop, pool: _ConsumeThreads
) -> None:
    calls = Calls()
    ran_before_timer: list[int] = []

    def submit_mixed() -> None:
        pool.submit_batched(calls.call, 0)
        pool.submit_batched(calls.call, 1)
        pool.submit(calls.call, 2)  # a caught-up queue's call: no waiting
        # The hand-over timer cannot fire while this callback holds the loop.
        wait_until(lambda: len(calls.ran) == 3, "the calls, woken by the plain one")
        ran_before_timer.append(len(calls.ran))

    in_loop(loop, submit_mixed)
    assert ran_before_timer == [3]
    calls.assert_in_order_on_one_thread(3)
    time.sleep(5 * HAND_OVER_AFTER_S)  # the timer, when it fires, finds nothing to do
    assert len(calls.ran) == 3
    assert len(pool._threads) == 1


def test_backlog_calls_gathered_at_shutdown_are_dropped_and_later_ones_refused(
    loop: asyncio.AbstractEventLoop,
) -> None:
    pool = _ConsumeThreads(4, "t", loop)
    calls = Calls()
    in_loop(loop, lambda: pool.submit_batched(calls.call, 0))
    pool.shutdown()
    time.sleep(5 * HAND_OVER_AFTER_S)
    assert calls.ran == []
    assert pool._threads == []
    refused: list[bool] = []

    def submit_late() -> None:
        try:
            pool.submit_batched(calls.call, 1)
        except RuntimeError:
            refused.append(True)

    in_loop(loop, submit_late)
    assert refused == [True]


class _Msg:
    __slots__ = ("queue_offset", "store_size")

    def __init__(self, offset: int) -> None:
        self.queue_offset, self.store_size = offset, 10


def test_a_queue_handed_over_takes_only_its_calls_the_gate_would_hold_back(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Queued calls on a queue being handed over go to its gate at once, unless a finished
    message comes after them: those must run, and stay where they are in the queue (taken
    out and queued again at the back, they would never run while other queues keep it full)."""
    consumer = types.SimpleNamespace(
        consume_message_batch_max_size=1, consume_thread_max=1, group="CG"
    )
    service = ConcurrentConsumeService(consumer, loop)  # type: ignore[arg-type]
    pq, other = ProcessQueue(), ProcessQueue()
    msgs = [_Msg(i) for i in range(12)]
    pq.put(msgs)  # type: ignore[arg-type]
    pq.remove([msgs[9]])  # type: ignore[list-item]
    pq.handing_over = True
    listener = lambda m, ctx: None  # noqa: E731
    calls = service._pool._calls
    queued = [
        (service._consume_sync, (listener, [msgs[5]], pq, "mq"), 0.0),
        (service._consume_sync, (listener, [msgs[0]], other, "mq"), 0.0),
        (service._consume_sync_run, (listener, [[msgs[10]], [msgs[11]]], pq, "mq", None), 0.0),
    ]
    calls.extend(queued)
    service.hold_back(pq)
    # 5 must run (9 finished after it): still queued where it was, as is the other queue's.
    assert list(calls) == queued[:2]
    assert pq.hand_over_step() == ([], 12 - 1 - 2)
    service._pool.shutdown()
