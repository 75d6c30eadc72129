"""A broker with RocketMQ's plain ACL (``pyrmq serve --acl plain_acl.yml``) on its gRPC port:
the official RocketMQ 5 Python client (``rocketmq-python-client``, which signs every call)
sends and receives only as its account allows, and a file edited under the running broker
applies; requests built by hand check what each RPC and telemetry command needs.

The client runs in its own virtualenv (``make rmq5-client``), driven by ``rmq5_client.py``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from tests import helpers

from pyrmq.acl import Credentials
from pyrmq.acl.signing import grpc_signature
from pyrmq.client.admin import Admin
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.server import SERVICE_NAME

from .servers import ServerProcess, serving

pytestmark = [pytest.mark.compat, pytest.mark.slow, pytest.mark.timeout(120)]


TOPIC = "TopicA"
OTHER = "TopicB"
# The consumer account may read it; the file edited under the broker lets it send there.
EDITED = "TopicEdited"
GROUP = "GID_A"
PRODUCER = Credentials("producer1", "producer-secret")
CONSUMER = Credentials("consumer1", "consumer-secret")
ADMIN = Credentials("adminuser", "admin-secret")
# Takes any signature from 127.0.0.1, the address every client of these tests has.
TRUSTED = Credentials("trusted1", "trusted-secret")

PLAIN = f"""
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=SUB, {EDITED}=SUB]
    groupPerms: [{GROUP}=SUB]
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: trusted1
    secretKey: trusted-secret
    whiteRemoteAddress: 127.0.0.1
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""

UNAUTHORIZED = "40100"
FORBIDDEN = "40300"


# -- the official client --------------------------------------------------------------------


def _create_topics(server: ServerProcess, *topics: str) -> None:
    """UPDATE_AND_CREATE_TOPIC over the remoting protocol, signed by the admin account."""
    namesrv = server.addresses()[0]

    async def create() -> None:
        async with Admin(namesrv, credentials=ADMIN) as admin:
            for topic in topics:
                await admin.create_topic(topic, queue_nums=2)

    helpers.run(create, 30)


@pytest.fixture(scope="module")
def acl_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("acl") / "plain_acl.yml"
    path.write_text(PLAIN)
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, acl_file: Path) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("serve-acl")
    with serving(root, "--acl", str(acl_file)) as proc:
        _create_topics(proc, TOPIC, OTHER)
        yield proc


def _stored(server: ServerProcess, topic: str) -> int:
    """How many messages the topic's queues hold (the admin account asks)."""

    async def count() -> int:
        async with Admin(server.addresses()[0], credentials=ADMIN) as admin:
            status = await admin.topic_status(topic)
            return sum(o.max_offset - o.min_offset for o in status.values())

    return asyncio.run(asyncio.wait_for(count(), 30))


def _log(server: ServerProcess) -> str:
    return server.log_path.read_text()


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _bodies(report: dict[str, Any]) -> list[str]:
    return sorted(base64.b64decode(m["body"]).decode() for m in report["messages"])


def _signed(spec: dict[str, Any], who: Credentials | None) -> dict[str, Any]:
    if who is None:
        return spec
    return {**spec, "access_key": who.access_key, "secret_key": who.secret_key}


def _produce(
    rmq5: Any, server: ServerProcess, who: Credentials | None, topic: str, bodies: list[str]
) -> dict[str, Any]:
    """``{"result": [message id or {"error": ...} per body], "client_log": [...]}``."""
    spec = {
        "endpoint": server.grpc_address(),
        "topic": topic,
        "messages": [{"body": _b64(b)} for b in bodies],
        "client_log": True,
    }
    report: dict[str, Any] = rmq5("produce", _signed(spec, who), 40)
    return report


def _receive(
    rmq5: Any, server: ServerProcess, who: Credentials | None, count: int, timeout_s: float
) -> dict[str, Any]:
    spec = {
        "endpoint": server.grpc_address(),
        "topic": TOPIC,
        "group": GROUP,
        "count": count,
        "timeout_s": timeout_s,
        "await_s": 1,
        "catch": True,
        "client_log": True,
    }
    report: dict[str, Any] = rmq5("simple", _signed(spec, who), 40)
    return report


def _sent(report: dict[str, Any]) -> bool:
    return all(isinstance(r, str) and len(r) == 34 for r in report["result"])


def _errors(report: dict[str, Any]) -> str:
    return " ".join(r["error"] for r in report["result"] if isinstance(r, dict))


def test_accounts_send_and_receive_with_the_official_client_only_as_allowed(
    server: ServerProcess, rmq5: Any
) -> None:
    bodies = [f"from-producer1-{i}" for i in range(3)]
    sent = _produce(rmq5, server, PRODUCER, TOPIC, bodies)
    assert _sent(sent), sent

    # The producer account may not receive: the receive is FORBIDDEN, the client raises it.
    not_allowed = _receive(rmq5, server, PRODUCER, 1, 5)["result"]
    assert not_allowed["messages"] == []
    [error] = not_allowed["errors"]
    assert error.startswith("ForbiddenException"), error
    assert FORBIDDEN in error
    assert f"No SUB permission for topic {TOPIC} (producer1)" in error

    # The consumer account receives exactly what was sent, and acks it.
    got = _receive(rmq5, server, CONSUMER, len(bodies), 20)
    assert got["result"]["errors"] == []
    assert _bodies(got["result"]) == sorted(bodies)
    assert all(m["topic"] == TOPIC for m in got["result"]["messages"])

    async def lag() -> int:
        async with Admin(server.addresses()[0], credentials=ADMIN) as admin:
            return (await admin.consume_stats(GROUP, TOPIC)).lag

    assert asyncio.run(asyncio.wait_for(lag(), 30)) == 0
    # Nothing is left to receive.
    again = _receive(rmq5, server, CONSUMER, 1, 2)["result"]
    assert again == {"messages": [], "empty_receives": again["empty_receives"], "errors": []}

    # The consumer account may not send: each attempt is FORBIDDEN, the send raises it.
    refused = _produce(rmq5, server, CONSUMER, TOPIC, ["from-consumer1"])
    assert not _sent(refused)
    assert "ForbiddenException" in _errors(refused)
    assert f"{FORBIDDEN}, No PUB permission for topic {TOPIC} (consumer1)" in _errors(refused)
    # Nor may the producer account send to a topic it was not granted: it gets no route, which
    # needs PUB or SUB.
    elsewhere = _produce(rmq5, server, PRODUCER, OTHER, ["elsewhere"])
    assert not _sent(elsewhere)
    assert f"failed to fetch topic:{OTHER} route" in _errors(elsewhere)
    refusal = f"{FORBIDDEN}, No PUB or SUB permission for topic {OTHER} (producer1)"
    assert f"query topic raise exception, {refusal}" in elsewhere["client_log"]


@pytest.mark.parametrize(
    ("who", "reason"),
    [
        (
            Credentials("producer1", "not-the-secret"),
            "Check signature failed for accessKey=producer1",
        ),
        (Credentials("stranger1", "stranger-secret"), "No acl config for stranger1"),
        (None, "No accessKey is configured"),
    ],
    ids=["wrong-secret", "unknown-account", "no-credentials"],
)
def test_a_client_that_does_not_authenticate_is_unauthorized(
    server: ServerProcess, rmq5: Any, who: Credentials | None, reason: str
) -> None:
    stored = _stored(server, TOPIC)
    refused = _produce(rmq5, server, who, TOPIC, ["never-stored"])
    assert not _sent(refused)
    # The client logs the UNAUTHORIZED answer to its route query, then the send fails for
    # want of a route.
    assert f"failed to fetch topic:{TOPIC} route" in _errors(refused)
    assert f"query topic raise exception, {UNAUTHORIZED}, {reason}" in refused["client_log"]
    assert reason in _log(server)
    assert _stored(server, TOPIC) == stored


def _grant(acl_file: Path, text: str) -> None:
    acl_file.write_text(text)
    # A new mtime even on a file system with coarse timestamps.
    stamp = time.time_ns() + 10**9
    os.utime(acl_file, ns=(stamp, stamp))


def test_an_edited_file_applies_to_grpc_calls_without_a_restart(
    server: ServerProcess, rmq5: Any, acl_file: Path
) -> None:
    # Its own topic, so that the messages do not reach the other tests' consumers.
    _create_topics(server, EDITED)
    refusal = f"ForbiddenException: {FORBIDDEN}, No PUB permission for topic {EDITED} (consumer1)"
    before = _produce(rmq5, server, CONSUMER, EDITED, ["before"])
    assert refusal in _errors(before)
    granted = PLAIN.replace(f"{EDITED}=SUB", f"{EDITED}=PUB|SUB")
    assert granted != PLAIN
    try:
        _grant(acl_file, granted)
        edited = time.monotonic()
        # The broker looks at the file at most every 0.5 s: a send 1 s later is allowed.
        time.sleep(1.0)
        after = _produce(rmq5, server, CONSUMER, EDITED, ["after"])
        assert _sent(after), after
        assert time.monotonic() - edited < 10
    finally:
        _grant(acl_file, PLAIN)
    time.sleep(1.0)
    revoked = _produce(rmq5, server, CONSUMER, EDITED, ["revoked"])
    assert refusal in _errors(revoked)
    assert _stored(server, EDITED) == 1


def test_a_global_white_address_lets_unsigned_and_unknown_clients_through(
    tmp_path: Path, rmq5: Any
) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    # Another address first: the clients, from 127.0.0.1, must sign.
    acl_file.write_text("globalWhiteRemoteAddresses: [127.0.0.2]\n" + PLAIN)
    with serving(tmp_path, "--acl", str(acl_file)) as white:
        _create_topics(white, TOPIC)
        refused = _produce(rmq5, white, None, TOPIC, ["refused"])
        assert not _sent(refused)
        assert f"{UNAUTHORIZED}, No accessKey is configured" in " ".join(refused["client_log"])

        _grant(acl_file, "globalWhiteRemoteAddresses: [127.0.0.1]\n" + PLAIN)
        time.sleep(1.0)
        unsigned = _produce(rmq5, white, None, TOPIC, ["unsigned"])
        assert _sent(unsigned), unsigned
        unknown = _produce(rmq5, white, Credentials("stranger1", "no-such-secret"), TOPIC, ["x"])
        assert _sent(unknown), unknown
        got = _receive(rmq5, white, None, 2, 20)["result"]
        assert got["errors"] == []
        assert _bodies(got) == ["unsigned", "x"]


# -- requests built by hand -----------------------------------------------------------------


class Wire:
    """Signed (or not) calls of one client id, built with pyrmq's protocol classes."""

    def __init__(self, address: str, client_id: str = "acl-wire@1") -> None:
        self.channel = grpc.insecure_channel(address)
        self.client_id = client_id

    def metadata(
        self, who: Credentials | None, *, authorization: str | None = None, dated: bool = True
    ) -> list[tuple[str, str]]:
        date_time = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        # One client id per account: the broker binds a client id to its first account.
        named = re.search(r"Credential=([^,\s]*)", authorization or "")
        account = who.access_key if who is not None else (named.group(1) if named else "")
        out = [("x-mq-client-id", f"{self.client_id}-{account or 'none'}")]
        if dated:
            out.append(("x-mq-date-time", date_time))
        if who is not None:
            signature = grpc_signature(date_time, who.secret_key)
            authorization = (
                f"MQv2-HMAC-SHA1 Credential={who.access_key}, "
                f"SignedHeaders=x-mq-date-time, Signature={signature}"
            )
        if authorization is not None:
            out.append(("authorization", authorization))
        return out

    def call(self, name: str, request: Any, metadata: list[tuple[str, str]]) -> Any:
        response = getattr(pb, name + "Response")
        method = self.channel.unary_unary(
            f"/{SERVICE_NAME}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )
        return method(request, metadata=metadata, timeout=10)

    def receive(self, request: pb.ReceiveMessageRequest, metadata: list[tuple[str, str]]) -> Any:
        method = self.channel.unary_stream(
            f"/{SERVICE_NAME}/ReceiveMessage",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.ReceiveMessageResponse.FromString,
        )
        [status] = [
            f.status for f in method(request, metadata=metadata, timeout=10) if f.status.code
        ]
        return status

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def wire(server: ServerProcess) -> Iterator[Wire]:
    client = Wire(server.grpc_address())
    yield client
    client.close()


def _res(name: str) -> pb.Resource:
    return pb.Resource(name=name)


def test_a_missing_or_garbled_authorization_is_unauthorized_and_a_valid_one_passes(
    wire: Wire, server: ServerProcess
) -> None:
    route = pb.QueryRouteRequest(topic=_res(TOPIC))
    cases = [
        (wire.metadata(None), "No accessKey is configured"),
        (wire.metadata(None, authorization="garbage"), "No accessKey is configured"),
        (wire.metadata(None, authorization="MQv2-HMAC-SHA1 ,=,,Credential"), "No accessKey"),
        (
            wire.metadata(None, authorization="MQv2-HMAC-SHA1 Credential=producer1, Signature=00"),
            "Check signature failed for accessKey=producer1",
        ),
        # Signed, but without the date-time the signature covers.
        (wire.metadata(PRODUCER, dated=False), "Check signature failed for accessKey=producer1"),
    ]
    for metadata, reason in cases:
        status = wire.call("QueryRoute", route, metadata).status
        assert (status.code, reason in status.message) == (pb.UNAUTHORIZED, True), metadata
    ok = wire.call("QueryRoute", route, wire.metadata(PRODUCER))
    assert ok.status.code == pb.OK, ok.status
    assert {q.topic.name for q in ok.message_queues} == {TOPIC}
    # An account whose white remote address is the client's (127.0.0.1, read from the gRPC
    # peer) needs no valid signature, nor permissions, as in RocketMQ.
    trusted = wire.metadata(None, authorization="MQv2-HMAC-SHA1 Credential=trusted1, Signature=0")
    status = wire.call("QueryRoute", route, trusted).status
    assert status.code == pb.OK, status
    assert "refused gRPC QueryRouteRequest from 127.0.0.1" in _log(server)


def test_each_rpc_needs_the_permissions_of_its_resources(wire: Wire) -> None:
    group, topic = _res(GROUP), _res(TOPIC)
    handle = "not-a-handle"
    requests: list[tuple[str, Any]] = [
        ("QueryAssignment", pb.QueryAssignmentRequest(group=group, topic=topic)),
        (
            "AckMessage",
            pb.AckMessageRequest(
                group=group, topic=topic, entries=[pb.AckMessageEntry(receipt_handle=handle)]
            ),
        ),
        (
            "ChangeInvisibleDuration",
            pb.ChangeInvisibleDurationRequest(group=group, topic=topic, receipt_handle=handle),
        ),
        (
            "ForwardMessageToDeadLetterQueue",
            pb.ForwardMessageToDeadLetterQueueRequest(
                group=group, topic=topic, receipt_handle=handle
            ),
        ),
        ("NotifyClientTermination", pb.NotifyClientTerminationRequest(group=group)),
        ("Heartbeat", pb.HeartbeatRequest(group=group, client_type=pb.SIMPLE_CONSUMER)),
    ]
    for name, request in requests:
        # The producer account holds neither the group nor SUB on the topic.
        refused = wire.call(name, request, wire.metadata(PRODUCER)).status
        assert refused.code == pb.FORBIDDEN, (name, refused)
        assert "No SUB permission" in refused.message, (name, refused)
        allowed = wire.call(name, request, wire.metadata(CONSUMER)).status
        assert allowed.code not in (pb.UNAUTHORIZED, pb.FORBIDDEN), (name, allowed)
    receive = pb.ReceiveMessageRequest(
        group=group,
        message_queue=pb.MessageQueue(topic=topic, id=-1),
        batch_size=1,
        auto_renew=True,
    )
    refused = wire.receive(receive, wire.metadata(PRODUCER))
    assert refused.code == pb.FORBIDDEN, refused
    receive.message_queue.topic.name = OTHER
    # The consumer account holds the group, but not the other topic.
    refused = wire.receive(receive, wire.metadata(CONSUMER))
    assert (refused.code, refused.message) == (
        pb.FORBIDDEN,
        f"No SUB permission for topic {OTHER} (consumer1)",
    )

    end = pb.EndTransactionRequest(topic=topic, transaction_id="x", resolution=0)
    refused = wire.call("EndTransaction", end, wire.metadata(CONSUMER)).status
    assert (refused.code, refused.message) == (
        pb.FORBIDDEN,
        f"No PUB permission for topic {TOPIC} (consumer1)",
    )
    assert wire.call("EndTransaction", end, wire.metadata(PRODUCER)).status.code == pb.OK
    # A route needs either permission on the topic; a producer heartbeat names no resource.
    route = pb.QueryRouteRequest(topic=topic)
    assert wire.call("QueryRoute", route, wire.metadata(CONSUMER)).status.code == pb.OK
    other = pb.QueryRouteRequest(topic=_res(OTHER))
    refused = wire.call("QueryRoute", other, wire.metadata(CONSUMER)).status
    assert (refused.code, refused.message) == (
        pb.FORBIDDEN,
        f"No PUB or SUB permission for topic {OTHER} (consumer1)",
    )
    producing = pb.HeartbeatRequest(client_type=pb.PRODUCER)
    assert wire.call("Heartbeat", producing, wire.metadata(CONSUMER)).status.code == pb.OK


def test_malformed_requests_are_refused_before_the_accounts_are_asked(wire: Wire) -> None:
    no_group = pb.HeartbeatRequest(client_type=pb.PUSH_CONSUMER)
    refused = wire.call("Heartbeat", no_group, wire.metadata(ADMIN)).status
    assert (refused.code, refused.message) == (
        pb.FORBIDDEN,
        "a consumer's heartbeat names no group",
    )
    mixed = pb.SendMessageRequest(
        messages=[
            pb.Message(topic=_res(TOPIC), body=b"a"),
            pb.Message(topic=_res(OTHER), body=b"b"),
        ]
    )
    refused = wire.call("SendMessage", mixed, wire.metadata(ADMIN)).status
    assert (refused.code, refused.message) == (
        pb.MESSAGE_CORRUPTED,
        "the messages name different topics",
    )
    empty = wire.call("SendMessage", pb.SendMessageRequest(), wire.metadata(ADMIN)).status
    assert empty.code == pb.MESSAGE_CORRUPTED


def test_a_refused_telemetry_command_ends_its_stream(wire: Wire) -> None:
    publishing = pb.Settings(
        client_type=pb.PRODUCER, publishing=pb.Publishing(topics=[_res(TOPIC)])
    )
    subscription = pb.Settings(
        client_type=pb.SIMPLE_CONSUMER,
        subscription=pb.Subscription(
            group=_res(GROUP), subscriptions=[pb.SubscriptionEntry(topic=_res(TOPIC))]
        ),
    )

    def stream(who: Credentials | None, *settings: pb.Settings) -> list[Any]:
        """Every answer until the broker ends the stream (or 10 s)."""
        method = wire.channel.stream_stream(
            f"/{SERVICE_NAME}/Telemetry",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=pb.TelemetryCommand.FromString,
        )
        done = threading.Event()

        def outgoing() -> Iterator[Any]:
            for one in settings:
                yield pb.TelemetryCommand(settings=one)
            done.wait(10)

        call = method(outgoing(), metadata=wire.metadata(who), timeout=10)
        answers = []
        try:
            for answer in call:
                answers.append(answer)
                if len(answers) == len(settings):
                    break
        finally:
            done.set()
            call.cancel()
        return answers

    # The consumer account: its subscription is answered; publishing to the topic, which it
    # may not, is refused and ends the stream: the settings after it are not answered.
    answers = stream(CONSUMER, subscription, publishing, subscription)
    assert [a.status.code for a in answers] == [pb.OK, pb.FORBIDDEN]
    assert answers[0].settings.subscription.group.name == GROUP
    assert answers[1].status.message == f"No PUB permission for topic {TOPIC} (consumer1)"
    assert not answers[1].HasField("settings")
    # A stream that does not authenticate gets its refusal and nothing more.
    answers = stream(Credentials("consumer1", "not-the-secret"), subscription, subscription)
    assert [a.status.code for a in answers] == [pb.UNAUTHORIZED]
    assert answers[0].status.message == "Check signature failed for accessKey=consumer1"


def test_a_client_id_belongs_to_the_account_that_first_used_it(wire: Wire) -> None:
    route = pb.QueryRouteRequest(topic=_res(TOPIC))
    metadata = wire.metadata(CONSUMER)
    assert wire.call("QueryRoute", route, metadata).status.code == pb.OK
    # Another account naming the same client id would act on that client's messages.
    taken = [(k, v) for k, v in wire.metadata(PRODUCER) if k != "x-mq-client-id"]
    taken.append(("x-mq-client-id", dict(metadata)["x-mq-client-id"]))
    status = wire.call("QueryRoute", route, taken).status
    assert status.code == pb.FORBIDDEN
    assert "is another account's" in status.message
    assert wire.call("QueryRoute", route, wire.metadata(PRODUCER)).status.code == pb.OK


def test_a_producer_ends_only_its_own_topics_halves(wire: Wire) -> None:
    message_id = "7F00000100002A9F0000000000000ABC"
    half = pb.Message(
        topic=_res(OTHER),
        body=b"the admin's half",
        system_properties=pb.SystemProperties(
            message_id=message_id, message_type=pb.TRANSACTION, body_encoding=pb.IDENTITY
        ),
    )
    sent = wire.call("SendMessage", pb.SendMessageRequest(messages=[half]), wire.metadata(ADMIN))
    assert sent.status.code == pb.OK, sent.status

    def end(who: Credentials, topic: str) -> Any:
        request = pb.EndTransactionRequest(
            topic=_res(topic),
            message_id=message_id,
            transaction_id=sent.entries[0].transaction_id,
            resolution=1,  # COMMIT
        )
        return wire.call("EndTransaction", request, wire.metadata(who)).status

    # The producer may publish to its own topic, not end another topic's half through it.
    assert end(PRODUCER, OTHER).code == pb.FORBIDDEN
    refused = end(PRODUCER, TOPIC)
    assert refused.code == pb.INVALID_TRANSACTION_ID, refused
    assert "producer group" in refused.message
    assert end(ADMIN, OTHER).code == pb.OK
