"""Deleting a topic from the store, as RocketMQ's ``deleteTopics``: its queues go at once, a
topic created again under its name starts afresh, and neither a clean reopen nor a full
recovery after a crash brings the deleted messages back."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import SMALL_STORE

from pyrmq.errors import InvalidTopicError
from pyrmq.store import GetMessageStatus

pytestmark = pytest.mark.integration

SEGMENT = 64 * 1024


def bodies(store: Any, topic: str, queue_id: int) -> list[bytes]:
    """Every body in the queue, read 32 at a time from its first offset."""
    out: list[bytes] = []
    offset = store.min_offset(topic, queue_id)
    while (got := store.get(topic, queue_id, offset)).status is GetMessageStatus.FOUND:
        out += [m.body for m in got.messages()]
        offset = got.next_begin_offset
    return out


def fill(store: Any) -> None:
    for i in range(30):
        store.put("TopicKeep", b"keep-%d" % i, queue_id=i % 2, keys=f"k{i}")
    for i in range(40):
        # Written last, and past the end of every other queue.
        store.put("TopicGone", b"gone-%d" % i, queue_id=i % 4, keys=f"k{i}")


def test_a_deleted_topic_is_gone_and_starts_afresh(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    assert store.delete_topic("TopicGone") == 4
    assert not (root / "consumequeue" / "TopicGone").exists()
    assert ("TopicGone", 0) not in store.queue_ids()
    got = store.get("TopicGone", 0, 0)
    assert got.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert (store.min_offset("TopicGone", 1), store.max_offset("TopicGone", 1)) == (0, 0)
    assert store.query_message("TopicGone", "k5") == []
    # Nothing else changed.
    assert bodies(store, "TopicKeep", 1) == [b"keep-%d" % i for i in range(1, 30, 2)]
    assert [m.body for m in store.query_message("TopicKeep", "k5")] == [b"keep-5"]
    # Created again: queue offsets from 0, and only the new messages.
    again = store.put("TopicGone", b"new", queue_id=1, keys="k5")
    assert again.queue_offset == 0
    assert bodies(store, "TopicGone", 1) == [b"new"]
    assert [m.body for m in store.query_message("TopicGone", "k5")] == [b"new"]
    assert store.delete_topic("TopicNeverThere") == 0
    with pytest.raises(InvalidTopicError, match="delayed"):
        store.delete_topic("SCHEDULE_TOPIC_XXXX")


@pytest.mark.parametrize("reopen", ["clean", "crash without a checkpoint"])
def test_a_deleted_topic_stays_deleted_across_a_reopen(
    tmp_path: Path, open_store: Callable[..., Any], reopen: str
) -> None:
    """A crash without a checkpoint re-dispatches the whole CommitLog, the deleted topic's
    records included; a clean reopen re-dispatches from the end of the furthest queue left,
    which lies before them."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    store.delete_topic("TopicGone")
    store.put("TopicGone", b"new", queue_id=2)
    store.close()
    if reopen != "clean":
        (root / "abort").write_bytes(b"")
        (root / "checkpoint").unlink()

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert sorted(q for t, q in store.queue_ids() if t == "TopicGone") == [2]
    assert bodies(store, "TopicGone", 2) == [b"new"]
    assert bodies(store, "TopicGone", 0) == []
    assert store.query_message("TopicGone", "k5") == []
    assert bodies(store, "TopicKeep", 0) == [b"keep-%d" % i for i in range(0, 30, 2)]


def test_a_deleted_topic_written_last_stays_deleted_after_a_clean_reopen(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    """Recovery re-dispatches from the end of the furthest queue left, which now lies before
    the deleted topic's records (RocketMQ's reput brings such a topic back)."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    store.delete_topic("TopicGone")
    store.close()

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert [t for t, _ in store.queue_ids() if t == "TopicGone"] == []
    assert store.put("TopicGone", b"new", queue_id=3).queue_offset == 0


def test_a_deletion_cut_short_by_a_crash_is_finished_at_the_next_open(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    """The deletion is recorded before the queue files go: queue files of the deleted topic
    that are still there at the next open are removed then."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    saved = {
        p.relative_to(root): p.read_bytes()
        for p in (root / "consumequeue" / "TopicGone").rglob("*")
        if p.is_file()
    }
    store.delete_topic("TopicGone")
    store.close()
    for rel, data in saved.items():  # as if the crash came before the files were removed
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert not (root / "consumequeue" / "TopicGone").exists() or not any(
        (root / "consumequeue" / "TopicGone").rglob("*")
    )
    assert [t for t, _ in store.queue_ids() if t == "TopicGone"] == []
    assert store.put("TopicGone", b"new", queue_id=0).queue_offset == 0


@pytest.mark.parametrize("name", ["..", "../outside", "/tmp", "TopicKeep/0", ".", ""])
def test_a_name_that_is_no_topic_deletes_nothing(
    tmp_path: Path, open_store: Callable[..., Any], name: str
) -> None:
    """A topic name is a path component under ``consumequeue/``: one that is not a valid
    topic name is refused before anything is touched."""
    root = tmp_path / "store"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"x")
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    with pytest.raises(InvalidTopicError):
        store.delete_topic(name)
    assert (outside / "precious").read_bytes() == b"x"
    assert bodies(store, "TopicKeep", 1) == [b"keep-%d" % i for i in range(1, 30, 2)]
    assert len(bodies(store, "TopicGone", 3)) == 10
    store.close()
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert bodies(store, "TopicKeep", 0) == [b"keep-%d" % i for i in range(0, 30, 2)]


_DELETER = """
import json, sys
from pyrmq.store import MessageStore
store = MessageStore.open(sys.argv[1], json.loads(sys.argv[2]), background_services=False)
print("deleting", flush=True)
store.delete_topic("TopicGone")
print("deleted", flush=True)
"""


def test_a_process_killed_while_deleting_a_topic_leaves_a_store_that_opens(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    """SIGKILL at random moments of a deletion that removes thousands of one-unit queue
    files: the next open succeeds every time, with the topic either whole or gone, and the
    other topics untouched."""
    template = tmp_path / "template"
    config = {**SMALL_STORE, "mapped_file_size_consume_queue": 20}
    store = open_store(template, **config)
    for i in range(500):
        for q in range(4):
            store.put("TopicGone", b"gone-%d" % i, queue_id=q)
    for i in range(20):
        store.put("TopicKeep", b"keep-%d" % i, queue_id=0)
    store.close()
    rng = random.Random(7)
    outcomes = set()
    for attempt in range(8):
        root = tmp_path / f"run{attempt}"
        shutil.copytree(template, root)
        with subprocess.Popen(
            [sys.executable, "-c", _DELETER, str(root), json.dumps(config)],
            stdout=subprocess.PIPE,
            text=True,
        ) as child:
            try:
                assert child.stdout is not None
                assert child.stdout.readline().strip() == "deleting"
                time.sleep(rng.uniform(0.0, 0.03))
            finally:
                child.kill()
        store = open_store(root, **config)
        gone = sorted(q for t, q in store.queue_ids() if t == "TopicGone")
        assert gone in ([], [0, 1, 2, 3])
        outcomes.add(bool(gone))
        for q in gone:
            assert bodies(store, "TopicGone", q) == [b"gone-%d" % i for i in range(500)]
        assert bodies(store, "TopicKeep", 0) == [b"keep-%d" % i for i in range(20)]
        leftovers = [p.name for p in (root / "consumequeue").iterdir() if p.name[0] == "."]
        assert leftovers == []
        store.close()
    assert outcomes, "every attempt reopened"


def test_the_deletion_is_forgotten_once_retention_removed_its_records(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    fill(store)
    store.delete_topic("TopicGone")
    listed = root / "config" / "deletedTopics.json"
    assert "TopicGone" in listed.read_text()
    # Enough new data to fill the segments the deleted records are in, then retention.
    while store.min_phy_offset == 0 and store.max_phy_offset < 4 * SEGMENT:
        store.put("TopicKeep", b"x" * 1000)
    later = int(time.time() * 1000) + 73 * 3_600_000  # past fileReservedTime (72 h)
    while store.delete_expired_files(later, force=True):
        pass
    assert store.min_phy_offset > 0
    assert "TopicGone" not in listed.read_text()
