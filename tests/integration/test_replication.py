"""Master and slave as RocketMQ runs them: a name server and two `pyrmq broker` processes of one
broker name, the slave (brokerId 1, brokerRole SLAVE) copying its master's CommitLog over the
HA port, and clients that read from the slave once the master is gone."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import BROKER_HA, Cluster
from tests.helpers import (
    committed_offset,
    eventually,
    fast_config,
    pull_head,
    remoting_call,
    run,
    send_raw,
)

from pyrmq.client.admin import Admin
from pyrmq.client.consume_service import ConsumeStatus
from pyrmq.client.message import Message, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BROKER = BROKER_HA


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path) as c:
        yield c


def run_sync(coro: Awaitable[Any]) -> Any:
    async def wrapped() -> Any:
        return await coro

    return asyncio.run(wrapped())


def max_offset(broker: str, topic: str, queue_id: int) -> int:
    answer = remoting_call(
        broker, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}
    )
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    return int(answer.ext_fields["offset"])


async def max_offsets(broker: str, topic: str, queues: int = 4) -> list[int]:
    """GET_MAX_OFFSET of each queue, from inside a running loop."""
    return await asyncio.to_thread(lambda: [max_offset(broker, topic, q) for q in range(queues)])


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what} not within {timeout_s} s"
        await asyncio.sleep(0.1)


async def send_all(namesrv: str, topic: str, bodies: list[bytes]) -> list[Any]:
    async with Producer("PG_HA", client_config=fast_config(namesrv)) as producer:
        return [await producer.send(Message(topic, body)) for body in bodies]


async def consume(
    namesrv: str, group: str, topic: str, want: int, timeout_s: float = 30
) -> list[bytes]:
    """Bodies a fresh push consumer of ``group`` receives until it has ``want`` distinct ones
    (then 1 s more, to see any extra)."""
    got: list[bytes] = []
    consumer = PushConsumer(
        group,
        client_config=fast_config(namesrv),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(topic, "*")
    async with consumer:

        async def take() -> None:
            async for msg in consumer:
                got.append(msg.body)
                if len(set(got)) >= want:
                    return

        try:
            async with asyncio.timeout(timeout_s):
                await take()
            async with asyncio.timeout(1.0):
                await take()
        except TimeoutError:
            pass
    return got


def test_a_slave_serves_every_acknowledged_message_after_its_master_is_killed(
    cluster: Cluster,
) -> None:
    """SYNC_MASTER: a send is answered once the slave has it. After kill -9 of the master the
    name server routes to the slave, and a consumer reads everything from it, committing its
    offsets there."""
    master = cluster.start("master", "SYNC_MASTER")
    slave = cluster.start("slave", "SLAVE")
    topic = "TopicHAFailover"
    bodies = [b"ha-%d" % i for i in range(400)]

    async def scenario() -> None:
        await eventually(
            lambda: "replicating to slave" in cluster.log("master"), 10, what="a slave"
        )
        results = await send_all(cluster.namesrv, topic, bodies)
        assert [r.status for r in results] == [SendStatus.OK] * len(bodies)
        # Answered means on the slave already: no wait before the kill.
        cluster.procs["master"].kill()
        await asyncio.sleep(0.5)  # the name server sees the master's connection close
        async with Admin(cluster.namesrv) as admin:
            # As mqadmin: with the master away, its slave answers for the queues.
            status = await admin.topic_status(topic)
            assert sum(o.max_offset for o in status.values()) == len(bodies)
        got = await consume(cluster.namesrv, "CG_HA_FAILOVER", topic, len(bodies))
        assert sorted(got) == sorted(bodies)
        # The consumer committed to the slave at shutdown, its master gone.
        for q in range(4):
            mq = MessageQueue(topic, BROKER, q)
            committed = await committed_offset(slave, "CG_HA_FAILOVER", mq)
            assert committed == (await max_offsets(slave, topic))[q]

    run(scenario, timeout_s=90)
    assert master != slave


def test_the_slave_refuses_sends_and_a_sync_master_without_one_says_so(
    cluster: Cluster,
) -> None:
    master = cluster.start("master", "SYNC_MASTER")
    answer = send_raw(master, "TopicHALonely", b"alone")
    assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE
    # Stored all the same, as RocketMQ: the answer says only that no slave has it.
    assert max_offset(master, "TopicHALonely", 0) == 1
    # WAIT=false asks for no wait at all, and a send-back (RocketMQ stores its copy so)
    # succeeds: else each failed one would come back to the master again and again.
    answer = send_raw(master, "TopicHALonely", b"no wait", properties="WAIT\x01false\x02")
    assert answer.code == ResponseCode.SUCCESS
    first = run_sync(pull_head(master, BROKER, "TopicHALonely", 0)).messages[0]
    answer = remoting_call(
        master,
        RequestCode.CONSUMER_SEND_MSG_BACK,
        {"offset": str(first.commit_log_offset), "group": "CG_HA_LONELY", "delayLevel": "0",
         "originMsgId": first.msg_id, "originTopic": "TopicHALonely", "unitMode": "false",
         "maxReconsumeTimes": "16"},
    )  # fmt: skip
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert max_offset(master, "%RETRY%CG_HA_LONELY", 0) == 0  # parked for its delay level
    slave = cluster.start("slave", "SLAVE")
    answer = send_raw(slave, "TopicHALonely", b"to the slave")
    assert answer.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "slave" in (answer.remark or "")

    async def scenario() -> None:
        async def copied() -> bool:
            return (await max_offsets(slave, "TopicHALonely", 1)) == [2]

        await until(copied, 10, "the first message on the slave")
        results = await send_all(cluster.namesrv, "TopicHALonely", [b"now with a slave"])
        assert results[0].status == SendStatus.OK

    run(scenario, timeout_s=60)


def test_offsets_committed_on_the_master_carry_over_to_the_slave(cluster: Cluster) -> None:
    """A group consumes half a topic from the master; the slave copies its offsets; after the
    master dies the group goes on from there on the slave, without the first half again."""
    master = cluster.start("master", "ASYNC_MASTER")
    slave = cluster.start("slave", "SLAVE")
    topic, group = "TopicHAOffsets", "CG_HA_OFFSETS"
    first = [b"first-%d" % i for i in range(200)]
    second = [b"second-%d" % i for i in range(200)]

    async def scenario() -> None:
        await send_all(cluster.namesrv, topic, first)
        got = await consume(cluster.namesrv, group, topic, len(first))
        assert sorted(set(got)) == sorted(first)
        await send_all(cluster.namesrv, topic, second)
        queues = [MessageQueue(topic, BROKER, q) for q in range(4)]
        on_master = [await committed_offset(master, group, mq) for mq in queues]
        assert sum(o or 0 for o in on_master) == len(first)

        async def copied() -> bool:
            on_slave = [await committed_offset(slave, group, mq) for mq in queues]
            return on_slave == on_master

        # The slave copies offsets every 10 s.
        await until(copied, 25, "offsets on the slave")
        ends = await max_offsets(master, topic)

        async def caught_up() -> bool:
            return await max_offsets(slave, topic) == ends

        await until(caught_up, 10, "the slave's log")
        cluster.procs["master"].kill()
        got = await consume(cluster.namesrv, group, topic, len(second))
        assert sorted(set(got)) == sorted(second)
        assert not set(got) & set(first)

    run(scenario, timeout_s=90)


def test_a_slave_made_a_master_delivers_on_from_its_masters_delay_offsets(
    cluster: Cluster,
) -> None:
    """The slave copies the master's delayed-message progress as it copies offsets; an
    operator who restarts the slave as the master (the master's disk lost) gets the delayed
    messages still to come, and none of those the master delivered before that copy again."""
    levels = "messageDelayLevel=1s 60s"
    master = cluster.start("master", "ASYNC_MASTER", levels)
    slave = cluster.start("slave", "SLAVE", levels)
    topic = "TopicHADelays"

    def delay_offsets(addr: str) -> dict[str, int]:
        answer = remoting_call(addr, RequestCode.GET_ALL_DELAY_OFFSET, {})
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return dict(json.loads(answer.body)["offsetTable"])

    async def scenario() -> None:
        async with Producer("PG_HA", client_config=fast_config(cluster.namesrv)) as producer:
            for i in range(20):
                msg = Message(topic, b"soon-%d" % i)
                msg.set_delay_time_level(1)
                assert (await producer.send(msg)).status is SendStatus.OK
            later = Message(topic, b"later")
            later.set_delay_time_level(2)
            assert (await producer.send(later)).status is SendStatus.OK

        async def delivered() -> bool:
            return sum(await max_offsets(master, topic)) == 20

        await until(delivered, 15, "the 1 s level delivered on the master")

        async def copied() -> bool:
            on_slave, on_master = await asyncio.gather(
                asyncio.to_thread(delay_offsets, slave), asyncio.to_thread(delay_offsets, master)
            )
            return on_slave == on_master == {"1": 20, "2": 0}

        # The slave copies every 10 s.
        await until(copied, 25, "the delay offsets on the slave")
        ends = await max_offsets(master, topic)

        async def caught_up() -> bool:
            return await max_offsets(slave, topic) == ends

        await until(caught_up, 10, "the slave's log")

    run(scenario, timeout_s=90)
    cluster.procs["master"].kill()
    assert cluster.procs["slave"].stop() == 0
    promoted = cluster.start("slave", "ASYNC_MASTER", levels)
    assert delay_offsets(promoted) == {"1": 20, "2": 0}
    time.sleep(3)  # three passes of the 1 s level
    assert sum(max_offset(promoted, topic, q) for q in range(4)) == 20


def test_a_slave_killed_mid_stream_catches_up_from_its_own_end(cluster: Cluster) -> None:
    """The slave starts before its master (it finds it at a later registration), is killed
    with SIGKILL while the master takes sends, and on restart goes on from its own end."""
    slave = cluster.start("slave", "SLAVE")
    master = cluster.start("master", "ASYNC_MASTER")
    topic = "TopicHACatchUp"

    async def scenario() -> None:
        await eventually(
            lambda: "replicating from master" in cluster.log("slave"), 15, what="the master found"
        )
        async with Producer("PG_HA_CATCH_UP", client_config=fast_config(cluster.namesrv)) as p:
            for i in range(300):
                await p.send(Message(topic, b"x%d" % i * 50))
            cluster.procs["slave"].kill()
            for i in range(300, 600):
                await p.send(Message(topic, b"x%d" % i * 50))
        restarted = await asyncio.to_thread(cluster.start, "slave", "SLAVE")
        ends = await max_offsets(master, topic)
        assert sum(ends) == 600

        async def caught_up() -> bool:
            return await max_offsets(restarted, topic) == ends

        await until(caught_up, 20, "the restarted slave's log")
        assert "at offset 0" not in cluster.log("slave")

    run(scenario, timeout_s=90)
    assert slave


def test_a_slave_cuts_a_damaged_record_and_gets_it_again_from_its_master(
    cluster: Cluster,
) -> None:
    """A byte flipped in a killed slave's CommitLog: the slave cuts its log there at restart
    and its master sends the rest again, so once the master is gone the slave still serves
    every message (kept in place, the damaged one was never fetched again)."""
    master = cluster.start("master", "ASYNC_MASTER")
    slave = cluster.start("slave", "SLAVE")
    topic = "TopicHADamaged"
    bodies = [b"damaged-%03d-" % i * 20 for i in range(60)]

    async def scenario() -> None:
        sent = await send_all(cluster.namesrv, topic, bodies)
        ends = await max_offsets(master, topic)

        async def copied() -> bool:
            return await max_offsets(slave, topic) == ends

        await until(copied, 20, "the slave's copy")
        cluster.procs["slave"].kill()
        [segment] = sorted((cluster.root / "slave" / "commitlog").iterdir())
        at = int(sent[10].offset_msg_id[-16:], 16) + 150  # in its body
        data = bytearray(segment.read_bytes())
        data[at] ^= 0x5A
        segment.write_bytes(data)
        # Recovery reads from the checkpoint on: without one, the whole log.
        (cluster.root / "slave" / "checkpoint").unlink()
        restarted = await asyncio.to_thread(cluster.start, "slave", "SLAVE")

        async def again() -> bool:
            return await max_offsets(restarted, topic) == ends

        await until(again, 20, "the slave's copy made again")
        assert "cut there, for the master to send again" in cluster.log("slave")
        cluster.procs["master"].kill()
        got = await consume(cluster.namesrv, "CG_HA_DAMAGED", topic, len(bodies))
        assert sorted(set(got)) == sorted(bodies)

    run(scenario, timeout_s=120)


def test_a_record_damaged_on_the_master_does_not_stop_replication(cluster: Cluster) -> None:
    """A byte flipped on the master's disk: its slave copies the damaged group as it is, as the
    master keeps it, and goes on. A SYNC_MASTER's sends are answered, and once the master is
    gone the slave serves every other message. (Refused by the slave, the group stopped
    replication for good, and every send got SLAVE_NOT_AVAILABLE.)"""
    cluster.start("master", "ASYNC_MASTER")
    topic = "TopicHAMasterDamaged"
    bodies = [b"master-damaged-%03d-" % i * 20 for i in range(40)]
    later = [b"later-%02d" % i for i in range(10)]

    async def scenario() -> None:
        sent = await send_all(cluster.namesrv, topic, bodies)
        assert cluster.procs["master"].stop() == 0
        # The first segment (the next one may be made ahead).
        segment = min((cluster.root / "master" / "commitlog").iterdir())
        at = int(sent[10].offset_msg_id[-16:], 16) + 150  # in its body
        data = bytearray(segment.read_bytes())
        data[at] ^= 0x5A
        segment.write_bytes(data)
        master = await asyncio.to_thread(cluster.start, "master", "SYNC_MASTER")
        slave = await asyncio.to_thread(cluster.start, "slave", "SLAVE")
        ends = await max_offsets(master, topic)

        async def copied() -> bool:
            return await max_offsets(slave, topic) == ends

        await until(copied, 20, "the slave's copy")
        assert "damaged on the master: copied as it is" in cluster.log("slave")
        results = await send_all(cluster.namesrv, topic, later)
        assert [r.status for r in results] == [SendStatus.OK] * len(later)
        cluster.procs["master"].kill()
        want = [b for i, b in enumerate(bodies) if i != 10] + later
        got = await consume(cluster.namesrv, "CG_HA_MASTER_DAMAGED", topic, len(want))
        assert sorted(set(got)) == sorted(want)

    run(scenario, timeout_s=120)


def test_garbage_on_the_ha_port_drops_that_connection_only(cluster: Cluster) -> None:
    master = cluster.start("master", "ASYNC_MASTER")
    log = cluster.log("master")
    ha = log.split(" ha=")[1].split()[0]
    host, port = ha.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">q", -5))
        sock.settimeout(5)
        assert sock.recv(64) == b""
    slave = cluster.start("slave", "SLAVE")
    answer = send_raw(master, "TopicHAGarbage", b"still here")
    assert answer.code == ResponseCode.SUCCESS

    async def scenario() -> None:
        async def copied() -> bool:
            return (await max_offsets(slave, "TopicHAGarbage", 1)) == [1]

        await until(copied, 10, "the message on the slave")

    run(scenario, timeout_s=60)
    assert "reported offset -5" in cluster.log("master")


def test_a_report_past_the_masters_end_acknowledges_nothing(cluster: Cluster) -> None:
    """A "slave" claiming more than the master has (another master's, or one that kept what
    its master lost) is refused, and a SYNC_MASTER's sends are not answered as replicated."""
    master = cluster.start("master", "SYNC_MASTER")
    ha = cluster.log("master").split(" ha=")[1].split()[0]
    host, port = ha.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">q", 10**12))
        sock.settimeout(5)
        assert sock.recv(64) == b""
    answer = send_raw(master, "TopicHAAhead", b"nobody has me")
    assert answer.code == ResponseCode.SLAVE_NOT_AVAILABLE
    assert "past this master's end" in cluster.log("master")


def test_a_master_rebuilt_empty_is_not_followed_by_a_slave_holding_its_old_log(
    cluster: Cluster,
) -> None:
    """The master's store is lost and it starts empty; once its new log passes the slave's
    end, the slave must not splice the new log onto the old one: the fence that ends the
    master's log there differs from the slave's, and the slave refuses."""
    master = cluster.start("master", "ASYNC_MASTER")
    slave = cluster.start("slave", "SLAVE")
    topic = "TopicHARebuilt"
    for i in range(20):
        assert send_raw(master, topic, b"old-%02d" % i).code == ResponseCode.SUCCESS

    async def scenario() -> None:
        async def copied() -> bool:
            return (await max_offsets(slave, topic, 1)) == [20]

        await until(copied, 10, "the old log on the slave")

    run(scenario, timeout_s=30)
    cluster.procs["master"].kill()
    shutil.rmtree(cluster.root / "master")
    master = cluster.start("master", "ASYNC_MASTER")
    for i in range(40):
        assert send_raw(master, topic, b"new-%02d" % i).code == ResponseCode.SUCCESS

    async def refused() -> None:
        async def said() -> bool:
            return "differs from its master's" in cluster.log("slave")

        await until(said, 15, "the slave refusing the rebuilt master's log")

    run(refused, timeout_s=30)
    bodies = [m.body for m in run_sync(pull_head(slave, BROKER, topic, 0)).messages]
    assert bodies == [b"old-%02d" % i for i in range(20)]


def test_a_slave_never_moves_a_consumers_offset_nor_answers_it_in_a_loop(
    cluster: Cluster,
) -> None:
    """A slave started after the master's first segment holds the log from the next one. With
    the master gone, a pull below the slave's start is answered at its own offset once its
    suspend time is over (not at once, which would have the consumer spin), and a pull past
    the slave's end waits there too."""
    master = cluster.start("master", "ASYNC_MASTER")
    topic = "TopicHALate"
    # 1.2 MB, past the first 1 MiB segment (below 4 KiB a body is not compressed).
    run(lambda: send_all(cluster.namesrv, topic, [os.urandom(3000) for _ in range(400)]))
    slave = cluster.start("slave", "SLAVE")
    ends = [max_offset(master, topic, q) for q in range(4)]

    async def caught_up() -> None:
        async def same() -> bool:
            return await max_offsets(slave, topic) == ends

        await until(same, 15, "the slave's log")

    run(caught_up, timeout_s=30)
    cluster.procs["master"].kill()

    def pull(offset: int, suspend_ms: int) -> tuple[float, Any]:
        ext = {
            "consumerGroup": "CG_HA_LATE", "topic": topic, "queueId": "0",
            "queueOffset": str(offset), "maxMsgNums": "32", "sysFlag": "6",
            "commitOffset": "0", "suspendTimeoutMillis": str(suspend_ms),
            "subscription": "*", "subVersion": "0", "expressionType": "TAG",
        }  # fmt: skip
        started = time.monotonic()
        answer = remoting_call(slave, RequestCode.PULL_MESSAGE, ext)
        return time.monotonic() - started, answer

    low = int(pull(0, 0)[1].ext_fields["minOffset"])
    assert low > 0, "the slave should start after the master's first segment"
    waited, answer = pull(0, 1500)
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert answer.ext_fields["nextBeginOffset"] == "0"
    assert waited >= 1.4
    waited, answer = pull(ends[0] + 10, 1500)
    assert answer.code == ResponseCode.PULL_NOT_FOUND
    assert answer.ext_fields["nextBeginOffset"] == str(ends[0] + 10)
    assert waited >= 1.4
    got = pull(low, 0)[1]
    assert got.code == ResponseCode.SUCCESS


def test_a_message_failed_on_the_slave_is_retried_in_place_and_counted(cluster: Cluster) -> None:
    """With the master away nobody takes a send-back: the client retries the message itself
    after 5 s, counting the delivery as RocketMQ's client does."""
    master = cluster.start("master", "ASYNC_MASTER")
    slave = cluster.start("slave", "SLAVE")
    topic = "TopicHARetry"
    assert send_raw(master, topic, b"fail once").code == ResponseCode.SUCCESS
    seen: list[tuple[bytes, int]] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeStatus:
        seen.extend((m.body, m.reconsume_times) for m in msgs)
        return ConsumeStatus.RECONSUME_LATER if len(seen) == 1 else ConsumeStatus.CONSUME_SUCCESS

    async def scenario() -> None:
        async def copied() -> bool:
            return (await max_offsets(slave, topic, 1)) == [1]

        await until(copied, 10, "the message on the slave")
        cluster.procs["master"].kill()
        consumer = PushConsumer(
            "CG_HA_RETRY",
            client_config=fast_config(cluster.namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(topic, "*", listener)
        await consumer.start()
        try:
            await eventually(lambda: len(seen) >= 2, 20, what="the retry")
        finally:
            await consumer.shutdown()

    run(scenario, timeout_s=60)
    assert seen[:2] == [(b"fail once", 0), (b"fail once", 1)]


def test_a_sync_master_answers_flush_slave_timeout_while_its_slave_is_stopped(
    cluster: Cluster,
) -> None:
    """SIGSTOP the slave: its connection stays, its reports stop. Sends are stored and
    answered FLUSH_SLAVE_TIMEOUT after syncFlushTimeout, each of many in flight; once the
    slave runs again it catches up, and sends are answered SEND_OK."""
    master = cluster.start("master", "SYNC_MASTER", "syncFlushTimeout=1000")
    slave = cluster.start("slave", "SLAVE")
    topic = "TopicHAStopped"

    async def scenario() -> None:
        await eventually(
            lambda: "replicating to slave" in cluster.log("master"), 10, what="a slave"
        )
        async with Producer("PG_HA_STOPPED", client_config=fast_config(cluster.namesrv)) as p:
            assert (await p.send(Message(topic, b"before"))).status == SendStatus.OK
            os.kill(cluster.procs["slave"].proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                stopped = await asyncio.gather(
                    *(p.send(Message(topic, b"while stopped %d" % i)) for i in range(20))
                )
                waited = time.monotonic() - started
            finally:
                os.kill(cluster.procs["slave"].proc.pid, signal.SIGCONT)
            assert {r.status for r in stopped} == {SendStatus.FLUSH_SLAVE_TIMEOUT}
            assert waited >= 0.9
            ends = await max_offsets(master, topic)
            assert sum(ends) == 21

            async def caught_up() -> bool:
                return await max_offsets(slave, topic) == ends

            await until(caught_up, 15, "the slave after SIGCONT")
            assert (await p.send(Message(topic, b"after"))).status == SendStatus.OK

    run(scenario, timeout_s=60)


def test_an_idle_slave_stays_connected_through_heartbeats(cluster: Cluster) -> None:
    """Heartbeat frames (no bytes) keep an idle link: a SYNC_MASTER's first send after a quiet
    spell finds its slave there."""
    beat = "haSendHeartbeatInterval=200"
    master = cluster.start("master", "SYNC_MASTER", beat)
    cluster.start("slave", "SLAVE", beat)
    topic = "TopicHAIdle"

    async def scenario() -> None:
        await eventually(
            lambda: "replicating to slave" in cluster.log("master"), 10, what="a slave"
        )
        await asyncio.sleep(1.5)  # several heartbeats, nothing sent
        for _ in range(3):
            answer = await asyncio.to_thread(send_raw, master, topic, b"after a quiet spell")
            assert answer.code == ResponseCode.SUCCESS
            await asyncio.sleep(0.5)

    run(scenario, timeout_s=30)
    assert "refused" not in cluster.log("slave")
    assert cluster.log("master").count("replicating to slave") == 1
