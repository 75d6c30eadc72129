"""Pop consumption over the 4.x protocol against a real ``pyrmq serve``, spoken as RocketMQ 5's
Java client speaks it: POP_MESSAGE, then each message's handle (``POP_CK``) built from the
answer as ``MQClientAPIImpl.processPopResponse`` builds it, and ACK_MESSAGE, BATCH_ACK_MESSAGE
and CHANGE_MESSAGE_INVISIBLETIME sent with that handle as ``DefaultMQPushConsumerImpl`` and
``MQClientAPIImpl.batchAckMessageAsync`` send them. The gRPC front is off: pop works without
it."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.compat.servers import ServerProcess, create_topic, start_serve
from tests.helpers import remoting_call, send_raw

from pyrmq import _core
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    ChangeInvisibleTimeResponseHeader,
    PopMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicPop"
BROKER_NAME = "broker-a"


@dataclasses.dataclass
class Popped:
    body: bytes
    queue_id: int
    offset: int
    reconsume_times: int
    tags: str | None
    pop_ck: str


@dataclasses.dataclass
class PopAnswer:
    code: int
    remark: str | None
    header: PopMessageResponseHeader
    messages: list[Popped]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("pop")
    server = start_serve(root, "--grpc-port", "-1")
    try:
        addr = server.addresses()[1]
        create_topic(addr, TOPIC, 4)
        yield addr
    finally:
        assert server.stop() == 0, (root / "serve.log").read_text()[-3000:]


def _info(text: str | None) -> dict[str, str]:
    """ExtraInfoUtil's parse of a start offset, message offset or order count info: the key
    is ``<retry mark>@<queue id or qo key>``."""
    out: dict[str, str] = {}
    for one in (text or "").split(";"):
        if one:
            mark, key, value = one.split(" ")
            out[f"{mark}@{key}"] = value
    return out


def pop(
    broker: str,
    group: str,
    *,
    topic: str = TOPIC,
    queue_id: int = -1,
    max_nums: int = 32,
    invisible_ms: int = 60_000,
    poll_ms: int = 0,
    order: bool = False,
    exp: str | None = None,
    exp_type: str | None = None,
    born_ms: int | None = None,
    attempt_id: str | None = None,
    init_mode: int = 0,
) -> PopAnswer:
    ext = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": str(queue_id),
        "maxMsgNums": str(max_nums),
        "invisibleTime": str(invisible_ms),
        "pollTime": str(poll_ms),
        "bornTime": str(time.time_ns() // 1_000_000 if born_ms is None else born_ms),
        "initMode": str(init_mode),
        "order": "true" if order else "false",
    }
    if attempt_id is not None:
        ext["attemptId"] = attempt_id
    if exp is not None:
        ext["exp"] = exp
        ext["expType"] = exp_type or "TAG"
    answer = remoting_call(broker, RequestCode.POP_MESSAGE, ext)
    # Java decodes the header of every answer it does not throw on: its four required fields
    # must be there.
    header = PopMessageResponseHeader.from_ext(answer.ext_fields)
    messages = []
    if answer.code == ResponseCode.SUCCESS:
        starts = _info(header.start_offset_info)
        offsets = {
            k: [int(o) for o in v.split(",")] for k, v in _info(header.msg_offset_info).items()
        }
        counts = _info(header.order_count_info)
        seen: dict[str, list[int]] = {}
        decoded = _core.decode_messages(answer.body)
        for m in decoded:
            seen.setdefault(f"0@{m.queue_id}", []).append(m.queue_offset)
        for m in decoded:
            key = f"0@{m.queue_id}"
            msg_offset = offsets[key][seen[key].index(m.queue_offset)]
            assert msg_offset == m.queue_offset
            ck = (
                f"{starts[key]} {header.pop_time} {header.invisible_time} {header.revive_qid} 0 "
                f"{BROKER_NAME} {m.queue_id} {msg_offset}"
            )
            times = m.reconsume_times
            count = counts.get(f"0@qo{m.queue_id}%{m.queue_offset}")
            if order and count is not None and int(count) > 0:
                times = int(count)
            messages.append(Popped(m.body, m.queue_id, m.queue_offset, times, m.tags, ck))
    return PopAnswer(answer.code, answer.remark, header, messages)


def ack(broker: str, group: str, message: Popped, *, topic: str = TOPIC) -> tuple[int, str]:
    parts = message.pop_ck.split(" ")
    answer = remoting_call(
        broker,
        RequestCode.ACK_MESSAGE,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": parts[6],
            "extraInfo": message.pop_ck,
            "offset": parts[7],
        },
    )
    return answer.code, answer.remark or ""


def change_invisible(
    broker: str, group: str, message: Popped, invisible_ms: int, *, topic: str = TOPIC
) -> int:
    """CHANGE_MESSAGE_INVISIBLETIME; on success ``message`` takes the handle Java builds."""
    parts = message.pop_ck.split(" ")
    answer = remoting_call(
        broker,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
        {
            "consumerGroup": group,
            "topic": topic,
            "queueId": parts[6],
            "extraInfo": message.pop_ck,
            "offset": parts[7],
            "invisibleTime": str(invisible_ms),
        },
    )
    if answer.code == ResponseCode.SUCCESS:
        header = ChangeInvisibleTimeResponseHeader.from_ext(answer.ext_fields)
        message.pop_ck = (
            f"{parts[7]} {header.pop_time} {header.invisible_time} {header.revive_qid} 0 "
            f"{BROKER_NAME} {parts[6]} {parts[7]}"
        )
    return answer.code


def batch_ack(broker: str, group: str, messages: list[Popped], *, topic: str = TOPIC) -> int:
    """BATCH_ACK_MESSAGE with the body Java's batchAckMessageAsync makes."""
    acks: dict[str, dict[str, object]] = {}
    bits: dict[str, int] = {}
    for m in messages:
        p = m.pop_ck.split(" ")
        key = f"{p[4]}@{p[6]}@{p[0]}@{p[1]}"
        acks.setdefault(
            key,
            {
                "c": group,
                "t": topic,
                "r": p[4],
                "so": int(p[0]),
                "q": int(p[6]),
                "rq": int(p[3]),
                "pt": int(p[1]),
                "it": int(p[2]),
            },
        )
        bits[key] = bits.get(key, 0) | 1 << (int(p[7]) - int(p[0]))
    for key, value in bits.items():
        # BitSet.toByteArray, as fastjson writes a byte[]: little-endian, in base64.
        raw = value.to_bytes((value.bit_length() + 7) // 8, "little")
        acks[key]["b"] = base64.b64encode(raw).decode()
    body = json.dumps({"brokerName": BROKER_NAME, "acks": list(acks.values())}).encode()
    return remoting_call(broker, RequestCode.BATCH_ACK_MESSAGE, {}, body).code


def committed(broker: str, group: str, queue_id: int, *, topic: str = TOPIC) -> int | None:
    header = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id)
    answer = remoting_call(broker, RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())
    return int(answer.ext_fields["offset"]) if answer.code == ResponseCode.SUCCESS else None


def send(broker: str, body: bytes, queue_id: int, tags: str = "", *, topic: str = TOPIC) -> None:
    properties = f"TAGS\x01{tags}\x02" if tags else ""
    answer = send_raw(broker, topic, body, queue_id=queue_id, properties=properties)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def test_popped_messages_stay_invisible_and_acked_ones_never_come_back(broker: str) -> None:
    group = "GID_POP_ACK"
    sent = {f"m{i}".encode(): i % 4 for i in range(8)}
    for body, queue_id in sent.items():
        send(broker, body, queue_id)
    first = pop(broker, group, invisible_ms=1500)
    assert first.code == ResponseCode.SUCCESS, first.remark
    assert {m.body: m.queue_id for m in first.messages} == sent
    assert first.header.revive_qid == 0
    assert abs(first.header.pop_time - time.time_ns() // 1_000_000) < 10_000
    assert all(m.reconsume_times == 0 for m in first.messages)
    # Invisible to the group meanwhile; the answer still carries what Java decodes.
    again = pop(broker, group)
    assert again.code == ResponseCode.POLLING_TIMEOUT
    assert again.messages == []
    assert again.header.rest_num == 0
    # Acked one by one and in a batch, as Java's push consumer and proxy do.
    for m in first.messages[:3]:
        assert ack(broker, group, m) == (ResponseCode.SUCCESS, "")
    assert batch_ack(broker, group, first.messages[3:]) == ResponseCode.SUCCESS
    assert [committed(broker, group, q) for q in range(4)] == [2, 2, 2, 2]
    # An ack of a message done already succeeds again.
    assert ack(broker, group, first.messages[0]) == (ResponseCode.SUCCESS, "")
    time.sleep(1.8)
    assert pop(broker, group).messages == []
    # Another group gets them all.
    assert len(pop(broker, "GID_POP_OTHER").messages) == 8


def test_an_unacked_message_comes_back_counted_and_its_old_handle_is_refused(
    broker: str,
) -> None:
    group, topic = "GID_POP_REDELIVER", "TopicPopRedeliver"
    create_topic(broker, topic, 4)
    send(broker, b"again", 1, topic=topic)
    first = pop(broker, group, topic=topic, invisible_ms=1000)
    assert [m.body for m in first.messages] == [b"again"]
    # Held until it comes visible again: delivered anew, its reconsume times raised.
    second = pop(broker, group, topic=topic, poll_ms=8000)
    assert [m.body for m in second.messages] == [b"again"]
    assert second.messages[0].reconsume_times == 1
    assert second.header.pop_time > first.header.pop_time
    code, remark = ack(broker, group, first.messages[0], topic=topic)
    assert code == ResponseCode.NO_MESSAGE
    assert "replaced" in remark
    assert ack(broker, group, second.messages[0], topic=topic)[0] == ResponseCode.SUCCESS
    assert committed(broker, group, 1, topic=topic) == 1


def test_a_late_ack_is_taken_until_the_message_is_delivered_again(broker: str) -> None:
    """As RocketMQ takes an ack until its revive service puts the message back: a consumer
    a little late with its ack does not get the message a second time."""
    group, topic = "GID_POP_LATE", "TopicPopLate"
    create_topic(broker, topic, 4)
    send(broker, b"late", 0, topic=topic)
    send(broker, b"later", 1, topic=topic)
    late, later = sorted(pop(broker, group, topic=topic, invisible_ms=300).messages,
                         key=lambda m: m.queue_id)  # fmt: skip
    time.sleep(0.6)
    assert ack(broker, group, late, topic=topic)[0] == ResponseCode.SUCCESS
    assert change_invisible(broker, group, later, 60_000, topic=topic) == ResponseCode.SUCCESS
    assert pop(broker, group, topic=topic, poll_ms=500).messages == []
    assert committed(broker, group, 0, topic=topic) == 1


def test_a_new_group_starts_at_the_last_message_once_the_head_is_on_disk(tmp_path: Path) -> None:
    """initMode MAX, as RocketMQ's pop: the queue's last message (max - 1), unless the queue
    still starts at 0 with its first message in memory; initMode MIN: its first message."""
    config = tmp_path / "broker.conf"
    config.write_text("accessMessageInMemoryMaxRatio=0\n")
    server = start_serve(tmp_path, "--grpc-port", "-1", "-c", str(config))
    try:
        addr = server.addresses()[1]
        create_topic(addr, TOPIC, 1)
        for i in range(3):
            send(addr, b"m%d" % i, 0)
        newest = pop(addr, "GID_POP_MAX", init_mode=1)
        assert [m.body for m in newest.messages] == [b"m2"]
        oldest = pop(addr, "GID_POP_MIN", init_mode=0)
        assert [m.body for m in oldest.messages] == [b"m0", b"m1", b"m2"]
    finally:
        assert server.stop() == 0


def test_a_changed_invisible_time_brings_the_message_back_under_a_new_handle(broker: str) -> None:
    group, topic = "GID_POP_CHANGE", "TopicPopChange"
    create_topic(broker, topic, 4)
    send(broker, b"later", 2, topic=topic)
    [message] = pop(broker, group, topic=topic).messages
    old = dataclasses.replace(message)
    assert change_invisible(broker, group, message, 300, topic=topic) == ResponseCode.SUCCESS
    assert message.pop_ck != old.pop_ck
    back = pop(broker, group, topic=topic, poll_ms=5000)
    assert [m.body for m in back.messages] == [b"later"]
    assert back.messages[0].reconsume_times == 1
    # Neither the handle from before the change nor the changed one names the new delivery.
    assert ack(broker, group, old, topic=topic)[0] == ResponseCode.NO_MESSAGE
    assert ack(broker, group, message, topic=topic)[0] == ResponseCode.NO_MESSAGE
    assert ack(broker, group, back.messages[0], topic=topic)[0] == ResponseCode.SUCCESS


def test_a_held_pop_answers_when_a_message_arrives(broker: str) -> None:
    group, topic = "GID_POP_HOLD", "TopicPopHold"
    create_topic(broker, topic, 4)
    timer = threading.Timer(0.5, send, (broker, b"arrived", 3), {"topic": topic})
    asked_ms = time.time_ns() // 1_000_000
    timer.start()
    try:
        answer = pop(broker, group, topic=topic, poll_ms=15_000)
    finally:
        timer.join()
    assert [m.body for m in answer.messages] == [b"arrived"]
    # Its pop time is when it was delivered, as Java counts the invisible time from it.
    assert answer.header.pop_time >= asked_ms + 400


def test_a_tag_expression_filters_and_an_orderly_pop_holds_its_queue(broker: str) -> None:
    group, topic = "GID_POP_ORDER", "TopicPopOrder"
    create_topic(broker, topic, 4)
    for i in range(4):
        send(broker, f"o{i}".encode(), 0, tags="A" if i % 2 == 0 else "B", topic=topic)

    def pop_a(**kwargs: int) -> PopAnswer:
        return pop(broker, group, topic=topic, queue_id=0, order=True, exp="A", **kwargs)

    got = pop_a(invisible_ms=800)
    assert [m.body for m in got.messages] == [b"o0", b"o2"]
    assert got.header.revive_qid == 999
    # The queue's batch is out: nothing more of it until it is acked or comes back whole.
    assert pop_a().messages == []
    back = pop_a(poll_ms=5000)
    assert [m.body for m in back.messages] == [b"o0", b"o2"]
    assert [m.reconsume_times for m in back.messages] == [1, 1]
    for m in back.messages:
        assert ack(broker, group, m, topic=topic)[0] == ResponseCode.SUCCESS
    assert committed(broker, group, 0, topic=topic) == 4


def test_bad_pops_and_acks_get_rocketmq_s_answers_and_the_broker_stays_up(broker: str) -> None:
    group = "GID_POP_BAD"
    assert pop(broker, group, max_nums=33).code == ResponseCode.INVALID_PARAMETER
    assert pop(broker, group, topic="NoSuchTopic").code == ResponseCode.TOPIC_NOT_EXIST
    assert pop(broker, group, queue_id=4).code == ResponseCode.INVALID_PARAMETER
    assert pop(broker, group, invisible_ms=0).code == ResponseCode.INVALID_PARAMETER
    assert pop(broker, group, max_nums=0).code == ResponseCode.INVALID_PARAMETER
    assert pop(broker, group, queue_id=-7).code == ResponseCode.INVALID_PARAMETER
    late = pop(broker, group, born_ms=time.time_ns() // 1_000_000 - 5000)
    assert late.code == ResponseCode.POLLING_TIMEOUT
    assert "timeout too much" in (late.remark or "")
    sql = pop(broker, group, exp="a >", exp_type="SQL92")
    assert sql.code in (ResponseCode.SYSTEM_ERROR, ResponseCode.SUBSCRIPTION_PARSE_FAILED)
    junk = Popped(b"", 0, 0, 0, None, "not a pop handle at all 0 0")
    code, remark = ack(broker, group, junk)
    assert code == ResponseCode.SYSTEM_ERROR
    assert "pop handle" in remark
    far = Popped(b"", 0, 0, 0, None, f"0 1 60000 0 0 {BROKER_NAME} 0 99999")
    assert ack(broker, group, far)[0] == ResponseCode.NO_MESSAGE
    assert remoting_call(broker, RequestCode.BATCH_ACK_MESSAGE, {}, b"{oops").code == (
        ResponseCode.SYSTEM_ERROR
    )
    assert remoting_call(broker, RequestCode.BATCH_ACK_MESSAGE, {}, b"{}").code == (
        ResponseCode.NO_MESSAGE
    )
    send(broker, b"still-up", 0)
    assert b"still-up" in [m.body for m in pop(broker, "GID_POP_BAD_2").messages]


def test_handles_outlive_a_broker_restart(tmp_path: Path) -> None:
    server: ServerProcess = start_serve(tmp_path, "--grpc-port", "-1")
    try:
        addr = server.addresses()[1]
        create_topic(addr, TOPIC, 1)
        send(addr, b"kept", 0)
        first = pop(addr, "GID_POP_RESTART")
        assert [m.body for m in first.messages] == [b"kept"]
    finally:
        assert server.stop() == 0
    server = start_serve(tmp_path, "--grpc-port", "-1")
    try:
        addr = server.addresses()[1]
        # Still invisible after the restart, and the handle still acks it.
        assert pop(addr, "GID_POP_RESTART").messages == []
        assert ack(addr, "GID_POP_RESTART", first.messages[0])[0] == ResponseCode.SUCCESS
        # A later pop's time is above the restored ones: a new handle never repeats one.
        send(addr, b"next", 0)
        later = pop(addr, "GID_POP_RESTART")
        assert [m.body for m in later.messages] == [b"next"]
        assert later.header.pop_time > first.header.pop_time
    finally:
        assert server.stop() == 0


def test_a_repeated_attempt_gets_its_messages_again_on_any_connection(broker: str) -> None:
    group, topic = "GID_POP_ATTEMPT", "TopicPopAttempt"
    create_topic(broker, topic, 1)
    for i in range(3):
        send(broker, f"a{i}".encode(), 0, topic=topic)

    def attempt(attempt_id: str) -> list[bytes]:
        answer = pop(broker, group, topic=topic, queue_id=0, order=True, attempt_id=attempt_id)
        return [m.body for m in answer.messages]

    # Each call comes over a new connection, as a proxy's retry may.
    assert attempt("att-1") == [b"a0", b"a1", b"a2"]
    assert attempt("att-1") == [b"a0", b"a1", b"a2"]
    last = pop(broker, group, topic=topic, queue_id=0, order=True, attempt_id="att-1")
    assert [m.body for m in last.messages] == [b"a0", b"a1", b"a2"]
    # A repeat is the same delivery, no new attempt.
    assert [m.reconsume_times for m in last.messages] == [0, 0, 0]
    # Another attempt while the batch is out gets nothing.
    assert attempt("att-2") == []
    assert batch_ack(broker, group, last.messages, topic=topic) == ResponseCode.SUCCESS
    assert committed(broker, group, 0, topic=topic) == 3


def test_a_batch_ack_of_a_huge_bit_set_is_answered_and_bounded(broker: str) -> None:
    group, topic = "GID_POP_BITS", "TopicPopBits"
    create_topic(broker, topic, 1)
    send(broker, b"bit", 0, topic=topic)
    [message] = pop(broker, group, topic=topic).messages
    start, pop_time = (int(x) for x in message.pop_ck.split(" ")[:2])

    def batch(bits: bytes) -> RemotingCommand:
        entry = {"c": group, "t": topic, "r": "0", "so": start, "q": 0, "rq": 0,
                 "pt": pop_time, "it": 60000, "b": base64.b64encode(bits).decode()}  # fmt: skip
        body = json.dumps({"brokerName": BROKER_NAME, "acks": [entry]}).encode()
        return remoting_call(broker, RequestCode.BATCH_ACK_MESSAGE, {}, body)

    # Every bit of 64 KiB set: one pass over the queue's few offsets, not over the bits.
    assert batch(b"\xff" * 65536).code == ResponseCode.SUCCESS
    assert committed(broker, group, 0, topic=topic) == 1
    too_many = batch(b"\xff" * 65537)
    assert too_many.code == ResponseCode.SYSTEM_ERROR
    assert "bit sets of more than" in (too_many.remark or "")
