"""Refused input: a typed error, nothing written, and the store still usable afterwards."""

import hashlib
import logging
import os
import struct

import pytest

from pyrmq.errors import (
    ConfigError,
    InvalidQueueIdError,
    InvalidTopicError,
    MessageIllegalError,
    MessageTooLargeError,
    PropertiesTooLargeError,
    StoreClosedError,
    StoreIOError,
    SystemTopicError,
)
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = pytest.mark.integration

MAX_BODY = 1024
MAX_QUEUES = 8


@pytest.fixture
def store(open_store):
    store = open_store(max_message_size=MAX_BODY, max_queue_nums_per_topic=MAX_QUEUES)
    store.put("TopicGood", b"seed", keys="seed")
    return store


def snapshot(store: MessageStore, root) -> tuple:
    """Offsets, queues, and the name and content of every data file."""
    files = {}
    for d, _, names in os.walk(root):
        for name in names:
            if name not in ("checkpoint", "lock", "abort"):
                path = os.path.join(d, name)
                with open(path, "rb") as f:
                    files[os.path.relpath(path, root)] = hashlib.blake2b(f.read()).digest()
    return store.max_phy_offset, store.queue_ids(), files


def assert_refused(store, tmp_path, error, call) -> None:
    """``call(store)`` raises ``error`` and leaves the store as it was, and usable."""
    before = snapshot(store, tmp_path / "store")
    with pytest.raises(error):
        call(store)
    assert snapshot(store, tmp_path / "store") == before
    nxt = store.max_offset("TopicGood", 0)
    r = store.put("TopicGood", b"after")
    assert (r.phy_offset, r.queue_offset) == (before[0], nxt)
    got = store.get("TopicGood", 0, nxt)
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages()] == [b"after"]


BAD_TOPICS = [
    "",
    "x" * 128,
    "has space",
    "a/b",
    "tópico",
    "topic\x00",
    "tab\t",
    "dot.topic",
    "ünï",
]


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=repr)
@pytest.mark.parametrize("api", ["put", "put_batch", "put_encoded_batch"])
def test_invalid_topic_names(store, tmp_path, topic, api):
    calls = {
        "put": lambda s: s.put(topic, b"x"),
        "put_batch": lambda s: s.put_batch(topic, [b"x", b"y"]),
        "put_encoded_batch": lambda s: s.put_encoded_batch(topic, encoded_batch([b"x"])),
    }
    assert_refused(store, tmp_path, InvalidTopicError, calls[api])


def test_longest_and_widest_topic_names_are_accepted(store):
    longest = "t" * 127
    assert store.put(longest, b"x").queue_offset == 0
    assert store.get(longest, 0, 0).messages()[0].topic == longest
    assert store.put("Az09_-%|", b"y").queue_offset == 0


@pytest.mark.parametrize("topic", ["RMQ_SYS_TRACE_TOPIC", "BenchmarkTest", "TBW102", "rmq_sys_x"])
def test_system_topics_that_producers_write_take_user_writes(store, topic):
    # RocketMQ refuses sends only to the topics its broker alone writes; clients send trace
    # data to RMQ_SYS_TRACE_TOPIC and its benchmark tool sends to BenchmarkTest.
    assert store.put(topic, b"one").queue_offset == 0
    assert store.put_batch(topic, [b"two", b"three"]).queue_offsets == [1, 2]
    got = store.get(topic, 0, 0)
    assert [m.body for m in got.messages()] == [b"one", b"two", b"three"]


@pytest.mark.parametrize(
    "topic", ["SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT"]
)
def test_broker_only_topics_need_internal(store, tmp_path, topic):
    assert_refused(store, tmp_path, SystemTopicError, lambda s: s.put(topic, b"x"))
    assert_refused(store, tmp_path, SystemTopicError, lambda s: s.put_batch(topic, [b"x"]))
    assert_refused(
        store,
        tmp_path,
        SystemTopicError,
        lambda s: s.put_encoded_batch(topic, encoded_batch([b"x"])),
    )
    r = store.put(topic, b"internal", queue_id=1, internal=True)
    assert r.queue_offset == 0
    got = store.get(topic, 1, 0)
    assert [(m.topic, m.body) for m in got.messages()] == [(topic, b"internal")]
    assert store.put_batch(topic, [b"a", b"b"], queue_id=1, internal=True).queue_offsets == [1, 2]


def test_body_over_max_message_size(store, tmp_path):
    assert store.put("TopicGood", b"x" * MAX_BODY).count == 1
    too_big = b"x" * (MAX_BODY + 1)
    assert_refused(store, tmp_path, MessageTooLargeError, lambda s: s.put("TopicGood", too_big))
    # One oversized body refuses the whole batch.
    assert_refused(
        store,
        tmp_path,
        MessageTooLargeError,
        lambda s: s.put_batch("TopicGood", [b"small", too_big, b"small"]),
    )
    assert_refused(
        store,
        tmp_path,
        MessageTooLargeError,
        lambda s: s.put_encoded_batch("TopicGood", encoded_batch([b"ok", too_big])),
    )


def test_group_larger_than_a_segment(open_store, tmp_path):
    store = open_store(mapped_file_size_commit_log=64 * 1024)
    store.put("TopicGood", b"seed")
    bodies = [b"z" * 20_000] * 4
    assert_refused(
        store, tmp_path, MessageTooLargeError, lambda s: s.put_batch("TopicGood", bodies)
    )


def test_properties_over_32767_bytes(store, tmp_path):
    value = "v" * 32_760
    assert_refused(
        store,
        tmp_path,
        PropertiesTooLargeError,
        lambda s: s.put("TopicGood", b"x", properties={"big": value, "more": "0123456789"}),
    )
    assert_refused(
        store,
        tmp_path,
        PropertiesTooLargeError,
        lambda s: s.put_batch("TopicGood", [b"x"], keys=["k" * 20_000, "j" * 20_000]),
    )
    # Exactly 32767 bytes fit: "big" + \x01 + value.
    r = store.put("TopicGood", b"x", properties={"big": "v" * (32_767 - 4)})
    assert len(store.look_message_by_offset(r.phy_offset).properties["big"]) == 32_763


@pytest.mark.parametrize("queue_id", [-1, MAX_QUEUES, MAX_QUEUES + 1, 2**31 - 1, -(2**31)])
def test_queue_id_out_of_range(store, tmp_path, queue_id):
    assert_refused(
        store, tmp_path, InvalidQueueIdError, lambda s: s.put("TopicGood", b"x", queue_id=queue_id)
    )
    assert_refused(
        store,
        tmp_path,
        InvalidQueueIdError,
        lambda s: s.put_batch("TopicGood", [b"x"], queue_id=queue_id),
    )
    assert_refused(
        store,
        tmp_path,
        InvalidQueueIdError,
        lambda s: s.put_encoded_batch("TopicGood", encoded_batch([b"x"]), queue_id=queue_id),
    )


@pytest.mark.parametrize("queue_id", [2**31, -(2**31) - 1, 2**64])
def test_queue_id_beyond_32_bits(store, tmp_path, queue_id):
    for call in (
        lambda s: s.put("TopicGood", b"x", queue_id=queue_id),
        lambda s: s.put_batch("TopicGood", [b"x"], queue_id=queue_id),
        lambda s: s.put_encoded_batch("TopicGood", encoded_batch([b"x"]), queue_id=queue_id),
    ):
        assert_refused(store, tmp_path, InvalidQueueIdError, call)
    with pytest.raises(InvalidQueueIdError):
        store.get("TopicGood", queue_id, 0)
    with pytest.raises(InvalidQueueIdError):
        store.max_offset("TopicGood", queue_id)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"flag": 2**31},
        {"sys_flag": -(2**31) - 1},
        {"born_timestamp_ms": 2**63},
        {"reconsume_times": 2**40},
        {"prepared_transaction_offset": -(2**63) - 1},
    ],
    ids=repr,
)
def test_record_fields_beyond_their_width(store, tmp_path, kwargs):
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put("TopicGood", b"x", **kwargs)
    )


LONE_SURROGATE = "\udc80"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"tags": LONE_SURROGATE},
        {"keys": LONE_SURROGATE},
        {"keys": ["k", LONE_SURROGATE]},
        {"properties": {"name": LONE_SURROGATE}},
        {"properties": {LONE_SURROGATE: "v"}},
        {"properties": "a\x01" + LONE_SURROGATE},
        {"born_host": LONE_SURROGATE},
    ],
    ids=repr,
)
def test_text_utf8_cannot_encode(store, tmp_path, kwargs):
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put("TopicGood", b"x", **kwargs)
    )


def test_a_topic_utf8_cannot_encode(store, tmp_path):
    topic = "Topic" + LONE_SURROGATE
    assert_refused(store, tmp_path, InvalidTopicError, lambda s: s.put(topic, b"x"))
    with pytest.raises(InvalidTopicError):
        store.max_offset(topic, 0)
    with pytest.raises(MessageIllegalError):
        store.get("TopicGood", 0, 0, tags=LONE_SURROGATE)
    with pytest.raises(MessageIllegalError):
        store.query_message("TopicGood", LONE_SURROGATE)


def test_offsets_and_times_beyond_64_bits_are_clamped(store):
    assert store.get("TopicGood", 0, 2**64).status is GetMessageStatus.OFFSET_OVERFLOW_BADLY
    assert store.look_message_by_offset(2**70) is None
    assert store.look_message_by_offset(-(2**70)) is None
    found = store.query_message("TopicGood", "seed", begin_ms=-(2**70), end_ms=2**70)
    assert [m.body for m in found] == [b"seed"]
    assert store.offset_for_time("TopicGood", 0, 2**70) == 1


def test_highest_queue_id_is_accepted(store):
    assert store.put("TopicGood", b"x", queue_id=MAX_QUEUES - 1).queue_id == MAX_QUEUES - 1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"properties": {"bad\x01name": "v"}},
        {"properties": {"bad\x02name": "v"}},
        {"properties": {"name": "bad\x01value"}},
        {"properties": {"name": "bad\x02value"}},
        {"properties": {"": "empty name"}},
        {"tags": "Tag\x02A"},
        {"tags": "Tag\x01A"},
        {"keys": ["k1", "k\x022"]},
        {"keys": "k\x01"},
    ],
    ids=repr,
)
def test_separators_in_property_text(store, tmp_path, kwargs):
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put("TopicGood", b"x", **kwargs)
    )
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put_batch("TopicGood", [b"x"], **kwargs)
    )


def encoded_batch(bodies: list[bytes], props: bytes = b"") -> bytes:
    out = b""
    for body in bodies:
        total = 20 + len(body) + 2 + len(props)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return out


GOOD = encoded_batch([b"hello", b"world"])


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\x00", id="two-bytes"),
        pytest.param(GOOD[:-1], id="last-byte-missing"),
        pytest.param(GOOD + b"\x00", id="trailing-byte"),
        pytest.param(GOOD[:10], id="cut-in-header"),
        pytest.param(
            struct.pack(">iiiii", 10, 0, 0, 0, 0) + b"\x00\x00", id="total-below-fixed-part"
        ),
        pytest.param(
            struct.pack(">iiiii", 1000, 0, 0, 0, 5) + b"hello\x00\x00", id="total-past-buffer"
        ),
        pytest.param(
            struct.pack(">iiiii", 27, 0, 0, 0, 500) + b"hello\x00\x00", id="body-past-item"
        ),
        pytest.param(
            struct.pack(">iiiii", 27, 0, 0, 0, 2) + b"hello\x00\x00", id="bytes-left-in-item"
        ),
        pytest.param(
            struct.pack(">iiiii", 27, 0, 0, 0, 5) + b"hello\x00\x09", id="props-past-item"
        ),
        pytest.param(
            struct.pack(">iiiii", -27, 0, 0, 0, 5) + b"hello\x00\x00", id="negative-total"
        ),
    ],
)
def test_malformed_encoded_batch(store, tmp_path, batch):
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put_encoded_batch("TopicGood", batch)
    )


@pytest.mark.parametrize(
    "raw",
    [b"TAGS\x01\xd6\xd0\xce\xc4", b"NUL\x01a\x00\xff", b"\xff\x01v"],
    ids=["not-utf8", "nul-and-not-utf8", "name-not-utf8"],
)
def test_client_batch_properties_that_are_not_utf8_are_refused(store, tmp_path, raw):
    """Every reader takes properties as text (tag codes, keys, clients' maps): bytes that are
    not UTF-8 would make a message's tags and keys vanish."""
    batch = encoded_batch([b"x"], raw + b"\x02KEYS\x01k1")
    assert_refused(store, tmp_path, MessageIllegalError, lambda s: s.put_encoded_batch("T", batch))


def test_a_client_batch_larger_than_one_message_may_be_is_refused(store, tmp_path):
    """RocketMQ's limit on a batch: its encoded body, like any message body."""
    big = encoded_batch([b"x" * 100] * (MAX_BODY // 100))
    assert len(big) > MAX_BODY
    assert_refused(
        store, tmp_path, MessageTooLargeError, lambda s: s.put_encoded_batch("TopicGood", big)
    )


@pytest.mark.parametrize("sys_flag", [0x4, 0x8, 0xC], ids=["prepared", "commit", "rollback"])
def test_a_client_batch_in_a_transaction_is_refused(store, tmp_path, sys_flag):
    """A transaction's half or end is one message; a batch with those bits would be stored
    where no queue shows it."""
    assert_refused(
        store,
        tmp_path,
        MessageIllegalError,
        lambda s: s.put_encoded_batch("TopicGood", GOOD, sys_flag=sys_flag),
    )


def test_empty_batch_is_refused(store, tmp_path):
    assert_refused(store, tmp_path, MessageIllegalError, lambda s: s.put_batch("TopicGood", []))


@pytest.mark.parametrize("host", ["localhost:1", "1.2.3.4", "1.2.3.4:99999", "nonsense"])
def test_bad_born_host(store, tmp_path, host):
    assert_refused(
        store, tmp_path, MessageIllegalError, lambda s: s.put("TopicGood", b"x", born_host=host)
    )


NEGATIVE_ARGUMENTS = {
    "get-max_count": lambda s: s.get("TopicGood", 0, 0, max_count=-1),
    "get-max_bytes": lambda s: s.get("TopicGood", 0, 0, max_bytes=-1),
    "query_message-max_count": lambda s: s.query_message("TopicGood", "seed", max_count=-1),
    "scan_consume_queue-start_offset": lambda s: s.scan_consume_queue("TopicGood", 0, -1, 9),
    "scan_consume_queue-max_units": lambda s: s.scan_consume_queue("TopicGood", 0, 0, -1),
    "consume_queue_units-start_offset": lambda s: s.consume_queue_units("TopicGood", 0, -1, 9),
    "consume_queue_units-max_units": lambda s: s.consume_queue_units("TopicGood", 0, 0, -1),
}


@pytest.mark.parametrize("case", NEGATIVE_ARGUMENTS)
def test_negative_counts_name_the_argument(store, case):
    name = case.split("-")[1]
    with pytest.raises(ValueError, match=f"^{name} must not be negative, got -1$"):
        NEGATIVE_ARGUMENTS[case](store)
    # Bounds past any queue's end are upper bounds, not errors.
    got = store.get("TopicGood", 0, 0, max_count=2**40, max_bytes=2**40)
    assert [m.body for m in got.messages()] == [b"seed"]
    assert store.consume_queue_units("TopicGood", 0, 0, 2**63 - 1)[0][0] == 0
    assert store.store_time("TopicGood", 0, -1) is None


def test_an_exception_raised_while_the_store_logs_reaches_the_caller(open_store, monkeypatch):
    """The store logs through ``logging``: what a handler or filter raises there comes out of
    the call as itself (not as a SystemError), and the work is done."""

    class Failing(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise LookupError("filter failed")

    # Without the group-commit thread a SYNC_FLUSH put times out, and warns on this thread.
    store = open_store(flush_disk_type="SYNC_FLUSH", sync_flush_timeout_ms=1)
    monkeypatch.setattr(logging.getLogger("pyrmq_store.store"), "filters", [Failing()])
    with pytest.raises(LookupError, match="filter failed"):
        store.put("TopicLogged", b"x")
    monkeypatch.undo()
    assert [m.body for m in store.get("TopicLogged", 0, 0).messages()] == [b"x"]


def test_every_call_after_close_raises_store_closed(open_store):
    store = open_store()
    r = store.put("TopicGood", b"x")
    store.close()
    store.close()  # idempotent
    assert store.closed
    calls = [
        lambda: store.put("TopicGood", b"x"),
        lambda: store.put_batch("TopicGood", [b"x"]),
        lambda: store.put_encoded_batch("TopicGood", GOOD),
        lambda: store.get("TopicGood", 0, 0),
        lambda: store.look_message_by_offset(r.phy_offset),
        lambda: store.view_message_by_id(r.msg_id),
        lambda: store.query_message("TopicGood", "x"),
        lambda: store.flush(),
        lambda: store.delete_expired_files(force=True),
        # Queries that would otherwise answer from the closed store's last state.
        lambda: store.min_offset("TopicGood", 0),
        lambda: store.max_offset("TopicGood", 0),
        lambda: store.offset_for_time("TopicGood", 0, 0),
        lambda: store.earliest_store_time("TopicGood", 0),
        lambda: store.store_time("TopicGood", 0, 0),
        lambda: store.consume_queue_units("TopicGood", 0, 0, 10),
        lambda: store.scan_consume_queue("TopicGood", 0, 0, 10),
        lambda: store.queue_ids(),
        lambda: store.offset_in_disk("TopicGood", 0, 0),
        # Nothing would ever wake a pull parked on a closed store.
        lambda: store.hold_pull(1, "TopicGood", 0, 1),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError):
            call()


def test_opening_an_open_directory_twice_fails(open_store, tmp_path, make_config):
    store = open_store()
    store.put("TopicGood", b"x")
    max_phy = store.max_phy_offset
    with pytest.raises(StoreIOError):
        MessageStore.open(tmp_path / "store", make_config(), background_services=False)
    # The failed open changed nothing; the first store still works.
    assert store.put("TopicGood", b"y").phy_offset == max_phy
    store.close()
    again = open_store()
    assert [m.body for m in again.get("TopicGood", 0, 0).messages()] == [b"x", b"y"]


def test_opening_a_commit_log_another_store_uses_fails(open_store, tmp_path):
    """Two roots sharing one CommitLog directory would append over each other's records."""
    shared = {"store_path_commit_log": str(tmp_path / "shared-log")}
    first = open_store(tmp_path / "a", **shared)
    r = first.put("TopicGood", b"first")
    with pytest.raises(StoreIOError, match="in use"):
        open_store(tmp_path / "b", **shared)
    assert first.put("TopicGood", b"second").phy_offset > r.phy_offset
    first.close()
    again = open_store(tmp_path / "b", **shared)
    assert again.look_message_by_offset(r.phy_offset).body == b"first"


@pytest.mark.parametrize("order", ["default-first", "named-first"])
def test_naming_another_stores_default_commit_log_fails(open_store, tmp_path, order):
    """A store's own ``<root>/commitlog`` is locked as well as a directory named elsewhere."""
    owner = {"root": tmp_path / "a"}
    borrower = {"root": tmp_path / "b", "store_path_commit_log": str(tmp_path / "a" / "commitlog")}
    first, second = (owner, borrower) if order == "default-first" else (borrower, owner)
    opened = open_store(first.pop("root"), **first)
    r = opened.put("TopicGood", b"first")
    with pytest.raises(StoreIOError, match="in use"):
        open_store(second.pop("root"), **second)
    assert opened.put("TopicGood", b"second").phy_offset > r.phy_offset
    assert [m.body for m in opened.get("TopicGood", 0, 0).messages()] == [b"first", b"second"]


def test_an_empty_store_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="empty"):
        MessageStore.open("", background_services=False)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("file_reserved_time_hours", 2**63),
        ("flush_interval_commit_log_ms", 0),
        ("clean_resource_interval_ms", 0),
        ("disk_space_warning_level_ratio", 0),
        ("disk_max_used_space_ratio", 500),
        ("delete_when", ""),
        ("delete_when", "4;;5"),
        ("max_message_size", 0),
        ("mapped_file_size_commit_log", 2**40),
        ("mapped_file_size_consume_queue", 20 * 2**40),
        ("message_delay_level", "1s\x1f2s"),
        ("message_delay_level", "1é"),
    ],
)
def test_the_extension_checks_settings_as_store_config_does(tmp_path, setting, value):
    """``MessageStore(path, settings)``, below ``open``, refuses what StoreConfig refuses."""
    with pytest.raises(ConfigError, match=setting):
        MessageStore(str(tmp_path), {setting: value, "background_services": False})
    assert not (tmp_path / "commitlog").exists()


@pytest.mark.parametrize("sys_flag", [0x10, 0x20, 0x30])
def test_host_family_bits_in_sys_flag_follow_the_hosts(open_store, tmp_path, sys_flag):
    """The bits that say a host is IPv6 decide a record's layout: the store sets them from
    the hosts, whatever the caller claims, and the record reads back whole."""
    store = open_store()
    r = store.put("TopicGood", b"claims-v6", sys_flag=sys_flag | 0x1)
    store.put("TopicGood", b"after")
    got = store.get("TopicGood", 0, 0)
    assert got.corrupt_offsets == []
    assert [m.body for m in got.messages()] == [b"claims-v6", b"after"]
    m = store.look_message_by_offset(r.phy_offset)
    assert (m.body, m.sys_flag) == (b"claims-v6", 0x1)
    store.close()
    store = open_store()
    assert store.recovery["truncated_bytes"] == 0
    assert [m.body for m in store.get("TopicGood", 0, 0).messages()] == [b"claims-v6", b"after"]


def test_a_huge_max_count_reads_what_there_is(open_store):
    store = open_store(max_transfer_count_on_message_in_memory=2**31 - 1)
    store.put_batch("TopicGood", [b"a", b"b", b"c"])
    got = store.get("TopicGood", 0, 0, max_count=2**31 - 1)
    assert [m.body for m in got.messages()] == [b"a", b"b", b"c"]
