"""The push consumer's consume threads: started only when no thread waits, never more than
the limit, the warmest woken first, blocking calls fanned out, surviving a failing call, and
shutting down without running what was not started."""

import threading
import time
from collections.abc import Callable

import pytest

from pyrmq.client.consume_service import _ConsumeThreads


def wait_for(cond: "threading.Event", what: str) -> None:
    assert cond.wait(10), what


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


def test_calls_one_after_another_keep_to_one_thread() -> None:
    pool = _ConsumeThreads(20, "t")
    try:
        for _ in range(50):
            call_and_settle(pool, 1, lambda: None)
        assert len(pool._threads) == 1
    finally:
        pool.shutdown()


def test_the_thread_that_slept_last_takes_the_next_call() -> None:
    pool = _ConsumeThreads(3, "t")
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


def test_a_burst_of_blocking_calls_runs_on_as_many_threads_at_once() -> None:
    pool = _ConsumeThreads(8, "t")
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


def test_blocked_calls_grow_the_threads_up_to_the_limit_and_the_rest_wait() -> None:
    pool = _ConsumeThreads(3, "t")
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


def test_a_failing_call_is_logged_and_its_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = _ConsumeThreads(1, "t")
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


def test_shutdown_finishes_running_calls_drops_queued_ones_and_refuses_new_ones() -> None:
    pool = _ConsumeThreads(1, "t")
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
