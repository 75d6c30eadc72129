"""Consumer group settings (``mqadmin updateSubGroup``) against a real ``pyrmq serve``: kept
across restarts, refused when malformed, and a group's ``retryMaxTimes`` deciding where a
message a consumer hands back goes."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tests.compat.servers import serving, start_serve
from tests.helpers import pull_head, pyrmq_admin, remoting_call, send_raw

from pyrmq.client.admin import Admin
from pyrmq.errors import BrokerError
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration


async def _groups(namesrv: str, broker: str) -> dict[str, dict[str, object]]:
    async with Admin(namesrv) as admin:
        return await admin.groups(broker)


def test_group_settings_are_kept_across_restarts_and_bad_ones_refused(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        done = pyrmq_admin("update-group", "-n", namesrv, "-g", "GID_ORDERLY", "-o", "-r", "3")
        assert done.returncode == 0, done.stderr
        assert f"create subscription group to {broker} success." in done.stdout
        assert pyrmq_admin("update-group", "-n", namesrv, "-g", "GID_GONE").returncode == 0
        for body in (b"[]", b"{}", b"{not json", json.dumps({"groupName": "bad group"}).encode()):
            refused = remoting_call(
                broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body
            )
            assert refused.code == ResponseCode.SYSTEM_ERROR, body
            assert "bad subscription group" in (refused.remark or "")
        wrong_kind = {"groupName": "GID_WRONG", "retryMaxTimes": "three"}
        refused = remoting_call(
            broker,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            {},
            json.dumps(wrong_kind).encode(),
        )
        assert refused.code == ResponseCode.SYSTEM_ERROR
        assert pyrmq_admin("delete-group", "-n", namesrv, "-g", "GID_GONE").returncode == 0
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        groups = asyncio.run(_groups(namesrv, broker))
    assert sorted(groups) == ["GID_ORDERLY"]
    assert groups["GID_ORDERLY"]["consumeMessageOrderly"] is True
    assert groups["GID_ORDERLY"]["retryMaxTimes"] == 3


def test_a_groups_retry_max_times_decides_when_a_handed_back_message_is_dead(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        assert (
            pyrmq_admin("update-group", "-n", namesrv, "-g", "GID_NO_RETRY", "-r", "0").returncode
            == 0
        )
        body = b"handed back"
        sent = send_raw(broker, "TopicGroupRetry", body)
        assert sent.code == ResponseCode.SUCCESS
        [stored] = asyncio.run(pull_head(broker, "broker-a", "TopicGroupRetry", 0)).messages
        for group in ("GID_NO_RETRY", "GID_DEFAULT"):
            # No maxReconsumeTimes in the request: the group's setting decides.
            back = remoting_call(
                broker,
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {
                    "offset": str(stored.commit_log_offset),
                    "group": group,
                    "delayLevel": "0",
                    "originMsgId": stored.msg_id,
                    "originTopic": "TopicGroupRetry",
                },
            )
            assert back.code == ResponseCode.SUCCESS, back.remark
        [dead] = asyncio.run(pull_head(broker, "broker-a", "%DLQ%GID_NO_RETRY", 0)).messages
        assert dead.body == body
        # A group without settings gets the broker's 16 retries: its message went to its retry
        # topic, and it has no dead-letter topic at all.
        with pytest.raises(BrokerError, match="not exist"):
            asyncio.run(pull_head(broker, "broker-a", "%DLQ%GID_DEFAULT", 0))


def test_a_groups_retry_queue_nums_spreads_its_retries_and_zero_turns_them_off(
    tmp_path: Path,
) -> None:
    """As RocketMQ: the group's retryQueueNums is its retry topic's queue count (made by its
    consumers' heartbeat), a message handed back goes to one of them at random, and with 0 it
    is dropped (SUCCESS, nothing stored)."""
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        for group, queues in (("GID_SPREAD", "4"), ("GID_OFF", "0")):
            done = pyrmq_admin("update-group", "-n", namesrv, "-g", group, "-q", queues)
            assert done.returncode == 0, done.stderr
        topic = "TopicGroupSpread"
        for i in range(16):
            assert send_raw(broker, topic, b"spread-%d" % i).code == ResponseCode.SUCCESS
        stored = asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages
        assert len(stored) == 16
        heartbeat = {
            "clientID": "127.0.0.1@spread",
            "producerDataSet": [],
            "consumerDataSet": [
                {"groupName": "GID_SPREAD", "consumeType": "CONSUME_PASSIVELY",
                 "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                 "subscriptionDataSet": [], "unitMode": False}
            ],
        }  # fmt: skip
        beat = remoting_call(broker, RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode())
        assert beat.code == ResponseCode.SUCCESS, beat.remark

        route = pyrmq_admin("topic-route", "-n", namesrv, "-t", "%RETRY%GID_SPREAD")
        assert route.returncode == 0, route.stderr
        [queue_data] = json.loads(route.stdout)["queueDatas"]
        assert (queue_data["readQueueNums"], queue_data["writeQueueNums"]) == (4, 4)
        for group in ("GID_SPREAD", "GID_OFF"):
            for message in stored:
                back = remoting_call(
                    broker,
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {
                        "offset": str(message.commit_log_offset),
                        "group": group,
                        "delayLevel": "0",
                        "originMsgId": message.msg_id,
                        "originTopic": topic,
                    },
                )
                assert back.code == ResponseCode.SUCCESS, back.remark
        # Parked until due in SCHEDULE_TOPIC_XXXX, each names the retry queue it goes to.
        parked = asyncio.run(pull_head(broker, "broker-a", "SCHEDULE_TOPIC_XXXX", 2)).messages
        queues = [int(m.properties["REAL_QID"]) for m in parked]
        assert len(queues) == 16
        assert {m.properties["REAL_TOPIC"] for m in parked} == {"%RETRY%GID_SPREAD"}
        assert set(queues) <= {0, 1, 2, 3}
        assert len(set(queues)) > 1
        with pytest.raises(BrokerError, match="not exist"):
            asyncio.run(pull_head(broker, "broker-a", "%DLQ%GID_OFF", 0))


def test_a_group_deleted_with_remove_offset_loses_its_offsets(tmp_path: Path) -> None:
    """``mqadmin deleteSubGroup -r`` (cleanOffset) deletes the group's offsets on every
    topic, also across a restart; without it they stay, as in RocketMQ."""
    topic = "TopicGroupDeleted"

    def offset(broker: str, group: str, queue_id: int) -> int:
        """The committed offset; 0 for a group without one, as the queue's first message is
        in memory (RocketMQ's answer for a new group)."""
        answer = remoting_call(
            broker,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)},
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        return int(answer.ext_fields["offset"])

    server = start_serve(tmp_path)
    try:
        namesrv, broker = server.addresses()
        for i in range(6):
            assert send_raw(broker, topic, b"m%d" % i, queue_id=i % 2).code == 0
        for group in ("GID_CLEANED", "GID_KEPT", "OTHER_GID_CLEANED"):
            for queue_id in (0, 1):
                committed = remoting_call(
                    broker,
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {
                        "consumerGroup": group,
                        "topic": topic,
                        "queueId": str(queue_id),
                        "commitOffset": "2",
                    },
                )
                assert committed.code == ResponseCode.SUCCESS
        done = pyrmq_admin("delete-group", "-n", namesrv, "-g", "GID_CLEANED", "-r")
        assert done.returncode == 0, done.stderr
        assert pyrmq_admin("delete-group", "-n", namesrv, "-g", "GID_KEPT").returncode == 0
        assert [offset(broker, "GID_CLEANED", q) for q in (0, 1)] == [0, 0]
        assert [offset(broker, "GID_KEPT", q) for q in (0, 1)] == [2, 2]
        # A group whose name holds the deleted one's keeps its offsets.
        assert [offset(broker, "OTHER_GID_CLEANED", q) for q in (0, 1)] == [2, 2]
    finally:
        server.kill()  # no clean shutdown: what was asked for must already be on disk
    with serving(tmp_path) as server:
        _, broker = server.addresses()
        assert [offset(broker, "GID_CLEANED", q) for q in (0, 1)] == [0, 0]
        assert [offset(broker, "GID_KEPT", q) for q in (0, 1)] == [2, 2]
