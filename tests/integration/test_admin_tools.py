"""mqadmin's message and topic tools against a real ``pyrmq serve``, through ``pyrmq admin``:
sending and pulling messages (``send-message``, ``consume-message``, ``print-msg``,
``print-msg-by-queue``, ``query-msg-by-offset``), topic permission and order conf, queue
allocation, send round trips and the metadata export."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import fast_config, pyrmq_admin

from pyrmq.client.admin import Admin
from pyrmq.client.allocate import allocate_averagely
from pyrmq.client.message import Message, MessageQueue, SendResult
from pyrmq.client.producer import Producer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

BROKER = "broker-a"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("serve")
    # The name server keeps its KV config under $HOME: a private one.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(root))
        with serving(root) as proc:
            yield proc


@pytest.fixture
def addrs(server: ServerProcess) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    return namesrv, broker


def admin_ok(namesrv: str, *args: str) -> str:
    done = pyrmq_admin(*args, "-n", namesrv)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout


def routed_topic(namesrv: str, broker: str, topic: str, queues: int) -> None:
    create_topic(broker, topic, queues)

    async def wait() -> None:
        async with Admin(namesrv) as admin:
            deadline = time.monotonic() + 10
            while (route := await admin.route(topic)) is None or not route.queues:
                assert time.monotonic() < deadline, f"{topic} never got a route"
                await asyncio.sleep(0.1)

    helpers.run(wait)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def bodies(out: str) -> list[str]:
    return re.findall(r" BODY: (.*)$", out, re.MULTILINE)


async def send_each(namesrv: str, msgs: list[tuple[MessageQueue, Message]]) -> list[SendResult]:
    async with Producer("PG_TOOLS", client_config=fast_config(namesrv)) as producer:
        return [await producer.send(m, queue=q) for q, m in msgs]


# --- send-message, query-msg-by-offset ----------------------------------------------------


def test_send_message_stores_one_message_that_query_msg_by_offset_finds(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicToolsSend"
    routed_topic(namesrv, broker, topic, 2)

    out = admin_ok(
        namesrv,
        "send-message",
        "-t",
        topic,
        "-p",
        "hello",
        "-k",
        "K1",
        "-c",
        "TagS",
        "-b",
        BROKER,
        "-i",
        "1",
    )
    header, row = out.splitlines()
    assert header.split() == [
        "#Broker",
        "Name",
        "#QID",
        "#Queue",
        "Offset",
        "#Send",
        "Result",
        "#MsgId",
        "#OffsetMsgId",
    ]
    name, qid, offset, status, msg_id, offset_msg_id = row.split()
    assert (name, qid, offset, status) == (BROKER, "1", "0", "OK")

    found = admin_ok(
        namesrv, "query-msg-by-offset", "-t", topic, "-b", BROKER, "-i", "1", "-o", "0"
    )
    fields = dict(re.findall(r"^([^:]+):\s+(.*)$", found, re.MULTILINE))
    assert fields["MsgId"] == msg_id
    assert fields["OffsetID"] == offset_msg_id
    assert fields["Keys"] == "[K1]"
    assert fields["Tags"] == "[TagS]"
    assert fields["Queue Offset"] == "0"
    assert fields["Message Body"] == "hello"

    # Without -b -i it goes wherever the producer sends it.
    again = admin_ok(namesrv, "send-message", "-t", topic, "-p", "second")
    assert again.splitlines()[1].split()[3] == "OK"
    # No tag and no key: shown empty, not as Python's None.
    (plain,) = [
        m
        for m in admin_ok(namesrv, "consume-message", "-t", topic).splitlines()
        if m.endswith("BODY: second")
    ]
    assert "tags=, keys=, " in plain
    assert "None" not in plain

    missing = pyrmq_admin(
        "query-msg-by-offset", "-n", namesrv, "-t", topic, "-b", BROKER, "-i", "1", "-o", "5"
    )
    assert missing.returncode == 1
    assert "no message at offset 5" in missing.stderr
    lone = pyrmq_admin("send-message", "-n", namesrv, "-t", topic, "-p", "x", "-i", "0")
    assert lone.returncode == 2
    assert "go together" in lone.stderr
    negative = pyrmq_admin(
        "send-message", "-n", namesrv, "-t", topic, "-p", "x", "-b", BROKER, "-i", "-1"
    )
    assert negative.returncode == 2
    assert "-1 is not in the range x>=0" in negative.stderr


# --- consume-message, print-msg, print-msg-by-queue ---------------------------------------


@pytest.fixture(scope="module")
def stored(server: ServerProcess) -> tuple[str, int, int]:
    """Messages of one topic in three time slices: ``early`` ones, ``mid`` ones tagged TagB
    between the two times returned, and ``late`` ones after them."""
    namesrv, broker = server.addresses()
    topic = "TopicToolsRead"
    routed_topic(namesrv, broker, topic, 2)
    q0, q1 = (MessageQueue(topic, BROKER, i) for i in range(2))

    async def scenario() -> tuple[int, int]:
        await send_each(
            namesrv,
            [
                (q0, Message(topic, b"early0", tags="TagA", keys="E0")),
                (q1, Message(topic, b"early1", tags="TagA")),
                (q0, Message(topic, b"early2", tags="TagA")),
            ],
        )
        await asyncio.sleep(0.05)
        begin = now_ms()
        await asyncio.sleep(0.05)
        await send_each(
            namesrv,
            [
                (q0, Message(topic, b"mid0", tags="TagB")),
                (q1, Message(topic, b"mid1", tags="TagB")),
                (q0, Message(topic, b"mid2", tags="TagB")),
            ],
        )
        await asyncio.sleep(0.05)
        end = now_ms()
        await asyncio.sleep(0.05)
        await send_each(namesrv, [(q0, Message(topic, b"late0", tags="TagC"))])
        return begin, end

    begin, end = asyncio.run(scenario())
    return topic, begin, end


ALL = ["early0", "early2", "mid0", "mid2", "late0", "early1", "mid1"]
"""Queue 0's messages, then queue 1's, each oldest first."""


def test_consume_message_prints_every_queue_up_to_the_count(
    addrs: tuple[str, str], stored: tuple[str, int, int]
) -> None:
    namesrv, _ = addrs
    topic, begin, end = stored
    assert bodies(admin_ok(namesrv, "consume-message", "-t", topic)) == ALL
    # The count spans the queues: queue 0's oldest four, nothing of queue 1.
    assert bodies(admin_ok(namesrv, "consume-message", "-t", topic, "-c", "4")) == ALL[:4]
    in_range = admin_ok(namesrv, "consume-message", "-t", topic, "-s", str(begin), "-e", str(end))
    assert bodies(in_range) == ["mid0", "mid2", "mid1"]
    one_queue = admin_ok(
        namesrv, "consume-message", "-t", topic, "-b", BROKER, "-i", "0", "-o", "1", "-c", "2"
    )
    assert bodies(one_queue) == ["early2", "mid0"]
    line = admin_ok(namesrv, "consume-message", "-t", topic, "-b", BROKER, "-i", "0", "-c", "1")
    assert "keys=E0" in line
    assert "tags=TagA" in line
    assert "queueOffset=0" in line
    # Properties as mqadmin prints a Java map, not a Python dict.
    props = re.search(r"properties=\{(.*?)\}\] BODY", line)
    assert props is not None
    assert {"KEYS=E0", "TAGS=TagA"} <= set(props.group(1).split(", "))
    beyond = pyrmq_admin("consume-message", "-n", namesrv, "-t", topic, "-b", BROKER, "-i", "9")
    assert beyond.returncode == 1
    assert f"topic {topic} has no readable queue 9 on {BROKER}" in beyond.stderr


def test_print_msg_prints_only_the_time_range_and_the_tags_asked_for(
    addrs: tuple[str, str], stored: tuple[str, int, int]
) -> None:
    namesrv, _ = addrs
    topic, begin, end = stored
    assert bodies(admin_ok(namesrv, "print-msg", "-t", topic)) == ALL
    ranged = admin_ok(namesrv, "print-msg", "-t", topic, "-b", str(begin), "-e", str(end))
    assert bodies(ranged) == ["mid0", "mid2", "mid1"]
    assert f"minOffset=2, maxOffset=4, {topic}@{BROKER}:0" in ranged
    assert f"minOffset=1, maxOffset=2, {topic}@{BROKER}:1" in ranged
    since = admin_ok(namesrv, "print-msg", "-t", topic, "-b", str(begin))
    assert bodies(since) == ["mid0", "mid2", "late0", "mid1"]
    tagged = admin_ok(namesrv, "print-msg", "-t", topic, "-s", "TagA || TagC")
    assert bodies(tagged) == ["early0", "early2", "late0", "early1"]
    no_body = admin_ok(namesrv, "print-msg", "-t", topic, "-d", "false")
    assert bodies(no_body) == ["NOT PRINT BODY"] * len(ALL)
    wrong = pyrmq_admin("print-msg", "-n", namesrv, "-t", topic, "-b", str(end), "-e", str(begin))
    assert wrong.returncode == 2


def test_print_msg_by_queue_prints_and_counts_one_queue(
    addrs: tuple[str, str], stored: tuple[str, int, int]
) -> None:
    namesrv, _ = addrs
    topic, begin, end = stored
    base = ["print-msg-by-queue", "-t", topic, "-a", BROKER, "-i", "0"]
    counted = admin_ok(namesrv, *base, "-f", "true")
    assert bodies(counted) == []
    assert re.findall(r"^Tag: (\S+)\s+Count: (\d+)$", counted, re.MULTILINE) == [
        ("TagA", "2"),
        ("TagB", "2"),
        ("TagC", "1"),
    ]
    shown = admin_ok(namesrv, *base, "-p", "true", "-d", "true", "-b", str(begin), "-e", str(end))
    assert bodies(shown) == ["mid0", "mid2"]
    assert "Tag:" not in shown
    beyond = pyrmq_admin(*base[:-1], "9", "-n", namesrv, "-f", "true")
    assert beyond.returncode == 1
    assert f"topic {topic} has no readable queue 9 on {BROKER}" in beyond.stderr


# --- topic-cluster-list, update-topic-perm ------------------------------------------------


def test_topic_cluster_list_names_the_topics_cluster(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    routed_topic(namesrv, broker, "TopicToolsCluster", 1)
    assert admin_ok(namesrv, "topic-cluster-list", "-t", "TopicToolsCluster") == "DefaultCluster\n"
    missing = pyrmq_admin("topic-cluster-list", "-n", namesrv, "-t", "TopicToolsNowhere")
    assert missing.returncode == 1


def test_update_topic_perm_stops_sends_and_lets_them_through_again(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicToolsPerm"
    routed_topic(namesrv, broker, topic, 3)
    send = ["send-message", "-t", topic, "-p", "x", "-b", BROKER, "-i", "2"]
    admin_ok(namesrv, *send)

    out = admin_ok(namesrv, "update-topic-perm", "-t", topic, "-p", "4", "-b", broker)
    assert out == f"update topic perm from 6 to 4 in {broker} success.\n"

    async def config() -> dict[str, object]:
        async with Admin(namesrv) as admin:
            return (await admin.topic_configs(broker))[topic]

    after = asyncio.run(config())
    assert (after["perm"], after["readQueueNums"], after["writeQueueNums"]) == (4, 3, 3)
    refused = pyrmq_admin(*send, "-n", namesrv)
    assert refused.returncode == 1
    assert "sending is forbidden" in refused.stderr

    same = admin_ok(namesrv, "update-topic-perm", "-t", topic, "-p", "4")
    assert same == f"perm of topic [{topic}] in {broker} is 4 already.\n"
    back = admin_ok(namesrv, "update-topic-perm", "-t", topic, "-p", "6", "-c", "DefaultCluster")
    assert back == f"update topic perm from 4 to 6 in {broker} success.\n"
    assert admin_ok(namesrv, *send).splitlines()[1].split()[:4] == [BROKER, "2", "1", "OK"]

    nowhere = pyrmq_admin(
        "update-topic-perm", "-n", namesrv, "-t", "TopicToolsNone", "-p", "4", "-b", broker
    )
    assert nowhere.returncode == 1
    assert "holds no topic" in nowhere.stderr


# --- update-order-conf, allocate-mq -------------------------------------------------------


def test_update_order_conf_puts_gets_and_deletes(addrs: tuple[str, str]) -> None:
    namesrv, _ = addrs
    topic = "TopicToolsOrder"
    put = admin_ok(
        namesrv, "update-order-conf", "-t", topic, "-m", "put", "-v", "broker-a:4; broker-b:2"
    )
    assert put == (
        f"update orderConf success. topic=[{topic}], orderConf=[broker-a:4;broker-b:2], {namesrv}\n"
    )
    got = admin_ok(namesrv, "update-order-conf", "-t", topic, "-m", "get")
    assert got == f"get orderConf success. topic=[{topic}], orderConf=[broker-a:4;broker-b:2]\n"

    async def kv() -> str | None:
        async with Admin(namesrv) as admin:
            return await admin.kv_config("ORDER_TOPIC_CONFIG", topic)

    assert asyncio.run(kv()) == "broker-a:4;broker-b:2"

    assert admin_ok(namesrv, "update-order-conf", "-t", topic, "-m", "delete") == (
        f"delete orderConf success. topic=[{topic}], {namesrv}\n"
    )
    gone = pyrmq_admin("update-order-conf", "-n", namesrv, "-t", topic, "-m", "get")
    assert gone.returncode == 1
    assert "no orderConf" in gone.stderr
    bad = pyrmq_admin(
        "update-order-conf", "-n", namesrv, "-t", topic, "-m", "put", "-v", "broker-a"
    )
    assert bad.returncode == 2
    none = pyrmq_admin("update-order-conf", "-n", namesrv, "-t", topic, "-m", "put", "-v", "b:0")
    assert none.returncode == 2
    assert "'b:0' is not brokerName:num, num 1 or more" in none.stderr


def test_update_topic_with_order_sets_the_order_conf(addrs: tuple[str, str]) -> None:
    """As mqadmin's updateTopic -o: the topic's queue count on its brokers goes to the name
    servers' ORDER_TOPIC_CONFIG, merged into what they hold for one broker (-b), for every
    broker of the cluster (-c)."""
    namesrv, broker = addrs
    topic = "TopicToolsOrdered"
    admin_ok(namesrv, "update-order-conf", "-t", topic, "-m", "put", "-v", "broker-z:2")
    out = admin_ok(namesrv, "update-topic", "-t", topic, "-r", "3", "-o", "-b", broker)
    assert out == (
        f"create topic to {broker} success.\n"
        f"set broker orderConf. isOrder=true, orderConf=[broker-z:2;{BROKER}:3]\n"
    )
    got = admin_ok(namesrv, "update-order-conf", "-t", topic, "-m", "get")
    assert got == f"get orderConf success. topic=[{topic}], orderConf=[broker-z:2;{BROKER}:3]\n"

    other = "TopicToolsOrderedCluster"
    out = admin_ok(namesrv, "update-topic", "-t", other, "-r", "4", "-o", "-c", "DefaultCluster")
    assert out.splitlines()[-1] == f"set cluster orderConf. isOrder=true, orderConf=[{BROKER}:4]"
    got = admin_ok(namesrv, "update-order-conf", "-t", other, "-m", "get")
    assert got == f"get orderConf success. topic=[{other}], orderConf=[{BROKER}:4]\n"
    # Without -o the order conf is not touched.
    plain = "TopicToolsUnordered"
    assert admin_ok(namesrv, "update-topic", "-t", plain, "-b", broker).count("\n") == 1
    assert pyrmq_admin("update-order-conf", "-n", namesrv, "-t", plain, "-m", "get").returncode


def test_allocate_mq_prints_the_averagely_split(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicToolsAllocate"
    routed_topic(namesrv, broker, topic, 5)
    cids = ["10.0.0.2@1", "10.0.0.1@1", "10.0.0.3@1"]
    out = json.loads(admin_ok(namesrv, "allocate-mq", "-t", topic, "-i", ",".join(cids)))
    queues = [MessageQueue(topic, BROKER, i) for i in range(5)]
    expected = {
        cid: [
            {"brokerName": q.broker_name, "queueId": q.queue_id, "topic": topic}
            for q in allocate_averagely("aa", cid, queues, cids)
        ]
        for cid in cids
    }
    assert out == {"result": expected}
    assert [len(v) for v in out["result"].values()] == [2, 2, 1]
    assert [q["queueId"] for q in out["result"]["10.0.0.1@1"]] == [2, 3]
    nobody = pyrmq_admin("allocate-mq", "-n", namesrv, "-t", topic, "-i", " , ")
    assert nobody.returncode == 2
    assert "no client id given" in nobody.stderr


# --- check-msg-send-rt, cluster-rt --------------------------------------------------------


def queue_max_offsets(namesrv: str, topic: str) -> dict[int, int]:
    async def read() -> dict[int, int]:
        async with Admin(namesrv) as admin:
            status = await admin.topic_status(topic)
        return {mq.queue_id: o.max_offset for mq, o in status.items()}

    return asyncio.run(read())


def test_check_msg_send_rt_sends_round_robin_and_prints_each_round_trip(
    addrs: tuple[str, str],
) -> None:
    namesrv, broker = addrs
    topic = "TopicToolsRT"
    routed_topic(namesrv, broker, topic, 2)
    out = admin_ok(namesrv, "check-msg-send-rt", "-t", topic, "-a", "5", "-s", "16")
    lines = out.splitlines()
    assert lines[0].split() == ["#Broker", "Name", "#QID", "#Send", "Result", "#RT"]
    rows = [line.split() for line in lines[1:-1]]
    assert [(r[0], r[1], r[2]) for r in rows] == [(BROKER, str(i % 2), "true") for i in range(5)]
    rts = [int(r[3]) for r in rows]
    avg = re.fullmatch(r"Avg RT: (\d+\.\d\d)", lines[-1])
    assert avg is not None
    assert float(avg.group(1)) == pytest.approx(sum(rts[1:]) / 4, abs=0.01)
    assert queue_max_offsets(namesrv, topic) == {0: 3, 1: 2}
    msgs = bodies(admin_ok(namesrv, "consume-message", "-t", topic))
    assert msgs == ["a" * 16] * 5


def test_cluster_rt_counts_each_brokers_sends(addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicToolsClusterRT"
    routed_topic(namesrv, broker, topic, 2)
    out = admin_ok(namesrv, "cluster-rt", "-a", "4", "-s", "8", "-t", topic)
    header, row = out.splitlines()
    assert header.split() == [
        "#Cluster",
        "Name",
        "#Broker",
        "Name",
        "#RT",
        "#successCount",
        "#failCount",
    ]
    cluster, name, rt, ok, failed = row.split()
    assert (cluster, name, ok, failed) == ("DefaultCluster", BROKER, "4", "0")
    assert float(rt) >= 0
    assert queue_max_offsets(namesrv, topic) == {0: 2, 1: 2}

    log = admin_ok(
        namesrv,
        "cluster-rt",
        "-a",
        "2",
        "-p",
        "true",
        "-m",
        "room1",
        "-c",
        "DefaultCluster",
        "-t",
        topic,
    )
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\|room1\|DefaultCluster\|{BROKER}\|\d+\n", log
    )

    # By default, as mqadmin: through the topic named after the broker, its one queue.
    own = admin_ok(namesrv, "cluster-rt", "-a", "3")
    assert own.splitlines()[1].split()[-2:] == ["3", "0"]
    assert queue_max_offsets(namesrv, BROKER) == {0: 3}
    assert pyrmq_admin("cluster-rt", "-n", namesrv, "-c", "NoCluster").returncode == 1
    missing = pyrmq_admin("cluster-rt", "-n", namesrv, "-a", "1", "-t", "TopicToolsMissing")
    assert missing.returncode == 1
    assert f"{BROKER} holds no writable topic TopicToolsMissing" in missing.stderr


# --- export-metadata ----------------------------------------------------------------------


def test_export_metadata_writes_the_user_topics_and_groups(
    addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker = addrs
    topic, group = "TopicToolsExport", "CG_TOOLS_EXPORT"
    routed_topic(namesrv, broker, topic, 3)
    admin_ok(namesrv, "update-group", "-g", group, "-b", broker, "-r", "5")
    # RocketMQ's own groups, which the export leaves out.
    for own in ("TOOLS_CONSUMER", "CID_RMQ_SYS_TOOLS"):
        admin_ok(namesrv, "update-group", "-g", own, "-b", broker)

    out = admin_ok(namesrv, "export-metadata", "-c", "DefaultCluster", "-f", str(tmp_path))
    assert out == f"export {tmp_path / 'metadata.json'} success\n"
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert set(metadata) == {"topicConfigTable", "subscriptionGroupTable", "exportTime"}
    assert metadata["topicConfigTable"][topic]["readQueueNums"] == 3
    assert metadata["topicConfigTable"][topic]["perm"] == 6
    assert "SCHEDULE_TOPIC_XXXX" not in metadata["topicConfigTable"]
    assert "TBW102" not in metadata["topicConfigTable"]
    assert not [t for t in metadata["topicConfigTable"] if t.startswith("%RETRY%")]
    assert metadata["subscriptionGroupTable"][group]["retryMaxTimes"] == 5
    assert "TOOLS_CONSUMER" not in metadata["subscriptionGroupTable"]
    assert "CID_RMQ_SYS_TOOLS" not in metadata["subscriptionGroupTable"]
    assert abs(metadata["exportTime"] - now_ms()) < 60_000

    only_topics = admin_ok(namesrv, "export-metadata", "-b", broker, "-t", "-f", str(tmp_path))
    assert only_topics == f"export {tmp_path / 'topic.json'} success\n"
    topics = json.loads((tmp_path / "topic.json").read_text())
    assert set(topics) == {"topicConfigTable", "exportTime"}
    assert topic in topics["topicConfigTable"]
    admin_ok(namesrv, "export-metadata", "-b", broker, "-g", "-f", str(tmp_path))
    groups = json.loads((tmp_path / "subscriptionGroup.json").read_text())
    assert set(groups) == {"subscriptionGroupTable", "exportTime"}
    assert group in groups["subscriptionGroupTable"]
    assert pyrmq_admin("export-metadata", "-n", namesrv, "-f", str(tmp_path)).returncode == 2


def test_a_broker_address_that_is_not_host_port_is_a_usage_error(addrs: tuple[str, str]) -> None:
    namesrv, _ = addrs
    for args in (["broker-status", "-b", "garbage"], ["update-topic", "-t", "T", "-b", "h:0"]):
        done = pyrmq_admin(*args, "-n", namesrv)
        assert done.returncode == 2, done.stdout
        assert "is not host:port" in done.stderr
        assert "int()" not in done.stderr
