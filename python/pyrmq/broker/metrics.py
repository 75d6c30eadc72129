"""The broker's metrics for Prometheus (RocketMQ 5's ``metricsExporterType=PROM``).

Names, labels and buckets are RocketMQ's, so dashboards and alerts written for its brokers read
pyrmq's: every series carries ``cluster``, ``node_type="broker"`` and ``node_id`` (the broker
name), plus the ``metricsLabel`` pairs. Request paths add to counters as they serve; gauges
(connections, lag, in-flight, half messages, storage) are read at each scrape.

The endpoint is prometheus-client's HTTP server on ``metricsPromExporterHost`` (``brokerIP1``
when empty, as RocketMQ) and ``metricsPromExporterPort`` (5557). Its thread asks the broker's
event loop for the families, since only the loop touches the broker's state; the loop builds
them in slices, so that a large broker's scrape does not hold it for long.
"""

import asyncio
import bisect
import concurrent.futures
import dataclasses
import enum
import itertools
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

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
from pyrmq.namespace import is_system_topic
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.remoting.protocol import RequestCode, ResponseCode, version_desc

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from pyrmq.broker.controller import BrokerController

__all__ = [
    "EXPORTER_TYPES",
    "MESSAGE_SIZE_BUCKETS",
    "BrokerMetrics",
    "MetricsEndpoint",
    "message_type",
]

log = logging.getLogger(__name__)

EXPORTER_TYPES = ("DISABLE", "OTLP_GRPC", "PROM", "LOG")
"""RocketMQ's metricsExporterType values, by their ordinals (which broker.conf may give)."""

MESSAGE_SIZE_BUCKETS = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
"""RocketMQ's bounds of ``rocketmq_message_size``, in bytes."""
RPC_LATENCY_BUCKETS_MS = (1, 3, 5, 7, 10, 100, 1000, 2000, 3000)
"""RocketMQ's bounds of ``rocketmq_rpc_latency``, in milliseconds."""

_K = TypeVar("_K")
_V = TypeVar("_V")
# Collecting waits this long for the loop; a scrape of a broker too busy to answer fails.
COLLECT_TIMEOUT_S = 10.0
# A collection gives the loop back after this many queues or series.
_SLICE = 2000
# The consumer gauges, in the order _consumption computes them; the latencies carry
# RocketMQ's unit as their suffix, as its Prometheus exporter names them.
_CONSUMER_GAUGES = (
    ("rocketmq_consumer_lag_messages", "Consumer lag messages"),
    ("rocketmq_consumer_lag_latency_milliseconds", "Consumer lag time"),
    ("rocketmq_consumer_inflight_messages", "Consumer inflight messages"),
    ("rocketmq_consumer_queueing_latency_milliseconds", "Consumer queueing time"),
    ("rocketmq_consumer_ready_messages", "Consumer ready messages"),
)
_NEVER = 1 << 62
# RocketMQ's maxConsumeQueueScan: a filtered group's backlog is counted in this many units.
_ESTIMATE_UNITS = 20_000
# Two such scans take about as long as reading a hundred queues' offsets.
_SCANS_COST = 100
# The store's series, as RocketMQ labels them.
_STORAGE = {"storage_type": "local", "storage_medium": "disk"}


_DELAYING = ("__STARTDELIVERTIME", "DELAY", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS")


def message_type(properties: Mapping[str, str]) -> str:
    """The ``message_type`` label of a send, as RocketMQ tells it from the message's
    properties: a transaction's half, one with a sharding key (FIFO), a delayed or timer
    message, or else normal."""
    if properties.get("TRAN_MSG", "").lower() == "true":
        return "transaction"
    if "__SHARDINGKEY" in properties:
        return "fifo"
    if any(name in properties for name in _DELAYING):
        return "delay"
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


def _system_group(group: str) -> bool:
    """Series mark system topics (:func:`is_system_topic`) with is_system="true", as groups
    whose name starts with CID_RMQ_SYS_ (in any case)."""
    return group.lower().startswith("cid_rmq_sys_")


def _system(topic: str, group: str) -> str:
    return _flag(is_system_topic(topic) or _system_group(group))


def _retry_or_dead(topic: str) -> bool:
    return topic.startswith(("%RETRY%", "%DLQ%"))


def _version(ordinal: int) -> str:
    return version_desc(ordinal).lower()


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
    and the broker's state into metric families.

    As RocketMQ's, the traffic counters leave out retry and dead-letter topics, and each
    counter keeps at most ``metricsOtelCardinalityLimit`` series: traffic of further topics
    and groups is not counted (a warning says so once). A topic or group deleted takes its
    series with it.
    """

    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        config = broker.config
        self.labels = {
            **parse_labels(config.metrics_label),
            "cluster": config.broker_cluster_name,
            "node_type": "broker",
            "node_id": config.broker_name,
        }
        self.limit = config.metrics_otel_cardinality_limit
        self._received: dict[tuple[str, str], _Received] = {}
        self._delivered: dict[tuple[str, str], list[int]] = {}
        self._dead: dict[tuple[str, str], int] = {}
        self._ended: dict[tuple[str, bool], int] = {}
        # Per (request code, response code, held for long polling): bucket counts, then the
        # sum of the latencies in ms.
        self._rpcs: dict[tuple[int, int, bool], list[float]] = {}
        # RocketMQ's pull offsets: where each group's next pull of each queue starts.
        self._pulled: dict[tuple[str, str], dict[int, int]] = {}
        self._full: set[str] = set()
        # One collection at a time: concurrent scrapes share it.
        self._lock = threading.Lock()
        self._running: concurrent.futures.Future[list[Metric]] | None = None
        self._closed = False

    # -- what request paths report ----------------------------------------------------

    def _room(self, table: Mapping[Any, Any], key: object, name: str) -> bool:
        if key in table or len(table) < self.limit:
            return True
        if name not in self._full:
            self._full.add(name)
            log.warning(
                "%s has %d series, metricsOtelCardinalityLimit: new ones are not counted",
                name,
                self.limit,
            )
        return False

    def _entry(self, table: dict[_K, _V], key: _K, name: str, new: Callable[[], _V]) -> _V | None:
        """``table``'s entry for ``key``, made with ``new`` while the series of ``name``
        stay within the limit; None past it."""
        entry = table.get(key)
        if entry is None and self._room(table, key, name):
            entry = table[key] = new()
        return entry

    def received(self, topic: str, kind: str, messages: int, nbytes: int) -> None:
        """A send stored ``messages`` in ``topic`` (``kind``: :func:`message_type`)."""
        if _retry_or_dead(topic):
            return
        entry = self._entry(self._received, (topic, kind), "rocketmq_messages_in", _Received)
        if entry is None:
            return
        entry.messages += messages
        entry.nbytes += nbytes
        # As RocketMQ, a send counts once, at its messages' average size.
        size = nbytes // max(messages, 1)
        entry.buckets[bisect.bisect_left(MESSAGE_SIZE_BUCKETS, size)] += 1
        entry.size_sum += size

    def delivered(self, topic: str, group: str, messages: int, nbytes: int) -> None:
        """A pull or a receive handed ``group`` ``messages`` of ``topic``."""
        if _retry_or_dead(topic):
            return
        entry = self._entry(
            self._delivered, (topic, group), "rocketmq_messages_out", lambda: [0, 0]
        )
        if entry is not None:
            entry[0] += messages
            entry[1] += nbytes

    def rpc(self, request_code: int, response_code: int, elapsed_ns: int, held: bool) -> None:
        """A remoting request was answered ``elapsed_ns`` after it arrived."""
        entry = self._entry(
            self._rpcs,
            (request_code, response_code, held),
            "rocketmq_rpc_latency",
            lambda: [0.0] * (len(RPC_LATENCY_BUCKETS_MS) + 2),
        )
        if entry is None:
            return
        # As RocketMQ, whole milliseconds.
        ms = elapsed_ns // 1_000_000
        entry[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, ms)] += 1
        entry[-1] += ms

    def pulled(self, group: str, topic: str, queue_id: int, next_offset: int) -> None:
        """A pull of ``group`` was answered: its next pull of the queue starts at
        ``next_offset``."""
        if _retry_or_dead(topic):
            return
        queues = self._entry(
            self._pulled, (group, topic), "rocketmq_consumer_inflight_messages", dict
        )
        if queues is not None:
            queues[queue_id] = next_offset

    def dead_lettered(self, topic: str, group: str) -> None:
        """``group`` gave up on a message of ``topic``: it went to the group's DLQ."""
        key = (topic, group)
        if self._room(self._dead, key, "rocketmq_send_to_dlq_messages"):
            self._dead[key] = self._dead.get(key, 0) + 1

    def ended(self, topic: str, *, commit: bool) -> None:
        """A transaction message of ``topic`` was committed or rolled back."""
        key = (topic, commit)
        if self._room(self._ended, key, "rocketmq_commit_messages"):
            self._ended[key] = self._ended.get(key, 0) + 1

    def forget_topic(self, topic: str) -> None:
        """Drops a deleted topic's series."""
        for key in [k for k in self._received if k[0] == topic]:
            del self._received[key]
        for ended in [k for k in self._ended if k[0] == topic]:
            del self._ended[ended]
        for table in (self._delivered, self._dead):
            for pair in [k for k in table if k[0] == topic]:
                del table[pair]
        for pulled in [k for k in self._pulled if k[1] == topic]:
            del self._pulled[pulled]

    def forget_group(self, group: str) -> None:
        """Drops a deleted group's series."""
        for table in (self._delivered, self._dead):
            for key in [k for k in table if k[1] == group]:
                del table[key]
        for pulled in [k for k in self._pulled if k[0] == group]:
            del self._pulled[pulled]

    # -- collecting -------------------------------------------------------------------

    def close(self) -> None:
        """Collections from now on, and any in progress, end with what they have."""
        self._closed = True

    def collect(self) -> Iterator[Metric]:
        """The families, built on the broker's loop (this runs in the HTTP server's thread).
        Scrapes that come while one is collected wait for its families."""
        if self._closed:
            return iter(())
        with self._lock:
            running = self._running
            if running is None or running.done():
                running = self._running = asyncio.run_coroutine_threadsafe(
                    self.families(), self.broker.loop
                )
        try:
            return iter(running.result(COLLECT_TIMEOUT_S))
        except concurrent.futures.TimeoutError:
            # The scrape is given up: so is the collection, at its next slice.
            running.cancel()
            raise

    async def families(self) -> list[Metric]:
        """Every family, read from the broker now; runs on its loop, giving it back between
        slices of a long collection."""
        out: list[Metric] = []
        for part in (
            self._traffic,
            self._transactions,
            self._counts,
            self._connections,
            self._rpc_latency,
        ):
            out.extend(part())
        out.extend(await self._consumption())
        if not self._closed:
            out.extend(self._storage())
        return out

    def _family(self, kind: Any, name: str, doc: str, *labels: str) -> Any:
        # Without units: prometheus-client would append them to RocketMQ's names.
        return kind(name, doc, labels=[*self.labels, *labels])

    def _single(self, name: str, doc: str, value: float, **extra: str) -> Metric:
        gauge = self._family(GaugeMetricFamily, name, doc, *extra)
        gauge.add_metric([*self.labels.values(), *extra.values()], value)
        return gauge  # type: ignore[no-any-return]

    def _traffic(self) -> Iterable[Metric]:
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
            labels = [*common, topic, kind, _flag(is_system_topic(topic))]
            messages_in.add_metric(labels, entry.messages)
            throughput_in.add_metric(labels, entry.nbytes)
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, entry.buckets, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            sizes.add_metric(labels, buckets, entry.size_sum)
        out_labels = ("topic", "consumer_group", "is_system")
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
            labels = [*common, topic, group, _system(topic, group)]
            messages_out.add_metric(labels, count)
            throughput_out.add_metric(labels, nbytes)
        dead = self._family(
            CounterMetricFamily,
            "rocketmq_send_to_dlq_messages",
            "Consumer send to DLQ messages",
            *out_labels,
        )
        for (topic, group), count in self._dead.items():
            dead.add_metric([*common, topic, group, _system(topic, group)], count)
        return (messages_in, throughput_in, sizes, messages_out, throughput_out, dead)

    def _rpc_latency(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(
            "rocketmq_rpc_latency_milliseconds",
            "Rpc latency",
            labels=[
                *self.labels,
                "protocol_type",
                "request_code",
                "response_code",
                "is_long_polling",
                "result",
            ],
        )
        common = list(self.labels.values())
        bounds = [*(str(float(b)) for b in RPC_LATENCY_BUCKETS_MS), "+Inf"]
        for (request, response, held), entry in self._rpcs.items():
            counts = list(itertools.accumulate(entry[:-1]))
            family.add_metric(
                [*common, "remoting", _code_name(RequestCode, request),
                 _code_name(ResponseCode, response), _flag(held), "success"],
                list(zip(bounds, counts, strict=True)),
                entry[-1],
            )  # fmt: skip
        yield family

    def _transactions(self) -> Iterable[Metric]:
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
        return (commits, rollbacks, halves)

    def _grpc_clients(self) -> list[Any]:
        return list(self.broker.pops.clients.values())

    def _counts(self) -> Iterable[Metric]:
        broker = self.broker
        # As RocketMQ, whose subscription groups include those made when consumers came and
        # stay when they leave: here the groups with settings, online or with offsets.
        groups = {g.group_name for g in broker.groups.all()} | set(broker.clients.consumers)
        groups |= set(broker.offsets.groups())
        groups |= {c.group for c in self._grpc_clients() if c.group}
        return (
            self._single("rocketmq_topic_number", "Topic number", len(broker.topics.all())),
            self._single("rocketmq_consumer_group_number", "Consumer group number", len(groups)),
        )

    def _connections(self) -> Iterable[Metric]:
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
        by_kind: dict[tuple[str, str, str], int] = {}
        for producers_of_group in clients.producers.values():
            for producer in producers_of_group.values():
                key = (producer.language.lower(), _version(producer.version), "remoting")
                by_kind[key] = by_kind.get(key, 0) + 1
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
        by_group: dict[tuple[str, str, str, str, str], int] = {}
        for group, consumers_of_group in clients.consumers.items():
            for consumer in consumers_of_group.values():
                mode = "push" if consumer.consume_type == "CONSUME_PASSIVELY" else "pull"
                language, version = consumer.language.lower(), _version(consumer.version)
                kind = (group, language, version, mode, "remoting")
                by_group[kind] = by_group.get(kind, 0) + 1
        for client in self._grpc_clients():
            settings = client.settings
            if settings is None:
                continue
            agent = settings.user_agent
            language = _grpc_language(agent.language)
            version = agent.version.lower() or "unknown"
            if settings.WhichOneof("pub_sub") == "publishing":
                key = (language, version, "grpc")
                by_kind[key] = by_kind.get(key, 0) + 1
            elif client.group:
                kind = (client.group, language, version, "pop", "grpc")
                by_group[kind] = by_group.get(kind, 0) + 1
        for (language, version, protocol), count in by_kind.items():
            producers.add_metric([*common, language, version, protocol], count)
        for (group, language, version, mode, protocol), count in by_group.items():
            system = _flag(_system_group(group))
            consumers.add_metric([*common, group, language, version, mode, protocol, system], count)
        return (producers, consumers)

    def _subscriptions(self) -> dict[tuple[str, str], tuple[bool, str | None]]:
        """(group, topic) of every online consumer's subscription, but retry topics, as
        RocketMQ's lag calculator takes them: whether the group pops (gRPC), and its tag
        expression when it filters by tag."""
        topics = self.broker.topics
        found: dict[tuple[str, str], tuple[bool, str | None]] = {}
        for group, members in self.broker.clients.consumers.items():
            for member in members.values():
                for topic, subscription in member.subscriptions.items():
                    if not topic.startswith("%RETRY%") and topics.get(topic) is not None:
                        tags = subscription.expression if subscription.tags_codes else None
                        found.setdefault((group, topic), (False, tags))
        for client in self._grpc_clients():
            settings = client.settings
            if settings is None or settings.WhichOneof("pub_sub") != "subscription":
                continue
            for entry in settings.subscription.subscriptions:
                if topics.get(entry.topic.name) is not None:
                    expression = entry.expression
                    tags = None if expression.type == pb.SQL else expression.expression
                    found.setdefault((client.group, entry.topic.name), (True, tags))
        return found

    async def _consumption(self) -> list[Metric]:
        """Per online group and subscribed topic, as RocketMQ's lag calculator takes them:
        messages past the committed offsets (lag) and how long the oldest has waited; those
        pulled or received and not yet committed or acked (in flight) and how long the oldest
        not yet pulled has waited (queueing); those not yet pulled (ready)."""
        common = list(self.labels.values())
        broker = self.broker
        store, offsets = broker.store, broker.offsets
        labels = ("topic", "consumer_group", "is_retry", "is_system")
        families = [self._family(GaugeMetricFamily, n, d, *labels) for n, d in _CONSUMER_GAUGES]
        pops = broker.pops
        now_ms = time.time_ns() // 1_000_000
        done = 0
        for (group, topic), (popping, tags) in self._subscriptions().items():
            config = broker.topics.get(topic)
            if config is None:
                continue
            pulled = self._pulled.get((group, topic), {})
            lag = in_flight = ready = 0
            unconsumed = unpulled = _NEVER
            for queue_id in broker.queue_ids(config.read_queue_nums):
                done += 1
                top = store.max_offset(topic, queue_id)
                if popping:
                    committed, cursor, holding = pops.pop_position(group, topic, queue_id)
                else:
                    stored = offsets.query(group, topic, queue_id)
                    at = pulled.get(queue_id)
                    if stored is None:
                        if at is None:
                            continue
                        # As RocketMQ's calculator: with nothing committed (a broadcasting
                        # group, or none yet), the pull offset stands for the commit.
                        stored = at
                    committed, cursor = stored, stored if at is None else max(at, stored)
                    holding = cursor - committed
                if tags is None:
                    waiting = max(top - cursor, 0)
                else:
                    # As RocketMQ's estimateAccumulation: those its tags match.
                    holding = self._matching(topic, queue_id, committed, cursor, tags)
                    waiting = self._matching(topic, queue_id, cursor, top, tags)
                    done += _SCANS_COST
                lag += waiting + holding
                in_flight += holding
                ready += waiting
                if committed < top:
                    unconsumed = min(
                        unconsumed, store.store_time(topic, queue_id, committed) or _NEVER
                    )
                if cursor < top:
                    unpulled = min(unpulled, store.store_time(topic, queue_id, cursor) or _NEVER)
            row = [*common, topic, group, "false", _system(topic, group)]
            values = (
                lag,
                _waited(now_ms, unconsumed),
                in_flight,
                _waited(now_ms, unpulled),
                ready,
            )
            for family, value in zip(families, values, strict=True):
                family.add_metric(row, value)
            if done >= _SLICE:
                done = 0
                await asyncio.sleep(0)
                if self._closed:
                    break
        return families

    def _matching(self, topic: str, queue_id: int, start: int, end: int, tags: str) -> int:
        """Messages in ``[start, end)`` whose tag ``tags`` matches: counted in the first
        ``_ESTIMATE_UNITS`` units, and estimated from them beyond."""
        span = end - start
        if span <= 0:
            return 0
        scanned = min(span, _ESTIMATE_UNITS)
        matched = self.broker.store.scan_consume_queue(topic, queue_id, start, scanned, tags)
        return matched if scanned == span else matched * span // scanned

    def _storage(self) -> Iterable[Metric]:
        store = self.broker.store
        try:
            used = shutil.disk_usage(self.broker.config.store.store_path_root_dir).used
        except OSError as e:
            log.warning("the store's disk usage cannot be read: %s", e)
        else:
            yield self._single(
                "rocketmq_storage_size_bytes", "Broker storage size", used, **_STORAGE
            )
        behind = max(store.max_phy_offset - store.flushed_phy_offset, 0)
        yield self._single(
            "rocketmq_storage_flush_behind_bytes", "Broker flush behind bytes", behind, **_STORAGE
        )
        oldest = store.look_message_by_offset(store.min_phy_offset)
        if oldest is not None:
            kept_ms = max(time.time_ns() // 1_000_000 - oldest.store_timestamp_ms, 0)
            yield self._single(
                "rocketmq_storage_message_reserve_time_milliseconds",
                "Broker message reserve time",
                kept_ms,
                **_STORAGE,
            )


# The languages of RocketMQ 5's protocol (apache.rocketmq.v2.Language), by number.
_GRPC_LANGUAGES = (
    "language_unspecified", "java", "cpp", "dot_net", "golang", "rust", "python", "php",
    "node_js", "ruby", "objective_c", "dart", "kotlin",
)  # fmt: skip


def _code_name(codes: type[enum.IntEnum], code: int) -> str:
    """A request or response code as RocketMQ's label spells it: its name in lower case."""
    try:
        return codes(code).name.lower()
    except ValueError:
        return str(code)


def _waited(now_ms: int, since_ms: int) -> int:
    """Milliseconds since a store time; 0 for none (RocketMQ's latency of a caught-up group)."""
    return 0 if since_ms == _NEVER else max(now_ms - since_ms, 0)


def _grpc_language(code: int) -> str:
    """The language a 5.x client's user agent names, as RocketMQ's label spells it."""
    return _GRPC_LANGUAGES[code] if 0 <= code < len(_GRPC_LANGUAGES) else _GRPC_LANGUAGES[0]


class MetricsEndpoint:
    """The HTTP server Prometheus scrapes: the broker's metrics, and the process's."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        # Collectors without describe() still answer a filtered scrape (``?name[]=``), matched
        # by sample name; describing would mean a collection at registration.
        self.registry = CollectorRegistry(
            auto_describe=False, support_collectors_without_names=True
        )
        for collector in (metrics, PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: WSGIServer | None = None

    def start(self) -> int:
        """Listens and serves on a thread of its own; returns the port (the one given for
        port 0)."""
        try:
            server, _thread = start_http_server(self.port, self.host, self.registry)
        except OSError as e:
            raise OSError(e.errno, f"metrics endpoint {self.host}:{self.port}: {e.strerror}") from e
        self._server = server
        self.port = int(server.server_address[1])
        log.info("metrics for Prometheus on %s:%d/metrics", self.host, self.port)
        return self.port

    def close(self) -> None:
        self.metrics.close()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
