"""The sink's options and commit records, without a SparkSession."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="pyrmq.spark needs pyspark")

from pyrmq.errors import ConfigError
from pyrmq.spark.commits import CommitRecord
from pyrmq.spark.options import CHECK_IMMUNITY_S, COMMIT_TOPIC, WriteOptions

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
        ({"checkImmunitySeconds": "0"}, "checkImmunitySeconds must be at least 1"),
        ({"deliveryGuarante": "exactly_once"}, r"unknown option\(s\) deliveryguarante"),
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
