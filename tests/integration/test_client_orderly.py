"""The orderly PushConsumer against a real ``pyrmq serve``: each queue consumed in offset
order, one batch at a time, by one consumer of the group; failures retried in place (queue
suspended, nothing sent back) and dead-lettered once out of retries; queues handed between
consumers only through the broker's locks.

Every consumer here runs in this process with its own client instance, intervals shortened
through ``ClientConfig`` (rebalance 1 s, lock renewal 1 s).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zstandard
from tests import helpers
from tests.compat.servers import create_topic, serving, start_serve
from tests.helpers import committed_offset, fast_config

from pyrmq.client import blocking
from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI, PullStatus
from pyrmq.client.consume_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from pyrmq.client.consume_service import ConsumeStatus
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import ClientStateError
from pyrmq.remoting.client import RemotingClient

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run
eventually = functools.partial(helpers.eventually, timeout_s=20.0, interval_s=0.02)
BROKER = "broker-a"


class OrderRecorder:
    """An orderly listener that records each call (thread-safe) and checks, across every
    consumer sharing it, that no two calls run on one queue at once."""

    def __init__(self, name: str = "c", busy_s: float = 0.0) -> None:
        self.name = name
        self.busy_s = busy_s
        self.lock = threading.Lock()
        self.calls: list[tuple[str, MessageQueue, list[int]]] = []
        self.running: dict[MessageQueue, str] = {}
        self.overlaps: list[tuple[MessageQueue, str, str]] = []
        self.fail: dict[int, int] = {}
        """queue offset -> how many deliveries of it fail (on queue 0 of the topic)."""

    def sharing(self, name: str) -> OrderRecorder:
        """The same record under another consumer's name."""
        other = OrderRecorder.__new__(OrderRecorder)
        other.__dict__ = dict(self.__dict__, name=name)
        return other

    def _enter(self, mq: MessageQueue) -> None:
        with self.lock:
            holder = self.running.get(mq)
            if holder is not None:
                self.overlaps.append((mq, holder, self.name))
            self.running[mq] = self.name

    def _leave(self, mq: MessageQueue, offsets: list[int]) -> ConsumeOrderlyStatus:
        with self.lock:
            self.running.pop(mq, None)
            self.calls.append((self.name, mq, offsets))
            left = self.fail.get(offsets[0], 0) if mq.queue_id == 0 else 0
            if left:
                self.fail[offsets[0]] = left - 1
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return ConsumeOrderlyStatus.SUCCESS

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        self._enter(ctx.message_queue)
        if self.busy_s:
            time.sleep(self.busy_s)
        return self._leave(ctx.message_queue, [m.queue_offset for m in msgs])

    async def coroutine(
        self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext
    ) -> ConsumeOrderlyStatus:
        self._enter(ctx.message_queue)
        await asyncio.sleep(self.busy_s)
        return self._leave(ctx.message_queue, [m.queue_offset for m in msgs])

    def done_offsets(self) -> dict[MessageQueue, list[int]]:
        """Per queue, the offsets of the calls in the order they were made, successful or
        not."""
        with self.lock:
            out: dict[MessageQueue, list[int]] = collections.defaultdict(list)
            for _, mq, offsets in self.calls:
                out[mq].extend(offsets)
            return out

    def count(self) -> int:
        with self.lock:
            return sum(len(o) for _, _, o in self.calls)


def topic_queues(c: PushConsumer, topic: str) -> list[MessageQueue]:
    return [q for q in c.assigned_queues() if q.topic == topic]


def orderly(namesrv: str, group: str, topic: str, listener: Any, **options: Any) -> PushConsumer:
    options.setdefault("client_config", fast_config(namesrv, lock_interval_s=1.0))
    options.setdefault("consume_from_where", "CONSUME_FROM_FIRST_OFFSET")
    c = PushConsumer(group, orderly=True, **options)
    c.subscribe(topic, "*", listener)
    return c


async def send_keyed(namesrv: str, topic: str, count: int, keys: int) -> dict[int, list[int]]:
    """Sends ``count`` messages ``k<key>-<seq>`` with ``send_orderly`` by key; returns the
    queue offsets each queue got, in order."""
    by_queue: dict[int, list[int]] = collections.defaultdict(list)
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        for i in range(count):
            key = i % keys
            r = await producer.send_orderly(Message(topic, f"k{key}-{i}".encode()), key)
            assert r.status is SendStatus.OK
            by_queue[r.message_queue.queue_id].append(r.queue_offset)
    return by_queue


async def pull_all(broker: str, topic: str) -> list[MessageExt]:
    """Queue 0 of ``topic``, from a fresh connection."""
    result = await helpers.pull_head(broker, BROKER, topic, 0)
    return result.messages if result.status is PullStatus.FOUND else []


async def lock(broker: str, group: str, client_id: str, mqs: list[MessageQueue]) -> set[Any]:
    remoting = RemotingClient()
    try:
        return await ClientAPI(remoting).lock_batch_mq(broker, group, client_id, mqs)
    finally:
        await remoting.close()


async def unlock(broker: str, group: str, client_id: str, mqs: list[MessageQueue]) -> None:
    remoting = RemotingClient()
    try:
        await ClientAPI(remoting).unlock_batch_mq(broker, group, client_id, mqs)
    finally:
        await remoting.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture
def addrs(server: Any) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    return namesrv, broker


class AwaitedRecorder:
    """An object with an async ``__call__``: a coroutine listener that is not a function."""

    def __init__(self, rec: OrderRecorder) -> None:
        self.rec = rec

    async def __call__(
        self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext
    ) -> ConsumeOrderlyStatus:
        return await self.rec.coroutine(msgs, ctx)


@pytest.mark.parametrize("listener_kind", ["thread", "coroutine_batch_3", "awaited_object"])
def test_each_queue_is_consumed_in_offset_order_one_call_at_a_time(
    addrs: tuple[str, str], listener_kind: str
) -> None:
    """400 keyed messages over 4 queues, 8 consume threads (or coroutines) and listeners that
    take a while: each queue's offsets reach the listener consecutively, never two calls of
    one queue at once, each message once; the committed offsets end at each queue's end. An
    object with an async ``__call__`` is awaited as a coroutine function is (it was once
    called in a thread, its coroutine dropped and its queues suspended for good)."""
    namesrv, broker = addrs
    topic, group = f"TopicOrderly_{listener_kind}", f"CG_ORDERLY_{listener_kind}"
    create_topic(broker, topic, 4)
    rec = OrderRecorder(busy_s=0.001)
    batch = 1 if listener_kind == "thread" else 3
    listener = {"thread": rec, "coroutine_batch_3": rec.coroutine}.get(
        listener_kind, AwaitedRecorder(rec)
    )

    async def scenario() -> None:
        sent = await send_keyed(namesrv, topic, 400, keys=16)
        assert sorted(sent) == [0, 1, 2, 3]
        c = orderly(
            namesrv,
            group,
            topic,
            listener,
            consume_thread_max=8,
            consume_message_batch_max_size=batch,
        )
        await c.start()
        try:
            await eventually(lambda: rec.count() >= 400, what="all consumed")
            await asyncio.sleep(0.3)
        finally:
            await c.shutdown()
        got = rec.done_offsets()
        for qid, offsets in sent.items():
            mq = MessageQueue(topic, BROKER, qid)
            assert got[mq] == offsets, mq
            assert await committed_offset(broker, group, mq) == offsets[-1] + 1
        assert rec.overlaps == []
        assert all(len(o) <= batch for _, _, o in rec.calls)
        if batch > 1:
            assert any(len(o) == batch for _, _, o in rec.calls)

    run(scenario)


def test_a_failed_message_is_retried_in_place_and_holds_its_queue_back(
    addrs: tuple[str, str],
) -> None:
    """Queue 0's message at offset 2 fails twice: it comes back after the suspension with
    reconsume_times 1 and 2, nothing behind it in queue 0 is delivered before it succeeds,
    other queues go on meanwhile, and nothing goes to the retry topic."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlySuspend", "CG_ORDERLY_SUSPEND"
    create_topic(broker, topic, 2)
    rec = OrderRecorder()
    rec.fail = {2: 2}
    seen: list[tuple[int, int, int, float]] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        for m in msgs:
            seen.append((m.queue_id, m.queue_offset, m.reconsume_times, time.monotonic()))
        return rec(msgs, ctx)

    async def scenario() -> None:
        await send_keyed(namesrv, topic, 12, keys=2)  # key k goes to queue k: 6 each
        c = orderly(namesrv, group, topic, listener, suspend_current_queue_time_ms=300)
        await c.start()
        try:
            await eventually(lambda: rec.count() >= 14, what="all consumed, with 2 retries")
        finally:
            await c.shutdown()
        queue0 = [(o, r) for q, o, r, _ in seen if q == 0]
        assert queue0 == [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0), (4, 0), (5, 0)]
        attempts = [t for q, o, _, t in seen if q == 0 and o == 2]
        assert all(b - a >= 0.25 for a, b in itertools.pairwise(attempts))
        # Queue 1 was not held back by queue 0's suspension.
        queue1_done = max(t for q, _, _, t in seen if q == 1)
        assert queue1_done < attempts[-1]
        assert await pull_all(broker, f"%RETRY%{group}") == []
        assert await committed_offset(broker, group, MessageQueue(topic, BROKER, 0)) == 6

    run(scenario)


def test_an_offset_reset_while_a_listener_call_runs_long_restarts_the_queue(
    addrs: tuple[str, str],
) -> None:
    """The reset drops the queue without waiting for the call (as RocketMQ's does): the call
    ends, but its result no longer moves the offset over the reset, and the queue taken again
    waits for it. Before, the queue was kept when the call outlasted the wait, and consumption
    went on from where it was."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyReset", "CG_ORDERLY_RESET"
    create_topic(broker, topic, 1)
    seen: list[int] = []
    slow_started = threading.Event()
    active = [0]
    overlaps: list[int] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        with lock:
            active[0] += 1
            if active[0] > 1:
                overlaps.extend(m.queue_offset for m in msgs)
        try:
            for m in msgs:
                seen.append(m.queue_offset)
                if m.queue_offset == 2 and seen.count(2) == 1:
                    slow_started.set()
                    time.sleep(2.0)
        finally:
            with lock:
                active[0] -= 1
        return ConsumeOrderlyStatus.SUCCESS

    async def scenario() -> None:
        before_ms = time.time_ns() // 1_000_000
        await asyncio.sleep(0.05)
        await send_keyed(namesrv, topic, 6, keys=1)
        c = orderly(namesrv, group, topic, listener)
        await c.start()
        try:
            await eventually(slow_started.is_set, what="the slow call")
            async with Admin(namesrv) as admin:
                reset = await admin.reset_offset_by_time(topic, group, before_ms)
            assert set(reset.values()) == {0}
            await eventually(lambda: len(seen) >= 9, what="the queue consumed again")
            await asyncio.sleep(0.5)
        finally:
            await c.shutdown()
        mq = MessageQueue(topic, BROKER, 0)
        assert seen == [0, 1, 2, 0, 1, 2, 3, 4, 5], seen
        # The queue taken again waited for the dropped one's call: never two at once.
        assert overlaps == []
        assert await committed_offset(broker, group, mq) == 6

    run(scenario)


def test_a_message_out_of_retries_goes_to_the_dead_letter_queue_and_its_queue_moves_on(
    addrs: tuple[str, str],
) -> None:
    """max_reconsume_times=2: a message that always fails is delivered 3 times, then stored in
    %DLQ%<group> with its body and properties, and the messages behind it are consumed."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyDlq", "CG_ORDERLY_DLQ"
    create_topic(broker, topic, 1)
    rec = OrderRecorder()
    rec.fail = {1: 1_000}
    sent: list[str] = []

    async def scenario() -> None:
        async with Producer("PG_ORDERLY_DLQ", client_config=fast_config(namesrv)) as producer:
            for i in range(4):
                msg = Message(topic, f"m{i}".encode(), tags="T", keys=f"k{i}")
                result = await producer.send_orderly(msg, 0)
                assert result.status is SendStatus.OK
                sent.append(result.msg_id)
        c = orderly(
            namesrv,
            group,
            topic,
            rec,
            max_reconsume_times=2,
            suspend_current_queue_time_ms=50,
        )
        await c.start()
        try:
            await eventually(lambda: rec.count() >= 6, what="all consumed or dead-lettered")
            await asyncio.sleep(0.3)
        finally:
            await c.shutdown()
        assert rec.done_offsets()[MessageQueue(topic, BROKER, 0)] == [0, 1, 1, 1, 2, 3]
        dead = await pull_all(broker, f"%DLQ%{group}")
        assert [(m.body, m.keys, m.tags) for m in dead] == [(b"m1", "k1", "T")]
        # As Java's orderly consumer sends it: its own retries counted, the producer's id kept
        # as the message's and named as the original.
        [copy] = dead
        assert copy.reconsume_times == 2
        assert copy.id == sent[1]
        assert copy.get_property("ORIGIN_MESSAGE_ID") == sent[1]
        assert copy.get_property("RETRY_TOPIC") == topic
        assert await committed_offset(broker, group, MessageQueue(topic, BROKER, 0)) == 4

    run(scenario)


@pytest.mark.parametrize("batch", [1, 4])
def test_a_message_whose_body_does_not_inflate_goes_to_the_dlq_in_its_turn_unseen(
    addrs: tuple[str, str], batch: int
) -> None:
    """A body flagged LZ4 that is not LZ4: no listener could read it, so it goes to the DLQ at
    once, as stored, and the messages on either side are consumed in order, a real Zstandard
    body among them."""
    namesrv, broker = addrs
    topic, group = f"TopicOrderlyUnreadable{batch}", f"CG_ORDERLY_UNREADABLE{batch}"
    create_topic(broker, topic, 1)
    big = b"zstd body " * 1000
    sends = [
        (b"m0", 0),
        (b"not lz4", 0x101),
        (zstandard.ZstdCompressor().compress(big), 0x201),
        (b"m3", 0),
    ]
    for body, sys_flag in sends:
        assert helpers.send_raw(broker, topic, body, sys_flag=sys_flag).code == 0
    bodies: list[bytes] = []
    rec = OrderRecorder()

    def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        bodies.extend(m.body for m in msgs)
        return rec(msgs, ctx)

    async def scenario() -> None:
        c = orderly(namesrv, group, topic, listener, consume_message_batch_max_size=batch)
        await c.start()
        try:
            await eventually(lambda: rec.count() >= 3, what="the readable messages consumed")
            await asyncio.sleep(0.3)
        finally:
            await c.shutdown()
        assert rec.done_offsets()[MessageQueue(topic, BROKER, 0)] == [0, 2, 3]
        assert bodies == [b"m0", big, b"m3"]
        [dead] = await pull_all(broker, f"%DLQ%{group}")
        # Sent back on its first delivery, which the broker counts.
        assert (dead.stored.body, dead.reconsume_times) == (b"not lz4", 1)
        assert await committed_offset(broker, group, MessageQueue(topic, BROKER, 0)) == 4

    run(scenario)


def test_a_queue_locked_by_another_client_is_consumed_only_once_it_is_free(
    addrs: tuple[str, str],
) -> None:
    """Another client holds queue 0's lock: the consumer takes and consumes queues 1-3 but
    not queue 0, and takes queue 0 soon after that client unlocks it."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyLocked", "CG_ORDERLY_LOCKED"
    create_topic(broker, topic, 4)
    rec = OrderRecorder()
    q0 = MessageQueue(topic, BROKER, 0)

    async def scenario() -> None:
        assert await lock(broker, group, "intruder@1", [q0]) == {q0}
        sent = await send_keyed(namesrv, topic, 40, keys=4)
        c = orderly(namesrv, group, topic, rec)
        await c.start()
        try:
            others = sum(len(sent[q]) for q in (1, 2, 3))
            await eventually(lambda: rec.count() >= others, what="queues 1-3 consumed")
            await asyncio.sleep(1.5)  # rebalances and lock retries later
            assert q0 not in c.assigned_queues()
            assert q0 not in rec.done_offsets()
            await unlock(broker, group, "intruder@1", [q0])
            await eventually(lambda: rec.count() >= 40, what="queue 0 consumed")
            assert rec.done_offsets()[q0] == sent[0]
            # Held by the consumer now: the other client is refused.
            assert await lock(broker, group, "intruder@1", [q0]) == set()
        finally:
            await c.shutdown()
        # Unlocked at shutdown: free at once, not after the broker's 60 s.
        assert await lock(broker, group, "intruder@1", [q0]) == {q0}

    run(scenario)


def test_queues_move_between_two_consumers_without_overlap_duplicates_or_gaps(
    addrs: tuple[str, str],
) -> None:
    """A second consumer joins while the first is busy with 8 queues, then the first leaves:
    every queue's offsets are consumed once, in order, and never by both at once."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyHandover", "CG_ORDERLY_HANDOVER"
    create_topic(broker, topic, 8)
    rec = OrderRecorder("a", busy_s=0.004)

    async def scenario() -> None:
        sent = await send_keyed(namesrv, topic, 800, keys=8)
        a = orderly(namesrv, group, topic, rec, instance_name="a", consume_thread_max=4)
        b = orderly(namesrv, group, topic, rec.sharing("b"), instance_name="b")
        await a.start()
        try:
            await eventually(lambda: rec.count() >= 100, what="a under way")
            await b.start()
            await eventually(
                lambda: len(topic_queues(a, topic)) == 4 and len(topic_queues(b, topic)) == 4,
                what="queues shared",
            )
            await eventually(lambda: rec.count() >= 300, what="both under way")
            await a.shutdown()
            await eventually(lambda: rec.count() >= 800, what="b took over and finished")
        finally:
            await a.shutdown()
            await b.shutdown()
        got = rec.done_offsets()
        for qid, offsets in sent.items():
            assert got[MessageQueue(topic, BROKER, qid)] == offsets
        assert rec.overlaps == []
        owners: dict[MessageQueue, set[str]] = collections.defaultdict(set)
        for name, mq, _ in rec.calls:
            owners[mq].add(name)
        # Queues really moved mid-stream, in both directions of the test.
        assert sum(1 for names in owners.values() if names == {"a", "b"}) >= 2, owners

    run(scenario, timeout_s=90)


def test_broadcasting_orderly_consumers_each_get_every_queue_in_order(
    addrs: tuple[str, str],
) -> None:
    """Broadcasting takes no locks: both consumers get all of every queue, in order."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyBroadcast", "CG_ORDERLY_BROADCAST"
    create_topic(broker, topic, 2)
    recs = [OrderRecorder("a"), OrderRecorder("b")]

    async def scenario() -> None:
        sent = await send_keyed(namesrv, topic, 60, keys=2)
        cs = [
            orderly(namesrv, group, topic, r, instance_name=r.name, message_model="BROADCASTING")
            for r in recs
        ]
        for c in cs:
            await c.start()
        try:
            await eventually(lambda: all(r.count() >= 60 for r in recs), what="all consumed")
        finally:
            for c in cs:
                await c.shutdown()
        for r in recs:
            got = r.done_offsets()
            for qid, offsets in sent.items():
                assert got[MessageQueue(topic, BROKER, qid)] == offsets

    run(scenario)


def test_an_orderly_consumer_without_a_listener_for_a_topic_refuses_to_start(
    addrs: tuple[str, str],
) -> None:
    namesrv, _ = addrs

    async def scenario() -> None:
        c = PushConsumer("CG_ORDERLY_NOLISTENER", client_config=fast_config(namesrv), orderly=True)
        c.subscribe("TopicOrderlyNoListener")
        with pytest.raises(ClientStateError, match="no listener for TopicOrderlyNoListener"):
            await c.start()

    run(scenario)


def test_the_blocking_consumer_with_orderly_true_consumes_in_order_and_retries_in_place(
    addrs: tuple[str, str],
) -> None:
    """The official client's API: ``PushConsumer(group, orderly=True)``; RECONSUME_LATER
    suspends the queue and redelivers the message first."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyBlocking", "CG_ORDERLY_BLOCKING"
    create_topic(broker, topic, 1)
    got: list[tuple[bytes, int]] = []
    done = threading.Event()

    def callback(msg: Any) -> ConsumeStatus:
        got.append((msg.body, msg.reconsume_times))
        if msg.body == b"m1" and msg.reconsume_times == 0:
            return ConsumeStatus.RECONSUME_LATER
        if len(got) == 6:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    producer = blocking.Producer("PG_ORDERLY_BLOCKING")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        for i in range(5):
            msg = blocking.Message(topic)
            msg.set_body(f"m{i}")
            producer.send_orderly_with_sharding_key(msg, "k")
    finally:
        producer.shutdown()
    c = blocking.PushConsumer(group, orderly=True)
    c.set_namesrv_addr(namesrv)
    c.set_consume_from_where("CONSUME_FROM_FIRST_OFFSET")
    c.subscribe(topic, callback)
    c.start()
    try:
        assert done.wait(30)
    finally:
        c.shutdown()
    assert got == [(b"m0", 0), (b"m1", 0), (b"m1", 1), (b"m2", 0), (b"m3", 0), (b"m4", 0)]


def test_queue_locks_survive_a_broker_killed_and_restarted(tmp_path: Path) -> None:
    """A restarted broker that forgot its locks would give a queue to whichever client asked
    first while its holder still trusts its lock: two consumers at once. Holders are on disk
    before the answer, so after kill -9 the holder keeps the queue and others are refused."""
    q0, q1 = (MessageQueue("TopicLocksKept", BROKER, i) for i in (0, 1))
    group = "CG_LOCKS_KEPT"
    server = start_serve(tmp_path)
    try:
        broker = server.addresses()[1]
        create_topic(broker, q0.topic, 2)
        assert run_locks(lock(broker, group, "holder@1", [q0, q1])) == {q0, q1}
        assert run_locks(unlock(broker, group, "holder@1", [q1])) is None
    finally:
        server.kill()
    server = start_serve(tmp_path)
    try:
        broker = server.addresses()[1]
        assert run_locks(lock(broker, group, "other@2", [q0, q1])) == {q1}
        assert run_locks(lock(broker, group, "holder@1", [q0])) == {q0}
        assert run_locks(unlock(broker, group, "holder@1", [q0])) is None
        assert run_locks(lock(broker, group, "other@2", [q0])) == {q0}
    finally:
        assert server.stop() == 0


def run_locks(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_batch_dead_lettered_while_the_consumer_shuts_down_still_reaches_the_dlq(
    addrs: tuple[str, str],
) -> None:
    """Shutdown lets the call in progress settle: one that fails its last retry is sent to
    the DLQ and committed, not left for the next owner."""
    namesrv, broker = addrs
    topic, group = "TopicOrderlyDlqAtStop", "CG_ORDERLY_DLQ_AT_STOP"
    create_topic(broker, topic, 1)
    started = threading.Event()

    def listener(msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        started.set()
        time.sleep(0.5)
        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def scenario() -> None:
        async with Producer("PG_ORDERLY_DLQ_STOP", client_config=fast_config(namesrv)) as p:
            assert (await p.send_orderly(Message(topic, b"poison"), 0)).status is SendStatus.OK
        c = orderly(namesrv, group, topic, listener, max_reconsume_times=0)
        await c.start()
        await asyncio.to_thread(started.wait, 20)
        await c.shutdown()
        assert [m.body for m in await pull_all(broker, f"%DLQ%{group}")] == [b"poison"]
        assert await committed_offset(broker, group, MessageQueue(topic, BROKER, 0)) == 1

    run(scenario)
