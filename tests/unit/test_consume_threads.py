"""The push consumer's consume threads: started only when no thread waits, never more than
the limit, surviving a failing call, and shutting down without running what was not started."""

import threading
import time

import pytest

from pyrmq.client.consume_service import _ConsumeThreads


def wait_for(cond: "threading.Event", what: str) -> None:
    assert cond.wait(10), what


def test_calls_one_after_another_keep_to_one_thread() -> None:
    pool = _ConsumeThreads(20, "t")
    try:
        for i in range(50):
            done = threading.Event()
            pool.submit(done.set)
            wait_for(done, f"call {i}")
            deadline = time.monotonic() + 10
            while pool._idle.empty() and time.monotonic() < deadline:
                time.sleep(0.001)  # until the thread is back to waiting
        assert len(pool._threads) == 1
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
