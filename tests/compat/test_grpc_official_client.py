"""The official RocketMQ 5 Python client (``rocketmq-python-client`` 5.1.2) against
``pyrmq serve``'s gRPC port: producing, simple and push consumers, redelivery, the dead-letter
queue, and messages crossing between the 4.x and 5.x protocols.

The client runs in its own virtualenv (``make rmq5-client``), driven by ``rmq5_client.py``.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests import helpers
from tests.compat import servers
from tests.helpers import committed_offset, fast_config, pull_head

from pyrmq.client import aio
from pyrmq.client.admin import Admin
from pyrmq.client.message import MessageQueue
from pyrmq.errors import BrokerError, PyrmqError
from pyrmq.recall_handle import RecallHandle

pytestmark = [pytest.mark.compat, pytest.mark.slow]

QUEUES = 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[servers.ServerProcess]:
    """``pyrmq serve`` whose groups get 3 deliveries of a message (maxReconsumeTimes=2)."""
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    conf.write_text(
        f"maxReconsumeTimes=2\ndefaultTopicQueueNums={QUEUES}\n"
        # Transactions left open are checked after 1 s, every 0.5 s.
        "transactionTimeOut=1000\ntransactionCheckInterval=500\n"
        "enablePropertyFilter=true\nrecallMessageEnable=true\n"
        # Metrics count every gRPC path these tests take.
        "metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=0\n"
    )
    with servers.serving(root, "-c", str(conf)) as proc:
        yield proc


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _text(seen: dict[str, Any]) -> str:
    return base64.b64decode(seen["body"]).decode()


def _queue_messages(server: servers.ServerProcess, topic: str, queue_id: int) -> list[Any]:
    broker = server.addresses()[1]
    return asyncio.run(pull_head(broker, "broker-a", topic, queue_id)).messages


def _dead_letters(server: servers.ServerProcess, group: str) -> list[Any]:
    """The group's DLQ, or nothing while it does not exist."""
    try:
        return _queue_messages(server, f"%DLQ%{group}", 0)
    except PyrmqError:
        return []


def test_a_5x_producer_stores_what_4x_consumers_read(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Produce"
    normal = [
        {
            "body": _b64(f"n{i}"),
            "tag": "TagA",
            "key": f"k{i}",
            "properties": {"p": str(i)},
        }
        for i in range(3)
    ]
    fifo = [
        {"body": _b64(f"{group}-{i}"), "group": group}
        for i in range(5)
        for group in ("order-1", "order-2")
    ]
    ids = rmq5(
        "produce", {"endpoint": server.grpc_address(), "topic": topic, "messages": normal + fifo}
    )
    assert all(isinstance(i, str) and len(i) == 34 for i in ids), ids
    stored = [m for q in range(QUEUES) for m in _queue_messages(server, topic, q)]
    by_body = {m.body.decode(): m for m in stored}
    assert sorted(by_body) == sorted(base64.b64decode(m["body"]).decode() for m in normal + fifo)
    assert len(stored) == len(ids)
    for i in range(3):
        message = by_body[f"n{i}"]
        assert message.tags == "TagA"
        assert message.keys == f"k{i}"
        assert message.get_property("p") == str(i)
        # The 5.x message id is the 4.x UNIQ_KEY: both clients name the message alike.
        assert message.id == ids[i]
    for group in ("order-1", "order-2"):
        queues = {m.queue_id for m in stored if m.body.decode().startswith(group)}
        assert len(queues) == 1, f"{group} spread over queues {queues}"
        in_queue = [
            m.body.decode()
            for m in _queue_messages(server, topic, queues.pop())
            if m.body.decode().startswith(group)
        ]
        assert in_queue == [f"{group}-{i}" for i in range(5)]
        assert by_body[f"{group}-0"].get_property("__SHARDINGKEY") == group


async def _send_4x(namesrv: str, topic: str, items: list[tuple[str, str | None]]) -> list[str]:
    producer = aio.Producer("PG_G5", client_config=fast_config(namesrv))
    await producer.start()
    try:
        ids = []
        for body, tag in items:
            message = aio.Message(topic, body.encode(), tags=tag, keys=f"key-{body}")
            message.properties["origin"] = "4x"
            ids.append((await producer.send(message)).msg_id)
        return ids
    finally:
        await producer.shutdown()


def test_a_5x_simple_consumer_receives_4x_messages_through_its_filter(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Simple"
    items = [(f"s{i}", "TagA" if i % 3 else "TagB") for i in range(30)]
    ids = asyncio.run(_send_4x(server.addresses()[0], topic, items))
    report = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_SIMPLE",
            "topic": topic,
            "expression": "TagA",
            "count": 20,
            "timeout_s": 30,
        },
    )
    got = report["messages"]
    assert sorted(_text(m) for m in got) == sorted(body for body, tag in items if tag == "TagA")
    expected_ids = {body: i for (body, _), i in zip(items, ids, strict=True)}
    for seen in got:
        body = _text(seen)
        assert seen["tag"] == "TagA"
        assert seen["keys"] == [f"key-{body}"]
        assert seen["properties"] == {"origin": "4x"}
        assert seen["message_id"] == expected_ids[body]
        assert seen["attempt"] == 1
        assert not seen["corrupted"]
    # Everything was acked or filtered out: the group's offsets reached the end of each queue.
    broker = server.addresses()[1]
    for queue_id in range(QUEUES):
        mq = MessageQueue(topic, "broker-a", queue_id)
        end = len(_queue_messages(server, topic, queue_id))
        assert asyncio.run(committed_offset(broker, "GID_G5_SIMPLE", mq)) == end


def test_a_5x_simple_consumer_of_an_orderly_group_reads_every_queue_in_order(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    """A simple consumer names a queue at random in each receive; an orderly group's receive
    still pops from every queue (as RocketMQ's proxy does), one message group at a time."""
    topic, group = "TopicG5SimpleFifo", "GID_G5_SIMPLE_FIFO"
    namesrv = server.addresses()[0]
    done = helpers.pyrmq_admin("update-group", "-n", namesrv, "-g", group, "-o")
    assert done.returncode == 0, done.stderr
    messages = [{"body": _b64(f"f-{i}"), "group": "only"} for i in range(20)]
    rmq5("produce", {"endpoint": server.grpc_address(), "topic": topic, "messages": messages})
    report = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": group,
            "topic": topic,
            "count": 20,
            "batch": 1,
            "await_s": 5,
            "timeout_s": 30,
        },
    )
    assert [_text(m) for m in report["messages"]] == [f"f-{i}" for i in range(20)]
    # Before, only a receive that named the message group's queue found anything.
    assert report["empty_receives"] == 0


def test_a_5x_consumers_mistakes_are_refused_not_served(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    """A consumer of a topic that does not exist is told so, and the topic is not made; a tag
    expression that names no tag and a group of the broker's own are refused."""
    endpoint = server.grpc_address()
    missing = rmq5(
        "simple",
        {
            "endpoint": endpoint,
            "group": "GID_G5_TYPO",
            "topic": "TopicG5NoSuchTopic",
            "count": 1,
            "timeout_s": 5,
            "catch": True,
        },
    )
    assert missing["messages"] == []
    [error] = missing["errors"]
    assert error.startswith("NotFoundException: 40402, topic 'TopicG5NoSuchTopic' does not exist")
    assert (
        "TopicG5NoSuchTopic"
        not in helpers.pyrmq_admin("topic-list", "-n", server.addresses()[0]).stdout
    )
    topic = "TopicG5Refusals"
    rmq5("produce", {"endpoint": endpoint, "topic": topic, "messages": [{"body": _b64("x")}]})
    for group, expression, refusal in [
        ("GID_G5_PIPES", "||", "names no tag"),
        ("CID_RMQ_SYS_TRANS", "*", "the broker's own"),
    ]:
        report = rmq5(
            "simple",
            {
                "endpoint": endpoint,
                "group": group,
                "topic": topic,
                "expression": expression,
                "count": 1,
                "timeout_s": 5,
                "catch": True,
            },
        )
        assert report["messages"] == []
        [error] = report["errors"]
        assert refusal in error


def test_a_message_comes_back_when_its_invisibility_ends_and_old_handles_are_refused(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Redeliver"
    rmq5(
        "produce",
        {"endpoint": server.grpc_address(), "topic": topic, "messages": [{"body": _b64("again")}]},
    )
    report = rmq5(
        "redeliver",
        {"endpoint": server.grpc_address(), "group": "GID_G5_REDELIVER", "topic": topic},
    )
    first, second = report["first"], report["second"]
    assert _text(first) == _text(second) == "again"
    assert first["message_id"] == second["message_id"]
    assert (first["attempt"], second["attempt"]) == (1, 2)
    assert report["again_after_s"] >= 0.5
    assert report["second_ack"] == "ok"
    assert "INVALID_RECEIPT_HANDLE" in report["first_ack"] or "40013" in report["first_ack"]
    assert report["second_ack_again"] != "ok"
    assert report["after"] == []


def test_a_5x_push_consumer_gets_each_message_and_retries_failures_with_backoff(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Push"
    bodies = [f"p{i}" for i in range(40)]
    rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [{"body": _b64(b)} for b in bodies],
        },
    )
    log = rmq5(
        "push",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_PUSH",
            "topic": topic,
            "count": 42,
            "timeout_s": 40,
            "fail": {"p7": 2},
        },
    )
    counts = Counter(_text(seen) for seen in log)
    assert counts == Counter({**dict.fromkeys(bodies, 1), "p7": 3})
    retried = [seen for seen in log if _text(seen) == "p7"]
    assert [seen["attempt"] for seen in retried] == [1, 2, 3]
    # The nacks asked for the first two steps of the backoff list the broker sent: 1 s, 5 s.
    assert retried[1]["at"] - retried[0]["at"] >= 0.9
    assert retried[2]["at"] - retried[1]["at"] >= 4.5
    broker = server.addresses()[1]
    total = 0
    for queue_id in range(QUEUES):
        mq = MessageQueue(topic, "broker-a", queue_id)
        end = len(_queue_messages(server, topic, queue_id))
        total += end
        assert asyncio.run(committed_offset(broker, "GID_G5_PUSH", mq)) == end
    assert total == len(bodies)


def test_a_message_that_keeps_failing_goes_to_the_dead_letter_queue(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic, group = "TopicG5Dead", "GID_G5_DEAD"
    [message_id] = rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [{"body": _b64("doomed"), "tag": "TagD", "key": "kd"}],
        },
    )
    # maxReconsumeTimes=2: three deliveries, each failed by the listener.
    log = rmq5(
        "push",
        {
            "endpoint": server.grpc_address(),
            "group": group,
            "topic": topic,
            "count": 3,
            "timeout_s": 30,
            "linger_s": 2.0,
            "fail": {"doomed": 99},
        },
    )
    assert [seen["attempt"] for seen in log] == [1, 2, 3]
    # Out of attempts after the third nack, it moves when that nack's backoff runs out, with
    # no consumer receiving (as RocketMQ's revive moves it); a 5.x consumer of the DLQ then
    # sees the original id and body.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not _dead_letters(server, group):
        time.sleep(0.5)
    report = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_DLQ_READER",
            "topic": f"%DLQ%{group}",
            "count": 1,
            "timeout_s": 30,
        },
    )
    [dead] = report["messages"]
    assert _text(dead) == "doomed"
    assert dead["message_id"] == message_id
    assert (dead["tag"], dead["keys"]) == ("TagD", ["kd"])
    [stored] = _queue_messages(server, f"%DLQ%{group}", 0)
    assert stored.get_property("DLQ_ORIGIN_TOPIC") == topic
    assert stored.get_property("DLQ_ORIGIN_MESSAGE_ID") == message_id


def test_unacked_messages_come_back_after_a_broker_restart_once_due(
    tmp_path: Path, rmq5: Any
) -> None:
    """One queue: the three acked messages come before the three held ones, so the group's
    offset stops at the first held one. The restarted broker keeps the held ones invisible
    until their time runs out, then delivers them as second attempts; the acked ones never."""
    topic, group = "TopicG5Restart", "GID_G5_RESTART"
    with servers.serving(tmp_path) as first:
        servers.create_topic(first.addresses()[1], topic, 1)
        endpoint = first.grpc_address()
        rmq5(
            "produce",
            {
                "endpoint": endpoint,
                "topic": topic,
                "messages": [{"body": _b64(f"r{i}")} for i in range(6)],
            },
        )
        acked = rmq5(
            "simple",
            {
                "endpoint": endpoint,
                "group": group,
                "topic": topic,
                "count": 3,
                "batch": 3,
                "timeout_s": 20,
            },
        )["messages"]
        held = rmq5(
            "simple",
            {
                "endpoint": endpoint,
                "group": group,
                "topic": topic,
                "count": 3,
                "timeout_s": 20,
                "ack": False,
                "invisible_s": 10,
            },
        )["messages"]
        assert len(acked) == len(held) == 3
    with servers.serving(tmp_path) as second:
        again = rmq5(
            "simple",
            {
                "endpoint": second.grpc_address(),
                "group": group,
                "topic": topic,
                "count": 3,
                "timeout_s": 40,
            },
        )["messages"]
    assert sorted(_text(m) for m in again) == sorted(_text(m) for m in held)
    assert [m["attempt"] for m in again] == [2, 2, 2]
    due_ms = max(m["received_ms"] for m in held) + 10_000
    assert min(m["received_ms"] for m in again) >= due_ms - 1_000
    assert not {_text(m) for m in again} & {_text(m) for m in acked}


def test_an_orderly_groups_push_consumer_takes_each_message_group_in_order(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    """With ``consumeMessageOrderly`` set, the 5.x push consumer consumes FIFO: each message
    group one message at a time in send order, a failure retried in place (by the client), and
    a message out of attempts forwarded to the DLQ before its group goes on."""
    topic, group = "TopicG5Fifo", "GID_G5_FIFO"
    namesrv = server.addresses()[0]
    done = helpers.pyrmq_admin("update-group", "-n", namesrv, "-g", group, "-o", "-r", "2")
    assert done.returncode == 0, done.stderr
    names = [f"g{n}" for n in range(4)]
    messages = [{"body": _b64(f"{name}-{i}"), "group": name} for i in range(10) for name in names]
    ids = rmq5("produce", {"endpoint": server.grpc_address(), "topic": topic, "messages": messages})
    id_of = {base64.b64decode(m["body"]).decode(): i for m, i in zip(messages, ids, strict=True)}
    # g1-3 fails once; g2-5 fails every time: 3 attempts (retryMaxTimes 2), then the DLQ.
    log = rmq5(
        "push",
        {
            "endpoint": server.grpc_address(),
            "group": group,
            "topic": topic,
            "count": 40 + 1 + 2,
            "timeout_s": 40,
            "linger_s": 1.0,
            "fail": {"g1-3": 1, "g2-5": 99},
        },
    )
    assert not [seen for seen in log if seen["overlap"]]
    for name in names:
        calls = [_text(seen) for seen in log if seen["group"] == name]
        expected = [f"{name}-{i}" for i in range(10)]
        if name == "g1":
            expected.insert(4, "g1-3")
        if name == "g2":
            expected[6:6] = ["g2-5", "g2-5"]
        assert calls == expected, name
    [dead] = [m for m in _queue_messages(server, f"%DLQ%{group}", 0)]
    assert dead.body == b"g2-5"
    assert dead.get_property("DLQ_ORIGIN_MESSAGE_ID") == id_of["g2-5"]


def test_a_5x_client_given_one_broker_reaches_a_topic_spread_over_two(
    tmp_path: Path, rmq5: Any
) -> None:
    """namesrv + broker-a + broker-b, each serving gRPC. The clients know only broker-a's
    address; its routes and assignments name both brokers at their own gRPC ports."""
    namesrv_proc = servers.ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    namesrv = namesrv_proc.addresses()[0]
    brokers: dict[str, servers.ServerProcess] = {}
    topic = "TopicG5TwoBrokers"
    try:
        for name in ("broker-a", "broker-b"):
            brokers[name] = servers.start_broker(
                namesrv,
                tmp_path,
                name,
                "--grpc-port",
                "0",
                config="brokerClusterName=DefaultCluster\nbrokerId=0\nrecallMessageEnable=true\n",
            )
            servers.create_topic(brokers[name].addresses()[-1], topic, 2)
        access = brokers["broker-a"].grpc_address()
        assert access != brokers["broker-b"].grpc_address()
        bodies = [f"c{i}" for i in range(20)]
        ids = rmq5(
            "produce",
            {"endpoint": access, "topic": topic, "messages": [{"body": _b64(b)} for b in bodies]},
        )
        assert all(isinstance(i, str) for i in ids), ids
        stored = {
            name: [
                m.body.decode()
                for q in range(2)
                for m in asyncio.run(pull_head(proc.addresses()[-1], name, topic, q)).messages
            ]
            for name, proc in brokers.items()
        }
        # Round robin over both brokers' queues, each message once.
        assert all(len(got) == 10 for got in stored.values()), stored
        assert sorted(stored["broker-a"] + stored["broker-b"]) == sorted(bodies)
        log = rmq5(
            "push",
            {
                "endpoint": access,
                "group": "GID_G5_TWO",
                "topic": topic,
                "count": 20,
                "timeout_s": 30,
            },
        )
        assert sorted(_text(seen) for seen in log) == sorted(bodies)
        # A topic only broker-b holds stays there: broker-a, the access point, does not make
        # one of its own.
        only_b = "TopicG5OnlyB"
        servers.create_topic(brokers["broker-b"].addresses()[-1], only_b, 2)
        rmq5(
            "produce",
            {"endpoint": access, "topic": only_b, "messages": [{"body": _b64("b")}] * 4},
        )

        def on_b() -> list[bytes]:
            return [
                m.body
                for q in range(2)
                for m in asyncio.run(
                    pull_head(brokers["broker-b"].addresses()[-1], "broker-b", only_b, q)
                ).messages
            ]

        assert on_b() == [b"b"] * 4
        with pytest.raises(BrokerError, match="not exist"):
            asyncio.run(pull_head(brokers["broker-a"].addresses()[-1], "broker-a", only_b, 0))
        # A recall reaches the access point, which passes it on to the broker in the handle.
        report = rmq5(
            "recall",
            {
                "endpoint": access,
                "topic": only_b,
                "messages": [
                    {"body": _b64("recalled"), "delay_ms": 3_000, "recall": True},
                    {"body": _b64("kept"), "delay_ms": 3_000},
                ],
            },
        )
        assert RecallHandle.decode(report["sent"][0]["handle"]).broker_name == "broker-b"
        assert report["recalled"] == [report["sent"][0]["message_id"]]
        deadline = time.monotonic() + 15
        while b"kept" not in on_b() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)
        assert sorted(on_b()) == [b"b"] * 4 + [b"kept"]
    finally:
        for proc in brokers.values():
            assert proc.stop() == 0
        namesrv_proc.stop()


def test_a_5x_delay_message_arrives_when_due(server: servers.ServerProcess, rmq5: Any) -> None:
    topic = "TopicG5Delay"
    sent_ms = int(time.time() * 1000)
    rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [{"body": _b64("now")}, {"body": _b64("later"), "delay_ms": 4_000}],
        },
    )
    report = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_DELAY",
            "topic": topic,
            "count": 2,
            "timeout_s": 30,
        },
    )
    got = {_text(m): m for m in report["messages"]}
    assert sorted(got) == ["later", "now"]
    later = got["later"]
    assert later["received_ms"] >= sent_ms + 4_000
    # The client reads the delivery time back as epoch milliseconds.
    assert sent_ms + 4_000 <= later["delivery_timestamp"] <= later["received_ms"]
    assert got["now"]["received_ms"] < later["received_ms"]


def test_5x_traffic_shows_in_the_broker_metrics(server: servers.ServerProcess, rmq5: Any) -> None:
    topic, group = "TopicG5Metrics", "GID_G5_METRICS"
    rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [{"body": _b64("m1")}, {"body": _b64("m2"), "group": "g"}],
        },
    )
    rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": group,
            "topic": topic,
            "count": 2,
            "timeout_s": 20,
        },
    )
    with urllib.request.urlopen(f"http://{server.metrics_address()}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {
        (s.name, s.labels.get("message_type") or s.labels.get("consumer_group")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.labels.get("topic") == topic
    }
    assert samples[("rocketmq_messages_in_total", "normal")] == 1
    assert samples[("rocketmq_messages_in_total", "fifo")] == 1
    assert samples[("rocketmq_messages_out_total", group)] == 2


def test_a_5x_consumer_holding_messages_shows_in_the_consumer_gauges(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    """Five messages, three received and not acked while the consumer stays online."""
    topic, group = "TopicG5Holding", "GID_G5_HOLDING"
    rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [{"body": _b64(f"m{i}")} for i in range(5)],
        },
    )
    spec = {
        "endpoint": server.grpc_address(),
        "group": group,
        "topic": topic,
        "count": 3,
        "batch": 1,
        "ack": False,
        "invisible_s": 60,
        "hold_s": 8,
        "timeout_s": 20,
    }
    labels = {"topic": topic, "consumer_group": group, "is_retry": "false"}

    def gauges() -> dict[str, float]:
        url = f"http://{server.metrics_address()}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        return {
            s.name.removeprefix("rocketmq_consumer_"): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("rocketmq_consumer_")
            and all(s.labels.get(k) == v for k, v in labels.items())
        }

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        holding = pool.submit(rmq5, "simple", spec)
        deadline = time.monotonic() + 30
        seen = gauges()
        while seen.get("inflight_messages") != 3 and not holding.done():
            assert time.monotonic() < deadline, seen
            time.sleep(0.3)
            seen = gauges()
        assert seen["inflight_messages"] == 3, seen
        assert seen["lag_messages"] == 5
        assert seen["ready_messages"] == 2
        # Both the oldest unacked and the oldest not received were stored before the receives.
        assert seen["lag_latency_milliseconds"] > 0
        assert seen["queueing_latency_milliseconds"] > 0
        assert len(holding.result()["messages"]) == 3


def test_a_5x_producer_recalls_a_delay_message_before_it_falls_due(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Recall"
    other = RecallHandle("TopicOther", "broker-a", int(time.time() * 1000) + 60_000, "X")
    report = rmq5(
        "recall",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [
                {"body": _b64("kept"), "delay_ms": 4_000},
                {"body": _b64("recalled"), "delay_ms": 4_000, "recall": True},
                {"body": _b64("plain")},
            ],
            "bad_handles": ["not-a-handle", other.encode()],
        },
    )
    kept, gone, plain = report["sent"]
    assert kept["handle"]
    assert gone["handle"]
    # Only messages with a delivery time get one.
    assert not plain["handle"]
    handle = RecallHandle.decode(gone["handle"])
    assert (handle.topic, handle.broker_name, handle.message_id) == (
        topic,
        "broker-a",
        gone["message_id"],
    )
    assert report["recalled"] == [gone["message_id"]]
    bad, wrong_topic = report["errors"]
    assert "recall handle is invalid" in bad
    assert "topic not match" in wrong_topic
    got = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_RECALL",
            "topic": topic,
            "count": 3,
            "timeout_s": 9,
        },
    )
    assert sorted(_text(m) for m in got["messages"]) == ["kept", "plain"]


def test_5x_transactions_commit_roll_back_and_are_checked_when_left_open(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    topic = "TopicG5Tx"
    report = rmq5(
        "transactions",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "commit": ["tx-commit-1", "tx-commit-2"],
            "rollback": ["tx-rollback"],
            "unresolved": ["tx-checked"],
            "check_wait_s": 20,
        },
    )
    assert report["ends"] == ["commit", "commit", "rollback"]
    # Only the half left open was checked, and the checker committed it.
    assert set(report["checked"]) == {"tx-checked"}
    got = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_TX",
            "topic": topic,
            # One more than there should be: a rolled back message would show up.
            "count": 4,
            "timeout_s": 6,
        },
    )["messages"]
    assert sorted(_text(m) for m in got) == ["tx-checked", "tx-commit-1", "tx-commit-2"]


def test_a_5x_simple_consumer_filters_by_sql92(server: servers.ServerProcess, rmq5: Any) -> None:
    topic = "TopicG5Sql"
    rmq5(
        "produce",
        {
            "endpoint": server.grpc_address(),
            "topic": topic,
            "messages": [
                {"body": _b64(f"s{i}"), "properties": {"n": str(i), "kind": kind}}
                for i, kind in enumerate(["a", "b", "a", "b", "a", "a"])
            ],
        },
    )
    got = rmq5(
        "simple",
        {
            "endpoint": server.grpc_address(),
            "group": "GID_G5_SQL",
            "topic": topic,
            "expression": "kind = 'a' AND n >= 2",
            "sql": True,
            # One more than there should be: a message the filter refuses would show up.
            "count": 4,
            "timeout_s": 6,
        },
    )["messages"]
    assert sorted(_text(m) for m in got) == ["s2", "s4", "s5"]


def test_a_namespace_is_folded_into_the_names_the_broker_keeps(
    server: servers.ServerProcess, rmq5: Any
) -> None:
    """A 5.x client with a namespace works in ``ns%Topic`` and ``ns%Group``, the names a 4.x
    client with that namespace uses, and sees its own names without the namespace."""
    topic, group = "TopicG5Ns", "GID_G5_NS"
    servers.create_topic(server.addresses()[1], f"nsA%{topic}", 1)
    endpoint = server.grpc_address()
    [message_id] = rmq5(
        "produce",
        {
            "endpoint": endpoint,
            "namespace": "nsA",
            "topic": topic,
            "messages": [{"body": _b64("in nsA"), "tag": "T"}],
        },
    )
    [stored] = _queue_messages(server, f"nsA%{topic}", 0)
    assert stored.body == b"in nsA"

    def receive_one() -> dict[str, Any]:
        spec = {"endpoint": endpoint, "namespace": "nsA", "group": group, "topic": topic}
        [got] = rmq5("simple", {**spec, "count": 1, "timeout_s": 20})["messages"]
        return cast(dict[str, Any], got)

    got = receive_one()
    assert (got["topic"], got["message_id"], _text(got)) == (topic, message_id, "in nsA")

    async def progress() -> int:
        async with Admin(server.addresses()[0]) as admin:
            return (await admin.consume_stats(f"nsA%{group}", f"nsA%{topic}")).lag

    assert asyncio.run(progress()) == 0
    # Without the namespace it is another topic (made by the first send to it).
    rmq5("produce", {"endpoint": endpoint, "topic": topic, "messages": [{"body": _b64("out")}]})
    assert [m.body for m in _queue_messages(server, f"nsA%{topic}", 0)] == [b"in nsA"]
    outside = [m.body for q in range(4) for m in _queue_messages(server, topic, q)]
    assert outside == [b"out"]

    # pyrmq's own client with that namespace meets the 5.x client's messages, and the other way.
    async def native() -> list[tuple[str, bytes]]:
        config = fast_config(server.addresses()[0], namespace="nsA", instance_name="ns-native")
        async with aio.Producer("PG_NS_NATIVE", client_config=config) as producer:
            await producer.send(aio.Message(topic, b"from pyrmq"))
        consumer = aio.PushConsumer(
            "GID_G5_NS_NATIVE", client_config=config, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
        )
        consumer.subscribe(topic)
        got: list[tuple[str, bytes]] = []
        async with consumer:
            async for msg in consumer:
                got.append((msg.topic, msg.body))
                if len(got) == 2:
                    break
        return got

    assert sorted(asyncio.run(asyncio.wait_for(native(), 30))) == [
        (topic, b"from pyrmq"),
        (topic, b"in nsA"),
    ]
    got = receive_one()
    assert (got["topic"], _text(got)) == (topic, "from pyrmq")
