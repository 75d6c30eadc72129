"""RocketMQ's slaveReadEnable: a pull answer's suggestWhichBrokerId sends a consumer reading
data the page cache has likely dropped to its group's slave, and the consumer follows it there,
committing its offsets to the master all the same. With ``accessMessageInMemoryMaxRatio=0``
every record read counts as dropped. Real name server and broker processes, as in
test_replication."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.compat.servers import BROKER_HA, Cluster
from tests.helpers import committed_offset, fast_config, remoting_call, run

from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI, PullResult
from pyrmq.client.message import Message, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(60)]

COLD = "accessMessageInMemoryMaxRatio=0"
QUEUES = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path) as c:
        yield c


async def max_offsets(broker: str, topic: str) -> list[int]:
    def ask(queue_id: int) -> int:
        answer = remoting_call(
            broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return int(answer.ext_fields["offset"])

    return await asyncio.to_thread(lambda: [ask(q) for q in range(QUEUES)])


async def backlog(cluster: Cluster, topic: str, count: int) -> list[bytes]:
    """Sends ``count`` messages to the master, and waits until the slave, if any, has them
    all."""
    bodies = [b"backlog-%d" % i for i in range(count)]
    async with Producer("PG_SLAVE_READ", client_config=fast_config(cluster.namesrv)) as p:
        for body in bodies:
            assert (await p.send(Message(topic, body))).status == SendStatus.OK
    ends = await max_offsets(cluster.addrs["master"], topic)
    assert sum(ends) == count
    if "slave" not in cluster.addrs:
        return bodies
    deadline = time.monotonic() + 10
    while await max_offsets(cluster.addrs["slave"], topic) != ends:
        assert time.monotonic() < deadline, "the slave did not copy the backlog in 10 s"
        await asyncio.sleep(0.1)
    return bodies


async def consume(namesrv: str, group: str, topic: str, want: int) -> list[bytes]:
    """Bodies a fresh push consumer receives until it has ``want`` of them (then 1 s more, to
    see any extra); its shutdown commits its offsets."""
    got: list[bytes] = []
    consumer = PushConsumer(
        group,
        client_config=fast_config(namesrv),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(topic, "*")
    async with consumer:

        async def take(until: int) -> None:
            async for msg in consumer:
                got.append(msg.body)
                if len(got) >= until:
                    return

        async with asyncio.timeout(15):
            await take(want)
        try:
            async with asyncio.timeout(1.0):
                await take(want + 1)
        except TimeoutError:
            pass
    return got


async def transferred(namesrv: str, broker: str) -> int:
    """Messages the broker has answered pulls with (``mqadmin brokerStatus``)."""
    async with Admin(namesrv) as admin:
        return int((await admin.broker_runtime_info(broker))["msgGetTotalTodayNow"])


async def pull(broker: str, topic: str, offset: int, group: str = "CG_TEST_INSPECT") -> PullResult:
    """A pull of queue 0 answered at once, from a fresh connection."""
    remoting = RemotingClient()
    try:
        header = PullMessageRequestHeader.immediate(group, topic, 0, offset)
        return await ClientAPI(remoting).pull(broker, BROKER_HA, header, 5.0)
    finally:
        await remoting.close()


def test_a_consumer_behind_reads_from_the_slave_and_commits_on_the_master(
    cluster: Cluster,
) -> None:
    master = cluster.start("master", "ASYNC_MASTER", "slaveReadEnable=true", COLD)
    slave = cluster.start("slave", "SLAVE", "slaveReadEnable=true", COLD)
    topic, group = "TopicSlaveRead", "CG_SLAVE_READ"

    async def scenario() -> None:
        bodies = await backlog(cluster, topic, 400)
        got = await consume(cluster.namesrv, group, topic, len(bodies))
        assert sorted(got) == sorted(bodies), "each message once, none lost"
        # The first pull of each queue reads from the master, which sends the consumer on to
        # the slave for the rest.
        on_slave = await transferred(cluster.namesrv, slave)
        assert 0 < on_slave < len(bodies)
        assert await transferred(cluster.namesrv, master) + on_slave == len(bodies)
        ends = await max_offsets(master, topic)
        for q in range(QUEUES):
            mq = MessageQueue(topic, BROKER_HA, q)
            assert await committed_offset(master, group, mq) == ends[q]

    run(scenario, timeout_s=40)


def test_without_slave_read_pulls_name_the_master_until_it_is_turned_on(
    cluster: Cluster,
) -> None:
    """Off (the default), every answer names the master, a slave's too, and the consumer reads
    nothing from the slave. Turned on at the master while it runs, its answers follow the
    group's settings; the slave, still without it, names the master."""
    master = cluster.start("master", "ASYNC_MASTER", COLD)
    slave = cluster.start("slave", "SLAVE", COLD)
    topic = "TopicSlaveReadOff"

    async def scenario() -> None:
        bodies = await backlog(cluster, topic, 200)
        got = await consume(cluster.namesrv, "CG_SLAVE_READ_OFF", topic, len(bodies))
        assert sorted(got) == sorted(bodies)
        assert await transferred(cluster.namesrv, slave) == 0
        assert await transferred(cluster.namesrv, master) == len(bodies)
        for broker in (master, slave):
            answer = await pull(broker, topic, 0)
            assert answer.messages, f"{broker} answered nothing"
            assert answer.suggest_which_broker_id == 0

        async with Admin(cluster.namesrv) as admin:
            await admin.update_broker_config(master, {"slaveReadEnable": True})
        assert (await pull(master, topic, 0)).suggest_which_broker_id == 1
        assert (await pull(slave, topic, 0)).suggest_which_broker_id == 0
        settings = {
            "groupName": "CG_TEST_INSPECT",
            "brokerId": 2,
            "whichBrokerWhenConsumeSlowly": 3,
        }
        answer = await asyncio.to_thread(
            remoting_call,
            master,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps(settings).encode(),
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert (await pull(master, topic, 0)).suggest_which_broker_id == 3
        # Caught up, nothing read: the group's own broker.
        end = (await max_offsets(master, topic))[0]
        caught_up = await pull(master, topic, end)
        assert not caught_up.messages
        assert caught_up.suggest_which_broker_id == 2

    run(scenario, timeout_s=40)


def test_without_the_suggested_slave_the_consumer_pulls_from_the_master(
    cluster: Cluster,
) -> None:
    """A master alone names a slave it has not got; the consumer, finding no such broker in
    the route, goes on pulling from the master."""
    master = cluster.start("master", "ASYNC_MASTER", "slaveReadEnable=true", COLD)
    topic, group = "TopicSlaveReadAlone", "CG_SLAVE_READ_ALONE"

    async def scenario() -> None:
        bodies = await backlog(cluster, topic, 200)
        assert (await pull(master, topic, 0)).suggest_which_broker_id == 1
        got = await consume(cluster.namesrv, group, topic, len(bodies))
        assert sorted(got) == sorted(bodies)
        ends = await max_offsets(master, topic)
        for q in range(QUEUES):
            mq = MessageQueue(topic, BROKER_HA, q)
            assert await committed_offset(master, group, mq) == ends[q]

    run(scenario, timeout_s=40)
