"""Admin operations against a real ``pyrmq serve``: consume time spans, system topics and the
topic list, group offset clones, the name server's settings and KV config, brokers' write
permission and broker-wide consume stats, through :class:`pyrmq.client.admin.Admin` and
``pyrmq admin``."""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving, start_broker
from tests.helpers import fast_config, pyrmq_admin

from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI
from pyrmq.client.message import Message, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.route import TopicRoute
from pyrmq.errors import BrokerError, ClientError, NoRouteError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import QueryConsumeTimeSpanRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("serve")
    # The name server keeps its KV config under $HOME: a private one.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        with serving(root) as proc:
            yield proc


@pytest.fixture
def addrs(server: ServerProcess) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    return namesrv, broker


async def send(namesrv: str, topic: str, count: int) -> list[SendResult]:
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        results = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(count)]
    assert all(r.status is SendStatus.OK for r in results)
    return results


async def commit(broker: str, group: str, mq: MessageQueue, offset: int) -> None:
    remoting = RemotingClient()
    try:
        await ClientAPI(remoting).update_consumer_offset(broker, group, mq, offset, oneway=False)
    finally:
        await remoting.close()


async def routed(admin: Admin, topic: str, brokers: int = 1) -> TopicRoute:
    """The topic's route once the name server has it from ``brokers`` brokers."""
    deadline = time.monotonic() + 10
    while (route := await admin.route(topic)) is None or len(route.queues) < brokers:
        assert time.monotonic() < deadline, f"{topic} never got a route"
        await asyncio.sleep(0.1)
    return route


async def invoke(addr: str, code: int, ext: dict[str, str] | None = None) -> RemotingCommand:
    remoting = RemotingClient()
    try:
        return await remoting.invoke(addr, RemotingCommand.request(code, ext), 3.0)
    finally:
        await remoting.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- QUERY_CONSUME_TIME_SPAN --------------------------------------------------------------


def test_consume_time_span_gives_store_times_and_how_far_behind_a_group_is(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicOpsSpan", "CG_OPS_SPAN"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        async with Producer("PG_OPS_SPAN", client_config=fast_config(namesrv)) as producer:
            mq0 = MessageQueue(topic, "broker-a", 0)
            sent = []
            for i in range(3):
                sent.append(await producer.send(Message(topic, f"s{i}".encode()), queue=mq0))
                await asyncio.sleep(0.02)
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
            stored = [(await admin.view_message(r.offset_msg_id)).store_timestamp for r in sent]
            assert stored == sorted(stored)
            assert stored[0] < stored[2]
            await commit(broker, group, mq0, 1)

            before = now_ms()
            spans = await admin.query_consume_time_span(topic, group)
            after = now_ms()
            assert [s.message_queue for s in spans] == [mq0, MessageQueue(topic, "broker-a", 1)]
            first, empty = spans
            assert (first.min_timestamp, first.max_timestamp) == (stored[0], stored[2])
            # Offset 1 committed: the last message consumed is the one at offset 0, the next
            # one to consume (offset 1) has waited since it was stored.
            assert first.consume_timestamp == stored[0]
            assert before - stored[1] <= first.delay_ms <= after - stored[1]
            assert (empty.min_timestamp, empty.max_timestamp, empty.delay_ms) == (-1, -1, 0)

            # A group with no offset waits from the first message; one that caught up, not.
            [fresh, _] = await admin.query_consume_time_span(topic, "CG_OPS_SPAN_NONE")
            assert fresh.consume_timestamp == stored[0]
            assert fresh.delay_ms >= before - stored[0]
            await commit(broker, group, mq0, 3)
            [done, _] = await admin.query_consume_time_span(topic, group)
            assert (done.consume_timestamp, done.delay_ms) == (stored[2], 0)

            with pytest.raises(NoRouteError, match="TopicOpsSpanMissing"):
                await admin.query_consume_time_span("TopicOpsSpanMissing", group)
        # The broker's own answer for a topic it does not hold, as RocketMQ gives it.
        header = QueryConsumeTimeSpanRequestHeader(topic="TopicOpsSpanMissing", group=group)
        answer = await invoke(broker, RequestCode.QUERY_CONSUME_TIME_SPAN, header.to_ext())
        assert (answer.code, answer.remark) == (
            ResponseCode.TOPIC_NOT_EXIST,
            "topic[TopicOpsSpanMissing] not exist",
        )

    run(scenario)


# --- system topics, topic list ------------------------------------------------------------


def test_system_topics_are_the_cluster_and_broker_names_and_rocketmqs_own(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs

    async def scenario() -> None:
        async with Admin(namesrv) as admin:
            [member] = await admin.clusters()
            names = await admin.system_topics()
        assert {member.cluster, member.broker_name} <= set(names)
        assert {"TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"} <= set(names)
        assert "OFFSET_MOVED_EVENT" in names
        from_ns = await invoke(namesrv, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
        assert from_ns.code == ResponseCode.SUCCESS
        body = json.loads(from_ns.body)
        assert body["brokerAddr"] == broker
        assert sorted(body["topicList"]) == sorted({member.cluster, member.broker_name})
        own = await invoke(broker, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
        mine = {member.cluster, member.broker_name, f"{member.cluster}_REPLY_TOPIC"}
        assert mine <= set(json.loads(own.body)["topicList"])

    run(scenario)


def test_the_topics_named_after_the_cluster_and_broker_take_sends_as_configured(
    tmp_path: Path,
) -> None:
    """As RocketMQ's brokers (``mqadmin clusterRT`` sends to the broker's): open by default,
    closed to sends with ``brokerTopicEnable``/``clusterTopicEnable`` false."""
    for enabled in ("true", "false"):
        root = tmp_path / enabled
        root.mkdir()
        conf = root / "broker.conf"
        conf.write_text(f"brokerTopicEnable={enabled}\nclusterTopicEnable={enabled}\n")
        with serving(root, "-c", str(conf)) as server:
            broker = server.addresses()[1]
            for topic in ("broker-a", "DefaultCluster"):
                sent = helpers.send_raw(broker, topic, b"rt")
                if enabled == "true":
                    assert sent.code == ResponseCode.SUCCESS, sent.remark
                else:
                    assert sent.code == ResponseCode.NO_PERMISSION, sent.remark


def test_topic_list_prints_every_routed_topic_and_its_cluster(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicOpsList"
    create_topic(broker, topic, 1)

    async def scenario() -> list[str]:
        await commit(broker, "CG_OPS_LIST", MessageQueue(topic, "broker-a", 0), 0)
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
            return await admin.topic_list()

    topics = asyncio.run(scenario())
    assert topic in topics
    assert "TBW102" in topics

    plain = pyrmq_admin("topic-list", "-n", namesrv)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == topics

    with_clusters = pyrmq_admin("topic-list", "-n", namesrv, "-c")
    assert with_clusters.returncode == 0, with_clusters.stderr
    rows = [line.split() for line in with_clusters.stdout.splitlines()]
    assert rows[0] == ["#Cluster", "Name", "#Topic", "#Consumer", "Group"]
    assert ["DefaultCluster", topic, "CG_OPS_LIST"] in rows[1:]
    assert ["DefaultCluster", "TBW102"] in rows[1:]  # consumed by no group
    assert not any(row[1].startswith(("%RETRY%", "%DLQ%")) for row in rows[1:])

    unreachable = pyrmq_admin("topic-list", "-n", "127.0.0.1:1")
    assert unreachable.returncode == 1
    assert "no name server answered" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


# --- CLONE_GROUP_OFFSET -------------------------------------------------------------------


def test_clone_group_offset_copies_the_source_groups_offsets(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, src, dest = "TopicOpsClone", "CG_OPS_CLONE_SRC", "CG_OPS_CLONE_DEST"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        await send(namesrv, topic, 8)
        await commit(broker, src, MessageQueue(topic, "broker-a", 0), 3)
        await commit(broker, src, MessageQueue(topic, "broker-a", 1), 1)
        # The destination's own offset is replaced.
        await commit(broker, dest, MessageQueue(topic, "broker-a", 1), 4)
        async with Admin(namesrv) as admin:
            await routed(admin, topic)

    run(scenario)

    cloned = pyrmq_admin("clone-group-offset", "-n", namesrv, "-s", src, "-d", dest, "-t", topic)
    assert cloned.returncode == 0, cloned.stderr
    lines = cloned.stdout.splitlines()
    assert [line.split() for line in lines[1:3]] == [["broker-a", "0", "3"], ["broker-a", "1", "1"]]
    assert lines[-1].startswith("clone group offset success.")

    async def check() -> None:
        async with Admin(namesrv) as admin:
            progress = await admin.consumer_progress(dest, topic)
            assert {mq.queue_id: p.consumer_offset for mq, p in progress.items()} == {0: 3, 1: 1}
            with pytest.raises(ClientError, match="CG_OPS_CLONE_NOBODY has no committed"):
                await admin.clone_group_offset("CG_OPS_CLONE_NOBODY", dest, topic)
            with pytest.raises(NoRouteError):
                await admin.clone_group_offset(src, dest, "TopicOpsCloneMissing")

    run(check)

    nobody = pyrmq_admin(
        "clone-group-offset", "-n", namesrv, "-s", "CG_NOBODY", "-d", dest, "-t", topic
    )
    assert nobody.returncode == 1
    assert nobody.stderr.strip() == (
        f"Error: group CG_NOBODY has no committed offsets on topic {topic}"
    )


def test_clone_group_offset_passes_over_a_live_group_that_does_not_subscribe(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, other = "TopicOpsCloneLive", "TopicOpsCloneLiveOther"
    src, dest = "CG_OPS_CLONE_LIVE", "CG_OPS_CLONE_LIVE_DEST"
    create_topic(broker, topic, 1)
    create_topic(broker, other, 1)

    async def scenario() -> None:
        await send(namesrv, topic, 4)
        mq = MessageQueue(topic, "broker-a", 0)
        await commit(broker, src, mq, 2)
        consumer = PushConsumer(src, client_config=fast_config(namesrv))
        consumer.subscribe(other, "*", lambda msgs, ctx: None)
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
            await consumer.start()
            try:
                deadline = time.monotonic() + 10
                while True:
                    try:
                        await admin.clone_group_offset(src, dest, topic)
                    except ClientError as e:
                        refusal = str(e)
                        break
                    assert time.monotonic() < deadline, "the consumer never registered"
                    await asyncio.sleep(0.1)
                assert "clone offline" in refusal
                assert await admin.clone_group_offset(src, dest, topic, offline=True) == {mq: 2}
            finally:
                await consumer.shutdown()

    run(scenario)


# --- name-server settings and KV config ---------------------------------------------------


def test_name_server_settings_are_shown_and_changed_while_it_runs(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicOpsOrderConf"
    create_topic(broker, topic, 2)

    shown = pyrmq_admin("get-namesrv-config", "-n", namesrv)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"============{namesrv}============"
    settings = dict(tuple(p.strip() for p in line.split("=", 1)) for line in lines[1:])
    assert settings["listenPort"] == namesrv.rsplit(":", 1)[1]
    assert settings["orderMessageEnable"] == "false"
    assert settings["brokerChannelExpiredTime"] == "120000"

    async def settings_now() -> dict[str, str]:
        async with Admin(namesrv) as admin:
            return (await admin.namesrv_config())[namesrv]

    async def order_conf() -> str | None:
        async with Admin(namesrv) as admin:
            return (await routed(admin, topic)).order_topic_conf

    # The KV value routes carry once orderMessageEnable is on, and not before.
    kv = pyrmq_admin(
        "update-kv-config", "-n", namesrv, "-s", "ORDER_TOPIC_CONFIG", "-k", topic,
        "-v", "broker-a:2",
    )  # fmt: skip
    assert kv.returncode == 0, kv.stderr
    assert kv.stdout.strip() == f"create or update kv config to namespace success, {namesrv}"
    assert asyncio.run(order_conf()) is None
    try:
        on = pyrmq_admin(
            "update-namesrv-config", "-n", namesrv, "-k", "orderMessageEnable", "-v", "true"
        )
        assert on.returncode == 0, on.stderr
        assert asyncio.run(order_conf()) == "broker-a:2"
        assert asyncio.run(settings_now())["orderMessageEnable"] == "true"

        gone = pyrmq_admin(
            "delete-kv-config", "-n", namesrv, "-s", "ORDER_TOPIC_CONFIG", "-k", topic
        )
        assert gone.returncode == 0, gone.stderr
        assert gone.stdout.strip() == f"delete kv config from namespace success, {namesrv}"
        assert asyncio.run(order_conf()) is None

        async def kv_value() -> str | None:
            async with Admin(namesrv) as admin:
                return await admin.kv_config("ORDER_TOPIC_CONFIG", topic)

        assert asyncio.run(kv_value()) is None
    finally:
        off = pyrmq_admin(
            "update-namesrv-config", "-n", namesrv, "-k", "orderMessageEnable", "-v", "false"
        )
        assert off.returncode == 0, off.stderr

    for key, value, message in (
        ("fooBar", "1", "no such name server settings: fooBar"),
        ("kvConfigPath", "/tmp/x.json", "Can not update config path"),
        ("listenPort", "1", "listenPort take effect only when the name server starts"),
        ("orderMessageEnable", "maybe", "orderMessageEnable 'maybe' is not true or false"),
        ("brokerChannelExpiredTime", "0", "broker_channel_expired_time_ms 0 is not positive"),
    ):
        refused = pyrmq_admin("update-namesrv-config", "-n", namesrv, "-k", key, "-v", value)
        assert refused.returncode == 1, (key, refused.stdout)
        assert message in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

    async def refused_code() -> BrokerError:
        async with Admin(namesrv) as admin:
            with pytest.raises(BrokerError) as info:
                await admin.update_namesrv_config({"kvConfigPath": "/tmp/x.json"})
            return info.value

    assert asyncio.run(refused_code()).code == ResponseCode.NO_PERMISSION
    assert asyncio.run(settings_now())["orderMessageEnable"] == "false"


# --- write permission ---------------------------------------------------------------------


def test_wiping_a_brokers_write_permission_sends_to_the_others(tmp_path: Path) -> None:
    topic = "TopicOpsWritePerm"
    (tmp_path / "a").mkdir()
    with serving(tmp_path / "a") as first:
        namesrv, _ = first.addresses()
        second = start_broker(namesrv, tmp_path, "broker-b")
        try:

            async def prepare() -> None:
                async with Admin(namesrv) as admin:
                    assert len(await admin.create_topic(topic, queue_nums=2)) == 2
                    await routed(admin, topic, brokers=2)

            async def sent_to() -> collections.Counter[str]:
                results = await send(namesrv, topic, 8)
                return collections.Counter(
                    r.message_queue.broker_name for r in results if r.message_queue
                )

            async def perms() -> dict[str, int]:
                async with Admin(namesrv) as admin:
                    route = await routed(admin, topic, brokers=2)
                return {q.broker_name: q.perm for q in route.queues}

            asyncio.run(prepare())
            wiped = pyrmq_admin("wipe-write-perm", "-n", namesrv, "-b", "broker-a")
            assert wiped.returncode == 0, wiped.stderr
            # TBW102 and the topic at least: every topic of broker-a.
            line = wiped.stdout.strip()
            assert line.startswith(f"wipe write perm of broker[broker-a] in name server[{namesrv}]")
            assert int(line.rsplit(" ", 1)[1]) >= 2
            assert asyncio.run(perms()) == {"broker-a": 4, "broker-b": 6}
            assert asyncio.run(sent_to()) == {"broker-b": 8}

            added = pyrmq_admin("add-write-perm", "-n", namesrv, "-b", "broker-a")
            assert added.returncode == 0, added.stderr
            assert added.stdout.strip().endswith(f"OK, {line.rsplit(' ', 1)[1]}")
            assert asyncio.run(perms()) == {"broker-a": 6, "broker-b": 6}
            assert asyncio.run(sent_to()) == {"broker-a": 4, "broker-b": 4}

            # A broker name the name server does not know: nothing changes.
            unknown = pyrmq_admin("wipe-write-perm", "-n", namesrv, "-b", "broker-x")
            assert unknown.returncode == 0, unknown.stderr
            assert unknown.stdout.strip().endswith("OK, 0")
        finally:
            assert second.stop() == 0


# --- GET_BROKER_CONSUME_STATS -------------------------------------------------------------


def test_broker_consume_stats_gives_every_groups_lag(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicOpsBrokerStats", "CG_OPS_BROKER_STATS"
    create_topic(broker, topic, 2)

    async def scenario() -> collections.Counter[int]:
        results = await send(namesrv, topic, 6)
        counts = collections.Counter(r.message_queue.queue_id for r in results if r.message_queue)
        await commit(broker, group, MessageQueue(topic, "broker-a", 0), 1)
        async with Admin(namesrv) as admin:
            stats = await admin.broker_consume_stats(broker)
            assert stats.broker_addr == broker
            [mine] = [g for g in stats.groups if g.group == group]
            assert {mq.queue_id: (p.broker_offset, p.consumer_offset) for mq, p in
                    mine.queues.items()} == {0: (counts[0], 1), 1: (counts[1], 0)}  # fmt: skip
            assert mine.lag == 6 - 1
            assert stats.total_diff == sum(
                p.broker_offset - p.consumer_offset for g in stats.groups for p in g.queues.values()
            )
            # Only ordered topics: this one is not.
            ordered = await admin.broker_consume_stats(broker, order_only=True)
            assert all(g.group != group for g in ordered.groups)
        return counts

    counts = asyncio.run(scenario())

    shown = pyrmq_admin("broker-consume-stats", "-n", namesrv, "-b", broker)
    assert shown.returncode == 0, shown.stderr
    rows = [line.split() for line in shown.stdout.splitlines()]
    mine = [row[2:7] for row in rows if row[:2] == [topic, group]]
    assert mine == [
        ["broker-a", "0", str(counts[0]), "1", str(counts[0] - 1)],
        ["broker-a", "1", str(counts[1]), "0", str(counts[1])],
    ]
    assert rows[-1][:2] == ["Diff", "Total:"]

    at_least = pyrmq_admin("broker-consume-stats", "-n", namesrv, "-b", broker, "-l", "100")
    assert at_least.returncode == 0, at_least.stderr
    assert not any(line.startswith(topic) for line in at_least.stdout.splitlines())

    down = pyrmq_admin("broker-consume-stats", "-n", namesrv, "-b", "127.0.0.1:1", "-t", "2000")
    assert down.returncode == 1
    assert "Traceback" not in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr


def test_bad_requests_are_refused_as_rocketmq_refuses_them(addrs: tuple[str, str]) -> None:
    _, broker = addrs

    async def scenario() -> None:
        missing = await invoke(broker, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": "G"})
        assert missing.code == ResponseCode.SYSTEM_ERROR
        assert "destGroup" in (missing.remark or "")
        # A topic the broker does not hold: passed over, success (RocketMQ's answer).
        passed = await invoke(
            broker,
            RequestCode.CLONE_GROUP_OFFSET,
            {"srcGroup": "G", "destGroup": "H", "topic": "TopicOpsNowhere"},
        )
        assert passed.code == ResponseCode.SUCCESS

    run(scenario)
