"""What the gRPC port's transport itself must get right, against ``pyrmq serve`` with each of
its transports (pyrmq's own and grpcio): calls a client cancels or lets run out, many calls at
once on one connection, messages larger than HTTP/2's windows and frames, and requests that do
not parse."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from tests.compat import servers

from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.server import SERVICE_NAME

pytestmark = pytest.mark.integration

CLIENT = [("x-mq-client-id", "transport-test@1")]


@pytest.fixture(scope="module", params=["native", "grpcio"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory, transport: str) -> Iterator[str]:
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    conf.write_text(f"grpcTransport={transport}\n")
    with servers.serving(root, "-c", str(conf)) as proc:
        yield proc.grpc_address()


def _send_call(channel: grpc.Channel) -> Any:
    return channel.unary_unary(
        f"/{SERVICE_NAME}/SendMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.SendMessageResponse.FromString,
    )


def _receive_call(channel: grpc.Channel) -> Any:
    return channel.unary_stream(
        f"/{SERVICE_NAME}/ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )


def _message(topic: str, body: bytes, message_id: str) -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=message_id, message_type=pb.NORMAL),
    )


def _receive_request(topic: str, group: str, wait_s: int, batch: int = 32) -> Any:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=batch,
        long_polling_timeout=Duration(seconds=wait_s),
    )
    request.invisible_duration.FromSeconds(60)
    return request


def _bodies(frames: Any) -> list[bytes]:
    return [f.message.body for f in frames if f.WhichOneof("content") == "message"]


def _status(frames: list[Any]) -> int:
    [status] = [f.status.code for f in frames if f.WhichOneof("content") == "status"]
    return int(status)


def _sent(channel: grpc.Channel, topic: str, body: bytes, message_id: str) -> None:
    answer = _send_call(channel)(
        pb.SendMessageRequest(messages=[_message(topic, body, message_id)]),
        metadata=CLIENT,
        timeout=30,
    )
    assert answer.status.code == pb.OK, answer.status


def test_a_receive_its_client_cancels_takes_nothing_that_arrives_after(address: str) -> None:
    topic, group = "TopicCancelledReceive", "GID_CANCELLED_RECEIVE"
    with grpc.insecure_channel(address) as channel:
        _sent(channel, topic, b"first", "01CANCEL0001")
        assert _bodies(_receive_call(channel)(_receive_request(topic, group, 0), metadata=CLIENT))
        held = _receive_call(channel)(
            _receive_request(topic, group, 20), metadata=CLIENT, timeout=30
        )
        ended: list[grpc.StatusCode] = []
        reading = threading.Thread(target=_read_until_ended, args=(held, ended))
        reading.start()
        time.sleep(0.5)
        held.cancel()
        reading.join(10)
        assert ended == [grpc.StatusCode.CANCELLED]
        time.sleep(0.3)
        # Had the cancelled receive still been waiting, it would have taken this one to a
        # client that is gone, and hidden it for 60 s.
        _sent(channel, topic, b"after", "01CANCEL0002")
        frames = list(
            _receive_call(channel)(_receive_request(topic, group, 5), metadata=CLIENT, timeout=30)
        )
        assert _bodies(frames) == [b"after"]


def _read_until_ended(call: Any, ended: list[grpc.StatusCode]) -> None:
    try:
        for _ in call:
            pass
    except grpc.RpcError as e:
        ended.append(e.code())


def test_a_receive_ends_before_its_deadline_rather_than_at_its_long_polling_time(
    address: str,
) -> None:
    topic, group = "TopicShortDeadline", "GID_SHORT_DEADLINE"
    with grpc.insecure_channel(address) as channel:
        _sent(channel, topic, b"x", "01DEADLINE01")
        assert _bodies(_receive_call(channel)(_receive_request(topic, group, 0), metadata=CLIENT))
        started = time.monotonic()
        frames = list(
            _receive_call(channel)(_receive_request(topic, group, 20), metadata=CLIENT, timeout=3)
        )
        # Answered inside the call's 3 s (grpc-timeout), with the protocol's own status.
        assert time.monotonic() - started < 3
        assert _status(frames) == pb.MESSAGE_NOT_FOUND


def test_many_calls_at_once_on_one_connection_each_get_their_own_answer(address: str) -> None:
    topic, count = "TopicManyCalls", 300

    async def main() -> list[str]:
        async with grpc.aio.insecure_channel(address) as channel:
            send = channel.unary_unary(
                f"/{SERVICE_NAME}/SendMessage",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=pb.SendMessageResponse.FromString,
            )

            async def one(i: int) -> str:
                request = pb.SendMessageRequest(
                    messages=[_message(topic, f"m{i}".encode(), f"01MANY{i:06d}")]
                )
                answer = await send(request, metadata=CLIENT, timeout=30)
                assert answer.status.code == pb.OK, answer.status
                [entry] = answer.entries
                return str(entry.message_id)

            return await asyncio.gather(*(one(i) for i in range(count)))

    ids = asyncio.run(main())
    assert ids == [f"01MANY{i:06d}" for i in range(count)]
    with grpc.insecure_channel(address) as channel:
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < count and time.monotonic() < deadline:
            got += _bodies(
                _receive_call(channel)(
                    _receive_request(topic, "GID_MANY_CALLS", 1), metadata=CLIENT, timeout=10
                )
            )
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(count))


def test_messages_larger_than_the_windows_go_both_ways(address: str) -> None:
    topic, group = "TopicBigMessages", "GID_BIG_MESSAGES"
    bodies = [bytes([i]) * (3 << 20) for i in range(1, 4)]
    with grpc.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        for i, body in enumerate(bodies):
            _sent(channel, topic, body, f"01BIGMSG{i:04d}")
        got: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(got) < len(bodies) and time.monotonic() < deadline:
            got += _bodies(
                _receive_call(channel)(
                    _receive_request(topic, group, 1), metadata=CLIENT, timeout=30
                )
            )
        assert sorted(got) == bodies


def test_a_request_that_does_not_parse_is_refused_and_the_port_serves_on(
    address: str, transport: str
) -> None:
    with grpc.insecure_channel(address) as channel:
        raw = channel.unary_unary(f"/{SERVICE_NAME}/SendMessage")
        with pytest.raises(grpc.RpcError) as raised:
            raw(b"\xff\xff\xff", metadata=CLIENT, timeout=10)
        # gRPC's status for a message that does not parse; grpcio's server says UNKNOWN.
        expected = grpc.StatusCode.INTERNAL if transport == "native" else grpc.StatusCode.UNKNOWN
        assert raised.value.code() == expected
        _sent(channel, "TopicAfterGarbage", b"fine", "01GARBAGE001")


def test_messages_a_client_leaves_unread_are_received_by_another_at_once(address: str) -> None:
    """Four messages larger than the client's window, which it never reads before it cancels:
    whatever the broker had already handed over, the group gets them all again at once."""
    topic, group = "TopicUnread", "GID_UNREAD"
    bodies = [bytes([i]) * 200_000 for i in range(1, 5)]
    small_window = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 16384)]
    with grpc.insecure_channel(address, options=small_window) as channel:
        for i, body in enumerate(bodies):
            _sent(channel, topic, body, f"01UNREAD{i:04d}")
        stalled = _receive_call(channel)(
            _receive_request(topic, group, 0), metadata=CLIENT, timeout=30
        )
        time.sleep(1.0)
        stalled.cancel()
    with grpc.insecure_channel(
        address, options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        started = time.monotonic()
        got = _bodies(
            _receive_call(channel)(_receive_request(topic, group, 5), metadata=CLIENT, timeout=30)
        )
        assert sorted(got) == bodies
        assert time.monotonic() - started < 3
