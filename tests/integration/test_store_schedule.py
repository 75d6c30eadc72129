"""Delayed messages in the store: parked in SCHEDULE_TOPIC_XXXX until due, then stored again
under their real topic and queue, once, in due order per level, with delivery progress that
survives a reopen. Passes run with an explicit clock (``deliver_due(now_ms)``), except where the
store's own schedule service is under test."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyrmq.errors import ConfigError, StoreIOError
from pyrmq.store import GetMessageStatus

pytestmark = pytest.mark.integration

SCHEDULE = "SCHEDULE_TOPIC_XXXX"
LEVELS = "1s 5s 10s"  # levels 1-3; level 3 is the last
LEVEL_MS = {1: 1_000, 2: 5_000, 3: 10_000}


def bodies(store: Any, topic: str, queue_id: int = 0) -> list[bytes]:
    got = store.get(topic, queue_id, 0, max_count=1000)
    if got.status is not GetMessageStatus.FOUND:
        return []
    return [m.body for m in got.messages()]


def test_a_delayed_message_waits_for_its_level_then_arrives_as_sent(
    open_store: Callable[..., Any],
) -> None:
    store = open_store(message_delay_level=LEVELS)
    sent = store.put(
        "TopicDelay",
        b"later",
        queue_id=2,
        tags="TagA",
        keys=["K1", "K2"],
        properties={"DELAY": "2", "user": "value"},
        flag=7,
        born_timestamp_ms=1_000,
        born_host="10.0.0.5:4321",
    )
    due = sent.store_timestamp_ms + LEVEL_MS[2]
    # Parked in queue level - 1 of the schedule topic, nothing in the real queue.
    assert store.max_offset(SCHEDULE, 1) == 1
    assert store.max_offset("TopicDelay", 2) == 0
    assert store.deliver_due(due - 1) == 0
    assert bodies(store, "TopicDelay", 2) == []

    assert store.deliver_due(due) == 1
    [msg] = store.get("TopicDelay", 2, 0).messages()
    assert (msg.body, msg.tags, msg.keys, msg.flag) == (b"later", "TagA", ["K1", "K2"], 7)
    assert (msg.queue_id, msg.queue_offset) == (2, 0)
    assert (msg.born_timestamp_ms, msg.born_host) == (1_000, "10.0.0.5:4321")
    assert msg.store_timestamp_ms >= sent.store_timestamp_ms
    assert "DELAY" not in msg.properties
    assert msg.properties["user"] == "value"
    # As RocketMQ, the delivered copy keeps where it was bound for.
    assert (msg.properties["REAL_TOPIC"], msg.properties["REAL_QID"]) == ("TopicDelay", "2")
    # Stored by the broker itself, nobody waits for it (RocketMQ's WAIT=false).
    assert msg.properties["WAIT"] == "false"
    assert msg.phy_offset != sent.phy_offset
    # Delivered once: later passes find nothing more.
    assert store.deliver_due(due + 60_000) == 0
    assert bodies(store, "TopicDelay", 2) == [b"later"]
    assert store.delay_offsets() == {2: 1}


def test_a_delayed_message_at_the_properties_limit_is_delivered(
    open_store: Callable[..., Any],
) -> None:
    # Parked with its real topic and queue, the properties are exactly at the limit; delivery
    # drops DELAY (8 bytes with its separators) and has no room left for WAIT=false (11).
    store = open_store(message_delay_level=LEVELS)
    topic, parked_extra = "TopicFull", len("\x02REAL_TOPIC\x01TopicFull\x02REAL_QID\x010")
    base = {"DELAY": "1", "pad": ""}
    size = len("DELAY\x011\x02pad\x01") + parked_extra
    base["pad"] = "x" * (32767 - size)
    sent = store.put(topic, b"full", properties=base)
    [parked] = store.get(SCHEDULE, 0, 0).messages()
    # V1 record: 88 fixed bytes, the body, a 1-byte topic length, the topic, a 2-byte length.
    fixed = 88 + len(parked.body) + 1 + len(SCHEDULE) + 2
    assert parked.store_size - fixed == 32767
    assert store.deliver_due(sent.store_timestamp_ms + LEVEL_MS[1]) == 1
    [msg] = store.get(topic, 0, 0).messages()
    assert msg.body == b"full"
    assert msg.properties["pad"] == base["pad"]
    assert "DELAY" not in msg.properties
    assert store.delay_offsets() == {1: 1}


def test_each_level_delivers_in_order_and_independently(
    open_store: Callable[..., Any],
) -> None:
    store = open_store(message_delay_level=LEVELS)
    first = store.put("TopicOrder", b"a1", properties={"DELAY": "1"})
    store.put("TopicOrder", b"c1", properties={"DELAY": "3"})
    store.put("TopicOrder", b"a2", properties={"DELAY": "1"})
    store.put("TopicOrder", b"b1", properties={"DELAY": "2"})
    store.put("TopicOrder", b"c2", properties={"DELAY": "99"})  # above the table: level 3
    store.put("TopicOrder", b"now")
    t0 = first.store_timestamp_ms

    assert bodies(store, "TopicOrder") == [b"now"]
    assert store.delayed_deliveries() == (0, 0)
    parked_end = store.max_phy_offset
    assert store.deliver_due(t0 + 1_000 + 50) == 2
    assert bodies(store, "TopicOrder") == [b"now", b"a1", b"a2"]
    assert store.deliver_due(t0 + 5_000 + 50) == 1
    assert store.deliver_due(t0 + 10_000 + 50) == 2
    assert bodies(store, "TopicOrder") == [b"now", b"a1", b"a2", b"b1", b"c1", b"c2"]
    # Counted for the broker's statistics: every message, and every byte its delivery wrote.
    assert store.delayed_deliveries() == (5, store.max_phy_offset - parked_end)


def test_delivery_progress_survives_a_reopen(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    path = tmp_path / "store"
    store = open_store(path, message_delay_level=LEVELS)
    t0 = store.put("TopicReopen", b"m0", properties={"DELAY": "1"}).store_timestamp_ms
    store.put("TopicReopen", b"m1", properties={"DELAY": "2"})
    assert store.deliver_due(t0 + 1_000 + 50) == 1
    store.close()
    saved = json.loads((path / "config" / "delayOffset.json").read_text())
    assert saved == {"offsetTable": {"1": 1, "2": 0}}

    store = open_store(path, message_delay_level=LEVELS)
    assert store.delay_offsets() == {1: 1, 2: 0}
    # m0 is not delivered again; m1 still waits, then arrives.
    assert store.deliver_due(t0 + 1_000 + 50) == 0
    assert store.deliver_due(t0 + 5_000 + 50) == 1
    assert bodies(store, "TopicReopen") == [b"m0", b"m1"]


def test_delivery_progress_that_cannot_be_saved_holds_back_no_other_flush(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    """delayOffset.json is replaced through a new file; when that fails (a full disk, here a
    directory in the way), the queues and the checkpoint are still made durable, and the error
    is raised after them."""
    path = tmp_path / "store"
    store = open_store(path, message_delay_level=LEVELS)
    t0 = store.put("TopicSave", b"m0", properties={"DELAY": "1"}).store_timestamp_ms
    store.put("TopicSave", b"m1", properties={"DELAY": "2"})
    store.flush()
    (path / "config" / "delayOffset.json.tmp").mkdir(parents=True)
    assert store.deliver_due(t0 + 1_000 + 50) == 1  # m0; m1 waits 5 s
    with pytest.raises(StoreIOError, match=r"delayOffset\.json"):
        store.flush()
    checkpoint = (path / "checkpoint").read_bytes()
    commit_log, logics = struct.unpack_from(">qq", checkpoint, 8)
    assert commit_log == logics == store.max_phy_offset
    # Until progress is saved again, nothing more is delivered: a crash meanwhile would
    # deliver it a second time.
    assert store.deliver_due(t0 + 60_000) == 0
    # Saved once the way is clear, and kept across a reopen.
    (path / "config" / "delayOffset.json.tmp").rmdir()
    store.flush()
    assert store.deliver_due(t0 + 60_000) == 1
    store.close()
    store = open_store(path, message_delay_level=LEVELS)
    assert store.delay_offsets() == {1: 1, 2: 1}
    assert store.deliver_due(t0 + 60_000) == 0
    assert bodies(store, "TopicSave") == [b"m0", b"m1"]


def test_a_malformed_delay_offset_file_stops_the_open_and_is_kept(
    tmp_path: Path, open_store: Callable[..., Any]
) -> None:
    path = tmp_path / "store"
    open_store(path).close()
    offsets = path / "config" / "delayOffset.json"
    offsets.parent.mkdir(parents=True, exist_ok=True)
    offsets.write_text('{"offsetTable": {"1": "x"}}')
    with pytest.raises(ConfigError, match=r"delayOffset\.json"):
        open_store(path)
    assert offsets.read_text() == '{"offsetTable": {"1": "x"}}'


def test_the_schedule_service_delivers_on_its_own(
    open_store: Callable[..., Any], wait_until: Callable[..., None]
) -> None:
    store = open_store(message_delay_level="1s", background_services=True)
    sent = store.put("TopicService", b"tick", properties={"DELAY": "1"})
    wait_until(lambda: bodies(store, "TopicService") == [b"tick"], timeout=5.0, what="delivery")
    [msg] = store.get("TopicService", 0, 0).messages()
    assert msg.store_timestamp_ms >= sent.store_timestamp_ms + 1_000  # not before it is due
    time.sleep(0.3)
    assert bodies(store, "TopicService") == [b"tick"]


def test_a_due_time_beyond_its_level_after_the_clock_went_back_is_due_at_once(
    open_store: Callable[..., Any],
) -> None:
    """As RocketMQ's correctDeliverTimestamp: a unit due further off than its level's delay
    was parked by a clock that has since gone back, and waits no longer."""
    store = open_store(message_delay_level=LEVELS)
    sent = store.put("TopicClock", b"skewed", properties={"DELAY": "1"})
    assert store.deliver_due(sent.store_timestamp_ms) == 0  # due in 1 s: within its level
    assert store.deliver_due(sent.store_timestamp_ms - 10_000) == 1
    assert bodies(store, "TopicClock") == [b"skewed"]


def test_a_delay_level_wins_over_a_timer_and_clears_it(open_store: Callable[..., Any]) -> None:
    """A message with a level above 0 and a timer (a batch's message, which the broker's send
    checks do not see one by one) waits for its level, as RocketMQ clears the timer: it went
    by the timer, and the timer left on the delivered copy parked it again."""
    store = open_store(message_delay_level=LEVELS)
    now = int(time.time() * 1000)
    sent = store.put("TopicBoth", b"both", properties={"DELAY": "1", "TIMER_DELAY_MS": "7000"})
    assert store.max_offset(SCHEDULE, 0) == 1  # level 1, not the timer's 7 s
    assert store.deliver_due(sent.store_timestamp_ms + LEVEL_MS[1]) == 1
    [msg] = store.get("TopicBoth", 0, 0).messages()
    assert msg.body == b"both"
    assert not {"TIMER_DELAY_MS", "TIMER_DELIVER_MS"} & msg.properties.keys()
    # A level of 0 leaves the timer to decide.
    store.put(
        "TopicTimerOnly", b"timer", properties={"DELAY": "0", "TIMER_DELIVER_MS": str(now + 7000)}
    )
    assert store.max_offset("TopicTimerOnly", 0) == 0
