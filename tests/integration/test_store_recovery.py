"""Damage written to the CommitLog files behind the store's back: a flipped byte in place is
reported and kept, a torn tail is cut back to the last intact put."""

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import SMALL_STORE
from tests.helpers import client_batch

from pyrmq.errors import ConfigError, CorruptRecordError, StoreError
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = pytest.mark.integration

SEGMENT = 64 * 1024
FENCE = 20


def segment_path(root: Path, phy: int) -> Path:
    return root / "commitlog" / f"{phy - phy % SEGMENT:020d}"


def patch(root: Path, phy: int, data: bytes) -> None:
    """Overwrites CommitLog bytes at ``phy`` (which must not cross a segment end)."""
    assert phy % SEGMENT + len(data) <= SEGMENT
    with open(segment_path(root, phy), "r+b") as f:
        f.seek(phy % SEGMENT)
        f.write(data)


def read_log(root: Path, start: int, end: int) -> bytes:
    with open(segment_path(root, start), "rb") as f:
        f.seek(start % SEGMENT)
        return f.read(end - start)


def mark_crashed(root: Path, *, lose_checkpoint: bool) -> None:
    """Makes the next open treat the last stop as a crash."""
    (root / "abort").write_bytes(b"")
    if lose_checkpoint:
        (root / "checkpoint").unlink()


def read_queue(store: MessageStore, topic: str, queue_id: int, decoder) -> list[bytes]:
    """Bodies of a whole queue; every record must be intact."""
    bodies = []
    offset = store.min_offset(topic, queue_id)
    while True:
        got = store.get(topic, queue_id, offset)
        assert got.corrupt_offsets == []
        if got.status is not GetMessageStatus.FOUND:
            assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            return bodies
        assert got.queue_offsets == list(range(offset, offset + got.message_count))
        for view, qo in zip(got.views(), got.queue_offsets, strict=True):
            rec = decoder(view)
            assert (rec["topic"], rec["queue_id"], rec["queue_offset"]) == (topic, queue_id, qo)
            bodies.append(rec["body"])
        offset = got.next_begin_offset


# --- a flipped body byte in the middle of a segment -------------------------------------------


def corrupt_body(i: int) -> bytes:
    return bytes((i * 31 + j) % 256 for j in range(700 + i))


@pytest.mark.parametrize("reopen", ["clean", "crash", "crash-without-checkpoint"], ids=lambda r: r)
def test_flipped_body_byte_is_reported_and_never_truncated(
    open_store, tmp_path, record_decoder, reopen
):
    root = tmp_path / "store"
    config = {"mapped_file_size_commit_log": SEGMENT}
    store = open_store(root, **config)
    sent = [store.put("TopicCorrupt", corrupt_body(i), keys=f"k{i}") for i in range(60)]
    other = store.put("TopicOther", b"unrelated")
    max_phy = store.max_phy_offset
    store.close()

    bad = 30
    # In the middle of the first (and only) segment.
    assert SEGMENT // 4 < sent[bad].phy_offset < SEGMENT * 3 // 4
    assert max_phy < SEGMENT
    flip_at = sent[bad].phy_offset + 88 + 400
    original = read_log(root, flip_at, flip_at + 1)
    patch(root, flip_at, bytes([original[0] ^ 0x5A]))
    if reopen != "clean":
        mark_crashed(root, lose_checkpoint=reopen == "crash-without-checkpoint")

    for _ in range(2):  # and once more: a second recovery must not cut anything either
        store = open_store(root, **config)
        assert store.max_phy_offset == max_phy
        assert store.max_offset("TopicCorrupt", 0) == 60
        assert store.min_offset("TopicCorrupt", 0) == 0

        got = store.get("TopicCorrupt", 0, bad - 5, max_count=10)
        assert got.status is GetMessageStatus.FOUND
        assert got.corrupt_offsets == [bad]
        expected = [q for q in range(bad - 5, bad + 5) if q != bad]
        assert got.queue_offsets == expected
        assert [record_decoder(v)["body"] for v in got.views()] == [
            corrupt_body(q) for q in expected
        ]
        assert got.next_begin_offset == bad + 5

        only_bad = store.get("TopicCorrupt", 0, bad, max_count=1)
        assert only_bad.corrupt_offsets == [bad]
        assert (only_bad.message_count, only_bad.buffer) == (0, b"")
        assert only_bad.next_begin_offset == bad + 1

        with pytest.raises(CorruptRecordError) as err:
            store.look_message_by_offset(sent[bad].phy_offset)
        assert err.value.phy_offset == sent[bad].phy_offset
        with pytest.raises(CorruptRecordError):
            store.view_message_by_id(sent[bad].msg_id)
        for i in (0, bad - 1, bad + 1, 59):
            assert store.look_message_by_offset(sent[i].phy_offset).body == corrupt_body(i)
        assert store.get("TopicOther", 0, 0).messages()[0].body == b"unrelated"
        assert store.view_message_by_id(other.msg_id).body == b"unrelated"
        store.close()
        (root / "abort").write_bytes(b"")

    # The store still appends after the damage.
    store = open_store(root, **config)
    r = store.put("TopicCorrupt", b"after")
    assert (r.phy_offset, r.queue_offset) == (max_phy, 60)


# Offsets in a record with IPv4 hosts: the flag, the last byte of the queue offset, and (from
# the record's end) a byte of the last property's value.
HEADER_BYTES = {"flag": 16, "queue offset": 27, "property": -3}


@pytest.mark.parametrize("field", HEADER_BYTES, ids=lambda f: f.replace(" ", "-"))
@pytest.mark.parametrize("reopen", ["clean", "crash"])
def test_a_flipped_byte_outside_the_body_is_reported_and_never_served(
    open_store, tmp_path, field, reopen
):
    """The body CRC does not cover the other fields: the checksum of the record's append group
    does, and reads check it."""
    root = tmp_path / "store"
    config = {"mapped_file_size_commit_log": SEGMENT}
    store = open_store(root, **config)
    sent = [
        store.put("TopicHead", b"body-%d" % i, keys=f"k{i}", properties={"color": "blue"})
        for i in range(20)
    ]
    bad = sent[10]
    size = store.look_message_by_offset(bad.phy_offset).store_size
    store.close()
    at = bad.phy_offset + (HEADER_BYTES[field] % size)
    patch(root, at, bytes([read_log(root, at, at + 1)[0] ^ 0x01]))
    if reopen == "crash":
        mark_crashed(root, lose_checkpoint=False)

    store = open_store(root, **config)
    got = store.get("TopicHead", 0, 8, max_count=5)
    assert got.status is GetMessageStatus.FOUND
    assert got.corrupt_offsets == [10]
    assert got.queue_offsets == [8, 9, 11, 12]
    assert [m.body for m in got.messages()] == [b"body-8", b"body-9", b"body-11", b"body-12"]
    assert all(m.property("color") == "blue" for m in got.messages())
    with pytest.raises(CorruptRecordError):
        store.look_message_by_offset(bad.phy_offset)
    with pytest.raises(CorruptRecordError):
        store.view_message_by_id(bad.msg_id)
    assert store.query_message("TopicHead", "k10") == []
    assert [m.body for m in store.query_message("TopicHead", "k11")] == [b"body-11"]
    # Nothing was cut: the store appends after the damage.
    assert store.put("TopicHead", b"after").queue_offset == 20


def test_a_unit_naming_another_queue_s_record_is_reported_not_served(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    for i in range(20):
        store.put("TopicSwap", b"q%d-%d" % (i % 2, i // 2), queue_id=i % 2)
    store.close()
    queue = root / "consumequeue" / "TopicSwap"
    unit = (queue / "1" / f"{0:020d}").read_bytes()[7 * 20 : 8 * 20]
    with open(queue / "0" / f"{0:020d}", "r+b") as f:
        f.seek(5 * 20)
        f.write(unit)

    store = open_store(root)
    got = store.get("TopicSwap", 0, 4, max_count=3)
    assert got.corrupt_offsets == [5]
    assert [m.body for m in got.messages()] == [b"q0-4", b"q0-6"]
    assert [m.body for m in store.get("TopicSwap", 1, 7, max_count=1).messages()] == [b"q1-7"]


def test_a_slave_cuts_its_log_at_a_damaged_record_for_its_master_to_send_again(
    open_store, tmp_path
):
    """A slave's recovery does not keep damage in place: its master has the record, and sends
    it and what follows again from the slave's shorter end (kept, it was never fetched again
    and the slave served the message as corrupt for good)."""
    root = tmp_path / "store"
    config = {"mapped_file_size_commit_log": SEGMENT}
    store = open_store(root, **config)
    sent = [store.put("TopicCorrupt", corrupt_body(i)) for i in range(60)]
    store.close()
    bad = 30
    flip_at = sent[bad].phy_offset + 88 + 400
    patch(root, flip_at, bytes([read_log(root, flip_at, flip_at + 1)[0] ^ 0x5A]))
    mark_crashed(root, lose_checkpoint=True)

    store = open_store(root, **config, broker_role="SLAVE")
    assert store.max_phy_offset == sent[bad].phy_offset
    assert store.max_offset("TopicCorrupt", 0) == bad
    got = store.get("TopicCorrupt", 0, bad - 1)
    assert (got.queue_offsets, got.corrupt_offsets) == ([bad - 1], [])


# --- a torn tail at every byte of the last puts ---------------------------------------------


def torn_body(i: int) -> bytes:
    return bytes((i * 7 + j * 13) % 251 for j in range(5 + i % 29))


FILLER = 25
SMALL = 8
TORN_CONFIG = {"mapped_file_size_commit_log": SEGMENT, "message_index_enable": False}


def build_torn_template(root: Path, open_store, *, stale_checkpoint: bool) -> list[tuple[int, int]]:
    """Fills the first segment with large puts, then puts SMALL small ones into the second.
    Returns every small put's (start, end) CommitLog offsets; a put's group ends with its fence.

    With ``stale_checkpoint`` the checkpoint on disk predates the last three puts and the abort
    marker is left behind, as when a process dies before its next checkpoint.
    """
    store = open_store(root, **TORN_CONFIG)
    for i in range(FILLER):
        store.put("TopicFiller", bytes([i]) * 3000)
    groups = []

    def put_small(i: int) -> None:
        r = store.put("TopicTorn", torn_body(i), tags=f"Tag{i % 3}")
        size = len(store.get("TopicTorn", 0, r.queue_offset, max_count=1).buffer)
        assert r.wrote_bytes == size + FENCE
        groups.append((r.phy_offset, r.phy_offset + r.wrote_bytes))

    for i in range(SMALL - 3):
        put_small(i)
    if stale_checkpoint:
        store.close()
        old_checkpoint = (root / "checkpoint").read_bytes()
        store = open_store(root, **TORN_CONFIG)
    for i in range(SMALL - 3, SMALL):
        put_small(i)
    store.close()
    if stale_checkpoint:
        (root / "checkpoint").write_bytes(old_checkpoint)
        (root / "abort").write_bytes(b"")
    assert groups[0][0] >= SEGMENT, "the small puts must be in the second segment"
    assert groups[-1][1] < 2 * SEGMENT
    return groups


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("stale_checkpoint", [False, True], ids=["clean-close", "crash"])
@pytest.mark.parametrize("mode", ["zero", "garble"])
def test_torn_tail_keeps_exactly_the_intact_puts(
    open_store, make_config, tmp_path, record_decoder, mode, stale_checkpoint
):
    template = tmp_path / "template"
    groups = build_torn_template(template, open_store, stale_checkpoint=stale_checkpoint)
    data_start, data_end = groups[-3][0], groups[-1][1]
    original = read_log(template, data_start, data_end)
    filler_end = groups[0][0]

    for p in range(data_start, data_end):
        if mode == "zero":
            damage = bytes(data_end - p)
            # Zeroing changes nothing where the bytes were zero already.
            changed = next((q for q in range(p, data_end) if original[q - data_start]), data_end)
        else:
            rng = random.Random(p)
            damage = bytes(
                b ^ rng.randint(1, 255) for b in original[p - data_start : data_end - data_start]
            )
            changed = p
        kept = [g for g in groups if g[1] <= changed]
        expect_end = kept[-1][1] if kept else filler_end

        case = tmp_path / f"case-{p}"
        shutil.copytree(template, case)
        patch(case, p, damage)
        # Opened directly (not through the fixture) so each case's store is dropped at once.
        store = MessageStore.open(case, make_config(**TORN_CONFIG), background_services=False)
        where = f"p={p} mode={mode} changed={changed}"
        assert store.max_phy_offset == expect_end, where
        assert store.max_offset("TopicTorn", 0) == len(kept), where
        assert read_queue(store, "TopicTorn", 0, record_decoder) == [
            torn_body(i) for i in range(len(kept))
        ], where
        assert store.max_offset("TopicFiller", 0) == FILLER, where
        if len(kept) < len(groups):
            assert store.look_message_by_offset(groups[len(kept)][0]) is None, where
        # Appends resume at the recovered end.
        r = store.put("TopicTorn", b"after")
        assert (r.phy_offset, r.queue_offset) == (expect_end, len(kept)), where
        assert store.get("TopicTorn", 0, len(kept)).messages()[0].body == b"after", where
        store.close()
        del store
        shutil.rmtree(case)


# --- segment files of the wrong size ----------------------------------------------------------


def write_sized_template(open_store, root: Path) -> tuple[int, bytes]:
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    for i in range(10):
        store.put("TopicSize", torn_body(i))
    max_phy = store.max_phy_offset
    store.close()
    return max_phy, read_log(root, 0, SEGMENT)


def assert_intact(open_store, root: Path, max_phy: int) -> None:
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert store.max_phy_offset == max_phy
    assert [m.body for m in store.get("TopicSize", 0, 0).messages()] == [
        torn_body(i) for i in range(10)
    ]


@pytest.mark.parametrize("other_size", [SEGMENT // 2, SEGMENT * 2])
def test_reopening_with_another_segment_size_refuses_and_keeps_the_data(
    open_store, make_config, tmp_path, other_size
):
    """As RocketMQ refuses to load a segment whose length differs from the configured size."""
    root = tmp_path / "store"
    max_phy, log = write_sized_template(open_store, root)
    segments = sorted(os.listdir(root / "commitlog"))
    with pytest.raises((StoreError, ConfigError)):
        MessageStore.open(
            root, make_config(mapped_file_size_commit_log=other_size), background_services=False
        )
    # Nothing was deleted or changed: the data is still there with the right setting.
    assert sorted(os.listdir(root / "commitlog")) == segments
    assert read_log(root, 0, SEGMENT) == log
    assert_intact(open_store, root, max_phy)


def test_a_shortened_segment_holding_data_is_not_deleted(open_store, make_config, tmp_path):
    root = tmp_path / "store"
    max_phy, log = write_sized_template(open_store, root)
    os.truncate(segment_path(root, 0), max_phy)
    with pytest.raises((StoreError, ConfigError)):
        MessageStore.open(
            root, make_config(mapped_file_size_commit_log=SEGMENT), background_services=False
        )
    assert segment_path(root, 0).read_bytes() == log[:max_phy]


def test_an_empty_segment_left_by_an_interrupted_roll_is_removed(open_store, tmp_path):
    root = tmp_path / "store"
    max_phy, _ = write_sized_template(open_store, root)
    # The process died between creating the next segment and sizing it.
    segment_path(root, SEGMENT).write_bytes(b"")
    (root / "abort").write_bytes(b"")
    assert_intact(open_store, root, max_phy)
    assert sorted(os.listdir(root / "commitlog")) == [f"{0:020d}"]


# --- ConsumeQueues removed while the store was closed -----------------------------------------


def queue_state(store: MessageStore) -> dict[tuple[str, int], tuple[int, int, list]]:
    """Each queue's min and max offsets and its units from the min on."""
    state = {}
    for topic, queue_id in store.queue_ids():
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        state[(topic, queue_id)] = (
            low,
            high,
            store.consume_queue_units(topic, queue_id, low, high),
        )
    return state


@pytest.mark.parametrize("index", ["kept", "removed"])
@pytest.mark.parametrize("reopen", ["clean", "crash"])
def test_removed_consume_queues_are_rebuilt_from_the_commit_log(
    open_store, tmp_path, reopen, index
):
    """As RocketMQ's reput starts from the furthest queue's end: with none left, from the start,
    and an index directory removed with them is rebuilt too."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    for i in range(120):
        store.put("TopicRebuild", b"one-%d" % i, queue_id=i % 3, tags="TagA" if i % 2 else "TagB")
    store.put_batch("TopicBatch", [b"batch-%d" % i for i in range(40)], queue_id=1, keys="b-key")
    store.put("TopicRebuild", b"last", queue_id=2, keys="last-key")
    before = queue_state(store)
    records = sum(high - low for low, high, _ in before.values())
    store.close()
    shutil.rmtree(root / "consumequeue")
    if index == "removed":
        shutil.rmtree(root / "index")
    if reopen == "crash":
        mark_crashed(root, lose_checkpoint=False)

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert store.recovery["records"] == records == 161
    assert queue_state(store) == before
    got = store.get("TopicRebuild", 1, 0, tags="TagA")
    assert [m.body for m in got.messages()] == [b"one-%d" % i for i in range(1, 120, 6)]
    assert [m.body for m in store.query_message("TopicRebuild", "last-key")] == [b"last"]
    batch = store.query_message("TopicBatch", "b-key", max_count=100)
    assert sorted(m.body for m in batch) == sorted(b"batch-%d" % i for i in range(40))
    # Reopening again finds every queue in place and dispatches nothing.
    store.close()
    assert open_store(root, mapped_file_size_commit_log=SEGMENT).recovery["records"] == 0


def test_rebuilt_consume_queues_start_at_the_first_kept_record(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT, file_reserved_time_hours=1)
    for i in range(1500):
        store.put("TopicRetained", b"r-%05d" % i + bytes(60), queue_id=i % 2)
    later_ms = store.store_time("TopicRetained", 0, 0) + 2 * 3_600_000
    assert store.delete_expired_files(later_ms, force=True) > 0
    before = queue_state(store)
    assert all(low > 0 for low, _, _ in before.values())
    store.close()
    shutil.rmtree(root / "consumequeue")

    store = open_store(root, mapped_file_size_commit_log=SEGMENT, file_reserved_time_hours=1)
    assert queue_state(store) == before
    low = before[("TopicRetained", 0)][0]
    stale = store.get("TopicRetained", 0, 0)
    assert (stale.status, stale.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, low)
    first = store.get("TopicRetained", 0, low, max_count=1).messages()[0]
    assert first.body[:7] == b"r-%05d" % (2 * low)


# --- a directory written by Apache RocketMQ ---------------------------------------------------

BODY_AT = 88
"""Bytes before a stored message's body (IPv4 hosts): RocketMQ's fixed header."""


def rocketmq_layout(raw: bytes, phy: int, *, v2: bool) -> bytes:
    """A record as RocketMQ stores it at ``phy``: no fence follows it. RocketMQ 5's second
    layout (v2 magic) gives the topic length two bytes instead of one."""
    rec = bytearray(raw)
    rec[28:36] = phy.to_bytes(8, "big")
    if v2:
        topic_len_at = BODY_AT + int.from_bytes(rec[BODY_AT - 4 : BODY_AT], "big")
        rec[topic_len_at : topic_len_at + 1] = rec[topic_len_at].to_bytes(2, "big")
        rec[4:8] = (0xDAA320AB).to_bytes(4, "big")
    rec[0:4] = len(rec).to_bytes(4, "big")
    return bytes(rec)


@pytest.mark.parametrize("v2", [False, True], ids=["v1-magic", "v2-magic"])
@pytest.mark.parametrize("state", ["clean", "crashed", "no-checkpoint"])
def test_a_rocketmq_commit_log_is_refused_and_left_untouched(open_store, tmp_path, v2, state):
    """Its records carry no fences, so recovery would truncate them all as a torn tail."""
    made = open_store(tmp_path / "made", mapped_file_size_commit_log=SEGMENT)
    raws = [
        made.look_record(made.put("TopicRmq", b"rmq-%d" % i, keys=f"k{i}").phy_offset)
        for i in range(30)
    ]
    made.close()
    root = tmp_path / "rocketmq"
    (root / "commitlog").mkdir(parents=True)
    log = bytearray(SEGMENT)
    at = 0
    for raw in raws:
        rec = rocketmq_layout(raw, at, v2=v2)
        log[at : at + len(rec)] = rec
        at += len(rec)
    segment_path(root, 0).write_bytes(bytes(log))
    if state != "no-checkpoint":
        # RocketMQ's checkpoint: three store timestamps, then zeros to a page.
        (root / "checkpoint").write_bytes((1_700_000_000_000).to_bytes(8, "big") * 3 + bytes(4072))
    if state == "crashed":
        (root / "abort").write_bytes(b"")
    before = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    with pytest.raises(ConfigError, match="RocketMQ"):
        MessageStore.open(root, {"mapped_file_size_commit_log": SEGMENT}, background_services=False)
    after = {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert {name: data for name, data in after.items() if name in before} == before


def test_a_first_put_torn_by_a_crash_is_still_truncated(open_store, tmp_path):
    """The store's own checkpoint, written before its first put, tells such a group from a
    RocketMQ log: it is cut back as any torn tail."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    r = store.put_batch("TopicFirst", [b"first-%d" % i for i in range(5)])
    fence_at = r.end_offset - FENCE
    store.close()
    patch(root, fence_at, bytes(FENCE))
    mark_crashed(root, lose_checkpoint=False)

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert store.max_phy_offset == 0
    assert store.recovery["truncated_bytes"] > 0
    assert store.max_offset("TopicFirst", 0) == 0
    assert store.put("TopicFirst", b"again").phy_offset == 0


def test_a_first_group_with_a_damaged_fence_is_kept_without_a_checkpoint(open_store, tmp_path):
    """Without its checkpoint the store still knows its own log by the fences after the damage."""
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    first = store.put_batch("TopicFence", [b"first-%d" % i for i in range(3)])
    later = [store.put("TopicFence", b"later-%d" % i) for i in range(5)]
    store.close()
    patch(root, first.end_offset - FENCE + 4, b"\0\0\0\0")  # the fence's magic code
    mark_crashed(root, lose_checkpoint=True)

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert store.recovery["corrupt_ranges"] == [(0, first.end_offset)]
    assert store.max_phy_offset == later[-1].end_offset
    got = store.get("TopicFence", 0, 3)
    assert [m.body for m in got.messages()] == [b"later-%d" % i for i in range(5)]


def test_index_files_of_another_geometry_are_indexed_again(open_store, tmp_path):
    """Index files written with other maxHashSlotNum/maxIndexNum settings cannot be read with
    these; they are replaced by an index of the same records in the new geometry."""
    root = tmp_path / "store"
    store = open_store(root, max_hash_slot_num=64, max_index_num=100)
    for i in range(120):
        store.put("TopicIdx", b"idx-%d" % i, keys=[f"k{i}", "shared"])
    assert len(list((root / "index").iterdir())) == 3
    store.close()

    store = open_store(root, max_hash_slot_num=128, max_index_num=300)
    assert store.recovery["records"] == 120
    assert [m.body for m in store.query_message("TopicIdx", "k7")] == [b"idx-7"]
    shared = store.query_message("TopicIdx", "shared", max_count=1000)
    assert sorted(m.body for m in shared) == sorted(b"idx-%d" % i for i in range(120))
    assert store.max_offset("TopicIdx", 0) == 120
    files = list((root / "index").iterdir())
    assert [f.stat().st_size for f in files] == [40 + 128 * 4 + 300 * 20]


@pytest.mark.parametrize("later", [False, True])
def test_index_files_dropped_from_inside_a_group_lose_none_of_it(open_store, tmp_path, later):
    """The first record the dropped file indexed may lie inside its group (a client batch whose
    first message has no key): recovery starts there and must still find the group intact."""
    root = tmp_path / "store"
    items = [(0, b"no-key", {}), (0, b"keyed-1", {"KEYS": "k1"}), (0, b"keyed-2", {"KEYS": "k2"})]
    store = open_store(root, max_hash_slot_num=100, max_index_num=1000)
    sent = store.put_encoded_batch("TopicIdx", client_batch(items))
    if later:
        store.put("TopicIdx", b"after", keys="k3")
    store.close()

    store = open_store(root, max_hash_slot_num=100, max_index_num=2000)
    assert store.recovery["truncated_bytes"] == 0
    assert store.recovery["corrupt_ranges"] == []
    got = store.get("TopicIdx", 0, 0, max_count=10)
    assert [m.body for m in got.messages()] == [b for _, b, _ in items] + [b"after"] * later
    for key, phy in (("k1", sent.phy_offsets[1]), ("k2", sent.phy_offsets[2])):
        assert [m.phy_offset for m in store.query_message("TopicIdx", key)] == [phy]
    assert store.put("TopicIdx", b"next").queue_offset == 3 + later


_REOPEN = """
import json, sys
from pyrmq.store import MessageStore
MessageStore.open(sys.argv[1], json.loads(sys.argv[2]), background_services=False)
print("opened", flush=True)
"""


def test_an_open_killed_while_it_indexes_again_leaves_the_index_to_the_next_one(
    open_store, tmp_path
):
    """The open that drops index files of another geometry is SIGKILLed as soon as they are
    gone, before it has indexed their records again: the next open does it."""
    root = tmp_path / "store"
    store = open_store(root, max_hash_slot_num=5000, max_index_num=400000)
    n = 40_000
    for i in range(n):
        store.put("TopicIdx", b"idx-%d" % i, queue_id=i % 4, keys=f"k{i}")
    store.close()
    old = sorted((root / "index").iterdir())
    reindexed = {**SMALL_STORE, "max_hash_slot_num": 4000, "max_index_num": 400000}
    with subprocess.Popen(
        [sys.executable, "-c", _REOPEN, str(root), json.dumps(reindexed)],
        stdout=subprocess.DEVNULL,
    ) as child:
        try:
            deadline = time.monotonic() + 60
            while all(f.exists() for f in old) and child.poll() is None:
                assert time.monotonic() < deadline
                time.sleep(0.0005)
        finally:
            child.kill()

    store = open_store(root, **reindexed)
    for i in range(0, n, 97):
        assert [m.body for m in store.query_message("TopicIdx", f"k{i}")] == [b"idx-%d" % i]


@pytest.mark.parametrize("cut", ["half", "header", "all"])
@pytest.mark.parametrize("which", [0, 1, 2], ids=["first", "middle", "last"])
def test_a_shortened_index_file_is_indexed_again(open_store, tmp_path, which, cut):
    """Cut to half its size, into its header or to nothing: a file whose header no longer says
    which records it held is taken to have held those between its neighbours (such a file's
    keys were once lost for good)."""
    root = tmp_path / "store"
    config = {"max_hash_slot_num": 64, "max_index_num": 100}
    store = open_store(root, **config)
    for i in range(120):
        store.put("TopicIdx", b"idx-%d" % i, keys=[f"k{i}", "shared"])
    store.close()
    files = sorted((root / "index").iterdir())
    assert len(files) == 3
    os.truncate(
        files[which], {"half": files[which].stat().st_size // 2, "header": 20, "all": 0}[cut]
    )

    store = open_store(root, **config)
    for i in (0, 30, 60, 90, 119):
        assert [m.body for m in store.query_message("TopicIdx", f"k{i}")] == [b"idx-%d" % i]
    shared = store.query_message("TopicIdx", "shared", max_count=1000)
    assert sorted(m.body for m in shared) == sorted(b"idx-%d" % i for i in range(120))


def test_records_indexed_again_are_found_within_their_own_time_range(open_store, tmp_path):
    """Indexed again into the last file, begun seconds after them, their times read as that
    file's beginning, and a query for their time range passed them by."""
    root = tmp_path / "store"
    config = {"max_hash_slot_num": 16, "max_index_num": 5}  # 4 entries a file
    store = open_store(root, **config)
    for name in "ABC":
        sent = [store.put("TopicIdx", b"%s%d" % (name.encode(), i), keys=f"{name}{i}")
                for i in range(4 if name != "C" else 2)]  # fmt: skip
        if name == "B":
            b0 = sent[0].store_timestamp_ms
        time.sleep(1.2 if name != "C" else 0)
    store.close()
    files = sorted((root / "index").iterdir())
    assert len(files) == 3
    os.truncate(files[1], 20)

    store = open_store(root, **config)
    for i in range(4):
        found = store.query_message("TopicIdx", f"B{i}", begin_ms=b0, end_ms=b0 + 999)
        assert [m.body for m in found] == [b"B%d" % i]
    assert [m.body for m in store.query_message("TopicIdx", "C1")] == [b"C1"]
    assert store.query_message("TopicIdx", "B0", begin_ms=b0 + 5_000) == []


def test_an_index_file_whose_header_counts_past_its_entries_is_indexed_again(open_store, tmp_path):
    root = tmp_path / "store"
    config = {"max_hash_slot_num": 64, "max_index_num": 100}
    store = open_store(root, **config)
    for i in range(50):
        store.put("TopicIdx", b"idx-%d" % i, keys=f"k{i}")
    store.close()
    [index] = (root / "index").iterdir()
    with open(index, "r+b") as f:
        f.seek(36)
        f.write((2**31 - 1).to_bytes(4, "big"))  # index_count
        f.seek(40)
        f.write((0x1000_0000).to_bytes(4, "big") * 64)  # every slot past the entries

    store = open_store(root, **config)
    for i in range(50):
        assert [m.body for m in store.query_message("TopicIdx", f"k{i}")] == [b"idx-%d" % i]
    store.put("TopicIdx", b"after", keys="k-after")
    assert [m.body for m in store.query_message("TopicIdx", "k-after")] == [b"after"]


def test_twenty_digit_names_beyond_64_bits_are_foreign_files(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    store.put("TopicFar", b"kept", keys="k")
    store.close()
    foreign = "9" * 20
    places = [root / "commitlog", root / "consumequeue" / "TopicFar" / "0", root / "index"]
    for place in places:
        (place / foreign).write_bytes(b"not ours")

    store = open_store(root)
    assert [m.body for m in store.get("TopicFar", 0, 0).messages()] == [b"kept"]
    assert [m.body for m in store.query_message("TopicFar", "k")] == [b"kept"]
    store.close()
    assert all((place / foreign).read_bytes() == b"not ours" for place in places)


def test_a_commit_log_directory_short_of_the_checkpoint_is_refused(open_store, tmp_path):
    """Pointing storePathCommitLog at another (empty) directory, or a disk not mounted, must not
    cut the queues down to it."""
    root = tmp_path / "store"
    store = open_store(root)
    for i in range(5):
        store.put("TopicMoved", b"m%d" % i)
    store.close()
    with pytest.raises(ConfigError, match="checkpoint"):
        open_store(root, store_path_commit_log=str(tmp_path / "elsewhere"))
    store = open_store(root)
    assert [m.body for m in store.get("TopicMoved", 0, 0).messages()] == [
        b"m%d" % i for i in range(5)
    ]


def test_a_queue_unit_pointing_past_the_log_is_rebuilt_from_its_record(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    for i in range(25):
        store.put("TopicUnit", b"msg-%d" % i)
    store.close()
    [cq] = (root / "consumequeue" / "TopicUnit" / "0").iterdir()
    with open(cq, "r+b") as f:
        f.seek(24 * 20)
        f.write((10**15).to_bytes(8, "big") + (200).to_bytes(4, "big") + bytes(8))

    store = open_store(root)
    assert store.max_offset("TopicUnit", 0) == 25
    [m] = store.get("TopicUnit", 0, 24).messages()
    assert (m.body, m.queue_offset) == (b"msg-24", 24)
    assert store.put("TopicUnit", b"new").queue_offset == 25


@pytest.mark.parametrize("damage", ["past_the_log", "zeroed"])
def test_a_damaged_unit_inside_a_queue_is_reported_and_the_rest_read(open_store, tmp_path, damage):
    """A zeroed unit is damage too: it was once passed over unreported, its message never
    delivered."""
    root = tmp_path / "store"
    store = open_store(root)
    for i in range(25):
        store.put("TopicUnit", b"msg-%d" % i)
    end = store.max_phy_offset
    store.close()
    [cq] = (root / "consumequeue" / "TopicUnit" / "0").iterdir()
    with open(cq, "r+b") as f:
        f.seek(12 * 20)
        if damage == "zeroed":
            f.write(bytes(20))
        else:
            f.write(end.to_bytes(8, "big") + (200).to_bytes(4, "big") + bytes(8))

    store = open_store(root)
    got = store.get("TopicUnit", 0, 0, max_count=100)
    assert got.corrupt_offsets == [12]
    assert [m.body for m in got.messages()] == [b"msg-%d" % i for i in range(25) if i != 12]
    assert got.next_begin_offset == 25
