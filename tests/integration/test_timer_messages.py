"""RocketMQ 5's timer messages over the 4.x protocol against a real ``pyrmq serve``: a bad
timer is refused with a clear error, a good one arrives when due, and a delivered timer
message handed back by its consumer waits for its retry's delay level."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import pull_head, remoting_call, send_raw

from pyrmq import _core
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


@dataclasses.dataclass
class _Msg:
    body: bytes
    properties: dict[str, str]
    flag: int = 0


def remoting_call_command(addr: str, request: RemotingCommand) -> RemotingCommand:
    async def call() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, request, 5.0)
        finally:
            await client.close()

    return asyncio.run(call())


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
        "TIMER_DELAY_SEC\x01300000",
        f"TIMER_DELIVER_MS\x01{2**63 - 1}",
        # Read as the store reads it: what it cannot read, it would ignore.
        "TIMER_DELAY_SEC\x015_0",
        "TIMER_DELAY_SEC\x01\uff15",
        # TIMER_DELAY_SEC is the one read first, as RocketMQ reads it.
        f"TIMER_DELAY_SEC\x01abc\x02TIMER_DELIVER_MS\x01{2**40}",
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


def test_the_timer_a_message_goes_by_is_the_one_rocketmq_goes_by(tmp_path: Path) -> None:
    """A delay level wins over a timer (RocketMQ drops the timer), TIMER_DELAY_SEC over
    TIMER_DELIVER_MS, and a timer already past is delivered at once, as RocketMQ stores it
    (refused, before, when negative)."""
    topic = "TopicTimerChoice"
    far = int(time.time() * 1000) + 600_000
    sends = {
        b"level": "DELAY\x011\x02TIMER_DELAY_SEC\x01600",
        b"seconds": f"TIMER_DELIVER_MS\x01{far}\x02TIMER_DELAY_SEC\x011",
        b"past-sec": "TIMER_DELAY_SEC\x01-5",
        b"past-ms": "TIMER_DELAY_MS\x01-1",
    }
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        for body, props in sends.items():
            sent = send_raw(broker, topic, body, properties=props)
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        assert sorted(_bodies(broker, topic)) == [b"past-ms", b"past-sec"]
        deadline = time.monotonic() + 15
        while len(_bodies(broker, topic)) < len(sends):
            assert time.monotonic() < deadline, _bodies(broker, topic)
            time.sleep(0.2)
        messages = asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages
        level = next(m for m in messages if m.body == b"level")
        assert not any(name.startswith("TIMER_") for name in level.properties)


def test_a_batch_with_a_bad_timer_is_refused_whole(tmp_path: Path) -> None:
    topic = "TopicBatchTimer"

    def batch(*timers: str | None) -> RemotingCommand:
        messages = [
            _Msg(f"b{i}".encode(), {} if t is None else {"TIMER_DELAY_SEC": t})
            for i, t in enumerate(timers)
        ]
        body = _core.encode_batch(messages, topic, 4 << 20)
        header = {
            "a": "PG_BATCH", "b": topic, "c": "TBW102", "d": "1", "e": "0", "f": "0",
            "g": str(int(time.time() * 1000)), "h": "0", "i": "", "j": "0", "k": "false",
            "m": "true",
        }  # fmt: skip
        return RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, header, body)

    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        for bad in ("abc", "300000"):
            refused = remoting_call_command(broker, batch(None, bad, "1"))
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL, refused.remark
            assert "timer message illegal" in (refused.remark or "")
        assert _bodies(broker, topic) == []
        # A good timer in a batch is held back until due; the rest arrive at once.
        stored = remoting_call_command(broker, batch(None, "1"))
        assert stored.code == ResponseCode.SUCCESS, stored.remark
        assert _bodies(broker, topic) == [b"b0"]
        deadline = time.monotonic() + 10
        while _bodies(broker, topic) != [b"b0", b"b1"]:
            assert time.monotonic() < deadline, _bodies(broker, topic)
            time.sleep(0.2)


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
