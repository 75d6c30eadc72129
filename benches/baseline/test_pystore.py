"""Checks that the baseline store writes the formats pyrmq's store writes."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import pytest

from benches.baseline.pystore import (
    BLANK_MAGIC,
    CHECKPOINT_NAME,
    CQ_UNIT_BYTES,
    MESSAGE_MAGIC,
    UNIT,
    PyStore,
    decode_properties,
    decode_records,
    encode_properties,
    java_string_hash,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

# First record of the PULL body in spec vector 020 (a real broker's answer to rocketmq-client-cpp).
VECTOR_020_RECORD = bytes.fromhex(
    "000000b7daa320a721bee2500000000200000000000000000000000000000000000002e000000000000001a201"
    "edf97a7f00000100009d7c000001a201edf97a7f000001000078bf0000000000000000000000000000000d6865"
    "6c6c6f2d62617463682d3009546f7069635465737400464b455953014b42300254414753015461674102554e49"
    "515f4b455901303130303030374630303030363235413030303046413542453337323034303002574149540174"
    "727565"
)


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00


def test_record_bytes_match_captured_broker_record(tmp_path: Path) -> None:
    store = PyStore.open(
        tmp_path, segment_size=1 << 20, store_host="127.0.0.1:30911",
        clock_ms=lambda: 1795328702842,
    )  # fmt: skip
    filler = store.put("F", b"x" * 644, queue_id=0)
    assert filler.wrote_bytes == 736
    r = store.put(
        "TopicTest", b"hello-batch-0", queue_id=2,
        properties={"KEYS": "KB0", "TAGS": "TagA", "UNIQ_KEY": "0100007F0000625A0000FA5BE3720400",
                    "WAIT": "true"},
        born_timestamp_ms=1795328702842, born_host="127.0.0.1:40316",
    )  # fmt: skip
    assert (r.phy_offset, r.queue_offset) == (736, 0)
    assert r.msg_id == "7F000001000078BF00000000000002E0"
    ours = store.get("TopicTest", 2, 0).buffer
    store.close()
    assert ours == VECTOR_020_RECORD
    (decoded,) = decode_records(ours)
    assert decoded.properties["UNIQ_KEY"] == "0100007F0000625A0000FA5BE3720400"
    assert (decoded.queue_offset, decoded.phy_offset, decoded.body_crc) == (0, 736, 566157904)


def test_properties_decode_with_and_without_trailing_separator() -> None:
    expected = {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert encode_properties(expected) == b"TAGS\x01TagA\x02KEYS\x01k1 k2"
    assert decode_properties(b"TAGS\x01TagA\x02KEYS\x01k1 k2\x02") == expected
    assert decode_properties(b"TAGS\x01TagA\x02\x02KEYS\x01k1 k2") == expected


def test_round_trip_put_get(tmp_path: Path) -> None:
    with PyStore.open(tmp_path, segment_size=1 << 20) as store:
        bodies = [bytes([i]) * (i + 1) for i in range(40)]
        first = store.put("T", bodies[0], queue_id=3, tags="TagA", properties={"k": "v"})
        batch = store.put_batch("T", bodies[1:], queue_id=3, tags="TagB")
        assert batch.queue_offset == 1
        assert batch.count == 39
        assert batch.phy_offset == first.phy_offset + first.wrote_bytes
        got = store.get("T", 3, 0, max_count=32)
        assert (got.message_count, got.next_begin_offset) == (32, 32)
        records = decode_records(got.buffer)
        rest = store.get("T", 3, got.next_begin_offset, max_count=32)
        assert (rest.message_count, rest.next_begin_offset) == (8, 40)
        records += decode_records(rest.buffer)
        assert [m.body for m in records] == bodies
        assert [m.queue_offset for m in records] == list(range(40))
        assert all(m.topic == "T" and m.queue_id == 3 for m in records)
        assert records[0].properties == {"TAGS": "TagA", "k": "v"}
        assert records[1].properties == {"TAGS": "TagB"}
        assert records[0].store_host == "127.0.0.1:10911"
        assert store.max_offset("T", 3) == 40
        assert store.get("T", 3, 40).message_count == 0


def test_body_crc_is_masked_zlib_crc32(tmp_path: Path) -> None:
    body = os.urandom(3000)
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        store.put("T", body)
        (record,) = decode_records(store.get("T", 0, 0).buffer)
    assert record.body_crc == zlib.crc32(body) & 0x7FFFFFFF
    (raw_crc,) = struct.unpack_from(">I", (tmp_path / "commitlog" / f"{0:020d}").read_bytes(), 8)
    assert raw_crc == record.body_crc


def test_recovery_stops_at_record_with_bad_crc(tmp_path: Path) -> None:
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        results = [store.put("T", b"m%03d" % i * 10) for i in range(5)]
    (tmp_path / CHECKPOINT_NAME).unlink()
    segment = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[results[3].phy_offset + 88] ^= 0xFF
    segment.write_bytes(bytes(data))
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        assert store.max_offset("T", 0) == 3
        assert store.max_phy_offset == results[3].phy_offset
        assert store.put("T", b"again").queue_offset == 3


def test_blank_record_fills_segment_end_on_roll_over(tmp_path: Path) -> None:
    segment_size = 1024
    with PyStore.open(tmp_path, segment_size=segment_size) as store:
        results = [store.put("T", b"b" * 300, queue_id=0) for _ in range(4)]
        size = results[0].wrote_bytes
        assert size == 88 + 300 + 1 + 1 + 2
        assert [r.phy_offset for r in results] == [0, size, segment_size, segment_size + size]
        assert [r.queue_offset for r in results] == [0, 1, 2, 3]
        got = store.get("T", 0, 0)
        assert got.message_count == 4
        assert [m.phy_offset for m in decode_records(got.buffer)] == [r.phy_offset for r in results]
    names = sorted(p.name for p in (tmp_path / "commitlog").iterdir())
    assert names == [f"{0:020d}", f"{segment_size:020d}"]
    first = (tmp_path / "commitlog" / names[0]).read_bytes()
    assert len(first) == segment_size
    total, magic = struct.unpack_from(">iI", first, 2 * size)
    assert (total, magic) == (segment_size - 2 * size, BLANK_MAGIC)
    (magic2,) = struct.unpack_from(">I", (tmp_path / "commitlog" / names[1]).read_bytes(), 4)
    assert magic2 == MESSAGE_MAGIC
    with PyStore.open(tmp_path, segment_size=segment_size) as store:
        assert store.max_offset("T", 0) == 4
        assert store.max_phy_offset == segment_size + 2 * size


def test_consume_queue_units_and_tag_filter(tmp_path: Path) -> None:
    cq_size = 10 * CQ_UNIT_BYTES
    with PyStore.open(tmp_path, cq_segment_size=cq_size) as store:
        results = [
            store.put("T", b"x", queue_id=1, tags=("TagA" if i % 3 == 0 else "TagB"))
            for i in range(25)
        ]
        codes_a = {java_string_hash("TagA")}
        assert len(store.scan("T", 1, 0, 100)) == 25
        matched = store.scan("T", 1, 0, 100, tag_codes=codes_a)
        assert [u[0] for u in matched] == [r.phy_offset for r in results[::3]]
        got = store.get("T", 1, 0, max_count=4, tags="TagA || TagC")
        assert got.message_count == 4
        assert got.next_begin_offset == 10
        assert all(m.properties["TAGS"] == "TagA" for m in decode_records(got.buffer))
    qdir = tmp_path / "consumequeue" / "T" / "1"
    names = sorted(p.name for p in qdir.iterdir())
    assert names == [f"{i * cq_size:020d}" for i in range(3)]
    units = list(UNIT.iter_unpack((qdir / names[0]).read_bytes()))
    assert units[0] == (results[0].phy_offset, results[0].wrote_bytes, java_string_hash("TagA"))
    assert units[1][2] == java_string_hash("TagB")


def test_untagged_message_has_zero_tags_code(tmp_path: Path) -> None:
    with PyStore.open(tmp_path) as store:
        store.put("T", b"x")
        assert store.scan("T", 0, 0, 1) == [(0, 88 + 1 + 1 + 1 + 2, 0)]


def test_recovery_after_sigkill_keeps_every_written_message(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from benches.baseline.pystore import PyStore
        store = PyStore.open({str(tmp_path)!r}, segment_size=1 << 16, cq_segment_size=2000)
        for i in range(500):
            store.put_batch("T", [b"%05d" % i * 20] * 3, queue_id=i % 2)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with PyStore.open(tmp_path, segment_size=1 << 16, cq_segment_size=2000) as store:
        assert store.max_offset("T", 0) == 750
        assert store.max_offset("T", 1) == 750
        last = decode_records(store.get("T", 1, 749).buffer)
        assert last[0].body == b"00499" * 20


def test_torn_tail_is_cut_and_undispatched_record_is_dispatched(tmp_path: Path) -> None:
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        for i in range(10):
            store.put("T", b"%d" % i, tags="X")
        end = store.max_phy_offset
    (tmp_path / CHECKPOINT_NAME).unlink()
    qfile = tmp_path / "consumequeue" / "T" / "0" / f"{0:020d}"
    cq = bytearray(qfile.read_bytes())
    cq[9 * CQ_UNIT_BYTES : 10 * CQ_UNIT_BYTES] = bytes(CQ_UNIT_BYTES)
    qfile.write_bytes(bytes(cq))
    segment = tmp_path / "commitlog" / f"{0:020d}"
    log = bytearray(segment.read_bytes())
    log[end : end + 12] = struct.pack(">iII", 200, MESSAGE_MAGIC, 1)
    segment.write_bytes(bytes(log))
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        assert store.max_offset("T", 0) == 10
        assert store.max_phy_offset == end
        assert store.scan("T", 0, 9, 1)[0][2] == java_string_hash("X")


def test_records_before_the_checkpoint_are_not_rescanned(tmp_path: Path) -> None:
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        early = store.put("T", b"early")
        store.flush()
        late = store.put("T", b"late")
    segment = tmp_path / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[early.phy_offset + 88] ^= 0xFF
    segment.write_bytes(bytes(data))
    with PyStore.open(tmp_path, segment_size=1 << 16) as store:
        assert store.max_offset("T", 0) == 2
        assert store.max_phy_offset == late.phy_offset + late.wrote_bytes
    (checkpoint,) = struct.unpack_from(">Q", (tmp_path / CHECKPOINT_NAME).read_bytes())
    assert checkpoint == late.phy_offset + late.wrote_bytes


@pytest.mark.parametrize("bad", ["", "t" * 128])
def test_bad_topic_is_refused(tmp_path: Path, bad: str) -> None:
    with PyStore.open(tmp_path) as store, pytest.raises(ValueError, match="topic"):
        store.put(bad, b"x")


def test_oversized_body_in_batch_writes_nothing(tmp_path: Path) -> None:
    with PyStore.open(tmp_path, segment_size=1 << 16, max_message_size=1000) as store:
        with pytest.raises(ValueError, match="too large"):
            store.put_batch("T", [b"ok", b"x" * 1001])
        assert store.max_offset("T", 0) == 0
        assert store.max_phy_offset == 0
