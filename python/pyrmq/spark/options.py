"""The Spark source's options, named after Spark's Kafka source where one exists.

Spark hands every option over as a string, with its key in any case; each is read and checked
here, once, on the driver, so that a typo fails the query at once with a clear message rather
than in an executor.
"""

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any, Literal

from pyrmq import _core
from pyrmq.acl.signing import Credentials
from pyrmq.broker.state.topics import AUTO_CREATE_TOPIC, DLQ_PREFIX, RETRY_PREFIX
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig, check_group
from pyrmq.client.message import MessageQueue
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.tls import ClientTls
from pyrmq.spark import offsets

__all__ = ["ReadOptions", "WriteOptions"]

Mode = Literal["batch", "stream"]


# Client settings passed through (Kafka's source passes kafka.* the same way).
CLIENT_KEYS = (
    "rocketmq.accessKey",
    "rocketmq.secretKey",
    "rocketmq.tls",
    "rocketmq.tls.caFile",
    "rocketmq.tls.certFile",
    "rocketmq.tls.keyFile",
    "rocketmq.tls.verify",
)
READ_KEYS = (
    "nameServer",
    "subscribe",
    "topic",
    "subscribePattern",
    "assign",
    "subExpression",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "pullBatchSize",
    "pullTimeoutMs",
    "includeProperties",
    "minPartitions",
    "maxRecordsPerPartition",
    "consumerGroup",
    "consumerGroupPrefix",
    "pushDownPredicate",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    *CLIENT_KEYS,
)
WRITE_KEYS = (
    "nameServer",
    "topic",
    "producerGroup",
    "includeProperties",
    "deliveryGuarantee",
    "commitTopic",
    "checkImmunitySeconds",
    "queueSelector",
    *CLIENT_KEYS,
)
SELECTORS = ("round_robin", "hash")
COMMIT_TOPIC = "PYRMQ_SPARK_SINK_COMMITS"
STRATEGIES = ("error", "latest")
GROUP_PREFIX = "spark-pyrmq-source"
# RocketMQ's rule for group names (as for topics, up to 255 characters).
# Comparisons and parentheses: a SQL92 filter taken for tags would match nothing.
_SQL_LIKE = re.compile(r"[=<>()]")
MAX_TRIGGER_DELAY = "15m"
# RocketMQ's system topics that users may still write, and the sink's own records.
_NOT_USERS = frozenset({AUTO_CREATE_TOPIC, "RMQ_SYS_TRACE_TOPIC", COMMIT_TOPIC})
_NOT_USERS_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_")
# Spark's time strings (JavaUtils.timeStringAsMs): a bare number is milliseconds.
_DURATION = re.compile(r"(\d+)\s*(us|ms|s|m|min|h|d)?")
_UNIT_MS = {"us": 0.001, "ms": 1, None: 1, "s": 1e3, "m": 6e4, "min": 6e4, "h": 3.6e6, "d": 8.64e7}
DELIVERY = ("at_least_once", "exactly_once")
CHECK_IMMUNITY_S = 3600
MIN_CHECK_IMMUNITY_S = 10
# Options Spark itself may pass to a source.
_SPARK_KEYS = frozenset({"path", "checkpointlocation", "queryname"})


def _lower(options: Mapping[str, str], known: tuple[str, ...]) -> dict[str, str]:
    """The options by lower-cased key; a key none of ``known`` names fails: a misspelt
    option would otherwise leave its default in place without a word."""
    out = {k.lower(): v for k, v in options.items()}
    allowed = {k.lower() for k in known} | _SPARK_KEYS
    unknown = sorted(k for k in out if k not in allowed)
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return out


def _int(options: dict[str, str], key: str, default: int | None, minimum: int) -> int | None:
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {key} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {key} must be at least {minimum}, not {value}")
    if value > offsets.MAX_VALUE:
        raise ConfigError(f"option {key} must be at most {offsets.MAX_VALUE}, not {value}")
    return value


def _bool(options: dict[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


def _credentials(options: dict[str, str]) -> Credentials | None:
    key, secret = options.get("rocketmq.accesskey"), options.get("rocketmq.secretkey")
    if (key is None) != (secret is None):
        raise ConfigError("options rocketmq.accessKey and rocketmq.secretKey go together")
    if not key or secret is None:
        return None
    return Credentials(key, secret)


def _tls(options: dict[str, str]) -> ClientTls | None:
    files = {
        key: options.get(f"rocketmq.tls.{key.lower()}") for key in ("caFile", "certFile", "keyFile")
    }
    verify = _bool(options, "rocketmq.tls.verify", True)
    if not _bool(options, "rocketmq.tls", False):
        given = [f"rocketmq.tls.{key}" for key, value in files.items() if value is not None]
        if given or "rocketmq.tls.verify" in options:
            raise ConfigError("options rocketmq.tls.* need rocketmq.tls=true")
        return None
    if files["keyFile"] is not None and files["certFile"] is None:
        raise ConfigError("option rocketmq.tls.keyFile needs rocketmq.tls.certFile")
    tls = ClientTls(files["caFile"], files["certFile"], files["keyFile"], verify)
    tls.context()  # a file that cannot be loaded fails here, on the driver
    return tls


def _name_server(options: dict[str, str]) -> str:
    value = options.get("nameserver")
    if not value:
        raise ConfigError("option nameServer (name server host:port, ';'-separated) is required")
    try:
        split_addresses(value)
    except ValueError as e:
        raise ConfigError(f"option nameServer: {e}") from None
    return value


def _duration_s(options: dict[str, str], key: str, default: str) -> float:
    raw = options.get(key.lower(), default).strip().lower()
    found = _DURATION.fullmatch(raw)
    if found is None:
        raise ConfigError(f"option {key} must be a duration such as 30s or 15m, not {raw!r}")
    return int(found[1]) * _UNIT_MS[found[2]] / 1000


def _json(options: dict[str, str], key: str) -> Any:
    raw = options.get(key.lower())
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"option {key} is not valid JSON: {e}") from None


def _topic(key: str, topic: str) -> str:
    try:
        _core.validate_topic(topic)
    except PyrmqError as e:
        raise ConfigError(f"option {key}: {e}") from None
    return topic


def _assigned(value: Any) -> frozenset[MessageQueue]:
    """``assign``'s ``{"topic": {"broker": [queue ids]}}``."""
    bad = ConfigError(
        f'option assign must be JSON like {{"topic": {{"broker": [0, 1]}}}}: {value!r}'
    )
    if not isinstance(value, dict) or not value:
        raise bad
    out = set()
    for topic, brokers in value.items():
        if not isinstance(brokers, dict) or not brokers:
            raise bad
        for broker, ids in brokers.items():
            if not isinstance(ids, list) or not ids:
                raise bad
            for i in ids:
                if type(i) is not int or i < 0:
                    raise ConfigError(f"option assign: bad queue id {i!r} of {topic} on {broker}")
                out.add(MessageQueue(_topic("assign", topic), broker, i))
    return frozenset(out)


def user_topic(topic: str) -> bool:
    """Whether a listed topic holds users' messages: not one the broker or a tool keeps for
    itself, nor a group's retry or dead-letter topic (as Kafka's patterns leave internal topics
    out)."""
    if topic.startswith(_NOT_USERS_PREFIXES) or topic in _NOT_USERS:
        return False
    try:
        _core.validate_topic(topic)
    except PyrmqError:
        return False
    return True


def _position(
    options: dict[str, str], key: str, default: str, allowed: tuple[str, ...], mode: Mode
) -> Any:
    """``earliest``/``latest`` (those of ``allowed``), or offsets JSON with the -2/-1 marks of
    those."""
    raw = options.get(key.lower(), default).strip()
    if raw.lower() in allowed:
        return raw.lower()
    if raw.lower() in ("earliest", "latest"):
        # As Spark's Kafka source: a batch neither starts at the end nor ends at the start.
        raise ConfigError(f"option {key} can't be {raw.lower()} for a {mode} read")
    if not raw.startswith("{"):
        raise ConfigError(f"option {key} must be {' or '.join(allowed)} or offsets JSON: {raw!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"option {key} is not valid JSON: {e}") from None
    marks = {"earliest": offsets.EARLIEST, "latest": offsets.LATEST}
    return offsets.from_json(value, allow=frozenset(marks[a] for a in allowed))


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read names: where, which topics, from and to where, how."""

    name_server: str
    topics: tuple[str, ...]
    subscription: str
    starting: Any
    """``"earliest"``, ``"latest"`` or offsets by queue (-2 earliest, -1 latest)."""
    starting_timestamp_ms: int | None
    """One start time for every queue: wins over ``starting`` and ``starting_by_timestamp``."""
    ending: Any
    """Batch reads: ``"latest"`` or offsets by queue (-1 latest)."""
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    pull_batch_size: int
    pull_timeout_s: float
    include_properties: bool
    min_partitions: int | None = None
    """Cut queue ranges so that a read has at least this many Spark partitions."""
    max_records_per_partition: int | None = None
    """Cut queue ranges longer than this many offsets."""
    topic_pattern: str | None = None
    """Read every user topic whose whole name matches (``re.fullmatch``); a stream also reads
    topics that appear later. ``topics`` is then empty."""
    assigned: frozenset[MessageQueue] | None = None
    """Read only these queues (``topics`` are theirs)."""
    starting_by_timestamp: Mapping[MessageQueue, int] | None = None
    """Start times (epoch ms) of named queues; the others start as ``starting`` says."""
    timestamp_strategy: str = "error"
    """What a start time after a queue's last message does: fail the read (``error``) or start
    at the queue's end (``latest``)."""
    ending_timestamp_ms: int | None = None
    """Batch reads: one end time (exclusive) for every queue; wins over the other endings."""
    ending_by_timestamp: Mapping[MessageQueue, int] | None = None
    """Batch reads: end times of named queues; the others end as ``ending`` says."""
    min_offsets_per_trigger: int | None = None
    """Streams: wait for this many new offsets before a micro-batch, at most
    ``max_trigger_delay_s`` since the last one."""
    max_trigger_delay_s: float = 900.0
    consumer_group: str | None = None
    """Streams: the group whose offsets show the query's progress (monitoring only)."""
    consumer_group_prefix: str = GROUP_PREFIX
    """Streams without ``consumer_group``: the start of the group made up for each run."""
    credentials: Credentials | None = None
    """The ACL account requests are signed with (brokers with ``aclEnable``)."""
    tls: ClientTls | None = None
    """Connections are TLS (brokers with ``tls.server.mode``)."""
    push_down_predicate: bool = False
    """Batch reads: a query's filters narrow what is pulled (see :mod:`pyrmq.spark.pushdown`);
    Spark then needs ``spark.sql.python.filterPushdown.enabled``."""
    fetch_offset_retries: int = 3
    """Offset look-ups on the driver tried again after a failure, as Kafka's
    ``fetchOffset.numRetries``."""
    fetch_offset_retry_interval_s: float = 0.01

    def selects(self, topic: str) -> bool:
        """Whether the read takes messages of ``topic``."""
        if self.topic_pattern is not None:
            return user_topic(topic) and re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    @classmethod
    def parse(cls, raw: Mapping[str, str], mode: Mode) -> "ReadOptions":
        options = _lower(raw, READ_KEYS)
        topic_list = options.get("subscribe") or options.get("topic") or ""
        topics = tuple(dict.fromkeys(t.strip() for t in topic_list.split(",") if t.strip()))
        pattern = options.get("subscribepattern") or None
        assign = _json(options, "assign")
        if sum(x is not None and x != () for x in (topics, pattern, assign)) != 1:
            raise ConfigError(
                "exactly one of option subscribe (comma-separated topics), subscribePattern "
                "(a regular expression) and assign (JSON of queues) is required"
            )
        for topic in topics:
            _topic("subscribe", topic)
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"option subscribePattern: {e}") from None
        assigned = _assigned(assign) if assign is not None else None
        if assigned is not None:
            topics = tuple(sorted({mq.topic for mq in assigned}))
        expression = options.get("subexpression", "*")
        if _SQL_LIKE.search(expression):
            raise ConfigError(
                f"option subExpression is a tag expression (tags joined by ||), not {expression!r}"
                ": the source filters by tag, not by SQL92"
            )
        starting_ts = _int(options, "startingTimestamp", None, 0)
        strategy = options.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in STRATEGIES:
            raise ConfigError(
                f"option startingOffsetsByTimestampStrategy must be {' or '.join(STRATEGIES)}"
            )
        by_ts = {
            key: None if value is None else offsets.from_json(value)
            for key in ("startingOffsetsByTimestamp", "endingOffsetsByTimestamp")
            for value in [_json(options, key)]
        }
        ending_ts = _int(options, "endingTimestamp", None, 0)
        min_per_trigger = _int(options, "minOffsetsPerTrigger", None, 1)
        if "maxtriggerdelay" in options and min_per_trigger is None:
            raise ConfigError("option maxTriggerDelay needs minOffsetsPerTrigger")
        groups = {k: options.get(k.lower()) for k in ("consumerGroup", "consumerGroupPrefix")}
        for key, group in groups.items():
            if group is None:
                continue
            # A prefix names groups "{prefix}-{16 hex digits}" (source.py).
            named = group if key == "consumerGroup" else f"{group}-{'0' * 16}"
            try:
                check_group(named, consumer=True)
            except ConfigError as e:
                raise ConfigError(f"option {key}: {e}") from None
        # As Spark's Kafka source: a stream refuses an end, a batch read ignores trigger limits.
        if mode == "stream":
            endings = ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
            given = [k for k in endings if k.lower() in options]
            if given:
                raise ConfigError(f"option {given[0]} is for batch reads: a stream has no end")
            if "pushdownpredicate" in options:
                # Spark pushes no filters into a Python stream.
                raise ConfigError("option pushDownPredicate is for batch reads")
        timeout_ms = _int(options, "pullTimeoutMs", 120_000, 1)
        assert timeout_ms is not None
        pull_batch = _int(options, "pullBatchSize", 32, 1)
        assert pull_batch is not None
        default_start = "earliest" if mode == "batch" else "latest"
        starts = ("earliest",) if mode == "batch" else ("earliest", "latest")
        return cls(
            name_server=_name_server(options),
            credentials=_credentials(options),
            tls=_tls(options),
            topics=topics,
            subscription=expression,
            starting=_position(options, "startingOffsets", default_start, starts, mode),
            starting_timestamp_ms=starting_ts,
            ending=_position(options, "endingOffsets", "latest", ("latest",), mode),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
            pull_batch_size=pull_batch,
            pull_timeout_s=timeout_ms / 1000,
            include_properties=_bool(options, "includeProperties", False),
            min_partitions=_int(options, "minPartitions", None, 1),
            max_records_per_partition=_int(options, "maxRecordsPerPartition", None, 1),
            topic_pattern=pattern,
            assigned=assigned,
            starting_by_timestamp=by_ts["startingOffsetsByTimestamp"],
            timestamp_strategy=strategy,
            ending_timestamp_ms=ending_ts,
            ending_by_timestamp=by_ts["endingOffsetsByTimestamp"],
            min_offsets_per_trigger=min_per_trigger,
            max_trigger_delay_s=_duration_s(options, "maxTriggerDelay", MAX_TRIGGER_DELAY),
            consumer_group=groups["consumerGroup"],
            consumer_group_prefix=groups["consumerGroupPrefix"] or GROUP_PREFIX,
            push_down_predicate=_bool(options, "pushDownPredicate", False),
            fetch_offset_retries=_int(options, "fetchOffset.numRetries", 3, 0) or 0,
            fetch_offset_retry_interval_s=(_int(options, "fetchOffset.retryIntervalMs", 10, 0) or 0)
            / 1000,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class WriteOptions:
    """Where written rows go."""

    name_server: str
    topic: str | None
    """Every row's topic; None takes each row's ``topic`` column."""
    producer_group: str
    include_properties: bool
    delivery_guarantee: str
    """``at_least_once`` or ``exactly_once`` (see :mod:`pyrmq.spark.sink`)."""
    commit_topic: str
    """Where exactly-once writes store their commit records."""
    check_immunity_s: int
    """How long the broker waits before it first checks an exactly-once half: longer than a
    micro-batch's writes take."""
    queue_selector: str
    """``round_robin``, or ``hash`` of each row's ``sharding_key`` (else its keys)."""
    queue_column: bool = False
    """The rows name their queue (a ``queue_id`` column)."""
    credentials: Credentials | None = None
    """The ACL account requests are signed with (brokers with ``aclEnable``)."""
    tls: ClientTls | None = None
    """Connections are TLS (brokers with ``tls.server.mode``)."""

    @property
    def in_order(self) -> bool:
        """Rows go to the queues they name, those of one queue in order."""
        return self.queue_column or self.queue_selector == "hash"

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == "exactly_once"

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> "WriteOptions":
        options = _lower(raw, WRITE_KEYS)
        topic = options.get("topic") or None
        commit_topic = options.get("committopic", COMMIT_TOPIC)
        for key, value in (("topic", topic), ("commitTopic", commit_topic)):
            if value is not None:
                try:
                    _core.validate_topic(value)
                except PyrmqError as e:
                    raise ConfigError(f"option {key}: {e}") from None
        delivery = options.get("deliveryguarantee", "at_least_once").strip().lower()
        if delivery not in DELIVERY:
            raise ConfigError(f"option deliveryGuarantee must be {' or '.join(DELIVERY)}")
        # A commit keeps at least 5 s of its halves' immunity in hand (commits.py).
        immunity = _int(options, "checkImmunitySeconds", CHECK_IMMUNITY_S, MIN_CHECK_IMMUNITY_S)
        assert immunity is not None
        selector = options.get("queueselector", "round_robin").strip().lower()
        if selector not in SELECTORS:
            raise ConfigError(f"option queueSelector must be {' or '.join(SELECTORS)}")
        producer_group = options.get("producergroup", "spark-pyrmq-sink")
        try:
            check_group(producer_group, consumer=False)
        except ConfigError as e:
            raise ConfigError(f"option producerGroup: {e}") from None
        return cls(
            name_server=_name_server(options),
            credentials=_credentials(options),
            tls=_tls(options),
            topic=topic,
            producer_group=producer_group,
            include_properties=_bool(options, "includeProperties", False),
            delivery_guarantee=delivery,
            commit_topic=commit_topic,
            check_immunity_s=immunity,
            queue_selector=selector,
        )


def client_config(options: "ReadOptions | WriteOptions") -> ClientConfig:
    """A producer's or consumer's settings for the cluster ``options`` name."""
    return ClientConfig(
        namesrv_addr=options.name_server,
        credentials=options.credentials,
        tls=None if options.tls is None else options.tls.context(),
    )


def admin_client(options: "ReadOptions | WriteOptions") -> Admin:
    """An :class:`Admin` of the cluster ``options`` name."""
    return Admin(
        options.name_server,
        credentials=options.credentials,
        tls=None if options.tls is None else options.tls.context(),
    )
