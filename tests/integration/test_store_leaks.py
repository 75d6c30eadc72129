"""What a store takes from the machine: closed and collected stores give back their file
descriptors and mappings, a quiet queue or a new index file costs little disk, and a mapping
the kernel refuses for a moment is retried."""

import gc
import os
import sys

import pytest
from tests.helpers import run_python

from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self"),
]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def mapped(under: str) -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if under in line)


@pytest.mark.slow
def test_open_put_get_close_200_times_leaks_nothing(tmp_path, make_config):
    root = tmp_path / "leak"
    config = make_config(mapped_file_size_commit_log=64 * 1024)

    def cycle(i: int) -> None:
        store = MessageStore.open(root, config, background_services=i % 2 == 0)
        r = store.put("TopicLeak", b"x" * 500, queue_id=i % 3, keys=f"k{i}")
        got = store.get("TopicLeak", i % 3, r.queue_offset)
        assert got.status is GetMessageStatus.FOUND
        views = got.views()
        assert bytes(views[0]) == got.buffer
        assert store.look_message_by_offset(r.phy_offset) is not None
        assert store.query_message("TopicLeak", f"k{i}")
        assert mapped(str(root)) > 0
        store.close()

    cycle(0)  # first use may set up lazily created, process-wide state
    gc.collect()
    fds, maps = open_fds(), mapped(str(root))
    assert maps == 0

    for i in range(1, 201):
        cycle(i)
    gc.collect()
    assert open_fds() == fds
    assert mapped(str(root)) == 0

    # A store dropped without close() is closed and unmapped as well.
    store = MessageStore.open(root, config, background_services=True)
    store.put("TopicLeak", b"y")
    del store
    gc.collect()
    assert open_fds() == fds
    assert mapped(str(root)) == 0
    # ...and cleanly: the next open finds no crash to recover from.
    with MessageStore.open(root, config, background_services=False) as store:
        assert store.recovery["records"] == 0
        assert store.max_offset("TopicLeak", 0) == 68


def test_a_quiet_queue_takes_a_chunk_of_disk_not_a_whole_file(tmp_path, make_config):
    """ConsumeQueue files are sparse and reserved ahead of the writer: a queue with one message
    uses 64 KiB of its default 5.72 MiB file, and reopening reads only what holds units."""
    root = tmp_path / "quiet"
    config = make_config(mapped_file_size_consume_queue=300_000 * 20)  # the default
    with MessageStore.open(root, config, background_services=False) as store:
        for q in range(8):
            store.put("TopicQuiet", b"only one", queue_id=q)
    files = list((root / "consumequeue" / "TopicQuiet").glob("*/*"))
    assert len(files) == 8
    for f in files:
        assert f.stat().st_size == 300_000 * 20
        assert f.stat().st_blocks * 512 <= 64 * 1024
    with MessageStore.open(root, config, background_services=False) as store:
        for q in range(8):
            assert store.max_offset("TopicQuiet", q) == 1
            assert store.put("TopicQuiet", b"next", queue_id=q).queue_offset == 1
            [_, second] = store.get("TopicQuiet", q, 0).messages()
            assert second.body == b"next"


def test_an_index_file_takes_disk_as_it_fills(tmp_path):
    """With the default geometry an index file is 420 MB; its hash slots (20 MB) have their
    blocks from the start, its entries a chunk at a time as keys arrive."""
    root = tmp_path / "index"
    with MessageStore.open(root, {}, background_services=False) as store:
        r = store.put("TopicIdx", b"keyed", keys="k0")
        [only] = (root / "index").iterdir()
        assert only.stat().st_size == 40 + 5_000_000 * 4 + 20_000_000 * 20
        assert only.stat().st_blocks * 512 < 32 * 1024 * 1024
        assert [m.phy_offset for m in store.query_message("TopicIdx", "k0")] == [r.phy_offset]
    with MessageStore.open(root, {}, background_services=False) as store:
        assert [m.phy_offset for m in store.query_message("TopicIdx", "k0")] == [r.phy_offset]
        store.put("TopicIdx", b"keyed", keys="k1")
        assert len(store.query_message("TopicIdx", "k1")) == 1
    assert only.stat().st_blocks * 512 < 32 * 1024 * 1024


_MAPS_RUN_OUT = """
import json, mmap, sys
from pyrmq.store import MessageStore

store = MessageStore.open(sys.argv[1], {"mappedFileSizeConsumeQueue": 20 * 1000},
                          background_services=False)
store.put("TopicA", b"first")
hog = []
try:
    while True:  # shared anonymous mappings are never merged: one each, up to the limit
        hog.append(mmap.mmap(-1, 4096))
except OSError:
    pass
try:
    store.put("TopicB", b"refused")
    refused = None
except Exception as e:
    refused = type(e).__name__
for m in hog:
    m.close()
after = store.put("TopicB", b"later").queue_offset
print(json.dumps({"refused": refused, "after": after}))
"""


def test_a_queue_whose_mapping_was_refused_is_created_once_mappings_are_free(tmp_path):
    """The file of a segment the kernel would not map was left behind, and every later create
    of it failed (EEXIST) until the store was reopened."""
    report = run_python("-c", _MAPS_RUN_OUT, str(tmp_path / "maps"))
    assert report == {"refused": "StoreIOError", "after": 0}


def test_views_of_a_batch_leak_nothing(open_store):
    """Each view is a slice of the batch's buffer; the bounds of its slice, ints past the small
    int cache, leaked with every call."""
    import tracemalloc

    store = open_store()
    store.put_batch("TopicViews", [b"v" * 300] * 32)
    got = store.get("TopicViews", 0, 0, max_count=32)
    assert b"".join(bytes(v) for v in got.views()) == got.buffer
    tracemalloc.start()
    try:
        for _ in range(50):
            got.views()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(2_000):
            views = got.views()
            assert len(views) == 32
            del views
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # The leak was two 28-byte ints per view: 3.5 MB here.
    assert grown < 100_000, grown
