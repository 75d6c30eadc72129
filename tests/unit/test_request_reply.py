"""Request-reply's pieces without a server: the reply a consumer builds, the reply a client
decodes from a broker's push, the table of waiting requests, the request code a reply is sent
with, and the broker's reply topic and setting."""

import asyncio
import json
import math
import time
import zlib
from pathlib import Path

import pytest

from pyrmq.broker.clients import ClientTable
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.state.topics import TopicTable
from pyrmq.client import aio
from pyrmq.client.api import ClientAPI, SendRequest
from pyrmq.client.instance import ClientConfig, ClientInstance
from pyrmq.client.message import Message, MessageQueue
from pyrmq.client.producer import Producer
from pyrmq.client.request import (
    ReplyMessage,
    RequestTable,
    create_reply_message,
    get_reply_to_client,
)
from pyrmq.errors import ClientStateError, HeaderError, MessageBodyError, MessageIllegalError
from pyrmq.properties import ARRIVE_TIME, encode_properties
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.headers import ReplyMessageRequestHeader
from pyrmq.remoting.protocol import RequestCode
from pyrmq.remoting.server import Connection, RemotingServer

REQUEST_PROPS = {
    "CLUSTER": "ClusterA",
    "CORRELATION_ID": "c-1",
    "REPLY_TO_CLIENT": "10.0.0.2@7",
    "TTL": "3000",
    "TAGS": "not copied",
}


def test_a_reply_goes_to_the_cluster_reply_topic_with_the_request_names() -> None:
    reply = create_reply_message(Message("Orders", b"q", properties=REQUEST_PROPS), "answer")

    assert (reply.topic, reply.body) == ("ClusterA_REPLY_TOPIC", b"answer")
    assert reply.properties == {
        "MSG_TYPE": "reply",
        "CORRELATION_ID": "c-1",
        "REPLY_TO_CLIENT": "10.0.0.2@7",
        "TTL": "3000",
    }


def test_a_replier_reads_who_asked() -> None:
    request = Message("Orders", b"q", properties=REQUEST_PROPS)

    assert aio.get_reply_to_client is get_reply_to_client
    assert get_reply_to_client(request) == "10.0.0.2@7"
    assert get_reply_to_client(create_reply_message(request, b"a")) == "10.0.0.2@7"
    assert get_reply_to_client(Message("Orders", b"a plain message")) is None


def test_a_message_that_did_not_come_through_a_broker_cannot_be_replied_to() -> None:
    props = {k: v for k, v in REQUEST_PROPS.items() if k != "CLUSTER"}

    with pytest.raises(MessageIllegalError, match="no CLUSTER property"):
        create_reply_message(Message("Orders", b"q", properties=props), b"answer")


def _push_ext(**changes: object) -> dict[str, str]:
    header = ReplyMessageRequestHeader(
        producer_group="PG",
        topic="ClusterA_REPLY_TOPIC",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=10,
        flag=3,
        properties=encode_properties({"CORRELATION_ID": "c-1", "UNIQ_KEY": "ID1", "KEYS": "a b"}),
        reconsume_times=None,
        born_host="10.0.0.3:5000",
        store_host="10.0.0.1:10911",
        store_timestamp=20,
    )
    return {**header.to_ext(), **{k: str(v) for k, v in changes.items()}}


def test_a_pushed_reply_is_decoded_with_its_body_inflated() -> None:
    body = b"x" * 10_000
    reply = ReplyMessage.from_push(_push_ext(sysFlag=1), zlib.compress(body))

    assert reply.body == body
    assert (reply.msg_id, reply.correlation_id, reply.keys) == ("ID1", "c-1", "a b")
    assert (reply.flag, reply.reconsume_times, reply.born_timestamp) == (3, 0, 10)
    assert (reply.born_host, reply.store_host, reply.store_timestamp) == (
        "10.0.0.3:5000",
        "10.0.0.1:10911",
        20,
    )
    assert int(reply.properties[ARRIVE_TIME]) > 0


def test_an_unreadable_push_is_refused() -> None:
    ext = _push_ext()
    del ext["storeHost"]
    with pytest.raises(HeaderError, match="storeHost"):
        ReplyMessage.from_push(ext, b"")
    with pytest.raises(MessageBodyError, match="zlib body does not inflate"):
        ReplyMessage.from_push(_push_ext(sysFlag=1), b"not zlib")


def _reply(correlation_id: str | None) -> ReplyMessage:
    props = {} if correlation_id is None else {"CORRELATION_ID": correlation_id}
    return ReplyMessage(topic="R", body=b"", properties=props)


def test_the_request_table_hands_each_reply_to_its_request_only() -> None:
    async def scenario() -> None:
        table = RequestTable()
        mine, theirs = object(), object()
        first = table.open("c-1", mine)
        second = table.open("c-2", theirs)

        assert table.complete(_reply("c-2"))
        assert second.result().correlation_id == "c-2"
        assert not first.done()
        # Unknown, missing or repeated correlation ids find nothing.
        assert not table.complete(_reply("c-9"))
        assert not table.complete(_reply(None))
        assert not table.complete(_reply("c-2"))

        assert table.fail(mine, "shut down") == 1
        assert table.fail(theirs, "shut down") == 0  # answered already
        with pytest.raises(ClientStateError, match="shut down"):
            first.result()
        table.close("c-1")
        table.close("c-2")
        assert len(table) == 0
        assert not table.complete(_reply("c-1"))

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("reply", "batch", "code"),
    [
        (True, False, RequestCode.SEND_REPLY_MESSAGE_V2),
        (False, True, RequestCode.SEND_BATCH_MESSAGE),
        (False, False, RequestCode.SEND_MESSAGE_V2),
    ],
)
def test_a_reply_is_sent_as_send_reply_message_v2(reply: bool, batch: bool, code: int) -> None:
    request = SendRequest("PG", MessageQueue("T", "b", 0), b"x", "", batch=batch, reply=reply)

    command = ClientAPI(RemotingClient())._send_command(request, oneway=False)

    assert command.code == code
    assert command.ext_fields["b"] == "T"


def test_the_broker_has_its_cluster_reply_topic(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    table = TopicTable(
        path, auto_create_topic_enable=True, default_topic_queue_nums=4, cluster_name="C1"
    )
    table.save_system_topics()

    config = table.get("C1_REPLY_TOPIC")
    assert config is not None
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (1, 1, 6)
    assert "C1_REPLY_TOPIC" in json.loads(path.read_text())["topicConfigTable"]


def test_store_reply_message_enable_is_rocketmqs_setting() -> None:
    assert BrokerConfig().store_reply_message_enable is True
    config = BrokerConfig.from_mapping({"storeReplyMessageEnable": "false"})
    assert config.store_reply_message_enable is False
    assert config.to_properties()["storeReplyMessageEnable"] == "false"


def test_a_requester_is_found_by_its_client_id_among_producers() -> None:
    clients = ClientTable()
    conn = Connection(RemotingServer())
    clients.register_producer("PG", "10.0.0.2@7", conn, 0)

    assert clients.producer_connection("10.0.0.2@7") is conn
    assert clients.producer_connection("10.0.0.2@8") is None
    clients.drop_connection(conn)
    assert clients.producer_connection("10.0.0.2@7") is None


@pytest.mark.parametrize("timeout_s", [0, -1.0, math.inf, -math.inf, math.nan])
def test_a_request_needs_a_finite_positive_timeout(timeout_s: float) -> None:
    msg = Message("Orders", b"q")

    with pytest.raises(ValueError, match="timeout"):
        asyncio.run(Producer("PG").request(msg, timeout_s=timeout_s))
    with pytest.raises(ValueError, match="timeout"):
        asyncio.run(Producer("PG").request_orderly(msg, 1, timeout_s=timeout_s))
    assert msg.properties == {}


def test_the_first_heartbeat_round_comes_a_second_after_the_instance_starts() -> None:
    """Brokers find a requester by its heartbeats: with RocketMQ's 30 s interval, the first
    round still comes about 1 s after start (MQClientInstance's initial delay)."""

    async def scenario() -> None:
        config = ClientConfig(namesrv_addr="127.0.0.1:1")
        assert config.heartbeat_broker_interval_s == 30.0
        inst = ClientInstance(config, "127.0.0.1@heartbeat-schedule")
        beats: list[float] = []

        async def heartbeat_all() -> None:
            beats.append(time.monotonic())

        inst.heartbeat_all = heartbeat_all  # type: ignore[method-assign]
        started = time.monotonic()
        inst.start()
        try:
            for _ in range(40):
                if beats:
                    break
                await asyncio.sleep(0.05)
        finally:
            await inst.release()
        assert len(beats) == 1
        assert 0.5 <= beats[0] - started <= 1.5

    asyncio.run(scenario())
