"""The official RocketMQ 4.x client (``rocketmq==0.4.4``, C++ 1.2.3 inside) against real
``pyrmq serve``, ``pyrmq namesrv`` and ``pyrmq broker`` processes, unchanged."""

from __future__ import annotations

import collections
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .rmq_client import run_producer, run_pull_consumer, start_push_consumer
from .servers import ServerProcess, create_topic

if TYPE_CHECKING:
    from pyrmq.remoting.command import RemotingCommand as RemotingCommandT

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]


@pytest.fixture
def serve(serve_process: ServerProcess) -> str:
    """The name server address of ``pyrmq serve``."""
    return serve_process.addresses()[0]


@pytest.fixture
def topic_of(serve_process: ServerProcess):  # type: ignore[no-untyped-def]
    """Creates a topic before consumers start, as an operator does: a consumer that starts
    before its topic exists only finds it at its next route refresh, 30 s later."""

    def create(topic: str, queue_nums: int = 4) -> str:
        create_topic(serve_process.addresses()[1], topic, queue_nums)
        return topic

    return create


def test_sync_send_and_pull_deliver_every_message_exactly_as_sent(serve: str) -> None:
    messages = [
        {
            "body": f"body-{i}",
            "tags": f"Tag{i % 2}",
            "keys": f"key-{i} other-{i}",
            "properties": {"custom": f"v{i}"},
        }
        for i in range(12)
    ]
    before_ms = int(time.time() * 1000)
    sent = run_producer(serve, "TopicSync", messages)
    after_ms = int(time.time() * 1000)
    assert [s["status"] for s in sent] == ["SEND_OK"] * 12
    got = run_pull_consumer(serve, "TopicSync", property_keys=["custom"])
    by_body = {m["body"]: m for m in got}
    assert sorted(by_body) == sorted(f"body-{i}".encode() for i in range(12))
    for i in range(12):
        m = by_body[f"body-{i}".encode()]
        assert m["tags"] == f"Tag{i % 2}"
        assert m["keys"] == f"key-{i} other-{i}"
        assert m["properties"]["custom"] == f"v{i}"
        assert m["msg_id"] == sent[i]["msg_id"]
        assert m["queue_offset"] == sent[i]["queue_offset"]
        # Born time is the producer's clock at send, store time the broker's when it stored.
        assert before_ms - 1000 <= m["born_timestamp"] <= m["store_timestamp"] <= after_ms + 1000
    # Queue offsets are contiguous from 0 in every queue.
    per_queue = collections.defaultdict(list)
    for m in got:
        per_queue[m["queue_id"]].append(m["queue_offset"])
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())


def test_orderly_oneway_batch_and_large_bodies(serve: str) -> None:
    orderly = run_producer(
        serve, "TopicModes", [f"o{i}" for i in range(6)], mode="orderly", sharding=3
    )
    assert {s["queue_id"] for s in orderly} == {3}
    run_producer(serve, "TopicModes", ["oneway-1", "oneway-2"], mode="oneway")
    run_producer(
        serve,
        "TopicModes",
        [{"body": "b1", "keys": "kb1"}, {"body": "b2", "keys": "kb2"}],
        batch=True,
    )
    big = "x" * 6000 + "y" * 6000  # above 4 KiB: the client compresses it
    run_producer(serve, "TopicModes", [big])
    deadline = time.monotonic() + 10
    while True:
        got = run_pull_consumer(serve, "TopicModes")
        bodies = [m["body"] for m in got]
        if len(bodies) >= 11 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(bodies) == sorted(
        [f"o{i}".encode() for i in range(6)]
        + [b"oneway-1", b"oneway-2", b"b1", b"b2", big.encode()]
    )
    queue3 = [m["body"] for m in got if m["queue_id"] == 3]
    assert [b for b in queue3 if b.startswith(b"o")] == [f"o{i}".encode() for i in range(6)]


def test_push_consumer_gets_everything_and_a_reconsume_later_comes_back(
    serve: str, topic_of
) -> None:
    with start_push_consumer(
        serve, topic_of("TopicPush"), group="CG_PUSH", reconsume_later=["K3"]
    ) as consumer:
        time.sleep(1.0)
        run_producer(
            serve,
            "TopicPush",
            [{"body": f"m{i}", "tags": "TagA", "keys": f"K{i}"} for i in range(8)],
        )
        msgs = consumer.wait_for(9, timeout=60)
    first = [m for m in msgs if m["reconsume_times"] == 0]
    again = [m for m in msgs if m["reconsume_times"] >= 1]
    assert sorted(m["body"] for m in first) == sorted(f"m{i}".encode() for i in range(8))
    assert b"m3" in [m["body"] for m in again]
    assert all(m["topic"] == "TopicPush" for m in msgs)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("TagA || TagB", [b"TagA-0", b"TagA-4", b"TagB-2"]),
        # As in RocketMQ, "*" means every tag only as the whole expression.
        ("TagA || *", [b"*-5", b"TagA-0", b"TagA-4"]),
    ],
)
def test_tag_filter_delivers_only_matching_messages(
    serve: str, topic_of, expression: str, expected: list[bytes]
) -> None:
    with start_push_consumer(
        serve, topic_of("TopicTags"), group="CG_TAG", expression=expression
    ) as consumer:
        time.sleep(1.0)
        run_producer(
            serve,
            "TopicTags",
            [
                {"body": f"{t}-{i}", "tags": t}
                for i, t in enumerate(["TagA", "TagC", "TagB", "TagC", "TagA", "*"])
            ],
        )
        msgs = consumer.wait_for(len(expected), timeout=60)
        time.sleep(1.0)
        msgs = consumer.messages()
    assert sorted(m["body"] for m in msgs) == expected


def test_two_consumers_of_one_group_share_the_queues(serve: str, topic_of) -> None:
    topic_of("TopicShare")
    with (
        start_push_consumer(serve, "TopicShare", group="CG_SHARE", instance_name="one") as a,
        start_push_consumer(serve, "TopicShare", group="CG_SHARE", instance_name="two") as b,
    ):
        time.sleep(3.0)
        run_producer(serve, "TopicShare", [f"s{i}" for i in range(40)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(a.messages()) + len(b.messages()) < 40:
            time.sleep(0.2)
        got_a = [m["body"] for m in a.messages()]
        got_b = [m["body"] for m in b.messages()]
    assert sorted(got_a + got_b) == sorted(f"s{i}".encode() for i in range(40))
    assert got_a, "both consumers should own queues"
    assert got_b, "both consumers should own queues"
    assert not set(got_a) & set(got_b)


def test_broadcasting_consumers_each_get_every_message(serve: str, topic_of) -> None:
    topic_of("TopicCast")
    with (
        start_push_consumer(
            serve, "TopicCast", group="CG_CAST", model="BROADCASTING", instance_name="one"
        ) as a,
        start_push_consumer(
            serve, "TopicCast", group="CG_CAST", model="BROADCASTING", instance_name="two"
        ) as b,
    ):
        time.sleep(2.0)
        run_producer(serve, "TopicCast", [f"c{i}" for i in range(10)])
        got_a = a.wait_for(10, timeout=60)
        got_b = b.wait_for(10, timeout=60)
    want = sorted(f"c{i}".encode() for i in range(10))
    assert sorted(m["body"] for m in got_a) == want
    assert sorted(m["body"] for m in got_b) == want


def test_a_topic_spread_over_two_brokers(tmp_path: Path) -> None:
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    ns = namesrv.addresses()[0]
    brokers = []
    try:
        for name in ("broker-a", "broker-b"):
            conf = tmp_path / f"{name}.conf"
            conf.write_text(f"brokerName={name}\nbrokerClusterName=DefaultCluster\nbrokerId=0\n")
            brokers.append(
                ServerProcess(
                    [
                        "broker",
                        "-n",
                        ns,
                        "-c",
                        str(conf),
                        "--store",
                        str(tmp_path / name),
                        "--port",
                        "0",
                    ],
                    tmp_path / f"{name}.log",
                )
            )
        # Create the topic on both brokers through auto-creation: each send picks a queue of a
        # broker in turn.
        sent = run_producer(ns, "TopicTwo", [f"t{i}" for i in range(16)])
        assert [s["status"] for s in sent] == ["SEND_OK"] * 16
        got = run_pull_consumer(ns, "TopicTwo")
        assert sorted(m["body"] for m in got) == sorted(f"t{i}".encode() for i in range(16))
    finally:
        for b in brokers:
            assert b.stop() == 0
        assert namesrv.stop() == 0


def test_consumer_running_info_is_fetched_from_the_client_through_the_broker(
    serve_process: ServerProcess, topic_of
) -> None:
    import asyncio
    import json

    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.protocol import RequestCode, ResponseCode

    namesrv, broker = serve_process.addresses()
    topic = topic_of("TopicInfo")

    async def ask() -> tuple[RemotingCommand, RemotingCommand]:
        client = RemotingClient()
        try:
            members = await client.invoke(
                broker,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG_INFO"}
                ),
            )
            [client_id] = json.loads(members.body)["consumerIdList"]
            info = await client.invoke(
                broker,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_RUNNING_INFO,
                    {"consumerGroup": "CG_INFO", "clientId": client_id, "jstackEnable": "false"},
                ),
                timeout_s=10,
            )
            gone = await client.invoke(
                broker,
                RemotingCommand.request(
                    RequestCode.GET_CONSUMER_RUNNING_INFO,
                    {
                        "consumerGroup": "CG_INFO",
                        "clientId": "no-such-client",
                        "jstackEnable": "false",
                    },
                ),
            )
            return info, gone
        finally:
            await client.close()

    with start_push_consumer(namesrv, topic, group="CG_INFO") as consumer:
        run_producer(namesrv, topic, ["one"])
        consumer.wait_for(1, timeout=60)
        info, gone = asyncio.run(ask())
    assert info.code == ResponseCode.SUCCESS
    # C++ 1.2.3 answers with its own text (object-valued map keys): relayed unchanged.
    assert b'"topic" : "TopicInfo"' in info.body
    assert gone.code == ResponseCode.SYSTEM_ERROR
    assert gone.remark == "The Consumer <no-such-client> not online"


def _broker_call(broker: str, code: int, ext: dict[str, str]) -> RemotingCommandT:
    """One request to the broker from a fresh connection, answered within 10 s."""
    import asyncio

    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.command import RemotingCommand

    async def call() -> RemotingCommand:
        client = RemotingClient()
        try:
            request = RemotingCommand.request(code, ext)
            return await client.invoke(broker, request, timeout_s=10)
        finally:
            await client.close()

    return asyncio.run(call())


def test_reset_offset_by_time_makes_a_push_consumer_read_again(
    serve_process: ServerProcess, topic_of
) -> None:
    """C++ 1.2.3 acts on RESET_CONSUMER_CLIENT_OFFSET when its body is the list form: it drops
    the queue's pull request, commits the new offset, rebalances and pulls from there."""
    from pyrmq.broker.processors.admin import reset_offset_body
    from pyrmq.remoting.protocol import RequestCode, ResponseCode

    namesrv, broker = serve_process.addresses()
    # One queue: the consumer parks a single pull there, which the wake-up message answers.
    topic, group = topic_of("TopicResetOffset", 1), "CG_RESET"
    bodies = [f"r{i}".encode() for i in range(5)]

    def committed() -> str | None:
        answer = _broker_call(
            broker,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": group, "topic": topic, "queueId": "0"},
        )
        return answer.ext_fields.get("offset") if answer.code == ResponseCode.SUCCESS else None

    with start_push_consumer(namesrv, topic, group=group) as consumer:
        time.sleep(1.0)
        before_ms = int(time.time() * 1000)
        run_producer(namesrv, topic, [b.decode() for b in bodies])
        first = consumer.wait_for(len(bodies), timeout=60)
        assert sorted(m["body"] for m in first) == bodies
        # The reset needs the group's committed offset; C++ commits every 5 s.
        deadline = time.monotonic() + 20
        while committed() != str(len(bodies)):
            assert time.monotonic() < deadline, f"offset not committed: {committed()}"
            time.sleep(0.2)
        answer = _broker_call(
            broker,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
            {"topic": topic, "group": group, "timestamp": str(before_ms), "isForce": "false"},
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        assert answer.body == reset_offset_body(topic, "broker-a", {0: 0})
        # The client resumes the queue only once its parked pull comes back (up to 15 s): a new
        # message brings it back at once.
        run_producer(namesrv, topic, ["wake"])
        msgs = consumer.wait_for(2 * len(bodies) + 1, timeout=60)
        time.sleep(0.5)
        msgs = consumer.messages()
    again = [m["body"] for m in msgs[len(bodies) :]]
    # Every message once more (the wake-up message may come once or, had it beaten the reset
    # to the client, twice), and nothing through the retry topic.
    assert sorted(b for b in again if b != b"wake") == bodies
    assert b"wake" in again
    assert all(m["reconsume_times"] == 0 for m in msgs)
