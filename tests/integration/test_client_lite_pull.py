"""The asyncio LitePullConsumer against an in-process name server and broker: assign and
subscribe (rebalanced across a group), seek, commits, pause/resume, tag filters, broadcasting
with local offsets, and the offset search by time."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from tests import helpers
from tests.helpers import eventually
from tests.integration.client_cluster import client_cluster

from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.message import Message, MessageExt, MessageQueue
from pyrmq.client.producer import Producer
from pyrmq.errors import ClientError, ClientStateError, ConfigError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

FIRST = "CONSUME_FROM_FIRST_OFFSET"
# A group with no offset starts at 0 while its queue's first message is in memory, as in
# RocketMQ, whatever its consumeFromWhere; with none in memory, consumeFromWhere decides.
ON_DISK = {"access_message_in_memory_max_ratio": 0}
BROKER = "broker-a"


run = functools.partial(helpers.run, timeout_s=20)


def queues(topic: str, n: int) -> list[MessageQueue]:
    return [MessageQueue(topic, BROKER, i) for i in range(n)]


async def send_to(p: Producer, mq: MessageQueue, bodies: Iterable[str], **kw: Any) -> None:
    for body in bodies:
        await p.send(Message(mq.topic, body.encode(), **kw), queue=mq)


async def poll_batches(
    consumer: LitePullConsumer, count: int, timeout_s: float = 5.0
) -> list[list[MessageExt]]:
    """Polls until ``count`` messages came; fails after ``timeout_s``."""
    batches: list[list[MessageExt]] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while sum(map(len, batches)) < count:
        remaining = deadline - loop.time()
        if remaining <= 0:
            got = sum(map(len, batches))
            raise AssertionError(f"polled {got} of {count} messages within {timeout_s} s")
        batch = await consumer.poll(timeout_s=min(remaining, 0.5))
        if batch:
            batches.append(batch)
    return batches


async def poll_n(
    consumer: LitePullConsumer, count: int, timeout_s: float = 5.0
) -> list[MessageExt]:
    return [m for b in await poll_batches(consumer, count, timeout_s) for m in b]


def offsets_of(msgs: Iterable[MessageExt], queue_id: int | None = None) -> list[int]:
    return [m.queue_offset for m in msgs if queue_id is None or m.queue_id == queue_id]


# --- assign ----------------------------------------------------------------------------------


def test_assign_polls_every_message_once_in_queue_order(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteAssign", 4)
            mqs = queues("LiteAssign", 4)
            async with Producer("PG", c.namesrv_addr) as p:
                for mq in mqs:
                    await send_to(p, mq, [f"{mq.queue_id}-{n}" for n in range(10)])
                consumer = LitePullConsumer(
                    "CG_ASSIGN", c.namesrv_addr, consume_from_where=FIRST, pull_batch_size=4
                )
                consumer.assign(mqs)  # before start
                async with consumer:
                    assert sorted(await consumer.fetch_message_queues("LiteAssign")) == mqs
                    assert consumer.assignment() == set(mqs)
                    # Heartbeats name it a pull consumer; shutdown unregisters it.
                    members = c.broker(0).clients.members("CG_ASSIGN")
                    assert [m.consume_type for m in members] == ["CONSUME_ACTIVELY"]
                    batches = await poll_batches(consumer, 40)
                    assert await consumer.poll(timeout_s=0.3) == []
                for batch in batches:
                    assert 1 <= len(batch) <= 4
                    assert len({m.queue_id for m in batch}) == 1  # one queue per batch
                got = [m for b in batches for m in b]
                assert len(got) == 40
                for mq in mqs:
                    mine = [m for m in got if m.queue_id == mq.queue_id]
                    assert offsets_of(mine) == list(range(10))
                    assert [m.body for m in mine] == [
                        f"{mq.queue_id}-{n}".encode() for n in range(10)
                    ]
                    assert all(m.topic == "LiteAssign" and m.broker_name == BROKER for m in mine)
                    # The queue's offsets at the pull, as Java's consumers add them.
                    assert {m.get_property("MIN_OFFSET") for m in mine} == {"0"}
                    assert {m["MAX_OFFSET"] for m in mine} == {"10"}
                    assert mine[0].properties["MAX_OFFSET"] == "10"
                assert c.broker(0).clients.members("CG_ASSIGN") == []

    run(scenario)


def test_bad_configuration_and_calls_out_of_state_raise(tmp_path: Path) -> None:
    async def scenario() -> None:
        with pytest.raises(ConfigError) as info:
            LitePullConsumer("G", message_model="SOMETIMES", pull_batch_size=0)
        assert len(info.value.problems) == 2
        consumer = LitePullConsumer("G", "127.0.0.1:1")
        with pytest.raises(ClientStateError):
            await consumer.poll(timeout_s=0)
        consumer.subscribe("T")
        with pytest.raises(ClientStateError):
            consumer.assign(queues("T", 1))

    run(scenario)


# --- subscribe ---------------------------------------------------------------------------------


def test_two_consumers_of_a_group_split_the_queues_and_get_everything_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteShared", 4)
            mqs = set(queues("LiteShared", 4))
            c1 = LitePullConsumer("CG_SHARED", c.namesrv_addr, consume_from_where=FIRST)
            c2 = LitePullConsumer("CG_SHARED", c.namesrv_addr, consume_from_where=FIRST)
            c1.subscribe("LiteShared")
            c2.subscribe("LiteShared")
            async with c1, c2, Producer("PG", c.namesrv_addr) as p:
                assert c1.instance.client_id != c2.instance.client_id

                def split() -> bool:
                    a, b = c1.assignment(), c2.assignment()
                    return bool(a) and bool(b) and not a & b and a | b == mqs

                await eventually(split, 5.0, "disjoint assignments covering every queue")
                members = c.broker(0).clients.members("CG_SHARED")
                assert sorted(m.client_id for m in members) == sorted(
                    [c1.instance.client_id, c2.instance.client_id]
                )
                assert {m.consume_type for m in members} == {"CONSUME_ACTIVELY"}
                assert {m.message_model for m in members} == {"CLUSTERING"}

                sent = set()
                for i in range(40):
                    result = await p.send(Message("LiteShared", f"m{i}".encode()))
                    sent.add(result.msg_id)
                got: dict[LitePullConsumer, list[MessageExt]] = {c1: [], c2: []}
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 5.0
                while sum(map(len, got.values())) < 40 and loop.time() < deadline:
                    for consumer in (c1, c2):
                        got[consumer] += await consumer.poll(timeout_s=0.05)
                ids1 = [m.id for m in got[c1]]
                ids2 = [m.id for m in got[c2]]
                assert len(ids1) + len(ids2) == 40
                assert set(ids1) | set(ids2) == sent
                assert not set(ids1) & set(ids2)
                assert {m.message_queue for m in got[c1]} <= c1.assignment()
                assert {m.message_queue for m in got[c2]} <= c2.assignment()
                assert await c1.poll(timeout_s=0.2) == []
                assert await c2.poll(timeout_s=0.2) == []

    run(scenario)


def test_a_queue_that_moves_to_another_consumer_resumes_at_the_committed_offset(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteMove", 2)
            mqs = queues("LiteMove", 2)
            async with Producer("PG", c.namesrv_addr) as p:
                for mq in mqs:
                    await send_to(p, mq, [f"{mq.queue_id}-{n}" for n in range(6)])
                c1 = LitePullConsumer(
                    "CG_MOVE", c.namesrv_addr, consume_from_where=FIRST, pull_batch_size=3
                )
                c1.subscribe("LiteMove")
                async with c1:
                    await eventually(lambda: c1.assignment() == set(mqs), 5.0, "both queues")
                    first = await poll_n(c1, 12)
                    assert sorted(offsets_of(first)) == sorted(list(range(6)) * 2)
                    await c1.commit()  # the new owner may ask before c1 lets the queue go
                    c2 = LitePullConsumer("CG_MOVE", c.namesrv_addr, consume_from_where=FIRST)
                    c2.subscribe("LiteMove")
                    async with c2:
                        await eventually(
                            lambda: len(c1.assignment()) == 1 and len(c2.assignment()) == 1,
                            5.0,
                            "one queue each",
                        )
                        (moved,) = c2.assignment()
                        assert c.broker(0).offsets.query("CG_MOVE", "LiteMove", moved.queue_id) == 6
                        await send_to(p, moved, ["late"])
                        late = await poll_n(c2, 1)
                        assert [(m.queue_offset, m.body) for m in late] == [(6, b"late")]

    run(scenario)


def test_tag_expression_filters_messages(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteTags", 2)
            consumer = LitePullConsumer("CG_TAGS", c.namesrv_addr, consume_from_where=FIRST)
            async with consumer, Producer("PG", c.namesrv_addr) as p:
                consumer.subscribe("LiteTags", "TagA || TagC")  # after start
                await eventually(lambda: len(consumer.assignment()) == 2, 5.0, "assignment")
                (member,) = c.broker(0).clients.members("CG_TAGS")
                assert member.subscriptions["LiteTags"].expression == "TagA || TagC"
                wanted = set()
                for i, tag in enumerate(["TagA", "TagB", "TagC", None] * 4):
                    await p.send(Message("LiteTags", f"{tag}-{i}".encode(), tags=tag))
                    if tag in ("TagA", "TagC"):
                        wanted.add(f"{tag}-{i}".encode())
                got = await poll_n(consumer, 8)
                assert {m.body for m in got} == wanted
                assert {m.tags for m in got} == {"TagA", "TagC"}
                assert await consumer.poll(timeout_s=0.3) == []

    run(scenario)


# --- seek --------------------------------------------------------------------------------------


def test_seek_seek_to_begin_and_seek_to_end(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteSeek", 2)
            q0, q1 = queues("LiteSeek", 2)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(10)])
                consumer = LitePullConsumer(
                    "CG_SEEK", c.namesrv_addr, consume_from_where=FIRST, auto_commit=False
                )
                async with consumer:
                    consumer.assign([q0])  # after start
                    assert offsets_of(await poll_n(consumer, 10)) == list(range(10))

                    await consumer.seek(q0, 3)
                    assert offsets_of(await poll_n(consumer, 7)) == list(range(3, 10))
                    assert await consumer.poll(timeout_s=0.2) == []

                    await consumer.seek_to_begin(q0)
                    again = await poll_n(consumer, 10)
                    assert [m.body for m in again] == [f"m{n}".encode() for n in range(10)]

                    await consumer.seek_to_end(q0)
                    assert await consumer.poll(timeout_s=0.3) == []
                    await send_to(p, q0, ["after-end"])
                    late = await poll_n(consumer, 1)
                    assert [(m.queue_offset, m.body) for m in late] == [(10, b"after-end")]

                    # A seek moves the consume offset too: commit stores it.
                    await consumer.seek(q0, 5)
                    await consumer.commit()
                    assert c.broker(0).offsets.query("CG_SEEK", "LiteSeek", 0) == 5

                    with pytest.raises(ClientError, match="outside"):
                        await consumer.seek(q0, 12)
                    with pytest.raises(ClientError, match="not assigned"):
                        await consumer.seek(q1, 0)

    run(scenario)


# --- commits -----------------------------------------------------------------------------------


def test_auto_commit_then_a_new_consumer_resumes_at_the_committed_offset(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteAuto", 1)
            (q0,) = queues("LiteAuto", 1)
            offsets = c.broker(0).offsets
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(10)])
                c1 = LitePullConsumer(
                    "CG_AUTO",
                    c.namesrv_addr,
                    consume_from_where=FIRST,
                    pull_batch_size=4,
                    auto_commit_interval_s=0.1,
                )
                c1.assign([q0])
                await c1.start()
                try:
                    assert offsets_of(await c1.poll(timeout_s=3)) == [0, 1, 2, 3]
                    # The application may still work on the batch: however many commits
                    # pass, none covers it (a crash now must not lose it).
                    await asyncio.sleep(0.6)
                    await c1.persist_offsets()
                    await asyncio.sleep(0.2)
                    assert offsets.query("CG_AUTO", "LiteAuto", 0) in (None, 0)
                    # Polling again says it is done with: committed periodically from then on.
                    assert offsets_of(await c1.poll(timeout_s=3)) == [4, 5, 6, 7]
                    await eventually(lambda: offsets.query("CG_AUTO", "LiteAuto", 0) == 4)
                finally:
                    await c1.shutdown()
                # ... and at shutdown, synchronously; still not the batch it last polled.
                assert offsets.query("CG_AUTO", "LiteAuto", 0) == 4

                c2 = LitePullConsumer("CG_AUTO", c.namesrv_addr)  # LAST: committed offset wins
                c2.assign([q0])
                async with c2:
                    assert await c2.committed(q0) == 4
                    rest = await poll_n(c2, 6)
                    assert [m.body for m in rest] == [b"m%d" % n for n in range(4, 10)]
                    assert await c2.poll(timeout_s=0.2) == []

    run(scenario)


def test_manual_commit_and_commit_of_given_offsets(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteManual", 1)
            (q0,) = queues("LiteManual", 1)
            offsets = c.broker(0).offsets
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(10)])
                c1 = LitePullConsumer(
                    "CG_MANUAL",
                    c.namesrv_addr,
                    consume_from_where=FIRST,
                    pull_batch_size=4,
                    auto_commit=False,
                )
                c1.assign([q0])
                async with c1:
                    # Nothing committed, and the queue starts at 0 in memory: RocketMQ's 0.
                    assert await c1.committed(q0) == 0
                    assert offsets_of(await c1.poll(timeout_s=3)) == [0, 1, 2, 3]
                    await c1.commit()  # waits for the broker
                    assert offsets.query("CG_MANUAL", "LiteManual", 0) == 4
                    assert await c1.committed(q0) == 4
                    assert offsets_of(await c1.poll(timeout_s=3)) == [4, 5, 6, 7]
                # Without auto-commit, what was polled after the commit is not committed.
                assert offsets.query("CG_MANUAL", "LiteManual", 0) == 4

                c2 = LitePullConsumer("CG_MANUAL", c.namesrv_addr, auto_commit=False)
                c2.assign([q0])
                async with c2:
                    assert offsets_of(await poll_n(c2, 6)) == [4, 5, 6, 7, 8, 9]
                    await c2.commit({q0: 9})
                    assert offsets.query("CG_MANUAL", "LiteManual", 0) == 9
                    assert await c2.committed(q0) == 9

    run(scenario)


def test_a_queue_dropped_from_the_assignment_commits_what_was_done_with(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteDrop", 2)
            q0, q1 = queues("LiteDrop", 2)
            offsets = c.broker(0).offsets
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q1, [f"m{n}" for n in range(3)])
                consumer = LitePullConsumer("CG_DROP", c.namesrv_addr, consume_from_where=FIRST)
                consumer.assign([q0, q1])
                async with consumer:
                    assert offsets_of(await poll_n(consumer, 3)) == [0, 1, 2]
                    # Done with them: the application polls again.
                    assert await consumer.poll(timeout_s=0.1) == []
                    consumer.assign([q0])
                    assert consumer.assignment() == {q0}
                    await eventually(lambda: offsets.query("CG_DROP", "LiteDrop", 1) == 3)
                    await send_to(p, q1, ["unseen"])
                    assert await consumer.poll(timeout_s=0.3) == []

    run(scenario)


def test_the_message_an_async_for_body_raised_on_is_not_committed(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteRaise", 1)
            (q0,) = queues("LiteRaise", 1)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(10)])
            consumer = LitePullConsumer("CG_RAISE", c.namesrv_addr, consume_from_where=FIRST)
            consumer.assign([q0])
            finished = []

            async def handle() -> None:
                async with contextlib.aclosing(aiter(consumer)) as it:
                    async for msg in it:
                        if msg.body == b"m5":
                            raise LookupError("cannot handle m5")
                        finished.append(msg.body)

            async with consumer:
                with pytest.raises(LookupError):
                    await handle()
            assert finished == [f"m{n}".encode() for n in range(5)]
            assert c.broker(0).offsets.query("CG_RAISE", "LiteRaise", 0) == 5

    run(scenario)


def test_without_auto_commit_only_commit_stores_a_seek(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteSeek", 1)
            (q0,) = queues("LiteSeek", 1)
            offsets = c.broker(0).offsets
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(10)])
            kept = LitePullConsumer(
                "CG_SEEK", c.namesrv_addr, consume_from_where=FIRST, auto_commit=False
            )
            kept.assign([q0])
            async with kept:
                assert len(await poll_n(kept, 10)) == 10
                await kept.commit()
                await kept.seek(q0, 2)
                assert offsets_of(await kept.poll(timeout_s=3))[0] == 2
            assert offsets.query("CG_SEEK", "LiteSeek", 0) == 10

            fresh = LitePullConsumer("CG_SEEK_NEW", c.namesrv_addr, auto_commit=False)
            fresh.assign([q0])
            async with fresh:
                await fresh.seek_to_end(q0)
            # What the broker answered at the start (0: the queue starts in memory), not 10.
            assert offsets.query("CG_SEEK_NEW", "LiteSeek", 0) == 0

    run(scenario)


def test_a_queue_handed_over_before_anything_was_polled_loses_nothing(tmp_path: Path) -> None:
    """CONSUME_FROM_LAST_OFFSET on a broker that keeps nothing in memory: the first consumer
    starts every queue at its end and commits that start, messages arrive, and a second one
    takes half the queues before the first polled anything. It must resume where the first
    started them, not at the (newer) end."""

    async def scenario() -> None:
        async with client_cluster(tmp_path, store=ON_DISK) as c:
            await c.create_topic("LiteHandover", 4)
            mqs = queues("LiteHandover", 4)

            def consumer(name: str) -> LitePullConsumer:
                cons = LitePullConsumer(
                    "CG_HANDOVER", c.namesrv_addr, instance_name=name, auto_commit_interval_s=0.2
                )
                cons.subscribe("LiteHandover")
                return cons

            async with Producer("PG", c.namesrv_addr) as p:
                for mq in mqs:
                    await send_to(p, mq, ["old"])
                first = consumer("first")
                async with first:
                    await eventually(
                        lambda: (
                            len(first.assignment()) == 4
                            and all(s.pull_offset == 1 for s in first._assigned.values())
                        ),
                        5.0,
                        "every queue started at its end",
                    )
                    await eventually(
                        lambda: all(
                            c.broker(0).offsets.query("CG_HANDOVER", "LiteHandover", q) == 1
                            for q in range(4)
                        ),
                        5.0,
                        "the starts committed",
                    )
                    for i, mq in enumerate(mqs):
                        await send_to(p, mq, [f"new{i}"])
                    second = consumer("second")
                    async with second:
                        await eventually(
                            lambda: len(first.assignment()) == len(second.assignment()) == 2,
                            10.0,
                            "the queues shared",
                        )
                        got: list[bytes] = []

                        async def poll_both() -> bool:
                            for cons in (first, second):
                                got.extend(m.body for m in await cons.poll(timeout_s=0.1))
                            return len(got) >= 4

                        for _ in range(50):
                            if await poll_both():
                                break
                        assert sorted(got) == [f"new{i}".encode() for i in range(4)]

    run(scenario)


# --- pause and flow control --------------------------------------------------------------------


def test_pause_holds_back_a_queue_until_resume(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LitePause", 2)
            q0, q1 = queues("LitePause", 2)
            consumer = LitePullConsumer("CG_PAUSE", c.namesrv_addr, consume_from_where=FIRST)
            consumer.assign([q0, q1])
            async with consumer, Producer("PG", c.namesrv_addr) as p:
                consumer.pause([q0])
                await send_to(p, q0, [f"a{n}" for n in range(5)])
                await send_to(p, q1, [f"b{n}" for n in range(5)])
                got = await poll_n(consumer, 5)
                assert {m.queue_id for m in got} == {1}
                assert await consumer.poll(timeout_s=0.3) == []

                consumer.resume([q0])
                got = await poll_n(consumer, 5)
                assert [m.body for m in got] == [f"a{n}".encode() for n in range(5)]

                # Messages buffered before a pause are held back too.
                await send_to(p, q0, ["a5"])
                await eventually(lambda: consumer._assigned[q0].batches, 5.0, "a5 buffered")
                consumer.pause([q0])
                assert await consumer.poll(timeout_s=0.2) == []
                consumer.resume([q0])
                assert [m.body for m in await poll_n(consumer, 1)] == [b"a5"]

    run(scenario)


def test_a_queue_stops_pulling_while_its_buffer_is_full(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteFlow", 1)
            (q0,) = queues("LiteFlow", 1)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, [f"m{n}" for n in range(30)])
                consumer = LitePullConsumer(
                    "CG_FLOW",
                    c.namesrv_addr,
                    consume_from_where=FIRST,
                    pull_batch_size=4,
                    pull_threshold_for_queue=6,
                )
                consumer.assign([q0])
                async with consumer:
                    state = consumer._assigned[q0]
                    await eventually(lambda: state.pq.msg_count >= 6, 5.0, "buffer filled")
                    await asyncio.sleep(0.2)
                    assert state.pq.msg_count == 8  # two pulls of 4, then it waits
                    got = await poll_n(consumer, 30)
                    assert offsets_of(got) == list(range(30))

    run(scenario)


# --- broadcasting ------------------------------------------------------------------------------


def test_broadcasting_gives_every_consumer_everything_and_keeps_offsets_locally(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        offsets_dir = tmp_path / "offsets"
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteBroadcast", 2)
            mqs = set(queues("LiteBroadcast", 2))

            def consumer(name: str) -> LitePullConsumer:
                cons = LitePullConsumer(
                    "CG_BC",
                    c.namesrv_addr,
                    message_model="BROADCASTING",
                    consume_from_where=FIRST,
                    instance_name=name,
                    offsets_dir=offsets_dir,
                )
                cons.subscribe("LiteBroadcast")
                return cons

            a, b = consumer("bc-a"), consumer("bc-b")
            async with Producer("PG", c.namesrv_addr) as p:
                async with a, b:
                    await eventually(
                        lambda: a.assignment() == mqs and b.assignment() == mqs, 5.0, "all"
                    )
                    sent = {
                        (await p.send(Message("LiteBroadcast", f"m{i}".encode()))).msg_id
                        for i in range(10)
                    }
                    assert {m.id for m in await poll_n(a, 10)} == sent
                    assert {m.id for m in await poll_n(b, 10)} == sent
                    # Done with them: committed at shutdown.
                    assert await a.poll(timeout_s=0.1) == []
                    client_id = a.instance.client_id
                files = list(offsets_dir.glob("*/CG_BC/offsets.json"))
                assert len(files) == 2
                assert c.broker(0).offsets.query("CG_BC", "LiteBroadcast", 0) is None

                # Same client id: starts where the file says, not at the first offset.
                a2 = consumer("bc-a")
                async with a2:
                    assert a2.instance.client_id == client_id
                    await eventually(lambda: a2.assignment() == mqs, 5.0, "all queues")
                    committed = [await a2.committed(mq) for mq in sorted(mqs)]
                    assert sum(o or 0 for o in committed) == 10
                    more = {
                        (await p.send(Message("LiteBroadcast", f"n{i}".encode()))).msg_id
                        for i in range(4)
                    }
                    assert {m.id for m in await poll_n(a2, 4)} == more
                    assert await a2.poll(timeout_s=0.3) == []

    run(scenario)


# --- time --------------------------------------------------------------------------------------


def test_offset_for_timestamp_and_consume_from_timestamp(tmp_path: Path) -> None:
    async def scenario() -> None:
        # A broker that keeps no message in memory: a new group starts where it says.
        async with client_cluster(tmp_path, store=ON_DISK) as c:
            await c.create_topic("LiteTime", 1)
            (q0,) = queues("LiteTime", 1)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, ["old0", "old1", "old2"])
                await asyncio.sleep(0.05)
                ts = time.time_ns() // 1_000_000
                await asyncio.sleep(0.05)
                await send_to(p, q0, ["new0", "new1", "new2"])
                consumer = LitePullConsumer(
                    "CG_TIME",
                    c.namesrv_addr,
                    consume_from_where="CONSUME_FROM_TIMESTAMP",
                    consume_timestamp_ms=ts,
                )
                consumer.assign([q0])
                async with consumer:
                    assert await consumer.offset_for_timestamp(q0, ts) == 3
                    assert await consumer.offset_for_timestamp(q0, 0) == 0
                    assert await consumer.offset_for_timestamp(q0, ts + 3_600_000) == 6
                    # RocketMQ 5's upper boundary: the last message stored at or before.
                    upper = await consumer.offset_for_timestamp(q0, ts, boundary="upper")
                    assert upper == 2
                    assert await consumer.offset_for_timestamp(q0, 0, boundary="upper") == 0
                    got = await poll_n(consumer, 3)
                    assert [m.body for m in got] == [b"new0", b"new1", b"new2"]

    run(scenario)


def test_a_broker_reset_by_time_moves_the_consumer_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path) as c:
            await c.create_topic("LiteReset", 1)
            (q0,) = queues("LiteReset", 1)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, ["old0", "old1"])
                await asyncio.sleep(0.05)
                mark_ms = time.time_ns() // 1_000_000
                await asyncio.sleep(0.05)
                await send_to(p, q0, ["new0", "new1"])
                consumer = LitePullConsumer("CG_RESET", c.namesrv_addr, consume_from_where=FIRST)
                consumer.subscribe("LiteReset")
                async with consumer:
                    assert len(await poll_n(consumer, 4)) == 4
                    await consumer.commit()
                    admin = RemotingClient()
                    try:
                        request = RemotingCommand.request(
                            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                            {"topic": "LiteReset", "group": "CG_RESET",
                             "timestamp": str(mark_ms), "isForce": "true"},
                        )  # fmt: skip
                        answer = await admin.invoke(c.broker(0).address, request, 5.0)
                        assert answer.code == ResponseCode.SUCCESS, answer.remark
                    finally:
                        await admin.close()
                    again = await poll_n(consumer, 2)
                    assert [m.body for m in again] == [b"new0", b"new1"]
                    assert await consumer.committed(q0) == 2

    run(scenario)


# --- iteration ---------------------------------------------------------------------------------


def test_async_for_yields_new_messages_and_ends_at_shutdown(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client_cluster(tmp_path, store=ON_DISK) as c:
            await c.create_topic("LiteIter", 1)
            (q0,) = queues("LiteIter", 1)
            async with Producer("PG", c.namesrv_addr) as p:
                await send_to(p, q0, ["before"])  # LAST: a new group skips this
                consumer = LitePullConsumer("CG_ITER", c.namesrv_addr, poll_timeout_s=0.2)
                consumer.assign([q0])
                await consumer.start()
                await eventually(
                    lambda: consumer._assigned[q0].pull_offset is not None, 5.0, "start offset"
                )
                await send_to(p, q0, ["a", "b", "c"])
                bodies = []
                async with contextlib.aclosing(aiter(consumer)) as it:
                    async for msg in it:
                        bodies.append(msg.body)
                        if len(bodies) == 3:
                            break
                assert bodies == [b"a", b"b", b"c"]

                async def forever() -> list[bytes]:
                    return [m.body async for m in consumer]

                task = asyncio.create_task(forever())
                await send_to(p, q0, ["d"])
                await eventually(lambda: consumer._assigned[q0].consume_offset == 5, 5.0, "d")
                await consumer.shutdown()
                # The loop stopped at "c" without asking for the next: it comes again.
                assert await asyncio.wait_for(task, 2.0) == [b"c", b"d"]
                assert c.broker(0).offsets.query("CG_ITER", "LiteIter", 0) == 5

    run(scenario)
