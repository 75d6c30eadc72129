"""Who is connected and where a group's offsets stand, against real ``pyrmq serve`` processes:
consumer and producer connections, the groups of a topic, a topic's route, offsets reset to a
time with the group online and offline (through :class:`pyrmq.client.admin.Admin` and
``pyrmq admin``), and SQL92 selectors that consumers check with the brokers before they start."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import fast_config, pyrmq_admin

from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI
from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.message import Message, MessageExt, MessageQueue
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.subscription import MessageSelector
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture(scope="module")
def filtering(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose broker filters by SQL92 (``enablePropertyFilter=true``)."""
    root = Path(tmp_path_factory.mktemp("filtering"))
    conf = root / "broker.conf"
    conf.write_text("enablePropertyFilter=true\n")
    with serving(root, "-c", str(conf)) as proc:
        yield proc


async def until(check: Any, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


def test_connections_name_each_client_and_how_its_group_consumes(server: ServerProcess) -> None:
    namesrv, broker = server.addresses()
    topic, group, producer_group = "TopicConnections", "CG_CONNECTIONS", "PG_CONNECTIONS"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        consumer = PushConsumer(
            group, client_config=fast_config(namesrv), consume_from_where="CONSUME_FROM_MAX_OFFSET"
        )
        consumer.subscribe(topic, "A || B", lambda msgs, ctx: None)
        async with (
            Producer(producer_group, client_config=fast_config(namesrv)) as producer,
            consumer,
            Admin(namesrv) as admin,
        ):
            await producer.send(Message(topic, b"x"))
            found = await admin.consumer_connection(group)
            (conn,) = found.connections
            assert conn.client_id == consumer.instance.client_id
            assert conn.language == "PYTHON"
            host, _, port = conn.client_addr.rpartition(":")
            assert host == "127.0.0.1"
            assert int(port) > 0
            assert found.subscriptions == {
                topic: ("TAG", "A || B"),
                f"%RETRY%{group}": ("TAG", "*"),
            }
            assert (found.consume_type, found.message_model, found.consume_from_where) == (
                "CONSUME_PASSIVELY",
                "CLUSTERING",
                "CONSUME_FROM_MAX_OFFSET",
            )
            (sender,) = await admin.producer_connection(producer_group, topic)
            assert sender.client_id == producer.instance.client_id
            assert sender.language == "PYTHON"

            with pytest.raises(BrokerError) as offline:
                await admin.consumer_connection("CG_NOBODY")
            assert offline.value.code == ResponseCode.CONSUMER_NOT_ONLINE
            assert "CG_NOBODY" in (offline.value.remark or "")
            with pytest.raises(BrokerError, match="PG_NOBODY"):
                await admin.producer_connection("PG_NOBODY", topic)

            shown = await asyncio.to_thread(
                pyrmq_admin, "consumer-connection", "-n", namesrv, "-g", group
            )
            assert shown.returncode == 0, shown.stderr
            assert conn.client_id in shown.stdout
            assert conn.client_addr in shown.stdout
            assert "A || B" in shown.stdout
            assert "CONSUME_PASSIVELY" in shown.stdout
            shown = await asyncio.to_thread(
                pyrmq_admin, "producer-connection", "-n", namesrv, "-g", producer_group, "-t", topic
            )
            assert shown.returncode == 0, shown.stderr
            assert sender.client_id in shown.stdout
            assert "PYTHON" in shown.stdout
            shown = await asyncio.to_thread(
                pyrmq_admin, "consumer-connection", "-n", namesrv, "-g", "CG_NOBODY"
            )
            assert shown.returncode == 1
            assert "not online" in shown.stderr
        # Gone with its last client.
        async with Admin(namesrv) as admin:
            with pytest.raises(BrokerError):
                await admin.consumer_connection(group)

    run(scenario)


def test_a_topic_is_consumed_by_groups_online_and_groups_with_offsets(
    server: ServerProcess,
) -> None:
    namesrv, broker = server.addresses()
    topic = "TopicConsumedBy"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        remoting = RemotingClient()
        try:
            mq = MessageQueue(topic, "broker-a", 0)
            await ClientAPI(remoting).update_consumer_offset(
                broker, "CG_BY_OFFSETS", mq, 0, oneway=False
            )
        finally:
            await remoting.close()
        consumer = PushConsumer("CG_BY_ONLINE", client_config=fast_config(namesrv))
        consumer.subscribe(topic, "*", lambda msgs, ctx: None)
        async with consumer, Admin(namesrv) as admin:
            assert await admin.topic_consumed_by(topic) == ["CG_BY_OFFSETS", "CG_BY_ONLINE"]
            assert await admin.topic_consumed_by("TBW102") == []

    run(scenario)


def test_the_topic_route_command_prints_the_route_as_json(server: ServerProcess) -> None:
    namesrv, broker = server.addresses()
    create_topic(broker, "TopicRouteShown", 3)
    shown = pyrmq_admin("topic-route", "-n", namesrv, "-t", "TopicRouteShown")
    assert shown.returncode == 0, shown.stderr
    route = json.loads(shown.stdout)
    assert route["brokerDatas"] == [
        {"brokerAddrs": {"0": broker}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
    ]
    assert route["queueDatas"] == [
        {
            "brokerName": "broker-a",
            "perm": 6,
            "readQueueNums": 3,
            "topicSysFlag": 0,
            "writeQueueNums": 3,
        }
    ]
    missing = pyrmq_admin("topic-route", "-n", namesrv, "-t", "TopicNowhere")
    assert missing.returncode == 1
    assert "no broker holds topic TopicNowhere" in missing.stderr


def test_offsets_reset_to_a_time_are_consumed_again_by_the_group_online(
    server: ServerProcess,
) -> None:
    namesrv, broker = server.addresses()
    topic, group = "TopicResetOnline", "CG_RESET_ONLINE"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        seen: list[bytes] = []
        consumer = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(topic, "*", lambda msgs, ctx: seen.extend(m.body for m in msgs))
        async with Producer("PG_RESET", client_config=fast_config(namesrv)) as producer:
            first = [await producer.send(Message(topic, b"old%d" % i)) for i in range(6)]
            async with consumer, Admin(namesrv) as admin:

                async def caught_up(seen_count: int, stored: int) -> bool:
                    if len(seen) < seen_count:
                        return False
                    stats = await admin.consume_stats(group, topic)
                    total = sum(p.broker_offset for p in stats.queues.values())
                    return stats.lag == 0 and total == stored

                await until(lambda: caught_up(6, 6), "the old messages were never consumed")
                await asyncio.sleep(0.05)
                middle = time.time_ns() // 1_000_000
                await asyncio.sleep(0.05)
                later = [await producer.send(Message(topic, b"new%d" % i)) for i in range(6)]
                await until(lambda: caught_up(12, 12), "the new messages were never consumed")

                offsets = await admin.reset_offset_by_time(topic, group, middle)
                before = {mq: sum(1 for r in first if r.message_queue == mq) for mq in offsets}
                assert offsets == before
                await until(lambda: caught_up(18, 12), "the group never caught up again")
                await asyncio.sleep(0.5)
                assert sorted(seen[12:]) == sorted(b"new%d" % i for i in range(len(later))), seen

    run(scenario)


def test_offsets_of_a_group_offline_are_reset_one_queue_at_a_time(server: ServerProcess) -> None:
    namesrv, broker = server.addresses()
    topic, group = "TopicResetOffline", "CG_RESET_OFFLINE"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        async with Producer("PG_RESET_OFF", client_config=fast_config(namesrv)) as producer:
            sent = [await producer.send(Message(topic, b"m%d" % i)) for i in range(8)]
        ends = {
            mq: sum(1 for r in sent if r.message_queue == mq)
            for mq in {r.message_queue for r in sent}
        }
        remoting = RemotingClient()
        try:
            for mq in ends:
                assert mq is not None
                await ClientAPI(remoting).update_consumer_offset(broker, group, mq, 1, oneway=False)
        finally:
            await remoting.close()
        async with Admin(namesrv) as admin:
            # Not forced: a later time would move the offsets forward, so they stay.
            kept = await admin.reset_offset_by_time(topic, group, -1, force=False)
            assert set(kept.values()) == {1}
            assert await admin.reset_offset_by_time(topic, group, -1) == ends
            progress = await admin.consumer_progress(group, topic)
            assert {mq: p.consumer_offset for mq, p in progress.items()} == ends
            assert set((await admin.reset_offset_by_time(topic, group, 0)).values()) == {0}
        shown = await asyncio.to_thread(
            pyrmq_admin,
            "reset-offset-by-time",
            "-n",
            namesrv,
            "-g",
            group,
            "-t",
            topic,
            "-s",
            "now",
        )
        assert shown.returncode == 0, shown.stderr
        for mq, end in ends.items():
            assert f"broker-a      {mq.queue_id}     {end}" in shown.stdout, shown.stdout
        async with Admin(namesrv) as admin:
            progress = await admin.consumer_progress(group, topic)
            assert {mq: p.consumer_offset for mq, p in progress.items()} == ends
        bad = await asyncio.to_thread(
            pyrmq_admin,
            "reset-offset-by-time",
            "-n",
            namesrv,
            "-g",
            group,
            "-t",
            topic,
            "-s",
            "yesterday",
        )
        assert bad.returncode == 2
        assert "yyyy-MM-dd#HH:mm:ss:SSS" in bad.stderr

    run(scenario)


def test_a_consumer_with_a_sql92_selector_starts_only_where_the_broker_filters_by_it(
    server: ServerProcess, filtering: ServerProcess
) -> None:
    create_topic(server.addresses()[1], "TopicSqlRefused", 1)
    create_topic(filtering.addresses()[1], "TopicSqlSelected", 2)

    async def scenario() -> None:
        namesrv, _ = server.addresses()
        consumer = PushConsumer("CG_SQL_REFUSED", client_config=fast_config(namesrv))
        consumer.subscribe("TopicSqlRefused", MessageSelector.by_sql("a > 5"), lambda m, c: None)
        with pytest.raises(BrokerError) as refused:
            await consumer.start()
        assert refused.value.code == ResponseCode.SYSTEM_ERROR
        assert "does not support consumer to filter message by SQL92" in str(refused.value)
        async with Admin(namesrv) as admin:
            with pytest.raises(BrokerError):  # it left no consumer behind
                await admin.consumer_connection("CG_SQL_REFUSED")

        namesrv, _ = filtering.addresses()
        bad = PushConsumer("CG_SQL_BAD", client_config=fast_config(namesrv))
        bad.subscribe("TopicSqlSelected", MessageSelector.by_sql("a >"), lambda m, c: None)
        with pytest.raises(BrokerError) as unparsed:
            await bad.start()
        assert unparsed.value.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED

        got: list[MessageExt] = []
        consumer = PushConsumer(
            "CG_SQL_SELECTED",
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        selector = MessageSelector.by_sql("a > 5 AND region = 'eu'")
        consumer.subscribe("TopicSqlSelected", selector, lambda msgs, ctx: got.extend(msgs))
        async with Producer("PG_SQL", client_config=fast_config(namesrv)) as producer:
            for i in range(10):
                msg = Message("TopicSqlSelected", b"m%d" % i)
                msg.properties.update({"a": str(i), "region": "eu" if i % 2 else "us"})
                await producer.send(msg)
        async with consumer, Admin(namesrv) as admin:
            await until(lambda: asyncio.sleep(0, len(got) >= 2), "nothing matched arrived")
            await asyncio.sleep(1)
            assert sorted(m.body for m in got) == [b"m7", b"m9"]
            found = await admin.consumer_connection("CG_SQL_SELECTED")
            assert found.subscriptions["TopicSqlSelected"] == ("SQL92", selector.expression)

        lite = LitePullConsumer("CG_SQL_LITE", client_config=fast_config(namesrv))
        lite.subscribe("TopicSqlSelected", MessageSelector.by_sql("a < 2"))
        async with lite:
            polled: list[MessageExt] = []
            deadline = time.monotonic() + 30
            while len(polled) < 2 and time.monotonic() < deadline:
                polled += await lite.poll(timeout_s=1)
            assert sorted(m.body for m in polled) == [b"m0", b"m1"]

    run(scenario, 90)


def test_check_client_config_answers_a_java_consumers_question(filtering: ServerProcess) -> None:
    """The body a Java 4.9 consumer sends at start, a tag subscription, and bodies that are
    not one: answered, and the broker serves on."""
    _, broker = filtering.addresses()

    async def ask(body: bytes) -> RemotingCommand:
        remoting = RemotingClient()
        try:
            request = RemotingCommand.request(RequestCode.CHECK_CLIENT_CONFIG, {}, body)
            return await remoting.invoke(broker, request, 5)
        finally:
            await remoting.close()

    def sub(kind: str, expression: str) -> bytes:
        data = {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": kind,
            "subString": expression,
            "subVersion": 1,
            "tagsSet": [],
            "topic": "T",
        }
        return json.dumps({"clientId": "c@1", "group": "G", "subscriptionData": data}).encode()

    async def scenario() -> None:
        assert (await ask(sub("SQL92", "a IS NOT NULL"))).code == ResponseCode.SUCCESS
        assert (await ask(sub("TAG", "A || B"))).code == ResponseCode.SUCCESS
        unparsed = await ask(sub("SQL92", "a = "))
        assert unparsed.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert (await ask(sub("CLASS", "x"))).code == ResponseCode.SYSTEM_ERROR
        for garbage in (b"{", b"[1]", b'{"subscriptionData": 3}'):
            answer = await ask(garbage)
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "bad CheckClientRequestBody" in (answer.remark or "")
        assert (await ask(b"")).code == ResponseCode.SUCCESS

    run(scenario)


def test_traffic_counters_show_a_topics_messages_in_and_each_groups_out(
    server: ServerProcess,
) -> None:
    """VIEW_BROKER_STATS_DATA, sampled every 10 s as in RocketMQ: after one sample the
    minute's window holds what was sent and pulled; ``stats-all`` prints it per group."""
    namesrv, broker = server.addresses()
    topic, group = "TopicTraffic", "CG_TRAFFIC"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        got: list[bytes] = []
        consumer = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(topic, "*", lambda msgs, ctx: got.extend(m.body for m in msgs))
        async with Producer("PG_TRAFFIC", client_config=fast_config(namesrv)) as producer:
            for _ in range(5):
                await producer.send(Message(topic, b"x" * 10))
            await producer.send_batch([Message(topic, b"y" * 10) for _ in range(5)])
        async with consumer, Admin(namesrv) as admin:
            await until(lambda: asyncio.sleep(0, len(got) >= 10), "nothing was consumed")

            async def sampled() -> bool:
                puts = await admin.broker_stats(broker, "TOPIC_PUT_NUMS", topic)
                gets = await admin.broker_stats(broker, "GROUP_GET_NUMS", f"{topic}@{group}")
                return puts["statsMinute"].sum == 10 and gets["statsMinute"].sum == 10

            await until(sampled, "the broker never sampled its counters", timeout_s=25)
            puts = await admin.broker_stats(broker, "TOPIC_PUT_NUMS", topic)
            # Six puts: five of one message and a batch of five.
            assert puts["statsMinute"].avgpt == pytest.approx(10 / 6)
            assert puts["statsMinute"].tps > 0
            size = await admin.broker_stats(broker, "TOPIC_PUT_SIZE", topic)
            assert size["statsMinute"].sum > 100
            with pytest.raises(BrokerError, match="The stats <TOPIC_PUT_NUMS> <TopicNone>"):
                await admin.broker_stats(broker, "TOPIC_PUT_NUMS", "TopicNone")
            traffic = await admin.topic_traffic(topic)
            assert traffic.in_24h == 10
            assert traffic.in_tps > 0
            out_tps, out_24h, lag = traffic.groups[group]
            assert (out_24h, lag) == (10, 0)
            assert out_tps > 0
        shown = await asyncio.to_thread(pyrmq_admin, "stats-all", "-n", namesrv, "-t", topic)
        assert shown.returncode == 0, shown.stderr
        (row,) = [line.split() for line in shown.stdout.splitlines()[1:]]
        assert row[:3] == [topic, group, "0"]
        assert row[5:] == ["10", "10"]
        active = await asyncio.to_thread(pyrmq_admin, "stats-all", "-n", namesrv, "-a")
        assert active.returncode == 0, active.stderr
        listed = {tuple(line.split()[:2]) for line in active.stdout.splitlines()[1:]}
        assert (topic, group) in listed
        assert not any(t == "TBW102" for t, _ in listed)  # no traffic

    run(scenario, 60)
