"""Requests an admin tool makes of consumers through a real ``pyrmq serve``: one message
consumed directly by one consumer (``mqadmin queryMsgById -g -d``, CONSUME_MESSAGE_DIRECTLY)
and the consumers' own offsets (``mqadmin getConsumerStatus``,
INVOKE_BROKER_TO_GET_CONSUMER_STATUS), through :class:`pyrmq.client.admin.Admin` and
``pyrmq admin``; with pyrmq's push consumers (asyncio and blocking, concurrent and orderly)
and raw clients that do not answer or answer an error."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from tests import helpers
from tests.compat.servers import create_topic, serving
from tests.helpers import committed_offset, consumer_heartbeat, fast_config, pyrmq_admin

from pyrmq.client import blocking
from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI, PullStatus
from pyrmq.client.consume_directly import CMResult
from pyrmq.client.consume_orderly import ConsumeOrderlyStatus
from pyrmq.client.consume_service import ConsumeStatus
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import BrokerError, NoRouteError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run

BROKER_WAIT_S = 5.0
"""How long the broker waits for a consumer's answer."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture
def addrs(server: Any) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    return namesrv, broker


async def send(namesrv: str, topic: str, bodies: list[str]) -> list[SendResult]:
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        return [await producer.send(Message(topic, body)) for body in bodies]


async def commit_all(broker: str, group: str, sent: list[SendResult]) -> dict[MessageQueue, int]:
    """Commits ``group``'s offsets past every message sent, so that a consumer starting now
    is delivered none of them; returns the offsets."""
    ends: dict[MessageQueue, int] = {}
    for r in sent:
        assert r.message_queue is not None
        ends[r.message_queue] = max(ends.get(r.message_queue, 0), r.queue_offset + 1)
    remoting = RemotingClient()
    try:
        for mq, offset in ends.items():
            await ClientAPI(remoting).update_consumer_offset(
                broker, group, mq, offset, oneway=False
            )
    finally:
        await remoting.close()
    return ends


async def committed(broker: str, group: str, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
    return {mq: o for mq in mqs if (o := await committed_offset(broker, group, mq)) is not None}


async def registered(admin: Admin, broker: str, group: str, count: int = 1) -> None:
    """Waits until ``count`` consumers of ``group`` have sent their heartbeats."""
    remoting = RemotingClient()
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                if len(await ClientAPI(remoting).consumer_ids(broker, group)) >= count:
                    return
            except BrokerError:
                pass
            assert time.monotonic() < deadline, f"{group} never had {count} consumer(s)"
            await asyncio.sleep(0.05)
    finally:
        await remoting.close()


@contextlib.asynccontextmanager
async def raw_consumer(
    broker: str,
    client_id: str,
    group: str,
    topic: str,
    handlers: dict[int, Callable[[RemotingCommand, str], Awaitable[RemotingCommand | None]]],
) -> AsyncIterator[None]:
    """A connection that heartbeats as a consumer of ``group`` and answers the broker's
    requests with ``handlers`` only (others: REQUEST_CODE_NOT_SUPPORTED)."""
    remoting = RemotingClient()
    remoting.server_request_handlers.update(handlers)
    try:
        beat = RemotingCommand.request(
            RequestCode.HEART_BEAT, body=consumer_heartbeat(client_id, group, topic)
        )
        answer = await remoting.invoke(broker, beat, 5.0)
        assert answer.code == ResponseCode.SUCCESS
        yield
    finally:
        await remoting.close()


async def never_answer(request: RemotingCommand, addr: str) -> RemotingCommand | None:
    await asyncio.sleep(60)
    return None


# --- CONSUME_MESSAGE_DIRECTLY -------------------------------------------------------------


def test_a_push_consumer_runs_its_listener_on_a_message_directly_without_committing(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicDirect", "CG_DIRECT"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        sent = await send(namesrv, topic, ["ok", "later", "boom", "none", "slow"])
        ends = await commit_all(broker, group, sent)
        seen: list[tuple[bytes, str, MessageQueue]] = []

        def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeStatus | None:
            assert len(msgs) == 1
            body = msgs[0].body
            seen.append((body, msgs[0].topic, ctx.message_queue))
            if body == b"later":
                return ConsumeStatus.RECONSUME_LATER
            if body == b"boom":
                raise RuntimeError("listener blew up")
            if body == b"none":
                return None
            if body == b"slow":
                time.sleep(0.2)
            return ConsumeStatus.CONSUME_SUCCESS

        consumer = PushConsumer(group, client_config=fast_config(namesrv))
        consumer.subscribe(topic, "*", listener)
        async with Admin(namesrv) as admin:
            await consumer.start()
            try:
                await registered(admin, broker, group)
                client_id = consumer.instance.client_id
                results = [
                    await admin.consume_message_directly(group, client_id, r.offset_msg_id)
                    for r in sent
                ]
                # Nothing of the normal flow: no delivery, no send-back redelivered.
                await asyncio.sleep(1.5)
                assert await committed(broker, group, list(ends)) == ends
                assert consumer.offset_store.offsets_of(topic) == ends
            finally:
                await consumer.shutdown()
        got = dict(zip(["ok", "later", "boom", "none", "slow"], results, strict=True))
        assert got["ok"].consume_result is CMResult.CR_SUCCESS
        assert (got["ok"].order, got["ok"].auto_commit, got["ok"].remark) == (False, True, None)
        assert got["later"].consume_result is CMResult.CR_LATER
        assert got["boom"].consume_result is CMResult.CR_THROW_EXCEPTION
        assert got["boom"].remark == "RuntimeError: listener blew up"
        assert got["none"].consume_result is CMResult.CR_RETURN_NULL
        assert got["slow"].consume_result is CMResult.CR_SUCCESS
        assert 200 <= got["slow"].spent_time_ms < 5000
        # Each once, as its producer sent it, with the queue it was stored in.
        assert [s[0] for s in seen] == [b"ok", b"later", b"boom", b"none", b"slow"]
        assert {s[1] for s in seen} == {topic}
        assert [s[2] for s in seen] == [r.message_queue for r in sent]
        # A failed direct consumption is not sent back to the retry topic.
        broker_name = sent[0].message_queue.broker_name  # type: ignore[union-attr]
        retry = await helpers.pull_head(broker, broker_name, f"%RETRY%{group}", 0)
        assert retry.status is not PullStatus.FOUND

    run(scenario)


def test_an_orderly_consumer_with_a_coroutine_listener_consumes_directly(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicDirectOrderly", "CG_DIRECT_ORDERLY"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        sent = await send(namesrv, topic, ["first", "again"])
        ends = await commit_all(broker, group, sent)
        seen: list[bytes] = []

        async def listener(msgs: list[MessageExt], ctx: Any) -> ConsumeOrderlyStatus:
            seen.append(msgs[0].body)
            await asyncio.sleep(0.05)
            if msgs[0].body == b"again":
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        consumer = PushConsumer(group, client_config=fast_config(namesrv), orderly=True)
        consumer.subscribe(topic, "*", listener)
        async with Admin(namesrv) as admin:
            await consumer.start()
            try:
                await registered(admin, broker, group)
                cid = consumer.instance.client_id
                first, again = [
                    await admin.consume_message_directly(group, cid, r.offset_msg_id) for r in sent
                ]
                # A suspended batch would come back after 1 s in the normal flow.
                await asyncio.sleep(1.5)
                assert await committed(broker, group, list(ends)) == ends
            finally:
                await consumer.shutdown()
        assert (first.order, first.consume_result) == (True, CMResult.CR_SUCCESS)
        assert (again.order, again.consume_result) == (True, CMResult.CR_LATER)
        assert first.spent_time_ms >= 50
        assert seen == [b"first", b"again"]

    run(scenario)


def test_a_blocking_push_consumer_consumes_directly_and_the_command_prints_the_result(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicDirectBlocking", "CG_DIRECT_BLOCKING"
    create_topic(broker, topic, 1)

    async def prepare() -> list[SendResult]:
        sent = await send(namesrv, topic, ["hello", "fail"])
        await commit_all(broker, group, sent)
        return sent

    sent = asyncio.run(prepare())
    seen: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def callback(msg: Any) -> ConsumeStatus:
        with lock:
            seen.append((msg.topic, msg.body))
        if msg.body == b"fail":
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = blocking.PushConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.set_instance_name("direct-blocking")
    consumer.subscribe(topic, callback)
    consumer.start()
    try:
        inner = consumer._async
        assert inner is not None
        client_id = inner.instance.client_id

        async def wait_registered() -> None:
            async with Admin(namesrv) as admin:
                await registered(admin, broker, group)

        asyncio.run(wait_registered())
        ok = pyrmq_admin(
            "query-msg-by-id", "-n", namesrv, "-i", sent[0].offset_msg_id, "-g", group,
            "-d", client_id,
        )  # fmt: skip
        later = pyrmq_admin(
            "query-msg-by-id", "-n", namesrv, "-i", sent[1].offset_msg_id, "-g", group,
            "-d", client_id,
        )  # fmt: skip
    finally:
        consumer.shutdown()
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(
        "ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
        "remark=None, spentTimeMills="
    ), ok.stdout
    assert later.returncode == 0, later.stderr
    assert "consumeResult=CR_LATER" in later.stdout
    assert seen == [(topic, b"hello"), (topic, b"fail")]

    # -g without -d (and the other way round) is a usage error; without both, a plain query.
    half = pyrmq_admin("query-msg-by-id", "-n", namesrv, "-i", sent[0].offset_msg_id, "-g", group)
    assert half.returncode == 2
    assert "go together" in half.stderr
    gone = pyrmq_admin(
        "query-msg-by-id", "-n", namesrv, "-i", sent[0].offset_msg_id, "-g", group,
        "-d", client_id,
    )  # fmt: skip
    assert gone.returncode == 1
    assert f"The Consumer <{group}> <{client_id}> not online" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_consuming_directly_fails_clearly_for_a_client_not_online_or_no_message(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicDirectErrors", "CG_DIRECT_ERRORS"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        [sent] = await send(namesrv, topic, ["x"])
        await commit_all(broker, group, [sent])
        consumer = PushConsumer(group, client_config=fast_config(namesrv))
        consumer.subscribe(topic, "*", lambda msgs, ctx: None)
        async with Admin(namesrv) as admin:
            with pytest.raises(BrokerError, match=r"The Consumer <CG_DIRECT_ERRORS> <nobody> not"):
                await admin.consume_message_directly(group, "nobody", sent.offset_msg_id)
            await consumer.start()
            try:
                await registered(admin, broker, group)
                cid = consumer.instance.client_id
                with pytest.raises(ValueError, match="not an offset message id"):
                    await admin.consume_message_directly(group, cid, "nonsense")
                # The broker's address with an offset past its CommitLog's end.
                missing = sent.offset_msg_id[:16] + f"{1 << 40:016X}"
                with pytest.raises(BrokerError, match="can not find message by the offset") as e:
                    await admin.consume_message_directly(group, cid, missing)
                assert e.value.code == ResponseCode.SYSTEM_ERROR
                # The right client, asked for a group it does not consume for.
                with pytest.raises(BrokerError, match="not online"):
                    await admin.consume_message_directly("CG_OTHER", cid, sent.offset_msg_id)
            finally:
                await consumer.shutdown()

    run(scenario)


def test_the_broker_answers_for_a_consumer_that_does_not_answer_or_refuses(
    addrs: tuple[str, str],
) -> None:
    """A consumer that never answers costs the broker its bounded wait (CONSUME_MSG_TIMEOUT);
    one that does not know the request (as a client without the feature) or refuses it has
    its answer relayed."""
    namesrv, broker = addrs
    topic, group = "TopicDirectSilent", "CG_DIRECT_SILENT"
    create_topic(broker, topic, 1)

    async def refuse(request: RemotingCommand, addr: str) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark="no way")

    async def scenario() -> None:
        [sent] = await send(namesrv, topic, ["x"])
        async with (
            Admin(namesrv, timeout_s=4.0) as admin,
            raw_consumer(
                broker,
                "silent@1",
                group,
                topic,
                {
                    RequestCode.CONSUME_MESSAGE_DIRECTLY: never_answer,
                    RequestCode.GET_CONSUMER_RUNNING_INFO: never_answer,
                },
            ),
            raw_consumer(broker, "unaware@1", group, topic, {}),
            raw_consumer(
                broker, "refusing@1", group, topic, {RequestCode.CONSUME_MESSAGE_DIRECTLY: refuse}
            ),
        ):
            began = time.monotonic()
            with pytest.raises(
                BrokerError, match=r"consumer <CG_DIRECT_SILENT> <silent@1> Timeout"
            ):
                await admin.consume_message_directly(group, "silent@1", sent.offset_msg_id)
            waited = time.monotonic() - began
            assert BROKER_WAIT_S - 0.5 <= waited < BROKER_WAIT_S + 3
            with pytest.raises(BrokerError) as unaware:
                await admin.consume_message_directly(group, "unaware@1", sent.offset_msg_id)
            assert unaware.value.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            with pytest.raises(BrokerError, match="no way") as refused:
                await admin.consume_message_directly(group, "refusing@1", sent.offset_msg_id)
            assert refused.value.code == ResponseCode.SYSTEM_ERROR
            # Its running info likewise (it was SYSTEM_ERROR; RocketMQ's callConsumer).
            remoting = RemotingClient()
            try:
                ask = RemotingCommand.request(
                    RequestCode.GET_CONSUMER_RUNNING_INFO,
                    {"consumerGroup": group, "clientId": "silent@1", "jstackEnable": "false"},
                )
                answer = await remoting.invoke(broker, ask, BROKER_WAIT_S + 5)
            finally:
                await remoting.close()
            assert answer.code == ResponseCode.CONSUME_MSG_TIMEOUT, answer.remark
            assert "consumer <CG_DIRECT_SILENT> <silent@1> Timeout" in (answer.remark or "")

    run(scenario)


# --- consumer status ----------------------------------------------------------------------


def test_consumer_status_gives_each_consumers_own_offsets(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicConsumerStatus", "CG_CONSUMER_STATUS"
    create_topic(broker, topic, 4)
    create_topic(broker, "TopicConsumerStatusOther", 1)

    async def scenario() -> None:
        consumed: list[bytes] = []
        consumers = [
            PushConsumer(
                group,
                client_config=fast_config(namesrv, instance_name=f"status{i}"),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            for i in range(2)
        ]
        for c in consumers:
            c.subscribe(topic, "*", lambda msgs, ctx: consumed.extend(m.body for m in msgs))
        async with Admin(namesrv) as admin:
            for c in consumers:
                await c.start()
            try:
                await registered(admin, broker, group, 2)
                sent = await send(namesrv, topic, [f"s{i}" for i in range(20)])
                ends: dict[MessageQueue, int] = {}
                for r in sent:
                    assert r.message_queue is not None
                    ends[r.message_queue] = max(ends.get(r.message_queue, 0), r.queue_offset + 1)

                def settled() -> bool:
                    held = [c.offset_store.offsets_of(topic) for c in consumers]
                    return (
                        len(consumed) == 20
                        and all(len(h) == 2 for h in held)
                        and {**held[0], **held[1]} == ends
                    )

                await helpers.eventually(settled, 30, "both consumers caught up")
                ids = [c.instance.client_id for c in consumers]
                status = await admin.consumer_status(group, topic)
                assert sorted(status) == sorted(ids)
                for c in consumers:
                    assert status[c.instance.client_id] == c.offset_store.offsets_of(topic)
                assert {**status[ids[0]], **status[ids[1]]} == ends
                # One consumer only, and a topic the group does not consume.
                assert await admin.consumer_status(group, topic, ids[1]) == {ids[1]: status[ids[1]]}
                # Several, as a list or comma-separated.
                assert await admin.consumer_status(group, topic, ids) == status
                both = await asyncio.to_thread(
                    pyrmq_admin,
                    *("get-consumer-status", "-n", namesrv, "-g", group, "-t", topic),
                    *("-i", f"{ids[1]}, {ids[0]}"),
                )
                assert both.returncode == 0, both.stderr
                rows = [line.split() for line in both.stdout.splitlines()[2:]]
                assert sorted((r[0], int(r[2]), int(r[3])) for r in rows) == sorted(
                    (cid, mq.queue_id, offset)
                    for cid, offsets in status.items()
                    for mq, offset in offsets.items()
                )
                assert {r[0] for r in rows} == set(ids)
                await send(namesrv, "TopicConsumerStatusOther", ["o"])
                other = await admin.consumer_status(group, "TopicConsumerStatusOther")
                assert other == {ids[0]: {}, ids[1]: {}}
                # Errors: no consumer online, a client id not in the group, no such topic.
                with pytest.raises(BrokerError, match=r"No Any Consumer online .*CG_NOBODY"):
                    await admin.consumer_status("CG_NOBODY", topic)
                with pytest.raises(BrokerError, match="<nobody@1> not online"):
                    await admin.consumer_status(group, topic, "nobody@1")
                with pytest.raises(NoRouteError):
                    await admin.consumer_status(group, "TopicConsumerStatusMissing")
            finally:
                for c in consumers:
                    await c.shutdown()

        shown = pyrmq_admin("get-consumer-status", "-n", namesrv, "-g", group, "-t", topic)
        assert shown.returncode == 1
        assert "No Any Consumer online" in shown.stderr

    run(scenario)


def test_consumer_status_leaves_out_consumers_that_do_not_answer(addrs: tuple[str, str]) -> None:
    """The broker asks every consumer at once and waits a bounded time: one that never
    answers, one that does not know the request and one that answers garbage are left out;
    the command prints the others."""
    namesrv, broker = addrs
    topic, group = "TopicStatusSilent", "CG_STATUS_SILENT"
    create_topic(broker, topic, 1)

    async def garbage(request: RemotingCommand, addr: str) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=b"{not json")

    async def scenario() -> None:
        [sent] = await send(namesrv, topic, ["a"])
        ends = await commit_all(broker, group, [sent])
        consumer = PushConsumer(group, client_config=fast_config(namesrv))
        consumer.subscribe(topic, "*", lambda msgs, ctx: None)
        async with (
            Admin(namesrv, timeout_s=4.0) as admin,
            raw_consumer(
                broker,
                "silent@2",
                group,
                topic,
                {RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: never_answer},
            ),
            raw_consumer(broker, "unaware@2", group, topic, {}),
            raw_consumer(
                broker,
                "garbage@2",
                group,
                topic,
                {RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: garbage},
            ),
        ):
            await consumer.start()
            try:
                await registered(admin, broker, group, 4)
                cid = consumer.instance.client_id
                await helpers.eventually(
                    lambda: consumer.offset_store.offsets_of(topic) == ends, 10, "offset read"
                )
                began = time.monotonic()
                status = await admin.consumer_status(group, topic)
                waited = time.monotonic() - began
                assert status == {cid: ends}
                assert BROKER_WAIT_S - 0.5 <= waited < BROKER_WAIT_S + 3
                # Asked alone, one that answers costs no wait.
                began = time.monotonic()
                assert await admin.consumer_status(group, topic, cid) == {cid: ends}
                assert time.monotonic() - began < 2

                def command() -> Any:
                    return pyrmq_admin(
                        "get-consumer-status", "-n", namesrv, "-g", group, "-t", topic, "-i", cid
                    )

                shown = await asyncio.to_thread(command)
            finally:
                await consumer.shutdown()
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert lines[0] == (
            f"get consumer status from client. group={group}, topic={topic}, originClientId={cid}"
        )
        assert lines[1].split() == ["#clientId", "#brokerName", "#queueId", "#offset"]
        [(mq, offset)] = ends.items()
        assert lines[2].split() == [cid, mq.broker_name, "0", str(offset)]

    run(scenario)


def test_the_status_a_client_answers_is_the_fastjson_body_java_reads(
    addrs: tuple[str, str],
) -> None:
    """GET_CONSUMER_STATUS_FROM_CLIENT sent straight to a pyrmq consumer's connection is
    answered with a GetConsumerStatusBody whose messageQueueTable is keyed by MessageQueue
    objects, as fastjson writes it; the broker's answer nests such tables by client id."""
    namesrv, broker = addrs
    topic, group = "TopicStatusBody", "CG_STATUS_BODY"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        [sent] = await send(namesrv, topic, ["a"])
        ends = await commit_all(broker, group, [sent])
        consumer = PushConsumer(group, client_config=fast_config(namesrv))
        consumer.subscribe(topic, "*", lambda msgs, ctx: None)
        await consumer.start()
        try:
            async with Admin(namesrv) as admin:
                await registered(admin, broker, group)
            await helpers.eventually(
                lambda: consumer.offset_store.offsets_of(topic) == ends, 10, "offset read"
            )
            cid = consumer.instance.client_id
            remoting = RemotingClient()
            try:
                answer = await remoting.invoke(
                    broker,
                    RemotingCommand.request(
                        RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS,
                        {"topic": topic, "group": group},
                    ),
                    10.0,
                )
            finally:
                await remoting.close()
        finally:
            await consumer.shutdown()
        assert answer.code == ResponseCode.SUCCESS
        [(mq, offset)] = ends.items()
        key = json.dumps(
            {"brokerName": mq.broker_name, "queueId": 0, "topic": topic}, separators=(",", ":")
        )
        assert (
            answer.body
            == (
                f'{{"consumerTable":{{{json.dumps(cid)}:{{{key}:{offset}}}}},"messageQueueTable":{{}}}}'
            ).encode()
        )

    run(scenario)


def test_bad_requests_get_clear_errors(addrs: tuple[str, str]) -> None:
    _, broker = addrs
    no_group = helpers.remoting_call(broker, RequestCode.CONSUME_MESSAGE_DIRECTLY, {"msgId": "x"})
    assert no_group.code == ResponseCode.SYSTEM_ERROR
    assert "missing required field 'consumerGroup'" in (no_group.remark or "")
    no_topic = helpers.remoting_call(
        broker, RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, {"group": "G"}
    )
    assert no_topic.code == ResponseCode.SYSTEM_ERROR
    assert "missing required field 'topic'" in (no_topic.remark or "")
