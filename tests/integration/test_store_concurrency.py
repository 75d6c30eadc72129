"""Concurrent writers and readers: every message stored once, queue offsets dense, and a reader
never sees a partial record; stores left unclosed are closed without waiting for good."""

import os
import struct
import threading
from collections import defaultdict

import pytest
from tests.helpers import run_python

from pyrmq.errors import StoreClosedError
from pyrmq.store import GetMessageStatus, PutStatus

pytestmark = pytest.mark.integration

WRITERS = 8
PUTS_PER_WRITER = 150
QUEUES = [("TopicConcA", 0), ("TopicConcA", 1), ("TopicConcB", 0)]


def body_for(writer: int, seq: int, k: int) -> bytes:
    head = struct.pack(">HIH", writer, seq, k)
    return head + bytes([(writer * 37 + seq + k) % 256]) * (50 + (seq * 131 + k * 17) % 900)


@pytest.mark.parametrize("flush_disk_type", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_concurrent_writers_and_a_reader(open_store, record_decoder, flush_disk_type):
    store = open_store(
        flush_disk_type=flush_disk_type,
        background_services=True,
        mapped_file_size_commit_log=256 * 1024,
        mapped_file_size_consume_queue=20 * 200,
    )
    start = threading.Barrier(WRITERS + 1)
    stop_reading = threading.Event()
    results: dict[int, list] = {}
    errors: list[BaseException] = []
    reader_stats = {"records": 0, "reads": 0}

    def writer(w: int) -> None:
        try:
            mine = []
            start.wait()
            for seq in range(PUTS_PER_WRITER):
                topic, queue_id = QUEUES[(w + seq) % len(QUEUES)]
                if seq % 4 == 3:
                    bodies = [body_for(w, seq, k) for k in range(1 + seq % 5)]
                    r = store.put_batch(topic, bodies, queue_id=queue_id, tags=f"W{w}")
                else:
                    bodies = [body_for(w, seq, 0)]
                    r = store.put(topic, bodies[0], queue_id=queue_id, tags=f"W{w}")
                assert r.status is PutStatus.PUT_OK
                if flush_disk_type == "SYNC_FLUSH":
                    # Released by the fsync that covers it, never by another appender's.
                    assert store.flushed_phy_offset >= r.end_offset
                assert r.queue_offsets == list(range(r.queue_offset, r.queue_offset + len(bodies)))
                mine.append((topic, queue_id, bodies, list(r.queue_offsets), list(r.phy_offsets)))
            results[w] = mine
        except BaseException as exc:
            errors.append(exc)

    def reader() -> None:
        try:
            offsets = dict.fromkeys(QUEUES, 0)
            start.wait()
            while not stop_reading.is_set():
                for topic, queue_id in QUEUES:
                    got = store.get(topic, queue_id, offsets[(topic, queue_id)])
                    reader_stats["reads"] += 1
                    assert got.corrupt_offsets == []
                    if got.status is not GetMessageStatus.FOUND:
                        continue
                    expect = offsets[(topic, queue_id)]
                    assert got.queue_offsets == list(range(expect, expect + got.message_count))
                    assert sum(got.sizes) == len(got.buffer)
                    for view, qo, phy in zip(
                        got.views(), got.queue_offsets, got.phy_offsets, strict=True
                    ):
                        rec = record_decoder(view)
                        assert (rec["topic"], rec["queue_id"]) == (topic, queue_id)
                        assert (rec["queue_offset"], rec["phy_offset"]) == (qo, phy)
                        w, seq, k = struct.unpack(">HIH", rec["body"][:8])
                        assert rec["body"] == body_for(w, seq, k)
                        reader_stats["records"] += 1
                    offsets[(topic, queue_id)] = got.next_begin_offset
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads[:-1]:
        t.join(120)
    stop_reading.set()
    threads[-1].join(120)
    assert not errors, errors[0]
    assert reader_stats["records"] > 0

    # Every message stored exactly once at the queue offset its put returned.
    by_queue: dict[tuple[str, int], dict[int, tuple[bytes, int]]] = defaultdict(dict)
    for mine in results.values():
        for topic, queue_id, bodies, queue_offsets, phy_offsets in mine:
            for body, qo, phy in zip(bodies, queue_offsets, phy_offsets, strict=True):
                assert qo not in by_queue[(topic, queue_id)], "queue offset given twice"
                by_queue[(topic, queue_id)][qo] = (body, phy)
    assert len(results) == WRITERS
    all_phy = [phy for q in by_queue.values() for _, phy in q.values()]
    assert len(set(all_phy)) == len(all_phy)
    for key, expected in by_queue.items():
        topic, queue_id = key
        assert sorted(expected) == list(range(len(expected))), f"{key} has gaps"
        assert store.max_offset(topic, queue_id) == len(expected)
        offset = 0
        while offset < len(expected):
            got = store.get(topic, queue_id, offset)
            assert got.status is GetMessageStatus.FOUND
            for view, qo, phy in zip(got.views(), got.queue_offsets, got.phy_offsets, strict=True):
                assert (bytes(record_decoder(view)["body"]), phy) == expected[qo]
            offset = got.next_begin_offset
    # Each writer's puts to one queue got increasing offsets, in program order.
    for mine in results.values():
        last: dict[tuple[str, int], int] = {}
        for topic, queue_id, _, queue_offsets, _ in mine:
            assert queue_offsets[0] > last.get((topic, queue_id), -1)
            last[(topic, queue_id)] = queue_offsets[-1]


@pytest.mark.parametrize("flush_disk_type", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_close_racing_puts_loses_nothing_that_was_acknowledged(
    open_store, tmp_path, wait_until, flush_disk_type
):
    root = tmp_path / "store"
    settings = {"flush_disk_type": flush_disk_type, "mapped_file_size_commit_log": 256 * 1024}
    store = open_store(root, background_services=True, **settings)
    acked: dict[int, list] = {w: [] for w in range(4)}
    refused = dict.fromkeys(acked, 0)
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            seq = 0
            while True:
                body = body_for(w, seq, 0)
                try:
                    r = store.put("TopicClose", body, queue_id=w % 2)
                except StoreClosedError:
                    refused[w] += 1
                    return
                acked[w].append((r.queue_offset, r.phy_offset, body))
                seq += 1
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in acked]
    for t in threads:
        t.start()
    wait_until(lambda: all(len(a) >= 20 for a in acked.values()) or errors, 60, "puts")
    store.close()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert all(refused.values())

    store = open_store(root, **settings)
    for q in (0, 1):
        mine = sorted(a for w in acked if w % 2 == q for a in acked[w])
        assert [a[0] for a in mine] == list(range(len(mine)))
        assert store.max_offset("TopicClose", q) == len(mine)
        for qo, phy, body in mine:
            got = store.get("TopicClose", q, qo, max_count=1)
            assert got.phy_offsets == [phy]
            assert got.messages()[0].body == body


def test_a_second_close_returns_once_the_first_has_flushed_and_unlocked(open_store, tmp_path):
    root = tmp_path / "store"
    lazy = {"flush_interval_commit_log_ms": 60_000, "flush_interval_consume_queue_ms": 60_000}
    for _ in range(3):
        store = open_store(root, background_services=True, **lazy)
        body = bytes(3000)
        for i in range(2000):
            store.put("TopicClose", body, queue_id=i % 4, keys=f"k{i}")
        first = threading.Thread(target=store.close)
        first.start()
        while not store.closed:
            pass
        store.close()
        # Returned only once the first close let go of the directory: it opens at once.
        again = open_store(root)
        assert again.recovery["records"] == 0
        assert again.max_offset("TopicClose", 3) % 500 == 0
        again.close()
        first.join()


# A store whose retention thread logs at INFO all the time, left to the garbage collector or
# to the interpreter's exit rather than closed.
_UNCLOSED = """
import faulthandler, gc, json, logging, sys, tempfile, time
from pyrmq import _core
logging.basicConfig(level=logging.INFO, filename=sys.argv[1] + "/log")
faulthandler.dump_traceback_later(60, exit=True)
config = {
    "mapped_file_size_commit_log": 4096, "file_reserved_time_hours": 0,
    "delete_when": ";".join("%02d" % h for h in range(24)), "clean_resource_interval_ms": 1,
    "max_hash_slot_num": 64, "max_index_num": 1000, "background_services": True,
}
def filled(root):
    store = _core.MessageStore(root, config)
    for _ in range(40):
        store.put("TopicA", b"x" * 1000)
    return store
for i in range(int(sys.argv[2])):
    store = filled(tempfile.mkdtemp(dir=sys.argv[1]))
    del store
    gc.collect()
left = sys.argv[1] + "/left"
kept = filled(left)
# Left open only once its retention thread has logged: on a loaded machine the thread may
# not have run yet.
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    with open(sys.argv[1] + "/log") as log_file:
        if "deleted commit log segment" in log_file.read():
            break
    time.sleep(0.05)
print(json.dumps({"left": left}), flush=True)
"""


def test_stores_collected_or_left_open_at_exit_are_closed_without_a_hang(tmp_path):
    """Closing joins the store's threads, which may be waiting for the GIL to log: a store
    collected with the GIL held, or dropped during the interpreter's exit, hung for good."""
    left = run_python("-c", _UNCLOSED, str(tmp_path), "30")["left"]
    # Closed at exit, not abandoned: no abort marker, so the next open recovers nothing.
    assert not os.path.exists(os.path.join(left, "abort"))
    assert "deleted commit log segment" in (tmp_path / "log").read_text()


_HANDLERS = """
import faulthandler, json, logging, sys, threading
from pyrmq import _core
from pyrmq.errors import StoreClosedError
faulthandler.dump_traceback_later(60, exit=True)
root = sys.argv[1]
config = {
    "mapped_file_size_commit_log": 4096, "file_reserved_time_hours": 0,
    "delete_when": ";".join("%02d" % h for h in range(24)), "clean_resource_interval_ms": 20,
    "max_hash_slot_num": 64, "max_index_num": 1000, "background_services": True,
}
store = _core.MessageStore(root, config)
report = {}
closed = threading.Event()

class Audit(logging.Handler):
    # Puts an audit record for each deleted topic; closes the store (fail-stop) at the first
    # record a store thread logs.
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("deleted topic"):
            store.put("TopicAudit", message.encode())
        elif threading.current_thread() is not threading.main_thread() and not closed.is_set():
            try:
                store.close()
                report["close"] = "returned"
            except BaseException as e:
                report["close"] = f"{type(e).__name__}: {e}"
            closed.set()

logger = logging.getLogger("pyrmq_store")
logger.setLevel(logging.INFO)
logger.addHandler(Audit())
store.put("TopicGone", b"x")
report["deleted"] = store.delete_topic("TopicGone")
report["audit"] = store.max_offset("TopicAudit", 0)
for _ in range(20):
    try:
        store.put("TopicA", b"x" * 1000)
    except StoreClosedError:
        # The handler may close the store between these puts (at the first segment the
        # clean thread deletes): that is the close under test, not a failure.
        if not closed.wait(5):
            raise
        break
report["closed_by_handler"] = closed.wait(30)
store.close()
_core.MessageStore(root, dict(config, background_services=False)).close()
report["reopened"] = True
print(json.dumps(report))
"""


def test_log_handlers_may_put_and_close_from_inside_the_store(tmp_path):
    """A handler that puts when a topic is deleted ran while the put lock was held, and waited
    on it for good; one that closes the store from a store thread had close() join that very
    thread, which panicked and left the directory locked."""
    assert run_python("-c", _HANDLERS, str(tmp_path / "store")) == {
        "deleted": 1,
        "audit": 1,
        "close": "returned",
        "closed_by_handler": True,
        "reopened": True,
    }


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_cannot_touch_its_parents_store(open_store, tmp_path):
    """A child inherits the parent's mappings and lock but not its threads: its appends would
    overwrite the parent's records, and its exit (which closes what is open) would remove the
    parent's abort marker. It gets StoreClosedError instead, and its exit changes nothing."""
    root = tmp_path / "store"
    store = open_store(root, background_services=True)
    store.put("TopicFork", b"before")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, close as its exit would, and leave pytest behind
        os.close(read)
        try:
            store.put("TopicFork", b"child")
            outcome = "stored"
        except StoreClosedError as e:
            outcome = "refused" if "forked" in str(e) else f"other: {e}"
        except BaseException as e:
            outcome = f"{type(e).__name__}: {e}"
        try:
            store.close()
        except BaseException as e:
            outcome += f"; close: {type(e).__name__}: {e}"
        os.write(write, outcome.encode())
        os.close(write)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        outcome = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert outcome == "refused"
    assert (root / "abort").exists()  # still the parent's open store
    assert store.put("TopicFork", b"after").queue_offset == 1
    got = store.get("TopicFork", 0, 0)
    assert [m.body for m in got.messages()] == [b"before", b"after"]


def test_a_lookup_racing_retention_finds_its_record_or_nothing_never_corruption(open_store):
    """A lookup holds the segment it found: the segment leaving the list meanwhile makes the
    record neither torn nor corrupt (it was reported corrupt, from a second lookup)."""
    store = open_store(mapped_file_size_commit_log=64 * 1024, file_reserved_time_hours=0)
    for _ in range(200):
        store.put_batch("TopicRace", [b"x" * 200] * 100)
    seen = {"found": 0, "gone": 0}
    errors: list[Exception] = []
    done = threading.Event()

    def look() -> None:
        while not done.is_set():
            try:
                found = store.look_message_by_offset(store.min_phy_offset)
            except Exception as e:  # any error fails the test below
                errors.append(e)
                return
            seen["found" if found is not None else "gone"] += 1

    readers = [threading.Thread(target=look) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for _ in range(400):
            if store.max_phy_offset - store.min_phy_offset <= 2 * 64 * 1024:
                break
            store.delete_expired_files(force=True)
    finally:
        done.set()
        for t in readers:
            t.join(10)
    assert errors == []
    assert seen["found"] > 0
