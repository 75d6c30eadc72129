"""Request-reply (RocketMQ 4.6+'s RPC messages) against a real ``pyrmq serve``: a request gets
the reply its consumer sends back, one nobody answers times out with nothing left waiting,
concurrent requests each get their own reply, and the broker refuses replies it cannot push
(a requester gone, no requester named, malformed frames) with clear answers while it keeps
serving.

Requesters, repliers and consumers run in this process, each with its own client instance;
"raw" clients are bare remoting connections that speak the wire protocol themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import eventually, fast_config, pull_head, remoting_call, run, send_raw
from tests.integration.client_cluster import client_cluster

from pyrmq.client.api import ClientAPI
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.instance import ClientConfig
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.request import create_reply_message, get_reply_to_client
from pyrmq.errors import (
    BrokerError,
    ClientStateError,
    MessageIllegalError,
    RequestTimeoutError,
    SendError,
)
from pyrmq.properties import (
    CLUSTER,
    CORRELATION_ID,
    MSG_TYPE,
    PUSH_REPLY_TIME,
    REPLY_TO_CLIENT,
    TTL,
    encode_properties,
)
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    PullMessageRequestHeader,
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
)
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED, RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

BROKER_NAME = "broker-a"
REPLY_TOPIC = "DefaultCluster_REPLY_TOPIC"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("rpc")) as s:
        yield s


def _topic(server: ServerProcess, name: str, queue_nums: int = 2) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    create_topic(broker, name, queue_nums)
    return namesrv, broker


async def _stored_replies(broker: str, from_offset: int) -> list[MessageExt]:
    """The replies stored in the reply topic from ``from_offset`` on (up to 32)."""
    remoting = RemotingClient()
    try:
        header = PullMessageRequestHeader.immediate("CG_INSPECT", REPLY_TOPIC, 0, from_offset)
        return (await ClientAPI(remoting).pull(broker, BROKER_NAME, header, 5.0)).messages
    finally:
        await remoting.close()


async def _reply_offset(broker: str) -> int:
    remoting = RemotingClient()
    try:
        return await ClientAPI(remoting).max_offset(
            broker, MessageQueue(REPLY_TOPIC, BROKER_NAME, 0)
        )
    finally:
        await remoting.close()


@contextlib.asynccontextmanager
async def _replying(
    namesrv: str,
    topic: str,
    name: str,
    answer: Callable[[MessageExt], bytes] = lambda m: b"re:" + m.body,
    **replier_options: Any,
) -> AsyncIterator[list[MessageExt]]:
    """A push consumer of ``topic`` whose listener replies to each request with ``answer``
    through its own producer (made with ``replier_options``); yields the messages it got.
    A plain message (no requester) gets no reply."""
    got: list[MessageExt] = []
    replier = Producer(
        f"PG_{name}", client_config=fast_config(namesrv, instance_name=name), **replier_options
    )

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for msg in msgs:
            got.append(msg)
            if get_reply_to_client(msg) is None:
                continue
            result = await replier.send(create_reply_message(msg, answer(msg)))
            assert result.status is SendStatus.OK
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        f"CG_{name}",
        client_config=fast_config(namesrv, instance_name=f"{name}-consumer"),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(topic, "*", listener)
    async with replier, consumer:
        yield got


def test_a_request_gets_the_reply_its_consumer_sends(server: ServerProcess) -> None:
    namesrv, broker = _topic(server, "RpcEcho")

    async def scenario() -> None:
        stored_before = await _reply_offset(broker)
        config = fast_config(namesrv, instance_name="requester")
        async with (
            _replying(namesrv, "RpcEcho", "echo") as got,
            Producer("PG_REQUESTER", client_config=config) as requester,
        ):
            request = Message("RpcEcho", b"ping")
            started = time.monotonic()
            reply = await requester.request(request, timeout_s=15)
            elapsed = time.monotonic() - started
            client_id = requester.instance.client_id

            # The request as its consumer got it: named for the reply, and for its cluster by
            # the broker.
            [seen] = got
            assert seen.body == b"ping"
            correlation_id = seen.properties[CORRELATION_ID]
            assert seen.properties[REPLY_TO_CLIENT] == client_id
            assert seen.properties[TTL] == "15000"
            assert seen.properties[CLUSTER] == "DefaultCluster"
            assert request.properties[CORRELATION_ID] == correlation_id

            assert reply.body == b"re:ping"
            assert reply.topic == REPLY_TOPIC
            assert reply.correlation_id == correlation_id
            assert reply.properties[MSG_TYPE] == "reply"
            assert int(reply.properties[PUSH_REPLY_TIME]) > 0
            assert reply.msg_id
            assert reply.store_host == broker
            assert reply.store_timestamp >= reply.born_timestamp > 0
            assert elapsed < 10
            assert len(requester.instance.requests) == 0

            # A second request to another queue, chosen by a selector, is answered as well.
            second = Message("RpcEcho", b"second")
            chosen = await requester.request_orderly(
                second, 1, lambda qs, m, arg: qs[arg], timeout_s=15
            )
            assert chosen.body == b"re:second"
            assert got[-1].queue_id == 1
            assert chosen.correlation_id != correlation_id

        # Each reply was also stored in the cluster's reply topic (storeReplyMessageEnable).
        assert await _reply_offset(broker) == stored_before + 2
        stored = await _stored_replies(broker, stored_before)
        assert [m.body for m in stored] == [b"re:ping", b"re:second"]
        assert stored[0].properties[CORRELATION_ID] == correlation_id

    run(scenario)


def test_a_request_nobody_answers_times_out_and_leaves_nothing_waiting(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    namesrv, broker = _topic(server, "RpcNobody", 1)

    async def scenario() -> None:
        config = fast_config(namesrv, instance_name="lonely")
        async with Producer("PG_LONELY", client_config=config) as requester:
            waiting = requester.instance.requests
            started = time.monotonic()
            with pytest.raises(RequestTimeoutError, match=r"no reply came within 0\.5 s"):
                await requester.request(Message("RpcNobody", b"anyone?"), timeout_s=0.5)
            assert 0.5 <= time.monotonic() - started < 3.0
            assert len(waiting) == 0

            # A reply that comes once nobody waits is taken (the replier hears SUCCESS once the
            # requester took the push) and dropped.
            [request] = (await pull_head(broker, BROKER_NAME, "RpcNobody", 0)).messages
            correlation_id = request.properties[CORRELATION_ID]
            async with Producer("PG_LATE", client_config=fast_config(namesrv)) as late:
                result = await late.send(create_reply_message(request, b"too late"))
            assert result.status is SendStatus.OK
            dropped = [
                r.getMessage()
                for r in caplog.records
                if "matches no waiting request" in r.getMessage()
            ]
            assert len(dropped) == 1
            assert f"correlation_id={correlation_id} " in dropped[0]
            assert len(waiting) == 0

            # Shutting down fails the requests still waiting at once.
            pending = asyncio.ensure_future(
                requester.request(Message("RpcNobody", b"still there?"), timeout_s=30)
            )
            await eventually(lambda: len(waiting) == 1, 10.0, "the request waits")
            started = time.monotonic()
            await requester.shutdown()
            with pytest.raises(ClientStateError, match="shut down before the reply came"):
                await pending
            assert time.monotonic() - started < 5.0
            assert len(waiting) == 0

    with caplog.at_level(logging.WARNING, "pyrmq.client.instance"):
        run(scenario)


def test_a_request_to_a_chosen_queue_is_answered(server: ServerProcess) -> None:
    namesrv, _ = _topic(server, "RpcQueue", 2)

    async def scenario() -> None:
        config = fast_config(namesrv, instance_name="queue-requester")
        async with (
            _replying(namesrv, "RpcQueue", "queue") as got,
            Producer("PG_QUEUE_REQUESTER", client_config=config) as requester,
        ):
            for queue_id in (1, 0):
                mq = MessageQueue("RpcQueue", BROKER_NAME, queue_id)
                body = f"to {queue_id}".encode()
                reply = await requester.request(Message("RpcQueue", body), timeout_s=15, queue=mq)
                assert reply.body == b"re:" + body
                assert (got[-1].body, got[-1].queue_id) == (body, queue_id)
            with pytest.raises(MessageIllegalError, match="is not the queue's"):
                await requester.request(Message("RpcOther", b"x"), timeout_s=15, queue=mq)
            assert len(requester.instance.requests) == 0

    run(scenario)


def test_a_compressed_reply_arrives_inflated(server: ServerProcess) -> None:
    namesrv, broker = _topic(server, "RpcZip", 1)
    body = bytes(range(256)) * 64

    async def scenario() -> None:
        stored_before = await _reply_offset(broker)
        config = fast_config(namesrv, instance_name="zip-requester")
        async with (
            _replying(namesrv, "RpcZip", "zip", lambda m: body, compress_over=1024),
            Producer("PG_ZIP_REQUESTER", client_config=config) as requester,
        ):
            reply = await requester.request(Message("RpcZip", b"big?"), timeout_s=15)
        assert reply.sys_flag & SYSFLAG_COMPRESSED
        assert reply.body == body
        [stored] = await _stored_replies(broker, stored_before)
        assert stored.body == body

    run(scenario)


def test_requesters_are_found_for_replies_with_rocketmqs_heartbeat_interval(
    server: ServerProcess,
) -> None:
    """The broker finds a requester by its producer heartbeats, 30 s apart by default. A
    producer that sent to a topic (so that its route is known) and then requests on it is
    answered, whether it sends at once or once the instance's first heartbeat round is past."""
    namesrv, _ = _topic(server, "RpcBeats", 1)

    async def scenario() -> None:
        async with _replying(namesrv, "RpcBeats", "beats"):
            for name, pause_s in (("beats-now", 0.0), ("beats-later", 1.5)):
                config = ClientConfig(namesrv_addr=namesrv, instance_name=name)
                async with Producer(f"PG_{name}", client_config=config) as requester:
                    await asyncio.sleep(pause_s)
                    await requester.send(Message("RpcBeats", b"plain"))
                    started = time.monotonic()
                    reply = await requester.request(Message("RpcBeats", b"q"), timeout_s=10)
                    assert reply.body == b"re:q"
                    assert time.monotonic() - started < 5

    run(scenario)


def test_a_producer_joining_a_running_instance_is_known_for_replies_at_once(
    server: ServerProcess,
) -> None:
    """A producer added to a client instance whose consumer already subscribes the topic (its
    route known, its heartbeats naming no producer) introduces itself when it starts."""
    namesrv, broker = _topic(server, "RpcJoin", 1)

    async def scenario() -> None:
        config = ClientConfig(namesrv_addr=namesrv, instance_name="joined")
        consumer = PushConsumer("CG_JOINED", client_config=config)
        consumer.subscribe("RpcJoin", "*", lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
        async with _replying(namesrv, "RpcJoin", "join"), consumer:
            await asyncio.sleep(1.5)  # past the instance's first heartbeat round
            async with Producer("PG_JOINED", client_config=config) as requester:
                assert requester.instance is consumer.instance
                # Known before any request: the broker pushes it a reply nobody asked for.
                ext = _reply_ext(**{REPLY_TO_CLIENT: requester.instance.client_id})
                raw = RemotingClient()
                try:
                    command = RemotingCommand.request(RequestCode.SEND_REPLY_MESSAGE_V2, ext, b"?")
                    pushed = await raw.invoke(broker, command, 15.0)
                finally:
                    await raw.close()
                assert pushed.code == ResponseCode.SUCCESS, pushed.remark

                reply = await requester.request(Message("RpcJoin", b"joined"), timeout_s=10)
                assert reply.body == b"re:joined"

    run(scenario)


def test_a_request_timeout_bounds_its_route_lookup_and_heartbeat(server: ServerProcess) -> None:
    """Before its send, a request looks its topic's route up and heartbeats the brokers it may
    go to; a name server or a broker that takes connections and never answers holds that up,
    and the request's timeout still ends it."""
    namesrv, _ = _topic(server, "RpcHung", 1)
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    hung_addr = f"127.0.0.1:{hung.getsockname()[1]}"

    async def timed_out(requester: Producer) -> None:
        started = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="before its send completed"):
            await requester.request(Message("RpcHung", b"anyone?"), timeout_s=0.5)
        assert time.monotonic() - started < 1.5
        assert len(requester.instance.requests) == 0

    async def scenario() -> None:
        config = fast_config(hung_addr, instance_name="hung-namesrv")
        async with Producer("PG_HUNG_NAMESRV", client_config=config) as requester:
            await timed_out(requester)

        config = fast_config(namesrv, instance_name="hung-broker")
        async with Producer("PG_HUNG_BROKER", client_config=config) as requester:
            # The route known, and the broker's address then hung, before any heartbeat.
            await requester.fetch_publish_queues("RpcHung")
            addrs = requester.instance.broker_addrs
            real = addrs[BROKER_NAME]
            addrs[BROKER_NAME] = {0: hung_addr}
            try:
                await timed_out(requester)
            finally:
                addrs[BROKER_NAME] = real

    try:
        run(scenario)
    finally:
        hung.close()


def test_a_refused_reply_is_tried_once_on_each_other_broker(tmp_path: Path) -> None:
    """A reply to a requester no broker knows is refused (SYSTEM_ERROR) by each broker, which
    stores it all the same: it moves to another broker, never back to one that refused it."""
    request = Message(
        "AnyTopic",
        b"q",
        properties={
            CLUSTER: "DefaultCluster",
            CORRELATION_ID: "c-gone",
            REPLY_TO_CLIENT: "10.9.9.9@gone",
            TTL: "3000",
        },
    )

    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            config = fast_config(c.namesrv_addr, instance_name="refused")
            async with Producer("PG_REFUSED", client_config=config) as replier:
                with pytest.raises(SendError, match=r"after 2 attempt\(s\)") as refused:
                    await replier.send(create_reply_message(request, b"nobody home"))
            cause = refused.value.__cause__
            assert isinstance(cause, BrokerError)
            assert cause.code == ResponseCode.SYSTEM_ERROR
            assert [len(c.stored(REPLY_TOPIC, brokers=[b])) for b in (0, 1)] == [1, 1]

    run(scenario)


def test_concurrent_requests_each_get_their_own_reply(server: ServerProcess) -> None:
    namesrv, _ = _topic(server, "RpcMany", 4)
    count = 40

    async def scenario() -> None:
        requesters = [
            Producer(f"PG_MANY_{i}", client_config=fast_config(namesrv, instance_name=f"many{i}"))
            for i in range(2)
        ]
        async with _replying(namesrv, "RpcMany", "many") as got:
            for p in requesters:
                await p.start()
            try:
                msgs = [Message("RpcMany", f"q{i}".encode()) for i in range(count)]
                replies = await asyncio.gather(
                    *(requesters[i % 2].request(m, timeout_s=20) for i, m in enumerate(msgs))
                )
                assert [r.body for r in replies] == [f"re:q{i}".encode() for i in range(count)]
                ids = [m.properties[CORRELATION_ID] for m in msgs]
                assert [r.correlation_id for r in replies] == ids
                assert len(set(ids)) == count
                # Each reply went back to the client that asked.
                for i, (m, r) in enumerate(zip(msgs, replies, strict=True)):
                    assert r.properties[REPLY_TO_CLIENT] == requesters[i % 2].instance.client_id
                    assert m.properties[REPLY_TO_CLIENT] == r.properties[REPLY_TO_CLIENT]
                assert len(got) == count
                assert all(len(p.instance.requests) == 0 for p in requesters)
            finally:
                for p in requesters:
                    await p.shutdown()

    run(scenario, 90)


def test_a_reply_for_a_requester_that_is_gone_is_refused_and_the_broker_serves_on(
    server: ServerProcess,
) -> None:
    namesrv, broker = _topic(server, "RpcGone", 1)
    create_topic(broker, "RpcGoneAfter", 1)

    async def scenario() -> None:
        config = fast_config(namesrv, instance_name="gone")
        async with Producer("PG_GONE", client_config=config) as requester:
            gone_id = requester.instance.client_id
            with pytest.raises(RequestTimeoutError):
                await requester.request(Message("RpcGone", b"bye"), timeout_s=0.5)
        # The requester shut down (and unregistered): its reply has nowhere to go.
        [request] = (await pull_head(broker, BROKER_NAME, "RpcGone", 0)).messages
        assert request.properties[REPLY_TO_CLIENT] == gone_id
        stored_before = await _reply_offset(broker)
        async with Producer("PG_LATE_REPLIER", client_config=fast_config(namesrv)) as replier:
            with pytest.raises(SendError) as refused:
                await replier.send(
                    create_reply_message(request, b"nobody home"),
                    queue=MessageQueue(REPLY_TOPIC, BROKER_NAME, 0),
                )
            cause = refused.value.__cause__
            assert isinstance(cause, BrokerError)
            assert cause.code == ResponseCode.SYSTEM_ERROR
            assert cause.remark == f"push reply message fail, channel of <{gone_id}> not found."
            # As RocketMQ: stored all the same.
            assert await _reply_offset(broker) == stored_before + 1

            # The broker serves on: a request with a replier is answered.
            async with (
                _replying(namesrv, "RpcGoneAfter", "after") as got,
                Producer(
                    "PG_AFTER", client_config=fast_config(namesrv, instance_name="after")
                ) as again,
            ):
                reply = await again.request(Message("RpcGoneAfter", b"hi"), timeout_s=15)
                assert reply.body == b"re:hi"
                assert [m.body for m in got] == [b"hi"]
        assert server.proc.poll() is None

    run(scenario)


def _reply_ext(
    topic: str = REPLY_TOPIC, *, queue_id: int = 0, batch: bool = False, **props: str
) -> dict[str, str]:
    return SendMessageRequestHeader(
        producer_group="PG_RAW_REPLIER",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=0,
        born_timestamp=int(time.time() * 1000),
        flag=7,
        properties=encode_properties({MSG_TYPE: "reply", CORRELATION_ID: "c-raw", **props}),
        batch=batch,
    ).to_ext_v2()


def test_a_pushed_reply_carries_rocketmq_fields_and_the_requester_answer_decides(
    server: ServerProcess,
) -> None:
    """A bare client registers as a producer and answers the broker's pushes itself: the push
    is RocketMQ's ReplyMessageRequestHeader with the reply as its body, and the replier hears
    SUCCESS, the client's refusal, or "not found" once the client's connection is gone.
    ``storeReplyMessageEnable`` (changed while the broker runs) decides whether a reply is
    also stored."""
    _, broker = server.addresses()
    client_id = "10.1.1.1@raw"

    async def scenario() -> None:
        requester = RemotingClient()
        replier = RemotingClient()
        pushes: list[RemotingCommand] = []
        answer = [ResponseCode.SUCCESS]

        async def on_push(cmd: RemotingCommand, addr: str) -> RemotingCommand:
            pushes.append(cmd)
            return RemotingCommand.response_to(cmd, answer[0], remark="not mine")

        requester.server_request_handlers[RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT] = on_push

        async def call(
            client: RemotingClient, code: int, ext: dict[str, str], body: bytes = b""
        ) -> RemotingCommand:
            return await client.invoke(broker, RemotingCommand.request(code, ext, body), 15.0)

        async def reply(body: bytes) -> RemotingCommand:
            ext = _reply_ext(**{REPLY_TO_CLIENT: client_id})
            return await call(replier, RequestCode.SEND_REPLY_MESSAGE_V2, ext, body)

        async def set_store(enabled: bool) -> None:
            line = f"storeReplyMessageEnable={str(enabled).lower()}\n".encode()
            done = await call(replier, RequestCode.UPDATE_BROKER_CONFIG, {}, line)
            assert done.code == ResponseCode.SUCCESS, done.remark

        try:
            heartbeat = {"clientID": client_id, "producerDataSet": [{"groupName": "PG_RAW"}]}
            body = json.dumps(heartbeat).encode()
            assert (await call(requester, RequestCode.HEART_BEAT, {}, body)).code == 0

            stored_before = await _reply_offset(broker)
            pushed = await reply(b"answer-1")
            assert pushed.code == ResponseCode.SUCCESS, pushed.remark
            [push] = pushes
            header = ReplyMessageRequestHeader.from_ext(push.ext_fields)
            assert push.body == b"answer-1"
            assert (header.topic, header.producer_group, header.flag) == (
                REPLY_TOPIC,
                "PG_RAW_REPLIER",
                7,
            )
            assert header.store_host == broker
            assert header.born_host.startswith("127.0.0.1:")
            assert header.store_timestamp > 0
            assert f"{PUSH_REPLY_TIME}\x01" in header.properties
            assert f"{CORRELATION_ID}\x01c-raw" in header.properties
            # Stored: the answer names where.
            assert await _reply_offset(broker) == stored_before + 1
            assert pushed.ext_fields["queueOffset"] == str(stored_before)
            assert pushed.ext_fields["msgId"] != "0"

            # Not stored once storeReplyMessageEnable is off: RocketMQ's placeholder answer.
            await set_store(False)
            try:
                unstored = await reply(b"answer-2")
            finally:
                await set_store(True)
            assert unstored.code == ResponseCode.SUCCESS
            assert (unstored.ext_fields["msgId"], unstored.ext_fields["queueOffset"]) == ("0", "0")
            assert await _reply_offset(broker) == stored_before + 1

            # The requester refuses: so does the broker, saying so.
            answer[0] = ResponseCode.SYSTEM_ERROR
            refused = await reply(b"answer-3")
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert refused.remark is not None
            assert f"push reply message to <{client_id}> fail" in refused.remark
            assert len(pushes) == 3

            # The requester's connection closes: its replies are refused at once, as not
            # found once the broker has seen the close.
            await requester.close()
            not_found = f"push reply message fail, channel of <{client_id}> not found."
            gone = await reply(b"answer-4")
            for _ in range(100):
                assert gone.code == ResponseCode.SYSTEM_ERROR, gone.remark
                if gone.remark == not_found:
                    break
                await asyncio.sleep(0.05)
                gone = await reply(b"answer-4")
            assert gone.remark == not_found
            assert len(pushes) == 3
        finally:
            await requester.close()
            await replier.close()

    run(scenario)


@pytest.mark.parametrize(
    ("code", "ext", "answer", "remark"),
    [
        (RequestCode.SEND_REPLY_MESSAGE, {}, ResponseCode.SYSTEM_ERROR,
         "SendMessageRequestHeader: missing required field 'producerGroup'"),
        (RequestCode.SEND_REPLY_MESSAGE_V2, {**_reply_ext(), "e": "zero"},
         ResponseCode.SYSTEM_ERROR, "field 'e' (queueId) is not an int32: 'zero'"),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext(), ResponseCode.SYSTEM_ERROR,
         "reply message properties[REPLY_TO_CLIENT] is null"),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext(**{REPLY_TO_CLIENT: "nobody@0"}),
         ResponseCode.SYSTEM_ERROR, "push reply message fail, channel of <nobody@0> not found."),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext("SCHEDULE_TOPIC_XXXX"),
         ResponseCode.NO_PERMISSION, "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext("bad topic"), ResponseCode.MESSAGE_ILLEGAL,
         "bad topic"),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext(queue_id=5), ResponseCode.SYSTEM_ERROR,
         "request queueId[5] is illegal"),
        (RequestCode.SEND_REPLY_MESSAGE_V2, _reply_ext(batch=True), ResponseCode.MESSAGE_ILLEGAL,
         "a reply message cannot be a batch"),
    ],
    ids=["no-header", "bad-int", "no-reply-to", "unknown-client", "system-topic", "bad-topic",
         "bad-queue", "batch"],
)  # fmt: skip
def test_malformed_replies_get_clear_errors_and_the_broker_serves_on(
    server: ServerProcess, code: int, ext: dict[str, str], answer: int, remark: str
) -> None:
    _, broker = server.addresses()

    response = remoting_call(broker, code, ext, b"body")

    assert response.code == answer
    assert response.remark is not None
    assert remark in response.remark
    assert send_raw(broker, REPLY_TOPIC, b"a plain send").code == ResponseCode.SUCCESS
    assert server.proc.poll() is None


def test_the_reply_topic_is_a_topic_of_the_cluster_from_the_start(server: ServerProcess) -> None:
    namesrv, _ = server.addresses()

    async def scenario() -> None:
        remoting = RemotingClient()
        try:
            route = await ClientAPI(remoting).get_route(namesrv, REPLY_TOPIC)
        finally:
            await remoting.close()
        assert route is not None
        [queues] = route.queues
        assert (queues.broker_name, queues.read_queue_nums, queues.write_queue_nums) == (
            BROKER_NAME,
            1,
            1,
        )

    run(scenario)
