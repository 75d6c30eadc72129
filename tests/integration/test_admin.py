"""Cluster statistics against a real ``pyrmq serve``: topic status, consumer progress (lag) and
the broker's runtime figures, through :class:`pyrmq.client.admin.Admin` and ``pyrmq admin``."""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import fast_config, pyrmq_admin

from pyrmq import _core
from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI, PullStatus
from pyrmq.client.message import Message, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import BrokerError, NoRouteError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture
def addrs(server: Any) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    return namesrv, broker


async def send(namesrv: str, topic: str, count: int) -> list[SendResult]:
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        results = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(count)]
    assert all(r.status is SendStatus.OK for r in results)
    return results


def per_queue(results: list[SendResult]) -> collections.Counter[int]:
    return collections.Counter(r.message_queue.queue_id for r in results if r.message_queue)


async def routed(admin: Admin, topic: str) -> dict[MessageQueue, Any]:
    """The topic's status once the name server has its route: a broker registers a topic it
    created with its next registration, which it sends at once but which may arrive later."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return await admin.topic_status(topic)
        except NoRouteError:
            assert time.monotonic() < deadline, f"{topic} never got a route"
            await asyncio.sleep(0.1)


def test_topic_status_gives_each_queue_its_offsets_and_last_store_time(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminStatus"
    create_topic(broker, topic, 3)

    async def scenario() -> None:
        before = time.time_ns() // 1_000_000
        results = await send(namesrv, topic, 7)
        after = time.time_ns() // 1_000_000
        counts = per_queue(results)
        broker_name = results[0].message_queue.broker_name  # type: ignore[union-attr]
        async with Admin(namesrv) as admin:
            status = await routed(admin, topic)
            assert sorted(status) == [MessageQueue(topic, broker_name, q) for q in range(3)]
            for mq, offset in status.items():
                assert (offset.min_offset, offset.max_offset) == (0, counts[mq.queue_id])
                if counts[mq.queue_id]:
                    assert before <= offset.last_update_timestamp <= after
                else:
                    assert offset.last_update_timestamp == 0
            with pytest.raises(NoRouteError, match="TopicAdminMissing"):
                await admin.topic_status("TopicAdminMissing")

    run(scenario)


async def commit(broker: str, group: str, mq: MessageQueue, offset: int) -> None:
    remoting = RemotingClient()
    try:
        await ClientAPI(remoting).update_consumer_offset(broker, group, mq, offset, oneway=False)
    finally:
        await remoting.close()


def test_consumer_progress_is_the_lag_of_the_committed_offsets(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAdminLag", "CG_ADMIN_LAG"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        before = time.time_ns() // 1_000_000
        results = await send(namesrv, topic, 10)
        after = time.time_ns() // 1_000_000
        counts = per_queue(results)
        broker_name = results[0].message_queue.broker_name  # type: ignore[union-attr]
        q0 = MessageQueue(topic, broker_name, 0)
        await commit(broker, group, q0, 3)
        async with Admin(namesrv) as admin:
            progress = await admin.consumer_progress(group)
            assert sorted(progress) == [q0, MessageQueue(topic, broker_name, 1)]
            first, second = progress[q0], progress[MessageQueue(topic, broker_name, 1)]
            assert (first.broker_offset, first.consumer_offset) == (counts[0], 3)
            assert first.lag == counts[0] - 3
            assert (second.consumer_offset, second.lag) == (0, counts[1])
            # The store time of the last message consumed (offset 2); none consumed on 1.
            assert before <= first.last_timestamp <= after
            assert second.last_timestamp == 0
            # A topic named, and a group with no offsets anywhere.
            assert await admin.consumer_progress(group, topic) == progress
            assert await admin.consumer_progress("CG_ADMIN_NOBODY") == {}
            # It committed offsets but never pulled: no consume rate.
            stats = await admin.consume_stats(group)
            assert (stats.queues, stats.lag, stats.consume_tps) == (
                progress,
                counts[0] + counts[1] - 3,
                0.0,
            )

    run(scenario)


def test_a_consumer_that_caught_up_has_no_lag(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAdminCaughtUp", "CG_ADMIN_CAUGHT_UP"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        await send(namesrv, topic, 12)
        consumed: list[bytes] = []
        c = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        c.subscribe(topic, "*", lambda msgs, ctx: consumed.extend(m.body for m in msgs))
        async with Admin(namesrv) as admin:
            await c.start()
            try:

                async def lag() -> int:
                    progress = await admin.consumer_progress(group, topic)
                    total = sum(p.broker_offset for p in progress.values())
                    return sum(p.lag for p in progress.values()) if total == 12 else -1

                deadline = time.monotonic() + 30
                while await lag() != 0:
                    assert time.monotonic() < deadline, "the group's lag never reached 0"
                    await asyncio.sleep(0.1)
                # Its pulls show in its rate from the broker's next once-a-second sample on;
                # 12 messages within the last minute, all pulled after the sample before.
                while (tps := (await admin.consume_stats(group, topic)).consume_tps) == 0:
                    assert time.monotonic() < deadline, "the group's rate never showed"
                    await asyncio.sleep(0.1)
                assert 0 < tps <= 12
            finally:
                await c.shutdown()
        assert sorted(consumed) == sorted(f"m{i}".encode() for i in range(12))

    run(scenario)


async def pull_all(broker: str, broker_name: str, topic: str, queue_id: int) -> int:
    result = await helpers.pull_head(broker, broker_name, topic, queue_id)
    assert result.status is PullStatus.FOUND
    return len(result.messages)


def test_broker_runtime_info_counts_what_was_stored_and_served(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminRuntime"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        async with Admin(namesrv) as admin:
            before = await admin.broker_runtime_info(broker)
            results = await send(namesrv, topic, 9)
            broker_name = results[0].message_queue.broker_name  # type: ignore[union-attr]
            pulled = await pull_all(broker, broker_name, topic, 0)
            after = await admin.broker_runtime_info(broker)

            def grew(key: str) -> int:
                return int(after[key]) - int(before[key])

            assert pulled == 9
            assert grew("msgPutTotalTodayNow") == 9
            assert grew("putMessageTimesTotal") == 9
            assert grew("msgGetTotalTodayNow") == 9
            stored = grew("commitLogMaxOffset")
            assert stored > 9 * len("m0")
            assert grew("putMessageSizeTotal") == stored
            assert int(after["commitLogMinOffset"]) == 0
            assert 0 < int(after["earliestMessageTimeStamp"]) <= time.time() * 1000
            assert 0.0 <= float(after["commitLogDiskRatio"]) <= 1.0
            assert after["brokerVersionDesc"].startswith("V")
            # Rates come from once-a-second samples: the puts show within two of them.
            await asyncio.sleep(2.2)
            rates = (await admin.broker_runtime_info(broker))["putTps"].split(" ")
            assert len(rates) == 3
            assert float(rates[0]) > 0
            clusters = await admin.clusters()
            assert [(b.broker_name, b.addrs) for b in clusters] == [(broker_name, {0: broker})]

    run(scenario)


def test_the_admin_command_prints_status_lag_and_figures(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAdminCli", "CG_ADMIN_CLI"
    create_topic(broker, topic, 1)

    async def scenario() -> str:
        results = await send(namesrv, topic, 5)
        mq = results[0].message_queue
        assert mq is not None
        await commit(broker, group, mq, 2)
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
        return mq.broker_name

    broker_name: str = asyncio.run(scenario())

    status = pyrmq_admin("topic-status", "-n", namesrv, "-t", topic)
    assert status.returncode == 0, status.stderr
    assert status.stdout.splitlines()[1].split()[:4] == [broker_name, "0", "0", "5"]

    progress = pyrmq_admin("consumer-progress", "-n", namesrv, "-g", group)
    assert progress.returncode == 0, progress.stderr
    lines = progress.stdout.splitlines()
    assert lines[1].split()[:6] == [topic, broker_name, "0", "5", "2", "3"]
    assert lines[-2:] == ["Consume TPS: 0.00", "Diff Total: 3"]

    listed = pyrmq_admin("cluster-list", "-n", namesrv)
    assert listed.returncode == 0, listed.stderr
    assert [broker_name, "0", broker] == listed.stdout.splitlines()[1].split()[1:4]

    figures = pyrmq_admin("broker-status", "-n", namesrv, "-b", broker)
    assert figures.returncode == 0, figures.stderr
    assert any(
        line.split(" : ")[0].strip() == "commitLogMaxOffset" for line in figures.stdout.splitlines()
    )

    missing = pyrmq_admin("topic-status", "-n", namesrv, "-t", "TopicAdminCliMissing")
    assert missing.returncode == 1
    assert "TopicAdminCliMissing" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_delay_offsets_follow_the_delivery_of_delayed_messages(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminDelay"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        async with Admin(namesrv) as admin:
            before = await admin.broker_runtime_info(broker)
            async with Producer("PG_ADMIN_DELAY", client_config=fast_config(namesrv)) as producer:
                sent = await producer.send(Message(topic, b"later", delay_time_level=1))
            assert sent.status is SendStatus.OK
            deadline = time.monotonic() + 10
            while (await admin.delay_offsets(broker)).get(1) != 1:
                assert time.monotonic() < deadline, "level 1 never delivered its message"
                await asyncio.sleep(0.1)
            status = await admin.topic_status(topic)
            assert [t.max_offset for t in status.values()] == [1]
            info = await admin.broker_runtime_info(broker)
            assert info["scheduleMessageOffset_1"] == "1,1"
            # Both puts count, as in RocketMQ's store statistics: the send into the schedule
            # topic and the delivery, which the broker learns of at its next sample.
            while int(info["putMessageTimesTotal"]) - int(before["putMessageTimesTotal"]) != 2:
                assert time.monotonic() < deadline, "the delivery was never counted"
                await asyncio.sleep(0.1)
                info = await admin.broker_runtime_info(broker)
            stored = int(info["putMessageSizeTotal"]) - int(before["putMessageSizeTotal"])
            assert stored == int(info["commitLogMaxOffset"]) - int(before["commitLogMaxOffset"])

    run(scenario)


def test_a_deleted_topic_loses_its_route_messages_and_offsets(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAdminDelete", "CG_ADMIN_DELETE"

    async def scenario() -> None:
        async with Admin(namesrv) as admin:
            assert await admin.create_topic(topic, queue_nums=2) == [broker]
            await routed(admin, topic)
            results = await send(namesrv, topic, 6)
            mq = results[0].message_queue
            assert mq is not None
            await commit(broker, group, mq, 2)
            assert await admin.consumer_progress(group, topic) != {}

            assert await admin.delete_topic(topic) == [broker]
            with pytest.raises(NoRouteError):
                await admin.topic_status(topic)
            assert await admin.consumer_progress(group) == {}
            # RocketMQ's reserved topics stay.
            for reserved in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
                with pytest.raises(BrokerError, match="system topic"):
                    await admin.delete_topic(reserved)
            # A name that is a path, not a topic, is refused before anything is touched.
            for bad in ("..", "../config", "%RETRY%x/.."):
                with pytest.raises(BrokerError, match="illegal characters"):
                    await admin.delete_topic(bad)

            # Sent to again, it is created afresh: its queues start at offset 0.
            again = await send(namesrv, topic, 1)
            assert again[0].offset == 0
            status = await routed(admin, topic)
            assert sum(t.max_offset for t in status.values()) == 1

    run(scenario)


def test_the_admin_command_creates_and_deletes_topics(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminCliLife"
    created = pyrmq_admin("update-topic", "-n", namesrv, "-t", topic, "-r", "3", "-b", broker)
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == f"create topic to {broker} success."

    async def queues() -> int:
        async with Admin(namesrv) as admin:
            return len(await routed(admin, topic))

    assert asyncio.run(queues()) == 3
    deleted = pyrmq_admin("delete-topic", "-n", namesrv, "-t", topic)
    assert deleted.returncode == 0, deleted.stderr
    status = pyrmq_admin("topic-status", "-n", namesrv, "-t", topic)
    assert status.returncode == 1
    assert topic in status.stderr


def test_messages_are_found_by_key_by_producer_id_and_by_offset_id(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminQuery"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        async with Producer("PG_ADMIN_QUERY", client_config=fast_config(namesrv)) as producer:
            sent = [
                await producer.send(Message(topic, b"first", keys=["order-1", "shared"])),
                await producer.send(Message(topic, b"second", keys=["order-2", "shared"])),
                await producer.send(Message(topic, b"third", keys="order-3")),
            ]
            # The same producer id sent twice, as a producer retrying a send does.
            again = Message(topic, b"again", properties={"UNIQ_KEY": sent[2].msg_id})
            resent = await producer.send(again)
        assert resent.msg_id == sent[2].msg_id
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
            shared = await admin.query_message(topic, "shared")
            assert [m.body for m in shared] == [b"first", b"second"]
            assert [m.msg_id for m in shared] == [sent[0].msg_id, sent[1].msg_id]
            assert [m.queue_offset for m in shared] == [sent[0].queue_offset, sent[1].queue_offset]
            assert [m.body for m in await admin.query_message(topic, "order-3")] == [b"third"]
            assert await admin.query_message(topic, "order") == []
            with pytest.raises(NoRouteError):
                await admin.query_message("TopicAdminQueryNowhere", "shared")
            # The store-time range bounds the search.
            first = shared[0].store_timestamp
            assert await admin.query_message(topic, "shared", end_ms=first - 1) == []
            later = await admin.query_message(topic, "shared", begin_ms=shared[1].store_timestamp)
            assert [m.body for m in later] == [b"second"]

            twice = await admin.query_message_by_unique_key(topic, sent[2].msg_id)
            assert [m.body for m in twice] == [b"third", b"again"]
            assert await admin.query_message_by_unique_key(topic, sent[0].msg_id + "0") == []

            viewed = await admin.view_message(sent[1].offset_msg_id)
            assert (viewed.body, viewed.topic, viewed.keys) == (b"second", topic, "order-2 shared")
            assert viewed.message_queue == sent[1].message_queue
            assert viewed.offset_msg_id == sent[1].offset_msg_id
            with pytest.raises(ValueError, match="not an offset message id"):
                await admin.view_message("not-an-id")
            # A well-formed id past the end of the broker's log.
            host, port = broker.split(":")
            beyond = "".join(f"{int(p):02X}" for p in host.split(".")) + f"{int(port):08X}"
            with pytest.raises(BrokerError, match="can not find message"):
                await admin.view_message(beyond + f"{2**40:016X}")

    run(scenario)


def test_a_query_by_producer_id_returns_every_copy_whatever_it_asked_for(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminUnique"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        async with Producer("PG_ADMIN_UNIQUE", client_config=fast_config(namesrv)) as producer:
            results = [
                await producer.send(Message(topic, f"copy{i}", properties={"UNIQ_KEY": "U1"}))
                for i in range(3)
            ]
        assert {r.msg_id for r in results} == {"U1"}
        remoting = RemotingClient()
        try:

            async def query(extra: dict[str, str]) -> int:
                ext = {"topic": topic, "key": "U1", "maxNum": "1", "beginTimestamp": "0"}
                ext |= {"endTimestamp": str(2**62), **extra}
                request = RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext)
                response = await remoting.invoke(broker, request, 3.0)
                assert response.code == ResponseCode.SUCCESS
                return len(_core.decode_messages(response.body))

            # maxNum holds for a key query; a query by producer id returns up to 32 regardless,
            # as RocketMQ's broker answers one.
            assert await query({}) == 1
            assert await query({"_UNIQUE_KEY_QUERY": "true"}) == 3
        finally:
            await remoting.close()

    run(scenario)


def test_the_admin_command_finds_messages(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAdminQueryCli"
    create_topic(broker, topic, 1)

    async def scenario() -> SendResult:
        async with Producer("PG_ADMIN_QUERY_CLI", client_config=fast_config(namesrv)) as producer:
            result = await producer.send(Message(topic, "héllo", tags="TagQ", keys="cli-key"))
        async with Admin(namesrv) as admin:
            await routed(admin, topic)
        return result

    sent = asyncio.run(scenario())

    by_key = pyrmq_admin("query-msg-by-key", "-n", namesrv, "-t", topic, "-k", "cli-key")
    assert by_key.returncode == 0, by_key.stderr
    lines = by_key.stdout.splitlines()
    assert lines[0].split() == ["#Message", "ID", "#Broker", "Name", "#QID", "#Offset"]
    assert lines[1].split()[0] == sent.msg_id
    assert lines[1].split()[2:] == ["0", str(sent.queue_offset)]

    for args in (
        ("query-msg-by-id", "-i", sent.offset_msg_id),
        ("query-msg-by-unique-key", "-t", topic, "-i", sent.msg_id),
    ):
        shown = pyrmq_admin(*args[:1], "-n", namesrv, *args[1:])
        assert shown.returncode == 0, shown.stderr
        fields = dict(line.split(":", 1) for line in shown.stdout.splitlines())
        assert fields["OffsetID"].strip() == sent.offset_msg_id
        assert fields["Topic"].strip() == topic
        assert fields["Tags"].strip() == "[TagQ]"
        assert fields["Keys"].strip() == "[cli-key]"
        assert fields["Message Body"].strip() == "héllo"

    bad = pyrmq_admin("query-msg-by-id", "-n", namesrv, "-i", "nonsense")
    assert bad.returncode == 1
    assert "not an offset message id" in bad.stderr
    assert "Traceback" not in bad.stderr
    missing = pyrmq_admin("query-msg-by-unique-key", "-n", namesrv, "-t", topic, "-i", "NOPE")
    assert missing.returncode == 1
    assert "no message of topic" in missing.stderr


def test_a_consume_queue_shows_where_each_message_lies_and_who_takes_it(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAdminCq", "CG_ADMIN_CQ"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        async with Producer("PG_ADMIN_CQ", client_config=fast_config(namesrv)) as producer:
            tags = ["TagA", "TagB", "TagA", "TagC", "TagA"]
            sent = [
                await producer.send(Message(topic, f"cq{i}", tags=t)) for i, t in enumerate(tags)
            ]
        consumer = PushConsumer(group, client_config=fast_config(namesrv))
        consumer.subscribe(topic, "TagA || TagC", lambda msgs, ctx: None)
        async with Admin(namesrv) as admin:
            view = await admin.query_consume_queue(broker, topic, 0, 1, 3)
            assert (view.min_offset, view.max_offset, view.subscription) == (0, 5, None)
            assert [u.queue_offset for u in view.units] == [1, 2, 3]
            phys = [_core.decode_offset_msg_id(r.offset_msg_id)[1] for r in sent]
            assert [u.phy_offset for u in view.units] == phys[1:4]
            assert [u.tags_code for u in view.units] == [
                _core.java_string_hash(t) for t in tags[1:4]
            ]
            assert all(u.size > len("cq0") for u in view.units)
            assert not any(u.taken for u in view.units)

            await consumer.start()
            try:
                deadline = time.monotonic() + 10
                while (
                    await admin.query_consume_queue(broker, topic, 0, group=group)
                ).subscription is None:
                    assert time.monotonic() < deadline, "the consumer never registered"
                    await asyncio.sleep(0.1)
                view = await admin.query_consume_queue(broker, topic, 0, count=100, group=group)
            finally:
                await consumer.shutdown()
            assert view.subscription == "TagA || TagC"
            assert [u.taken for u in view.units] == [True, False, True, True, True]
            assert [u.queue_offset for u in view.units] == [0, 1, 2, 3, 4]

            assert (await admin.query_consume_queue(broker, topic, 0, 5)).units == []
            with pytest.raises(BrokerError, match="3@TopicAdminCq is not exist"):
                await admin.query_consume_queue(broker, topic, 3)

    run(scenario)

    shown = pyrmq_admin("query-cq", "-n", namesrv, "-b", broker, "-t", topic, "-q", "0", "-c", "2")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"queue 0@{topic}: min offset 0, max 5"
    assert lines[1].split() == ["#Offset", "#CommitLog", "Offset", "#Size", "#Tags", "Code"]
    assert [line.split()[0] for line in lines[2:]] == ["0", "1"]
    assert lines[2].split()[3] == str(_core.java_string_hash("TagA"))


def test_cluster_list_shows_every_broker_when_one_does_not_answer(tmp_path: Any) -> None:
    """A broker the name server still lists (hung, or gone without closing its connection)
    is shown without figures; the others are shown as usual."""
    (tmp_path / "a").mkdir()
    with serving(tmp_path / "a") as first:
        namesrv, broker_a = first.addresses()
        conf = tmp_path / "broker-b.conf"
        conf.write_text("brokerName=broker-b\n")
        second = ServerProcess(
            [
                "broker",
                "-n",
                namesrv,
                "-c",
                str(conf),
                "--store",
                str(tmp_path / "b"),
                "--port",
                "0",
            ],
            tmp_path / "b.log",
        )
        try:
            [broker_b] = second.addresses()
            second.proc.send_signal(signal.SIGSTOP)
            try:
                out = pyrmq_admin("cluster-list", "-n", namesrv)
            finally:
                second.proc.send_signal(signal.SIGCONT)
        finally:
            assert second.stop() == 0
    assert out.returncode == 0, out.stderr
    rows = {line.split()[1]: line.split() for line in out.stdout.splitlines()[1:]}
    assert rows.keys() == {"broker-a", "broker-b"}
    assert rows["broker-a"][3] == broker_a
    assert rows["broker-b"][3:] == [broker_b, "0", "0", "0"]
    assert broker_b in out.stderr
