"""The store's Python API end to end: what a put stores is what a get, a lookup or a query
returns, byte for byte and field by field."""

import array
import ctypes
import os
import shutil
import struct
import time

import pytest
from tests.helpers import client_batch

from pyrmq import _core
from pyrmq.errors import ConfigError, MessageIllegalError, MessageTooLargeError
from pyrmq.store import GetMessageStatus, MessageStore, PutStatus

pytestmark = pytest.mark.integration

STORE_HOST = "10.20.30.40:10911"
SEGMENT = 64 * 1024


def offset_msg_id(store_host: str, phy_offset: int) -> str:
    ip, port = store_host.split(":")
    raw = bytes(int(p) for p in ip.split(".")) + struct.pack(">iq", int(port), phy_offset)
    return raw.hex().upper()


def read_all(store: MessageStore, topic: str, queue_id: int, start: int = 0) -> list:
    """Every message of a queue from ``start``, read in get-sized steps."""
    out = []
    offset = start
    while True:
        got = store.get(topic, queue_id, offset)
        assert got.corrupt_offsets == []
        if got.status is not GetMessageStatus.FOUND:
            assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
            return out
        out.extend(got.messages())
        offset = got.next_begin_offset


def test_put_round_trips_every_field(open_store, record_decoder):
    store = open_store(store_host=STORE_HOST)
    before = time.time_ns() // 1_000_000
    sent = store.put(
        "TopicApi",
        b"hello \x00\xff world",
        queue_id=3,
        tags="TagA",
        keys=["order-1", "order-2"],
        properties={"color": "blue", "UNIQ_KEY": "AC1100020000"},
        flag=42,
        born_timestamp_ms=1_700_000_000_123,
        born_host="192.168.7.9:4321",
        reconsume_times=2,
    )
    after = time.time_ns() // 1_000_000
    assert sent.status is PutStatus.PUT_OK
    assert (sent.count, sent.phy_offset, sent.queue_offset, sent.queue_id) == (1, 0, 0, 3)
    assert sent.phy_offsets == [0]
    assert sent.msg_ids == [offset_msg_id(STORE_HOST, 0)]
    assert sent.msg_id == "0A141E28" + "00002A9F" + "0000000000000000"
    assert before <= sent.store_timestamp_ms <= after

    got = store.get("TopicApi", 3, 0)
    assert got.status is GetMessageStatus.FOUND
    assert (got.message_count, len(got), got.next_begin_offset) == (1, 1, 1)
    assert (got.min_offset, got.max_offset) == (0, 1)
    assert got.queue_offsets == [0]
    assert got.phy_offsets == [0]
    assert got.sizes == [len(got.buffer)]
    # A group is its record plus a 20-byte fence.
    assert sent.wrote_bytes == got.sizes[0] + 20
    assert store.max_phy_offset == sent.wrote_bytes

    [m] = got.messages()
    assert m.topic == "TopicApi"
    assert (m.queue_id, m.queue_offset, m.phy_offset) == (3, 0, 0)
    assert m.body == b"hello \x00\xff world"
    assert (m.flag, m.sys_flag, m.reconsume_times) == (42, 0, 2)
    assert m.born_timestamp_ms == 1_700_000_000_123
    assert m.born_host == "192.168.7.9:4321"
    assert m.store_host == STORE_HOST
    assert m.store_timestamp_ms == sent.store_timestamp_ms
    assert m.properties == {
        "color": "blue",
        "UNIQ_KEY": "AC1100020000",
        "TAGS": "TagA",
        "KEYS": "order-1 order-2",
    }
    assert (m.tags, m.keys, m.uniq_key) == ("TagA", ["order-1", "order-2"], "AC1100020000")
    assert m.msg_id == sent.msg_id
    assert m.store_size == got.sizes[0]

    # An independent decoder reads the same fields from the raw bytes.
    raw = record_decoder(got.buffer)
    assert raw["body"] == m.body
    assert raw["topic"] == "TopicApi"
    assert raw["properties"] == m.properties
    assert (raw["queue_id"], raw["queue_offset"], raw["phy_offset"]) == (3, 0, 0)
    assert raw["born_host"] == "192.168.7.9:4321"
    assert raw["store_host"] == STORE_HOST
    assert raw["store_timestamp_ms"] == sent.store_timestamp_ms
    assert raw["body_crc"] == m.body_crc


def stored_properties(record: bytes) -> bytes:
    """The raw property bytes of one encoded record (message format V1, IPv4 hosts)."""
    (body_len,) = struct.unpack_from(">i", record, 84)
    at = 88 + body_len
    at += 1 + record[at]
    (length,) = struct.unpack_from(">h", record, at)
    return record[at + 2 : at + 2 + length]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"properties": {"a": "1"}, "tags": "T", "keys": "k1 k2"},
            b"a\x011\x02TAGS\x01T\x02KEYS\x01k1 k2",
        ),
        ({"properties": "a\x011\x02", "tags": "T"}, b"a\x011\x02TAGS\x01T"),
        ({"properties": "a\x011", "tags": "T"}, b"a\x011\x02TAGS\x01T"),
        ({"properties": "a\x011"}, b"a\x011"),
        ({"properties": "", "tags": "T"}, b"TAGS\x01T"),
        ({"tags": "T", "keys": ["x", "y"]}, b"TAGS\x01T\x02KEYS\x01x y"),
        ({"properties": {"e": ""}, "tags": "T"}, b"e\x01\x02TAGS\x01T"),
        (
            {"properties": "p\x01" + "v" * 300, "keys": "k"},
            b"p\x01" + b"v" * 300 + b"\x02KEYS\x01k",
        ),
    ],
)
def test_properties_tags_and_keys_encode_in_order(open_store, kwargs, expected):
    """User properties (a dict, or an encoded string as the broker passes them) come first, then
    TAGS, then KEYS, one separator between pairs and none at the end."""
    store = open_store()
    store.put("TopicProps", b"body", **kwargs)
    store.put_batch("TopicProps", [b"b1", b"b2"], **kwargs)
    got = store.get("TopicProps", 0, 0)
    assert got.message_count == 3
    records = [got.buffer[sum(got.sizes[:i]) : sum(got.sizes[: i + 1])] for i in range(3)]
    assert [stored_properties(r) for r in records] == [expected] * 3


def test_default_tags_keys_and_born_host(open_store):
    store = open_store()
    store.put("TopicPlain", b"x")
    [m] = store.get("TopicPlain", 0, 0).messages()
    assert m.properties == {}
    assert (m.tags, m.keys, m.uniq_key) == (None, [], None)
    assert m.born_host == "127.0.0.1:0"
    assert m.store_host == "127.0.0.1:10911"
    assert store.consume_queue_units("TopicPlain", 0, 0, 10)[0][3] == 0


def test_put_batch_is_contiguous_in_queue_and_log(open_store, record_decoder):
    store = open_store(store_host=STORE_HOST)
    store.put("TopicBatch", b"first", queue_id=1)
    bodies = [bytes([i]) * (10 + i * 13) for i in range(7)]
    sent = store.put_batch("TopicBatch", bodies, queue_id=1, tags="TagB", keys="kb")
    assert sent.count == 7
    assert sent.queue_offset == 1
    assert sent.queue_offsets == list(range(1, 8))
    got = store.get("TopicBatch", 1, 1)
    assert got.status is GetMessageStatus.FOUND
    assert got.queue_offsets == list(range(1, 8))
    assert got.phy_offsets == sent.phy_offsets
    # Records of one group lie end to end, sealed by one 20-byte fence.
    for a, b, size in zip(sent.phy_offsets, sent.phy_offsets[1:], got.sizes, strict=False):
        assert b == a + size
    assert sent.wrote_bytes == sum(got.sizes) + 20
    assert store.max_phy_offset == sent.phy_offset + sent.wrote_bytes
    assert sent.msg_ids == [offset_msg_id(STORE_HOST, p) for p in sent.phy_offsets]
    assert sent.msg_ids_joined == ",".join(sent.msg_ids)
    assert sent.msg_id == sent.msg_ids[0]

    views = got.views()
    assert len(views) == 7
    assert b"".join(bytes(v) for v in views) == got.buffer
    assert sum(got.sizes) == len(got.buffer)
    for view, body, qo, phy in zip(
        views, bodies, sent.queue_offsets, sent.phy_offsets, strict=True
    ):
        assert isinstance(view, memoryview)
        assert view.readonly
        rec = record_decoder(view)
        assert rec["body"] == body
        assert (rec["queue_offset"], rec["phy_offset"], rec["queue_id"]) == (qo, phy, 1)
        assert rec["properties"] == {"TAGS": "TagB", "KEYS": "kb"}
    assert [m.body for m in got.messages()] == bodies
    assert [m.body for m in _core.decode_messages(got.buffer)] == bodies


def test_put_encoded_batch_round_trips_the_client_format(open_store):
    store = open_store(store_host=STORE_HOST)
    items = [
        (0, b"alpha", {"TAGS": "TagA", "KEYS": "k1 k2"}),
        (7, b"", {"UNIQ_KEY": "UNIQ-0001"}),
        (-1, b"\x00" * 300, {}),
        (3, b"omega", {"TAGS": "TagC", "a": "b"}),
    ]
    sent = store.put_encoded_batch(
        "TopicEnc", client_batch(items), queue_id=2, born_host="10.0.0.5:9000"
    )
    assert sent.count == 4
    assert sent.queue_offsets == [0, 1, 2, 3]
    got = store.get("TopicEnc", 2, 0)
    msgs = got.messages()
    assert [m.body for m in msgs] == [b for _, b, _ in items]
    assert [m.flag for m in msgs] == [f for f, _, _ in items]
    assert [m.properties for m in msgs] == [p for _, _, p in items]
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3]
    assert [m.phy_offset for m in msgs] == sent.phy_offsets
    assert {m.born_host for m in msgs} == {"10.0.0.5:9000"}
    assert [m.msg_id for m in msgs] == sent.msg_ids
    units = store.consume_queue_units("TopicEnc", 2, 0, 10)
    assert [u[3] for u in units] == [
        _core.java_string_hash("TagA"),
        0,
        0,
        _core.java_string_hash("TagC"),
    ]
    assert [m.body for m in store.query_message("TopicEnc", "k2")] == [b"alpha"]
    assert [m.flag for m in store.query_message("TopicEnc", "UNIQ-0001")] == [7]


def test_bodies_may_be_any_buffer(open_store):
    """As ``bytes(obj)`` reads them: whatever the buffer's item format or layout."""
    store = open_store()
    bodies = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"0123456789")[::2],
        array.array("i", [1, -2, 3]),
        array.array("b", [-1, 2]),
        (ctypes.c_ubyte * 3)(7, 8, 9),
        (ctypes.c_char * 2)(b"a", b"b"),
        memoryview(bytes(range(12))).cast("B", (3, 4)),
    ]
    for body in bodies:
        store.put("TopicBuffers", body)
    store.put_batch("TopicBuffers", bodies)
    got = [m.body for m in store.get("TopicBuffers", 0, 0, max_count=100).messages()]
    assert got == [bytes(b) for b in bodies] * 2
    with pytest.raises(MessageIllegalError, match="buffer"):
        store.put("TopicBuffers", "text")


def test_lookups_by_offset_and_id(open_store):
    store = open_store(store_host=STORE_HOST)
    sent = [store.put("TopicLook", f"body-{i}".encode(), queue_id=i % 2) for i in range(10)]
    for i, r in enumerate(sent):
        m = store.look_message_by_offset(r.phy_offset)
        assert m is not None
        assert (m.body, m.queue_id, m.queue_offset) == (f"body-{i}".encode(), i % 2, i // 2)
        by_id = store.view_message_by_id(r.msg_id)
        assert by_id is not None
        assert (by_id.body, by_id.phy_offset, by_id.msg_id) == (m.body, r.phy_offset, r.msg_id)
    # Offsets where no record starts.
    assert store.look_message_by_offset(sent[3].phy_offset + 1) is None
    assert store.look_message_by_offset(store.max_phy_offset) is None
    assert store.look_message_by_offset(store.max_phy_offset + 10_000) is None
    assert store.look_message_by_offset(-1) is None
    assert store.view_message_by_id("not-a-message-id") is None
    assert store.view_message_by_id(offset_msg_id(STORE_HOST, store.max_phy_offset)) is None


def test_a_read_message_gives_its_record_with_or_without_new_reconsume_times(open_store):
    store = open_store(store_host=STORE_HOST)
    store.put("TopicRecord", b"four", reconsume_times=2)
    store.put("TopicRecord", b"six", born_host="[::1]:8080", properties={"p": "v"})
    store.put("TopicRecord", b"last")
    # Messages of one read share its buffer: each record is cut out at its own place.
    messages = store.get("TopicRecord", 0, 0).messages()
    for m in messages:
        assert m.record() == store.look_record(m.phy_offset)
        assert m.record(m.reconsume_times) == m.record()
    four, six, _ = messages
    for m, at in ((four, 72), (six, 84)):
        again = _core.decode_messages(m.record(7))[0]
        assert again.reconsume_times == 7
        assert m.record(7)[at : at + 4] == (7).to_bytes(4, "big")
        # Only that field changed.
        assert m.record(7)[:at] + m.record(7)[at + 4 :] == m.record()[:at] + m.record()[at + 4 :]
    assert four.reconsume_times == 2


def test_query_message_by_keys_and_uniq_key_within_a_time_range(open_store):
    store = open_store()
    a = store.put("TopicQ", b"a", keys=["shared", "only-a"], properties={"UNIQ_KEY": "U-A"})
    b = store.put("TopicQ", b"b", keys="shared")
    store.put("OtherTopic", b"c", keys="shared", properties={"UNIQ_KEY": "U-A"})
    shared = store.query_message("TopicQ", "shared")
    assert sorted(m.body for m in shared) == [b"a", b"b"]
    assert {m.topic for m in shared} == {"TopicQ"}
    assert [m.body for m in store.query_message("TopicQ", "only-a")] == [b"a"]
    assert [m.body for m in store.query_message("TopicQ", "U-A")] == [b"a"]
    assert [m.body for m in store.query_message("OtherTopic", "U-A")] == [b"c"]
    assert store.query_message("TopicQ", "missing") == []
    assert len(store.query_message("TopicQ", "shared", max_count=1)) == 1
    first, last = a.store_timestamp_ms, b.store_timestamp_ms
    assert [m.body for m in store.query_message("TopicQ", "U-A", begin_ms=first)] == [b"a"]
    assert [m.body for m in store.query_message("TopicQ", "U-A", end_ms=first)] == [b"a"]
    assert store.query_message("TopicQ", "U-A", end_ms=first - 1) == []
    assert store.query_message("TopicQ", "U-A", begin_ms=first + 1) == []
    assert store.query_message("TopicQ", "shared", begin_ms=last + 1) == []


def test_query_message_finds_an_early_match_behind_many_later_ones(open_store, wait_until):
    """The index keeps whole seconds, so messages stored just after ``end_ms`` are candidates
    too, newest first. However many there are, the ones inside the range are still found."""
    store = open_store()
    first = store.put("TopicQ", b"first", keys="k")
    t = first.store_timestamp_ms
    wait_until(lambda: time.time_ns() // 1_000_000 > t, 1.0, "a new ms")
    for i in range(400):
        store.put("TopicQ", b"later-%d" % i, keys="k")
    for max_count in (32, 1):
        found = store.query_message("TopicQ", "k", begin_ms=t, end_ms=t, max_count=max_count)
        assert [m.body for m in found] == [b"first"]


def test_offsets_times_and_offset_for_time(open_store, wait_until):
    store = open_store()
    assert store.earliest_store_time("TopicTime", 0) is None
    assert (store.min_offset("TopicTime", 0), store.max_offset("TopicTime", 0)) == (0, 0)
    assert store.offset_for_time("TopicTime", 0, 0) == 0
    stamps: list[int] = []
    for round_ in range(6):
        # Several messages per millisecond, then a new millisecond.
        for _ in range(3):
            stamps.append(store.put("TopicTime", f"m{len(stamps)}".encode()).store_timestamp_ms)
        if round_ < 5:
            last = stamps[-1]
            wait_until(lambda last=last: time.time_ns() // 1_000_000 > last, 1.0, "a new ms")
    assert stamps == sorted(stamps)
    assert len(set(stamps)) >= 4
    n = len(stamps)
    assert (store.min_offset("TopicTime", 0), store.max_offset("TopicTime", 0)) == (0, n)
    assert store.earliest_store_time("TopicTime", 0) == stamps[0]
    for q, ts in enumerate(stamps):
        assert store.store_time("TopicTime", 0, q) == ts

    def expected(ts: int) -> int:
        return next((q for q, s in enumerate(stamps) if s >= ts), n)

    def expected_upper(ts: int) -> int:
        return max((q for q, s in enumerate(stamps) if s <= ts), default=0)

    probes = {stamps[0] - 1000, stamps[-1] + 1, 0}
    for s in stamps:
        probes |= {s - 1, s, s + 1}
    for ts in sorted(probes):
        assert store.offset_for_time("TopicTime", 0, ts) == expected(ts), ts
        assert store.offset_for_time("TopicTime", 0, ts, boundary="lower") == expected(ts), ts
        assert store.offset_for_time("TopicTime", 0, ts, boundary="upper") == expected_upper(ts)
    assert store.offset_for_time("TopicTime", 0, stamps[-1] + 10**9) == n
    assert store.offset_for_time("TopicTime", 0, stamps[-1] + 10**9, boundary="upper") == n - 1
    # A millisecond shared by several messages: lower names its first, upper its last.
    shared = next(s for s in stamps if stamps.count(s) > 1)
    run = [q for q, s in enumerate(stamps) if s == shared]
    assert store.offset_for_time("TopicTime", 0, shared) == run[0]
    assert store.offset_for_time("TopicTime", 0, shared, boundary="upper") == run[-1]
    assert store.offset_for_time("TopicEmpty", 0, shared, boundary="upper") == 0
    with pytest.raises(ValueError, match="boundary"):
        store.offset_for_time("TopicTime", 0, shared, boundary="LOWER")  # type: ignore[arg-type]


def test_tag_filters(open_store):
    store = open_store()
    tags = ["TagA", "TagB", None, "TagC", "TagA", "TagB", "TagC", None, "TagA"]
    for i, t in enumerate(tags):
        store.put("TopicTags", f"m{i}".encode(), tags=t)

    def bodies(expr, start=0):
        got = store.get("TopicTags", 0, start, tags=expr)
        assert got.status is GetMessageStatus.FOUND
        assert got.next_begin_offset == len(tags)
        return [int(m.body[1:]) for m in got.messages()]

    everything = list(range(len(tags)))
    assert bodies(None) == everything
    assert bodies("*") == everything
    assert bodies(" * ") == everything
    assert bodies("") == everything
    # RocketMQ reads "*" as "every tag" only as the whole expression.
    assert bodies("TagA || *") == [0, 4, 8]
    assert bodies(["TagA", "*"]) == [0, 4, 8]
    assert bodies(" || ") == everything
    assert bodies("TagA") == [0, 4, 8]
    assert bodies("TagA || TagB") == [0, 1, 4, 5, 8]
    assert bodies("TagB||TagC") == [1, 3, 5, 6]
    assert bodies(["TagC", "TagA"]) == [0, 3, 4, 6, 8]
    assert bodies("TagA", start=5) == [8]
    got = store.get("TopicTags", 0, 0, tags="TagA")
    assert got.queue_offsets == [0, 4, 8]
    assert [m.tags for m in got.messages()] == ["TagA"] * 3
    # No tag matches: examined, nothing found, continue at the end.
    miss = store.get("TopicTags", 0, 0, tags="TagZ")
    assert miss.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert (miss.next_begin_offset, miss.message_count, miss.buffer) == (len(tags), 0, b"")
    assert store.get("TopicTags", 0, 5, tags=["TagZ", "TagY"]).next_begin_offset == len(tags)


def test_sparse_tag_filter_advances_next_begin_offset(open_store):
    store = open_store(mapped_file_size_commit_log=1 << 20)
    for _ in range(10):
        store.put_batch("TopicSparse", [b"b"] * 100, tags="TagB")
    store.put("TopicSparse", b"needle", tags="TagA")
    first = store.get("TopicSparse", 0, 0, tags="TagA")
    assert first.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert first.message_count == 0
    assert 0 < first.next_begin_offset < 1000
    offset, calls = first.next_begin_offset, 1
    while True:
        got = store.get("TopicSparse", 0, offset, tags="TagA")
        calls += 1
        if got.status is GetMessageStatus.FOUND:
            break
        assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE
        assert got.next_begin_offset > offset
        offset = got.next_begin_offset
    assert calls <= 3
    assert got.queue_offsets == [1000]
    assert [m.body for m in got.messages()] == [b"needle"]
    assert got.next_begin_offset == 1001


def test_max_count_and_max_bytes(open_store):
    store = open_store(max_transfer_count_on_message_in_memory=32)
    sent = store.put_batch("TopicLimits", [b"x" * 100] * 50)
    size = sent.wrote_bytes - 20
    assert size % 50 == 0
    size //= 50
    got = store.get("TopicLimits", 0, 10, max_count=3)
    assert (got.queue_offsets, got.next_begin_offset) == ([10, 11, 12], 13)
    assert len(got.buffer) == 3 * size
    capped = store.get("TopicLimits", 0, 0, max_count=1000)
    assert capped.message_count == 32
    assert capped.next_begin_offset == 32
    two = store.get("TopicLimits", 0, 5, max_bytes=size * 2 + size // 2)
    assert (two.queue_offsets, two.next_begin_offset) == ([5, 6], 7)
    exact = store.get("TopicLimits", 0, 5, max_bytes=size * 4)
    assert exact.queue_offsets == [5, 6, 7, 8]
    # A limit below one record still returns the first record, so readers make progress.
    one = store.get("TopicLimits", 0, 48, max_bytes=1)
    assert (one.queue_offsets, one.next_begin_offset) == ([48], 49)
    tail = store.get("TopicLimits", 0, 45, max_count=32)
    assert (tail.queue_offsets, tail.next_begin_offset) == ([45, 46, 47, 48, 49], 50)


def test_a_batch_far_behind_the_log_end_gets_the_on_disk_limits(open_store, tmp_path):
    # With a ratio of 0 every record but the last byte counts as dropped from the page cache.
    cold = open_store(
        access_message_in_memory_max_ratio=0,
        max_transfer_count_on_message_in_disk=5,
        max_transfer_bytes_on_message_in_disk=3_000,
    )
    cold.put_batch("TopicCold", [b"x" * 100] * 20)
    cold.put_batch("TopicCold", [b"y" * 1000] * 20)
    got = cold.get("TopicCold", 0, 0, max_count=32)
    assert (got.queue_offsets, got.next_begin_offset) == ([0, 1, 2, 3, 4], 5)
    # What a broker with slaveReadEnable reads to send such a reader to a slave.
    assert got.in_disk
    big = cold.get("TopicCold", 0, 20, max_count=32)
    assert big.queue_offsets == [20, 21]  # 3,000 bytes hold two records of over 1,000
    assert big.next_begin_offset == 22
    # A byte limit of the caller's replaces both: it asked for what it reads.
    asked = cold.get("TopicCold", 0, 0, max_count=32, max_bytes=1 << 20)
    assert asked.message_count == 32
    # With the default ratio (40% of memory) the same batches count as in memory.
    warm = open_store(tmp_path / "warm", max_transfer_count_on_message_in_disk=5)
    warm.put_batch("TopicCold", [b"x" * 100] * 40)
    in_memory = warm.get("TopicCold", 0, 0, max_count=32)
    assert in_memory.message_count == 32
    assert not in_memory.in_disk
    # Nothing examined, nothing in disk.
    assert not cold.get("TopicCold", 0, 40).in_disk


def test_get_statuses(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root)
    store.put_batch("TopicStatus", [b"a", b"b", b"c"], queue_id=1)
    got = store.get("TopicStatus", 1, 0)
    assert got.status is GetMessageStatus.FOUND
    no_queue = store.get("TopicStatus", 0, 0)
    assert no_queue.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert (no_queue.message_count, no_queue.buffer) == (0, b"")
    assert store.get("NoSuchTopic", 1, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    one = store.get("TopicStatus", 1, 3)
    assert one.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert (one.next_begin_offset, one.min_offset, one.max_offset) == (3, 0, 3)
    assert one.message_count == 0
    badly = store.get("TopicStatus", 1, 4)
    assert badly.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert badly.message_count == 0
    # An overshooting reader is sent to the end of the queue, as the pull spec says (RocketMQ
    # would send it back to 0 while nothing was deleted, replaying the queue).
    assert badly.next_begin_offset == 3
    assert store.get("TopicStatus", 1, 10**12).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    # A negative offset (the wire's offsets are signed) is below the minimum, as in RocketMQ:
    # no messages, and the reader is sent to the minimum.
    below = store.get("TopicStatus", 1, -5)
    assert below.status is GetMessageStatus.OFFSET_TOO_SMALL
    assert (below.next_begin_offset, below.message_count, below.buffer) == (0, 0, b"")
    store.close()

    # A queue directory with no units: the queue exists but never held a message.
    (root / "consumequeue" / "TopicEmpty" / "0").mkdir(parents=True)
    store = open_store(root)
    assert ("TopicEmpty", 0) in store.queue_ids()
    empty = store.get("TopicEmpty", 0, 0)
    assert empty.status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert (empty.min_offset, empty.max_offset, empty.message_count) == (0, 0, 0)
    assert store.get("TopicEmpty", 0, -1).status is GetMessageStatus.NO_MESSAGE_IN_QUEUE
    assert store.get("TopicStatus", 1, 0).queue_offsets == [0, 1, 2]


def test_commit_log_rolls_over_segments(open_store, tmp_path, record_decoder):
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    sizes = [1 + (i * 997) % 3000 for i in range(150)]
    sent = []
    for i, n in enumerate(sizes):
        body = bytes([i % 251]) * n
        if i % 10 == 0:
            sent.append((store.put_batch("TopicRoll", [body, body[:1]], queue_id=i % 2), 2))
        else:
            sent.append((store.put("TopicRoll", body, queue_id=i % 2), 1))
    names = sorted(os.listdir(root / "commitlog"))
    assert len(names) >= 4
    assert names == [f"{k * SEGMENT:020d}" for k in range(len(names))]
    for name in names:
        assert (root / "commitlog" / name).stat().st_size == SEGMENT
    # The writer's segment is the last, or the one before a segment prepared ahead of the roll.
    writing = store.max_phy_offset // SEGMENT
    assert len(names) - 1 in (writing, writing + 1)
    # Groups never span segments; the first group of a new segment starts at its start.
    starts = set()
    for r, _ in sent:
        assert r.phy_offset // SEGMENT == (r.phy_offset + r.wrote_bytes - 1) // SEGMENT
        starts.add(r.phy_offset)
    for name in names[1 : writing + 1]:
        assert int(name) in starts
    expected: dict[int, list[bytes]] = {0: [], 1: []}
    for i, n in enumerate(sizes):
        body = bytes([i % 251]) * n
        expected[i % 2] += [body, body[:1]] if i % 10 == 0 else [body]
    for q in (0, 1):
        msgs = read_all(store, "TopicRoll", q)
        assert [m.body for m in msgs] == expected[q]
        assert [m.queue_offset for m in msgs] == list(range(len(expected[q])))
    for r, _ in sent:
        for phy in r.phy_offsets:
            m = store.look_message_by_offset(phy)
            assert m is not None
            assert m.phy_offset == phy
    # A read whose records span a segment boundary returns them end to end.
    spanning = store.get("TopicRoll", 0, 0, max_count=32, max_bytes=1 << 20)
    segments_seen = {p // SEGMENT for p in spanning.phy_offsets}
    assert len(segments_seen) >= 2
    for view, phy in zip(spanning.views(), spanning.phy_offsets, strict=True):
        assert record_decoder(view)["phy_offset"] == phy


def test_open_takes_a_mapping_of_rocketmq_keys(tmp_path):
    root = tmp_path / "mapped"
    settings = {
        "mappedFileSizeCommitLog": str(SEGMENT),
        "flushDiskType": "SYNC_FLUSH",
        "messageIndexEnable": "false",
        "storePathRootDir": str(tmp_path / "ignored"),
    }
    with MessageStore.open(root, settings) as store:
        sent = store.put("TopicMapped", b"x" * 300, keys="k")
        # SYNC_FLUSH: durable on return; the index is off, so the key finds nothing.
        assert sent.status is PutStatus.PUT_OK
        assert store.flushed_phy_offset >= sent.end_offset
        assert store.query_message("TopicMapped", "k") == []
    assert [p.stat().st_size for p in (root / "commitlog").iterdir()] == [SEGMENT]
    assert not (tmp_path / "ignored").exists()

    with pytest.raises(ConfigError, match="flushDiskType"):
        MessageStore.open(root, {"flushDiskType": "SOMETIMES"})
    with pytest.raises(TypeError, match="not list"):
        MessageStore.open(root, [("flushDiskType", "SYNC_FLUSH")])  # type: ignore[arg-type]


def test_reopen_after_clean_close_keeps_everything(open_store, tmp_path):
    root = tmp_path / "store"
    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    for i in range(120):
        store.put(f"TopicRe{i % 3}", os.urandom(200 + i * 17), queue_id=i % 4, keys=f"k{i}")
    state = {(t, q): [m.body for m in read_all(store, t, q)] for t, q in store.queue_ids()}
    max_phy, ids = store.max_phy_offset, store.queue_ids()
    last = store.put("TopicRe0", b"last", queue_id=0, keys="k-last")
    state[("TopicRe0", 0)].append(b"last")
    max_phy = store.max_phy_offset
    assert max_phy > SEGMENT
    store.close()
    assert store.closed

    store = open_store(root, mapped_file_size_commit_log=SEGMENT)
    assert store.max_phy_offset == max_phy
    assert store.min_phy_offset == 0
    assert store.queue_ids() == ids
    for (t, q), bodies in state.items():
        assert (store.min_offset(t, q), store.max_offset(t, q)) == (0, len(bodies))
        assert [m.body for m in read_all(store, t, q)] == bodies
    assert [m.body for m in store.query_message("TopicRe0", "k-last")] == [b"last"]
    assert store.view_message_by_id(last.msg_id).body == b"last"
    # Appends continue where the log ended.
    nxt = store.put("TopicRe0", b"next", queue_id=0)
    assert (nxt.phy_offset, nxt.queue_offset) == (max_phy, len(state[("TopicRe0", 0)]))


@pytest.mark.parametrize("rebuild", [False, True], ids=["clean-reopen", "rebuilt-from-log"])
def test_delayed_message_goes_to_the_schedule_topic(open_store, tmp_path, rebuild):
    root = tmp_path / "store"
    store = open_store(root)
    sent = store.put("TopicDelay", b"later", queue_id=5, tags="TagD", properties={"DELAY": "3"})
    assert sent.queue_id == 2
    assert sent.queue_offset == 0
    assert store.get("TopicDelay", 5, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    assert store.max_offset("TopicDelay", 5) == 0
    if rebuild:
        store.close()
        # A lost checkpoint and queues: everything is rebuilt from the CommitLog.
        shutil.rmtree(root / "consumequeue")
        (root / "checkpoint").unlink()
        (root / "abort").write_bytes(b"")
        store = open_store(root)
    assert store.queue_ids() == [("SCHEDULE_TOPIC_XXXX", 2)]
    got = store.get("SCHEDULE_TOPIC_XXXX", 2, 0)
    assert got.status is GetMessageStatus.FOUND
    [m] = got.messages()
    assert m.topic == "SCHEDULE_TOPIC_XXXX"
    assert m.queue_id == 2
    assert m.body == b"later"
    assert m.properties["REAL_TOPIC"] == "TopicDelay"
    assert m.properties["REAL_QID"] == "5"
    assert m.properties["DELAY"] == "3"
    assert m.tags == "TagD"
    # Level 3 is 10 s: the unit's tag code is the due time.
    [unit] = store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 2, 0, 10)
    assert unit == (0, sent.phy_offset, got.sizes[0], sent.store_timestamp_ms + 10_000)


def test_a_consume_queue_file_missing_between_others_is_written_again(open_store, tmp_path):
    """The queue's other files and the other queues keep working: the units after the gap are
    rebuilt from the CommitLog (before, the store refused to open)."""
    root = tmp_path / "store"
    config = {"mapped_file_size_consume_queue": 20 * 10}
    store = open_store(root, **config)
    for i in range(50):
        store.put("TopicGap", b"gap-%d" % i, keys=f"g{i}")
    # Written after, so the furthest queue ends past every record of TopicGap.
    store.put("TopicLater", b"later")
    units = store.consume_queue_units("TopicGap", 0, 0, 50)
    store.close()
    (root / "consumequeue" / "TopicGap" / "0" / f"{20 * 20:020d}").unlink()

    store = open_store(root, **config)
    assert (store.min_offset("TopicGap", 0), store.max_offset("TopicGap", 0)) == (0, 50)
    assert store.consume_queue_units("TopicGap", 0, 0, 50) == units
    bodies = [m.body for m in read_all(store, "TopicGap", 0)]
    assert bodies == [b"gap-%d" % i for i in range(50)]
    assert [m.body for m in read_all(store, "TopicLater", 0)] == [b"later"]
    assert [m.body for m in store.query_message("TopicGap", "g25")] == [b"gap-25"]
    assert store.put("TopicGap", b"next").queue_offset == 50


def test_delay_levels_beyond_the_table_use_the_last_level(open_store):
    store = open_store(message_delay_level="1s 5s")
    sent = store.put("TopicDelay", b"x", properties={"DELAY": "9"})
    assert sent.queue_id == 1
    [unit] = store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 1, 0, 10)
    assert unit[3] == sent.store_timestamp_ms + 5_000
    plain = store.put("TopicDelay", b"y", properties={"DELAY": "0"})
    assert (plain.queue_id, plain.queue_offset) == (0, 0)
    assert store.get("TopicDelay", 0, 0).messages()[0].body == b"y"


@pytest.mark.parametrize("rebuild", [False, True], ids=["clean-reopen", "rebuilt-from-log"])
def test_prepared_transaction_is_stored_but_not_queued(open_store, tmp_path, rebuild):
    root = tmp_path / "store"
    store = open_store(root)
    half = store.put("TopicTx", b"half", queue_id=1, sys_flag=4, keys="tx-1")
    assert store.max_offset("TopicTx", 1) == 0
    assert store.queue_ids() == []
    if rebuild:
        store.close()
        shutil.rmtree(root / "consumequeue")
        (root / "checkpoint").unlink()
        (root / "abort").write_bytes(b"")
        store = open_store(root)
    m = store.look_message_by_offset(half.phy_offset)
    assert m is not None
    assert (m.body, m.sys_flag, m.topic) == (b"half", 4, "TopicTx")
    assert store.queue_ids() == []
    assert store.get("TopicTx", 1, 0).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    # The key index still finds it (a transaction check looks it up).
    assert [x.body for x in store.query_message("TopicTx", "tx-1")] == [b"half"]
    committed = store.put("TopicTx", b"commit", queue_id=1)
    assert committed.queue_offset == 0
    assert [x.body for x in read_all(store, "TopicTx", 1)] == [b"commit"]


def test_internal_write_to_the_schedule_topic_keeps_its_due_time_across_a_rebuild(
    open_store, tmp_path
):
    """A unit's tag code in SCHEDULE_TOPIC_XXXX must not depend on how the unit was written.

    As in RocketMQ's dispatch, a record of that topic with a DELAY property gets its due time
    (store time + the level's delay) as tag code; one without keeps its tag hash. The live put
    and the rebuild from the CommitLog must agree.
    """
    root = tmp_path / "store"
    store = open_store(root)
    delayed = store.put(
        "SCHEDULE_TOPIC_XXXX",
        b"re-put",
        queue_id=2,
        properties={"DELAY": "3", "REAL_TOPIC": "T", "REAL_QID": "0"},
        internal=True,
    )
    plain = store.put("SCHEDULE_TOPIC_XXXX", b"plain", queue_id=4, internal=True)
    live = (
        store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 2, 0, 10),
        store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 4, 0, 10),
    )
    store.close()
    shutil.rmtree(root / "consumequeue")
    (root / "checkpoint").unlink()
    (root / "abort").write_bytes(b"")
    store = open_store(root)
    rebuilt = (
        store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 2, 0, 10),
        store.consume_queue_units("SCHEDULE_TOPIC_XXXX", 4, 0, 10),
    )
    assert [u[3] for u in live[0]] == [delayed.store_timestamp_ms + 10_000]
    assert [u[3] for u in live[1]] == [0]
    assert rebuilt == live
    assert plain.queue_offset == 0


def test_flush_and_flush_timeout(open_store):
    store = open_store()
    store.put_batch("TopicFlush", [b"a", b"b"])
    # Without the background flusher, ASYNC_FLUSH data waits for an explicit flush.
    assert store.flushed_phy_offset == 0
    assert store.flush() == store.max_phy_offset
    assert store.flushed_phy_offset == store.max_phy_offset
    store.close()

    sync = open_store(
        flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=30, background_services=False
    )
    # Nobody flushes: the put is stored and visible, but reports the late fsync.
    r = sync.put("TopicFlush", b"late")
    assert r.status is PutStatus.FLUSH_DISK_TIMEOUT
    assert [m.body for m in sync.get("TopicFlush", 0, 2).messages()] == [b"late"]


def test_sync_flush_put_is_durable_when_it_returns(open_store):
    store = open_store(flush_disk_type="SYNC_FLUSH", background_services=True)
    for i in range(20):
        r = store.put("TopicSync", b"s" * i)
        assert r.status is PutStatus.PUT_OK
        assert store.flushed_phy_offset >= r.phy_offset + r.wrote_bytes


def test_ipv6_born_hosts(open_store):
    store = open_store()
    store.put("TopicV6", b"six", born_host="[::1]:8080")
    store.put("TopicV6", b"mapped", born_host="[::ffff:1.2.3.4]:80")
    six, mapped = store.get("TopicV6", 0, 0).messages()
    assert (six.body, six.born_host, six.sys_flag & 0x10) == (b"six", "[::1]:8080", 0x10)
    # An IPv4-mapped address is stored as plain IPv4.
    assert (mapped.body, mapped.born_host, mapped.sys_flag) == (b"mapped", "1.2.3.4:80", 0)
    assert six.store_size == mapped.store_size + 12 - len(b"mapped") + len(b"six")
    assert store.look_message_by_offset(six.phy_offset).born_host == "[::1]:8080"


def test_group_size_limit_is_the_segment(open_store):
    store = open_store(mapped_file_size_commit_log=SEGMENT, max_message_size=1 << 20)
    store.put("TopicEdge", b"first")
    # record (88 + body + 1 + topic + 2) + 20-byte fence + 8 spare bytes == one segment.
    largest = SEGMENT - 8 - 20 - (88 + 1 + len("TopicEdge") + 2)
    r = store.put("TopicEdge", b"L" * largest)
    assert (r.phy_offset, r.wrote_bytes) == (SEGMENT, SEGMENT - 8)
    with pytest.raises(MessageTooLargeError):
        store.put("TopicEdge", b"L" * (largest + 1))
    assert store.max_phy_offset == 2 * SEGMENT - 8
    assert store.get("TopicEdge", 0, 1).messages()[0].body == b"L" * largest
    nxt = store.put("TopicEdge", b"next")
    assert nxt.phy_offset == 2 * SEGMENT


def test_lookup_at_a_fence_or_blank_finds_nothing(open_store):
    store = open_store(mapped_file_size_commit_log=SEGMENT)
    first = store.put("TopicFence", b"x" * 40_000)
    second = store.put("TopicFence", b"y" * 40_000)
    assert second.phy_offset == SEGMENT
    fence = first.phy_offset + first.wrote_bytes - 20
    blank = first.phy_offset + first.wrote_bytes
    assert store.look_message_by_offset(fence) is None
    assert store.look_message_by_offset(blank) is None
    assert store.look_message_by_offset(second.phy_offset).body == b"y" * 40_000


def test_a_property_given_twice_means_its_last_value_to_filters_and_the_index(open_store):
    """As a map built from the pairs keeps it (RocketMQ's decoder, and ours): the tag code and
    the index keys agree with the tags and keys readers decode."""
    store = open_store()
    props = b"TAGS\x01A\x02TAGS\x01B\x02KEYS\x01k1\x02KEYS\x01k2"
    body = b"twice"
    item = struct.pack(">iiiii", 20 + len(body) + 2 + len(props), 0, 0, 0, len(body))
    item += body + struct.pack(">h", len(props)) + props
    store.put_encoded_batch("TopicTwice", item)
    [msg] = store.get("TopicTwice", 0, 0).messages()
    assert (msg.tags, msg.keys, msg.property("TAGS")) == ("B", ["k2"], "B")
    assert store.get("TopicTwice", 0, 0, tags="B").status is GetMessageStatus.FOUND
    assert store.get("TopicTwice", 0, 0, tags="A").status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert [m.body for m in store.query_message("TopicTwice", "k2")] == [body]
    assert store.query_message("TopicTwice", "k1") == []


def test_key_index_spans_several_index_files(open_store, tmp_path):
    store = open_store(tmp_path / "store", max_hash_slot_num=100, max_index_num=400)
    sent = []
    for j in range(12):
        sent.append(
            store.put_batch(
                "TopicIdx",
                [f"{j}-{k}".encode() for k in range(100)],
                keys=f"batch-{j}",
                properties={"UNIQ_KEY": f"U{j}"},
            )
        )
    assert len(os.listdir(tmp_path / "store" / "index")) >= 3
    for j in (0, 4, 11):
        found = store.query_message("TopicIdx", f"batch-{j}", max_count=500)
        # Oldest first, as RocketMQ sorts them.
        assert [m.phy_offset for m in found] == sent[j].phy_offsets
        assert len(store.query_message("TopicIdx", f"U{j}", max_count=500)) == 100
        # A limit keeps the newest.
        ten = store.query_message("TopicIdx", f"batch-{j}", max_count=10)
        assert [m.phy_offset for m in ten] == sent[j].phy_offsets[-10:]


def test_the_commit_log_can_live_in_a_directory_of_its_own(open_store, tmp_path):
    """RocketMQ's storePathCommitLog: segments there; queues, index and checkpoint at the root."""
    root, elsewhere = tmp_path / "store", tmp_path / "disk2" / "commitlog"
    config = {"store_path_commit_log": str(elsewhere), "mapped_file_size_commit_log": 65536}
    store = open_store(root, **config)
    sent = [store.put("TopicAway", bytes(1000) + b"%d" % i, keys=f"k{i}") for i in range(100)]
    assert store.check_disk() is not None
    store.close()
    assert not (root / "commitlog").exists()
    assert {"consumequeue", "index", "checkpoint"} <= set(os.listdir(root))
    segments = sorted(os.listdir(elsewhere))
    assert len(segments) >= 2
    assert segments[0] == f"{0:020d}"

    (root / "abort").write_bytes(b"")  # and after a crash
    store = open_store(root, **config)
    assert store.max_phy_offset == sent[-1].end_offset
    assert [m.body for m in store.query_message("TopicAway", "k42")] == [bytes(1000) + b"42"]
    assert store.get("TopicAway", 0, 99).messages()[0].phy_offset == sent[99].phy_offset
