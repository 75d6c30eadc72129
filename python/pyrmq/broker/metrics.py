"""The broker's metrics for Prometheus (RocketMQ 5's ``metricsExporterType=PROM``).

Names, labels and buckets are RocketMQ's, so dashboards and alerts written for its brokers read
pyrmq's: every series carries ``cluster``, ``node_type="broker"`` and ``node_id`` (the broker
name), plus the ``metricsLabel`` pairs. Request paths add to counters as they serve; gauges
(connections, lag, in-flight, half messages, storage) are read at each scrape.

The endpoint is prometheus-client's HTTP server on ``metricsPromExporterHost`` (every interface
when empty, as RocketMQ) and ``metricsPromExporterPort`` (5557). Its thread asks the broker's
event loop for the families, since only the loop touches the broker's state.
"""

import asyncio
import dataclasses
import logging
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    start_http_server,
)
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from pyrmq.errors import ConfigError

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from pyrmq.broker.controller import BrokerController

__all__ = ["MESSAGE_SIZE_BUCKETS", "BrokerMetrics", "MetricsEndpoint", "message_type"]

log = logging.getLogger(__name__)

MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
"""RocketMQ's bounds of ``rocketmq_message_size``, in bytes."""

# RocketMQ's system topics and groups, which series mark with is_system="true".
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
_SYSTEM_GROUPS = frozenset(
    {
        "TOOLS_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    }
)
# Collecting waits this long for the loop; a scrape of a broker too busy to answer fails.
COLLECT_TIMEOUT_S = 10.0


def message_type(properties: str, sys_flag: int = 0) -> str:
    """The ``message_type`` label of a send, as RocketMQ tells it from the message: a
    transaction's half, a delayed or timer message, one with a sharding key (FIFO), else
    normal."""
    if sys_flag & 0x4 or "TRAN_MSG\x01true" in properties:
        return "transaction"
    if "DELAY\x01" in properties or "TIMER_" in properties:
        return "delay"
    if "__SHARDINGKEY\x01" in properties:
        return "fifo"
    return "normal"


def parse_labels(text: str) -> dict[str, str]:
    """``metricsLabel``: ``key:value`` pairs separated by commas.

    >>> parse_labels("env:prod, zone:a")
    {'env': 'prod', 'zone': 'a'}
    """
    labels = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = pair.partition(":")
        if not sep or not key.strip():
            raise ConfigError(f"metricsLabel {pair!r} is not key:value")
        labels[key.strip()] = value.strip()
    return labels


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _system_topic(topic: str) -> str:
    return _flag(topic in _SYSTEM_TOPICS or topic.startswith("rmq_sys_"))


def _system_group(group: str) -> str:
    return _flag(group in _SYSTEM_GROUPS or group.startswith("CID_RMQ_SYS_"))


def _retry(topic: str) -> str:
    return _flag(topic.startswith("%RETRY%"))


@dataclasses.dataclass(slots=True)
class _Received:
    messages: int = 0
    nbytes: int = 0
    # Sends per size bucket (the last: above every bound), and the sum of their sizes.
    buckets: list[int] = dataclasses.field(
        default_factory=lambda: [0] * (len(MESSAGE_SIZE_BUCKETS) + 1)
    )
    size_sum: int = 0


class BrokerMetrics(Collector):
    """Counters the request paths feed on the event loop, and the collector that reads them
    and the broker's state into metric families."""

    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        config = broker.config
        self.labels = {
            **parse_labels(config.metrics_label),
            "cluster": config.broker_cluster_name,
            "node_type": "broker",
            "node_id": config.broker_name,
        }
        self._received: dict[tuple[str, str], _Received] = {}
        self._delivered: dict[tuple[str, str], list[int]] = {}
        self._dead: dict[tuple[str, str], int] = {}
        self._ended: dict[tuple[str, bool], int] = {}

    # -- what request paths report ----------------------------------------------------

    def received(self, topic: str, kind: str, messages: int, nbytes: int) -> None:
        """A send stored ``messages`` in ``topic`` (``kind``: :func:`message_type`)."""
        entry = self._received.get((topic, kind))
        if entry is None:
            entry = self._received[(topic, kind)] = _Received()
        entry.messages += messages
        entry.nbytes += nbytes
        # As RocketMQ, a send counts once, at its messages' average size.
        size = nbytes // max(messages, 1)
        bucket = 0
        while bucket < len(MESSAGE_SIZE_BUCKETS) and size > MESSAGE_SIZE_BUCKETS[bucket]:
            bucket += 1
        entry.buckets[bucket] += 1
        entry.size_sum += size

    def delivered(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        """A pull or a receive handed ``group`` ``messages`` of ``topic``."""
        entry = self._delivered.get((topic, group))
        if entry is None:
            entry = self._delivered[(topic, group)] = [0, 0]
        entry[0] += messages
        entry[1] += nbytes

    def dead_lettered(self, topic: str, group: str) -> None:
        """``group`` gave up on a message of ``topic``: it went to the group's DLQ."""
        self._dead[(topic, group)] = self._dead.get((topic, group), 0) + 1

    def ended(self, topic: str, *, commit: bool) -> None:
        """A transaction message of ``topic`` was committed or rolled back."""
        self._ended[(topic, commit)] = self._ended.get((topic, commit), 0) + 1

    # -- collecting -------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        """The families, built on the broker's loop (this runs in the HTTP server's thread)."""

        async def families() -> list[Metric]:
            return list(self.families())

        future = asyncio.run_coroutine_threadsafe(families(), self.broker.loop)
        yield from future.result(COLLECT_TIMEOUT_S)

    def _family(self, kind: Any, name: str, doc: str, *labels: str) -> Any:
        # Without units: prometheus-client would append them to RocketMQ's names.
        return kind(name, doc, labels=[*self.labels, *labels])

    def _single(self, name: str, doc: str, value: float) -> Metric:
        gauge = self._family(GaugeMetricFamily, name, doc)
        gauge.add_metric(list(self.labels.values()), value)
        return gauge  # type: ignore[no-any-return]

    def families(self) -> Iterator[Metric]:
        """Every family, read from the broker now; call on its loop."""
        yield from self._traffic()
        yield from self._transactions()
        broker = self.broker
        yield self._single("rocketmq_topic_number", "Topic number", len(broker.topics.all()))
        yield self._single(
            "rocketmq_consumer_group_number", "Consumer group number", len(broker.groups.all())
        )
        yield from self._connections()
        yield from self._consumption()
        yield from self._storage()

    def _traffic(self) -> Iterator[Metric]:
        common = list(self.labels.values())
        in_labels = ("topic", "message_type", "is_system")
        messages_in = self._family(
            CounterMetricFamily,
            "rocketmq_messages_in",
            "Total number of incoming messages",
            *in_labels,
        )
        throughput_in = self._family(
            CounterMetricFamily,
            "rocketmq_throughput_in",
            "Total traffic of incoming messages",
            *in_labels,
        )
        sizes = self._family(
            HistogramMetricFamily, "rocketmq_message_size", "Incoming messages size", *in_labels
        )
        bounds = [str(float(b)) for b in MESSAGE_SIZE_BUCKETS] + ["+Inf"]
        for (topic, kind), entry in self._received.items():
            labels = [*common, topic, kind, _system_topic(topic)]
            messages_in.add_metric(labels, entry.messages)
            throughput_in.add_metric(labels, entry.nbytes)
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, entry.buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            sizes.add_metric(labels, buckets, entry.size_sum)
        out_labels = ("topic", "consumer_group", "is_retry", "is_system")
        messages_out = self._family(
            CounterMetricFamily,
            "rocketmq_messages_out",
            "Total number of outgoing messages",
            *out_labels,
        )
        throughput_out = self._family(
            CounterMetricFamily,
            "rocketmq_throughput_out",
            "Total traffic of outgoing messages",
            *out_labels,
        )
        for (topic, group), (count, nbytes) in self._delivered.items():
            labels = [*common, topic, group, _retry(topic), _system_group(group)]
            messages_out.add_metric(labels, count)
            throughput_out.add_metric(labels, nbytes)
        dead = self._family(
            CounterMetricFamily,
            "rocketmq_send_to_dlq_messages",
            "Consumer send to DLQ messages",
            "topic",
            "consumer_group",
            "is_system",
        )
        for (topic, group), count in self._dead.items():
            dead.add_metric([*common, topic, group, _system_group(group)], count)
        yield from (messages_in, throughput_in, sizes, messages_out, throughput_out, dead)

    def _transactions(self) -> Iterator[Metric]:
        common = list(self.labels.values())
        commits = self._family(
            CounterMetricFamily,
            "rocketmq_commit_messages",
            "Total number of commit messages",
            "topic",
        )
        rollbacks = self._family(
            CounterMetricFamily,
            "rocketmq_rollback_messages",
            "Total number of rollback messages",
            "topic",
        )
        for (topic, commit), count in self._ended.items():
            (commits if commit else rollbacks).add_metric([*common, topic], count)
        halves = self._family(GaugeMetricFamily, "rocketmq_half_messages", "Half messages", "topic")
        open_halves: dict[str, int] = {}
        for half in self.broker.transactions.open.values():
            open_halves[half.topic] = open_halves.get(half.topic, 0) + 1
        for topic, count in open_halves.items():
            halves.add_metric([*common, topic], count)
        yield from (commits, rollbacks, halves)

    def _connections(self) -> Iterator[Metric]:
        common = list(self.labels.values())
        clients = self.broker.clients
        producers = self._family(
            GaugeMetricFamily,
            "rocketmq_producer_connections",
            "Producer connections",
            "language",
            "version",
            "protocol_type",
        )
        by_client: dict[tuple[str, str], int] = {}
        for producers_of_group in clients.producers.values():
            for producer in producers_of_group.values():
                key = (producer.language.lower(), f"v{producer.version}")
                by_client[key] = by_client.get(key, 0) + 1
        for (language, version), count in by_client.items():
            producers.add_metric([*common, language, version, "remoting"], count)
        consumers = self._family(
            GaugeMetricFamily,
            "rocketmq_consumer_connections",
            "Consumer connections",
            "consumer_group",
            "language",
            "version",
            "consume_mode",
            "protocol_type",
            "is_system",
        )
        by_group: dict[tuple[str, str, str, str], int] = {}
        for group, consumers_of_group in clients.consumers.items():
            for consumer in consumers_of_group.values():
                mode = "push" if consumer.consume_type == "CONSUME_PASSIVELY" else "pull"
                kind = (group, consumer.language.lower(), f"v{consumer.version}", mode)
                by_group[kind] = by_group.get(kind, 0) + 1
        for (group, language, version, mode), count in by_group.items():
            labels = [*common, group, language, version, mode, "remoting", _system_group(group)]
            consumers.add_metric(labels, count)
        yield from (producers, consumers)

    def _consumption(self) -> Iterator[Metric]:
        """Per group and topic: messages past the committed offsets (the lag), and for gRPC
        groups those received and not yet acked (in flight)."""
        common = list(self.labels.values())
        broker = self.broker
        store = broker.store
        labels = ("topic", "consumer_group", "is_retry", "is_system")
        lag = self._family(
            GaugeMetricFamily, "rocketmq_consumer_lag_messages", "Consumer lag messages", *labels
        )
        for (group, topic), queues in broker.offsets.groups().items():
            behind = sum(
                max(store.max_offset(topic, queue_id) - committed, 0)
                for queue_id, committed in queues.items()
            )
            lag.add_metric([*common, topic, group, _retry(topic), _system_group(group)], behind)
        in_flight = self._family(
            GaugeMetricFamily,
            "rocketmq_consumer_inflight_messages",
            "Consumer inflight messages",
            *labels,
        )
        service = None if broker.grpc is None else broker.grpc.service
        if service is not None:
            for (group, topic), count in service.in_flight().items():
                row = [*common, topic, group, _retry(topic), _system_group(group)]
                in_flight.add_metric(row, count)
        yield from (lag, in_flight)

    def _storage(self) -> Iterator[Metric]:
        store = self.broker.store
        try:
            used = shutil.disk_usage(self.broker.config.store.store_path_root_dir).used
        except OSError as e:
            log.warning("the store's disk usage cannot be read: %s", e)
        else:
            yield self._single("rocketmq_storage_size", "Broker storage size", used)
        behind = max(store.max_phy_offset - store.flushed_phy_offset, 0)
        yield self._single(
            "rocketmq_storage_flush_behind_bytes", "Broker flush behind bytes", behind
        )
        oldest = store.look_message_by_offset(store.min_phy_offset)
        if oldest is not None:
            kept_ms = max(time.time_ns() // 1_000_000 - oldest.store_timestamp_ms, 0)
            yield self._single(
                "rocketmq_storage_message_reserve_time",
                "Broker message reserve time",
                kept_ms,
            )


class MetricsEndpoint:
    """The HTTP server Prometheus scrapes: the broker's metrics, and the process's."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        for collector in (metrics, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.host = host or "0.0.0.0"
        self.port = port
        self._server: WSGIServer | None = None

    def start(self) -> int:
        """Listens and serves on a thread of its own; returns the port (the one given for
        port 0)."""
        server, _thread = start_http_server(self.port, self.host, self.registry)
        self._server = server
        self.port = int(server.server_address[1])
        log.info("metrics for Prometheus on %s:%d/metrics", self.host, self.port)
        return self.port

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
