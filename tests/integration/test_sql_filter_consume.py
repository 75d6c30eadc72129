"""SQL92 filters against a real ``pyrmq serve`` with ``enablePropertyFilter=true``: a 4.x pull
and a 5.x receive take only the messages whose properties match, read past the others, and a
filter that does not parse gets a clear error."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from tests.compat import servers
from tests.helpers import remoting_call, send_raw

from pyrmq import _core
from pyrmq.properties import encode_properties
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag, RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicSql"
# (body, properties)
MESSAGES = [
    (b"m1", {"a": "1", "region": "eu"}),
    (b"m2", {"a": "5", "region": "us"}),
    (b"m3", {"a": "7", "region": "eu"}),
    (b"m4", {"region": "eu"}),
    (b"m5", {"a": "9", "region": "eu", "TAGS": "T"}),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.ServerProcess]:
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    conf.write_text("enablePropertyFilter=true\n")
    with servers.serving(root, "-c", str(conf)) as proc:
        broker = proc.addresses()[1]
        servers.create_topic(broker, TOPIC, 1)
        for body, props in MESSAGES:
            sent = send_raw(broker, TOPIC, body, properties=encode_properties(props))
            assert sent.code == ResponseCode.SUCCESS
        yield proc


def _pull(broker: str, expression: str, offset: int = 0, max_nums: int = 32) -> Any:
    header = dataclasses.replace(
        PullMessageRequestHeader.immediate("GID_SQL", TOPIC, 0, offset, max_nums, expression),
        expression_type="SQL92",
    )
    return remoting_call(broker, RequestCode.PULL_MESSAGE, header.to_ext())


def test_a_4x_pull_takes_only_matching_messages(server: servers.ServerProcess) -> None:
    broker = server.addresses()[1]
    answer = _pull(broker, "a > 3 AND region = 'eu'")
    assert answer.code == ResponseCode.SUCCESS
    assert [m.body for m in _core.decode_messages(answer.body)] == [b"m3", b"m5"]
    assert answer.ext_fields["nextBeginOffset"] == "5"
    # Nothing matches in what a pull reads: pull again from past it.
    none = _pull(broker, "region = 'us'", offset=2, max_nums=2)
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    assert none.ext_fields["nextBeginOffset"] == "4"
    refused = _pull(broker, "a >")
    assert refused.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    assert "a >" in (refused.remark or "")


def test_a_5x_receive_takes_only_matching_messages(server: servers.ServerProcess) -> None:
    import grpc

    from pyrmq.proxy.server import SERVICE_NAME

    channel = grpc.insecure_channel(server.grpc_address())
    receive = channel.unary_stream(
        f"/{SERVICE_NAME}/ReceiveMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.ReceiveMessageResponse.FromString,
    )

    def frames(group: str, expression: str) -> list[Any]:
        request = pb.ReceiveMessageRequest(
            group=pb.Resource(name=group),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
            filter_expression=pb.FilterExpression(type=pb.SQL, expression=expression),
            batch_size=32,
        )
        request.invisible_duration.FromSeconds(30)
        request.long_polling_timeout.FromSeconds(0)
        return list(receive(request, metadata=[("x-mq-client-id", "sql@1")], timeout=10))

    try:
        got = frames("GID_SQL5", "a IS NULL OR a BETWEEN 4 AND 6")
        bodies = [f.message.body for f in got if f.WhichOneof("content") == "message"]
        assert bodies == [b"m2", b"m4"]
        [status] = [f.status for f in frames("GID_SQL_BAD", "a IN (") if f.HasField("status")]
        assert status.code == pb.ILLEGAL_FILTER_EXPRESSION
    finally:
        channel.close()


def test_a_held_4x_pull_waits_past_arrivals_its_filter_refuses(
    server: servers.ServerProcess,
) -> None:
    import threading
    import time

    broker = server.addresses()[1]
    end = len(MESSAGES)
    header = dataclasses.replace(
        PullMessageRequestHeader.immediate("GID_SQL_HOLD", TOPIC, 0, end, 32, "region = 'apac'"),
        expression_type="SQL92",
        sys_flag=int(PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND),
        suspend_timeout_millis=8000,
    )
    answers: list[Any] = []
    pull = threading.Thread(
        target=lambda: answers.append(
            remoting_call(broker, RequestCode.PULL_MESSAGE, header.to_ext())
        )
    )
    pull.start()
    time.sleep(0.5)
    other = send_raw(broker, TOPIC, b"m6", properties=encode_properties({"region": "eu"}))
    assert other.code == ResponseCode.SUCCESS
    time.sleep(0.5)
    assert answers == []
    wanted = send_raw(broker, TOPIC, b"m7", properties=encode_properties({"region": "apac"}))
    assert wanted.code == ResponseCode.SUCCESS
    pull.join(10)
    [answer] = answers
    assert answer.code == ResponseCode.SUCCESS
    assert [m.body for m in _core.decode_messages(answer.body)] == [b"m7"]
    assert answer.ext_fields["nextBeginOffset"] == str(end + 2)
