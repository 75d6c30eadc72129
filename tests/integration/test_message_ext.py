"""MessageExt, the consumer's view of a message, decoded from real stored records: the
official client's field names, the original topic of a retry, inflated bodies."""

import gc
import zlib

import pytest

from pyrmq import _core
from pyrmq.client import MessageExt, MessageQueue
from pyrmq.errors import MessageIllegalError
from pyrmq.store import GetMessageStatus

pytestmark = pytest.mark.integration

STORE_HOST = "10.20.30.40:10911"


def received(store, topic: str, queue_id: int = 0) -> list[MessageExt]:
    got = store.get(topic, queue_id, 0, max_count=32)
    assert got.status is GetMessageStatus.FOUND
    return _core.decode_received(got.buffer, "broker-a")


def test_fields_under_the_official_names(open_store):
    store = open_store(store_host=STORE_HOST)
    sent = store.put(
        "TopicExt",
        b"hello",
        queue_id=2,
        tags="TagA",
        keys=["k1", "k2"],
        properties={"UNIQ_KEY": "AC11000200002A9F", "color": "blue"},
        flag=7,
        born_timestamp_ms=1_700_000_000_123,
        born_host="192.168.7.9:4321",
        reconsume_times=2,
    )
    [m] = received(store, "TopicExt", 2)
    assert (m.topic, m.broker_name, m.queue_id, m.queue_offset) == ("TopicExt", "broker-a", 2, 0)
    assert (m.body, bytes(m), str(m)) == (b"hello", b"hello", "hello")
    assert (m.tags, m.keys, m.flag, m.reconsume_times) == ("TagA", "k1 k2", 7, 2)
    assert m.id == m.msg_id == "AC11000200002A9F"
    assert m.offset_msg_id == sent.msg_id
    assert m.commit_log_offset == sent.phy_offset
    assert (m.born_timestamp, m.born_host) == (1_700_000_000_123, "192.168.7.9:4321")
    assert (m.store_timestamp, m.store_host) == (sent.store_timestamp_ms, STORE_HOST)
    assert m.store_size == m.stored.store_size > len(b"hello")
    assert m.get_property("color") == m.get_property(b"color") == m["color"] == "blue"
    assert m.get_property("missing") is None
    assert m.properties["KEYS"] == "k1 k2"
    assert m.message_queue == MessageQueue("TopicExt", "broker-a", 2)
    assert repr(m).startswith("MessageExt(topic='TopicExt', id='AC11000200002A9F', tags='TagA'")
    assert "queue=broker-a:2@0, body=<5 bytes>" in repr(m)


def test_without_uniq_key_the_id_is_the_offset_id(open_store):
    store = open_store(store_host=STORE_HOST)
    store.put("TopicExt", b"x")
    [m] = received(store, "TopicExt")
    assert m.id == m.offset_msg_id
    assert (m.tags, m.keys, m.delay_time_level) == (None, "", 0)


def test_a_delayed_message_keeps_its_level(open_store):
    store = open_store(store_host=STORE_HOST)
    store.put("TopicExt", b"later", properties={"DELAY": "3"})
    [m] = received(store, "SCHEDULE_TOPIC_XXXX", 2)
    assert (m.delay_time_level, m.get_property("REAL_TOPIC")) == (3, "TopicExt")


def test_a_retry_shows_its_original_topic(open_store):
    store = open_store(store_host=STORE_HOST)
    store.put("%RETRY%group", b"again", properties={"RETRY_TOPIC": "TopicExt"}, internal=True)
    store.put("%RETRY%group", b"no origin", internal=True)
    first, second = received(store, "%RETRY%group")
    assert (first.topic, first.stored.topic) == ("TopicExt", "%RETRY%group")
    assert first.message_queue.topic == "%RETRY%group"
    assert second.topic == "%RETRY%group"


def test_a_compressed_body_is_inflated_once(open_store):
    store = open_store(store_host=STORE_HOST)
    body = b"0123456789" * 1000
    store.put("TopicExt", zlib.compress(body), sys_flag=0x1)
    [m] = received(store, "TopicExt")
    assert m.stored.body == zlib.compress(body)
    assert m.sys_flag == m.stored.sys_flag == 0x1
    assert m.body == body
    assert m.body is m.body


def test_from_stored_and_from_batch_wrap_store_messages(open_store):
    store = open_store(store_host=STORE_HOST)
    store.put_batch("TopicExt", [b"a", b"b"])
    stored = store.get("TopicExt", 0, 0).messages()
    batch = MessageExt.from_batch(stored, "broker-b")
    assert [(m.body, m.broker_name, m.queue_offset) for m in batch] == [
        (b"a", "broker-b", 0),
        (b"b", "broker-b", 1),
    ]
    one = MessageExt.from_stored(stored[1], "broker-b")
    assert (one.body, one.offset_msg_id) == (b"b", stored[1].msg_id)


def test_received_messages_stay_out_of_the_cycle_collector(open_store):
    # They refer only to strings and bytes; a backlog of them in flight would otherwise be
    # traversed by every collection.
    store = open_store(store_host=STORE_HOST)
    store.put_batch("TopicExt", [b"a", b"b", b"c"])
    msgs = received(store, "TopicExt")
    assert [gc.is_tracked(m) for m in msgs] == [False, False, False]
    gc.collect()
    assert [(m.body, m.queue_offset) for m in msgs] == [(b"a", 0), (b"b", 1), (b"c", 2)]


def test_a_malformed_body_is_an_error():
    with pytest.raises(MessageIllegalError, match="bad magic code"):
        _core.decode_received(b"\x00\x00\x00\x30garbage", "broker-a")
