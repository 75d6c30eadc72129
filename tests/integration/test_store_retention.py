"""Retention: expired CommitLog segments are deleted, the queues' min offsets follow, and reads
of the deleted range say OFFSET_TOO_SMALL."""

import os
import threading
import time
from pathlib import Path

import pytest

from pyrmq.errors import ConfigError, DiskFullError
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = pytest.mark.integration

SEGMENT = 64 * 1024
CQ_UNITS = 50
# Disk use can never exceed 100 %, so only the hour or `force` triggers deletion.
NEVER_TIGHT = {
    "disk_max_used_space_ratio": 100,
    "disk_space_clean_forcibly_ratio": 100,
    "disk_space_warning_level_ratio": 100,
}
CONFIG = {
    "mapped_file_size_commit_log": SEGMENT,
    "mapped_file_size_consume_queue": 20 * CQ_UNITS,
    "delete_when": "04",
    "file_reserved_time_hours": 72,
    **NEVER_TIGHT,
}
FAR_FUTURE_MS = (time.time_ns() // 1_000_000) + 1000 * 3_600_000


def at_local_hour(ms: int, hour: int) -> int:
    """``ms`` moved (by less than a day) to half past ``hour`` in local time."""
    for _ in range(3):  # a second step only if a DST change lies in between
        t = time.localtime(ms / 1000)
        if t.tm_hour == hour:
            return ms
        ms += ((hour - t.tm_hour) * 3600 - t.tm_min * 60 - t.tm_sec + 1800) * 1000
    raise AssertionError(f"cannot reach local hour {hour}")


def body(i: int) -> bytes:
    return i.to_bytes(4, "big") * 300


def fill(store: MessageStore, segments: int) -> dict[int, list[tuple[int, int]]]:
    """Writes until the log has ``segments`` segments; returns per queue (phy, index) lists."""
    sent: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    i = 0
    while store.max_phy_offset < (segments - 1) * SEGMENT + SEGMENT // 2:
        q = i % 2
        r = store.put("TopicOld", body(i), queue_id=q, keys=f"k{i}")
        assert r.queue_offset == len(sent[q])
        sent[q].append((r.phy_offset, i))
        i += 1
    return sent


def segments(root: Path) -> list[str]:
    """The segment files; while a store is open, the last is prepared (empty) ahead of the
    roll."""
    return sorted(os.listdir(root / "commitlog"))


def check_queue(store: MessageStore, q: int, sent: list[tuple[int, int]]) -> int:
    """The queue's min offset is the first message whose segment survived; returns it."""
    min_phy = store.min_phy_offset
    expected_min = next(o for o, (phy, _) in enumerate(sent) if phy >= min_phy)
    assert store.min_offset("TopicOld", q) == expected_min
    assert store.max_offset("TopicOld", q) == len(sent)
    for offset in (0, expected_min // 2, expected_min - 1):
        got = store.get("TopicOld", q, offset)
        assert got.status is GetMessageStatus.OFFSET_TOO_SMALL, offset
        assert got.next_begin_offset == expected_min
        assert (got.message_count, got.buffer, got.corrupt_offsets) == (0, b"", [])
        assert got.min_offset == expected_min
    # From the min offset on, every message is intact.
    offset = expected_min
    while offset < len(sent):
        got = store.get("TopicOld", q, offset)
        assert got.status is GetMessageStatus.FOUND
        assert got.corrupt_offsets == []
        assert got.queue_offsets[0] == offset
        for m in got.messages():
            assert m.body == body(sent[m.queue_offset][1])
            assert m.phy_offset == sent[m.queue_offset][0]
        offset = got.next_begin_offset
    assert store.earliest_store_time("TopicOld", q) == store.store_time("TopicOld", q, expected_min)
    return expected_min


def test_forced_retention_deletes_all_but_the_active_segment(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    sent = fill(store, 5)
    before = segments(root)
    assert before == [f"{k * SEGMENT:020d}" for k in range(6)]
    cq_before = {q: sorted(os.listdir(root / "consumequeue" / "TopicOld" / str(q))) for q in (0, 1)}
    max_phy = store.max_phy_offset

    deleted = store.delete_expired_files(FAR_FUTURE_MS, force=True)
    assert deleted == 4
    assert segments(root) == before[-2:]
    assert store.min_phy_offset == 4 * SEGMENT
    assert store.max_phy_offset == max_phy

    mins = {}
    for q in (0, 1):
        mins[q] = check_queue(store, q, sent[q])
        assert mins[q] > 0
        # ConsumeQueue files holding only deleted units are gone; the one holding the new min
        # offset stays.
        cq_files = sorted(os.listdir(root / "consumequeue" / "TopicOld" / str(q)))
        assert len(cq_files) < len(cq_before[q])
        first = int(cq_files[0])
        assert first <= mins[q] * 20 < first + 20 * CQ_UNITS
    # Deleted messages are gone from lookups and the key index as well.
    first_phy, first_index = sent[0][0]
    assert store.look_message_by_offset(first_phy) is None
    assert store.query_message("TopicOld", f"k{first_index}") == []
    last_phy, last_index = sent[1][-1]
    assert [m.body for m in store.query_message("TopicOld", f"k{last_index}")] == [body(last_index)]
    assert store.look_message_by_offset(last_phy).body == body(last_index)

    # Nothing else is deletable: the active segment stays, and the one prepared after it.
    assert store.delete_expired_files(FAR_FUTURE_MS, force=True) == 0
    assert segments(root) == before[-2:]
    # Writes continue.
    r = store.put("TopicOld", b"new", queue_id=0)
    assert (r.phy_offset, r.queue_offset) == (max_phy, len(sent[0]))
    store.close()

    store = open_store(root, **CONFIG)
    assert store.min_phy_offset == 4 * SEGMENT
    for q in (0, 1):
        assert store.min_offset("TopicOld", q) == mins[q]
        assert store.get("TopicOld", q, 0).status is GetMessageStatus.OFFSET_TOO_SMALL
    assert store.get("TopicOld", 0, len(sent[0])).messages()[0].body == b"new"


def test_nothing_is_deleted_outside_the_delete_hour(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    sent = fill(store, 4)
    before = segments(root)
    noon = at_local_hour(FAR_FUTURE_MS, 12)
    assert store.delete_expired_files(noon) == 0
    assert segments(root) == before
    assert store.min_phy_offset == 0
    for q in (0, 1):
        assert store.min_offset("TopicOld", q) == 0
        assert [m.body for m in store.get("TopicOld", q, 0, max_count=3).messages()] == [
            body(i) for _, i in sent[q][:3]
        ]
    # At the delete hour, expired segments go without force.
    assert store.delete_expired_files(at_local_hour(FAR_FUTURE_MS, 4)) == 3
    assert segments(root) == before[-2:]
    for q in (0, 1):
        check_queue(store, q, sent[q])


def test_unexpired_segments_stay_even_at_the_delete_hour(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    fill(store, 3)
    before = segments(root)
    now = time.time_ns() // 1_000_000
    # 72 hours of reserve time have not passed, not even with force.
    assert store.delete_expired_files(at_local_hour(now, 4)) == 0
    assert store.delete_expired_files(now, force=True) == 0
    assert segments(root) == before
    # They have once the reserve time is over.
    assert store.delete_expired_files(now + 73 * 3_600_000, force=True) == 2
    assert segments(root) == before[-2:]


def test_disk_above_the_forcible_ratio_deletes_the_oldest_segment_unexpired(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    sent = fill(store, 4)
    store.close()
    # Any disk is fuller than 1 %: one oldest segment goes per pass, expired or not.
    tight = {**CONFIG, "disk_space_clean_forcibly_ratio": 1, "disk_max_used_space_ratio": 1}
    store = open_store(root, **tight)
    before = segments(root)
    now = time.time_ns() // 1_000_000
    assert store.delete_expired_files(at_local_hour(now, 12)) == 1
    assert segments(root) == before[1:]
    assert store.min_phy_offset == SEGMENT
    for q in (0, 1):
        check_queue(store, q, sent[q])
    assert store.delete_expired_files(at_local_hour(now, 12)) == 1
    assert segments(root) == before[2:]
    for q in (0, 1):
        check_queue(store, q, sent[q])


def test_a_disk_past_the_warning_level_is_cleaned_forcibly_whatever_that_ratio_says(
    open_store, tmp_path
):
    """As RocketMQ, a disk fuller than ``diskSpaceWarningLevelRatio`` is cleaned as forcibly
    as one past ``diskSpaceCleanForciblyRatio``: writes stop there, so a forced clean-up set
    above it would never come (such a configuration was refused)."""
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    fill(store, 4)
    store.close()
    tight = {**CONFIG, "disk_space_warning_level_ratio": 1, "disk_max_used_space_ratio": 1}
    store = open_store(root, **tight)
    before = segments(root)
    now = time.time_ns() // 1_000_000
    assert store.delete_expired_files(at_local_hour(now, 12)) == 1
    assert segments(root) == before[1:]


def test_offset_for_time_after_retention(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    sent = fill(store, 4)
    store.delete_expired_files(FAR_FUTURE_MS, force=True)
    for q in (0, 1):
        low = store.min_offset("TopicOld", q)
        assert low > 0
        assert store.offset_for_time("TopicOld", q, 0) == low
        assert store.offset_for_time("TopicOld", q, 0, boundary="upper") == low
        assert store.offset_for_time("TopicOld", q, FAR_FUTURE_MS, boundary="upper") == (
            len(sent[q]) - 1
        )
        assert store.offset_for_time("TopicOld", q, FAR_FUTURE_MS) == len(sent[q])
        ts = store.store_time("TopicOld", q, len(sent[q]) - 1)
        assert store.offset_for_time("TopicOld", q, ts + 1) == len(sent[q])
        first_at_ts = store.offset_for_time("TopicOld", q, ts)
        assert low <= first_at_ts <= len(sent[q]) - 1
        assert store.store_time("TopicOld", q, first_at_ts) == ts


def test_reads_racing_retention_never_see_garbage(open_store, tmp_path, record_decoder, wait_until):
    root = tmp_path / "store"
    # Disk use is always above 1 %: each pass deletes exactly the oldest segment.
    tight = {**CONFIG, "disk_space_clean_forcibly_ratio": 1, "disk_max_used_space_ratio": 1}
    store = open_store(root, **tight)
    sent = fill(store, 6)
    stop = threading.Event()
    errors: list[BaseException] = []
    passes = dict.fromkeys((0, 1), 0)
    statuses: set[GetMessageStatus] = set()

    def reader(q: int) -> None:
        try:
            while not stop.is_set():
                offset = 0
                while offset < len(sent[q]):
                    got = store.get("TopicOld", q, offset)
                    statuses.add(got.status)
                    assert got.corrupt_offsets == []
                    if got.status is GetMessageStatus.OFFSET_FOUND_NULL:
                        # The queue file went before the min offset moved: ask again.
                        assert got.next_begin_offset == offset
                        assert (got.message_count, got.buffer) == (0, b"")
                        continue
                    assert got.next_begin_offset > offset
                    if got.status is GetMessageStatus.FOUND:
                        assert got.queue_offsets[0] >= offset
                        for view, qo in zip(got.views(), got.queue_offsets, strict=True):
                            rec = record_decoder(view)
                            assert rec["queue_offset"] == qo
                            assert rec["body"] == body(sent[q][qo][1])
                    else:
                        # Deleted under the reader: nothing returned, and it moves on.
                        assert got.status in (
                            GetMessageStatus.OFFSET_TOO_SMALL,
                            GetMessageStatus.MESSAGE_WAS_REMOVING,
                        )
                        assert (got.message_count, got.buffer) == (0, b"")
                    offset = got.next_begin_offset
                passes[q] += 1
        except BaseException as exc:
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=reader, args=(q,)) for q in (0, 1)]
    for t in threads:
        t.start()
    try:
        now = time.time_ns() // 1_000_000
        for k in range(5):
            seen = dict(passes)
            wait_until(
                lambda seen=seen: stop.is_set() or all(passes[q] > seen[q] + 1 for q in passes),
                30,
                "readers to pass over the queue",
            )
            assert store.delete_expired_files(at_local_hour(now, 12)) == 1
            assert store.min_phy_offset == (k + 1) * SEGMENT
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[0]
    assert GetMessageStatus.FOUND in statuses
    assert GetMessageStatus.OFFSET_TOO_SMALL in statuses
    for q in (0, 1):
        check_queue(store, q, sent[q])


def test_retention_settings_change_while_the_store_is_open(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, **CONFIG)
    sent = fill(store, 4)
    before = segments(root)
    now = time.time_ns() // 1_000_000
    # A noon after the segments were written: today's has passed once the test runs after it.
    noon = at_local_hour(now + 86_400_000, 12)
    assert noon > now
    assert store.delete_expired_files(noon) == 0  # 04 is the delete hour, 72 h the reserve
    store.set_retention({"delete_when": "12;13", "file_reserved_time_hours": 0})
    assert store.retention() == {
        "file_reserved_time_hours": 0,
        "delete_when": "12;13",
        **NEVER_TIGHT,
    }
    assert store.delete_expired_files(noon) == 3
    assert segments(root) == before[-2:]
    for q in (0, 1):
        check_queue(store, q, sent[q])

    # A clock before every segment's time expires none of them.
    assert store.delete_expired_files(-(2**63), force=True) == 0
    assert segments(root) == before[-2:]

    # A warning level below the disk's use refuses writes at once, and lifting it lets them in.
    store.set_retention({"disk_space_warning_level_ratio": 1, "disk_space_clean_forcibly_ratio": 1})
    assert store.is_disk_full
    with pytest.raises(DiskFullError, match="diskSpaceWarningLevelRatio 1%"):
        store.put("TopicOld", b"refused")
    store.set_retention(NEVER_TIGHT)
    assert not store.is_disk_full
    store.put("TopicOld", b"accepted")

    # Anything else, or a bad value, is refused and changes nothing.
    settled = store.retention()
    for bad, reason in (
        ({"mapped_file_size_commit_log": SEGMENT * 2}, "cannot change while the store is open"),
        ({"file_reserved_time_hours": 1, "disk_max_used_space_ratio": 0}, "not in \\[1, 100\\]"),
        ({"delete_when": "24"}, "bad delete_when"),
        ({"file_reserved_time_hours": 2**62}, "file_reserved_time_hours .* is not in"),
        ({"disk_space_warning_level_ratio": 0}, "disk_space_warning_level_ratio"),
    ):
        with pytest.raises(ConfigError, match=reason):
            store.set_retention(bad)
    assert store.retention() == settled
