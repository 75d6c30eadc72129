"""What an operator has a real ``pyrmq serve`` clean up or look again at, through
:class:`pyrmq.client.admin.Admin` and ``pyrmq admin``: ConsumeQueues retention left pointing
at nothing (``cleanExpiredCQ``) and those of topics no longer configured
(``cleanUnusedTopic``), a transaction given up checked again (``resumeCheckHalfMessage``), and
the lowest offsets of a topic's groups (QUERY_CORRECTION_OFFSET)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from tests import helpers
from tests.compat.servers import create_topic, serving
from tests.helpers import fast_config, pull_head, pyrmq_admin, send_raw

from pyrmq.client.admin import Admin
from pyrmq.client.api import ClientAPI
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.transaction import TransactionProducer, TransactionState
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.protocol import ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

run = helpers.run

BROKER_NAME = "broker-a"
DELETE_HOUR = f"{(time.localtime().tm_hour + 12) % 24:02}"  # not now: retention waits for it


def _queues(root: Path, topic: str) -> list[str]:
    """The queue directories of ``topic`` on disk."""
    path = root / "store" / "consumequeue" / topic
    return sorted(p.name for p in path.iterdir()) if path.is_dir() else []


def _queue_offset(broker: str, topic: str, body: bytes, queue_id: int = 0) -> int:
    sent = send_raw(broker, topic, body, queue_id=queue_id)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return int(sent.ext_fields["queueOffset"])


def _bodies(broker: str, topic: str, queue_id: int = 0) -> list[bytes]:
    try:
        result = asyncio.run(pull_head(broker, BROKER_NAME, topic, queue_id))
    except BrokerError:
        return []
    return [m.body for m in result.messages]


# --- cleanExpiredCQ -------------------------------------------------------------------------


def test_clean_expired_cq_drops_the_queues_retention_left_pointing_at_nothing(
    tmp_path: Path,
) -> None:
    """A topic whose every message retention removed loses its ConsumeQueues: its offsets
    start again at 0. One with a queue still holding messages keeps them all (the store drops
    a topic's queues together), and so does a live topic."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        f"mappedFileSizeCommitLog=65536\nfileReservedTime=0\ndeleteWhen={DELETE_HOUR}\n"
    )
    old, mixed, live = "TopicCqOld", "TopicCqMixed", "TopicCqLive"
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, old, 1)
        create_topic(broker, mixed, 2)
        create_topic(broker, live, 1)
        for i in range(3):
            assert _queue_offset(broker, old, b"o" * 1000) == i
        _queue_offset(broker, mixed, b"m0", queue_id=0)

        async def fill() -> None:
            # Some 300 KB: the segments the messages above lie in roll over.
            async with Producer("PG_CQ", client_config=fast_config(namesrv)) as producer:
                for i in range(300):
                    sent = await producer.send(Message(live, b"l" * 1000 + str(i).encode()))
                    assert sent.status is SendStatus.OK

        run(fill)
        _queue_offset(broker, mixed, b"m1", queue_id=1)

        async def expire() -> None:
            async with Admin(namesrv) as admin:
                answer = await admin.delete_expired_commit_log(broker)
                assert int(answer.split()[0]) >= 3, answer
                [status] = (await admin.topic_status(old)).values()
                assert (status.min_offset, status.max_offset) == (3, 3)

        run(expire)
        assert _queues(tmp_path, old) == ["0"]

        shown = pyrmq_admin("clean-expired-cq", "-n", namesrv, "-b", broker)
        assert shown.returncode == 0, shown.stderr
        assert f"success, {broker}" in shown.stdout
        assert _queues(tmp_path, old) == []
        assert _queues(tmp_path, mixed) == ["0", "1"]
        assert _queues(tmp_path, live) == ["0"]
        assert _bodies(broker, mixed, 1) == [b"m1"]
        # The topic stays configured; its queue starts again, as RocketMQ's does.
        assert _queue_offset(broker, old, b"again") == 0
        assert _bodies(broker, old) == [b"again"]

        async def by_cluster() -> None:
            async with Admin(namesrv) as admin:
                [cluster] = {b.cluster for b in await admin.clusters()}
                assert await admin.clean_expired_consume_queue(cluster=cluster) == [broker]

        run(by_cluster)
        assert _bodies(broker, old) == [b"again"]
        assert _queues(tmp_path, live) == ["0"]


# --- cleanUnusedTopic -----------------------------------------------------------------------


def test_clean_unused_topic_drops_the_queues_of_topics_not_configured(tmp_path: Path) -> None:
    """A topic taken out of topics.json while the broker was stopped keeps its queues until
    cleanUnusedTopic; then its messages are gone for good, and a topic made again under the
    name starts at offset 0."""
    gone, kept = "TopicUnusedGone", "TopicUnusedKept"
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, gone, 2)
        create_topic(broker, kept, 1)
        for queue_id in (0, 1):
            _queue_offset(broker, gone, b"g", queue_id=queue_id)
            _queue_offset(broker, gone, b"h", queue_id=queue_id)
        _queue_offset(broker, kept, b"k")
    topics = tmp_path / "store" / "config" / "topics.json"
    table = json.loads(topics.read_text())
    del table["topicConfigTable"][gone]
    topics.write_text(json.dumps(table))

    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        assert _queues(tmp_path, gone) == ["0", "1"]

        async def clean() -> None:
            async with Admin(namesrv) as admin:
                assert await admin.clean_unused_topic(broker) == [broker]

        run(clean)
        assert _queues(tmp_path, gone) == []
        assert _queues(tmp_path, kept) == ["0"]
        assert _bodies(broker, kept) == [b"k"]
        create_topic(broker, gone, 2)
        assert _bodies(broker, gone) == []
        assert _queue_offset(broker, gone, b"new") == 0
        assert _bodies(broker, gone) == [b"new"]

        shown = pyrmq_admin("clean-unused-topic", "-n", namesrv, "-b", broker)
        assert shown.returncode == 0, shown.stderr
        assert f"success, {broker}" in shown.stdout
        # Configured again: kept.
        assert _bodies(broker, gone) == [b"new"]


# --- resumeCheckHalfMessage -----------------------------------------------------------------


def test_a_half_given_up_is_checked_again_and_committed_after_resume(tmp_path: Path) -> None:
    """After ``transactionCheckMax`` unanswered checks the half is given up; resumed, it is
    checked again and the producer's checker commits it, so a consumer gets it."""
    topic = "TopicTxResume"
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=200\ntransactionCheckInterval=200\ntransactionCheckMax=2\n")

    async def scenario(namesrv: str, broker: str) -> None:
        decide = TransactionState.UNKNOWN
        checked: list[str] = []

        def checker(half: MessageExt) -> TransactionState:
            checked.append(half.keys)
            return decide

        config = fast_config(namesrv)
        async with (
            TransactionProducer("PG_TX_RESUME", checker=checker, client_config=config) as p,
            Admin(namesrv) as admin,
        ):
            sent = await p.send_in_transaction(
                Message(topic, b"late", keys="resume-1"), lambda m, a: TransactionState.UNKNOWN
            )
            deadline = time.monotonic() + 20
            while not (kept := await _pulled(broker, "TRANS_CHECK_MAX_TIME_TOPIC")):
                assert time.monotonic() < deadline, "the half was not given up"
                await asyncio.sleep(0.1)
            [copy] = kept
            assert copy.keys == "resume-1"
            assert len(checked) == 2
            assert await _pulled(broker, topic) == []

            # The half itself has ended: its copy is what is resumed.
            with pytest.raises(BrokerError, match="already ended"):
                await admin.resume_check_half_message(topic, sent.send_result.offset_msg_id)
            with pytest.raises(BrokerError, match="not a half message"):
                await admin.resume_check_half_message(
                    "TRANS_CHECK_MAX_TIME_TOPIC", await _plain_message(namesrv)
                )
            await asyncio.sleep(0.6)
            assert len(checked) == 2

            decide = TransactionState.COMMIT
            assert (
                await admin.resume_check_half_message(
                    "TRANS_CHECK_MAX_TIME_TOPIC", copy.offset_msg_id
                )
                == broker
            )

            deadline = time.monotonic() + 20
            while not (got := await _pulled(broker, topic)):
                assert time.monotonic() < deadline, "the resumed half was not committed"
                await asyncio.sleep(0.1)
            [message] = got
            assert (message.body, message.keys) == (b"late", "resume-1")
            assert message.get_property("UNIQ_KEY") == sent.send_result.msg_id
            assert len(checked) == 3

    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 1)
        run(lambda: scenario(namesrv, broker))
        shown = pyrmq_admin(
            "resume-check-half-message", "-n", namesrv, "-i", "0A0000010000270F00000000DEADBEEF"
        )
        assert shown.returncode == 1
        assert "no message" in shown.stderr


async def _pulled(broker: str, topic: str) -> list[MessageExt]:
    try:
        return (await pull_head(broker, BROKER_NAME, topic, 0)).messages
    except BrokerError:
        return []


async def _plain_message(namesrv: str) -> str:
    async with Producer("PG_PLAIN", client_config=fast_config(namesrv)) as producer:
        sent = await producer.send(Message("TopicTxResumePlain", b"plain"))
    assert sent.offset_msg_id
    return sent.offset_msg_id


# --- QUERY_CORRECTION_OFFSET ----------------------------------------------------------------


def test_query_correction_offset_gives_each_queues_lowest_group_offset(tmp_path: Path) -> None:
    topic = "TopicCorrection"
    commits = {"CG_A": {0: 5, 1: 2}, "CG_B": {0: 3, 1: 4}, "CG_C": {0: 1}}

    async def scenario(namesrv: str, broker: str) -> None:
        remoting = RemotingClient()
        try:
            for group, offsets in commits.items():
                for queue_id, offset in offsets.items():
                    mq = MessageQueue(topic, BROKER_NAME, queue_id)
                    await ClientAPI(remoting).update_consumer_offset(
                        broker, group, mq, offset, oneway=False
                    )
        finally:
            await remoting.close()
        async with Admin(namesrv) as admin:
            assert await admin.query_correction_offset(broker, topic, "CG_A") == {0: 1, 1: 2}
            assert await admin.query_correction_offset(broker, topic, "CG_A", ["CG_C"]) == {
                0: 3,
                1: 2,
            }
            assert await admin.query_correction_offset(broker, topic, "CG_B", ["CG_A", "CG_C"]) == {
                0: 3,
                1: 4,
            }
            assert await admin.query_correction_offset(broker, "TopicNoOffsets", "CG_A") == {}

    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 2)
        for queue_id in (0, 1):
            for i in range(6):
                _queue_offset(broker, topic, f"c{i}".encode(), queue_id=queue_id)
        run(lambda: scenario(namesrv, broker))
        shown = pyrmq_admin(
            "query-correction-offset", "-n", namesrv, "-b", broker, "-t", topic, "-g", "CG_A",
            "-f", "CG_C",
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        rows = [line.split() for line in shown.stdout.splitlines()[1:]]
        assert rows == [["0", "3"], ["1", "2"]]
