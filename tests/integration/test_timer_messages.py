"""RocketMQ 5's timer messages over the 4.x protocol against a real ``pyrmq serve``: a bad
timer is refused with a clear error, a good one arrives when due, and a delivered timer
message handed back by its consumer waits for its retry's delay level."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import pull_head, remoting_call, send_raw

from pyrmq.errors import BrokerError
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


def _bodies(broker: str, topic: str) -> list[bytes]:
    try:
        return [m.body for m in asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages]
    except BrokerError:
        return []


@pytest.mark.parametrize(
    "timer",
    [
        "TIMER_DELAY_SEC\x01abc",
        "TIMER_DELAY_SEC\x01",
        "TIMER_DELAY_SEC\x01-5",
        "TIMER_DELAY_MS\x01-1",
        "TIMER_DELAY_SEC\x01300000",
        f"TIMER_DELIVER_MS\x01{2**63 - 1}",
        # Read as the store reads it: what it cannot read, it would ignore.
        "TIMER_DELAY_SEC\x015_0",
        "TIMER_DELAY_SEC\x01\uff15",
        f"TIMER_DELIVER_MS\x01{2**64}\x02TIMER_DELAY_SEC\x012",
    ],
)
def test_a_bad_timer_is_refused_and_stores_nothing(tmp_path: Path, timer: str) -> None:
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, "TopicBadTimer", 1)
        refused = send_raw(broker, "TopicBadTimer", b"bad", properties=timer)
        assert refused.code == ResponseCode.MESSAGE_ILLEGAL
        assert "timer message illegal" in (refused.remark or "")
        assert send_raw(broker, "TopicBadTimer", b"good").code == ResponseCode.SUCCESS
        assert _bodies(broker, "TopicBadTimer") == [b"good"]


def test_a_timer_message_arrives_when_due_and_its_retry_waits_for_its_level(
    tmp_path: Path,
) -> None:
    topic = "TopicTimer4x"
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        sent_at = time.time()
        assert send_raw(broker, topic, b"in 2 s", properties="TIMER_DELAY_SEC\x012").code == 0
        assert _bodies(broker, topic) == []
        deadline = time.monotonic() + 10
        while not _bodies(broker, topic) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert time.time() - sent_at >= 2.0
        [message] = asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages
        assert message.body == b"in 2 s"
        # Handed back for a first retry (level 3, 10 s): not in the retry topic at once.
        back = remoting_call(
            broker,
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {
                "offset": str(message.commit_log_offset),
                "group": "GID_TIMER",
                "delayLevel": "0",
                "originMsgId": message.msg_id,
                "originTopic": topic,
                "maxReconsumeTimes": "16",
            },
        )
        assert back.code == ResponseCode.SUCCESS, back.remark
        time.sleep(1.0)
        assert _bodies(broker, "%RETRY%GID_TIMER") == []
