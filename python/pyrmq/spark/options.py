"""The Spark source's options, named after Spark's Kafka source where one exists.

Spark hands every option over as a string, with its key in any case; each is read and checked
here, once, on the driver, so that a typo fails the query at once with a clear message rather
than in an executor.
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from pyrmq import _core
from pyrmq.client.subscription import Subscription
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.remoting.addresses import split_addresses
from pyrmq.spark import offsets

__all__ = ["ReadOptions", "WriteOptions"]

Mode = Literal["batch", "stream"]


READ_KEYS = (
    "nameServer",
    "subscribe",
    "topic",
    "subExpression",
    "startingOffsets",
    "startingTimestamp",
    "endingOffsets",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "pullBatchSize",
    "pullTimeoutMs",
    "includeProperties",
    "minPartitions",
    "maxRecordsPerPartition",
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
)
SELECTORS = ("round_robin", "hash")
DELIVERY = ("at_least_once", "exactly_once")
COMMIT_TOPIC = "PYRMQ_SPARK_SINK_COMMITS"
CHECK_IMMUNITY_S = 3600
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
    return value


def _bool(options: dict[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() not in ("true", "false"):
        raise ConfigError(f"option {key} must be true or false, not {raw!r}")
    return raw.strip().lower() == "true"


def _name_server(options: dict[str, str]) -> str:
    value = options.get("nameserver")
    if not value:
        raise ConfigError("option nameServer (name server host:port, ';'-separated) is required")
    try:
        split_addresses(value)
    except ValueError as e:
        raise ConfigError(f"option nameServer: {e}") from None
    return value


def _position(options: dict[str, str], key: str, default: str, allowed: tuple[str, ...]) -> Any:
    """``earliest``/``latest`` (those of ``allowed``), or offsets JSON with -2/-1 marks."""
    raw = options.get(key.lower(), default).strip()
    if raw.lower() in allowed:
        return raw.lower()
    if not raw.startswith("{"):
        raise ConfigError(f"option {key} must be {' or '.join(allowed)} or offsets JSON: {raw!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ConfigError(f"option {key} is not valid JSON: {e}") from None
    marks = frozenset({offsets.LATEST} | ({offsets.EARLIEST} if "earliest" in allowed else set()))
    return offsets.from_json(value, allow=marks)


@dataclasses.dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read names: where, which topics, from and to where, how."""

    name_server: str
    topics: tuple[str, ...]
    subscription: str
    starting: Any
    """``"earliest"``, ``"latest"`` or offsets by queue (-2 earliest, -1 latest)."""
    starting_timestamp_ms: int | None
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

    @classmethod
    def parse(cls, raw: Mapping[str, str], mode: Mode) -> "ReadOptions":
        options = _lower(raw, READ_KEYS)
        topic_list = options.get("subscribe") or options.get("topic") or ""
        topics = tuple(dict.fromkeys(t.strip() for t in topic_list.split(",") if t.strip()))
        if not topics:
            raise ConfigError("option subscribe (comma-separated topics) is required")
        for topic in topics:
            try:
                _core.validate_topic(topic)
            except PyrmqError as e:
                raise ConfigError(f"option subscribe: {e}") from None
        expression = options.get("subexpression", "*")
        Subscription.parse(topics[0], expression)  # refuses what is not a tag expression
        starting_ts = _int(options, "startingTimestamp", None, 0)
        timeout_ms = _int(options, "pullTimeoutMs", 120_000, 1)
        assert timeout_ms is not None
        pull_batch = _int(options, "pullBatchSize", 32, 1)
        assert pull_batch is not None
        default_start = "earliest" if mode == "batch" else "latest"
        return cls(
            name_server=_name_server(options),
            topics=topics,
            subscription=expression,
            starting=_position(options, "startingOffsets", default_start, ("earliest", "latest")),
            starting_timestamp_ms=starting_ts,
            ending=_position(options, "endingOffsets", "latest", ("latest",)),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
            pull_batch_size=pull_batch,
            pull_timeout_s=timeout_ms / 1000,
            include_properties=_bool(options, "includeProperties", False),
            min_partitions=_int(options, "minPartitions", None, 1),
            max_records_per_partition=_int(options, "maxRecordsPerPartition", None, 1),
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
        immunity = _int(options, "checkImmunitySeconds", CHECK_IMMUNITY_S, 1)
        assert immunity is not None
        selector = options.get("queueselector", "round_robin").strip().lower()
        if selector not in SELECTORS:
            raise ConfigError(f"option queueSelector must be {' or '.join(SELECTORS)}")
        return cls(
            name_server=_name_server(options),
            topic=topic,
            producer_group=options.get("producergroup", "spark-pyrmq-sink"),
            include_properties=_bool(options, "includeProperties", False),
            delivery_guarantee=delivery,
            commit_topic=commit_topic,
            check_immunity_s=immunity,
            queue_selector=selector,
        )
