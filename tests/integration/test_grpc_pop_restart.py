"""What gRPC groups have in flight survives a broker restart, clean or ``kill -9``: acked messages
above the group's offset stay acked, invisible ones stay invisible and keep their attempts, the
handles clients hold still ack; and a message out of deliveries goes to the DLQ when it comes
due, with no consumer there, rather than when its invisibility is changed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.duration_pb2 import Duration
from tests.compat import servers
from tests.integration.test_grpc_protocol import (
    Client,
    _ack,
    _create_topic,
    _message,
    _messages,
    _receive_request,
    _send,
)

from pyrmq.client.admin import Admin
from pyrmq.proxy.proto import messaging_pb2 as pb

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _serve(root: Path) -> servers.ServerProcess:
    # Offsets and the in-flight state are written every 200 ms.
    conf = root / "broker.conf"
    conf.write_text("flushConsumerOffsetInterval=200\nmaxReconsumeTimes=2\n")
    return servers.start_serve(root, "-c", str(conf))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def _change(client: Client, group: str, topic: str, handle: str, seconds: int) -> Any:
    return client.call(
        "ChangeInvisibleDuration",
        pb.ChangeInvisibleDurationRequest(
            group=pb.Resource(name=group),
            topic=pb.Resource(name=topic),
            receipt_handle=handle,
            invisible_duration=Duration(seconds=seconds),
        ),
    )


@pytest.mark.parametrize("stop", ["clean", "kill -9"])
def test_in_flight_messages_survive_a_restart(root: Path, stop: str) -> None:
    topic, group = "TopicPopRestart", "GID_POP_RESTART"
    server = _serve(root)
    try:
        _create_topic(server, topic)
        client = Client(server.grpc_address(), "pop-restart@1")
        for body in (b"a", b"b", b"c"):
            assert _send(client, _message(topic, body)).status.code == pb.OK
        first = _messages(client.receive(_receive_request(topic, group, invisible_s=60)))
        assert [m.body for m in first] == [b"a", b"b", b"c"]
        assert _ack(client, group, topic, first[1]) == pb.OK
        # c is nacked once: it comes back at attempt 2, a minute from now.
        changed = _change(client, group, topic, first[2].system_properties.receipt_handle, 60)
        assert changed.status.code == pb.OK
        client.close()
        if stop == "clean":
            assert server.stop() == 0
        else:
            time.sleep(1.0)  # past a write of the state
            server.kill()
    finally:
        server.kill()

    server = _serve(root)
    try:
        client = Client(server.grpc_address(), "pop-restart@2")
        # Nothing to receive: a and c are invisible, b was acked.
        assert _messages(client.receive(_receive_request(topic, group, wait_s=1))) == []
        # The handles given out before the restart still ack.
        assert _ack(client, group, topic, first[0]) == pb.OK
        first[2].system_properties.receipt_handle = changed.receipt_handle
        assert _ack(client, group, topic, first[2]) == pb.OK
        assert _ack(client, group, topic, first[1]) == pb.INVALID_RECEIPT_HANDLE
        for body in (b"d",):
            assert _send(client, _message(topic, body)).status.code == pb.OK
        [d] = _messages(client.receive(_receive_request(topic, group)))
        assert d.body == b"d"
        client.close()
    finally:
        assert server.stop() == 0


def test_an_invisible_message_keeps_its_attempts_across_a_restart(root: Path) -> None:
    topic, group = "TopicPopAttempts", "GID_POP_ATTEMPTS"
    server = _serve(root)
    try:
        _create_topic(server, topic)
        client = Client(server.grpc_address(), "pop-attempts@1")
        assert _send(client, _message(topic, b"x")).status.code == pb.OK
        [x] = _messages(client.receive(_receive_request(topic, group)))
        changed = _change(client, group, topic, x.system_properties.receipt_handle, 3)
        assert changed.status.code == pb.OK
        client.close()
    finally:
        assert server.stop() == 0
    server = _serve(root)
    try:
        client = Client(server.grpc_address(), "pop-attempts@2")
        frames = client.receive(_receive_request(topic, group, wait_s=10), timeout_s=15)
        [again] = _messages(frames)
        assert again.body == b"x"
        assert again.system_properties.delivery_attempt == 2
        client.close()
    finally:
        assert server.stop() == 0


def test_extending_the_last_delivery_keeps_it_and_a_lapsed_one_goes_to_the_dlq(root: Path) -> None:
    topic, group = "TopicPopLast", "GID_POP_LAST"
    server = _serve(root)
    try:
        _create_topic(server, topic)
        # maxReconsumeTimes=2: three deliveries.
        client = Client(server.grpc_address(), "pop-last@1")
        for body in (b"kept", b"lapsed"):
            assert _send(client, _message(topic, body)).status.code == pb.OK
        for attempt in (1, 2, 3):
            got = _messages(client.receive(_receive_request(topic, group, wait_s=5)))
            assert [m.system_properties.delivery_attempt for m in got] == [attempt, attempt]
            if attempt == 3:
                break
            for m in got:
                changed = _change(client, group, topic, m.system_properties.receipt_handle, 0)
                assert changed.status.code == pb.OK
        # The third delivery: "kept" is extended, then acked; "lapsed" is left invisible for a
        # second and nobody receives again.
        [kept, lapsed] = got
        extended = _change(client, group, topic, kept.system_properties.receipt_handle, 60)
        assert extended.status.code == pb.OK
        kept.system_properties.receipt_handle = extended.receipt_handle
        assert _ack(client, group, topic, kept) == pb.OK
        lapse = _change(client, group, topic, lapsed.system_properties.receipt_handle, 1)
        assert lapse.status.code == pb.OK
        dlq = f"%DLQ%{group}"
        deadline = time.monotonic() + 10
        dead: list[Any] = []
        while not dead and time.monotonic() < deadline:
            time.sleep(0.2)
            route = client.call("QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=dlq)))
            if route.status.code == pb.OK:
                dead = _messages(client.receive(_receive_request(dlq, "GID_DLQ_READER")))
        assert [m.body for m in dead] == [b"lapsed"]
        client.close()
    finally:
        assert server.stop() == 0


def test_keys_with_spaces_are_taken(root: Path) -> None:
    topic, group = "TopicPopKeys", "GID_POP_KEYS"
    server = _serve(root)
    try:
        _create_topic(server, topic)
        client = Client(server.grpc_address(), "pop-keys@1")
        message = _message(topic, b"k")
        message.system_properties.keys.extend(["order 123", ""])
        assert _send(client, message).status.code == pb.OK
        blank = _message(topic, b"blank", message_id="01BBBB")
        blank.system_properties.keys.append("   ")
        assert _send(client, blank).status.code == pb.ILLEGAL_MESSAGE_KEY
        [got] = _messages(client.receive(_receive_request(topic, group)))
        assert list(got.system_properties.keys) == ["order", "123"]
        client.close()
    finally:
        assert server.stop() == 0


def test_a_topic_deleted_and_made_again_starts_afresh_for_its_groups(root: Path) -> None:
    topic, group = "TopicPopDeleted", "GID_POP_DELETED"
    server = _serve(root)
    try:
        _create_topic(server, topic)
        client = Client(server.grpc_address(), "pop-deleted@1")
        assert _send(client, _message(topic, b"old")).status.code == pb.OK
        for attempt in (1, 2, 3):
            [old] = _messages(client.receive(_receive_request(topic, group, wait_s=5)))
            assert old.system_properties.delivery_attempt == attempt
            # The last one comes due in a second, out of deliveries.
            seconds = 1 if attempt == 3 else 0
            changed = _change(client, group, topic, old.system_properties.receipt_handle, seconds)
            assert changed.status.code == pb.OK

        async def delete() -> None:
            async with Admin(server.addresses()[0]) as admin:
                await admin.delete_topic(topic)

        asyncio.run(delete())
        _create_topic(server, topic)
        assert _send(client, _message(topic, b"new")).status.code == pb.OK
        time.sleep(1.5)  # past when the old message would have come due
        [new] = _messages(client.receive(_receive_request(topic, group, wait_s=5)))
        assert (new.body, new.system_properties.delivery_attempt) == (b"new", 1)
        dlq = client.call(
            "QueryRoute", pb.QueryRouteRequest(topic=pb.Resource(name=f"%DLQ%{group}"))
        )
        assert dlq.status.code == pb.TOPIC_NOT_FOUND
        client.close()
    finally:
        assert server.stop() == 0
