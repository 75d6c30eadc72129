"""Recalling timer messages (RocketMQ 5.3's RECALL_MESSAGE) against a real ``pyrmq serve``, with
pyrmq's producer and with raw 4.x requests: a recalled message never arrives and its neighbours
do, every refusal is RocketMQ's, and a recall holds across ``kill -9``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.compat import servers
from tests.compat.servers import create_topic, serving
from tests.helpers import fast_config, pull_head, remoting_call, send_raw

from pyrmq.client import aio
from pyrmq.client.message import Message
from pyrmq.errors import BrokerError
from pyrmq.recall_handle import RecallHandle, RecallHandleError
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicRecall"


def _conf(root: Path, extra: str = "") -> str:
    conf = root / "broker.conf"
    conf.write_text(f"recallMessageEnable=true\n{extra}")
    return str(conf)


def _bodies(broker: str) -> list[bytes]:
    try:
        return [m.body for m in asyncio.run(pull_head(broker, "broker-a", TOPIC, 0)).messages]
    except BrokerError:
        return []


def _arrived(broker: str, expected: list[bytes], due_s: float) -> list[bytes]:
    """The queue's bodies once ``expected`` arrived, and a further 1.5 s went by after the last
    due time (``due_s``, monotonic) so that a message that should not come had its chance."""
    deadline = time.monotonic() + 20
    while sorted(_bodies(broker)) != sorted(expected):
        assert time.monotonic() < deadline, _bodies(broker)
        time.sleep(0.2)
    time.sleep(max(0.0, due_s + 1.5 - time.monotonic()))
    return _bodies(broker)


def _recall(broker: str, handle: str, topic: str = TOPIC) -> tuple[int, str]:
    answer = remoting_call(
        broker,
        RequestCode.RECALL_MESSAGE,
        {"producerGroup": "PG", "topic": topic, "recallHandle": handle},
    )
    return answer.code, answer.remark or answer.ext_fields.get("msgId", "")


def _timer(seconds: int, body: bytes) -> Message:
    msg = Message(TOPIC, body)
    msg.set_delay_time_sec(seconds)
    return msg


def test_a_recalled_timer_message_never_arrives_and_its_neighbours_do(tmp_path: Path) -> None:
    with serving(tmp_path, "-c", _conf(tmp_path)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, TOPIC, 1)

        async def main() -> list[str | None]:
            producer = aio.Producer("PG_RECALL", client_config=fast_config(namesrv))
            async with producer:
                plain = await producer.send(Message(TOPIC, b"plain"))
                kept = await producer.send(_timer(3, b"kept"))
                gone = await producer.send(_timer(3, b"gone"))
                at = Message(TOPIC, b"at")
                at.set_deliver_time_ms(int(time.time() * 1000) + 3_000)
                kept_at = await producer.send(at)
                assert gone.recall_handle is not None
                recalled = await producer.recall_message(TOPIC, gone.recall_handle)
                assert recalled == gone.msg_id
                with pytest.raises(RecallHandleError):
                    await producer.recall_message(TOPIC, "not a handle")
                return [plain.recall_handle, kept.recall_handle, kept_at.recall_handle]

        due = time.monotonic() + 3
        plain_handle, kept_handle, at_handle = asyncio.run(main())
        assert plain_handle is None
        assert kept_handle is not None
        assert at_handle is not None
        assert RecallHandle.decode(kept_handle).broker_name == "broker-a"
        got = _arrived(broker, [b"plain", b"kept", b"at"], due)
        assert sorted(got) == [b"at", b"kept", b"plain"]


def test_a_recall_drops_every_copy_but_not_the_message_sent_again_for_later(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, "-c", _conf(tmp_path)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, TOPIC, 1)
        first_due = int(time.time() * 1000) + 3_000

        async def main() -> None:
            producer = aio.Producer("PG_RECALL", client_config=fast_config(namesrv))
            async with producer:
                msg = Message(TOPIC, b"first")
                msg.set_deliver_time_ms(first_due)
                sent = await producer.send(msg)
                # A retry of the same send: the same id, due at the same time.
                again = await producer.send(msg)
                assert again.msg_id == sent.msg_id
                assert sent.recall_handle is not None
                await producer.recall_message(TOPIC, sent.recall_handle)
                # The same message, rescheduled: a recall of the first time leaves it alone.
                msg.set_body(b"second")
                msg.set_deliver_time_ms(first_due + 2_000)
                await producer.send(msg)

        asyncio.run(main())
        due = time.monotonic() + 5
        assert _arrived(broker, [b"second"], due) == [b"second"]


def test_recalls_are_refused_as_rocketmq_refuses_them(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, TOPIC, 1)
        timer = "TIMER_DELAY_SEC\x0130"
        # A message without an id (no client sends one) cannot be named, and gets no handle.
        unnamed = send_raw(broker, TOPIC, b"unnamed", properties=timer)
        assert unnamed.code == ResponseCode.SUCCESS
        assert "recallHandle" not in unnamed.ext_fields
        sent = send_raw(broker, TOPIC, b"timed", properties=f"{timer}\x02UNIQ_KEY\x01U-TIMED")
        assert sent.code == ResponseCode.SUCCESS
        handle = sent.ext_fields["recallHandle"]
        parsed = RecallHandle.decode(handle)
        # RocketMQ's default: recalls are off until recallMessageEnable.
        assert _recall(broker, handle) == (
            ResponseCode.NO_PERMISSION,
            "recall failed, operation is forbidden",
        )
        enable = remoting_call(
            broker, RequestCode.UPDATE_BROKER_CONFIG, {}, b"recallMessageEnable=true\n"
        )
        assert enable.code == ResponseCode.SUCCESS, enable.remark

        def forged(**changes: object) -> str:
            fields = {
                "topic": parsed.topic,
                "broker_name": parsed.broker_name,
                "timestamp_ms": parsed.timestamp_ms,
                "message_id": parsed.message_id,
                **changes,
            }
            return RecallHandle(**fields).encode()  # type: ignore[arg-type]

        now_ms = int(time.time() * 1000)
        create_topic(broker, "TopicRecallOther", 1)
        for bad, code, remark in [
            ("", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
            ("djEgb25seQ==", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
            ("%%%", ResponseCode.ILLEGAL_OPERATION, "recall handle is invalid"),
            (
                forged(topic="TopicRecallOther"),
                ResponseCode.ILLEGAL_OPERATION,
                "recall failed, topic not match",
            ),
            (
                forged(broker_name="broker-z"),
                ResponseCode.ILLEGAL_OPERATION,
                "recall failed, broker service not available",
            ),
            (
                forged(timestamp_ms=now_ms - 1),
                ResponseCode.ILLEGAL_OPERATION,
                "recall failed, timestamp invalid",
            ),
            (
                forged(timestamp_ms=now_ms + 4 * 24 * 3600 * 1000),
                ResponseCode.ILLEGAL_OPERATION,
                "recall failed, timestamp invalid",
            ),
        ]:
            assert _recall(broker, bad) == (code, remark), bad
        assert _recall(broker, handle, topic="TopicNoSuch") == (
            ResponseCode.TOPIC_NOT_EXIST,
            "recall failed, the topic[TopicNoSuch] not exist",
        )
        # A retry topic's sends get no handle.
        retry = send_raw(
            broker, "%RETRY%CG_RECALL", b"r", properties="TIMER_DELAY_SEC\x0130\x02UNIQ_KEY\x01U1"
        )
        assert retry.code == ResponseCode.SUCCESS, retry.remark
        assert "recallHandle" not in retry.ext_fields
        # The good handle still works after all of that, and twice is no error.
        assert _recall(broker, handle) == (ResponseCode.SUCCESS, parsed.message_id)
        assert _recall(broker, handle) == (ResponseCode.SUCCESS, parsed.message_id)


def test_a_recall_holds_after_kill_9(tmp_path: Path) -> None:
    """Under SYNC_FLUSH, an answered recall is on disk: a broker killed before the message falls
    due still drops it when it comes back."""
    conf = _conf(tmp_path)
    server = servers.start_serve(tmp_path, "--flush", "sync", "-c", conf)
    try:
        broker = server.addresses()[1]
        create_topic(broker, TOPIC, 1)
        for body in (b"kept", b"gone"):
            sent = send_raw(
                broker,
                TOPIC,
                body,
                properties=f"TIMER_DELAY_SEC\x015\x02UNIQ_KEY\x01U-{body.decode()}",
            )
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            handle = sent.ext_fields["recallHandle"]
        due = time.monotonic() + 5
        assert _recall(broker, handle) == (ResponseCode.SUCCESS, "U-gone")
    finally:
        server.kill()
    with serving(tmp_path, "--flush", "sync", "-c", conf) as again:
        broker = again.addresses()[1]
        assert _arrived(broker, [b"kept"], due) == [b"kept"]
