"""The checks RocketMQ's broker makes of a pull and a send-back before it reads a queue: a
group that may not consume, a broadcasting member of a group that may not broadcast, a
subscription older than the pull's, a read-only broker's send-back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import remoting_call, send_raw

from pyrmq import _core
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicPullChecks"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("serve")) as server:
        addr = server.addresses()[1]
        create_topic(addr, TOPIC, 1)
        for tag in ("A", "B"):
            sent = send_raw(addr, TOPIC, tag.encode(), properties=f"TAGS\x01{tag}\x02")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
        yield addr


def group_settings(broker: str, group: str, **settings: Any) -> None:
    body = json.dumps({"groupName": group, "retryQueueNums": 1, **settings}).encode()
    answer = remoting_call(broker, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)
    assert answer.code == ResponseCode.SUCCESS, answer.remark


def pull_ext(group: str, *, with_subscription: bool, sub_version: int = 0) -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": TOPIC,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "4" if with_subscription else "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": str(sub_version),
        "subscription": "*",
    }


def heartbeat(group: str, model: str, tags: str, version: int) -> RemotingCommand:
    data = {
        "clientID": "127.0.0.1@checks",
        "consumerDataSet": [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": model,
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "unitMode": False,
                "subscriptionDataSet": [
                    {"topic": TOPIC, "subString": tags, "subVersion": str(version)}
                ],
            }
        ],
        "producerDataSet": [],
    }
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, json.dumps(data).encode())


def bodies(answer: RemotingCommand) -> list[bytes]:
    assert answer.code == ResponseCode.SUCCESS, (answer.code, answer.remark)
    return [m.body for m in _core.decode_messages(answer.body)]


def on_one_connection(broker: str, *requests: RemotingCommand) -> list[RemotingCommand]:
    """The requests in turn over one connection (a heartbeat's member is its connection's)."""

    async def run() -> list[RemotingCommand]:
        client = RemotingClient()
        try:
            return [await client.invoke(broker, r, 5.0) for r in requests]
        finally:
            await client.close()

    return asyncio.run(run())


def test_a_group_that_may_not_consume_is_refused(broker: str) -> None:
    group_settings(broker, "CG_OFF", consumeEnable=False)
    refused = remoting_call(
        broker, RequestCode.PULL_MESSAGE, pull_ext("CG_OFF", with_subscription=True)
    )
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "CG_OFF" in (refused.remark or "")
    group_settings(broker, "CG_ON")
    found = remoting_call(
        broker, RequestCode.PULL_MESSAGE, pull_ext("CG_ON", with_subscription=True)
    )
    assert bodies(found) == [b"A", b"B"]


def test_a_broadcasting_member_of_a_group_that_may_not_broadcast_is_refused(broker: str) -> None:
    group_settings(broker, "CG_NO_BC", consumeBroadcastEnable=False)
    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, pull_ext("CG_NO_BC", with_subscription=False)
    )
    hb, refused = on_one_connection(broker, heartbeat("CG_NO_BC", "BROADCASTING", "*", 1), pull)
    assert hb.code == ResponseCode.SUCCESS
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "broadcast" in (refused.remark or "")
    pull = RemotingCommand.request(
        RequestCode.PULL_MESSAGE, pull_ext("CG_NO_BC", with_subscription=False)
    )
    _, found = on_one_connection(broker, heartbeat("CG_NO_BC", "CLUSTERING", "*", 1), pull)
    assert bodies(found) == [b"A", b"B"]


def test_a_pull_newer_than_the_group_s_subscription_waits_for_its_heartbeat(broker: str) -> None:
    def pull(version: int) -> RemotingCommand:
        ext = pull_ext("CG_VERSION", with_subscription=False, sub_version=version)
        return RemotingCommand.request(RequestCode.PULL_MESSAGE, ext)

    _, stale = on_one_connection(broker, heartbeat("CG_VERSION", "CLUSTERING", "A", 100), pull(200))
    assert stale.code == ResponseCode.SUBSCRIPTION_NOT_LATEST
    # A heartbeat overtaken by a newer one does not bring the older subscription back.
    answers = on_one_connection(
        broker,
        heartbeat("CG_VERSION", "CLUSTERING", "B", 200),
        heartbeat("CG_VERSION", "CLUSTERING", "A", 100),
        pull(200),
    )
    assert bodies(answers[-1]) == [b"B"]


def test_a_read_only_broker_refuses_a_send_back(broker: str) -> None:
    sent = send_raw(broker, TOPIC, b"back")
    assert sent.code == ResponseCode.SUCCESS
    phy = _core.decode_offset_msg_id(sent.ext_fields["msgId"])[1]
    back = {
        "offset": str(phy),
        "group": "CG_BACK",
        "delayLevel": "0",
        "originMsgId": sent.ext_fields["msgId"],
        "originTopic": TOPIC,
        "unitMode": "false",
        "maxReconsumeTimes": "16",
    }
    ro = remoting_call(broker, RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=4")
    assert ro.code == ResponseCode.SUCCESS, ro.remark
    try:
        refused = remoting_call(broker, RequestCode.CONSUMER_SEND_MSG_BACK, back)
        assert refused.code == ResponseCode.NO_PERMISSION
        assert "forbidden" in (refused.remark or "")
    finally:
        rw = remoting_call(broker, RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=6")
        assert rw.code == ResponseCode.SUCCESS
    taken = remoting_call(broker, RequestCode.CONSUMER_SEND_MSG_BACK, back)
    assert taken.code == ResponseCode.SUCCESS, taken.remark
