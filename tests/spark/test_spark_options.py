"""The source's and the sink's options and commit records, without a SparkSession."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyrmq.spark needs pyspark")

from pyrmq.client.message import MessageQueue
from pyrmq.errors import ConfigError
from pyrmq.spark.commits import CommitRecord
from pyrmq.spark.options import CHECK_IMMUNITY_S, COMMIT_TOPIC, ReadOptions, WriteOptions

NS = {"nameServer": "127.0.0.1:9876"}


def test_write_options_default_to_at_least_once() -> None:
    o = WriteOptions.parse(NS | {"topic": "T"})
    assert (o.delivery_guarantee, o.exactly_once) == ("at_least_once", False)
    assert (o.commit_topic, o.check_immunity_s) == (COMMIT_TOPIC, CHECK_IMMUNITY_S)


def test_exactly_once_options_are_read_in_any_case() -> None:
    o = WriteOptions.parse(
        NS
        | {
            "DELIVERYGUARANTEE": "Exactly_Once",
            "commitTopic": "SinkCommits",
            "checkImmunitySeconds": "600",
        }
    )
    assert o.exactly_once
    assert (o.commit_topic, o.check_immunity_s) == ("SinkCommits", 600)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"deliveryGuarantee": "exactly-once"}, "deliveryGuarantee must be at_least_once or"),
        ({"sinkId": "orders"}, r"unknown option\(s\) sinkid"),
        ({"commitTopic": "bad topic"}, "option commitTopic"),
        # A commit keeps 5 s of the immunity in hand: 5 s left none, every write rolled back.
        ({"checkImmunitySeconds": "5"}, "checkImmunitySeconds must be at least 10"),
        ({"deliveryGuarante": "exactly_once"}, r"unknown option\(s\) deliveryguarante"),
        ({"producerGroup": "spark sink"}, "option producerGroup: .*illegal characters"),
        ({"producerGroup": "DEFAULT_PRODUCER"}, "option producerGroup: .*name another"),
    ],
)
def test_bad_write_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        WriteOptions.parse(NS | options)


def test_commit_records_round_trip_and_refuse_foreign_bodies() -> None:
    record = CommitRecord("query-1", 7, {"b": 2, "a": 1}, "PG")
    assert CommitRecord.decode(record.encode()) == record
    assert record.encode() == b'{"sink":"query-1","batch":7,"attempts":{"a":1,"b":2},"group":"PG"}'
    assert record.attempts == {"a", "b"}
    assert CommitRecord.key("query-1", 7) == "query-1:7"
    bad = b'{"sink": "s", "batch": 1, "attempts": ["a"], "group": "g"}'
    for body in (b"", b"not json", b"[1]", b'{"sink": "s", "batch": "x", "attempts": {}}', bad):
        assert CommitRecord.decode(body) is None


def test_read_options_name_topics_one_way() -> None:
    o = ReadOptions.parse(NS | {"subscribePattern": "orders-[a-z]+"}, "stream")
    assert (o.topics, o.topic_pattern) == ((), "orders-[a-z]+")
    assert [o.selects(t) for t in ("orders-eu", "orders-eu1", "x-orders-eu")] == [1, 0, 0]
    everything = ReadOptions.parse(NS | {"subscribePattern": ".*"}, "batch")
    assert [everything.selects(t) for t in ("%RETRY%orders-eu", "%DLQ%orders-eu")] == [0, 0]
    assert not everything.selects("RMQ_SYS_TRANS_HALF_TOPIC")
    for internal in ("SCHEDULE_TOPIC_XXXX", "TBW102", "rmq_sys_wheel", COMMIT_TOPIC):
        assert not everything.selects(internal)
    assert everything.selects("BenchmarkTest")
    assigned = ReadOptions.parse(
        NS | {"assign": '{"B": {"b1": [2]}, "A": {"b0": [0, 1]}}'}, "batch"
    )
    assert assigned.topics == ("A", "B")
    assert assigned.assigned == {
        MessageQueue("A", "b0", 0),
        MessageQueue("A", "b0", 1),
        MessageQueue("B", "b1", 2),
    }


def test_trigger_limits_and_times_are_read() -> None:
    o = ReadOptions.parse(
        NS | {"subscribe": "T", "minOffsetsPerTrigger": "500", "MAXTRIGGERDELAY": "90s"}, "stream"
    )
    assert (o.min_offsets_per_trigger, o.max_trigger_delay_s) == (500, 90.0)
    assert ReadOptions.parse(NS | {"subscribe": "T"}, "stream").max_trigger_delay_s == 900.0
    for raw, seconds in (("250", 0.25), ("250ms", 0.25), ("2 h", 7200.0), ("1d", 86400.0)):
        options = {"subscribe": "T", "minOffsetsPerTrigger": "1", "maxTriggerDelay": raw}
        assert ReadOptions.parse(NS | options, "stream").max_trigger_delay_s == seconds
    timed = ReadOptions.parse(
        NS
        | {
            "subscribe": "T",
            "startingOffsetsByTimestamp": '{"T": {"b": {"1": 1700000000000}}}',
            "endingTimestamp": "1800000000000",
            "startingOffsetsByTimestampStrategy": "LATEST",
        },
        "batch",
    )
    assert timed.starting_by_timestamp == {MessageQueue("T", "b", 1): 1_700_000_000_000}
    assert (timed.ending_timestamp_ms, timed.timestamp_strategy) == (1_800_000_000_000, "latest")
    # As Spark's Kafka source, a batch read ignores trigger limits.
    assert ReadOptions.parse(NS | {"subscribe": "T", "maxOffsetsPerTrigger": "5"}, "batch")
    # Kafka's fetchOffset options: 3 retries 10 ms apart unless set.
    plain = ReadOptions.parse(NS | {"subscribe": "T"}, "stream")
    assert (plain.fetch_offset_retries, plain.fetch_offset_retry_interval_s) == (3, 0.01)
    retries = {"fetchOffset.numRetries": "0", "fetchOffset.retryIntervalMs": "250"}
    tuned = ReadOptions.parse(NS | {"subscribe": "T"} | retries, "batch")
    assert (tuned.fetch_offset_retries, tuned.fetch_offset_retry_interval_s) == (0, 0.25)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "exactly one of option subscribe"),
        ({"subscribe": "T", "subscribePattern": "T.*"}, "exactly one of option subscribe"),
        ({"topic": "T", "assign": '{"T": {"b": [0]}}'}, "exactly one of option subscribe"),
        ({"subscribePattern": "(T"}, "option subscribePattern: missing \\)"),
        ({"assign": "[0]"}, "option assign must be JSON like"),
        ({"assign": '{"T": {"b": []}}'}, "option assign must be JSON like"),
        ({"assign": '{"T": {"b": [-1]}}'}, "option assign: bad queue id -1"),
        ({"assign": '{"bad topic": {"b": [0]}}'}, "option assign: "),
        ({"subscribe": "T", "endingOffsets": "latest"}, "endingOffsets is for batch reads"),
        ({"subscribe": "T", "endingTimestamp": "5"}, "endingTimestamp is for batch reads"),
        ({"subscribe": "T", "pushDownPredicate": "true"}, "pushDownPredicate is for batch reads"),
        ({"subscribe": "T", "maxTriggerDelay": "1m"}, "maxTriggerDelay needs minOffsetsPerTrigger"),
        (
            {"subscribe": "T", "minOffsetsPerTrigger": "1", "maxTriggerDelay": "soon"},
            "maxTriggerDelay must be a duration",
        ),
        ({"subscribe": "T", "minOffsetsPerTrigger": "0"}, "minOffsetsPerTrigger must be at least"),
        (
            {"subscribe": "T", "startingOffsetsByTimestampStrategy": "earliest"},
            "startingOffsetsByTimestampStrategy must be error or latest",
        ),
        (
            {"subscribe": "T", "startingOffsetsByTimestamp": '{"T": {"b": {"0": -1}}}'},
            "bad offset -1",
        ),
        ({"subscribe": "T", "startingOffsetsByTimestamp": "{"}, "is not valid JSON"),
        ({"subscribe": "T", "fetchOffset.numRetries": "-1"}, "numRetries must be at least 0"),
    ],
)
def test_bad_read_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReadOptions.parse(NS | options, "stream")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        # As Spark's Kafka source: a batch read that starts at the end reads nothing.
        ({"startingOffsets": "latest"}, "startingOffsets can't be latest for a batch read"),
        ({"startingOffsets": '{"T": {"b": {"0": -1}}}'}, "bad offset -1 for queue '0'"),
        ({"endingOffsets": "earliest"}, "endingOffsets can't be earliest for a batch read"),
        ({"endingOffsets": '{"T": {"b": {"0": -2}}}'}, "bad offset -2 for queue '0'"),
        # A SQL92 filter read as a tag matched nothing, without a word.
        ({"subExpression": "n > 5"}, "subExpression is a tag expression"),
        ({"subExpression": "color = 'red'"}, "not by SQL92"),
    ],
)
def test_bad_batch_read_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ReadOptions.parse(NS | {"subscribe": "T"} | options, "batch")
    assert ReadOptions.parse(NS | {"subscribe": "T", "subExpression": "A || B"}, "batch")
