"""A slave's store as a byte-for-byte copy of its master's: what read_replica gives,
append_replica writes and dispatches, and what it refuses without writing a byte."""

from pathlib import Path
from typing import Any

import pytest

from pyrmq.errors import ReplicationError, StoreReadOnlyError
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = pytest.mark.integration

SEGMENT = 64 * 1024
TOPIC = "TopicReplica"


def fill(master: MessageStore, count: int, *, start: int = 0) -> None:
    """Singles and batches, over four queues, with keys and a delayed message."""
    for i in range(start, start + count):
        master.put(TOPIC, b"body-%d-" % i * 7, tags=f"T{i % 3}", keys=[f"k{i}"], queue_id=i % 4)
        if i % 50 == 0:
            master.put_batch(TOPIC, [b"batch-%d-%d" % (i, j) for j in range(16)], queue_id=1)
    master.put(TOPIC, b"later", properties={"DELAY": "3"})


def copy(master: MessageStore, slave: MessageStore, *, start: int = 0, batch: int = 4096) -> int:
    """Replays the master's log into the slave as a master's HA service would; returns the
    number of frames."""
    pos, frames = start, 0
    while (chunk := master.read_replica(pos, batch)) is not None:
        data, after, damaged = chunk
        assert slave.append_replica(pos, data, damaged) == after
        pos, frames = after, frames + 1
    return frames


def queue_bytes(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> bytes:
    got = store.get(topic, queue_id, start, max_count=100_000, max_bytes=1 << 26)
    assert got.status in (GetMessageStatus.FOUND, GetMessageStatus.NO_MESSAGE_IN_QUEUE)
    return got.buffer


@pytest.fixture
def pair(open_store: Any, tmp_path: Path) -> tuple[MessageStore, MessageStore]:
    master = open_store(tmp_path / "master", mapped_file_size_commit_log=SEGMENT)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE")
    return master, slave


def test_a_replayed_log_is_the_masters_byte_for_byte_across_segment_rolls(
    pair: tuple[MessageStore, MessageStore], tmp_path: Path
) -> None:
    master, slave = pair
    fill(master, 600)
    assert master.max_phy_offset > 2 * SEGMENT
    frames = copy(master, slave)
    assert frames > 10
    assert slave.max_phy_offset == master.max_phy_offset
    assert sorted(slave.queue_ids()) == sorted(master.queue_ids())
    for topic, queue_id in master.queue_ids():
        assert slave.min_offset(topic, queue_id) == master.min_offset(topic, queue_id)
        assert slave.max_offset(topic, queue_id) == master.max_offset(topic, queue_id)
        assert queue_bytes(slave, topic, queue_id) == queue_bytes(master, topic, queue_id)
    assert [m.body for m in slave.query_message(TOPIC, "k123")] == [b"body-123-" * 7]
    # The master may have made its next segment ahead of need.
    segments = sorted(
        p.name
        for p in (tmp_path / "master" / "commitlog").iterdir()
        if int(p.name) < master.max_phy_offset
    )
    assert len(segments) >= 3
    assert segments == sorted(p.name for p in (tmp_path / "slave" / "commitlog").iterdir())
    for name in segments:
        data = (tmp_path / "master" / "commitlog" / name).read_bytes()
        copied = (tmp_path / "slave" / "commitlog" / name).read_bytes()
        end = master.max_phy_offset - int(name)
        assert copied[: max(0, end)] == data[: max(0, end)]


def test_frames_carry_whole_groups_and_a_frame_larger_than_asked_for_one_batch(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    master.put_batch(TOPIC, [b"x" * 1000] * 20, queue_id=0)
    master.put(TOPIC, b"small", queue_id=0)
    chunk = master.read_replica(0, 100)
    assert chunk is not None
    data, after, damaged = chunk
    assert damaged == 0
    # The batch's group (20 records and its fence) is sent whole, and nothing after it.
    assert after == len(data)
    assert 20 * 1000 < len(data) < master.max_phy_offset
    assert slave.append_replica(0, data) == after
    assert slave.max_offset(TOPIC, 0) == 20
    assert master.read_replica(master.max_phy_offset, 100) is None


def test_a_slave_rejoins_where_its_log_ends_after_a_reopen(
    pair: tuple[MessageStore, MessageStore], open_store: Any, tmp_path: Path
) -> None:
    master, slave = pair
    fill(master, 200)
    copy(master, slave)
    end = slave.max_phy_offset
    slave.close()
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE")
    assert slave.max_phy_offset == end
    fill(master, 200, start=200)
    copy(master, slave, start=end)
    for topic, queue_id in master.queue_ids():
        assert queue_bytes(slave, topic, queue_id) == queue_bytes(master, topic, queue_id)


def test_bytes_that_do_not_continue_the_log_are_refused_and_nothing_is_written(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    for i in range(5):
        master.put(TOPIC, b"m%d" % i, queue_id=0)
    chunks = []
    pos = 0
    while (chunk := master.read_replica(pos, 1)) is not None:
        chunks.append((pos, chunk[0]))
        pos = chunk[1]
    assert len(chunks) == 5
    slave.append_replica(*chunks[0])
    end = slave.max_phy_offset

    def refused(offset: int, data: bytes, words: str) -> None:
        with pytest.raises(ReplicationError, match=words):
            slave.append_replica(offset, data)
        assert slave.max_phy_offset == end
        assert slave.max_offset(TOPIC, 0) == 1

    # A gap: the third group where the second belongs.
    refused(chunks[2][0], chunks[2][1], "ends at")
    second_at, second = chunks[1]
    # Torn: a group without its fence, or cut inside a record.
    refused(second_at, second[:-20], "fence")
    refused(second_at, second[:-30], "claims|no record")
    # Garbled: one flipped byte in the body fails the fence's CRC.
    garbled = bytearray(second)
    garbled[len(garbled) // 2] ^= 0xFF
    refused(second_at, bytes(garbled), "does not seal|does not decode")
    # The right bytes at the wrong offset name another position.
    refused(end + 8, second, "names offset|ends at|fence")
    assert slave.append_replica(second_at, second) == chunks[2][0]
    assert slave.max_offset(TOPIC, 0) == 2


def test_only_a_slave_takes_replicated_bytes_and_a_slave_takes_no_put(
    pair: tuple[MessageStore, MessageStore], open_store: Any, tmp_path: Path
) -> None:
    master, slave = pair
    master.put(TOPIC, b"one")
    other = open_store(tmp_path / "other", mapped_file_size_commit_log=SEGMENT)
    data, _, _ = master.read_replica(0, 4096) or (b"", 0, 0)
    with pytest.raises(ReplicationError, match="only a slave"):
        other.append_replica(0, data)
    with pytest.raises(StoreReadOnlyError):
        slave.put(TOPIC, b"direct")
    with pytest.raises(StoreReadOnlyError):
        slave.put_batch(TOPIC, [b"a", b"b"])
    assert slave.max_phy_offset == 0


def test_an_empty_slave_can_start_at_a_later_segment(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    fill(master, 400)
    start = master.max_phy_offset - master.max_phy_offset % SEGMENT
    assert start >= SEGMENT
    # Not mid-segment: recovery reads a segment from its start.
    record = master.read_replica(start, 1)
    assert record is not None
    middle = record[1]
    with pytest.raises(ReplicationError, match="segment's start"):
        slave.append_replica(middle, master.read_replica(middle, 1)[0])  # type: ignore[index]
    assert slave.max_phy_offset == 0
    copy(master, slave, start=start)
    assert slave.min_phy_offset == start
    assert slave.max_phy_offset == master.max_phy_offset
    for topic, queue_id in master.queue_ids():
        low = slave.min_offset(topic, queue_id)
        assert slave.max_offset(topic, queue_id) == master.max_offset(topic, queue_id)
        if low < slave.max_offset(topic, queue_id):
            # Every unit the slave has points at a record it has; none below its start.
            first = slave.get(topic, queue_id, low, max_count=1).messages()[0]
            assert first.phy_offset >= start
            assert master.get(topic, queue_id, low, max_count=1).messages()[0].body == first.body
            if low > 0:
                assert (
                    slave.get(topic, queue_id, low - 1).status is GetMessageStatus.OFFSET_TOO_SMALL
                )


def test_a_topic_the_master_deleted_and_created_again_starts_over_on_the_slave(
    pair: tuple[MessageStore, MessageStore], open_store: Any, tmp_path: Path
) -> None:
    master, slave = pair
    for i in range(5):
        master.put(TOPIC, b"old-%d" % i, queue_id=0)
    copy(master, slave)
    end = slave.max_phy_offset
    master.delete_topic(TOPIC)
    master.put(TOPIC, b"new-0", queue_id=0)
    master.put(TOPIC, b"new-1", queue_id=0)
    copy(master, slave, start=end)
    for reopened in (False, True):
        if reopened:
            slave.close()
            slave = open_store(
                tmp_path / "slave", mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE"
            )
        got = slave.get(TOPIC, 0, 0, max_count=10).messages()
        assert [m.body for m in got] == [b"new-0", b"new-1"]
        assert slave.max_offset(TOPIC, 0) == 2


def test_a_frame_whose_queue_cannot_be_written_is_not_written_at_all(
    pair: tuple[MessageStore, MessageStore], tmp_path: Path
) -> None:
    master, slave = pair
    master.put("T1", b"first", queue_id=0)
    copy(master, slave)
    end = slave.max_phy_offset
    master.put("T2", b"t2", queue_id=0)
    master.put("T1", b"second", queue_id=0)
    blocker = tmp_path / "slave" / "consumequeue" / "T2"
    blocker.write_bytes(b"not a directory")
    data, after, _ = master.read_replica(end, 1 << 20) or (b"", 0, 0)
    with pytest.raises(Exception):  # noqa: B017, PT011 (the OS error the store maps)
        slave.append_replica(end, data)
    assert slave.max_phy_offset == end
    assert slave.max_offset("T1", 0) == 1
    blocker.unlink()
    assert slave.append_replica(end, data) == after
    assert [m.body for m in slave.get("T1", 0, 0).messages()] == [b"first", b"second"]
    assert [m.body for m in slave.get("T2", 0, 0).messages()] == [b"t2"]


def test_a_slave_whose_first_frame_was_cut_short_starts_again(
    pair: tuple[MessageStore, MessageStore], open_store: Any, tmp_path: Path
) -> None:
    master, slave = pair
    fill(master, 300)
    slave.close()
    # What a kill right after the slave created its first segment leaves: no data.
    with open(tmp_path / "slave" / "commitlog" / f"{0:020d}", "wb") as segment:
        segment.truncate(SEGMENT)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE")
    assert slave.max_phy_offset == 0
    start = master.max_phy_offset - master.max_phy_offset % SEGMENT
    copy(master, slave, start=start)
    assert slave.max_phy_offset == master.max_phy_offset
    assert slave.min_phy_offset == start


def test_a_slave_tells_arrivals_with_every_tag_of_a_frame(
    pair: tuple[MessageStore, MessageStore],
) -> None:
    master, slave = pair
    slave.drain_arrivals()
    for tag in ("A", "B", "C"):
        master.put(TOPIC, b"x", tags=tag, queue_id=0)
    copy(master, slave, batch=1 << 20)
    arrivals = [a for a in slave.drain_arrivals() if a[0] == TOPIC]
    assert arrivals
    assert arrivals[-1][2] == 3
    tags = {code for a in arrivals for code in (a[3] or [])}
    assert tags == {ord("A"), ord("B"), ord("C")}


# --- damage on the master -----------------------------------------------------------------------


def flip(root: Path, phy: int) -> None:
    """Flips a byte of the CommitLog at ``phy`` while its store is closed."""
    with open(root / "commitlog" / f"{phy - phy % SEGMENT:020d}", "r+b") as f:
        f.seek(phy % SEGMENT)
        byte = f.read(1)
        f.seek(phy % SEGMENT)
        f.write(bytes([byte[0] ^ 0x5A]))


def copy_counting_damage(master: MessageStore, slave: MessageStore, start: int = 0) -> list[int]:
    """Like copy(), but returns the offsets of the frames marked damaged."""
    pos, damaged_at = start, []
    while (chunk := master.read_replica(pos, 4096)) is not None:
        data, after, damaged = chunk
        if damaged:
            damaged_at.append(pos)
        assert slave.append_replica(pos, data, damaged) == after
        pos = after
    return damaged_at


def same_log(master_root: Path, slave_root: Path, end: int) -> bool:
    for segment in sorted((master_root / "commitlog").iterdir()):
        start = int(segment.name)
        if start < end:
            length = min(SEGMENT, end - start)
            copied = (slave_root / "commitlog" / segment.name).read_bytes()[:length]
            if copied != segment.read_bytes()[:length]:
                return False
    return True


def queue_reads(store: MessageStore, topic: str, queue_id: int) -> tuple[list[bytes], list[int]]:
    """A queue's bodies and the offsets reported corrupt."""
    bodies: list[bytes] = []
    corrupt: list[int] = []
    offset = 0
    while (got := store.get(topic, queue_id, offset)).status is GetMessageStatus.FOUND or (
        got.corrupt_offsets
    ):
        bodies += [m.body for m in got.messages()]
        corrupt += got.corrupt_offsets
        offset = got.next_begin_offset
    return bodies, corrupt


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(lambda phy, size: phy + size // 2, id="body"),
        pytest.param(lambda phy, size: phy, id="record-size"),
        pytest.param(lambda phy, size: phy + size - 3, id="fence"),
    ],
)
def test_a_group_damaged_on_the_master_is_copied_as_it_is_and_what_follows_too(
    open_store: Any, tmp_path: Path, where: Any
) -> None:
    """A byte flipped on a master's disk: its slave takes the damaged group as it is, as the
    master's own recovery keeps it, and goes on with the groups after it. Its reads report the
    damaged message corrupt and serve every other. (Refused, it stopped replication for good.)"""
    root = tmp_path / "master"
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    sent = [master.put(TOPIC, b"m%03d-" % i * 100, queue_id=i % 4) for i in range(40)]
    master.close()
    bad = sent[21]
    flip(root, where(bad.phy_offset, bad.wrote_bytes))
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    slave_root = tmp_path / "slave"
    config = {"mapped_file_size_commit_log": SEGMENT, "broker_role": "SLAVE"}
    slave = open_store(slave_root, **config)

    assert copy_counting_damage(master, slave) == [bad.phy_offset]
    assert slave.max_phy_offset == master.max_phy_offset
    assert same_log(root, slave_root, master.max_phy_offset)
    for queue_id in range(4):
        bodies, corrupt = queue_reads(slave, TOPIC, queue_id)
        expected = [b"m%03d-" % i * 100 for i in range(queue_id, 40, 4) if i != 21]
        assert bodies == expected
        assert corrupt == ([bad.queue_offset] if queue_id == bad.queue_ids[0] else [])
        if where(0, 100) == 50:
            # The record's own checks fail on the master too.
            assert queue_reads(master, TOPIC, queue_id) == (bodies, corrupt)
    # Replication goes on past it.
    end = master.max_phy_offset
    master.put(TOPIC, b"after", queue_id=1)
    assert copy_counting_damage(master, slave, end) == []
    assert slave.get(TOPIC, 1, 10).messages()[0].body == b"after"

    # A slave that crashed cuts its log at the damage (recovery's rule for a slave), and takes
    # it again.
    slave.close()
    mark = slave_root / "abort"
    mark.write_bytes(b"")
    (slave_root / "checkpoint").unlink()
    slave = open_store(slave_root, **config)
    assert slave.max_phy_offset == bad.phy_offset
    assert copy_counting_damage(master, slave, bad.phy_offset) == [bad.phy_offset]
    assert same_log(root, slave_root, master.max_phy_offset)


@pytest.mark.parametrize("what", ["last-record", "closing-blank"])
def test_damage_at_a_segments_end_is_copied_up_to_the_next_segment(
    open_store: Any, tmp_path: Path, what: str
) -> None:
    root = tmp_path / "master"
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    sent = []
    while not sent or sent[-1].phy_offset < SEGMENT:
        sent.append(master.put(TOPIC, b"%05d" % len(sent) * 300, queue_id=0))
    last = sent[-2]
    master.close()
    blank_at = last.phy_offset + last.wrote_bytes
    assert blank_at < SEGMENT
    flip(root, last.phy_offset + 200 if what == "last-record" else blank_at + 5)
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    slave_root = tmp_path / "slave"
    slave = open_store(slave_root, mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE")

    damaged_at = last.phy_offset if what == "last-record" else blank_at
    assert copy_counting_damage(master, slave) == [damaged_at]
    assert slave.max_phy_offset == master.max_phy_offset
    assert same_log(root, slave_root, master.max_phy_offset)
    bodies, corrupt = queue_reads(slave, TOPIC, 0)
    bad = len(sent) - 2
    assert corrupt == ([bad] if what == "last-record" else [])
    assert bodies == [b"%05d" % i * 300 for i in range(len(sent)) if i != bad or not corrupt]


def test_damaged_bytes_are_taken_only_before_an_intact_end(open_store: Any, tmp_path: Path) -> None:
    root = tmp_path / "master"
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    sent = [master.put(TOPIC, b"x%d" % i * 50, queue_id=0) for i in range(3)]
    master.close()
    flip(root, sent[1].phy_offset + 100)
    master = open_store(root, mapped_file_size_commit_log=SEGMENT)
    slave = open_store(tmp_path / "slave", mapped_file_size_commit_log=SEGMENT, broker_role="SLAVE")
    first = master.read_replica(0, 1)
    assert first is not None
    data, start, damaged = first
    assert damaged == 0
    slave.append_replica(0, data)
    chunk = master.read_replica(start, 1)
    assert chunk is not None
    data, after, damaged = chunk
    assert damaged == sent[2].phy_offset - start

    def refused(frame: bytes, count: int, words: str) -> None:
        with pytest.raises(ReplicationError, match=words):
            slave.append_replica(start, frame, count)
        assert slave.max_phy_offset == start

    # Not marked damaged, the frame fails its checks.
    refused(data, 0, "does not seal|does not decode|claims")
    refused(data, len(data) + 1, "damaged bytes")
    # Damage must end at an intact group (or the segment's end).
    refused(data[:damaged], damaged, "followed by an intact group")
    refused(data[:-1], damaged, "fence|claims|no record")
    assert slave.append_replica(start, data, damaged) == after
    assert queue_reads(slave, TOPIC, 0) == ([b"x0" * 50, b"x2" * 50], [1])
