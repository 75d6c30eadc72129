"""A name server and a broker in process on 127.0.0.1 (port 0), driven over TCP with requests
shaped as the official C++ client sends them (mixed number/string ext fields, trailing newline
in JSON bodies)."""

import asyncio
import dataclasses
import json
import socket
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import consumer_heartbeat, register_broker_request, send_fields

from pyrmq import _core
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.controller import BrokerController
from pyrmq.config import StoreConfig
from pyrmq.namesrv import NameServer, NamesrvConfig
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.codec import encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import CreateTopicRequestHeader, RegisterBrokerRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import WRITE_HIGH_WATER_BYTES

pytestmark = pytest.mark.integration

CPP = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x"}


@dataclasses.dataclass
class Cluster:
    namesrv: NameServer
    broker: BrokerController
    client: RemotingClient

    async def call(
        self,
        code: int,
        ext: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        to: str = "broker",
        timeout_s: float = 5.0,
    ) -> RemotingCommand:
        fields = {**CPP, **{k: v for k, v in (ext or {}).items()}}
        # The C++ client sends some fields as JSON numbers: the codec must take both.
        request = RemotingCommand.request(code, {k: str(v) for k, v in fields.items()}, body)
        request.language = "CPP"
        request.version = 63
        addr = self.broker.address if to == "broker" else self.namesrv.address
        return await self.client.invoke(addr, request, timeout_s=timeout_s)

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        queue_id: int = 0,
        props: str = "",
        sys_flag: int = 0,
        batch: bool = False,
        reconsume_times: int = 0,
    ) -> RemotingCommand:
        return await self.call(
            RequestCode.SEND_MESSAGE,
            {
                "producerGroup": "PG",
                "topic": topic,
                "defaultTopic": "TBW102",
                "defaultTopicQueueNums": 4,
                "queueId": queue_id,
                "sysFlag": sys_flag,
                "bornTimestamp": int(time.time() * 1000),
                "flag": 0,
                "properties": props,
                "reconsumeTimes": str(reconsume_times),
                "unitMode": "0",
                "batch": "1" if batch else "0",
            },
            body,
        )

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        group: str = "CG",
        sub: str = "*",
        suspend_ms: int = 0,
        max_nums: int = 32,
        timeout_s: float = 5.0,
    ) -> RemotingCommand:
        return await self.call(
            RequestCode.PULL_MESSAGE,
            pull_fields(topic, queue_id, offset, group, sub, suspend_ms, max_nums),
            timeout_s=timeout_s,
        )


def pull_fields(
    topic: str, queue_id: int, offset: int, group: str, sub: str, suspend_ms: int, max_nums: int
) -> dict[str, Any]:
    """A PULL_MESSAGE header's fields, with a subscription (and suspension if any)."""
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": str(offset),
        "maxMsgNums": max_nums,
        "sysFlag": 4 | (2 if suspend_ms else 0),
        "commitOffset": "0",
        "subVersion": "0",
        "suspendTimeoutMillis": str(suspend_ms),
        "subscription": sub,
    }


@asynccontextmanager
async def cluster(
    tmp_path: Path, *, store_changes: dict[str, Any] | None = None, **broker_changes: Any
) -> AsyncIterator[Cluster]:
    namesrv = NameServer(NamesrvConfig(listen_port=0, kv_config_path=None))
    await namesrv.start()
    store = StoreConfig(
        store_path_root_dir=str(tmp_path / "store"),
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=100,
        max_index_num=1000,
        **(store_changes or {}),
    )
    config = dataclasses.replace(
        BrokerConfig(listen_port=0, namesrv_addr=namesrv.address, store=store), **broker_changes
    )
    broker = BrokerController(config)
    await broker.start()
    client = RemotingClient()
    try:
        yield Cluster(namesrv, broker, client)
    finally:
        await client.close()
        await broker.stop()
        await namesrv.stop()


async def eventually(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Polls ``predicate`` until it holds; fails after ``timeout_s``."""
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"condition not met within {timeout_s} s")


def run(scenario: Callable[[], Awaitable[None]], timeout_s: float = 60) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout_s))


def records(body: bytes) -> list[Any]:
    return _core.decode_messages(body)


def props(**kv: str) -> str:
    return "".join(f"{k}\x01{v}\x02" for k, v in kv.items())


def test_send_then_pull_returns_the_message_as_sent(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            r = await c.send(
                "TopicTest",
                b"hello",
                props=props(TAGS="TagA", KEYS="k1", UNIQ_KEY="U1", WAIT="true", custom="v1"),
            )
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert r.ext_fields["queueId"] == "0"
            assert r.ext_fields["queueOffset"] == "0"
            msg_id = r.ext_fields["msgId"]
            host, port = c.broker.address.split(":")
            assert msg_id.startswith(socket.inet_aton(host).hex().upper() + f"{int(port):08X}")
            p = await c.pull("TopicTest", 0, 0)
            assert p.code == ResponseCode.SUCCESS
            assert p.ext_fields["nextBeginOffset"] == "1"
            assert p.ext_fields["minOffset"] == "0"
            assert p.ext_fields["maxOffset"] == "1"
            [m] = records(p.body)
            assert m.body == b"hello"
            assert (m.properties["custom"], m.tags, m.uniq_key) == ("v1", "TagA", "U1")
            assert m.msg_id == msg_id
            assert m.store_host == c.broker.address

    run(scenario)


def test_unknown_topic_is_auto_created_and_routed_by_the_name_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            missing = await c.call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Fresh"}, to="namesrv"
            )
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST
            assert "Fresh" in (missing.remark or "")
            tbw = await c.call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, to="namesrv"
            )
            assert tbw.code == ResponseCode.SUCCESS
            # Old clients (version 63) get Java's unquoted integer keys.
            assert b'"brokerAddrs":{0:"' in tbw.body
            assert (await c.send("Fresh", b"x", queue_id=3)).code == ResponseCode.SUCCESS
            deadline = time.monotonic() + 10
            while True:
                route = await c.call(
                    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Fresh"}, to="namesrv"
                )
                if route.code == ResponseCode.SUCCESS or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
            assert route.code == ResponseCode.SUCCESS
            data = json.loads(route.body.replace(b"{0:", b'{"0":'))
            [qd] = data["queueDatas"]
            assert (qd["readQueueNums"], qd["writeQueueNums"], qd["perm"]) == (4, 4, 6)
            assert data["brokerDatas"][0]["brokerAddrs"]["0"] == c.broker.address

    run(scenario)


def test_held_pull_is_answered_when_a_message_arrives(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            await c.send("TopicLP", b"first")
            held = asyncio.create_task(c.pull("TopicLP", 0, 1, suspend_ms=15_000, timeout_s=20))
            await asyncio.sleep(0.2)
            assert not held.done()
            started = time.monotonic()
            await c.send("TopicLP", b"second")
            response = await held
            assert time.monotonic() - started < 1.0
            assert response.code == ResponseCode.SUCCESS
            assert [m.body for m in records(response.body)] == [b"second"]
            assert c.broker.hold.woken_by_arrival >= 1

    run(scenario)


def test_a_held_pull_with_a_tag_filter_waits_for_a_matching_tag(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            await c.send("TopicHeldTag", b"first", props=props(TAGS="TagA"))
            held = asyncio.create_task(
                c.pull("TopicHeldTag", 0, 1, sub="TagA", suspend_ms=15_000, timeout_s=20)
            )
            await eventually(lambda: c.broker.store.held_pull_count == 1)
            await c.send("TopicHeldTag", b"other tag", props=props(TAGS="TagB"))
            await asyncio.sleep(0.3)
            assert not held.done()
            assert c.broker.store.held_pull_count == 1
            await c.send("TopicHeldTag", b"wanted", props=props(TAGS="TagA"))
            response = await asyncio.wait_for(held, 2)
            assert response.code == ResponseCode.SUCCESS
            assert [m.body for m in records(response.body)] == [b"wanted"]
            assert response.ext_fields["nextBeginOffset"] == "3"
            assert c.broker.store.held_pull_count == 0

    run(scenario)


def test_held_pull_times_out_as_not_found(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            await c.send("TopicTO", b"only")
            started = time.monotonic()
            response = await c.pull("TopicTO", 0, 1, suspend_ms=300)
            waited = time.monotonic() - started
            assert response.code == ResponseCode.PULL_NOT_FOUND
            assert response.ext_fields["nextBeginOffset"] == "1"
            assert 0.25 < waited < 3

    run(scenario)


def test_tag_filter_and_pull_outcomes(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for tag in ["TagA", "TagB", "TagC", "TagA"]:
                await c.send("TopicTag", tag.encode(), props=props(TAGS=tag))
            found = await c.pull("TopicTag", 0, 0, sub="TagA || TagC")
            assert [m.body for m in records(found.body)] == [b"TagA", b"TagC", b"TagA"]
            assert found.ext_fields["nextBeginOffset"] == "4"
            none = await c.pull("TopicTag", 0, 1, sub="TagZ")
            assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY
            assert none.ext_fields["nextBeginOffset"] == "4"
            moved = await c.pull("TopicTag", 0, 9)
            assert moved.code == ResponseCode.PULL_OFFSET_MOVED
            assert moved.ext_fields["nextBeginOffset"] == "4"
            below = await c.pull("TopicTag", 0, -1)
            assert below.code == ResponseCode.PULL_OFFSET_MOVED
            assert (below.ext_fields["nextBeginOffset"], below.body) == ("0", b"")
            empty = await c.pull("TopicTag", 1, 0)
            assert empty.code == ResponseCode.PULL_NOT_FOUND
            assert empty.ext_fields["nextBeginOffset"] == "0"

    run(scenario)


def test_batch_and_compressed_batch_are_stored_message_by_message(tmp_path: Path) -> None:
    item = _batch_item

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            batch = item(b"one", props(UNIQ_KEY="A", KEYS="k-a")) + item(
                b"two", props(UNIQ_KEY="B")
            )
            r = await c.send("TopicBatch", batch, batch=True)
            assert r.code == ResponseCode.SUCCESS, r.remark
            assert len(r.ext_fields["msgId"].split(",")) == 2
            big = item(b"x" * 5000, props(UNIQ_KEY="C")) + item(b"y" * 5000, props(UNIQ_KEY="D"))
            r2 = await c.send("TopicBatch", zlib.compress(big), batch=True, sys_flag=1)
            assert r2.code == ResponseCode.SUCCESS, r2.remark
            p = await c.pull("TopicBatch", 0, 0)
            msgs = records(p.body)
            assert [m.body for m in msgs] == [b"one", b"two", b"x" * 5000, b"y" * 5000]
            assert [m.uniq_key for m in msgs] == ["A", "B", "C", "D"]
            assert all(m.sys_flag & 1 == 0 for m in msgs)
            q = await c.call(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": "TopicBatch",
                    "key": "k-a",
                    "maxNum": 32,
                    "beginTimestamp": 0,
                    "endTimestamp": 2**62,
                },
            )
            assert q.code == ResponseCode.SUCCESS
            assert [m.body for m in records(q.body)] == [b"one"]

            # A small body that inflates past maxMessageSize (4 MiB) is refused before it
            # is inflated whole, and one cut short is refused too; the broker serves on.
            bomb = zlib.compress(b"\0" * (64 << 20))
            assert len(bomb) < 100_000
            r3 = await c.send("TopicBatch", bomb, batch=True, sys_flag=1)
            assert r3.code == ResponseCode.MESSAGE_ILLEGAL
            assert "maxMessageSize" in r3.remark
            cut = await c.send("TopicBatch", zlib.compress(big)[:-20], batch=True, sys_flag=1)
            assert cut.code == ResponseCode.MESSAGE_ILLEGAL
            # A batch larger than a message may be, or in a transaction, is refused whole.
            huge = item(b"z" * (4 << 20), props(UNIQ_KEY="E"))
            r4 = await c.send("TopicBatch", huge, batch=True)
            assert r4.code == ResponseCode.MESSAGE_ILLEGAL
            r5 = await c.send("TopicBatch", batch, batch=True, sys_flag=4)
            assert r5.code == ResponseCode.MESSAGE_ILLEGAL
            assert (await c.pull("TopicBatch", 0, 4)).code == ResponseCode.PULL_NOT_FOUND

    run(scenario)


def _batch_item(body: bytes, p: str) -> bytes:
    pb = p.encode()
    return (
        struct.pack(">iiiii", 20 + len(body) + 2 + len(pb), 0, 0, 0, len(body))
        + body
        + struct.pack(">h", len(pb))
        + pb
    )


def test_a_batch_refuses_only_a_positive_delay_level_and_a_retry_topic(tmp_path: Path) -> None:
    """As RocketMQ: a batch header with DELAY 0 (or below) is stored, one above 0 refused,
    and so is a batch to a retry topic (RocketMQ 5: retries go back one by one). The header's
    properties are stored with each message (they were dropped)."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            batch = _batch_item(b"one", props(UNIQ_KEY="A")) + _batch_item(b"two", props())
            for delay, code in (("0", ResponseCode.SUCCESS), ("-1", ResponseCode.SUCCESS)):
                sent = await c.send("TopicBatchDelay", batch, batch=True, props=props(DELAY=delay))
                assert sent.code == code, (delay, sent.remark)
            refused = await c.send("TopicBatchDelay", batch, batch=True, props=props(DELAY="2"))
            assert refused.code == ResponseCode.MESSAGE_ILLEGAL
            retry = await c.send("%RETRY%GID_BATCH", batch, batch=True)
            assert retry.code == ResponseCode.MESSAGE_ILLEGAL
            assert "does not support retry group" in (retry.remark or "")
            pulled = records((await c.pull("TopicBatchDelay", 0, 0)).body)
            assert [m.body for m in pulled] == [b"one", b"two"] * 2
            # The request's properties follow each message's own, as RocketMQ stores them
            # (a key there is each message's key; the last of a name wins).
            outer = props(KEYS="outer", WAIT="false")
            assert (await c.send("TopicBatchProps", batch, batch=True, props=outer)).code == 0
            stored = records((await c.pull("TopicBatchProps", 0, 0)).body)
            assert [(m.properties.get("UNIQ_KEY"), m.properties["KEYS"]) for m in stored] == [
                ("A", "outer"),
                (None, "outer"),
            ]
            found = await c.call(
                RequestCode.QUERY_MESSAGE,
                {
                    "topic": "TopicBatchProps",
                    "key": "outer",
                    "maxNum": 32,
                    "beginTimestamp": 0,
                    "endTimestamp": 2**62,
                },
            )
            assert sorted(m.body for m in records(found.body)) == [b"one", b"two"]

    run(scenario)


def test_the_transaction_property_makes_a_half_message_whatever_the_sys_flag(
    tmp_path: Path,
) -> None:
    """RocketMQ holds back a message whose TRAN_MSG property is true as a half, though its sys
    flag lacks the prepared type (it was stored and delivered at once); one sent back
    reconsumed with a delay level (clients before 4.6.1 keep the property) is not a half."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            half = props(TRAN_MSG="true", PGROUP="PG_TX", UNIQ_KEY="U1")
            assert (await c.send("TopicTranProp", b"held", props=half)).code == 0
            assert (await c.pull("TopicTranProp", 0, 0)).code == ResponseCode.PULL_NOT_FOUND
            held = records((await c.pull("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0)).body)
            assert [m.body for m in held] == [b"held"]
            back = await c.send(
                "TopicTranProp",
                b"sent back",
                props=props(TRAN_MSG="true", DELAY="1", UNIQ_KEY="U2"),
                reconsume_times=1,
            )
            assert back.code == ResponseCode.SUCCESS
            parked = records((await c.pull("SCHEDULE_TOPIC_XXXX", 0, 0)).body)
            assert [m.body for m in parked] == [b"sent back"]
            held = records((await c.pull("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0)).body)
            assert [m.body for m in held] == [b"held"]

    run(scenario)


def test_a_message_sent_to_a_retry_topic_goes_to_the_dlq_after_its_last_retry(
    tmp_path: Path,
) -> None:
    """A client whose send-back failed sends the message to the retry topic itself, its
    reconsume times counting the failed delivery: with the group's 16 retries, 16 is one more
    retry and 17 the dead-letter queue, as RocketMQ 5 decides (>; 4.9's >= took 16 there)."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:

            async def back(body: bytes, times: int) -> None:
                retry = props(DELAY=str(3 + times))
                sent = await c.send("%RETRY%GID_FALLBACK", body, props=retry, reconsume_times=times)
                assert sent.code == ResponseCode.SUCCESS, sent.remark

            await back(b"retried", 16)
            await back(b"dead", 17)
            dead = records((await c.pull("%DLQ%GID_FALLBACK", 0, 0)).body)
            assert [m.body for m in dead] == [b"dead"]
            parked = records((await c.pull("SCHEDULE_TOPIC_XXXX", 17, 0)).body)
            assert [m.body for m in parked] == [b"retried"]

    run(scenario)


def test_requests_before_a_malformed_frame_are_served(tmp_path: Path) -> None:
    """Frames that arrive together with a malformed one after them are served before the
    connection closes, as Netty's decoder hands each on before it reads the next (they were
    dropped with it, a oneway send lost)."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            assert (await c.send("TopicBeforeBad", b"first")).code == 0

            def send_frame(body: bytes, opaque: int, flag: int = 0) -> bytes:
                ext = send_fields("TopicBeforeBad")
                request = RemotingCommand.request(RequestCode.SEND_MESSAGE, ext, body)
                request.opaque, request.flag = opaque, flag
                return encode(request)

            bad = struct.pack(">ii", 8, 5 << 24) + b"\0" * 4  # serialize type 5
            host, port = c.broker.address.rsplit(":", 1)
            loop = asyncio.get_running_loop()
            with socket.create_connection((host, int(port))) as sock:
                sock.setblocking(False)
                await loop.sock_sendall(
                    sock, send_frame(b"oneway", 101, flag=2) + send_frame(b"sync", 102) + bad
                )
                received = b""
                while chunk := await asyncio.wait_for(loop.sock_recv(sock, 65536), 5):
                    received += chunk
            pulled = records((await c.pull("TopicBeforeBad", 0, 0)).body)
            assert [m.body for m in pulled] == [b"first", b"oneway", b"sync"]
            # The sync send's answer went out before the connection closed.
            assert len(received) > 8

    run(scenario)


@pytest.mark.parametrize(("in_memory_ratio", "answer"), [(40, "0"), (0, None)])
def test_a_new_groups_offset_is_0_while_its_queue_starts_at_0_in_memory(
    tmp_path: Path, in_memory_ratio: int, answer: str | None
) -> None:
    """QUERY_CONSUMER_OFFSET without a stored offset: 0 while the queue's first message is in
    memory (a consumer then misses nothing sent before its first commit), else QUERY_NOT_FOUND
    and the client's consumeFromWhere decides. A ratio of 0 leaves every message to the disk."""

    async def scenario() -> None:
        changes = {"access_message_in_memory_max_ratio": in_memory_ratio}
        async with cluster(tmp_path, store_changes=changes) as c:

            async def query(topic: str) -> tuple[int, str | None]:
                q = await c.call(
                    RequestCode.QUERY_CONSUMER_OFFSET,
                    {"consumerGroup": "CG_NEW", "topic": topic, "queueId": 0},
                )
                return q.code, q.ext_fields.get("offset")

            assert await query("TopicEmpty") == (ResponseCode.SUCCESS, "0")
            for i in range(3):
                assert (await c.send("TopicSent", b"m%d" % i)).code == ResponseCode.SUCCESS
            expected = ResponseCode.SUCCESS if answer else ResponseCode.QUERY_NOT_FOUND
            assert await query("TopicSent") == (expected, answer)

    run(scenario)


def test_heartbeat_consumer_list_offsets_and_notification(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            notified: list[str] = []
            got_notice = asyncio.Event()

            async def on_notify(request: RemotingCommand, _addr: str) -> None:
                notified.append(request.ext_fields["consumerGroup"])
                got_notice.set()

            c.client.server_request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = on_notify
            body = (
                json.dumps(
                    {
                        "clientID": "1-127.0.0.1@DEFAULT",
                        "consumerDataSet": [
                            {
                                "consumeFromWhere": 0,
                                "consumeType": 1,
                                "groupName": "CG_PUSH",
                                "messageModel": 1,
                                "subscriptionDataSet": [
                                    {
                                        "codeSet": [0],
                                        "subString": "TagA",
                                        "subVersion": "1",
                                        "tagsSet": ["TagA"],
                                        "topic": "TopicTest",
                                    }
                                ],
                            }
                        ],
                    }
                ).encode()
                + b"\n"
            )
            hb = await c.call(RequestCode.HEART_BEAT, {}, body)
            assert hb.code == ResponseCode.SUCCESS
            ids = await c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG_PUSH"})
            assert json.loads(ids.body) == {"consumerIdList": ["1-127.0.0.1@DEFAULT"]}
            none = await c.call(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "nobody"})
            assert none.code == ResponseCode.SYSTEM_ERROR
            await asyncio.wait_for(got_notice.wait(), 5)
            assert notified == ["CG_PUSH"]
            assert c.broker.topics.get("%RETRY%CG_PUSH") is not None
            q = await c.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "CG_PUSH", "topic": "TopicTest", "queueId": 0},
            )
            # No offset yet, and the queue still starts at 0 in memory: RocketMQ answers 0.
            assert (q.code, q.ext_fields["offset"]) == (ResponseCode.SUCCESS, "0")
            await c.call(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {
                    "consumerGroup": "CG_PUSH",
                    "topic": "TopicTest",
                    "queueId": 0,
                    "commitOffset": "7",
                },
            )
            q = await c.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": "CG_PUSH", "topic": "TopicTest", "queueId": 0},
            )
            assert (q.code, q.ext_fields["offset"]) == (ResponseCode.SUCCESS, "7")
            lock_body = (
                json.dumps(
                    {
                        "clientId": "c1",
                        "consumerGroup": "CG_PUSH",
                        "mqSet": [{"brokerName": "broker-a", "queueId": 1, "topic": "TopicTest"}],
                    }
                ).encode()
                + b"\n"
            )
            locked = await c.call(RequestCode.LOCK_BATCH_MQ, {}, lock_body)
            assert json.loads(locked.body)["lockOKMQSet"] == [
                {"brokerName": "broker-a", "queueId": 1, "topic": "TopicTest"}
            ]
            other = lock_body.replace(b'"c1"', b'"c2"')
            assert (
                json.loads((await c.call(RequestCode.LOCK_BATCH_MQ, {}, other)).body)["lockOKMQSet"]
                == []
            )

    run(scenario)


def test_send_back_stores_the_message_in_the_retry_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            await c.send("TopicRetry", b"payload", props=props(TAGS="T", UNIQ_KEY="U9"))
            [orig] = records((await c.pull("TopicRetry", 0, 0)).body)
            back = await c.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"group": "CG", "delayLevel": 0, "offset": str(orig.phy_offset)},
            )
            assert back.code == ResponseCode.SUCCESS, back.remark
            # Parked for delay level 3 (10 s) first, as RocketMQ's first retry is.
            store = c.broker.store
            assert (await c.pull("%RETRY%CG", 0, 0)).code != ResponseCode.SUCCESS
            [parked] = store.get("SCHEDULE_TOPIC_XXXX", 2, 0).messages()
            assert parked.properties["REAL_TOPIC"] == "%RETRY%CG"
            assert store.deliver_due(parked.store_timestamp_ms + 9_999) == 0
            assert store.deliver_due(parked.store_timestamp_ms + 10_000) == 1
            [retry] = records((await c.pull("%RETRY%CG", 0, 0)).body)
            assert retry.body == b"payload"
            assert retry.reconsume_times == 1
            assert retry.properties["RETRY_TOPIC"] == "TopicRetry"
            assert retry.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
            assert "DELAY" not in retry.properties
            # Failed again: one level later (4, 30 s); or the level the consumer chose.
            for level, offset in ((0, retry.phy_offset), (1, orig.phy_offset)):
                again = await c.call(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {"group": "CG", "delayLevel": level, "offset": str(offset)},
                )
                assert again.code == ResponseCode.SUCCESS, again.remark
            assert store.max_offset("SCHEDULE_TOPIC_XXXX", 3) == 1
            [chosen] = store.get("SCHEDULE_TOPIC_XXXX", 0, 0).messages()
            assert chosen.properties["DELAY"] == "1"
            missing = await c.call(
                RequestCode.CONSUMER_SEND_MSG_BACK,
                {"group": "CG", "delayLevel": 0, "offset": "999999"},
            )
            assert missing.code == ResponseCode.SYSTEM_ERROR
            # A group whose retry topic would be no topic: refused, and no such topic made.
            for group in ("a b", "x" * 130, "../g"):
                bad = await c.call(
                    RequestCode.CONSUMER_SEND_MSG_BACK,
                    {"group": group, "delayLevel": 0, "offset": str(orig.phy_offset)},
                )
                assert bad.code == ResponseCode.SYSTEM_ERROR
                assert c.broker.topics.get("%RETRY%" + group) is None
                assert c.broker.topics.get("%DLQ%" + group) is None

    run(scenario)


def test_bad_input_gets_an_answer_or_loses_only_its_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            unknown = await c.call(9999, {})
            assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            assert unknown.remark == " request type 9999 not supported"
            missing = await c.call(RequestCode.PULL_MESSAGE, {"topic": "T"})
            assert missing.code == ResponseCode.SYSTEM_ERROR
            illegal = await c.send("bad topic!", b"x")
            assert illegal.code == ResponseCode.MESSAGE_ILLEGAL
            forbidden = await c.send("SCHEDULE_TOPIC_XXXX", b"x")
            assert forbidden.code == ResponseCode.NO_PERMISSION
            assert forbidden.remark == "Sending message to topic[SCHEDULE_TOPIC_XXXX] is forbidden."
            assert (await c.pull("SCHEDULE_TOPIC_XXXX", 0, 0)).code != ResponseCode.SUCCESS
            # RocketMQ's other system topics take producers' messages: clients send their
            # trace data to RMQ_SYS_TRACE_TOPIC, its benchmark tool to BenchmarkTest.
            for topic in ("RMQ_SYS_TRACE_TOPIC", "BenchmarkTest"):
                assert (await c.send(topic, b"open")).code == ResponseCode.SUCCESS
                [stored] = records((await c.pull(topic, 0, 0)).body)
                assert stored.body == b"open"
            host, port = c.broker.address.split(":")
            # A garbage frame and an oversized length close only that connection.
            for junk in (
                b"\x00\x00\x00\x10garbage-garbage!",
                struct.pack(">I", 1 << 30) + b"\x00" * 8,
            ):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(junk)
                await writer.drain()
                assert await asyncio.wait_for(reader.read(), 5) == b""
                writer.close()
            assert (await c.send("TopicAlive", b"still here")).code == ResponseCode.SUCCESS
            # A frame split over many writes still decodes.
            reader, writer = await asyncio.open_connection(host, int(port))
            frame = encode(
                RemotingCommand.request(
                    RequestCode.GET_MAX_OFFSET, {"topic": "TopicAlive", "queueId": "0"}
                )
            )
            for i in range(len(frame)):
                writer.write(frame[i : i + 1])
                await writer.drain()
            length = struct.unpack(">I", await reader.readexactly(4))[0]
            answer = await reader.readexactly(length)
            assert b'"offset":"1"' in answer
            writer.close()

    run(scenario)


def test_a_client_that_does_not_read_its_answers_stops_being_read(tmp_path: Path) -> None:
    """Pipelined pulls whose answers the client leaves unread: the broker buffers a bounded
    amount of answers and reads no more requests until they drain, then answers every one."""
    pulls = 200

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for _ in range(40):
                assert (await c.send("TopicSlow", bytes(8000))).code == ResponseCode.SUCCESS
            host, port = c.broker.address.split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.transport.pause_reading()
            fields = pull_fields("TopicSlow", 0, 0, "CG", "*", 0, 32)
            request = RemotingCommand.request(
                RequestCode.PULL_MESSAGE, {k: str(v) for k, v in fields.items()}
            )
            writer.write(encode(request) * pulls)  # about 260 KB of answer each
            await writer.drain()
            await asyncio.sleep(1)
            mine = writer.get_extra_info("sockname")[1]
            [conn] = [x for x in c.broker.server.connections if x.peer[1] == mine]
            assert conn._transport is not None
            buffered = conn._transport.get_write_buffer_size()
            assert buffered < WRITE_HIGH_WATER_BYTES + (1 << 20), buffered
            writer.transport.resume_reading()
            for _ in range(pulls):
                length = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 10))[0]
                frame = await reader.readexactly(length)
                assert b'"code":0' in frame[:400]
            writer.close()

    run(scenario)


def test_a_broker_registers_with_every_name_server(tmp_path: Path) -> None:
    async def scenario() -> None:
        second = NameServer(NamesrvConfig(listen_port=0, kv_config_path=None))
        await second.start()
        try:
            first = NameServer(NamesrvConfig(listen_port=0, kv_config_path=None))
            await first.start()
            store = StoreConfig(
                store_path_root_dir=str(tmp_path / "store"),
                mapped_file_size_commit_log=1 << 20,
                max_hash_slot_num=100,
                max_index_num=1000,
            )
            addrs = f"{first.address};{second.address}"
            broker = BrokerController(BrokerConfig(listen_port=0, namesrv_addr=addrs, store=store))
            await broker.start()
            try:
                for ns in (first, second):
                    route = ns.routes.route("TBW102")
                    assert route is not None
                    assert route["brokerDatas"][0]["brokerAddrs"] == {0: broker.address}
            finally:
                await broker.stop()
            # A broker that stops unregisters from every name server.
            assert first.routes.route("TBW102") is None
            assert second.routes.route("TBW102") is None
            await first.stop()
        finally:
            await second.stop()

    run(scenario)


def test_reset_offset_by_time_moves_offsets_back_and_tells_each_consumer(tmp_path: Path) -> None:
    from pyrmq.broker.processors.admin import reset_offset_body

    topic, group = "TopicReset", "CG_RESET"

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            created = await c.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                CreateTopicRequestHeader(
                    topic=topic,
                    default_topic="TBW102",
                    read_queue_nums=2,
                    write_queue_nums=2,
                    perm=6,
                ).to_ext(),
            )
            assert created.code == ResponseCode.SUCCESS, created.remark
            # Before the mark: 2 messages in queue 0, 1 in queue 1. After it: 2 and 3 more.
            for queue_id, count in ((0, 2), (1, 1)):
                for i in range(count):
                    assert (await c.send(topic, b"old-%d" % i, queue_id=queue_id)).code == 0
            await asyncio.sleep(0.005)
            mark_ms = int(time.time() * 1000)
            await asyncio.sleep(0.005)
            for queue_id, count in ((0, 2), (1, 3)):
                for i in range(count):
                    assert (await c.send(topic, b"new-%d" % i, queue_id=queue_id)).code == 0

            async def commit(g: str, queue_id: int, offset: int) -> None:
                await c.call(
                    RequestCode.UPDATE_CONSUMER_OFFSET,
                    {"consumerGroup": g, "topic": topic, "queueId": queue_id,
                     "commitOffset": str(offset)},
                )  # fmt: skip

            async def committed(g: str) -> list[str]:
                answers = [
                    await c.call(
                        RequestCode.QUERY_CONSUMER_OFFSET,
                        {"consumerGroup": g, "topic": topic, "queueId": q},
                    )
                    for q in (0, 1)
                ]
                return [a.ext_fields.get("offset", "-") for a in answers]

            async def reset(g: str, timestamp_ms: int, force: bool, **more: Any) -> RemotingCommand:
                return await c.call(
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    {"topic": topic, "group": g, "timestamp": str(timestamp_ms),
                     "isForce": "true" if force else "false", **more},
                )  # fmt: skip

            # Queue 0 is consumed to its end (4), queue 1 not at all (0).
            await commit(group, 0, 4)
            await commit(group, 1, 0)

            # Group with offsets but nobody online: Java 4.9 refuses and changes nothing.
            offline = await reset(group, mark_ms, False)
            assert offline.code == ResponseCode.CONSUMER_NOT_ONLINE
            assert offline.remark == (
                f"Consumer not online, so can not reset offset, Group: {group} "
                f"Topic: {topic} Timestamp: {mark_ms}"
            )
            assert await committed(group) == ["4", "0"]

            # A C++ consumer (this connection) and a Java consumer (another connection).
            notices: dict[str, list[RemotingCommand]] = {"cpp": [], "java": []}
            arrived = asyncio.Event()

            def on_reset(kind: str) -> Callable[[RemotingCommand, str], Awaitable[None]]:
                async def handler(request: RemotingCommand, _addr: str) -> None:
                    notices[kind].append(request)
                    arrived.set()

                return handler

            c.client.server_request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = on_reset(
                "cpp"
            )
            hb = await c.call(
                RequestCode.HEART_BEAT, {}, consumer_heartbeat("1-127.0.0.1@cpp", group, topic)
            )
            assert hb.code == ResponseCode.SUCCESS
            java = RemotingClient()
            java.server_request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = on_reset(
                "java"
            )
            java_hb = RemotingCommand.request(
                RequestCode.HEART_BEAT,
                body=consumer_heartbeat("2-127.0.0.1@java", group, topic),
            )
            java_hb.language, java_hb.version = "JAVA", 407
            try:
                assert (await java.invoke(c.broker.address, java_hb)).code == ResponseCode.SUCCESS

                # isForce=false: queue 0 goes back to the mark (2); queue 1 keeps 0 < 1.
                done = await reset(group, mark_ms, False)
                assert done.code == ResponseCode.SUCCESS, done.remark
                assert done.body == (
                    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"TopicReset"}:2,'
                    b'{"brokerName":"broker-a","queueId":1,"topic":"TopicReset"}:0}}'
                )
                await eventually(lambda: bool(notices["cpp"] and notices["java"]))
                [cpp_notice], [java_notice] = notices["cpp"], notices["java"]
                for notice in (cpp_notice, java_notice):
                    assert notice.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET
                    assert notice.is_oneway
                    assert notice.ext_fields == {
                        "topic": topic, "group": group, "timestamp": str(mark_ms),
                        "isForce": "false",
                    }  # fmt: skip
                # C++ 1.2.3 parses only the list form; Java clients get fastjson's map form.
                assert json.loads(cpp_notice.body) == {
                    "offsetTable": [
                        {"brokerName": "broker-a", "offset": 2, "queueId": 0, "topic": topic},
                        {"brokerName": "broker-a", "offset": 0, "queueId": 1, "topic": topic},
                    ]
                }
                assert java_notice.body == done.body
                assert await committed(group) == ["2", "0"]

                # isForce=true, timestamp -1: every queue to its max offset, forwards too.
                notices["cpp"].clear()
                forced = await reset(group, -1, True)
                assert forced.code == ResponseCode.SUCCESS, forced.remark
                assert forced.body == reset_offset_body(topic, "broker-a", {0: 4, 1: 4})
                assert await committed(group) == ["4", "4"]
                await eventually(lambda: bool(notices["cpp"]))
                table = json.loads(notices["cpp"][0].body)["offsetTable"]
                assert [e["offset"] for e in table] == [4, 4]

                # isForce=false from a time before everything: both queues back to 0.
                assert (await reset(group, mark_ms - 60_000, False)).code == ResponseCode.SUCCESS
                assert await committed(group) == ["0", "0"]

                # A 5.x admin tool's queueId (+ offset) resets that queue alone.
                one = await reset(group, -1, True, queueId="1", offset="3")
                assert one.body == reset_offset_body(topic, "broker-a", {1: 3})
                assert await committed(group) == ["0", "3"]
                beyond = await reset(group, -1, True, queueId="1", offset="9")
                assert beyond.code == ResponseCode.SYSTEM_ERROR
                assert beyond.remark is not None
                assert "not in consume queue range [0-4]" in beyond.remark
            finally:
                await java.close()

            # No such topic; a group without committed offsets.
            missing = await c.call(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": "NoSuchTopic", "group": group, "timestamp": "-1", "isForce": "true"},
            )
            assert missing.code == ResponseCode.TOPIC_NOT_EXIST
            assert missing.remark is not None
            assert "no topic in this broker. topic=NoSuchTopic" in missing.remark
            unknown = await reset("CG_NOBODY", -1, True)
            assert unknown.code == ResponseCode.SYSTEM_ERROR
            assert unknown.remark is not None
            assert unknown.remark.startswith("The consumer group <CG_NOBODY> not exist")
            no_force = await c.call(
                RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                {"topic": topic, "group": group, "timestamp": "-1"},
            )
            assert no_force.code == ResponseCode.SYSTEM_ERROR
            assert no_force.remark is not None
            assert "missing required field 'isForce'" in no_force.remark

    run(scenario)


def test_a_sql92_subscription_is_refused_rather_than_read_as_tags(tmp_path: Path) -> None:
    """As RocketMQ with enablePropertyFilter off. Read as tags, "a > 5" matched nothing, and
    the consumer was told to move past every message."""
    refused = "The broker does not support consumer to filter message by SQL92"

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for i in range(3):
                assert (await c.send("TopicSql", b"m%d" % i, props=props(a="10"))).code == 0
            fields = pull_fields("TopicSql", 0, 0, "CG_SQL", "a > 5", 0, 32)
            answer = await c.call(RequestCode.PULL_MESSAGE, {**fields, "expressionType": "SQL92"})
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, refused)
            # The same subscription registered by a heartbeat, and a pull that relies on it.
            beat = json.loads(consumer_heartbeat("cid-sql", "CG_SQL", "TopicSql"))
            [sub] = beat["consumerDataSet"][0]["subscriptionDataSet"]
            sub.update(subString="a > 5", expressionType="SQL92")
            registered = await c.call(RequestCode.HEART_BEAT, {}, json.dumps(beat).encode())
            assert registered.code == ResponseCode.SUCCESS
            fields["sysFlag"] = 0
            answer = await c.call(RequestCode.PULL_MESSAGE, fields)
            assert (answer.code, answer.remark) == (ResponseCode.SYSTEM_ERROR, refused)
            # A tag expression still reads.
            tagged = await c.pull("TopicSql", 0, 0, group="CG_TAG")
            assert [r.body for r in records(tagged.body)] == [b"m0", b"m1", b"m2"]

    run(scenario)


def test_topic_creation_refuses_system_topics_and_queue_counts_the_store_cannot_hold(
    tmp_path: Path,
) -> None:
    """A topic of 2**31 - 1 queues made one stats request loop on the event loop for good; TBW102
    with no queues made every auto-created topic unusable."""

    def create(topic: str, nums: int) -> dict[str, str]:
        header = CreateTopicRequestHeader(
            topic=topic, default_topic="TBW102", read_queue_nums=nums, write_queue_nums=nums, perm=6
        )
        return header.to_ext()

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for topic in ("SCHEDULE_TOPIC_XXXX", "TBW102", "RMQ_SYS_TRANS_HALF_TOPIC"):
                answer = await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create(topic, 1))
                assert answer.code == ResponseCode.SYSTEM_ERROR
                assert answer.remark == f"The topic[{topic}] is conflict with system topic."
            for nums in (0, -1, 1025, 2**31 - 1):
                answer = await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create("TopicN", nums))
                assert answer.code == ResponseCode.SYSTEM_ERROR, nums
                assert "is not in [1, 1024]" in answer.remark
            assert c.broker.topics.get("TopicN") is None
            assert c.broker.topics.get("TBW102").write_queue_nums > 0
            ok = await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create("TopicN", 1024))
            assert ok.code == ResponseCode.SUCCESS
            stats = await c.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "TopicN"})
            # Keyed by MessageQueue objects, as fastjson writes them: not JSON a parser takes.
            assert stats.code == ResponseCode.SUCCESS
            assert stats.body.count(b'"queueId"') == 1024
            assert (await c.send("TopicAuto", b"x")).code == ResponseCode.SUCCESS

    run(scenario)


def test_numbers_beyond_any_width_and_infinite_queue_ids_get_a_plain_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Past 4,300 digits Python's int() raises its own error; a JSON Infinity cannot become an
    int. Both are bad input, answered as such, without a traceback in the log."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            huge = "9" * 5000
            answer = await c.call(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": huge})
            assert answer.code == ResponseCode.SYSTEM_ERROR
            assert "'queueId' is not an int32" in answer.remark
            pull = await c.call(
                RequestCode.PULL_MESSAGE, {**pull_fields("T", 0, 0, "CG", "*", 0, 32),
                                           "queueOffset": huge}
            )  # fmt: skip
            assert pull.code == ResponseCode.SYSTEM_ERROR
            assert "'queueOffset' is not an int64" in pull.remark
            body = b'{"consumerGroup":"G","clientId":"c","mqSet":[{"topic":"T",'
            body += b'"brokerName":"b","queueId":Infinity}]}'
            lock = await c.call(RequestCode.LOCK_BATCH_MQ, {}, body)
            assert lock.code == ResponseCode.SYSTEM_ERROR
            assert "OverflowError" not in (lock.remark or "")
            assert (await c.send("TopicAlive", b"still here")).code == ResponseCode.SUCCESS

    with caplog.at_level("WARNING"):
        run(scenario)
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


def test_a_deleted_topics_offsets_are_gone_from_the_file_at_once(tmp_path: Path) -> None:
    """Saved when the deletion is answered, not at the next periodic save: a crash before it
    would bring the offsets back for a topic created again."""

    async def scenario() -> None:
        async with cluster(tmp_path, flush_consumer_offset_interval_ms=3_600_000) as c:
            assert (await c.send("TopicGone", b"x")).code == ResponseCode.SUCCESS
            c.broker.offsets.commit("CG_GONE", "TopicGone", 0, 1)
            c.broker.offsets.commit("CG_GONE", "TopicKept", 0, 7)
            c.broker.offsets.persist()
            path = c.broker.offsets.path
            assert "TopicGone@CG_GONE" in json.loads(path.read_text())["offsetTable"]
            deleted = await c.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicGone"})
            assert deleted.code == ResponseCode.SUCCESS
            assert json.loads(path.read_text())["offsetTable"] == {"TopicKept@CG_GONE": {"0": 7}}

    run(scenario)


def test_send_back_names_the_first_copy_and_respects_the_retry_topics_permission(
    tmp_path: Path,
) -> None:
    """As RocketMQ: ORIGIN_MESSAGE_ID is the first copy's offset message id (what finds it by
    offset), not the producer's id a client puts in the header; a read-only retry topic takes
    no send-back, even one bound for the dead-letter queue."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            await c.send("TopicOrigin", b"payload", props=props(UNIQ_KEY="UNIQ-ORIGIN"))
            [orig] = records((await c.pull("TopicOrigin", 0, 0)).body)
            fields = {"group": "CG_O", "delayLevel": 1, "offset": str(orig.phy_offset)}
            back = await c.call(
                RequestCode.CONSUMER_SEND_MSG_BACK, {**fields, "originMsgId": "UNIQ-ORIGIN"}
            )
            assert back.code == ResponseCode.SUCCESS, back.remark
            store = c.broker.store
            [parked] = store.get("SCHEDULE_TOPIC_XXXX", 0, 0).messages()
            assert parked.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
            # A retry sent back again keeps naming the first copy.
            again = await c.call(
                RequestCode.CONSUMER_SEND_MSG_BACK, {**fields, "offset": str(parked.phy_offset)}
            )
            assert again.code == ResponseCode.SUCCESS, again.remark
            [_, parked_again] = store.get("SCHEDULE_TOPIC_XXXX", 0, 0).messages()
            assert parked_again.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id

            read_only = CreateTopicRequestHeader(
                topic="%RETRY%CG_O", default_topic="TBW102", read_queue_nums=1,
                write_queue_nums=1, perm=4,
            )  # fmt: skip
            assert (await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, read_only.to_ext())).code == 0
            for level in (1, -1):
                refused = await c.call(
                    RequestCode.CONSUMER_SEND_MSG_BACK, {**fields, "delayLevel": level}
                )
                assert refused.code == ResponseCode.NO_PERMISSION
                assert refused.remark == "the topic[%RETRY%CG_O] sending message is forbidden"
            assert store.max_offset("SCHEDULE_TOPIC_XXXX", 0) == 2
            assert c.broker.topics.get("%DLQ%CG_O") is None

    run(scenario)


def test_the_name_server_drains_a_brokers_writes_and_lists_a_clusters_topics(
    tmp_path: Path,
) -> None:
    """mqadmin wipeWritePerm/addWritePerm, topicList -c and a Java broker's data-version check,
    as RocketMQ's name server answers them."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:

            async def ns(code: int, ext: dict[str, Any], body: bytes = b"") -> RemotingCommand:
                return await c.call(code, ext, body, to="ns")

            async def perm(topic: str = "TopicDrain") -> int | None:
                route = {"topic": topic, "acceptStandardJsonOnly": "true"}
                found = await ns(RequestCode.GET_ROUTEINFO_BY_TOPIC, route)
                if found.code != ResponseCode.SUCCESS:
                    return None
                [queue] = json.loads(found.body)["queueDatas"]
                return int(queue["perm"])

            assert (await c.send("TopicDrain", b"x")).code == ResponseCode.SUCCESS
            for _ in range(500):  # registered soon after the topic is created
                if await perm() is not None:
                    break
                await asyncio.sleep(0.01)
            assert await perm() == 6
            name = {"brokerName": c.broker.config.broker_name}
            wiped = await ns(RequestCode.WIPE_WRITE_PERM_OF_BROKER, name)
            assert wiped.code == ResponseCode.SUCCESS
            assert int(wiped.ext_fields["wipeTopicCount"]) >= 2  # TopicDrain, TBW102, ...
            assert await perm() == 4
            # As RocketMQ counts them: every topic of the broker, changed or not.
            again = await ns(RequestCode.WIPE_WRITE_PERM_OF_BROKER, name)
            assert again.ext_fields["wipeTopicCount"] == wiped.ext_fields["wipeTopicCount"]

            # A topic an admin creates on the drained broker is registered alone: the others
            # stay drained (a whole-table registration once made them all writable again).
            created = await c.call(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {"topic": "TopicDrainNew", "defaultTopic": "TBW102", "readQueueNums": 1,
                 "writeQueueNums": 1, "perm": 6, "topicFilterType": "SINGLE_TAG",
                 "topicSysFlag": 0, "order": "false"},
            )  # fmt: skip
            assert created.code == ResponseCode.SUCCESS
            # Registered before the answer, as RocketMQ's broker does.
            assert await perm("TopicDrainNew") == 6
            await c.broker._register_all()  # the periodic registration, with the same data
            assert await perm() == 4

            added = await ns(RequestCode.ADD_WRITE_PERM_OF_BROKER, name)
            assert added.ext_fields["addTopicCount"] == str(
                int(wiped.ext_fields["wipeTopicCount"]) + 1
            )
            assert await perm() == 6

            cluster_name = c.broker.config.broker_cluster_name
            listed = await ns(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster_name})
            assert "TopicDrain" in json.loads(listed.body)["topicList"]
            none = await ns(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": "NoSuch"})
            assert json.loads(none.body)["topicList"] == []

            registered = dict(c.broker.topics.data_version)
            ext = {**name, "brokerAddr": c.broker.address, "brokerId": "0",
                   "clusterName": cluster_name}  # fmt: skip
            same = await ns(RequestCode.QUERY_DATA_VERSION, ext, json.dumps(registered).encode())
            assert (same.code, same.ext_fields["changed"]) == (ResponseCode.SUCCESS, "false")
            assert json.loads(same.body) == registered
            newer = json.dumps(dict(registered, counter=registered["counter"] + 1)).encode()
            moved = await ns(RequestCode.QUERY_DATA_VERSION, ext, newer)
            assert moved.ext_fields["changed"] == "true"

    run(scenario)


def test_the_name_server_keeps_kv_config_and_routes_order_topics(tmp_path: Path) -> None:
    """mqadmin updateKvConfig/getKvConfig/deleteKvConfig and updateOrderConf: values by
    namespace, kept across a restart; an ORDER_TOPIC_CONFIG value rides on its topic's route
    with orderMessageEnable, and on every registration's answer as RocketMQ's KVTable."""
    kv_path = tmp_path / "namesrv" / "kvConfig.json"

    async def scenario() -> None:
        config = NamesrvConfig(
            listen_port=0, kv_config_path=str(kv_path), order_message_enable=True
        )
        client = RemotingClient()
        namesrv = NameServer(config)
        await namesrv.start()
        try:

            async def call(code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
                request = RemotingCommand.request(code, ext, body)
                return await client.invoke(namesrv.address, request, timeout_s=5)

            order = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicOrder"}
            missing = await call(RequestCode.GET_KV_CONFIG, order)
            assert missing.code == ResponseCode.QUERY_NOT_FOUND
            assert missing.remark == "No config item, Namespace: ORDER_TOPIC_CONFIG Key: TopicOrder"
            no_value = await call(RequestCode.PUT_KV_CONFIG, order)
            assert no_value.code == ResponseCode.SYSTEM_ERROR
            assert "missing required field 'value'" in no_value.remark
            put = await call(RequestCode.PUT_KV_CONFIG, {**order, "value": "broker-a:4"})
            assert put.code == ResponseCode.SUCCESS
            got = await call(RequestCode.GET_KV_CONFIG, order)
            assert (got.code, got.ext_fields["value"]) == (ResponseCode.SUCCESS, "broker-a:4")

            request = register_broker_request("broker-a", "127.0.0.1:10911", {"TopicOrder": 4})
            registered = await client.invoke(namesrv.address, request, 5.0)
            assert json.loads(registered.body) == {"table": {"TopicOrder": "broker-a:4"}}
            route = await call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
                {"topic": "TopicOrder", "acceptStandardJsonOnly": "true"},
            )
            assert json.loads(route.body)["orderTopicConf"] == "broker-a:4"
            listed = await call(
                RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}
            )
            assert json.loads(listed.body) == {"table": {"TopicOrder": "broker-a:4"}}
        finally:
            await namesrv.stop()

        # Kept across a restart, then deleted.
        namesrv = NameServer(config)
        await namesrv.start()
        try:
            again = await client.invoke(
                namesrv.address,
                RemotingCommand.request(RequestCode.GET_KV_CONFIG, order),
                timeout_s=5,
            )
            assert again.ext_fields["value"] == "broker-a:4"
            deleted = await client.invoke(
                namesrv.address,
                RemotingCommand.request(RequestCode.DELETE_KV_CONFIG, order),
                timeout_s=5,
            )
            assert deleted.code == ResponseCode.SUCCESS
            assert json.loads(kv_path.read_text()) == {"configTable": {"ORDER_TOPIC_CONFIG": {}}}
            # An emptied namespace still answers, with an empty table.
            emptied = await client.invoke(
                namesrv.address,
                RemotingCommand.request(
                    RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "ORDER_TOPIC_CONFIG"}
                ),
                timeout_s=5,
            )
            assert json.loads(emptied.body) == {"table": {}}
            none = await client.invoke(
                namesrv.address,
                RemotingCommand.request(RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "N"}),
                timeout_s=5,
            )
            assert none.code == ResponseCode.QUERY_NOT_FOUND
        finally:
            await client.close()
            await namesrv.stop()

    run(scenario)


def test_a_heartbeat_is_checked_and_a_consumer_joins_though_its_retry_topic_cannot_be_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Groups whose retry topic could not be named, and sets that are not lists of objects, get
    a clear refusal and register nothing; a topic table the disk cannot take (ENOSPC) leaves
    the consumer registered, reading, with its retry topic made at a later heartbeat."""

    async def heartbeat(c: Cluster, body: bytes) -> RemotingCommand:
        return await c.client.invoke(
            c.broker.address, RemotingCommand.request(RequestCode.HEART_BEAT, {}, body)
        )

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            topics_before = {t.topic_name for t in c.broker.topics.all()}
            bad_group = "g/../../x y" + "z" * 300
            for body, reason in (
                (consumer_heartbeat("c1", bad_group, "T"), "invalid topic"),
                (json.dumps({"consumerDataSet": "abc"}).encode(), "not a list of objects"),
                (json.dumps({"producerDataSet": ["abc"]}).encode(), "not a list of objects"),
                (
                    json.dumps(
                        {"consumerDataSet": [{"groupName": "CG_X", "subscriptionDataSet": [1]}]}
                    ).encode(),
                    "subscriptionDataSet is not a list of objects",
                ),
            ):
                refused = await heartbeat(c, body)
                assert refused.code == ResponseCode.SYSTEM_ERROR
                assert (refused.remark or "").startswith("bad heartbeat: ")
                assert reason in (refused.remark or "")
            assert {t.topic_name for t in c.broker.topics.all()} == topics_before
            assert c.broker.clients.members(bad_group) == []

            def full(*args: object, **kwargs: object) -> None:
                raise OSError(28, "No space left on device")

            with monkeypatch.context() as patched:
                patched.setattr(c.broker.topics, "_persist", full)
                joined = await heartbeat(c, consumer_heartbeat("c1", "CG_FULL", "T"))
                assert joined.code == ResponseCode.SUCCESS
                assert [m.client_id for m in c.broker.clients.members("CG_FULL")] == ["c1"]
                assert c.broker.topic("%RETRY%CG_FULL") is None
            again = await heartbeat(c, consumer_heartbeat("c1", "CG_FULL", "T"))
            assert again.code == ResponseCode.SUCCESS
            assert c.broker.topic("%RETRY%CG_FULL") is not None

    run(scenario)


def test_a_client_leaves_only_its_own_place_and_a_change_of_topics_is_news_to_its_group(
    tmp_path: Path,
) -> None:
    """UNREGISTER_CLIENT removes the caller's connection from the group, whatever client id it
    names: it once let any connection remove (and free the queues of) another member. A member
    whose topics change is news to the group, as a member that joins; one whose heartbeat
    repeats itself is not."""

    def heartbeat(client_id: str, topics: list[str]) -> bytes:
        data = json.loads(consumer_heartbeat(client_id, "CG_MEMBERS", topics[0]))
        sub = data["consumerDataSet"][0]["subscriptionDataSet"][0]
        data["consumerDataSet"][0]["subscriptionDataSet"] = [{**sub, "topic": t} for t in topics]
        return json.dumps(data).encode()

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            notices: list[str] = []

            async def on_notify(request: RemotingCommand, _addr: str) -> None:
                notices.append(request.ext_fields["consumerGroup"])

            c.client.server_request_handlers[RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] = on_notify
            other = RemotingClient()
            try:

                async def from_other(code: int, ext: dict[str, str], body: bytes = b"") -> int:
                    request = RemotingCommand.request(code, ext, body)
                    return (await other.invoke(c.broker.address, request)).code

                # Each notice goes to every member: A alone, then A for B's each news.
                assert (await c.call(RequestCode.HEART_BEAT, {}, heartbeat("A", ["T1"]))).code == 0
                await eventually(lambda: len(notices) == 1)
                for topics, expected in ((["T1"], 2), (["T1"], 2), (["T1", "T2"], 3), (["T2"], 4)):
                    assert await from_other(RequestCode.HEART_BEAT, {}, heartbeat("B", topics)) == 0
                    await eventually(lambda n=expected: len(notices) == n)

                unregister = {"clientID": "A", "consumerGroup": "CG_MEMBERS", "producerGroup": ""}
                assert await from_other(RequestCode.UNREGISTER_CLIENT, unregister) == 0
                assert c.broker.clients.consumer_ids("CG_MEMBERS") == ["A"]
                await eventually(lambda: len(notices) == 5)
                assert (await c.call(RequestCode.UNREGISTER_CLIENT, unregister)).code == 0
                assert c.broker.clients.consumer_ids("CG_MEMBERS") == []
                assert notices == ["CG_MEMBERS"] * 5
            finally:
                await other.close()

    run(scenario)


def test_a_negative_commit_reads_as_none_and_pulls_stop_at_the_read_queues(
    tmp_path: Path,
) -> None:
    """As RocketMQ: a stored negative offset is answered as no offset (a Java consumer given one
    never pulls its queue), and a queue past readQueueNums is not served even when it is
    written (a topic shrinking its read queues first)."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            key = {"consumerGroup": "CG_NEG", "topic": "TopicNeg", "queueId": 0}
            await c.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**key, "commitOffset": "-7"})
            answer = await c.call(RequestCode.QUERY_CONSUMER_OFFSET, key)
            assert (answer.code, answer.ext_fields.get("offset")) == (ResponseCode.SUCCESS, "0")

            header = CreateTopicRequestHeader(
                topic="TopicShrunk",
                default_topic="TBW102",
                read_queue_nums=2,
                write_queue_nums=4,
                perm=6,
            )
            assert (await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())).code == 0
            assert (await c.send("TopicShrunk", b"x", queue_id=3)).code == ResponseCode.SUCCESS
            refused = await c.pull("TopicShrunk", 3, 0)
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert "queueId[3] is illegal" in (refused.remark or "")
            assert (await c.pull("TopicShrunk", 1, 0)).code == ResponseCode.PULL_NOT_FOUND

    run(scenario)


def test_a_register_body_of_another_shape_gets_a_clear_refusal(tmp_path: Path) -> None:
    """A REGISTER_BROKER body that is JSON but not a topic table once failed with an
    AttributeError; it gets SYSTEM_ERROR naming the body, and the name server keeps serving."""
    header = RegisterBrokerRequestHeader(
        broker_name="broker-x",
        broker_addr="127.0.0.1:1",
        cluster_name="DefaultCluster",
        ha_server_addr="",
        broker_id=0,
    ).to_ext()

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for body in (
                b"[]",
                b'{"topicConfigSerializeWrapper": 3}',
                b'{"topicConfigSerializeWrapper": {"topicConfigTable": {"T": 1}}}',
            ):
                answer = await c.call(RequestCode.REGISTER_BROKER, header, body, to="namesrv")
                assert answer.code == ResponseCode.SYSTEM_ERROR, body
                assert (answer.remark or "").startswith("bad register body: "), answer.remark
            route = await c.call(
                RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"}, to="namesrv"
            )
            assert route.code == ResponseCode.SUCCESS
            assert b"broker-x" not in route.body

    run(scenario)


def test_a_silent_broker_expires_from_the_routes_and_loses_its_connection() -> None:
    """As RocketMQ's name server: a broker silent past brokerChannelExpiredTime is dropped
    from the routes and its connection closed (kept, it held a socket for nothing)."""

    async def scenario() -> None:
        config = NamesrvConfig(
            listen_port=0,
            kv_config_path=None,
            scan_not_active_broker_interval_ms=100,
            broker_channel_expired_time_ms=500,
        )
        namesrv = NameServer(config)
        await namesrv.start()
        host, port = namesrv.address.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            request = register_broker_request(
                "broker-silent", "127.0.0.1:10911", {"TopicSilent": 1}
            )
            writer.write(encode(request))
            await writer.drain()
            (length,) = struct.unpack(">i", await reader.readexactly(4))
            await reader.readexactly(length)
            assert namesrv.routes.route("TopicSilent") is not None
            # Then silence: no registration again.
            assert await asyncio.wait_for(reader.read(), 5) == b""
            assert namesrv.routes.route("TopicSilent") is None
        finally:
            writer.close()
            await namesrv.stop()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def _compressed_registration(topics: dict[str, int], counter: int) -> bytes:
    """A REGISTER_BROKER body as a Java broker with compressedRegister makes it: a zlib stream
    of big-endian, length-prefixed parts."""

    def part(data: bytes) -> bytes:
        return struct.pack(">i", len(data)) + data

    out = part(json.dumps({"counter": counter, "timestamp": 1}).encode())
    out += struct.pack(">i", len(topics))
    for name, nums in topics.items():
        out += part(f"{name} {nums} {nums} 6 SINGLE_TAG {{}}".encode())
    out += part(b"[]") + struct.pack(">i", 0)
    return zlib.compress(out, 9)


def test_the_name_server_takes_a_java_broker_s_compressed_registration(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            body = _compressed_registration({"TopicZipped": 3}, 5)
            header = RegisterBrokerRequestHeader(
                broker_name="broker-z",
                broker_addr="127.0.0.1:30911",
                cluster_name="C",
                ha_server_addr="127.0.0.1:30912",
                broker_id=0,
                compressed=True,
                body_crc32=zlib.crc32(body) & 0x7FFFFFFF,
            )
            ns = c.namesrv.address
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)
            answer = await c.client.invoke(ns, request, timeout_s=5)
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            route = c.namesrv.routes.route("TopicZipped")
            assert route is not None
            [queues] = route["queueDatas"]
            assert (queues["brokerName"], queues["readQueueNums"], queues["perm"]) == (
                "broker-z", 3, 6,
            )  # fmt: skip
            bad = dataclasses.replace(header, body_crc32=header.body_crc32 ^ 1)
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, bad.to_ext(), body)
            refused = await c.client.invoke(ns, request, timeout_s=5)
            assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
            garbled = RemotingCommand.request(
                RequestCode.REGISTER_BROKER,
                dataclasses.replace(header, body_crc32=0).to_ext(),
                body[:-3],
            )
            refused = await c.client.invoke(ns, garbled, timeout_s=5)
            assert refused.code == ResponseCode.SYSTEM_ERROR

    run(scenario)


def test_the_broker_takes_its_order_topics_from_the_name_server(tmp_path: Path) -> None:
    """RocketMQ 5's updateOrderTopicConfig: the ORDER_TOPIC_CONFIG table answering a
    registration makes its topics orderly on the broker, and leaves the others as they are."""

    async def scenario() -> None:
        async with cluster(tmp_path) as c:
            for topic, order in (("TopicOrdered", False), ("TopicOnceOrdered", True)):
                header = CreateTopicRequestHeader(
                    topic=topic, default_topic="TBW102", read_queue_nums=4, write_queue_nums=4,
                    perm=6, order=order,
                )  # fmt: skip
                answer = await c.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
                assert answer.code == ResponseCode.SUCCESS, answer.remark
            assert c.broker.topics.get("TopicOnceOrdered").order
            ext = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicOrdered", "value": "broker-a:4"}
            put = await c.call(RequestCode.PUT_KV_CONFIG, ext, to="namesrv")
            assert put.code == ResponseCode.SUCCESS
            c.broker.request_registration("TopicOrdered")
            await eventually(lambda: c.broker.topics.get("TopicOrdered").order)
            assert c.broker.topics.get("TopicOnceOrdered").order

    run(scenario)
