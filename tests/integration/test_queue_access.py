"""The queue access lock of clustering push groups, on the wire: a ``pyrmq serve`` process and
two consumers that speak the 4.x protocol by hand (heartbeat, pull, commit, unlock), each on its
own connection, as two client processes would.

A queue moves from its owner to another client only once the owner has committed what it was
delivered, released the queue, gone away, or fallen silent for ``lockQueueTimeout``; the new
owner starts at the committed offset.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import consumer_heartbeat

from pyrmq import _core
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag, RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

LOCK_QUEUE_TIMEOUT_MS = 1_500
GROUP = "CG_ACCESS"
REFUSED = "mq is locked by other client."
MOVED = "lock a queue success, update pull offset."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("access")
    conf = root / "broker.conf"
    conf.write_text(f"lockQueueTimeout={LOCK_QUEUE_TIMEOUT_MS}\n")
    with serving(root, "-c", str(conf)) as proc:
        yield proc


@pytest.fixture
def broker(server: ServerProcess) -> str:
    return server.addresses()[1]


class Consumer:
    """One consumer client: its own connection, registered by heartbeat."""

    def __init__(self, broker: str, client_id: str, topic: str, *, heartbeat: bool = True) -> None:
        self.broker, self.client_id, self.topic = broker, client_id, topic
        self.heartbeat = heartbeat
        self.remoting = RemotingClient()

    async def __aenter__(self) -> Consumer:
        if self.heartbeat:
            beat = consumer_heartbeat(self.client_id, GROUP, self.topic)
            answer = await self.call(RequestCode.HEART_BEAT, {}, beat)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.remoting.close()

    async def call(
        self, code: int, ext: dict[str, str], body: bytes = b"", timeout_s: float = 10.0
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext, body)
        return await self.remoting.invoke(self.broker, request, timeout_s)

    async def pull(
        self, offset: int, *, suspend_ms: int = 0, max_nums: int = 4, expression: str = "*"
    ) -> RemotingCommand:
        flags = PullSysFlag.SUBSCRIPTION | (PullSysFlag.SUSPEND if suspend_ms else 0)
        header = PullMessageRequestHeader(
            consumer_group=GROUP,
            topic=self.topic,
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=int(flags),
            commit_offset=0,
            suspend_timeout_millis=suspend_ms,
            sub_version=0,
            subscription=expression,
            expression_type="TAG",
        )
        return await self.call(RequestCode.PULL_MESSAGE, header.to_ext(), timeout_s=30.0)

    async def unregister(self) -> None:
        ext = {"clientID": self.client_id, "consumerGroup": GROUP, "producerGroup": ""}
        answer = await self.call(RequestCode.UNREGISTER_CLIENT, ext)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    async def commit(self, offset: int) -> None:
        ext = {
            "consumerGroup": GROUP,
            "topic": self.topic,
            "queueId": "0",
            "commitOffset": str(offset),
        }
        answer = await self.call(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        assert answer.code == ResponseCode.SUCCESS, answer.remark

    async def committed(self) -> int:
        ext = {"consumerGroup": GROUP, "topic": self.topic, "queueId": "0"}
        answer = await self.call(RequestCode.QUERY_CONSUMER_OFFSET, ext)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return int(answer.ext_fields["offset"])

    async def unlock(self) -> None:
        body = {
            "consumerGroup": GROUP,
            "clientId": self.client_id,
            "mqSet": [{"topic": self.topic, "brokerName": "broker-a", "queueId": 0}],
        }
        answer = await self.call(RequestCode.UNLOCK_BATCH_MQ, {}, json.dumps(body).encode())
        assert answer.code == ResponseCode.SUCCESS, answer.remark


@contextlib.asynccontextmanager
async def two_consumers(broker: str, topic: str) -> AsyncIterator[tuple[Consumer, Consumer]]:
    """Consumers A and B of the group, each on its own connection."""
    async with Consumer(broker, "A", topic) as a, Consumer(broker, "B", topic) as b:
        yield a, b


def offsets_of(answer: RemotingCommand) -> list[int]:
    assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
    return [m.queue_offset for m in _core.decode_messages(answer.body)]


def next_offset(answer: RemotingCommand) -> int:
    return int(answer.ext_fields["nextBeginOffset"])


def fill(broker: str, topic: str, count: int, tags: tuple[str, ...] = ()) -> None:
    create_topic(broker, topic, 1)
    for i in range(count):
        properties = f"TAGS\x01{tags[i % len(tags)]}\x02" if tags else ""
        answer = helpers.send_raw(broker, topic, b"m%d" % i, properties=properties)
        assert answer.code == ResponseCode.SUCCESS, answer.remark


async def still_waiting(task: asyncio.Future[Any], for_s: float = 0.4) -> bool:
    await asyncio.sleep(for_s)
    return not task.done()


def test_a_queue_moves_once_its_owner_committed_what_it_was_delivered(broker: str) -> None:
    topic = "TopicAccessCommit"
    fill(broker, topic, 10)

    async def scenario() -> None:
        async with two_consumers(broker, topic) as (a, b):
            assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
            # B pulls from the offset it read before A committed anything: parked, not
            # refused at once (a long-polling client would ask again at once).
            b_pull = asyncio.ensure_future(b.pull(0, suspend_ms=8_000))
            assert await still_waiting(b_pull)
            await a.commit(2)  # A still has 2 and 3 in flight
            assert await still_waiting(b_pull)
            started = time.monotonic()
            await a.commit(4)
            moved = await asyncio.wait_for(b_pull, 5)
            # Answered on A's commit, long before B's suspend time or A's timeout ran out.
            assert time.monotonic() - started < 1.0
            assert (moved.code, moved.remark, next_offset(moved)) == (
                ResponseCode.PULL_NOT_FOUND,
                MOVED,
                4,
            )
            # B's own stale commit (the offset it started from) does not undo A's.
            await b.commit(0)
            assert await b.committed() == 4
            assert offsets_of(await b.pull(4)) == [4, 5, 6, 7]

            # A lost the queue: its pulls are refused without a message and without moving
            # its offset, and its stale commit does not move the group's offset back.
            refused = await a.pull(4)
            assert (refused.code, refused.remark, next_offset(refused)) == (
                ResponseCode.PULL_NOT_FOUND,
                REFUSED,
                4,
            )
            assert refused.body == b""
            await a.commit(1)
            assert await b.committed() == 4
            # The owner's own commits move it either way.
            await b.commit(8)
            await b.commit(6)
            assert await b.committed() == 6

    helpers.run(scenario)


def test_an_owner_that_unlocks_the_queue_hands_it_over_at_its_committed_offset(
    broker: str,
) -> None:
    """A consumer that gives a queue away commits what it consumed and unlocks the queue;
    what it was delivered and never consumed goes to the next owner."""
    topic = "TopicAccessUnlock"
    fill(broker, topic, 8)

    async def scenario() -> None:
        async with two_consumers(broker, topic) as (a, b):
            assert offsets_of(await a.pull(0, max_nums=8)) == list(range(8))
            await a.commit(3)
            b_pull = asyncio.ensure_future(b.pull(0, suspend_ms=8_000))
            assert await still_waiting(b_pull)
            # A's own parked pull of the queue: answered empty once A unlocks, or it would
            # take the queue back when it wakes.
            a_pull = asyncio.ensure_future(a.pull(8, suspend_ms=8_000))
            assert await still_waiting(a_pull, 0.2)
            await a.unlock()
            moved = await asyncio.wait_for(b_pull, 2)
            assert (moved.code, moved.remark, next_offset(moved)) == (
                ResponseCode.PULL_NOT_FOUND,
                MOVED,
                3,
            )
            released = await asyncio.wait_for(a_pull, 2)
            assert (released.code, released.remark) == (ResponseCode.PULL_NOT_FOUND, REFUSED)
            # 3..7 were delivered to A but never committed: B gets them.
            assert offsets_of(await b.pull(3, max_nums=32)) == list(range(3, 8))

    helpers.run(scenario)


def test_a_queue_moves_when_its_owner_goes_away_or_falls_silent(broker: str) -> None:
    topic = "TopicAccessGone"
    fill(broker, topic, 12)

    async def scenario() -> None:
        async with Consumer(broker, "B", topic) as b:
            async with Consumer(broker, "A", topic) as a:
                assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
                b_pull = asyncio.ensure_future(b.pull(0, suspend_ms=8_000))
                assert await still_waiting(b_pull)
            # A's connection closed: its queues are free at once; nothing was committed.
            first = await asyncio.wait_for(b_pull, 2)
            assert offsets_of(first) == [0, 1, 2, 3]

            # B, now the owner, falls silent with 0..3 uncommitted: C waits for
            # lockQueueTimeout, then takes the queue where the group's offset is.
            async with Consumer(broker, "C", topic) as c:
                started = time.monotonic()
                c_pull = asyncio.ensure_future(c.pull(0, suspend_ms=8_000))
                taken = await asyncio.wait_for(c_pull, 6)
                waited = time.monotonic() - started
                timeout_s = LOCK_QUEUE_TIMEOUT_MS / 1000
                assert timeout_s - 0.6 <= waited <= timeout_s + 2, waited
                assert offsets_of(taken) == [0, 1, 2, 3]

    helpers.run(scenario)


def test_the_owner_of_a_queue_taken_from_it_gets_its_parked_pull_answered_empty(
    broker: str,
) -> None:
    """A's long poll outlives its ownership: woken by the next message, it would read what is
    now B's."""
    topic = "TopicAccessDisplaced"
    fill(broker, topic, 4)

    async def scenario() -> None:
        async with two_consumers(broker, topic) as (a, b):
            assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
            await a.commit(4)
            a_pull = asyncio.ensure_future(a.pull(4, suspend_ms=8_000))
            assert await still_waiting(a_pull, 0.2)
            moved = await b.pull(0, suspend_ms=8_000)
            assert (moved.remark, next_offset(moved)) == (MOVED, 4)
            let_go = await asyncio.wait_for(a_pull, 2)
            assert (let_go.code, let_go.remark, let_go.body) == (
                ResponseCode.PULL_NOT_FOUND,
                REFUSED,
                b"",
            )
            b_pull = asyncio.ensure_future(b.pull(4, suspend_ms=8_000))
            assert await still_waiting(b_pull, 0.2)
            await asyncio.to_thread(helpers.send_raw, broker, topic, b"m4")
            assert offsets_of(await asyncio.wait_for(b_pull, 2)) == [4]

    helpers.run(scenario)


def test_clients_without_a_heartbeat_or_gone_from_the_group_are_held_to_the_lock(
    broker: str,
) -> None:
    """A consumer that reconnected (or was dropped as expired, or unregistered) pulls before
    its next heartbeat: it may not read a queue another client owns, and a pull it had parked
    is answered empty when it leaves."""
    topic = "TopicAccessAnonymous"
    fill(broker, topic, 8)

    async def scenario() -> None:
        async with (
            two_consumers(broker, topic) as (a, b),
            Consumer(broker, "X", topic, heartbeat=False) as x,
        ):
            assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
            refused = await x.pull(0)
            assert (refused.remark, refused.body) == (REFUSED, b"")
            await x.commit(0)  # moves nothing back, nor forward past the owner's commits
            b_pull = asyncio.ensure_future(b.pull(0, suspend_ms=8_000))
            assert await still_waiting(b_pull, 0.2)
            await b.unregister()
            left = await asyncio.wait_for(b_pull, 2)
            assert (left.code, left.remark, left.body) == (
                ResponseCode.PULL_NOT_FOUND,
                REFUSED,
                b"",
            )
            # Still connected, B is now a client without a heartbeat.
            assert (await b.pull(0)).remark == REFUSED
            await a.commit(4)
            moved = await x.pull(0)
            assert (moved.remark, next_offset(moved)) == (MOVED, 4)
            assert offsets_of(await x.pull(4)) == [4, 5, 6, 7]

    helpers.run(scenario)


def test_messages_a_tag_filter_skipped_do_not_hold_the_queue(broker: str) -> None:
    """The owner is caught up once it committed past the last message it was answered: the
    ones the filter skipped after it were never its to consume."""
    topic = "TopicAccessTags"
    fill(broker, topic, 4, tags=("TagA", "TagB"))

    async def scenario() -> None:
        async with two_consumers(broker, topic) as (a, b):
            got = await a.pull(0, expression="TagA")
            assert (offsets_of(got), next_offset(got)) == ([0, 2], 4)
            b_pull = asyncio.ensure_future(b.pull(0, suspend_ms=8_000, expression="TagA"))
            assert await still_waiting(b_pull)
            started = time.monotonic()
            await a.commit(3)
            moved = await asyncio.wait_for(b_pull, 5)
            assert time.monotonic() - started < 1.0
            assert (moved.remark, next_offset(moved)) == (MOVED, 3)

    helpers.run(scenario)


def test_an_owner_moved_back_from_a_committed_offset_past_the_end_commits_from_there(
    broker: str,
) -> None:
    """The group's offset is past the queue's end (the store was lost, say): the next owner
    is moved to the end, and its commits from there on count."""
    topic = "TopicAccessPastEnd"
    fill(broker, topic, 4)

    async def scenario() -> None:
        async with Consumer(broker, "A", topic) as a:
            assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
            await a.commit(1000)
            await a.unregister()
        async with Consumer(broker, "B", topic) as b:
            moved = await b.pull(0)
            assert (moved.remark, next_offset(moved)) == (MOVED, 1000)
            out_of_range = await b.pull(1000)
            assert out_of_range.code == ResponseCode.PULL_OFFSET_MOVED
            assert next_offset(out_of_range) == 4
            for i in (4, 5):
                await asyncio.to_thread(helpers.send_raw, broker, topic, b"m%d" % i)
            assert offsets_of(await b.pull(4)) == [4, 5]
            await b.commit(6)
            assert await b.committed() == 6

    helpers.run(scenario)


def test_pull_consumers_and_broadcasting_consumers_are_not_locked_out(broker: str) -> None:
    """The lock is a clustering push group's: a client that assigns itself queues (consumeType
    CONSUME_ACTIVELY) or a broadcasting one reads whatever it asks for."""
    topic = "TopicAccessFree"
    fill(broker, topic, 4)

    async def scenario() -> None:
        async with Consumer(broker, "A", topic) as a:
            assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
            for kind, changes in (("pull", {"consumeType": 0}), ("broadcast", {"messageModel": 0})):
                other = Consumer(broker, kind, topic)
                beat = json.loads(consumer_heartbeat(kind, GROUP + "_" + kind, topic))
                beat["consumerDataSet"][0].update(changes, groupName=GROUP)
                try:
                    answer = await other.call(RequestCode.HEART_BEAT, {}, json.dumps(beat).encode())
                    assert answer.code == ResponseCode.SUCCESS
                    assert offsets_of(await other.pull(0)) == [0, 1, 2, 3], kind
                finally:
                    await other.remoting.close()

    helpers.run(scenario)


def test_the_lock_can_be_turned_off(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("mqAccessControlEnable=false\n")
    with serving(tmp_path, "-c", str(conf)) as proc:
        broker = proc.addresses()[1]
        topic = "TopicAccessOff"
        fill(broker, topic, 4)

        async def scenario() -> None:
            async with two_consumers(broker, topic) as (a, b):
                assert offsets_of(await a.pull(0)) == [0, 1, 2, 3]
                assert offsets_of(await b.pull(0)) == [0, 1, 2, 3]

        helpers.run(scenario)
