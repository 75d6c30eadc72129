"""pyrmq's asyncio PushConsumer mixed with the official RocketMQ client (``rocketmq==0.4.4``,
C++ 1.2.3) against a real ``pyrmq serve``: what the official producer sends arrives intact, and
an official push consumer and ours share one group's queues without losing anything."""

from __future__ import annotations

import asyncio
import collections
import functools
import platform
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests import helpers
from tests.helpers import fast_config

from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.message import Message, MessageExt, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer

from .rmq_client import run_producer, start_push_consumer
from .servers import create_topic, serving

pytestmark = [
    pytest.mark.compat,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(name server, broker) of one ``pyrmq serve`` on free ports."""
    with serving(tmp_path_factory.mktemp("serve")) as server:
        namesrv, broker = server.addresses()
        yield namesrv, broker


run = functools.partial(helpers.run, timeout_s=90.0)
eventually = functools.partial(helpers.eventually, timeout_s=30.0, interval_s=0.05)


class Collect:
    """A listener that keeps every message it is given, taking ``delay_s`` over each."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.msgs: list[MessageExt] = []
        self.delay_s = delay_s

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        if self.delay_s:
            time.sleep(self.delay_s * len(msgs))
        with self.lock:
            self.msgs.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS


def test_messages_from_the_official_producer_reach_our_push_consumer_intact(
    serve: tuple[str, str],
) -> None:
    namesrv, broker = serve
    topic = "TopicFromCpp"
    create_topic(broker, topic, 4)
    specs: list[dict[str, Any]] = [
        {
            "body": f"cpp-body-{i}" + "é" * (i % 3),
            "tags": f"Tag{i % 2}",
            "keys": f"key-{i} alt-{i}",
            "properties": {"custom": f"v{i}", "region": "eu"},
        }
        for i in range(30)
    ]
    sent = run_producer(namesrv, topic, specs)
    assert [s["status"] for s in sent] == ["SEND_OK"] * len(specs)

    async def scenario() -> None:
        got = Collect()
        c = PushConsumer(
            "CG_FROM_CPP",
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        c.subscribe(topic, "*", got)
        await c.start()
        try:
            await eventually(lambda: len(got.msgs) >= len(specs), what="every message")
            await asyncio.sleep(1.0)
        finally:
            await c.shutdown()
        assert len(got.msgs) == len(specs)
        by_id = {m.id: m for m in got.msgs}
        for spec, result in zip(specs, sent, strict=True):
            m = by_id[result["msg_id"]]
            assert m.topic == topic
            assert m.body == spec["body"].encode()
            assert m.tags == spec["tags"]
            assert m.keys == spec["keys"]
            assert m.properties["custom"] == spec["properties"]["custom"]
            assert m.properties["region"] == "eu"
            assert m.queue_offset == result["queue_offset"]
            assert m.reconsume_times == 0

    run(scenario)


@pytest.mark.slow
def test_official_and_pyrmq_push_consumers_share_a_group_and_lose_nothing(
    serve: tuple[str, str],
) -> None:
    namesrv, broker = serve
    topic, group, count = "TopicMixedGroup", "CG_MIXED", 400
    create_topic(broker, topic, 8)

    with start_push_consumer(namesrv, topic, group=group, instance_name="cpp", timeout=100) as cpp:

        async def scenario() -> None:
            ours = Collect()
            c = PushConsumer(group, client_config=fast_config(namesrv))
            c.subscribe(topic, "*", ours)
            await c.start()
            try:
                await eventually(
                    lambda: len([q for q in c.assigned_queues() if q.topic == topic]) == 4,
                    what="our consumer holds half of the 8 queues",
                )
                # The official client rebalances when the broker tells it the group changed;
                # give it time to take the other half.
                await asyncio.sleep(3.0)
                async with Producer("PG_MIXED", client_config=fast_config(namesrv)) as producer:
                    for i in range(count):
                        await producer.send(Message(topic, f"mx{i}".encode()))
                        if i % 50 == 49:
                            await asyncio.sleep(0.1)
                want = {f"mx{i}".encode() for i in range(count)}

                def everything() -> bool:
                    theirs = {m["body"] for m in cpp.messages()}
                    return {m.body for m in ours.msgs} | theirs >= want

                await eventually(
                    everything, timeout_s=40, what="every message consumed by one of the two"
                )
                await asyncio.sleep(1.0)
                mine = [m.body for m in ours.msgs]
                theirs = [m["body"] for m in cpp.messages()]
                assert set(mine) | set(theirs) == want
                assert mine, "our consumer got nothing"
                assert theirs, "the official consumer got nothing"
                # Each queue went to one of them: no message consumed twice.
                both = collections.Counter(mine + theirs)
                assert max(both.values()) == 1, [b for b, n in both.items() if n > 1][:20]
                our_queues = {m.queue_id for m in ours.msgs}
                their_queues = {m["queue_id"] for m in cpp.messages()}
                assert not our_queues & their_queues
                assert len(our_queues) == len(their_queues) == 4
            finally:
                await c.shutdown()

        started = time.monotonic()
        run(scenario)
        assert time.monotonic() - started < 90


def test_an_official_consumer_joining_mid_backlog_takes_its_queues_without_duplicates(
    serve: tuple[str, str],
) -> None:
    """Our consumer is busy with a backlog on all 8 queues when the official one joins. Ours
    consumes what it was delivered on the queues it gives away, commits and unlocks them; the
    broker holds the official client's pulls until then, and moves it to the committed offset:
    each message is consumed once."""
    namesrv, broker = serve
    topic, group, count = "TopicMixedHandOver", "CG_MIXED_HAND_OVER", 1200
    create_topic(broker, topic, 8)

    async def scenario() -> None:
        async with Producer("PG_MIXED_HAND_OVER", client_config=fast_config(namesrv)) as producer:
            for start in range(0, count, 100):
                sent = await asyncio.gather(
                    *(
                        producer.send(Message(topic, f"ho{i}".encode()))
                        for i in range(start, start + 100)
                    )
                )
                assert all(r.status is SendStatus.OK for r in sent)
        ours = Collect(delay_s=0.002)
        c = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_thread_max=2,
            pull_threshold_for_queue=40,
        )
        c.subscribe(topic, "*", ours)
        await c.start()
        try:
            await eventually(lambda: len(ours.msgs) >= 150, what="our consumer busy")
            with start_push_consumer(
                namesrv, topic, group=group, instance_name="cpp", timeout=100
            ) as cpp:
                want = {f"ho{i}".encode() for i in range(count)}

                def everything() -> bool:
                    theirs = {m["body"] for m in cpp.messages()}
                    return {m.body for m in ours.msgs} | theirs >= want

                await eventually(everything, timeout_s=60, what="every message consumed")
                await asyncio.sleep(1.0)
                cpp_msgs = cpp.messages()
                theirs = [m["body"] for m in cpp_msgs]
        finally:
            await c.shutdown()
        mine = [m.body for m in ours.msgs]
        assert theirs, "the official consumer got nothing"
        both = collections.Counter(mine + theirs)
        assert set(both) == want
        duplicated = sorted(
            (m["queue_id"], m["queue_offset"]) for m in cpp_msgs if both[m["body"]] > 1
        )
        assert not duplicated, f"{len(duplicated)} (queue, offset) consumed by both: {duplicated}"

    helpers.run(scenario, 110)


def test_official_and_pyrmq_orderly_consumers_split_a_group_through_the_broker_locks(
    serve: tuple[str, str],
) -> None:
    """Our orderly consumer holds all 8 queues; the official orderly consumer joins the group.
    Ours gives up half, committing and unlocking each, and the official one locks them: each
    queue's messages are consumed by one of the two, in offset order, none twice."""
    namesrv, broker = serve
    topic, group, count = "TopicMixedOrderly", "CG_MIXED_ORDERLY", 400
    create_topic(broker, topic, 8)

    async def scenario() -> None:
        ours: list[MessageExt] = []

        def listener(msgs: list[MessageExt], ctx: Any) -> None:
            ours.extend(msgs)

        c = PushConsumer(group, client_config=fast_config(namesrv), orderly=True)
        c.subscribe(topic, "*", listener)
        await c.start()
        try:
            await eventually(
                lambda: len([q for q in c.assigned_queues() if q.topic == topic]) == 8,
                what="our consumer holds every queue",
            )
            with start_push_consumer(
                namesrv, topic, group=group, orderly=True, instance_name="cpp", timeout=100
            ) as cpp:
                await eventually(
                    lambda: len([q for q in c.assigned_queues() if q.topic == topic]) == 4,
                    what="our consumer gave up half of the queues",
                )
                await asyncio.sleep(3.0)  # the official client locks what it was given
                async with Producer("PG_MIXED_ORDERLY", client_config=fast_config(namesrv)) as p:
                    for i in range(count):
                        await p.send_orderly(Message(topic, f"mo{i}".encode()), i % 8)
                want = {f"mo{i}".encode() for i in range(count)}

                def everything() -> bool:
                    return {m.body for m in ours} | {m["body"] for m in cpp.messages()} >= want

                await eventually(everything, timeout_s=40, what="every message consumed")
                await asyncio.sleep(1.0)
                theirs = cpp.messages()
        finally:
            await c.shutdown()
        both = collections.Counter([m.body for m in ours] + [m["body"] for m in theirs])
        assert set(both) == want
        assert max(both.values()) == 1, [b for b, n in both.items() if n > 1][:20]
        by_queue: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
        for m in ours:
            by_queue[("ours", m.queue_id)].append(m.queue_offset)
        for d in theirs:
            by_queue[("cpp", d["queue_id"])].append(d["queue_offset"])
        for offsets in by_queue.values():
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        our_queues = {q for who, q in by_queue if who == "ours"}
        their_queues = {q for who, q in by_queue if who == "cpp"}
        assert len(our_queues) == len(their_queues) == 4
        assert not our_queues & their_queues

    run(scenario)
