"""The asyncio Producer against an in-process name server and one or two brokers: what it
sends is read back from the brokers' stores (and through PULL), byte for byte."""

from __future__ import annotations

import asyncio
import doctest
import functools
import itertools
import random
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
import zstandard
from tests import helpers
from tests.helpers import eventually, fast_config, register_broker_request
from tests.integration.client_cluster import client_cluster

from pyrmq import _core
from pyrmq.broker.state.topics import PERM_READ
from pyrmq.client import fault as fault_module
from pyrmq.client import producer as producer_module
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.errors import (
    ClientStateError,
    ConfigError,
    InvalidTopicError,
    MessageIllegalError,
    MessageTooLargeError,
    NoRouteError,
    PropertiesTooLargeError,
    RemotingError,
    SendError,
    SystemTopicError,
)
from pyrmq.remoting.headers import PullMessageRequestHeader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


run = functools.partial(helpers.run, timeout_s=30)


def producer(c: Any, group: str = "PG", **options: Any) -> Producer:
    return Producer(group, c.namesrv_addr, **options)


async def pull_all(p: Producer, c: Any, mq: MessageQueue, offset: int = 0) -> list[MessageExt]:
    """The queue's messages from ``offset`` on, through PULL_MESSAGE as a consumer reads them."""
    header = PullMessageRequestHeader.immediate("CG_CHECK", mq.topic, mq.queue_id, offset)
    addr = c.broker(mq.broker_name).address
    result = await p.instance.api.pull(addr, mq.broker_name, header, 5.0)
    return result.messages


# --- single sends ----------------------------------------------------------------------------


def test_send_stores_body_tags_keys_properties_uniq_key_and_flag_exactly(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicSync", 4)
            async with producer(c) as p:
                results: list[SendResult] = []
                sent: list[Message] = []
                for i in range(8):
                    msg = Message(
                        "TopicSync",
                        f"body-{i}".encode(),
                        tags=f"Tag{i % 2}",
                        keys=[f"key-{i}", f"other-{i}"],
                        properties={"custom": f"v{i}", "region": "eu"},
                        flag=i * 7,
                    )
                    results.append(await p.send(msg))
                    sent.append(msg)
                stored = {m.uniq_key: m for m in c.stored("TopicSync")}
                assert len(stored) == 8
                for i, (msg, r) in enumerate(zip(sent, results, strict=True)):
                    assert r.status is SendStatus.OK
                    assert len(r.msg_id) == 32
                    m = stored[r.msg_id]
                    assert m.body == f"body-{i}".encode()
                    assert m.tags == f"Tag{i % 2}"
                    assert m.keys == [f"key-{i}", f"other-{i}"]
                    assert m.flag == i * 7
                    assert m.sys_flag == 0
                    assert m.properties == {
                        "TAGS": f"Tag{i % 2}",
                        "KEYS": f"key-{i} other-{i}",
                        "custom": f"v{i}",
                        "region": "eu",
                        "UNIQ_KEY": r.msg_id,
                    }
                    assert msg.properties["UNIQ_KEY"] == r.msg_id
                    assert (m.queue_id, m.queue_offset) == (r.message_queue.queue_id, r.offset)
                    assert r.message_queue == MessageQueue("TopicSync", "broker-a", m.queue_id)
                    assert m.msg_id == r.offset_msg_id
                    assert m.store_host == c.broker(0).address
                    assert m.born_host.startswith("127.0.0.1:")
                # The same messages through PULL, as a consumer gets them.
                got = await pull_all(p, c, results[0].message_queue)
                first = got[0]
                assert (first.id, first.body, first.tags, first.keys) == (
                    results[0].msg_id,
                    b"body-0",
                    "Tag0",
                    "key-0 other-0",
                )
                assert first.get_property("custom") == "v0"
                assert first.offset_msg_id == results[0].offset_msg_id

    run(scenario)


def test_send_to_an_unknown_topic_goes_through_tbw102_then_uses_the_registered_route(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            assert c.routed_queues("TopicFresh") == {}
            config = fast_config(c.namesrv_addr)
            async with Producer("PG", client_config=config, default_topic_queue_nums=3) as p:
                first = await p.send(Message("TopicFresh", b"first"))
                assert first.status is SendStatus.OK
                assert first.message_queue.queue_id < 3
                # The broker created it with the producer's queue count and registered it.
                config = c.broker(0).topics.get("TopicFresh")
                assert (config.write_queue_nums, config.read_queue_nums) == (3, 3)
                await eventually(
                    lambda: c.routed_queues("TopicFresh") == {"broker-a": 3}, 5, "registration"
                )
                # The next route refresh finds it.
                await eventually(lambda: "TopicFresh" in p.instance.routes, 5, "route refresh")
                second = await p.send(Message("TopicFresh", b"second"))
                assert second.status is SendStatus.OK
                assert "TopicFresh" in p.instance.routes
                queues = await p.fetch_publish_queues("TopicFresh")
                assert queues == [MessageQueue("TopicFresh", "broker-a", i) for i in range(3)]
                assert sorted(m.body for m in c.stored("TopicFresh")) == [b"first", b"second"]

    run(scenario)


def test_a_new_topic_is_created_on_every_broker_that_auto_creates_topics(tmp_path: Path) -> None:
    """As RocketMQ's producer, TBW102's route stands for an unknown topic until the next route
    refresh, so the first sends reach, and create the topic on, every such broker (the route
    of the first broker to register it no longer takes the others' place at once)."""

    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c, producer(c) as p:
            for i in range(8):
                await p.send(Message("TopicSpread", b"spread-%d" % i))
            assert [b.topics.get("TopicSpread") is not None for b in c.brokers] == [True, True]
            await eventually(
                lambda: c.routed_queues("TopicSpread") == {"broker-a": 4, "broker-b": 4},
                5,
                "both registrations",
            )
            assert len(c.stored("TopicSpread")) == 8

    run(scenario)


def test_a_topic_whose_queues_take_no_sends_is_refused_not_created_elsewhere(
    tmp_path: Path,
) -> None:
    """A topic the name servers route with no writable queue gets "no route" at the producer,
    as in RocketMQ; it is not sent through TBW102, which had another broker create it."""

    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicReadOnly", brokers=["broker-a"], perm=PERM_READ)
            async with producer(c) as p:
                with pytest.raises(NoRouteError, match="none of its queues takes sends"):
                    await p.send(Message("TopicReadOnly", b"nowhere"))
            assert c.broker("broker-b").topics.get("TopicReadOnly") is None
            assert c.routed_queues("TopicReadOnly") == {"broker-a": 4}

    run(scenario)


def test_a_broker_drained_with_wipe_write_perm_takes_no_more_sends(tmp_path: Path) -> None:
    """Once the route refresh brings the name servers' read-only route, the producer stops
    sending to the topic's queues there (it kept the old route, and kept writing)."""

    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicDrained", queue_nums=2)
            config = fast_config(c.namesrv_addr)
            async with Producer("PG", client_config=config) as p, Admin(c.namesrv_addr) as a:
                assert (await p.send(Message("TopicDrained", b"before"))).status is SendStatus.OK

                async def until_sends(taken: bool) -> None:
                    """Sends until a send is taken (or refused), for 5 s at most."""
                    for _ in range(50):
                        try:
                            await p.send(Message("TopicDrained", b"probe"))
                        except NoRouteError:
                            if not taken:
                                return
                        else:
                            if taken:
                                return
                        await asyncio.sleep(0.1)
                    raise AssertionError(f"sends not {'taken' if taken else 'refused'} in 5 s")

                await a.wipe_write_perm("broker-a")
                await until_sends(taken=False)
                drained = len(c.stored("TopicDrained"))
                with pytest.raises(NoRouteError):
                    await p.send(Message("TopicDrained", b"still during"))
                assert len(c.stored("TopicDrained")) == drained
                await a.add_write_perm("broker-a")
                await until_sends(taken=True)

    run(scenario)


def test_batch_is_stored_in_one_queue_in_order_with_the_returned_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicBatch", 4)
            async with producer(c) as p:
                msgs = [
                    Message(
                        "TopicBatch",
                        f"b{i}".encode() * (i + 1),
                        tags="TagB",
                        keys=[f"kb{i}"],
                        properties={"n": str(i)},
                        flag=i,
                    )
                    for i in range(10)
                ]
                r = await p.send_batch(msgs)
                ids = r.msg_id.split(",")
                assert len(ids) == 10
                assert len(set(ids)) == 10
                assert ids == [m.properties["UNIQ_KEY"] for m in msgs]
                assert len(r.offset_msg_id.split(",")) == 10
                stored = c.stored("TopicBatch")
                assert [m.uniq_key for m in stored] == ids
                assert {m.queue_id for m in stored} == {r.message_queue.queue_id}
                assert [m.queue_offset for m in stored] == list(range(r.offset, r.offset + 10))
                for i, m in enumerate(stored):
                    assert m.body == f"b{i}".encode() * (i + 1)
                    assert (m.tags, m.keys, m.flag) == ("TagB", [f"kb{i}"], i)
                    assert m.properties["n"] == str(i)
                # A second batch lands whole in one queue too, after the first if it is the same.
                r2 = await p.send_batch([Message("TopicBatch", b"x"), Message("TopicBatch", b"y")])
                again = c.stored_in(c.broker(0), "TopicBatch", r2.message_queue.queue_id)
                assert [m.body for m in again[-2:]] == [b"x", b"y"]
                assert [m.queue_offset for m in again[-2:]] == [r2.offset, r2.offset + 1]
                # To a chosen queue.
                mq = MessageQueue("TopicBatch", "broker-a", 3)
                r3 = await p.send_batch([Message("TopicBatch", b"q3")], queue=mq)
                assert r3.message_queue == mq
                assert c.stored_in(c.broker(0), "TopicBatch", 3)[-1].body == b"q3"

    run(scenario)


def test_orderly_sends_keep_a_sharding_key_on_one_queue_and_spread_keys(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicOrder", 4)
            async with producer(c) as p:
                queues = await p.fetch_publish_queues("TopicOrder")
                assert len(queues) == 8
                by_key: dict[object, set[MessageQueue]] = {}
                keys: list[object] = [*range(8), *(f"order-{i}" for i in range(8))]
                for seq in range(4):
                    for key in keys:
                        body = f"{key}/{seq}".encode()
                        r = await p.send_orderly(Message("TopicOrder", body), key)
                        by_key.setdefault(key, set()).add(r.message_queue)
                # Same key, same queue; ints pick queues[key % n], strings Java's hash.
                assert all(len(qs) == 1 for qs in by_key.values())
                for i in range(8):
                    assert by_key[i] == {queues[i]}
                    s = f"order-{i}"
                    assert by_key[s] == {queues[abs(_core.java_string_hash(s)) % 8]}
                assert len({next(iter(by_key[f"order-{i}"])) for i in range(8)}) >= 3
                # Each key's messages are stored in send order in its queue.
                for key, (mq,) in by_key.items():
                    stored = c.stored_in(c.broker(mq.broker_name), "TopicOrder", mq.queue_id)
                    mine = [m.body for m in stored if m.body.startswith(f"{key}/".encode())]
                    assert mine == [f"{key}/{seq}".encode() for seq in range(4)]

    run(scenario)


def test_oneway_sends_are_stored(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicOneway", 4)
            async with producer(c) as p:
                for i in range(6):
                    await p.send_oneway(Message("TopicOneway", f"ow{i}".encode(), tags="T"))
                mq = MessageQueue("TopicOneway", "broker-a", 2)
                await p.send_oneway(Message("TopicOneway", b"to-queue-2"), queue=mq)
                await eventually(lambda: len(c.stored("TopicOneway")) == 7, 5, "7 messages")
                stored = c.stored("TopicOneway")
                assert sorted(m.body for m in stored) == sorted(
                    [f"ow{i}".encode() for i in range(6)] + [b"to-queue-2"]
                )
                assert all(m.uniq_key for m in stored)
                assert [m.queue_id for m in stored if m.body == b"to-queue-2"] == [2]

    run(scenario)


def test_send_async_runs_the_callbacks_and_shutdown_waits_for_pending_sends(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicAsync", 4)
            ok: list[SendResult] = []
            errors: list[BaseException] = []
            async with producer(c) as p:
                tasks = [
                    p.send_async(Message("TopicAsync", f"a{i}".encode()), ok.append, errors.append)
                    for i in range(20)
                ]
                results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
                assert sorted(r.msg_id for r in ok) == sorted(r.msg_id for r in results)
                assert errors == []
                # A failing send reaches on_exception, and a raising callback is only logged.
                failed = p.send_async(Message("TopicAsync", b""), ok.append, errors.append)
                await asyncio.wait([failed], timeout=5)
                assert len(errors) == 1
                assert isinstance(errors[0], MessageIllegalError)

                def boom(_: SendResult) -> None:
                    raise RuntimeError("callback bug")

                await p.send_async(Message("TopicAsync", b"cb"), boom)
                # Fire and forget: the producer keeps these tasks and shutdown waits for them.
                for i in range(20):
                    p.send_async(Message("TopicAsync", f"late{i}".encode()), ok.append)
            assert len(ok) == 40
            assert len(c.stored("TopicAsync")) == 41
            with pytest.raises(ClientStateError):
                p.send_async(Message("TopicAsync", b"after shutdown"))

    run(scenario)


def test_large_bodies_are_compressed_on_the_wire_and_inflated_by_message_ext(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicBig", 1)
            async with producer(c) as p:
                big = b"".join(b"line %05d of a compressible body\n" % i for i in range(400))
                assert len(big) > 4096
                small, edge = b"s" * 4095, b"e" * 4096
                noise = random.Random(7).randbytes(8192)
                r_big = await p.send(Message("TopicBig", big, tags="Big", keys=["kbig"]))
                await p.send(Message("TopicBig", small))
                await p.send(Message("TopicBig", noise))
                await p.send(Message("TopicBig", edge))
                stored = c.stored("TopicBig")
                m_big, m_small, m_noise, m_edge = stored
                assert m_big.uniq_key == r_big.msg_id
                # Stored as it came over the wire: compressed, with sysflag bit 0.
                assert m_big.sys_flag & 0x1
                assert len(m_big.body) < len(big) // 4
                assert zlib.decompress(m_big.body) == big
                assert MessageExt.from_stored(m_big, "broker-a").body == big
                # Under 4 KiB, or not smaller once compressed: sent as it is.
                assert (m_small.sys_flag, m_small.body) == (0, small)
                assert (m_noise.sys_flag, m_noise.body) == (0, noise)
                # From 4096 bytes on, as the official clients do.
                assert m_edge.sys_flag == 1
                assert zlib.decompress(m_edge.body) == edge
                got = await pull_all(p, c, MessageQueue("TopicBig", "broker-a", 0))
                assert [g.body for g in got] == [big, small, noise, edge]
                assert (got[0].id, got[0].tags, got[0].keys) == (r_big.msg_id, "Big", "kbig")

    run(scenario)


def test_lz4_and_zstd_bodies_are_flagged_as_rocketmq_4_9_4_flags_them_and_read_back(
    tmp_path: Path,
) -> None:
    big = b"".join(b"line %05d of a compressible body\n" % i for i in range(4000))
    reference = {
        "lz4": (0x101, lz4.frame.decompress),
        "zstd": (0x201, lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)),
    }

    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("TopicPacked", 1)
            for kind, (flag, decompress) in reference.items():
                async with producer(c, f"PG_{kind}", compress_type=kind.upper()) as p:
                    await p.send(Message("TopicPacked", big))
                stored = c.stored("TopicPacked")[-1]
                assert stored.sys_flag == flag
                assert len(stored.body) < len(big) // 4
                assert decompress(stored.body) == big
            async with producer(c) as p:
                got = await pull_all(p, c, MessageQueue("TopicPacked", "broker-a", 0))
            assert [g.body for g in got] == [big, big]
        with pytest.raises(ConfigError, match="snappy"):
            Producer("PG", "127.0.0.1:9876", compress_type="snappy")

    run(scenario)


def test_client_side_checks_raise_typed_errors_and_send_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            broker = c.broker(0)
            async with producer(c, max_message_size=64 * 1024) as p:
                ok = Message("TopicChecks", b"fine")
                delayed = Message("TopicChecks", b"later", delay_time_level=3)
                cases: list[tuple[Callable[[], Awaitable[object]], type[Exception]]] = [
                    (lambda: p.send(Message("TopicChecks", b"")), MessageIllegalError),
                    (lambda: p.send(Message("TopicChecks", b"x" * 65537)), MessageTooLargeError),
                    (lambda: p.send(Message("bad topic", b"x")), InvalidTopicError),
                    (lambda: p.send(Message("T" * 128, b"x")), InvalidTopicError),
                    (lambda: p.send(Message("SCHEDULE_TOPIC_XXXX", b"x")), SystemTopicError),
                    (
                        lambda: p.send(Message("TopicChecks", b"x", properties={"a\x01": "v"})),
                        MessageIllegalError,
                    ),
                    (
                        lambda: p.send(Message("TopicChecks", b"x", properties={"p": "y" * 40000})),
                        PropertiesTooLargeError,
                    ),
                    (lambda: p.send_batch([]), MessageIllegalError),
                    (
                        lambda: p.send_batch([ok, Message("TopicOther", b"x")]),
                        MessageIllegalError,
                    ),
                    (lambda: p.send_batch([ok, delayed]), MessageIllegalError),
                    (lambda: p.send_batch([ok, Message("TopicChecks", b"")]), MessageIllegalError),
                    (
                        lambda: p.send_batch([Message("TopicChecks", b"y" * 40000)] * 2),
                        MessageTooLargeError,
                    ),
                    (
                        lambda: p.send_batch([Message("%RETRY%G", b"x")]),
                        MessageIllegalError,
                    ),
                    (lambda: p.send_oneway(Message("TopicChecks", b"")), MessageIllegalError),
                    (
                        lambda: p.send_orderly(Message("bad/topic", b"x"), 1),
                        InvalidTopicError,
                    ),
                    (
                        lambda: p.send(ok, queue=MessageQueue("TopicOther", "broker-a", 0)),
                        MessageIllegalError,
                    ),
                    (
                        lambda: p.send(Message("TopicChecks", b"x", properties={"p": "\udc80"})),
                        MessageIllegalError,
                    ),
                    (
                        lambda: p.send_batch([Message("TopicChecks", b"x", flag=2**31)]),
                        MessageIllegalError,
                    ),
                    (lambda: p.send(Message("Topic\udc80", b"x")), InvalidTopicError),
                ]
                for i, (call, error) in enumerate(cases):
                    with pytest.raises(error):
                        await call()
                    assert issubclass(error, MessageIllegalError), i
                # Nothing reached the broker: no connection, no record.
                assert broker.store.max_phy_offset == 0
                assert not broker.server.connections
                assert c.routed_queues("TopicChecks") == {}
                assert broker.topics.get("TopicChecks") is None

    run(scenario)


# --- several brokers -------------------------------------------------------------------------


def test_sends_go_round_robin_over_the_queues_of_two_brokers(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicRR", 4)
            async with producer(c) as p:
                results = [await p.send(Message("TopicRR", f"rr{i}".encode())) for i in range(24)]
                per_queue = Counter(r.message_queue for r in results)
                assert len(per_queue) == 8
                assert set(per_queue.values()) == {3}
                # Consecutive sends never hit the same queue twice in a row.
                assert all(
                    a.message_queue != b.message_queue for a, b in itertools.pairwise(results)
                )
                assert len(c.stored("TopicRR", brokers=["broker-a"])) == 12
                assert len(c.stored("TopicRR", brokers=["broker-b"])) == 12

    run(scenario)


def test_a_stopped_broker_is_avoided_then_used_again_after_it_restarts(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicFail", 2)
            addr_b = c.broker("broker-b").address
            async with producer(c, fault_isolation_s=1.0) as p:
                # Count the requests each broker gets (the spy only records, then sends).
                attempts: list[str] = []
                api = p.instance.api
                real_send = api.send

                async def recording_send(addr: str, *args: Any) -> SendResult:
                    attempts.append(addr)
                    return await real_send(addr, *args)

                api.send = recording_send  # type: ignore[method-assign]
                results: list[SendResult] = []
                stop = asyncio.Event()

                async def sender() -> None:
                    i = 0
                    while not stop.is_set():
                        results.append(await p.send(Message("TopicFail", f"f{i}".encode())))
                        i += 1
                        await asyncio.sleep(0.001)

                task = asyncio.create_task(sender())

                def brokers_used(since: int) -> set[str]:
                    return {r.message_queue.broker_name for r in results[since:]}

                await eventually(lambda: brokers_used(0) == {"broker-a", "broker-b"}, 5, "both")
                await c.stop_broker("broker-b")
                n, tried = len(results), len(attempts)
                await eventually(lambda: len(results) >= n + 40 or task.done(), 10, "40 sends")
                # Every send while b was down succeeded on a; b was tried about once (then
                # isolated), not every other send.
                assert brokers_used(n + 1) == {"broker-a"}
                assert not task.done()
                assert attempts[tried:].count(addr_b) <= 3
                assert p.faults is not None
                assert not p.faults.is_available("broker-b")
                await c.restart_broker("broker-b")
                m = len(results)
                await eventually(lambda: "broker-b" in brokers_used(m), 10, "b used again")
                stop.set()
                await asyncio.wait_for(task, 5)  # re-raises a SendError, if any
                # Every acknowledged message is stored once on the broker that acknowledged it.
                for name in ("broker-a", "broker-b"):
                    stored = [m.uniq_key for m in c.stored("TopicFail", brokers=[name])]
                    acked = [r.msg_id for r in results if r.message_queue.broker_name == name]
                    assert set(acked) <= set(stored)
                    assert len(set(stored)) == len(stored)

    run(scenario)


def test_every_broker_down_raises_a_send_error_with_the_cause(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicDown", 2)
            async with producer(c, send_timeout_s=2.0) as p:
                await p.send(Message("TopicDown", b"before"))
                await c.stop_broker(0)
                await c.stop_broker(1)
                with pytest.raises(SendError) as info:
                    await p.send(Message("TopicDown", b"lost"))
                assert isinstance(info.value.__cause__, RemotingError)
                assert "TopicDown" in str(info.value)
                assert p.faults is not None
                assert not p.faults.is_available("broker-a")
                assert not p.faults.is_available("broker-b")
                with pytest.raises(SendError) as oneway:
                    await p.send_oneway(Message("TopicDown", b"lost too"))
                assert isinstance(oneway.value.__cause__, RemotingError)
                mq = MessageQueue("TopicDown", "broker-a", 0)
                with pytest.raises(SendError):
                    await p.send(Message("TopicDown", b"to a queue"), queue=mq)

    run(scenario)


def test_route_refresh_picks_up_the_queues_a_topic_gains(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, brokers=2) as c:
            await c.create_topic("TopicGrow", 2, brokers=["broker-a"])
            config = ClientConfig(namesrv_addr=c.namesrv_addr, poll_name_server_interval_s=0.1)
            async with Producer("PG", client_config=config) as p:
                await p.send(Message("TopicGrow", b"one"))
                assert await p.fetch_publish_queues("TopicGrow") == [
                    MessageQueue("TopicGrow", "broker-a", i) for i in range(2)
                ]
                await c.create_topic("TopicGrow", 3, brokers=["broker-b"])
                await c.create_topic("TopicGrow", 4, brokers=["broker-a"])
                expected = [MessageQueue("TopicGrow", "broker-a", i) for i in range(4)] + [
                    MessageQueue("TopicGrow", "broker-b", i) for i in range(3)
                ]
                for _ in range(300):
                    if await p.fetch_publish_queues("TopicGrow") == expected:
                        break
                    await asyncio.sleep(0.01)
                assert await p.fetch_publish_queues("TopicGrow") == expected
                results = [await p.send(Message("TopicGrow", b"more")) for _ in range(14)]
                assert {r.message_queue for r in results} == set(expected)

    run(scenario)


def test_docstring_examples_of_the_producer_and_fault_modules() -> None:
    for module in (fault_module, producer_module):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0, module.__name__
        assert result.failed == 0, module.__name__


def test_routes_come_from_one_name_server_while_it_answers() -> None:
    """As RocketMQ's client, routes are asked of one name server while it answers, then of the
    next: two that disagree for a while (one restarted and not yet told of every broker) do
    not make a topic's route flap between their answers."""
    from pyrmq.namesrv import NameServer, NamesrvConfig
    from pyrmq.remoting.client import RemotingClient

    async def register(client: RemotingClient, namesrv: NameServer, broker: str) -> None:
        request = register_broker_request(broker, "127.0.0.1:1", {"TopicTwoViews": 1})
        await client.invoke(namesrv.address, request, 5.0)

    async def scenario() -> None:
        servers = [NameServer(NamesrvConfig(listen_port=0, kv_config_path=None)) for _ in "ab"]
        for ns in servers:
            await ns.start()
        client = RemotingClient()
        try:
            # The brokers registered while each name server was away from the other.
            await register(client, servers[0], "broker-seen-by-a")
            await register(client, servers[1], "broker-seen-by-b")
            addrs = ";".join(ns.address for ns in servers)
            async with Producer("PG_TWO_VIEWS", addrs) as p:
                views = {
                    tuple((await p.instance.fetch_route("TopicTwoViews")).brokers)  # type: ignore[union-attr]
                    for _ in range(12)
                }
                assert len(views) == 1
                [(in_use,)] = views
                # That one goes away: the other answers, and is kept to.
                await servers[0 if in_use == "broker-seen-by-a" else 1].stop()
                later = {
                    tuple((await p.instance.fetch_route("TopicTwoViews")).brokers)  # type: ignore[union-attr]
                    for _ in range(6)
                }
                assert len(later) == 1
                assert later != views
        finally:
            await client.close()
            for ns in servers:
                await ns.stop()

    run(scenario)
