"""A full disk: writes are refused with DiskFullError, nothing is written, reads go on."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import child_env, run_python

from pyrmq.errors import DiskFullError
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = pytest.mark.integration

WRITER = Path(__file__).with_name("disk_full_writer.py")
_spec = importlib.util.spec_from_file_location("disk_full_writer", WRITER)
assert _spec is not None
assert _spec.loader is not None
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)


def can_mount_tmpfs() -> bool:
    """Whether a private tmpfs can be mounted in a user and mount namespace."""
    if shutil.which("unshare") is None or not sys.platform.startswith("linux"):
        return False
    probe = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c"]
    probe += ['d=$(mktemp -d) && mount -t tmpfs -o size=64k none "$d" && umount "$d"']
    done = subprocess.run(probe, capture_output=True, timeout=30, check=False)
    return done.returncode == 0


def log_bytes(root: Path) -> dict[str, bytes]:
    return {
        name: (root / "commitlog" / name).read_bytes() for name in os.listdir(root / "commitlog")
    }


def test_usage_above_the_warning_level_refuses_writes(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    sent = store.put_batch("TopicFull", [b"one", b"two", b"three"], keys="k")
    store.close()
    before = log_bytes(root)

    full = {
        "disk_space_warning_level_ratio": 1,
        "disk_space_clean_forcibly_ratio": 1,
        "disk_max_used_space_ratio": 1,
    }
    store = open_store(root, **full)
    ratio = store.check_disk()
    assert ratio is not None
    assert 0.01 < ratio <= 1.0
    assert store.is_disk_full
    max_phy = store.max_phy_offset
    with pytest.raises(DiskFullError):
        store.put("TopicFull", b"refused")
    with pytest.raises(DiskFullError):
        store.put_batch("TopicFull", [b"refused"], queue_id=1)
    with pytest.raises(DiskFullError):
        store.put_encoded_batch(
            "TopicFull", b"\x00\x00\x00\x1a" + bytes(12) + b"\x00\x00\x00\x04abcd\x00\x00"
        )
    assert store.max_phy_offset == max_phy
    assert store.queue_ids() == [("TopicFull", 0)]
    assert store.max_offset("TopicFull", 0) == 3
    # Reads are still served.
    got = store.get("TopicFull", 0, 0)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages()] == [b"one", b"two", b"three"]
    assert store.look_message_by_offset(sent.phy_offsets[2]).body == b"three"
    assert len(store.query_message("TopicFull", "k")) == 3
    store.close()
    assert log_bytes(root) == before


def test_segment_that_cannot_be_created_gives_disk_full(tmp_path):
    root = tmp_path / "store"
    report = run_python(str(WRITER), "fsize", str(root))
    acked = report["acked"]
    segment = writer.SEGMENT

    # Writing went on until the segments created before the limit were full (the second was
    # prepared ahead of the roll, at the first puts), then every try failed the same way.
    assert [f["type"] for f in report["failures"]] == ["DiskFullError"] * 3
    assert report["max_phy_offset_at_failure"] == report["max_phy_offset"]
    assert 2 * segment - 3000 < report["max_phy_offset"] <= 2 * segment
    assert len(acked) > 20
    assert {a["status"] for a in acked} == {"PUT_OK"}
    assert report["readable"] == len(acked)
    # The segment that could not be preallocated left no file behind.
    assert sorted(os.listdir(root / "commitlog")) == [f"{0:020d}", f"{segment:020d}"]

    config = writer.CONFIG
    from pyrmq.config import StoreConfig

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        assert store.max_phy_offset == report["max_phy_offset"]
        for q in range(3):
            assert store.max_offset("TopicFull", q) == sum(1 for a in acked if a["q"] == q)
        for a in acked:
            got = store.get("TopicFull", a["q"], a["qo"], max_count=1)
            assert got.status is GetMessageStatus.FOUND
            [m] = got.messages()
            assert (m.body, m.phy_offset) == (writer.body_for(a["i"]), a["phy"])
            assert [x.phy_offset for x in store.query_message("TopicFull", f"k{a['i']}")] == [
                a["phy"]
            ]
        # Without the limit the log rolls over as usual.
        r = store.put("TopicFull", b"x" * 3000)
        assert r.phy_offset == 2 * segment


_UNINDEXABLE = """
import json, resource, signal, sys
from pyrmq.store import MessageStore
config = json.loads(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# Room for a CommitLog segment and queue files, not for an index file.
resource.setrlimit(resource.RLIMIT_FSIZE, (128 * 1024, resource.RLIM_INFINITY))
store = MessageStore.open(sys.argv[1], config, background_services=False)
acked = [store.put("TopicIdx", b"m%d" % i, keys=f"k{i}").phy_offset for i in range(20)]
found = sum(len(store.query_message("TopicIdx", f"k{i}")) for i in range(20))
store.close()
print(json.dumps({"acked": acked, "found": found}))
"""


def test_messages_the_index_could_not_take_are_indexed_at_the_next_open(tmp_path):
    """An index file that cannot be created (file-size limit) fails no put: the messages are
    stored, and the next open, with room again, indexes them."""
    root = tmp_path / "store"
    config = {
        "mapped_file_size_commit_log": 64 * 1024,
        "mapped_file_size_consume_queue": 20 * 100,
        "max_hash_slot_num": 100,
        "max_index_num": 10_000,  # 200 KiB a file
    }
    report = run_python("-c", _UNINDEXABLE, str(root), json.dumps(config))
    assert report["found"] == 0
    assert list((root / "index").iterdir()) == []

    from pyrmq.config import StoreConfig

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        for i, phy in enumerate(report["acked"]):
            assert [m.phy_offset for m in store.query_message("TopicIdx", f"k{i}")] == [phy]


_INDEX_FULL_MID_BATCH = """
import json, resource, signal, sys
from pyrmq.store import MessageStore
config = json.loads(sys.argv[2])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
store = MessageStore.open(sys.argv[1], config, background_services=False)
# 1,997 of the index file's 1,999 entries, then no room for a second index file (40 KiB):
# the batch's third message is the first the index cannot take.
singles = [store.put("TopicIdx", b"s%d" % i, keys=f"s{i}").phy_offset for i in range(1997)]
resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024, resource.RLIM_INFINITY))
batch = list(store.put_batch("TopicIdx", [b"b%d" % i for i in range(5)], keys="kb").phy_offsets)
store.close()
print(json.dumps({"singles": singles, "batch": batch}))
"""


def test_an_index_full_in_the_middle_of_a_batch_loses_nothing_at_the_next_open(tmp_path):
    """The checkpoint must count the index durable only up to the batch's group: from the
    middle of a group, the next open's validation would take the group for a torn tail."""
    root = tmp_path / "store"
    config = {
        "mapped_file_size_commit_log": 1024 * 1024,
        "mapped_file_size_consume_queue": 20 * 100,
        "max_hash_slot_num": 100,
        "max_index_num": 2000,
    }
    report = run_python("-c", _INDEX_FULL_MID_BATCH, str(root), json.dumps(config))
    assert len(list((root / "index").iterdir())) == 1
    from pyrmq.config import StoreConfig

    for _ in range(2):
        with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
            assert store.recovery["truncated_bytes"] == 0
            assert store.max_offset("TopicIdx", 0) == 1997 + 5
            got = store.get("TopicIdx", 0, 1995, max_count=32)
            assert [m.body for m in got.messages()] == [b"s1995", b"s1996"] + [
                b"b%d" % i for i in range(5)
            ]
            found = store.query_message("TopicIdx", "kb", max_count=10)
            assert sorted(m.phy_offset for m in found) == report["batch"]


_REBUILD_WITHOUT_ROOM = """
import json, resource, signal, sys
from pyrmq.errors import DiskFullError
from pyrmq.store import MessageStore
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# Room for nothing larger than a checkpoint: no ConsumeQueue file can be made.
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    MessageStore.open(sys.argv[1], json.loads(sys.argv[2]), background_services=False)
except DiskFullError as e:
    print(json.dumps({"error": str(e)}))
else:
    print(json.dumps({"error": None}))
"""


def test_consume_queues_that_cannot_be_rebuilt_fail_the_open_and_are_rebuilt_later(tmp_path):
    """A queue rebuilt with a hole would hand out a queue offset a stored record has, and a
    checkpoint written after it would claim the missing units: the open refuses instead."""
    root = tmp_path / "store"
    config = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 300}
    from pyrmq.config import StoreConfig

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        for i in range(10):
            store.put("TopicA", b"a%d" % i)
            store.put("TopicB", b"b%d" % i)
        store.put("TopicA", b"a-last")
    shutil.rmtree(root / "consumequeue")

    report = run_python("-c", _REBUILD_WITHOUT_ROOM, str(root), json.dumps(config))
    assert report["error"] is not None
    assert "consumequeue" in report["error"]

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        a = [m.body for m in store.get("TopicA", 0, 0, max_count=100).messages()]
        b = [m.body for m in store.get("TopicB", 0, 0, max_count=100).messages()]
        assert a == [b"a%d" % i for i in range(10)] + [b"a-last"]
        assert b == [b"b%d" % i for i in range(10)]
        assert store.put("TopicB", b"next").queue_offset == 10


def test_a_consume_queue_file_missing_is_written_again_by_a_later_open_if_one_fails(tmp_path):
    """The files past the gap go only once the checkpoint makes every later open dispatch from
    the gap too: an open that fails meanwhile loses no unit."""
    root = tmp_path / "store"
    config = {"mapped_file_size_commit_log": 64 * 1024, "mapped_file_size_consume_queue": 20 * 300}
    from pyrmq.config import StoreConfig

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        for i in range(1000):
            store.put("TopicGap", b"g%d" % i)
        store.put("TopicLater", b"later")
    (root / "consumequeue" / "TopicGap" / "0" / f"{20 * 300:020d}").unlink()

    report = run_python("-c", _REBUILD_WITHOUT_ROOM, str(root), json.dumps(config))
    assert report["error"] is not None
    assert "consumequeue" in report["error"]

    with MessageStore.open(root, StoreConfig(**config), background_services=False) as store:
        assert store.max_offset("TopicGap", 0) == 1000
        got = [m.body for m in store.get("TopicGap", 0, 290, max_count=32).messages()]
        assert got == [b"g%d" % i for i in range(290, 322)]
        assert store.put("TopicGap", b"next").queue_offset == 1000


@pytest.mark.skipif(not can_mount_tmpfs(), reason="cannot mount a private tmpfs here")
@pytest.mark.parametrize("flush", ["ASYNC_FLUSH", "SYNC_FLUSH"])
def test_full_file_system_gives_disk_full_and_the_data_survives(tmp_path, flush):
    """A real ENOSPC: a 1 MiB tmpfs filled by appends. The store must refuse with DiskFullError
    (never die of SIGBUS), keep what it acknowledged, and open again on the full file system."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (
        'mount -t tmpfs -o size=1m none "$1" && '
        '"$2" "$3" fill "$1/store" "$6" > "$4" && "$2" "$3" verify "$1/store" "$6" > "$5"'
    )
    wrote, verified = tmp_path / "write.json", tmp_path / "verify.json"
    args = [str(mnt), sys.executable, str(WRITER), str(wrote), str(verified), flush]
    done = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *args],
        capture_output=True,
        env=child_env(),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, (done.returncode, done.stderr.decode()[-3000:])
    report = json.loads(wrote.read_text())
    assert [f["type"] for f in report["failures"]] == ["DiskFullError"] * 3
    assert report["max_phy_offset_at_failure"] == report["max_phy_offset"]
    acked = report["acked"]
    assert len(acked) > 100
    assert {a["status"] for a in acked} == {"PUT_OK"}
    assert report["readable"] == len(acked)

    # A second process opens the store on the still full file system and finds exactly the
    # acknowledged messages.
    found = json.loads(verified.read_text())
    assert found["max_phy_offset"] == report["max_phy_offset"]

    def key(m: dict) -> tuple[int, int, int, int]:
        return m["i"], m["q"], m["qo"], m["phy"]

    assert sorted(map(key, found["messages"])) == sorted(map(key, acked))
