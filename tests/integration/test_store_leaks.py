"""Closed and collected stores give back their file descriptors and mappings."""

import gc
import os
import sys

import pytest

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
