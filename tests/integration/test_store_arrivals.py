"""Arrival events: the eventfd that wakes the broker's loop, and the per-queue summaries it
drains."""

import asyncio
import threading

import pytest
from tests.helpers import readable

from pyrmq import _core

pytestmark = pytest.mark.integration


def code(tag: str | None) -> int:
    return _core.java_string_hash(tag) if tag else 0


def test_fd_becomes_readable_after_a_put_and_drain_clears_it(open_store):
    store = open_store()
    fd = store.wakeup_fd()
    assert fd >= 0
    assert not readable(fd, 0)
    assert store.drain_arrivals() == []
    store.put("TopicEv", b"x", queue_id=1, tags="TagA")
    assert readable(fd, 5)
    [(topic, queue_id, max_offset, codes)] = store.drain_arrivals()
    assert (topic, queue_id, max_offset, list(codes)) == ("TopicEv", 1, 1, [code("TagA")])
    assert not readable(fd, 0)
    assert store.drain_arrivals() == []
    # The fd is the same one for the store's whole life.
    assert store.wakeup_fd() == fd


def normalise(events):
    return sorted((t, q, m, tuple(sorted(c)) if c is not None else None) for t, q, m, c in events)


def test_many_puts_coalesce_to_one_entry_per_queue(open_store):
    store = open_store()
    fd = store.wakeup_fd()
    for i in range(30):
        store.put("TopicEv", b"a", queue_id=0, tags=["TagA", "TagB"][i % 2])
    store.put_batch("TopicEv", [b"b"] * 10, queue_id=1)
    store.put_batch("OtherEv", [b"c"] * 4, queue_id=0, tags="TagC")
    store.put("TopicEv", b"d", queue_id=1, tags="TagD")
    assert readable(fd, 5)
    events = store.drain_arrivals()
    assert normalise(events) == normalise(
        [
            ("OtherEv", 0, 4, [code("TagC")]),
            ("TopicEv", 0, 30, [code("TagA"), code("TagB")]),
            ("TopicEv", 1, 11, [0, code("TagD")]),
        ]
    )
    assert not readable(fd, 0)
    # A delayed message wakes the schedule queue, not its real topic.
    sent = store.put("TopicEv", b"later", queue_id=0, properties={"DELAY": "1"})
    assert readable(fd, 5)
    [(topic, queue_id, max_offset, codes)] = store.drain_arrivals()
    assert (topic, queue_id, max_offset) == ("SCHEDULE_TOPIC_XXXX", 0, 1)
    assert list(codes) == [sent.store_timestamp_ms + 1000]


def test_too_many_tags_report_any_tag(open_store):
    store = open_store()
    for i in range(40):
        store.put("TopicEv", b"x", tags=f"Tag{i}")
    [(topic, queue_id, max_offset, codes)] = store.drain_arrivals()
    assert (topic, queue_id, max_offset, codes) == ("TopicEv", 0, 40, None)


def test_prepared_transactions_raise_no_event(open_store):
    store = open_store()
    store.put("TopicTx", b"half", sys_flag=4)
    assert not readable(store.wakeup_fd(), 0)
    assert store.drain_arrivals() == []


def test_asyncio_reader_wakes_and_drains(open_store):
    store = open_store()

    async def main() -> list:
        loop = asyncio.get_running_loop()
        seen: list = []
        woke = asyncio.Event()

        def on_readable() -> None:
            seen.extend(store.drain_arrivals())
            woke.set()

        loop.add_reader(store.wakeup_fd(), on_readable)
        try:
            for round_ in range(3):
                woke.clear()
                # Put from another thread while the loop is parked in its selector.
                await asyncio.to_thread(
                    store.put_batch, "TopicAsync", [b"m"] * 5, queue_id=round_, tags="TagA"
                )
                await asyncio.wait_for(woke.wait(), 5)
        finally:
            loop.remove_reader(store.wakeup_fd())
        return seen

    seen = asyncio.run(main())
    assert normalise(seen) == normalise([("TopicAsync", q, 5, [code("TagA")]) for q in range(3)])


@pytest.mark.parametrize("flush_disk_type", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_no_arrival_is_lost_when_puts_race_drains(open_store, flush_disk_type):
    store = open_store(flush_disk_type=flush_disk_type, background_services=True)
    fd = store.wakeup_fd()
    batches, batch = 400, 5
    queues = 3

    def producer() -> None:
        for i in range(batches):
            store.put_batch("TopicRace", [b"r"] * batch, queue_id=i % queues)

    seen = dict.fromkeys(range(queues), 0)
    wakeups = 0
    thread = threading.Thread(target=producer)
    thread.start()
    try:
        target = {q: len(range(q, batches, queues)) * batch for q in range(queues)}
        while seen != target:
            # Park until the fd says something arrived; a lost event would hang here.
            assert readable(fd, 10), f"no wakeup; seen {seen}, want {target}"
            wakeups += 1
            for topic, queue_id, max_offset, _ in store.drain_arrivals():
                assert topic == "TopicRace"
                assert max_offset >= seen[queue_id], "max offsets never go back"
                seen[queue_id] = max_offset
    finally:
        thread.join()
    assert seen == target
    assert 1 <= wakeups <= batches
    assert not readable(fd, 0)
    assert store.drain_arrivals() == []
