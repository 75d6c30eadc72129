"""The broker's Prometheus endpoint (``metricsExporterType=PROM``) against a real ``pyrmq
serve``: after sends, consumption, a transaction and a dead letter, a scrape shows RocketMQ's
series with RocketMQ's labels and the values that traffic implies."""

from __future__ import annotations

import asyncio
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from tests import helpers
from tests.compat.servers import create_topic, serving
from tests.helpers import fast_config, pyrmq_admin, send_raw

from pyrmq.broker.config import BrokerConfig
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.message import Message, MessageExt
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.transaction import TransactionProducer, TransactionState
from pyrmq.errors import ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC, GROUP = "TopicMetrics", "GID_METRICS"
BROKER = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a", "env": "ci"}


def _scrape(address: str, *names: str) -> list[Sample]:
    """The endpoint's samples; those named, with ``names`` (Prometheus's ``name[]`` filter)."""
    query = "&".join(f"name[]={n}" for n in names)
    with urllib.request.urlopen(f"http://{address}/metrics?{query}", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The one sample of ``name`` whose labels include ``labels`` (None if there is none)."""
    found = [
        s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else None


def test_a_scrape_shows_the_traffic_with_rocketmq_names_and_labels(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\n"
        "metricsPromExporterPort=0\nmetricsLabel=env:ci\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, TOPIC, 1)
        metrics = server.metrics_address()
        before = _scrape(metrics)
        assert _value(before, "rocketmq_messages_in_total", topic=TOPIC) is None
        assert (_value(before, "rocketmq_topic_number", **BROKER) or 0) >= 1
        consumed: list[bytes] = []
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            with lock:
                consumed.extend(m.body for m in msgs)
            if any(m.body == b"dead" for m in msgs):
                ctx.delay_level_when_next_consume = -1
                return ConsumeStatus.RECONSUME_LATER
            return ConsumeStatus.CONSUME_SUCCESS

        async def main() -> None:
            config = fast_config(namesrv, instance_name="metrics")
            consumer = PushConsumer(
                GROUP, client_config=config, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
            )
            consumer.subscribe(TOPIC, "*", listener)
            async with consumer, Producer("PG_METRICS", client_config=config) as producer:
                for body in (b"small", os.urandom(5000), b"dead"):
                    await producer.send(Message(TOPIC, body))
                await producer.send(Message(TOPIC, b"later", delay_time_level=1))
                async with TransactionProducer(
                    "PG_METRICS_TX",
                    checker=lambda _m: TransactionState.COMMIT,
                    client_config=fast_config(namesrv, instance_name="metrics-tx"),
                ) as tx:
                    await tx.send_in_transaction(
                        Message(TOPIC, b"tx"), lambda _m, _a: TransactionState.COMMIT
                    )
                await helpers.eventually(lambda: len(consumed) >= 5, timeout_s=30)
                group = {**BROKER, "consumer_group": GROUP}
                # Lag is that of groups with consumers online, on what they subscribe.
                deadline = time.monotonic() + 20
                while True:
                    samples = await asyncio.to_thread(_scrape, metrics)
                    lag = _value(samples, "rocketmq_consumer_lag_messages", **group, topic=TOPIC)
                    if lag == 0 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.3)
                assert lag == 0
                retry_lag = {"consumer_group": GROUP, "topic": f"%RETRY%{GROUP}"}
                assert _value(samples, "rocketmq_consumer_lag_messages", **retry_lag) is None
                assert _value(samples, "rocketmq_consumer_connections", **group) == 1
                assert _value(samples, "rocketmq_consumer_group_number", **BROKER) == 1
                producers = [
                    s
                    for s in samples
                    if s.name == "rocketmq_producer_connections"
                    and s.labels.get("protocol_type") == "remoting"
                ]
                # pyrmq's clients say they are Java 4.9.7, as RocketMQ names versions.
                assert {s.labels["version"] for s in producers} == {"v4_9_7"}
                assert sum(s.value for s in producers) >= 1

        helpers.run(main, timeout_s=60)
        samples = _scrape(metrics)
        mine = {**BROKER, "topic": TOPIC, "is_system": "false"}
        assert _value(samples, "rocketmq_messages_in_total", **mine, message_type="normal") == 3
        assert _value(samples, "rocketmq_messages_in_total", **mine, message_type="delay") == 1
        assert (
            _value(samples, "rocketmq_messages_in_total", **mine, message_type="transaction") == 1
        )
        normal_bytes = _value(
            samples, "rocketmq_throughput_in_total", topic=TOPIC, message_type="normal"
        )
        assert normal_bytes is not None
        assert 5000 < normal_bytes < 6000
        size = {"topic": TOPIC, "message_type": "normal"}
        assert _value(samples, "rocketmq_message_size_bucket", **size, le="1024.0") == 2
        assert _value(samples, "rocketmq_message_size_bucket", **size, le="4096.0") == 2
        assert _value(samples, "rocketmq_message_size_bucket", **size, le="524288.0") == 3
        assert _value(samples, "rocketmq_message_size_count", **size) == 3
        out = _value(samples, "rocketmq_messages_out_total", topic=TOPIC, consumer_group=GROUP)
        # small, the 5000 bytes, dead, later and tx: each pulled once.
        assert out == 5
        assert (
            _value(
                samples, "rocketmq_send_to_dlq_messages_total", topic=TOPIC, consumer_group=GROUP
            )
            == 1
        )
        assert _value(samples, "rocketmq_commit_messages_total", **BROKER, topic=TOPIC) == 1
        assert _value(samples, "rocketmq_half_messages", topic=TOPIC) is None
        storage = {**BROKER, "storage_type": "local", "storage_medium": "disk"}
        assert (_value(samples, "rocketmq_storage_size_bytes", **storage) or 0) > 0
        assert _value(samples, "rocketmq_storage_flush_behind_bytes", **storage) is not None
        reserve = "rocketmq_storage_message_reserve_time_milliseconds"
        assert (_value(samples, reserve, **storage) or -1) >= 0
        # The process's own series come with it.
        assert (_value(samples, "process_resident_memory_bytes") or 0) > 0
        # Remoting requests by code, as RocketMQ names them; a pull answered after it was
        # held for long polling is one of its own.
        rpcs = {
            (s.labels["request_code"], s.labels["response_code"], s.labels["is_long_polling"]): s
            for s in samples
            if s.name == "rocketmq_rpc_latency_milliseconds_count"
        }
        assert {s.labels["protocol_type"] for s in rpcs.values()} == {"remoting"}
        sends = sum(
            s.value
            for (req, resp, _), s in rpcs.items()
            if req.startswith("send_message") and resp == "success"
        )
        assert sends >= 4
        assert rpcs["pull_message", "success", "true"].value >= 1
        assert rpcs["heart_beat", "success", "false"].value >= 1
        assert (
            _value(samples, "rocketmq_rpc_latency_milliseconds_bucket", request_code="heart_beat",
                   le="+Inf")
            == rpcs["heart_beat", "success", "false"].value
        )  # fmt: skip
        asked = ("rocketmq_messages_in_total", "rocketmq_topic_number", "process_cpu_seconds_total")
        filtered = _scrape(metrics, *asked)
        assert {s.name for s in filtered} == set(asked)
        assert _value(filtered, "rocketmq_messages_in_total", **mine, message_type="normal") == 3


@pytest.mark.parametrize("model", ["CLUSTERING", "BROADCASTING"])
def test_consumer_gauges_follow_a_stalled_consumer(tmp_path: Path, model: str) -> None:
    """Ten messages; the consumer takes the first two, then blocks on every other it gets,
    and flow control (over 3 cached) stops its pulls at offset 8: 8 behind its commit at 2,
    6 of them pulled and not consumed, 2 not pulled. A broadcasting consumer commits nothing
    to the broker: as in RocketMQ, its pull offset stands for the commit, and the 2 not
    pulled are all that shows (they showed as nothing). Released, it catches up to zero."""
    topic, group = "TopicStall", "GID_STALL"
    expected = (8, 6, 2) if model == "CLUSTERING" else (2, 0, 2)
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=0\n"
    )
    gauges = {
        "lag": "rocketmq_consumer_lag_messages",
        "lag_ms": "rocketmq_consumer_lag_latency_milliseconds",
        "in_flight": "rocketmq_consumer_inflight_messages",
        "queueing_ms": "rocketmq_consumer_queueing_latency_milliseconds",
        "ready": "rocketmq_consumer_ready_messages",
    }
    labels = {"topic": topic, "consumer_group": group, "is_retry": "false", "is_system": "false"}

    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, topic, 1)
        metrics = server.metrics_address()
        release = threading.Event()

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            if msgs[0].body not in (b"m0", b"m1"):
                release.wait(30)
            return ConsumeStatus.CONSUME_SUCCESS

        def read() -> dict[str, float | None]:
            samples = _scrape(metrics)
            return {k: _value(samples, name, **labels) for k, name in gauges.items()}

        async def until(what: str, check: Any) -> dict[str, float | None]:
            deadline = time.monotonic() + 20
            while True:
                seen = await asyncio.to_thread(read)
                if check(seen):
                    return seen
                assert time.monotonic() < deadline, f"{what}: {seen}"
                await asyncio.sleep(0.2)

        async def main() -> None:
            config = fast_config(namesrv, instance_name="stall")
            async with Producer("PG_STALL", client_config=config) as producer:
                for i in range(10):
                    await producer.send(Message(topic, f"m{i}".encode()))
            sent_at_ms = time.time_ns() // 1_000_000
            await asyncio.sleep(0.5)
            consumer = PushConsumer(
                group,
                client_config=config,
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
                pull_batch_size=4,
                pull_threshold_for_queue=3,
                message_model=model,  # type: ignore[arg-type]
                offsets_dir=tmp_path / "offsets",
            )
            consumer.subscribe(topic, "*", listener)
            try:
                async with consumer:
                    stalled = await until(
                        "stalled", lambda g: (g["lag"], g["in_flight"], g["ready"]) == expected
                    )
                    waited_ms = time.time_ns() // 1_000_000 - sent_at_ms
                    # m2 and m8 were stored before sent_at_ms and at least 0.5 s ago.
                    for key in ("lag_ms", "queueing_ms"):
                        assert 500 <= (stalled[key] or 0) <= waited_ms + 5_000, stalled
                    release.set()
                    await until("caught up", lambda g: all(v == 0 for v in g.values()))
            finally:
                release.set()
            # Gone offline: its series go with it. A group that committed offsets still
            # counts, as RocketMQ's subscription group table keeps it.
            assert set((await asyncio.to_thread(read)).values()) == {None}
            samples = await asyncio.to_thread(_scrape, metrics)
            count = _value(samples, "rocketmq_consumer_group_number")
            assert count == (1 if model == "CLUSTERING" else 0)

        helpers.run(main, timeout_s=90)


def test_a_tag_filtered_group_counts_only_the_messages_it_subscribes(tmp_path: Path) -> None:
    """A group of tag A, its offset committed at 1, holds the three A messages among six B
    ones: three in flight and three of lag, where nine messages lie past its commit."""
    topic, group = "TopicTagLag", "GID_TAG_LAG"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=0\n"
    )
    labels = {"topic": topic, "consumer_group": group}
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, topic, 1)
        metrics = server.metrics_address()
        release = threading.Event()
        first = threading.Event()

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            if msgs[0].body == b"first":
                first.set()
            else:
                release.wait(30)
            return ConsumeStatus.CONSUME_SUCCESS

        def read() -> tuple[float | None, ...]:
            samples = _scrape(metrics)
            return tuple(
                _value(samples, f"rocketmq_consumer_{name}", **labels)
                for name in ("lag_messages", "inflight_messages", "ready_messages")
            )

        async def main() -> None:
            config = fast_config(namesrv, instance_name="tag-lag")
            consumer = PushConsumer(
                group, client_config=config, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
            )
            consumer.subscribe(topic, "A", listener)
            async with consumer, Producer("PG_TAG_LAG", client_config=config) as producer:
                await producer.send(Message(topic, b"first", tags="A"))
                await helpers.eventually(first.is_set, timeout_s=20)
                for i, tag in enumerate("BABBABBAB"):
                    await producer.send(Message(topic, f"m{i}".encode(), tags=tag))
                deadline = time.monotonic() + 20
                seen = await asyncio.to_thread(read)
                while seen != (3, 3, 0):
                    assert time.monotonic() < deadline, seen
                    await asyncio.sleep(0.2)
                    seen = await asyncio.to_thread(read)
                release.set()

        try:
            helpers.run(main, timeout_s=60)
        finally:
            release.set()


def test_series_are_bounded_and_a_deleted_topic_takes_its_own(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    # The type's ordinal, as RocketMQ takes it; no host: the broker's own address.
    conf.write_text(
        "metricsExporterType=2\nmetricsPromExporterPort=0\nmetricsOtelCardinalityLimit=2\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        metrics = server.metrics_address()
        assert metrics.rpartition(":")[0] == broker.rpartition(":")[0]
        for topic in ("TopicLimitA", "TopicLimitB", "TopicLimitC"):
            create_topic(broker, topic, 1)
            assert send_raw(broker, topic, b"x").code == 0
        # Retries are not traffic of their own, as in RocketMQ.
        assert send_raw(broker, "%RETRY%GID_LIMIT", b"r").code == 0
        samples = _scrape(metrics)
        counted = {s.labels["topic"] for s in samples if s.name == "rocketmq_messages_in_total"}
        assert counted == {"TopicLimitA", "TopicLimitB"}
        pyrmq_admin("delete-topic", "-n", server.addresses()[0], "-t", "TopicLimitA")
        samples = _scrape(metrics)
        counted = {s.labels["topic"] for s in samples if s.name == "rocketmq_messages_in_total"}
        assert counted == {"TopicLimitB"}


def test_no_endpoint_without_prom_and_bad_settings_are_refused(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        assert ", metrics " not in server.ready_line
    for bad in (
        {"metricsExporterType": "OTLP_GRPC"},
        {"metricsExporterType": "PROM", "metricsPromExporterPort": "70000"},
        {"metricsLabel": "novalue"},
    ):
        with pytest.raises(ConfigError):
            BrokerConfig.from_mapping(bad)


def test_a_stopped_broker_closes_its_endpoint(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metricsExporterType=PROM\nmetricsPromExporterHost=127.0.0.1\nmetricsPromExporterPort=0\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        metrics = server.metrics_address()
        assert _scrape(metrics)
    with pytest.raises(urllib.error.URLError):
        _scrape(metrics)
