"""SYNC_FLUSH appends that do not block (``wait_for_flush=False``) and the FlushWaiter that tells
an event loop when they are durable."""

import asyncio

import pytest
from tests.helpers import eventually, readable, run

from pyrmq.store import FlushWaiter, PutStatus

pytestmark = pytest.mark.integration


def test_a_put_that_does_not_wait_returns_before_its_flush_and_the_fd_reports_it(open_store):
    # No group-commit thread: nothing is flushed until the test flushes.
    store = open_store(flush_disk_type="SYNC_FLUSH")
    fd = store.flushed_fd()
    before = store.flushed_phy_offset
    sent = store.put("TopicFw", b"x" * 100, tags="TagA", wait_for_flush=False)
    assert sent.status is PutStatus.PUT_OK
    assert sent.end_offset == store.max_phy_offset > before
    assert sent.end_offset == sent.phy_offset + sent.wrote_bytes
    assert store.flushed_phy_offset == before
    assert store.get("TopicFw", 0, 0).message_count == 1  # visible before it is durable
    assert not readable(fd, 0)
    store.flush()
    assert readable(fd, 5)
    assert store.drain_flushed() == store.flushed_phy_offset >= sent.end_offset
    assert not readable(fd, 0)


def test_many_puts_in_flight_complete_in_order_once_covered_and_share_fsyncs(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH", background_services=True)
    seen: list[tuple[int, bool, int]] = []

    async def scenario() -> None:
        waiter = FlushWaiter(store, timeout_s=30.0)
        waiter.start()
        all_done = asyncio.Event()
        ends = []
        for i in range(300):
            if i % 3 == 0:
                sent = store.put_batch("TopicFw", [b"b%d" % i] * 4, queue_id=i % 4,
                                       wait_for_flush=False)  # fmt: skip
            else:
                sent = store.put("TopicFw", b"m%d" % i, queue_id=i % 4, wait_for_flush=False)
            ends.append(sent.end_offset)

            def flushed(ok: bool, end: int = sent.end_offset) -> None:
                seen.append((end, ok, store.flushed_phy_offset))
                if len(seen) == len(ends) == 300:
                    all_done.set()

            waiter.when_durable(sent.end_offset, flushed)
        await asyncio.wait_for(all_done.wait(), 30)
        assert waiter.pending == 0
        waiter.stop()
        assert [end for end, _, _ in seen] == ends

    run(scenario)
    assert all(ok and flushed >= end for end, ok, flushed in seen), seen
    # Each wake-up completes everything its flush covered: far fewer than one per put.
    wakeups = len({flushed for _, _, flushed in seen})
    assert wakeups <= 75, wakeups


def test_a_waiter_not_covered_in_time_completes_false_and_a_later_flush_completes_the_rest(
    open_store,
):
    store = open_store(flush_disk_type="SYNC_FLUSH")  # nothing flushes on its own
    results: dict[str, list[bool]] = {"late": [], "patient": [], "already": []}

    async def scenario() -> None:
        waiter = FlushWaiter(store, timeout_s=0.2)
        waiter.start()
        late = store.put("TopicFw", b"late", wait_for_flush=False)
        waiter.when_durable(late.end_offset, results["late"].append)
        await asyncio.sleep(0.5)
        assert results["late"] == [False]
        assert store.flushed_phy_offset < late.end_offset

        waiter.timeout_s = 30.0
        patient = store.put("TopicFw", b"patient", wait_for_flush=False)
        waiter.when_durable(patient.end_offset, results["patient"].append)
        await asyncio.sleep(0.05)
        assert results["patient"] == []
        await asyncio.get_running_loop().run_in_executor(None, store.flush)
        await eventually(lambda: results["patient"], 5.0, "the flush to complete the waiter")
        assert results["patient"] == [True]
        # Already durable: answered at once, without waiting for a flush.
        waiter.when_durable(patient.end_offset, results["already"].append)
        assert results["already"] == [True]
        waiter.stop()

    run(scenario)
    assert results["late"] == [False]  # completed once, not again by the flush


def test_a_waiter_already_durable_completes_after_those_registered_before_it(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH")  # flushed only when the test flushes
    order: list[tuple[str, bool]] = []

    async def scenario() -> None:
        waiter = FlushWaiter(store, timeout_s=30.0)
        waiter.start()
        first = store.put("TopicFw", b"first", wait_for_flush=False)
        waiter.when_durable(first.end_offset, lambda ok: order.append(("first", ok)))
        second = store.put("TopicFw", b"second", wait_for_flush=False)
        store.flush()  # covers both; the loop has not read the fd yet
        assert store.flushed_phy_offset >= second.end_offset
        waiter.when_durable(second.end_offset, lambda ok: order.append(("second", ok)))
        assert order == []
        await eventually(lambda: len(order) == 2, 5.0, "both waiters to complete")
        waiter.stop()

    run(scenario)
    assert order == [("first", True), ("second", True)]


def test_stop_completes_pending_waiters_false(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH")
    got: list[bool] = []

    async def scenario() -> None:
        waiter = FlushWaiter(store, timeout_s=30.0)
        waiter.start()
        for _ in range(3):
            sent = store.put("TopicFw", b"x", wait_for_flush=False)
            waiter.when_durable(sent.end_offset, got.append)
        assert waiter.pending == 3
        waiter.stop()
        assert waiter.pending == 0

    run(scenario)
    assert got == [False, False, False]


def test_under_async_flush_a_put_that_does_not_wait_is_a_plain_put(open_store):
    store = open_store(flush_disk_type="ASYNC_FLUSH")
    sent = store.put("TopicFw", b"x", wait_for_flush=False)
    assert sent.status is PutStatus.PUT_OK
    assert sent.end_offset == store.max_phy_offset
    store.flush()
    assert not readable(store.flushed_fd(), 0)
