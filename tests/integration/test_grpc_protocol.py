"""RocketMQ 5's gRPC protocol at the wire, against ``pyrmq serve``: the settings handshake,
the status codes bad requests get, long polling, and messages a departed client held.

Requests are built with pyrmq's own protocol classes (the official client's behaviour is
covered in tests/compat/test_grpc_official_client.py). Each test runs against both transports
of the gRPC port: pyrmq's own and grpcio.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from tests import helpers
from tests.compat import servers
from tests.helpers import send_raw

from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.server import SERVICE_NAME
from pyrmq.remoting.headers import CreateTopicRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

CALLS = {
    "QueryRoute": (pb.QueryRouteRequest, pb.QueryRouteResponse),
    "SendMessage": (pb.SendMessageRequest, pb.SendMessageResponse),
    "AckMessage": (pb.AckMessageRequest, pb.AckMessageResponse),
    "ChangeInvisibleDuration": (
        pb.ChangeInvisibleDurationRequest,
        pb.ChangeInvisibleDurationResponse,
    ),
    "Heartbeat": (pb.HeartbeatRequest, pb.HeartbeatResponse),
    "NotifyClientTermination": (
        pb.NotifyClientTerminationRequest,
        pb.NotifyClientTerminationResponse,
    ),
    "EndTransaction": (pb.EndTransactionRequest, pb.EndTransactionResponse),
    "ForwardMessageToDeadLetterQueue": (
        pb.ForwardMessageToDeadLetterQueueRequest,
        pb.ForwardMessageToDeadLetterQueueResponse,
    ),
    "RecallMessage": (pb.RecallMessageRequest, pb.RecallMessageResponse),
}


class Client:
    """One gRPC client identity on its own channel."""

    def __init__(self, address: str, client_id: str) -> None:
        self.channel = grpc.insecure_channel(address)
        self.metadata = [("x-mq-client-id", client_id)] if client_id else []

    def call(self, name: str, request: Any) -> Any:
        _, response = CALLS[name]
        method = self.channel.unary_unary(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )
        return method(request, metadata=self.metadata, timeout=10)

    def receive(self, request: pb.ReceiveMessageRequest, timeout_s: float = 10) -> list[Any]:
        method = self.channel.unary_stream(
            f"/{SERVICE_NAME}/ReceiveMessage",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.ReceiveMessageResponse.FromString,
        )
        return list(method(request, metadata=self.metadata, timeout=timeout_s))

    def telemetry(self, settings: pb.Settings) -> tuple[Any, Any]:
        """Opens a telemetry stream, sends ``settings``; returns the reply and the stream."""
        method = self.channel.stream_stream(
            f"/{SERVICE_NAME}/Telemetry",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.TelemetryCommand.FromString,
        )
        outgoing: list[Any] = [pb.TelemetryCommand(settings=settings)]
        done = threading.Event()

        def commands() -> Iterator[Any]:
            yield from outgoing
            done.wait(60)

        stream = method(commands(), metadata=self.metadata)
        reply = next(stream)
        return reply, (stream, done)

    @contextlib.contextmanager
    def opened(self, settings: pb.Settings) -> Iterator[tuple[Any, Any]]:
        """A telemetry stream opened with ``settings`` for a ``with`` block: the reply to the
        settings and the stream of commands."""
        reply, (stream, done) = self.telemetry(settings)
        try:
            yield reply, stream
        finally:
            done.set()
            stream.cancel()

    def close(self) -> None:
        self.channel.close()


@pytest.fixture(scope="module", params=["native", "grpcio"])
def server(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[servers.ServerProcess]:
    """A broker whose plain gRPC connections are served by pyrmq's transport or by grpcio:
    every test here holds for both."""
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    # Transactions left open are checked after 0.5 s, every 0.3 s.
    conf.write_text(
        f"grpcTransport={request.param}\ntransactionTimeOut=500\ntransactionCheckInterval=300\n"
    )
    with servers.serving(root, "-c", str(conf)) as proc:
        assert (
            f"({request.param if request.param == 'grpcio' else 'pyrmq'})"
            in (root / "serve.log").read_text()
        )
        yield proc


_client_ids = itertools.count(1)


@pytest.fixture
def client(server: servers.ServerProcess) -> Iterator[Client]:
    # A client id of its own for each test: the broker remembers a client's kind.
    c = Client(server.grpc_address(), f"test-client@{next(_client_ids)}")
    yield c
    c.close()


def _message(topic: str, body: bytes, message_id: str = "01AAAA", **system: Any) -> pb.Message:
    system.setdefault("message_type", pb.NORMAL)
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(message_id=message_id, **system),
    )


def _push_settings(group: str) -> pb.Settings:
    """What a push consumer of ``group`` opens its telemetry stream with."""
    return pb.Settings(
        client_type=pb.PUSH_CONSUMER, subscription=pb.Subscription(group=pb.Resource(name=group))
    )


def _send(client: Client, message: pb.Message) -> Any:
    return client.call("SendMessage", pb.SendMessageRequest(messages=[message]))


def _receive_request(
    topic: str, group: str, *, wait_s: int = 0, invisible_s: int = 30, auto_renew: bool = False
) -> pb.ReceiveMessageRequest:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
        batch_size=32,
        auto_renew=auto_renew,
        long_polling_timeout=Duration(seconds=wait_s),
    )
    if not auto_renew:
        request.invisible_duration.FromSeconds(invisible_s)
    return request


def _messages(frames: list[Any]) -> list[Any]:
    return [f.message for f in frames if f.WhichOneof("content") == "message"]


def _code(frames: list[Any]) -> int:
    [status] = [f.status for f in frames if f.WhichOneof("content") == "status"]
    return int(status.code)


def test_settings_are_answered_with_the_brokers_limits_and_retry_policy(client: Client) -> None:
    producer = pb.Settings(
        client_type=pb.PRODUCER,
        publishing=pb.Publishing(topics=[pb.Resource(name="TopicGrpcSettings")]),
    )
    reply, (_, done) = client.telemetry(producer)
    done.set()
    assert reply.status.code == pb.OK
    assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
    assert reply.settings.publishing.validate_message_type
    assert reply.settings.backoff_policy.max_attempts == 3
    consumer = pb.Settings(
        client_type=pb.PUSH_CONSUMER,
        subscription=pb.Subscription(group=pb.Resource(name="GID_SETTINGS")),
    )
    reply, (_, done) = client.telemetry(consumer)
    done.set()
    subscription = reply.settings.subscription
    assert reply.status.code == pb.OK
    assert subscription.long_polling_timeout.seconds == 20
    assert not subscription.fifo
    policy = reply.settings.backoff_policy
    assert policy.max_attempts == 17
    steps = [d.seconds for d in policy.customized_backoff.next]
    assert steps[:4] == [1, 5, 10, 30]
    assert (len(steps), steps[-1]) == (18, 7200)


def test_routes_name_the_grpc_address_with_broker_id_0_and_the_accepted_types(
    server: servers.ServerProcess, client: Client
) -> None:
    route = client.call(
        "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="TopicGrpcRoute"))
    )
    assert route.status.code == pb.OK
    assert [q.id for q in route.message_queues] == list(range(8))
    host, port = server.grpc_address().split(":")
    for queue in route.message_queues:
        assert queue.permission == pb.READ_WRITE
        assert (queue.broker.name, queue.broker.id) == ("broker-a", 0)
        [address] = queue.broker.endpoints.addresses
        assert (address.host, address.port) == (host, int(port))
        assert list(queue.accept_message_types) == [
            pb.NORMAL,
            pb.FIFO,
            pb.DELAY,
            pb.TRANSACTION,
        ]


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (_message("TopicGrpcBad", b""), pb.MESSAGE_BODY_EMPTY),
        (_message("TopicGrpcBad", b"x" * (4 * 1024 * 1024 + 1)), pb.MESSAGE_BODY_TOO_LARGE),
        (_message("TopicGrpcBad", b"x", message_id=" "), pb.ILLEGAL_MESSAGE_ID),
        (_message("TopicGrpcBad", b"x", tag="a||b"), pb.ILLEGAL_MESSAGE_TAG),
        (_message("TopicGrpcBad", b"x", tag=" "), pb.ILLEGAL_MESSAGE_TAG),
        (_message("TopicGrpcBad", b"x", keys=["k\x01"]), pb.ILLEGAL_MESSAGE_KEY),
        (_message("TopicGrpcBad", b"x", message_group="g" * 64), pb.ILLEGAL_MESSAGE_GROUP),
        (_message("TopicGrpcBad", b"x", message_type=pb.FIFO), pb.ILLEGAL_MESSAGE_GROUP),
        (_message("TopicGrpcBad", b"x", message_type=pb.DELAY), pb.ILLEGAL_DELIVERY_TIME),
        (
            _message(
                "TopicGrpcBad",
                b"x",
                message_type=pb.DELAY,
                delivery_timestamp=Timestamp(seconds=int(time.time()) + 2 * 86_400),
            ),
            pb.ILLEGAL_DELIVERY_TIME,
        ),
        (
            _message("TopicGrpcBad", b"x", message_type=pb.TRANSACTION, message_group="g"),
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        ),
        (_message("Topic Bad", b"x"), pb.ILLEGAL_TOPIC),
        (_message("SCHEDULE_TOPIC_XXXX", b"x"), pb.ILLEGAL_TOPIC),
        (_message("%DLQ%GID_X", b"x"), pb.ILLEGAL_TOPIC),
    ],
)
def test_a_bad_send_is_refused_with_its_code_and_stores_nothing(
    server: servers.ServerProcess, client: Client, message: pb.Message, code: int
) -> None:
    response = _send(client, message)
    assert response.status.code == code, response.status.message
    [entry] = response.entries
    assert entry.status.code == code
    # The broker still serves, and nothing of the refused send is readable.
    assert _send(client, _message("TopicGrpcBad", b"fine")).status.code == pb.OK
    frames = client.receive(_receive_request("TopicGrpcBad", f"GID_BAD_{code}_{id(message)}"))
    assert [m.body for m in _messages(frames)].count(b"fine") >= 1
    assert b"" not in [m.body for m in _messages(frames)]


def test_an_empty_tag_is_no_tag(client: Client) -> None:
    """As RocketMQ's proxy, which refuses a blank tag but takes an empty one."""
    topic = "TopicGrpcEmptyTag"
    assert _send(client, _message(topic, b"untagged", tag="")).status.code == pb.OK
    [message] = _messages(client.receive(_receive_request(topic, "GID_EMPTY_TAG")))
    assert message.body == b"untagged"
    assert not message.system_properties.HasField("tag")


def test_a_reserved_user_property_is_refused(client: Client) -> None:
    for name in ("DELAY", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY", "BORN_TIMESTAMP"):
        message = _message("TopicGrpcBad", b"x")
        message.user_properties[name] = "3"
        assert _send(client, message).status.code == pb.ILLEGAL_MESSAGE_PROPERTY_KEY, name


def test_requests_without_a_client_id_or_with_bad_names_and_handles_get_their_codes(
    server: servers.ServerProcess, client: Client
) -> None:
    anonymous = Client(server.grpc_address(), "")
    try:
        route = anonymous.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name="T")))
        assert route.status.code == pb.CLIENT_ID_REQUIRED
    finally:
        anonymous.close()
    empty = client.call("SendMessage", pb.SendMessageRequest())
    assert empty.status.code == pb.MESSAGE_CORRUPTED
    assert (
        _code(client.receive(_receive_request("TopicGrpcNone", "GID_NONE"))) == pb.TOPIC_NOT_FOUND
    )
    assert (
        _code(client.receive(_receive_request("TopicGrpcBad", "bad group")))
        == pb.ILLEGAL_CONSUMER_GROUP
    )
    short = _receive_request("TopicGrpcBad", "GID_SHORT", invisible_s=1)
    assert _code(client.receive(short)) == pb.ILLEGAL_INVISIBLE_TIME
    sql = _receive_request("TopicGrpcBad", "GID_SQL")
    sql.filter_expression.type = pb.SQL
    assert _code(client.receive(sql)) == pb.ILLEGAL_FILTER_EXPRESSION
    for handle in ("", "garbage", "p1.0.0.1", "p1.x.y.z"):
        ack = client.call(
            "AckMessage",
            pb.AckMessageRequest(
                group=pb.Resource(name="GID_ACK"),
                topic=pb.Resource(name="TopicGrpcBad"),
                entries=[pb.AckMessageEntry(message_id="01", receipt_handle=handle)],
            ),
        )
        assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
    for transaction_id, resolution in [
        ("t", 1),
        ("", 1),
        (" ", 0),
        ("7F0000010000000000000000000000FF", 1),
    ]:
        end = client.call(
            "EndTransaction",
            pb.EndTransactionRequest(
                topic=pb.Resource(name="TopicGrpcBad"),
                transaction_id=transaction_id,
                resolution=resolution,  # type: ignore[arg-type]
            ),
        )
        assert end.status.code == pb.INVALID_TRANSACTION_ID
    # An RPC the broker does not serve is gRPC's UNIMPLEMENTED, as from RocketMQ's proxy.
    pull = client.channel.unary_unary(f"/{SERVICE_NAME}/PullMessage")
    with pytest.raises(grpc.RpcError) as raised:
        pull(b"", metadata=client.metadata, timeout=5)
    assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    "topic", ["RMQ_SYS_TRACE_TOPIC", "BenchmarkTest", "CHECKPOINT_TOPIC", "rmq_sys_x", "a b"]
)
def test_every_call_naming_a_system_topic_or_a_bad_name_is_refused(
    server: servers.ServerProcess, client: Client, topic: str
) -> None:
    """As RocketMQ's proxy, which checks the topic (no system topic) and the group of each
    call before anything else: a receipt handle, a transaction id, a recall handle."""
    assert _send(client, _message(topic, b"x")).status.code == pb.ILLEGAL_TOPIC
    route = client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=topic)))
    assert route.status.code == pb.ILLEGAL_TOPIC
    assert _code(client.receive(_receive_request(topic, "GID_SYSTEM"))) == pb.ILLEGAL_TOPIC
    names = {"group": pb.Resource(name="GID_SYSTEM"), "topic": pb.Resource(name=topic)}
    handle = "p1.0.0.1"
    calls: list[tuple[str, Any]] = [
        (
            "AckMessage",
            pb.AckMessageRequest(
                **names, entries=[pb.AckMessageEntry(message_id="01", receipt_handle=handle)]
            ),
        ),
        (
            "ChangeInvisibleDuration",
            pb.ChangeInvisibleDurationRequest(
                **names, receipt_handle=handle, invisible_duration=Duration(seconds=30)
            ),
        ),
        (
            "ForwardMessageToDeadLetterQueue",
            pb.ForwardMessageToDeadLetterQueueRequest(**names, receipt_handle=handle),
        ),
        (
            "EndTransaction",
            pb.EndTransactionRequest(topic=names["topic"], transaction_id="t", resolution=1),
        ),
        ("RecallMessage", pb.RecallMessageRequest(topic=names["topic"], recall_handle="x")),
    ]
    for method, request in calls:
        assert client.call(method, request).status.code == pb.ILLEGAL_TOPIC, method
    for method, request in calls[:3]:
        request.topic.name = "TopicGrpcBad"
        request.group.name = "a b"
        assert client.call(method, request).status.code == pb.ILLEGAL_CONSUMER_GROUP, method
    anonymous = Client(server.grpc_address(), "")
    try:
        recall = anonymous.call("RecallMessage", calls[-1][1])
        assert recall.status.code == pb.CLIENT_ID_REQUIRED
    finally:
        anonymous.close()


def test_a_producers_trace_context_and_born_host_reach_the_consumer(client: Client) -> None:
    """As through RocketMQ's proxy: the producer's own born host (not its connection's) and
    its trace context arrive; the born time is the broker's, in milliseconds (the official
    Python client sends whole seconds), and the producer's is kept as ``BORN_TIMESTAMP``."""
    topic = "TopicGrpcTraceContext"
    trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    hour_ago_s = int(time.time()) - 3600
    message = _message(
        topic,
        b"traced",
        trace_context=trace,
        born_host="10.1.2.3",
        born_timestamp=Timestamp(seconds=hour_ago_s),
    )
    assert _send(client, message).status.code == pb.OK
    [got] = _messages(client.receive(_receive_request(topic, "GID_TRACE_CONTEXT")))
    assert got.system_properties.trace_context == trace
    assert got.system_properties.born_host == "10.1.2.3"
    assert got.system_properties.born_timestamp.seconds > hour_ago_s + 3000
    assert dict(got.user_properties) == {}
    plain = _message(topic, b"untraced")
    assert _send(client, plain).status.code == pb.OK
    [got] = _messages(client.receive(_receive_request(topic, "GID_TRACE_CONTEXT")))
    assert not got.system_properties.trace_context
    assert got.system_properties.born_host == "127.0.0.1"


def test_a_topics_message_type_decides_what_grpc_producers_may_send_to_it(
    tmp_path: Path,
) -> None:
    """``mqadmin updateTopic -a +message.type=FIFO``: the route names FIFO as the only type
    the topic takes and a send of another kind is refused, as RocketMQ's proxy refuses it;
    the attribute survives a restart and an update that does not name it, and ``-`` removes
    it. A topic without one takes every kind (pyrmq's default; RocketMQ's is NORMAL)."""
    topic, plain = "TopicGrpcFifoOnly", "TopicGrpcAnyType"

    def route_types(client: Client, name: str) -> set[int]:
        route = client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=name)))
        assert route.status.code == pb.OK, route.status.message
        return {t for q in route.message_queues for t in q.accept_message_types}

    def update(namesrv: str, *args: str) -> Any:
        return helpers.pyrmq_admin("update-topic", "-n", namesrv, "-t", topic, "-r", "2", *args)

    fifo = _message(topic, b"in order", message_group="g1", message_type=pb.FIFO)
    normal = _message(topic, b"plain")
    server = servers.start_serve(tmp_path)
    try:
        namesrv, broker = server.addresses()[:2]
        client = Client(server.grpc_address(), "types@1")
        for bad, code in [
            ("+message.type=MIXED", ResponseCode.INVALID_PARAMETER),
            ("+message.type=RANDOM", ResponseCode.SYSTEM_ERROR),
            ("+queue.type=BatchCQ", ResponseCode.SYSTEM_ERROR),
            ("+no.such=1", ResponseCode.SYSTEM_ERROR),
            ("message.type=FIFO", ResponseCode.SYSTEM_ERROR),
        ]:
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic="TBW102",
                read_queue_nums=2,
                write_queue_nums=2,
                perm=6,
                attributes=bad,
            )
            refused = helpers.remoting_call(
                broker, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()
            )
            assert refused.code == code, (bad, refused.remark)
        done = update(namesrv, "-a", "+message.type=FIFO")
        assert done.returncode == 0, done.stderr
        servers.create_topic(broker, plain, 2)
        assert route_types(client, topic) == {pb.FIFO}
        assert route_types(client, plain) == {pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION}
        refused = _send(client, normal)
        assert refused.status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, refused
        assert _send(client, fifo).status.code == pb.OK
        assert _send(client, _message(plain, b"plain")).status.code == pb.OK
        assert update(namesrv).returncode == 0  # queues and permission only
        client.close()
    finally:
        server.kill()
    server = servers.start_serve(tmp_path)
    try:
        namesrv = str(server.addresses()[0])
        client = Client(server.grpc_address(), "types@2")
        assert route_types(client, topic) == {pb.FIFO}
        assert _send(client, normal).status.code == pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
        assert update(namesrv, "-a", "-message.type").returncode == 0
        assert len(route_types(client, topic)) == 4
        assert _send(client, normal).status.code == pb.OK
        client.close()
    finally:
        server.kill()


def test_a_held_receive_is_answered_by_the_message_that_arrives(client: Client) -> None:
    topic, group = "TopicGrpcLongPoll", "GID_LONG_POLL"
    assert _code(client.receive(_receive_request(topic, group))) == pb.TOPIC_NOT_FOUND
    assert _send(client, _message(topic, b"first")).status.code == pb.OK
    assert [m.body for m in _messages(client.receive(_receive_request(topic, group)))] == [b"first"]
    result: list[Any] = []
    started = time.monotonic()
    waiter = threading.Thread(
        target=lambda: result.extend(client.receive(_receive_request(topic, group, wait_s=15), 25))
    )
    waiter.start()
    time.sleep(0.5)
    assert _send(client, _message(topic, b"second")).status.code == pb.OK
    waiter.join(30)
    assert [m.body for m in _messages(result)] == [b"second"]
    # Answered by the arrival, not by the end of its 15 s window.
    assert time.monotonic() - started < 10
    empty = client.receive(_receive_request(topic, group, wait_s=1))
    assert _code(empty) == pb.MESSAGE_NOT_FOUND


def test_a_push_consumer_keeps_its_messages_across_a_new_stream_and_loses_them_once_gone(
    tmp_path: Path,
) -> None:
    """A push consumer whose telemetry stream breaks and opens again keeps what it holds:
    no one else gets it and its acks take, as with RocketMQ's proxy, which keeps renewing
    a client's messages while it is registered. Once it makes no call for the presence
    window (here the broker's 2 s channel expiry), they go to another consumer."""
    (tmp_path / "broker.conf").write_text("channelExpiredTimeout=2000\n")
    topic, group = "TopicGrpcDeparted", "GID_DEPARTED"
    with servers.serving(tmp_path, "-c", str(tmp_path / "broker.conf")) as server:
        first = Client(server.grpc_address(), "first@1")
        second = Client(server.grpc_address(), "second@2")
        try:
            for i in range(4):
                assert _send(first, _message(topic, f"m{i}".encode())).status.code == pb.OK
            _, (stream, done) = first.telemetry(_push_settings(group))
            held = _messages(first.receive(_receive_request(topic, group, auto_renew=True)))
            assert sorted(m.body for m in held) == [b"m0", b"m1", b"m2", b"m3"]
            # The stream breaks (a network blip); the official client opens another only at
            # its next settings sync, and heartbeats meanwhile.
            done.set()
            stream.cancel()
            heartbeat = pb.HeartbeatRequest(
                group=pb.Resource(name=group), client_type=pb.PUSH_CONSUMER
            )
            for _ in range(4):  # longer than the window
                assert first.call("Heartbeat", heartbeat).status.code == pb.OK
                frames = second.receive(_receive_request(topic, group, wait_s=1))
                assert _code(frames) == pb.MESSAGE_NOT_FOUND
            with first.opened(_push_settings(group)):
                assert _ack(first, group, topic, held[0]) == pb.OK
            first.close()
            again: list[Any] = []
            deadline = time.monotonic() + 15
            while len(again) < 3 and time.monotonic() < deadline:
                again += _messages(second.receive(_receive_request(topic, group, wait_s=1)))
            assert sorted(m.body for m in again) == sorted(m.body for m in held[1:])
            assert {m.system_properties.delivery_attempt for m in again} == {2}
            # A handle of the departed client's delivery no longer acks.
            stale = held[1].system_properties.receipt_handle
            ack = second.call(
                "AckMessage",
                pb.AckMessageRequest(
                    group=pb.Resource(name=group),
                    topic=pb.Resource(name=topic),
                    entries=[pb.AckMessageEntry(message_id="x", receipt_handle=stale)],
                ),
            )
            assert ack.status.code == pb.INVALID_RECEIPT_HANDLE
        finally:
            first.close()
            second.close()


def test_a_nack_to_zero_makes_the_message_visible_again_with_a_new_handle(client: Client) -> None:
    topic, group = "TopicGrpcNack", "GID_NACK"
    assert _send(client, _message(topic, b"nacked")).status.code == pb.OK
    [message] = _messages(client.receive(_receive_request(topic, group)))
    handle = message.system_properties.receipt_handle
    changed = client.call(
        "ChangeInvisibleDuration",
        pb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=handle,
            invisible_duration=Duration(seconds=0),
        ),
    )
    assert changed.status.code == pb.OK
    assert changed.receipt_handle not in ("", handle)
    [again] = _messages(client.receive(_receive_request(topic, group)))
    assert again.body == b"nacked"
    assert again.system_properties.delivery_attempt == 2
    assert again.system_properties.receipt_handle not in (handle, changed.receipt_handle)


def _create_topic(server: servers.ServerProcess, topic: str, queues: int = 1) -> None:
    servers.create_topic(server.addresses()[1], topic, queues)


def _ack(client: Client, group: str, topic: str, message: Any) -> int:
    ack = client.call(
        "AckMessage",
        pb.AckMessageRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            entries=[
                pb.AckMessageEntry(
                    message_id=message.system_properties.message_id,
                    receipt_handle=message.system_properties.receipt_handle,
                )
            ],
        ),
    )
    return int(ack.status.code)


def _send_4x(server: servers.ServerProcess, topic: str, body: bytes, sys_flag: int = 0) -> None:
    sent = send_raw(server.addresses()[1], topic, body, sys_flag=sys_flag)
    assert sent.code == 0, sent.remark


def test_messages_in_flight_stay_when_the_filter_reads_past_others(
    server: servers.ServerProcess, client: Client
) -> None:
    """A receive that finds only messages the filter does not take moves the group's cursor
    past them, never past the messages it still has to ack."""
    topic, group = "TopicGrpcFilterKeep", "GID_FILTER_KEEP"
    _create_topic(server, topic)
    request = _receive_request(topic, group)
    request.filter_expression.expression = "TagA"
    assert _send(client, _message(topic, b"wanted", tag="TagA")).status.code == pb.OK
    [wanted] = _messages(client.receive(request))
    assert _send(client, _message(topic, b"other", tag="TagB")).status.code == pb.OK
    assert _code(client.receive(request)) == pb.MESSAGE_NOT_FOUND
    assert _ack(client, group, topic, wanted) == pb.OK
    # Nothing is left to deliver, and nothing was lost on the way.
    assert _code(client.receive(request)) == pb.MESSAGE_NOT_FOUND


def test_a_receive_repeated_with_its_attempt_id_gets_the_same_messages(
    server: servers.ServerProcess, client: Client
) -> None:
    topic, group = "TopicGrpcAttempt", "GID_ATTEMPT"
    _create_topic(server, topic, 2)
    for i in range(4):
        assert _send(client, _message(topic, f"a{i}".encode())).status.code == pb.OK
    with client.opened(_push_settings(group)):
        request = _receive_request(topic, group, auto_renew=True)
        request.attempt_id = "attempt-1"
        first = _messages(client.receive(request))
        assert sorted(m.body for m in first) == [b"a0", b"a1", b"a2", b"a3"]
        # The answer was lost: the client asks again with the same attempt id.
        again = _messages(client.receive(request))
        assert sorted(m.body for m in again) == sorted(m.body for m in first)
        assert {m.system_properties.delivery_attempt for m in again} == {1}
        # A new attempt finds them all held.
        request.attempt_id = "attempt-2"
        request.long_polling_timeout.FromSeconds(1)
        assert _code(client.receive(request)) == pb.MESSAGE_NOT_FOUND
        for message in again:
            assert _ack(client, group, topic, message) == pb.OK


def test_an_orderly_push_consumers_receives_keep_an_attempt_id_per_queue(
    server: servers.ServerProcess, client: Client
) -> None:
    """A push consumer of an orderly group receives from each queue on its own: repeating one
    queue's attempt after another queue's receive gets that queue's batch again (it once got
    nothing, and the batch stayed held until its invisibility ran out)."""
    topic, group = "TopicGrpcAttemptFifo", "GID_ATTEMPT_FIFO"
    _create_topic(server, topic, 2)
    made = helpers.pyrmq_admin("update-group", "-n", server.addresses()[0], "-g", group, "-o")
    assert made.returncode == 0, made.stderr
    for queue_id in (0, 1):
        for i in range(2):
            body = f"q{queue_id}-{i}".encode()
            assert send_raw(server.addresses()[1], topic, body, queue_id=queue_id).code == 0
    with client.opened(_push_settings(group)):
        requests = {}
        for queue_id in (0, 1):
            request = _receive_request(topic, group, auto_renew=True)
            request.message_queue.id = queue_id
            request.attempt_id = f"attempt-q{queue_id}"
            requests[queue_id] = request
        first = [m.body for m in _messages(client.receive(requests[0]))]
        assert first == [b"q0-0", b"q0-1"]
        assert [m.body for m in _messages(client.receive(requests[1]))] == [b"q1-0", b"q1-1"]
        # Queue 0's answer was lost: its consumer asks again with the same attempt id.
        again = _messages(client.receive(requests[0]))
        assert [m.body for m in again] == first
        for message in again:
            assert _ack(client, group, topic, message) == pb.OK


def test_an_orphaned_transactions_recovery_duration_puts_off_its_first_check(
    client: Client,
) -> None:
    """As RocketMQ's proxy: a transaction message's orphaned_transaction_recovery_duration is
    the time before the broker first asks its producer about it (it was ignored: a half given
    an hour was checked within a second), and one over an hour is refused."""
    topic = "TopicGrpcRecovery"
    producer = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name=topic)])
    )
    asked: list[str] = []

    def collect(stream: Any) -> None:
        with contextlib.suppress(grpc.RpcError):
            for command in stream:
                if command.HasField("recover_orphaned_transaction_command"):
                    asked.append(command.recover_orphaned_transaction_command.message.body.decode())

    with client.opened(producer) as (reply, stream):
        reader = threading.Thread(target=collect, args=(stream,), daemon=True)
        reader.start()
        assert reply.status.code == pb.OK
        too_long = _message(topic, b"too-long", "01REC0", message_type=pb.TRANSACTION)
        too_long.system_properties.orphaned_transaction_recovery_duration.FromSeconds(3601)
        refused = _send(client, too_long)
        assert refused.status.code == pb.BAD_REQUEST, refused.status.message
        immune = _message(topic, b"immune", "01REC1", message_type=pb.TRANSACTION)
        immune.system_properties.orphaned_transaction_recovery_duration.FromSeconds(3600)
        plain = _message(topic, b"plain", "01REC2", message_type=pb.TRANSACTION)
        sent = {}
        for message in (immune, plain):
            response = _send(client, message)
            assert response.status.code == pb.OK, response.status.message
            sent[message.body] = response.entries[0].transaction_id
        deadline = time.monotonic() + 10
        while asked.count("plain") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Three checks of the plain half, at 0.3 s intervals, and none of the immune one.
        assert asked.count("plain") >= 3
        assert "immune" not in asked
        for body, transaction_id in sent.items():
            end = client.call(
                "EndTransaction",
                pb.EndTransactionRequest(
                    topic=pb.Resource(name=topic),
                    message_id=("01REC1" if body == b"immune" else "01REC2"),
                    transaction_id=transaction_id,
                    resolution=2,  # ROLLBACK
                    source=1,  # SOURCE_CLIENT
                ),
            )
            assert end.status.code == pb.OK, end.status.message
    reader.join(5)


def test_compressed_4x_bodies_arrive_inflated_and_undecodable_ones_go_to_the_dlq(
    server: servers.ServerProcess, client: Client
) -> None:
    import hashlib
    import zlib

    import lz4.frame
    import zstandard

    topic, group = "TopicGrpcCompressed", "GID_COMPRESSED"
    _create_topic(server, topic)
    big = b"pyrmq " * 2000
    _send_4x(server, topic, b"plain")
    _send_4x(server, topic, zlib.compress(big), sys_flag=1)
    _send_4x(server, topic, b"not zlib at all", sys_flag=1)
    _send_4x(server, topic, zlib.compress(b"lz4 is claimed"), sys_flag=1 | (1 << 8))
    # LZ4 and Zstandard, as a RocketMQ 4.9.4 producer sends them with its compressType.
    _send_4x(server, topic, lz4.frame.compress(big, block_linked=False), sys_flag=1 | (1 << 8))
    _send_4x(server, topic, zstandard.ZstdCompressor().compress(big), sys_flag=1 | (2 << 8))
    _send_4x(server, topic, b"after")
    got = _messages(client.receive(_receive_request(topic, group)))
    assert [m.body for m in got] == [b"plain", big, big, big, b"after"]
    for message in got:
        sp = message.system_properties
        assert sp.body_encoding == pb.IDENTITY
        assert sp.body_digest.checksum == hashlib.md5(message.body).hexdigest().upper()
    dead = _messages(client.receive(_receive_request(f"%DLQ%{group}", "GID_DLQ_READER")))
    assert [m.system_properties.dead_letter_queue.topic for m in dead] == [topic, topic]
    # Read from the DLQ, a body that does not inflate comes as stored.
    assert [m.body for m in dead] == [b"not zlib at all", zlib.compress(b"lz4 is claimed")]
    # A 4.x consumer of the DLQ finds what RocketMQ's send-back names in a dead letter.
    import asyncio

    broker = server.addresses()[1]
    pulled = asyncio.run(helpers.pull_head(broker, "broker-a", f"%DLQ%{group}", 0)).messages
    assert [m.properties["RETRY_TOPIC"] for m in pulled] == [topic, topic]
    assert [m.properties["ORIGIN_MESSAGE_ID"] for m in pulled] == [
        m.properties["DLQ_ORIGIN_MESSAGE_ID"] for m in pulled
    ]


def test_a_gzip_encoded_send_is_stored_compressed_and_one_that_does_not_inflate_is_refused(
    server: servers.ServerProcess, client: Client
) -> None:
    """As RocketMQ's proxy: a GZIP body (zlib, as RocketMQ's clients compress) is stored with
    the compressed flag, so 4.x consumers inflate it, and a 5.x one receives it inflated."""
    import asyncio
    import zlib

    from tests.helpers import pull_head

    from pyrmq.client.api import PullStatus

    topic, group = "TopicGrpcGzipSend", "GID_GZIP_SEND"
    _create_topic(server, topic, queues=1)
    big = b"gzip-encoded " * 1000
    packed = _message(topic, zlib.compress(big), "01GZIP", body_encoding=pb.GZIP)
    assert _send(client, packed).status.code == pb.OK
    bogus = _message(topic, b"not zlib", "01BOGUS", body_encoding=pb.GZIP)
    refused = _send(client, bogus)
    assert refused.status.code == pb.BAD_REQUEST
    assert "the GZIP body cannot be read" in refused.status.message
    [got] = _messages(client.receive(_receive_request(topic, group)))
    assert (got.body, got.system_properties.body_encoding) == (big, pb.IDENTITY)
    pulled = asyncio.run(pull_head(server.addresses()[1], "broker-a", topic, 0))
    assert pulled.status is PullStatus.FOUND
    [m] = pulled.messages
    assert (m.stored.sys_flag & 1, m.body) == (1, big)


def test_the_default_topic_takes_no_sends_and_assignments_need_a_valid_group(
    client: Client,
) -> None:
    assert _send(client, _message("TBW102", b"x")).status.code == pb.ILLEGAL_TOPIC
    method = client.channel.unary_unary(
        f"/{SERVICE_NAME}/QueryAssignment",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.QueryAssignmentResponse.FromString,
    )
    for group in ("", "bad group"):
        answer = method(
            pb.QueryAssignmentRequest(
                topic=pb.Resource(name="TopicGrpcBad"), group=pb.Resource(name=group)
            ),
            metadata=client.metadata,
            timeout=5,
        )
        assert answer.status.code == pb.ILLEGAL_CONSUMER_GROUP


@pytest.mark.parametrize("unit", ["seconds", "milliseconds"])
def test_a_delay_message_is_received_once_due_and_not_before(
    server: servers.ServerProcess, client: Client, unit: str
) -> None:
    """The official Python client puts milliseconds where seconds belong; both arrive due."""
    topic, group = f"TopicGrpcDelay{unit}", f"GID_DELAY_{unit}"
    _create_topic(server, topic)
    due_ms = int(time.time() * 1000) + 2_000
    stamp = (
        Timestamp(seconds=due_ms // 1000 + 1) if unit == "seconds" else Timestamp(seconds=due_ms)
    )
    if unit == "seconds":
        due_ms = stamp.seconds * 1000
    sent = _send(client, _message(topic, b"later", message_type=pb.DELAY, delivery_timestamp=stamp))
    assert sent.status.code == pb.OK, sent.status.message
    assert _code(client.receive(_receive_request(topic, group))) == pb.MESSAGE_NOT_FOUND
    got: list[Any] = []
    deadline = time.monotonic() + 15
    while not got and time.monotonic() < deadline:
        got = _messages(client.receive(_receive_request(topic, group, wait_s=5)))
    received_ms = int(time.time() * 1000)
    [message] = got
    assert message.body == b"later"
    assert received_ms >= due_ms
    sp = message.system_properties
    assert sp.message_type == pb.DELAY
    assert sp.delivery_timestamp.seconds * 1000 + sp.delivery_timestamp.nanos // 1_000_000 == due_ms


def test_messages_a_consumer_gives_back_at_shutdown_come_again_as_first_attempts(
    server: servers.ServerProcess,
) -> None:
    topic, group = "TopicGrpcGivenBack", "GID_GIVEN_BACK"
    leaving = Client(server.grpc_address(), "leaving@1")
    staying = Client(server.grpc_address(), "staying@2")
    try:
        _create_topic(server, topic)
        for i in range(3):
            assert _send(leaving, _message(topic, f"g{i}".encode())).status.code == pb.OK
        _, (stream, done) = leaving.telemetry(_push_settings(group))
        held = _messages(leaving.receive(_receive_request(topic, group, auto_renew=True)))
        assert len(held) == 3
        request = pb.NotifyClientTerminationRequest(group=pb.Resource(name=group))
        assert leaving.call("NotifyClientTermination", request).status.code == pb.OK
        done.set()
        stream.cancel()
        again = _messages(staying.receive(_receive_request(topic, group)))
        assert sorted(m.body for m in again) == [b"g0", b"g1", b"g2"]
        assert {m.system_properties.delivery_attempt for m in again} == {1}
    finally:
        leaving.close()
        staying.close()
