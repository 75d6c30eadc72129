"""The asyncio PushConsumer against real ``pyrmq`` server processes, judged the way RocketMQ's
own integration tests judge a push consumer: exactly once in the normal case, balance across a
group (NormalMsgStaticBalanceIT), nothing lost when consumers join and crash
(DynamicAddAndCrashIT) or when a broker crashes, broadcasting with local offsets, tag filters,
where a new group starts, redelivery of failures, and flow control.

Consumers that are SIGKILLed run in child processes (``consumer_child.py``); the others run in
this process, each with its own client instance. Intervals are shortened through
``ClientConfig`` (rebalance and heartbeat 1 s, offsets persisted every 0.5 s).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import lz4.frame
import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import committed_offset, fast_config
from tests.integration.consumer_child import ConsumerChild

from pyrmq.client.api import ClientAPI, PullStatus
from pyrmq.client.consume_service import ConcurrentConsumeService, ConsumeContext, ConsumeStatus
from pyrmq.client.instance import FIRST_HEARTBEAT_S
from pyrmq.client.message import RETRY_PREFIX, Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.offset_store import LocalFileOffsetStore
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import BrokerError, ClientStateError, PyrmqError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


# --- helpers ------------------------------------------------------------------------------

run = helpers.run
eventually = functools.partial(helpers.eventually, timeout_s=20.0, interval_s=0.02)


class Recorder:
    """A listener that records every delivery (thread-safe); ``behaviour(msg)`` may block,
    raise or return a status."""

    def __init__(
        self, behaviour: Callable[[MessageExt], ConsumeStatus | None] | None = None
    ) -> None:
        self.behaviour = behaviour
        self.lock = threading.Lock()
        self.deliveries: list[tuple[MessageExt, MessageQueue]] = []
        self.done: list[MessageExt] = []

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for m in msgs:
            with self.lock:
                self.deliveries.append((m, ctx.message_queue))
            status = self.behaviour(m) if self.behaviour is not None else None
            if status is ConsumeStatus.RECONSUME_LATER:
                return status
        with self.lock:
            self.done.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    def ids(self) -> list[str]:
        with self.lock:
            return [m.id for m in self.done]

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.done]


def consumer(
    namesrv: str, group: str, topic: str, listener: Any, expression: str = "*", **options: Any
) -> PushConsumer:
    options.setdefault("client_config", fast_config(namesrv))
    c = PushConsumer(group, **options)
    c.subscribe(topic, expression, listener)
    return c


def backlog_consumers(
    namesrv: str, group: str, topic: str, recs: list[Recorder], **options: Any
) -> list[PushConsumer]:
    """One consumer of ``group`` per recorder, with 2 consume threads, reading ``topic`` from
    its first offset: a backlog for the hand-over tests."""
    return [
        consumer(
            namesrv,
            group,
            topic,
            r,
            consume_thread_max=2,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            **options,
        )
        for r in recs
    ]


async def send_bodies(namesrv: str, topic: str, bodies: list[bytes]) -> None:
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        for r in await asyncio.gather(*(producer.send(Message(topic, b)) for b in bodies)):
            assert r.status is SendStatus.OK


async def drain_from_first(
    namesrv: str,
    group: str,
    topic: str,
    listener: Any,
    *,
    threads: int,
    finished: Callable[[], bool],
) -> None:
    """Runs a consumer of ``topic`` from its first offset, with ``threads`` consume threads
    (or coroutine slots), until ``finished()``."""
    c = consumer(
        namesrv,
        group,
        topic,
        listener,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_thread_max=threads,
    )
    await c.start()
    try:
        await eventually(finished, what=f"{topic} consumed")
    finally:
        await c.shutdown()


def topic_queues(c: PushConsumer, topic: str) -> list[MessageQueue]:
    return [q for q in c.assigned_queues() if q.topic == topic]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One ``pyrmq serve`` for the module; each test uses its own topics and groups."""
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture
def addrs(server: Any) -> tuple[str, str]:
    """(name server, broker) of the module's server."""
    namesrv, broker = server.addresses()
    return namesrv, broker


# --- 1. exactly once ----------------------------------------------------------------------


@pytest.mark.parametrize("listener_kind", ["thread", "coroutine_batch_4"])
def test_every_message_arrives_exactly_once_with_body_tags_keys_and_properties(
    addrs: tuple[str, str], listener_kind: str
) -> None:
    """1000 messages over 4 queues to one consumer: each delivered once, as sent. The
    listener runs on the thread pool one message at a time, or as a coroutine with batches
    of up to 4."""
    namesrv, broker = addrs
    topic, count = f"TopicExactlyOnce_{listener_kind}", 1000
    create_topic(broker, topic, 4)
    big = b"compressible " * 1000  # above compress_over: sent zlib-compressed

    def make(i: int) -> Message:
        body = big + str(i).encode() if i % 100 == 0 else f"body-{i}-".encode() + bytes([i % 256])
        msg = Message(
            topic,
            body,
            tags=f"Tag{i % 3}",
            keys=[f"key-{i}", f"other-{i}"],
            properties={"seq": str(i), "note": "välue ✓"},
        )
        return msg

    async def scenario() -> None:
        rec = Recorder()
        batches: list[int] = []

        async def coroutine_listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            batches.append(len(msgs))
            await asyncio.sleep(0)
            rec(msgs, ctx)

        if listener_kind == "thread":
            c = consumer(namesrv, f"CG_EXACT_{listener_kind}", topic, rec)
        else:
            c = consumer(
                namesrv,
                f"CG_EXACT_{listener_kind}",
                topic,
                coroutine_listener,
                consume_message_batch_max_size=4,
            )
        await c.start()
        try:
            await eventually(lambda: len(topic_queues(c, topic)) == 4, what="4 queues taken")
            sent: dict[str, tuple[int, Any]] = {}
            async with Producer("PG_EXACT", client_config=fast_config(namesrv)) as producer:
                results = []
                for start in range(0, count, 50):
                    results += await asyncio.gather(
                        *(producer.send(make(i)) for i in range(start, start + 50))
                    )
            for i, r in enumerate(results):
                assert r.status is SendStatus.OK
                sent[r.msg_id] = (i, r)
            await eventually(lambda: len(rec.done) >= count, timeout_s=30, what=f"{count} consumed")
            await asyncio.sleep(1.0)  # a duplicate would arrive by now
        finally:
            await c.shutdown()
        assert len(rec.deliveries) == count
        if listener_kind != "thread":
            assert max(batches) == 4, collections.Counter(batches)
        ids = rec.ids()
        assert len(set(ids)) == count
        assert set(ids) == set(sent)
        per_queue = collections.Counter(m.queue_id for m in rec.done)
        assert sorted(per_queue) == [0, 1, 2, 3]
        for m in rec.done:
            i, result = sent[m.id]
            want = make(i)
            assert m.topic == topic
            assert m.body == want.body
            assert m.tags == f"Tag{i % 3}"
            assert m.keys == f"key-{i} other-{i}"
            assert m.properties["seq"] == str(i)
            assert m.properties["note"] == "välue ✓"
            assert m.reconsume_times == 0
            assert bool(m.stored.sys_flag & 1) == (i % 100 == 0)  # compressed on the wire
            assert (m.queue_id, m.queue_offset) == (
                result.message_queue.queue_id,
                result.queue_offset,
            )
            assert m.offset_msg_id == result.offset_msg_id

    run(scenario)


def test_async_for_gets_the_messages_and_ends_at_shutdown(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicAsyncFor"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        c = PushConsumer(
            "CG_ASYNC_FOR",
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        c.subscribe(topic)
        async with Producer("PG_ASYNC_FOR", client_config=fast_config(namesrv)) as producer:
            for i in range(20):
                await producer.send(Message(topic, f"a{i}".encode()))
        await c.start()
        got: list[bytes] = []

        async def iterate() -> None:
            async for m in c:
                got.append(m.body)

        task = asyncio.get_running_loop().create_task(iterate())
        await eventually(lambda: len(got) == 20, what="20 messages through async for")
        await c.shutdown()
        await asyncio.wait_for(task, 5)  # the loop ended with the consumer
        assert sorted(got) == sorted(f"a{i}".encode() for i in range(20))
        # Every message counts as consumed, the last one too (the loop asked for the next
        # one): the committed offsets cover all 20.
        offsets = [
            await committed_offset(broker, "CG_ASYNC_FOR", MessageQueue(topic, "broker-a", q))
            for q in range(2)
        ]
        assert sum(o or 0 for o in offsets) == 20, offsets

    run(scenario)


def test_the_message_an_async_for_body_holds_at_shutdown_is_delivered_again(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicAsyncForStop", "CG_ASYNC_FOR_STOP"
    create_topic(broker, topic, 1)

    def consumer_of_group() -> PushConsumer:
        c = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        c.subscribe(topic)
        return c

    async def scenario() -> None:
        await send_bodies(namesrv, topic, [b"m%d" % i for i in range(10)])
        first = consumer_of_group()
        await first.start()
        finished: list[bytes] = []
        holding = asyncio.Event()

        async def handle() -> None:
            async for m in first:
                if m.body == b"m5":
                    holding.set()
                    await asyncio.sleep(30)  # still at it when the consumer stops
                finished.append(m.body)

        task = asyncio.get_running_loop().create_task(handle())
        await asyncio.wait_for(holding.wait(), 10)
        await first.shutdown()
        task.cancel()
        assert finished == [b"m%d" % i for i in range(5)]

        second = consumer_of_group()
        await second.start()
        again: list[bytes] = []

        async def resume() -> None:
            async for m in second:
                again.append(m.body)

        task = asyncio.get_running_loop().create_task(resume())
        try:
            await eventually(lambda: b"m9" in again, what="the rest of the queue")
        finally:
            await second.shutdown()
            await asyncio.wait_for(task, 5)
        assert again == [b"m%d" % i for i in range(5, 10)]

    run(scenario)


# --- 2. load balance ----------------------------------------------------------------------


@pytest.mark.parametrize("consumer_count", [2, 4])
def test_clustering_consumers_share_the_load_evenly_without_duplicates(
    addrs: tuple[str, str], consumer_count: int
) -> None:
    """NormalMsgStaticBalanceIT: 8 queues, messages spread evenly; each consumer's count
    within 10 % of the mean."""
    namesrv, broker = addrs
    topic, group, count = f"TopicBalance{consumer_count}", f"CG_BALANCE_{consumer_count}", 800
    create_topic(broker, topic, 8)

    async def scenario() -> None:
        recs = [Recorder() for _ in range(consumer_count)]
        consumers = [consumer(namesrv, group, topic, r) for r in recs]
        for c in consumers:
            await c.start()
        try:

            def settled() -> bool:
                shares = [topic_queues(c, topic) for c in consumers]
                flat = [q for s in shares for q in s]
                return all(len(s) == 8 // consumer_count for s in shares) and len(set(flat)) == 8

            await eventually(settled, timeout_s=20, what="an even, disjoint assignment")
            # The producer's own round robin spreads them over the 8 queues.
            async with Producer("PG_BALANCE", client_config=fast_config(namesrv)) as producer:
                for start in range(0, count, 40):
                    await asyncio.gather(
                        *(
                            producer.send(Message(topic, f"b{i}".encode()))
                            for i in range(start, start + 40)
                        )
                    )
            await eventually(
                lambda: sum(len(r.done) for r in recs) >= count, timeout_s=30, what="all consumed"
            )
            await asyncio.sleep(1.0)
        finally:
            for c in consumers:
                await c.shutdown()
        counts = [len(r.done) for r in recs]
        mean = count / consumer_count
        assert all(abs(n - mean) <= 0.1 * mean for n in counts), counts
        every = [b for r in recs for b in r.bodies()]
        assert len(every) == count, f"duplicates: {len(every) - len(set(every))}"
        assert sorted(every) == sorted(f"b{i}".encode() for i in range(count))

    run(scenario)


# --- 3. consumers joining and crashing ----------------------------------------------------


@pytest.mark.slow
def test_consumers_joining_and_crashing_lose_nothing(
    addrs: tuple[str, str], tmp_path: Path
) -> None:
    """DynamicAddAndCrashIT: consumer A runs, B and C join mid-stream, B is SIGKILLed; every
    message is consumed by someone. Duplicates may only be messages the crashed consumer had
    consumed (its last progress was not committed) or ones taken over in a rebalance."""
    namesrv, broker = addrs
    topic, group, count = "TopicDynamic", "CG_DYNAMIC", 900
    create_topic(broker, topic, 8)
    common = {"namesrv": namesrv, "topic": topic, "group": group}
    children: dict[str, Any] = {}

    def start(name: str) -> Any:
        child = ConsumerChild(tmp_path / f"{name}.jsonl", instance_name=name, **common)
        children[name] = child
        return child

    sent: list[str] = []

    async def scenario() -> None:
        a = start("A").wait_started()
        a.wait_until(lambda: len(a.queues() or []) == 8, 20, "A owns the 8 queues")
        async with Producer("PG_DYNAMIC", client_config=fast_config(namesrv)) as producer:
            for i in range(count):
                if i == 150:
                    start("B")
                elif i == 300:
                    start("C")
                elif i == 550:
                    b = children["B"]
                    await eventually(b.messages, timeout_s=20, what="B consuming before its crash")
                    b.kill()
                result = await producer.send(Message(topic, f"d{i}".encode()))
                assert result.status is SendStatus.OK
                sent.append(f"d{i}")
                await asyncio.sleep(0.005)

        def all_consumed() -> bool:
            return {m["body"] for ch in children.values() for m in ch.messages()} >= set(sent)

        await eventually(all_consumed, timeout_s=40, what="every message consumed")
        await asyncio.sleep(1.0)

    try:
        run(scenario, 90)
    finally:
        for child in children.values():
            child.stop()
    per_child = {name: [m["body"] for m in ch.messages()] for name, ch in children.items()}
    every = [b for bodies in per_child.values() for b in bodies]
    assert set(every) == set(sent)
    duplicated = {b for b, n in collections.Counter(every).items() if n > 1}
    # Only what B had consumed (and not committed) before the crash, or what changed hands in
    # the rebalances, may come twice: a small share of the stream.
    assert len(duplicated) <= count // 10, sorted(duplicated)
    # A consumer never gets a message twice itself: its own progress never goes back.
    for name, bodies in per_child.items():
        assert len(bodies) == len(set(bodies)), (name, len(bodies) - len(set(bodies)))
    assert all(per_child[name] for name in ("A", "C")), {n: len(b) for n, b in per_child.items()}


def test_a_queue_handed_over_before_anything_was_consumed_loses_nothing(
    addrs: tuple[str, str],
) -> None:
    """CONSUME_FROM_LAST_OFFSET, no committed offset yet: A takes the queues at their end,
    pulls a first batch and is still busy with it when B joins and takes half the queues. A
    must hand over the position it started from, or B would start at the (new) end of those
    queues and skip the batch A never got to."""
    namesrv, broker = addrs
    topic, group, count = "TopicEarlyHandover", "CG_EARLY_HANDOVER", 40
    create_topic(broker, topic, 4)
    release = threading.Event()

    async def scenario() -> None:
        slow = Recorder(lambda m: None if release.wait(30) else ConsumeStatus.RECONSUME_LATER)
        fast = Recorder()
        a = consumer(namesrv, group, topic, slow, consume_thread_max=1)
        b = consumer(namesrv, group, topic, fast)
        await a.start()
        try:
            await eventually(lambda: len(topic_queues(a, topic)) == 4, what="A owns 4 queues")
            async with Producer("PG_EARLY", client_config=fast_config(namesrv)) as producer:
                for i in range(count):
                    await producer.send(Message(topic, f"e{i}".encode()))
            await eventually(lambda: slow.deliveries, what="A busy with its first message")
            await b.start()
            await eventually(
                lambda: len(topic_queues(a, topic)) == len(topic_queues(b, topic)) == 2,
                what="the queues shared",
            )
            release.set()
            want = {f"e{i}".encode() for i in range(count)}
            await eventually(
                lambda: set(slow.bodies()) | set(fast.bodies()) >= want,
                what="every message consumed",
            )
        finally:
            release.set()
            await a.shutdown()
            await b.shutdown()

    run(scenario)


def test_a_consumer_leaving_cleanly_hands_over_without_duplicates(
    addrs: tuple[str, str],
) -> None:
    """A consumer that shuts down while its listeners are busy lets them finish and commits
    their progress before it leaves, so the consumer taking its queues neither skips nor
    repeats anything."""
    namesrv, broker = addrs
    topic, group, count = "TopicCleanLeave", "CG_CLEAN_LEAVE", 300
    create_topic(broker, topic, 4)

    async def scenario() -> None:
        recs = [Recorder(lambda m: time.sleep(0.01)) for _ in range(2)]
        a, b = (consumer(namesrv, group, topic, r, consume_thread_max=4) for r in recs)
        await a.start()
        await b.start()
        try:
            await eventually(
                lambda: len(topic_queues(a, topic)) == len(topic_queues(b, topic)) == 2,
                what="the queues shared",
            )
            async with Producer("PG_CLEAN", client_config=fast_config(namesrv)) as producer:
                for i in range(count):
                    await producer.send(Message(topic, f"c{i}".encode()))
                    if i == count // 3:
                        await eventually(lambda: recs[1].done, what="B consuming")
                        await b.shutdown()
            await eventually(
                lambda: sum(len(r.done) for r in recs) >= count,
                timeout_s=30,
                what="every message consumed",
            )
            await asyncio.sleep(1.0)
        finally:
            await a.shutdown()
            await b.shutdown()
        every = [body for r in recs for body in r.bodies()]
        assert sorted(set(every)) == sorted(f"c{i}".encode() for i in range(count))
        duplicated = [body for body, n in collections.Counter(every).items() if n > 1]
        # A broker that stores the commit offset of a held pull again when it wakes the pull
        # (RocketMQ stores it only on the first pass) moves the offset back and makes these.
        assert not duplicated, duplicated

    run(scenario)


def test_queues_change_hands_mid_backlog_without_a_message_consumed_twice(
    addrs: tuple[str, str],
) -> None:
    """Duplicate-free rebalancing: with a backlog in flight at every consumer, B and C join
    and B leaves again. A consumer giving a queue away consumes what it was delivered first,
    and the broker lets the next owner in only then, at the committed offset; without that,
    each hand-over repeats up to a pull batch per queue."""
    namesrv, broker = addrs
    topic, group, count = "TopicHandOver", "CG_HAND_OVER", 1200
    create_topic(broker, topic, 8)

    async def scenario() -> None:
        recs = [Recorder(lambda m: time.sleep(0.002)) for _ in range(3)]
        # Each queue's backlog then outlasts what a consumer takes in at once.
        a, b, c = backlog_consumers(namesrv, group, topic, recs, pull_threshold_for_queue=40)
        await send_bodies(namesrv, topic, [f"h{i}".encode() for i in range(count)])

        def consumed() -> int:
            return sum(len(r.done) for r in recs)

        try:
            await a.start()
            await eventually(lambda: consumed() >= 150, what="A consuming")
            await b.start()
            await eventually(lambda: len(recs[1].done) >= 100, what="B consuming")
            await c.start()
            await eventually(lambda: len(recs[2].done) >= 100, what="C consuming")
            await b.shutdown()
            await eventually(lambda: consumed() >= count, timeout_s=60, what="all consumed")
            await asyncio.sleep(1.0)
        finally:
            for x in (a, b, c):
                await x.shutdown()
        every = [body for r in recs for body in r.bodies()]
        assert sorted(set(every)) == sorted(f"h{i}".encode() for i in range(count))
        duplicated = sorted(body for body, n in collections.Counter(every).items() if n > 1)
        assert not duplicated, (len(duplicated), duplicated[:20])

    run(scenario, 90)


def test_a_queue_handed_over_leaves_its_buffered_backlog_to_the_next_owner(
    addrs: tuple[str, str],
) -> None:
    """A has pulled the whole backlog of its queues when B joins. On the queues it gives
    away, A finishes only the listener calls already running; the messages it buffered but
    never began go to B, instead of B waiting while A works through them."""
    namesrv, broker = addrs
    topic, group, count = "TopicHandOverBacklog", "CG_HAND_OVER_BACKLOG", 1200
    create_topic(broker, topic, 4)

    recs = [Recorder(lambda m: time.sleep(0.01)) for _ in range(2)]
    before: collections.Counter[int] = collections.Counter()

    async def scenario() -> None:
        a, b = backlog_consumers(namesrv, group, topic, recs)
        await send_bodies(namesrv, topic, [f"k{i}".encode() for i in range(count)])
        try:
            await a.start()
            await eventually(lambda: len(recs[0].done) >= 40, what="A consuming")
            with recs[0].lock:
                before.update(q.queue_id for _, q in recs[0].deliveries)
            await b.start()
            await eventually(
                lambda: sum(len(r.done) for r in recs) >= count, timeout_s=60, what="all consumed"
            )
            await asyncio.sleep(0.5)
        finally:
            await a.shutdown()
            await b.shutdown()

    run(scenario, 90)
    a_rec, b_rec = recs
    every = a_rec.bodies() + b_rec.bodies()
    assert sorted(set(every)) == sorted(f"k{i}".encode() for i in range(count))
    assert len(every) == count, "duplicates"
    b_queues = {q.queue_id for _, q in b_rec.deliveries}
    assert len(b_queues) == 2, b_queues
    after = collections.Counter(q.queue_id for _, q in a_rec.deliveries)
    # A's calls running at the hand-over (2 threads), give or take one that had to run since
    # a later message of its queue had finished.
    handed_late = {q: after[q] - before[q] for q in b_queues}
    assert all(n <= 8 for n in handed_late.values()), handed_late


# --- 4. broadcasting ----------------------------------------------------------------------


def test_a_broadcasting_consumer_restarted_in_another_process_finds_its_offsets(
    addrs: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an instance name the client id names the process; the offsets file must not,
    or a restarted consumer would start at the end of each queue and skip what came meanwhile
    (Java keeps ``<ip>@DEFAULT`` for broadcasting consumers)."""
    namesrv, broker = addrs
    topic, group = "TopicBroadcastRestart", "CG_BROADCAST_RESTART"
    create_topic(broker, topic, 1)
    paths = []

    async def start_and_stop() -> None:
        c = consumer(
            namesrv,
            group,
            topic,
            Recorder(),
            message_model="BROADCASTING",
            offsets_dir=tmp_path,
        )
        await c.start()
        try:
            store = c.offset_store
            assert isinstance(store, LocalFileOffsetStore)
            paths.append((c.instance.client_id, store.path))
        finally:
            await c.shutdown()

    for pid in (1001, 1002):
        monkeypatch.setattr(os, "getpid", lambda pid=pid: pid)
        asyncio.run(asyncio.wait_for(start_and_stop(), 30))
    (first_id, first_path), (second_id, second_path) = paths
    assert first_id.endswith("@1001")
    assert second_id.endswith("@1002")
    assert first_path == second_path
    assert "DEFAULT" in str(first_path)


def test_two_broadcasting_consumers_of_a_group_in_one_process_keep_separate_offsets(
    addrs: tuple[str, str], tmp_path: Path
) -> None:
    """The second consumer of a group in a process gets a client id of its own (``#1``); its
    offsets file must be its own too, or each would resume from the other's progress."""
    namesrv, broker = addrs
    topic, group = "TopicBroadcastTwins", "CG_BROADCAST_TWINS"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        cs = [
            consumer(
                namesrv,
                group,
                topic,
                Recorder(),
                message_model="BROADCASTING",
                offsets_dir=tmp_path,
            )
            for _ in range(2)
        ]
        for c in cs:
            await c.start()
        try:
            ids = [c.instance.client_id for c in cs]
            paths = [
                c.offset_store.path for c in cs if isinstance(c.offset_store, LocalFileOffsetStore)
            ]
        finally:
            for c in cs:
                await c.shutdown()
        assert ids[1] == ids[0] + "#1"
        assert len(set(paths)) == 2
        assert paths[1].parent.parent.name.endswith("DEFAULT#1")

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_broadcasting_consumers_each_get_everything_and_resume_from_local_offsets(
    addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicBroadcast", "CG_BROADCAST"
    create_topic(broker, topic, 4)
    offsets_dir = tmp_path / "offsets"

    def make(name: str, rec: Recorder) -> PushConsumer:
        return consumer(
            namesrv,
            group,
            topic,
            rec,
            message_model="BROADCASTING",
            offsets_dir=offsets_dir,
            client_config=fast_config(namesrv, instance_name=name),
        )

    async def send(producer: Producer, prefix: str, n: int) -> set[bytes]:
        for i in range(n):
            await producer.send(Message(topic, f"{prefix}{i}".encode()))
        return {f"{prefix}{i}".encode() for i in range(n)}

    async def scenario() -> None:
        one, two = Recorder(), Recorder()
        c1, c2 = make("one", one), make("two", two)
        await c1.start()
        await c2.start()
        async with Producer("PG_BROADCAST", client_config=fast_config(namesrv)) as producer:
            try:
                await eventually(
                    lambda: len(topic_queues(c1, topic)) == len(topic_queues(c2, topic)) == 4,
                    what="both consumers own every queue",
                )
                first = await send(producer, "p", 40)
                await eventually(lambda: len(one.done) >= 40 and len(two.done) >= 40)
                await c2.shutdown()
                store = c2.offset_store
                assert isinstance(store, LocalFileOffsetStore)
                assert store.path.is_relative_to(offsets_dir)
                assert store.path.exists()
                second = await send(producer, "q", 20)
                await eventually(lambda: len(one.done) >= 60)

                # "two" again, same instance name and offsets dir: it resumes where it was.
                two_again = Recorder()
                c2 = make("two", two_again)
                await c2.start()
                # "three" is new: it starts at the end of every queue.
                three = Recorder()
                c3 = make("three", three)
                await c3.start()
                await eventually(lambda: len(two_again.done) >= 20, what="two resumed")
                await eventually(lambda: len(topic_queues(c3, topic)) == 4, what="three ready")
                third = await send(producer, "r", 10)
                await eventually(
                    lambda: (
                        len(one.done) >= 70 and len(two_again.done) >= 30 and len(three.done) >= 10
                    )
                )
                await asyncio.sleep(1.0)
                await c3.shutdown()
            finally:
                await c1.shutdown()
                await c2.shutdown()
        assert sorted(one.bodies()) == sorted(first | second | third)
        assert sorted(two.bodies()) == sorted(first)
        assert sorted(two_again.bodies()) == sorted(second | third)
        assert sorted(three.bodies()) == sorted(third)

    run(scenario)


# --- 5. tag filters -----------------------------------------------------------------------


def test_tag_filter_delivers_matching_tags_and_star_delivers_untagged(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicTagFilter"
    create_topic(broker, topic, 2)
    tags = ["TagA", "TagB", "TagC", None, "TagAB", "taga", "*"]

    async def scenario() -> None:
        async with Producer("PG_TAGS", client_config=fast_config(namesrv)) as producer:
            for i in range(28):
                tag = tags[i % len(tags)]
                await producer.send(Message(topic, f"{tag}-{i}".encode(), tags=tag))
        some, every, star = Recorder(), Recorder(), Recorder()
        first = "CONSUME_FROM_FIRST_OFFSET"
        c1 = consumer(namesrv, "CG_TAG_AB", topic, some, "TagA || TagB", consume_from_where=first)
        c2 = consumer(namesrv, "CG_TAG_ALL", topic, every, "*", consume_from_where=first)
        # As in RocketMQ, "*" means every tag only as the whole expression.
        c3 = consumer(namesrv, "CG_TAG_STAR", topic, star, "TagA || *", consume_from_where=first)
        await c1.start()
        await c2.start()
        await c3.start()
        try:
            await eventually(
                lambda: len(some.done) >= 8 and len(every.done) >= 28 and len(star.done) >= 8
            )
            await asyncio.sleep(1.0)
        finally:
            await c1.shutdown()
            await c2.shutdown()
            await c3.shutdown()
        assert sorted(m.tags or "" for m in some.done) == ["TagA"] * 4 + ["TagB"] * 4
        assert len(every.done) == 28
        untagged = [m for m in every.done if m.tags is None]
        assert sorted(m.body for m in untagged) == sorted(
            f"None-{i}".encode() for i in range(28) if tags[i % len(tags)] is None
        )
        assert sorted(m.tags or "" for m in star.done) == ["*"] * 4 + ["TagA"] * 4

    run(scenario)


# --- 6. where a new group starts ----------------------------------------------------------


@pytest.mark.parametrize("first_message", ["in_memory", "on_disk"])
def test_consume_from_first_last_and_timestamp_for_a_new_group(
    tmp_path: Path, first_message: str
) -> None:
    """A new group's start. While a queue still starts at 0 with its first message in memory,
    the broker answers offset 0 as RocketMQ does, whatever the client's consumeFromWhere;
    once that message is left to the disk (here: a broker that keeps none in memory), the
    client's consumeFromWhere decides."""
    args: list[str] = []
    if first_message == "on_disk":
        config = tmp_path / "broker.conf"
        config.write_text("accessMessageInMemoryMaxRatio=0\n")
        args = ["-c", str(config)]
    with serving(tmp_path, *args) as server:
        namesrv, broker = server.addresses()
        consume_from_where(namesrv, broker, in_memory=first_message == "in_memory")


def consume_from_where(namesrv: str, broker: str, *, in_memory: bool) -> None:
    topic = "TopicFromWhere"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        async with Producer("PG_FROM", client_config=fast_config(namesrv)) as producer:

            async def send(prefix: str) -> set[bytes]:
                for i in range(10):
                    await producer.send(Message(topic, f"{prefix}{i}".encode()))
                return {f"{prefix}{i}".encode() for i in range(10)}

            old = await send("old")
            await asyncio.sleep(0.3)
            since_ms = time.time_ns() // 1_000_000
            await asyncio.sleep(0.3)
            mid = await send("mid")
            recs = {w: Recorder() for w in ("FIRST", "LAST", "TIMESTAMP")}
            consumers = [
                consumer(
                    namesrv,
                    f"CG_FROM_{w}",
                    topic,
                    rec,
                    consume_from_where=f"CONSUME_FROM_{w}_OFFSET"
                    if w != "TIMESTAMP"
                    else "CONSUME_FROM_TIMESTAMP",
                    consume_timestamp=since_ms,
                )
                for w, rec in recs.items()
            ]
            try:
                for c in consumers:
                    await c.start()
                await eventually(lambda: all(len(topic_queues(c, topic)) == 2 for c in consumers))
                new = await send("new")
                await eventually(
                    lambda: (
                        len(recs["FIRST"].done) >= 30
                        and len(recs["LAST"].done) >= (30 if in_memory else 10)
                        and len(recs["TIMESTAMP"].done) >= (30 if in_memory else 20)
                    )
                )
                await asyncio.sleep(0.5)
            finally:
                for c in consumers:
                    await c.shutdown()
        assert sorted(recs["FIRST"].bodies()) == sorted(old | mid | new)
        if in_memory:
            assert sorted(recs["LAST"].bodies()) == sorted(old | mid | new)
            assert sorted(recs["TIMESTAMP"].bodies()) == sorted(old | mid | new)
        else:
            assert sorted(recs["LAST"].bodies()) == sorted(new)
            assert sorted(recs["TIMESTAMP"].bodies()) == sorted(mid | new)

    run(scenario)


async def reset_offsets(broker: str, topic: str, group: str, timestamp_ms: int) -> None:
    """INVOKE_BROKER_TO_RESET_OFFSET, as ``mqadmin resetOffsetByTime -f true`` sends it."""
    remoting = RemotingClient()
    try:
        request = RemotingCommand.request(
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": topic, "group": group, "timestamp": str(timestamp_ms), "isForce": "true"},
        )
        response = await remoting.invoke(broker, request, timeout_s=5)
        assert response.code == ResponseCode.SUCCESS, response.remark
    finally:
        await remoting.close()


def test_an_offset_reset_by_time_makes_a_running_consumer_read_again(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicResetByTime", "CG_RESET_BY_TIME"
    create_topic(broker, topic, 2)

    async def scenario() -> None:
        rec = Recorder()
        c = consumer(namesrv, group, topic, rec, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        async with Producer("PG_RESET", client_config=fast_config(namesrv)) as producer:
            await c.start()
            try:
                await eventually(lambda: len(topic_queues(c, topic)) == 2)
                before_ms = time.time_ns() // 1_000_000
                await asyncio.sleep(0.05)
                sent = set()
                for i in range(10):
                    await producer.send(Message(topic, f"old{i}".encode()))
                    sent.add(f"old{i}".encode())
                await eventually(lambda: len(rec.done) >= 10, what="first delivery")
                queues = topic_queues(c, topic)
                ends = [await max_offset_of(broker, mq) for mq in queues]

                async def all_committed() -> bool:
                    got = [await committed_offset(broker, group, mq) for mq in queues]
                    return got == ends

                for _ in range(200):  # the consumer commits every 0.5 s
                    if await all_committed():
                        break
                    await asyncio.sleep(0.05)
                assert await all_committed()

                await reset_offsets(broker, topic, group, before_ms)

                await eventually(lambda: len(rec.done) >= 20, what="delivery after the reset")
            finally:
                await c.shutdown()
        bodies = collections.Counter(rec.bodies())
        assert set(bodies) == sent
        assert all(n == 2 for n in bodies.values()), bodies

    run(scenario)


async def max_offset_of(broker: str, mq: MessageQueue) -> int:
    remoting = RemotingClient()
    try:
        return await ClientAPI(remoting).max_offset(broker, mq)
    finally:
        await remoting.close()


# --- 7. failures, redelivery and the committed offset -------------------------------------


@pytest.mark.parametrize("listener_kind", ["thread", "coroutine"])
def test_failed_messages_come_back_and_the_commit_waits_for_a_slow_one(
    addrs: tuple[str, str], listener_kind: str
) -> None:
    """RECONSUME_LATER and a raising listener: redelivered from %RETRY% with reconsume_times
    1 under the original topic. A slow message holds the committed offset at its own offset
    while later ones finish. The coroutine listener returns and raises without waiting (run
    at once, no task) and waits only on the slow message (a task)."""
    namesrv, broker = addrs
    topic, group = f"TopicRedeliver_{listener_kind}", f"CG_REDELIVER_{listener_kind}"
    create_topic(broker, topic, 1)
    mq = MessageQueue(topic, "broker-a", 0)
    release = threading.Event()

    def behaviour(m: MessageExt) -> ConsumeStatus | None:
        if m.keys == "k3":
            assert release.wait(30)
        elif m.keys == "k5" and m.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        elif m.keys == "k7" and m.reconsume_times == 0:
            raise RuntimeError("listener failure on purpose")
        return None

    async def scenario() -> None:
        rec = Recorder(behaviour)

        async def coroutine_listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            if any(m.keys == "k3" for m in msgs):
                await asyncio.to_thread(release.wait, 30)
            return rec(msgs, ctx)

        c = consumer(
            namesrv,
            group,
            topic,
            rec if listener_kind == "thread" else coroutine_listener,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_thread_max=4,
            # The Java client's default, which its consumer reads as 16: a retry, not the DLQ.
            max_reconsume_times=16 if listener_kind == "thread" else -1,
        )
        await c.start()
        try:
            async with Producer("PG_REDELIVER", client_config=fast_config(namesrv)) as producer:
                sent = [
                    await producer.send(Message(topic, f"m{i}".encode(), keys=f"k{i}"))
                    for i in range(10)
                ]
            await eventually(
                lambda: (
                    sorted(m.keys for m in rec.done) == sorted(f"k{i}" for i in range(10) if i != 3)
                ),
                what="all but the slow message done",
            )

            async def broker_offset_becomes(want: int) -> None:
                for _ in range(100):
                    if await committed_offset(broker, group, mq) == want:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError(f"committed offset of {mq} never became {want}")

            await broker_offset_becomes(3)
            await asyncio.sleep(1.5)  # several persist intervals and pulls later, still 3
            assert c.offset_store.read(mq) == 3
            assert await committed_offset(broker, group, mq) == 3
            release.set()
            await eventually(lambda: len(rec.done) == 10, what="the slow message done")
            await broker_offset_becomes(10)
        finally:
            release.set()
            await c.shutdown()
        by_key = collections.defaultdict(list)
        for m, delivered_from in rec.deliveries:
            by_key[m.keys].append((m, delivered_from))
        for i in range(10):
            deliveries = by_key[f"k{i}"]
            assert len(deliveries) == (2 if i in (5, 7) else 1), (i, deliveries)
            first, _ = deliveries[0]
            assert first.reconsume_times == 0
            assert first.id == sent[i].msg_id
            if i in (5, 7):
                again, delivered_from = deliveries[1]
                assert again.topic == topic
                assert again.reconsume_times == 1
                assert again.id == sent[i].msg_id
                assert again.body == f"m{i}".encode()
                assert delivered_from.topic == RETRY_PREFIX + group
                assert again.stored.topic == RETRY_PREFIX + group

    run(scenario)


def test_a_message_whose_body_does_not_inflate_goes_straight_to_the_dlq(
    addrs: tuple[str, str],
) -> None:
    """A listener that fails on a body flagged Zstandard that is not: the message goes to the
    DLQ at once, as stored, not through 16 retries; an LZ4 body beside it is read."""
    namesrv, broker = addrs
    topic, group = "TopicUnreadable", "CG_UNREADABLE"
    create_topic(broker, topic, 1)
    big = b"lz4 body " * 1000
    for body, sys_flag in [(b"not zstd", 0x201), (lz4.frame.compress(big), 0x101)]:
        assert helpers.send_raw(broker, topic, body, sys_flag=sys_flag).code == 0

    def read_body(m: MessageExt) -> None:
        assert m.body

    rec = Recorder(read_body)

    async def scenario() -> None:
        c = consumer(namesrv, group, topic, rec, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        await c.start()
        try:
            await eventually(lambda: len(rec.done) == 1, what="the LZ4 message consumed")
            dead: list[MessageExt] = []

            async def dead_lettered() -> bool:
                try:
                    result = await helpers.pull_head(broker, "broker-a", f"%DLQ%{group}", 0)
                except BrokerError:  # no DLQ topic yet
                    return False
                dead[:] = result.messages if result.status is PullStatus.FOUND else []
                return bool(dead)

            for _ in range(100):
                if await dead_lettered():
                    break
                await asyncio.sleep(0.05)
        finally:
            await c.shutdown()
        assert [m.body for m in rec.done] == [big]
        assert [m.stored.body for m in dead] == [b"not zstd"]
        # Delivered once: nothing came back from the retry topic.
        assert [m.queue_offset for m, _ in rec.deliveries] == [0, 1]

    run(scenario)


def test_an_object_with_an_async_call_method_is_a_coroutine_listener(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic, group, count = "TopicAsyncCallable", "CG_ASYNC_CALLABLE", 20
    create_topic(broker, topic, 1)

    class Listener:
        def __init__(self) -> None:
            self.bodies: list[bytes] = []

        async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            await asyncio.sleep(0)
            self.bodies += [m.body for m in msgs]
            return ConsumeStatus.CONSUME_SUCCESS

    async def scenario() -> None:
        listener = Listener()
        await send_bodies(namesrv, topic, [f"a{i}".encode() for i in range(count)])
        c = consumer(
            namesrv, group, topic, listener, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        await c.start()
        try:
            await eventually(lambda: len(listener.bodies) >= count, what="all consumed")
        finally:
            await c.shutdown()
        assert sorted(listener.bodies) == sorted(f"a{i}".encode() for i in range(count))
        # Each call's messages were marked consumed: the offset reached the queue's end.
        assert await committed_offset(broker, group, MessageQueue(topic, "broker-a", 0)) == count

    run(scenario)


def test_a_coroutine_listener_has_its_own_task_for_its_timeouts(addrs: tuple[str, str]) -> None:
    """``asyncio.timeout`` in a coroutine listener times out the listener only. Run inside
    the queue's pull task (caught up) its timeout cancelled that task and the queue was read
    no more; run with no task (a backlog) it raised "Timeout should be used inside a task"
    and every message went to the retry topic."""
    namesrv, broker = addrs
    topic, group = "TopicAsyncTimeout", "CG_ASYNC_TIMEOUT"
    create_topic(broker, topic, 1)
    got: list[bytes] = []
    timed_out: list[bytes] = []

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for m in msgs:
            try:
                async with asyncio.timeout(0.2):
                    await asyncio.sleep(2 if m.body.startswith(b"slow") else 0)
            except TimeoutError:
                timed_out.append(m.body)
            got.append(m.body)
        return ConsumeStatus.CONSUME_SUCCESS

    async def scenario() -> None:
        backlog = [b"slow-0", *(f"b{i}".encode() for i in range(15))]
        await send_bodies(namesrv, topic, backlog)
        c = consumer(
            namesrv,
            group,
            topic,
            listener,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            pull_batch_size=4,
        )
        await c.start()
        try:
            await eventually(lambda: len(got) >= len(backlog), what="the backlog consumed")
            later = [b"slow-1", b"c0", b"c1"]
            for body in later:  # one at a time, each found by a pull that had caught up
                await send_bodies(namesrv, topic, [body])
                await eventually(lambda b=body: b in got, what=f"{body!r} consumed")
        finally:
            await c.shutdown()
        assert sorted(got) == sorted(backlog + later)  # once each: no retries
        assert timed_out == [b"slow-0", b"slow-1"]

    run(scenario)


@pytest.mark.parametrize("kind", ["thread", "coroutine"])
def test_shutdown_waits_for_a_stuck_listener_no_longer_than_await_termination(
    addrs: tuple[str, str], kind: str
) -> None:
    """``await_termination_s`` (RocketMQ's awaitTerminationMillisWhenShutdown) bounds the
    wait for listener calls at shutdown: the call still running is left, and its message
    comes again to the group's next consumer (shutdown waited for it without end)."""
    namesrv, broker = addrs
    topic, group = f"TopicStuck{kind.title()}", f"CG_STUCK_{kind.upper()}"
    create_topic(broker, topic, 1)
    release = threading.Event()
    began = threading.Event()
    seen: list[bytes] = []

    def stuck(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        began.set()
        release.wait(30)
        return ConsumeStatus.CONSUME_SUCCESS

    async def stuck_coroutine(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        seen.extend(m.body for m in msgs)
        began.set()
        await asyncio.sleep(30)
        return ConsumeStatus.CONSUME_SUCCESS

    async def scenario() -> None:
        await send_bodies(namesrv, topic, [b"stuck"])
        first = consumer(
            namesrv,
            group,
            topic,
            stuck if kind == "thread" else stuck_coroutine,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            await_termination_s=0.5,
        )
        await first.start()
        try:
            await eventually(began.is_set, what="the listener called")
        finally:
            await asyncio.wait_for(first.shutdown(), 10)
        assert seen == [b"stuck"]  # and the call has not returned
        again: list[bytes] = []

        def recorder(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            again.extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        second = consumer(namesrv, group, topic, recorder)
        await second.start()
        try:
            await eventually(lambda: again == [b"stuck"], what="the message again")
        finally:
            release.set()
            await second.shutdown()

    try:
        run(scenario)
    finally:
        release.set()


def test_a_topic_subscribed_while_running_needs_a_listener_unless_async_for_reads(
    addrs: tuple[str, str],
) -> None:
    """A consumer started with a listener for each topic has nothing reading ``async for``: a
    topic subscribed later without a listener is refused (its messages were once passed over
    and committed unread); with one, it is consumed."""
    namesrv, broker = addrs
    first, later, group = "TopicRunningFirst", "TopicRunningLater", "CG_RUNNING_SUBSCRIBE"
    for topic in (first, later):
        create_topic(broker, topic, 1)

    async def scenario() -> None:
        got: list[bytes] = []

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            got.extend(m.body for m in msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        await send_bodies(namesrv, later, [b"later-0", b"later-1"])
        c = consumer(
            namesrv, group, first, listener, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        await c.start()
        try:
            with pytest.raises(ClientStateError, match="subscribe TopicRunningLater with one"):
                c.subscribe(later)
            assert later not in c.subscriptions
            c.subscribe(later, "*", listener)
            await eventually(lambda: len(got) >= 2, what="the later topic consumed")
        finally:
            await c.shutdown()
        assert sorted(got) == [b"later-0", b"later-1"]

    run(scenario)


def test_coroutine_listeners_wait_at_most_consume_thread_max_at_a_time(
    addrs: tuple[str, str],
) -> None:
    """Coroutine listeners that wait hold a slot each: with consume_thread_max 3, at most 3
    are between their start and their end at any moment, and every message is still
    consumed once."""
    namesrv, broker = addrs
    topic, group, count = "TopicAsyncSlots", "CG_ASYNC_SLOTS", 60
    create_topic(broker, topic, 4)

    async def scenario() -> None:
        active = 0
        most = 0
        seen: list[bytes] = []

        async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
            nonlocal active, most
            active += 1
            most = max(most, active)
            try:
                await asyncio.sleep(0.02)
                seen.extend(m.body for m in msgs)
            finally:
                active -= 1

        bodies = [f"s{i}".encode() for i in range(count)]
        await send_bodies(namesrv, topic, bodies)
        await drain_from_first(
            namesrv, group, topic, listener, threads=3, finished=lambda: len(seen) >= count
        )
        assert sorted(seen) == sorted(f"s{i}".encode() for i in range(count))
        assert most == 3

    run(scenario)


def test_thread_listeners_that_wait_run_side_by_side(addrs: tuple[str, str]) -> None:
    """One message per call, one queue: the calls of a pull start on one consume thread, and
    while a call waits (a listener blocked on I/O) a helper thread takes the next ones, and
    so on, so several calls wait at the same time."""
    namesrv, broker = addrs
    topic, group, count = "TopicSlowThreads", "CG_SLOW_THREADS", 32
    create_topic(broker, topic, 1)
    lock = threading.Lock()
    active = 0
    most = 0
    done: list[bytes] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        nonlocal active, most
        with lock:
            active += 1
            most = max(most, active)
        time.sleep(0.05)
        with lock:
            active -= 1
            done.extend(m.body for m in msgs)

    async def scenario() -> None:
        await send_bodies(namesrv, topic, [f"w{i}".encode() for i in range(count)])
        await drain_from_first(
            namesrv, group, topic, listener, threads=8, finished=lambda: len(done) >= count
        )
        assert sorted(done) == sorted(f"w{i}".encode() for i in range(count))
        assert most >= 4, most

    run(scenario)


async def start_after_backlog(
    namesrv: str, group: str, topic: str, listener: Any, backlog: int
) -> PushConsumer:
    """Stores ``backlog`` messages, then starts a consumer from the first offset that takes
    up to 32 per call."""
    await send_bodies(namesrv, topic, [b"b%d" % i for i in range(backlog)])
    c = consumer(
        namesrv,
        group,
        topic,
        listener,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        consume_message_batch_max_size=32,
    )
    await c.start()
    return c


def test_a_coroutine_listener_runs_before_a_caught_up_queue_is_pulled_again(
    addrs: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a backlog, the next pull goes out before the listener runs (the broker answers it
    meanwhile). Once the queue is caught up, the next pull would only wait at the broker, so
    a coroutine listener runs first and its messages wait for no write."""
    namesrv, broker = addrs
    topic, group, backlog, single = "TopicPullOrder", "CG_PULL_ORDER", 96, 5
    create_topic(broker, topic, 1)
    in_flight = 0
    original = ClientAPI.pull_ext

    async def counted(self: ClientAPI, addr: str, name: str, ext: dict[str, str], *a: Any) -> Any:
        nonlocal in_flight
        mine = ext["topic"] == topic  # not the pulls of the group's retry topic
        in_flight += mine
        try:
            return await original(self, addr, name, ext, *a)
        finally:
            in_flight -= mine

    monkeypatch.setattr(ClientAPI, "pull_ext", counted)
    calls: list[tuple[int, int]] = []  # (last queue offset of the call, its pulls in flight)

    async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        calls.append((msgs[-1].queue_offset, in_flight))

    async def scenario() -> None:
        c = await start_after_backlog(namesrv, group, topic, listener, backlog)
        try:
            await eventually(lambda: calls and calls[-1][0] == backlog - 1, what="backlog")
            drained = len(calls)
            # Caught up: one message at a time, each sent once the previous one is consumed.
            async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
                for i in range(single):
                    await producer.send(Message(topic, b"s%d" % i))
                    await eventually(lambda i=i: len(calls) == drained + i + 1, what="single")
        finally:
            await c.shutdown()
        assert drained >= 3, calls  # pulls of at most 32
        assert all(n == 1 for _, n in calls[: drained - 1]), calls
        assert [n for _, n in calls[drained - 1 :]] == [0] * (single + 1), calls

    run(scenario)


def test_a_caught_up_queue_is_pulled_again_once_a_consume_thread_has_begun_its_batch(
    addrs: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """For a function listener, a caught-up queue's next pull is written only once a consume
    thread has begun on the batch (a thread woken while the loop writes would wait for the
    interpreter lock); with a backlog the next pull still goes out first."""
    namesrv, broker = addrs
    topic, group, backlog, single = "TopicPullOrderThreads", "CG_PULL_ORDER_THREADS", 96, 5
    create_topic(broker, topic, 1)
    begun: set[int] = set()  # the first queue offset of each batch a consume thread began
    run_original = ConcurrentConsumeService._consume_sync_run

    def run_counted(self: Any, listener: Any, chunks: Any, pq: Any, mq: Any, *rest: Any) -> None:
        if mq.topic == topic:
            begun.add(chunks[0][0].queue_offset)
        run_original(self, listener, chunks, pq, mq, *rest)

    # One entry per pull written after a FOUND answer: (that answer was caught up, a consume
    # thread had begun on its batch).
    pulls: list[tuple[bool, bool]] = []
    answer: list[tuple[int, bool]] = []
    pull_original = ClientAPI.pull_ext

    async def pull_noted(
        self: ClientAPI, addr: str, name: str, ext: dict[str, str], *a: Any
    ) -> Any:
        if ext["topic"] != topic:  # the pulls of the group's retry topic
            return await pull_original(self, addr, name, ext, *a)
        if answer:
            first, caught_up = answer.pop()
            pulls.append((caught_up, first in begun))
        result = await pull_original(self, addr, name, ext, *a)
        if result.status is PullStatus.FOUND and result.messages:
            caught_up = result.next_begin_offset >= result.max_offset
            answer.append((result.messages[0].queue_offset, caught_up))
        return result

    monkeypatch.setattr(ConcurrentConsumeService, "_consume_sync_run", run_counted)
    monkeypatch.setattr(ClientAPI, "pull_ext", pull_noted)
    done: list[MessageExt] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        done.extend(msgs)

    async def scenario() -> None:
        c = await start_after_backlog(namesrv, group, topic, listener, backlog)
        try:
            await eventually(lambda: len(done) == backlog, what="backlog")
            async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
                for i in range(single):
                    await producer.send(Message(topic, b"s%d" % i))
                    await eventually(lambda i=i: len(done) == backlog + i + 1, what="single")
                    await eventually(lambda: not answer, what="the next pull")
        finally:
            await c.shutdown()
        behind = [was_begun for caught_up, was_begun in pulls if not caught_up]
        level = [was_begun for caught_up, was_begun in pulls if caught_up]
        assert len(behind) >= 2, pulls  # pulls of at most 32
        assert not any(behind), pulls
        assert len(level) >= single + 1, pulls
        assert all(level), pulls

    run(scenario)


# --- 8. flow control ----------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["count", "size"])
def test_flow_control_stops_pulling_at_the_process_queue_threshold(
    addrs: tuple[str, str], limit: str
) -> None:
    namesrv, broker = addrs
    topic, group = f"TopicFlow_{limit}", f"CG_FLOW_{limit}"
    create_topic(broker, topic, 1)
    release = threading.Event()
    batch = 8
    options: dict[str, Any]
    if limit == "count":
        count, body_bytes = 300, 100
        options = {"pull_threshold_for_queue": 40}
    else:
        count, body_bytes = 60, 64 * 1024
        options = {"pull_threshold_size_for_queue_mib": 1}
    rng = random.Random(3)

    async def scenario() -> None:
        rec = Recorder(lambda m: None if release.wait(30) else ConsumeStatus.RECONSUME_LATER)
        c = consumer(
            namesrv,
            group,
            topic,
            rec,
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_thread_max=2,
            pull_batch_size=batch,
            **options,
        )
        try:
            async with Producer(
                "PG_FLOW", client_config=fast_config(namesrv), compress_over=1 << 30
            ) as producer:
                for i in range(count):
                    body = f"{i:06d}".encode() + rng.randbytes(body_bytes - 6)
                    await producer.send(Message(topic, body))
            await c.start()

            def cached() -> tuple[int, int]:
                [row] = [r for r in c.running_info()["mqTable"] if r["mq"]["topic"] == topic]
                pq = c._pqs[MessageQueue(topic, "broker-a", 0)]
                return row["cachedMsgCount"], pq.msg_size

            if limit == "count":
                await eventually(lambda: cached()[0] >= 40, what="the process queue filled")
            else:
                await eventually(lambda: cached()[1] >= 1 << 20, what="the process queue filled")
            peak_count = peak_size = 0
            for _ in range(50):  # 1 s of samples
                n, size = cached()
                peak_count, peak_size = max(peak_count, n), max(peak_size, size)
                await asyncio.sleep(0.02)
            if limit == "count":
                assert 40 <= peak_count <= 40 + batch, peak_count
            else:
                assert 1 << 20 <= peak_size <= (1 << 20) + batch * body_bytes, peak_size
            assert len(rec.deliveries) <= 2  # the two consume threads, blocked
            release.set()
            await eventually(
                lambda: len(rec.done) >= count, timeout_s=30, what="all consumed after release"
            )
            await asyncio.sleep(0.5)
        finally:
            release.set()
            await c.shutdown()
        assert sorted(int(b[:6]) for b in rec.bodies()) == list(range(count))

    run(scenario)


@pytest.mark.parametrize("listener_kind", ["thread", "coroutine", "async_for"])
def test_a_flow_controlled_queue_pulls_again_once_its_listener_made_room(
    addrs: tuple[str, str], monkeypatch: pytest.MonkeyPatch, listener_kind: str
) -> None:
    """A queue over its threshold waits for room, not for a fixed pause: with the pause
    raised to a minute, a backlog 20 times the threshold still drains in seconds, each
    finished batch waking the pull loop it stopped."""
    namesrv, broker = addrs
    topic, group = f"TopicRoom_{listener_kind}", f"CG_ROOM_{listener_kind}"
    count, threshold = 400, 20
    create_topic(broker, topic, 1)
    monkeypatch.setattr("pyrmq.client.push_consumer.PULL_DELAY_ON_FLOW_CONTROL_S", 60.0)
    waits = 0
    wait_for_room = PushConsumer._wait_for_room

    async def counted(self: PushConsumer, pq: Any) -> None:
        nonlocal waits
        waits += 1
        await wait_for_room(self, pq)

    monkeypatch.setattr(PushConsumer, "_wait_for_room", counted)
    done: list[bytes] = []

    def on_thread(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        time.sleep(0.002)  # slower than the pulls, so the queue fills
        done.extend(m.body for m in msgs)

    async def on_loop(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        await asyncio.sleep(0.002)
        done.extend(m.body for m in msgs)

    async def scenario() -> None:
        await send_bodies(namesrv, topic, [f"r{i}".encode() for i in range(count)])
        c = PushConsumer(
            group,
            client_config=fast_config(namesrv),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            consume_thread_max=2,
            pull_batch_size=10,
            pull_threshold_for_queue=threshold,
        )
        if listener_kind == "thread":
            c.subscribe(topic, "*", on_thread)
        elif listener_kind == "coroutine":
            c.subscribe(topic, "*", on_loop)
        else:
            c.subscribe(topic)
        await c.start()
        task = None
        if listener_kind == "async_for":

            async def iterate() -> None:
                async for m in c:
                    await asyncio.sleep(0.002)
                    done.append(m.body)

            task = asyncio.get_running_loop().create_task(iterate())
        try:
            await eventually(lambda: len(done) >= count, what=f"{count} messages consumed")
        finally:
            await c.shutdown()
            if task is not None:
                await asyncio.wait_for(task, 5)
        assert sorted(done) == sorted(f"r{i}".encode() for i in range(count))
        assert waits >= 5, waits  # the queue was held back, again and again

    run(scenario)


# --- 9. a broker crash under a running producer and consumer ------------------------------


@pytest.mark.slow
def test_a_consumer_heartbeats_a_restarted_broker_before_it_pulls_from_it(
    tmp_path: Path,
) -> None:
    """A broker restarted on its port knows no consumer until one heartbeats, and holds to
    the queue access lock only the pulls of consumers it knows: the first pull over the new
    connection must come after a heartbeat, not at the next periodic one (60 s here)."""
    namesrv_proc = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    namesrv = namesrv_proc.addresses()[0]
    topic, group = "TopicRestartBeat", "CG_RESTART_BEAT"

    conf = tmp_path / "broker.conf"
    # The HA port would be the listen port + 1, which another socket may hold by the restart.
    conf.write_text("haListenPort=0\n")

    def start_broker(port: str) -> ServerProcess:
        return ServerProcess(
            [
                *("broker", "-n", namesrv, "-c", str(conf), "--store", str(tmp_path / "store")),
                *("--port", port),
            ],
            tmp_path / f"broker-{port}.log",
        )

    broker_proc = start_broker("0")
    try:
        addr = broker_proc.addresses()[-1]
        create_topic(addr, topic, 1)
        rec = Recorder()
        # Heartbeats every 60 s: none falls between the restart and the pull that follows it.
        config = fast_config(namesrv, heartbeat_broker_interval_s=60.0)

        async def send(body: bytes) -> None:
            # A client instance of its own: the consumer's would heartbeat as the producer starts.
            producer_config = fast_config(namesrv, instance_name="producer")
            async with Producer("PG_RESTART_BEAT", client_config=producer_config) as producer:
                assert (await producer.send(Message(topic, body))).status is SendStatus.OK

        async def scenario() -> None:
            nonlocal broker_proc
            c = consumer(namesrv, group, topic, rec, client_config=config)
            await c.start()
            api = ClientAPI(RemotingClient())
            try:
                await eventually(lambda: topic_queues(c, topic), what="queue assigned")
                await send(b"before")
                await eventually(lambda: len(rec.done) == 1, what="first message")
                await asyncio.sleep(FIRST_HEARTBEAT_S + 0.5)  # the early heartbeat is past
                broker_proc.kill()
                broker_proc = start_broker(addr.rpartition(":")[2])
                await send(b"after")
                await eventually(lambda: len(rec.done) == 2, what="second message")
                assert await api.consumer_ids(addr, group) == [c.instance.client_id]
            finally:
                await api.remoting.close()
                await c.shutdown()

        asyncio.run(asyncio.wait_for(scenario(), 60))
    finally:
        broker_proc.kill()
        namesrv_proc.kill()


def test_a_broker_killed_and_restarted_loses_no_acknowledged_message(tmp_path: Path) -> None:
    """namesrv + broker-a + broker-b (SYNC_FLUSH). A producer sends in a loop while broker-a
    is SIGKILLed and restarted on its port over its store; sends fail over to broker-b. Every
    message whose send returned OK is consumed at least once after broker-a is back."""
    namesrv_proc = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    namesrv = namesrv_proc.addresses()[0]
    brokers: dict[str, Any] = {}
    ports: dict[str, str] = {}

    def start_broker(name: str, port: str = "0") -> Any:
        conf = tmp_path / f"{name}.conf"
        conf.write_text(
            f"brokerName={name}\nbrokerClusterName=DefaultCluster\nbrokerId=0\n"
            "flushConsumerOffsetInterval=500\nhaListenPort=0\n"
        )
        proc = ServerProcess(
            [
                *("broker", "-n", namesrv, "-c", str(conf)),
                *("--store", str(tmp_path / name), "--port", port, "--flush", "sync"),
            ],
            tmp_path / f"{name}-{len(brokers)}.log",
        )
        brokers[name] = proc
        ports[name] = proc.addresses()[-1]
        return proc

    topic, group = "TopicBrokerCrash", "CG_BROKER_CRASH"
    acked: dict[str, tuple[str, str]] = {}  # body -> (broker, phase)
    failed: list[str] = []
    try:
        for name in ("broker-a", "broker-b"):
            start_broker(name)
            create_topic(ports[name], topic, 4)

        async def scenario() -> None:
            rec = Recorder()
            c = consumer(namesrv, group, topic, rec, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
            await c.start()
            try:
                await eventually(lambda: len(topic_queues(c, topic)) == 8, what="8 queues")
                async with Producer(
                    "PG_BROKER_CRASH",
                    client_config=fast_config(namesrv),
                    send_timeout_s=2.0,
                    fault_isolation_s=1.0,
                ) as producer:
                    loop = asyncio.get_running_loop()
                    # Each phase lasts this long from the moment it began, however long the
                    # kill and the restart took to return on a busy machine.
                    lasts = {"before": 2.0, "down": 2.0, "after": 4.0}
                    phase, since = "before", loop.time()
                    i = 0
                    while loop.time() - since < lasts[phase] or phase != "after":
                        if phase == "before" and loop.time() - since > lasts[phase]:
                            killed_at = loop.time()
                            brokers["broker-a"].kill()
                            phase, since = "down", loop.time()
                            kill_s = since - killed_at
                        elif phase == "down" and loop.time() - since > lasts[phase]:
                            port = ports["broker-a"].rpartition(":")[2]
                            await asyncio.to_thread(start_broker, "broker-a", port)
                            phase, since = "after", loop.time()
                        body = f"x{i}"
                        i += 1
                        try:
                            result = await producer.send(Message(topic, body.encode()))
                        except PyrmqError:
                            failed.append(body)
                        else:
                            if result.status is SendStatus.OK:
                                acked[body] = (result.message_queue.broker_name, phase)
                        await asyncio.sleep(0.01)
                by_phase = collections.Counter(acked.values())
                seen = f"{by_phase}, {len(failed)} failed, kill took ~{kill_s:.1f} s"
                # broker-a took messages before its crash and again after its restart;
                # broker-b took them all while broker-a was down.
                assert by_phase["broker-a", "before"] > 0, seen
                assert by_phase["broker-a", "after"] > 0, seen
                assert by_phase["broker-b", "down"] > 0, seen
                assert by_phase["broker-a", "down"] == 0, seen

                def all_consumed() -> bool:
                    return {m.body.decode() for m in rec.done} >= set(acked)

                await eventually(
                    all_consumed, timeout_s=40, what="every acknowledged message consumed"
                )
            finally:
                await c.shutdown()
            missing = set(acked) - {m.body.decode() for m in rec.done}
            assert not missing, sorted(missing)

        run(scenario, 90)
    finally:
        for proc in brokers.values():
            proc.stop()
        namesrv_proc.stop()


def test_a_listener_answer_that_is_no_status_is_a_failure_and_said_so(
    addrs: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """A listener returning the text "CONSUME_SUCCESS" (or a bool) has its messages delivered
    again, as for RECONSUME_LATER, and a warning says why, once (before, nothing was said)."""
    namesrv, broker = addrs
    topic, group = "TopicOddAnswer", "CG_ODD_ANSWER"
    create_topic(broker, topic, 1)
    deliveries: list[int] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> Any:
        deliveries.extend(m.reconsume_times for m in msgs)
        ctx.delay_level_when_next_consume = 1  # back in 1 s
        return "CONSUME_SUCCESS" if msgs[0].reconsume_times < 2 else None

    async def scenario() -> None:
        c = consumer(
            namesrv, group, topic, listener, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        async with c, Producer("PG_ODD_ANSWER", client_config=fast_config(namesrv)) as producer:
            await producer.send(Message(topic, b"odd"))
            await eventually(lambda: deliveries == [0, 1, 2], what="three deliveries")

    with caplog.at_level(logging.WARNING, logger="pyrmq.client.consume_service"):
        run(scenario)
    told = [r for r in caplog.records if "no consume status" in r.getMessage()]
    assert len(told) == 1
    assert "'CONSUME_SUCCESS'" in told[0].getMessage()
