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
        data, after = chunk
        assert slave.append_replica(pos, data) == after
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
    data, after = chunk
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
    data, _ = master.read_replica(0, 4096) or (b"", 0)
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
    data, after = master.read_replica(end, 1 << 20) or (b"", 0)
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
