"""How the sink reads the Arrow batches Spark hands its writers, without a SparkSession."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

pytest.importorskip("pyspark", reason="pyrmq.spark needs pyspark")

import pyarrow as pa

from pyrmq import properties as prop
from pyrmq.spark.options import WriteOptions
from pyrmq.spark.sink import _message, rows_of

OPTIONS = WriteOptions.parse({"nameServer": "127.0.0.1:9876", "includeProperties": "true"})
TEXT_MAP = pa.map_(pa.string(), pa.string())


def test_rows_hold_the_written_columns_as_python_values_across_batches() -> None:
    first = pa.record_batch(
        {
            "body": pa.array([b"a", b"b"], pa.binary()),
            "topic": ["T1", "T2"],
            "keys": pa.array([["k1", "k2"], None], pa.list_(pa.string())),
            "properties": pa.array([[("p", "1"), ("q", "2")], []], TEXT_MAP),
            "queue_id": pa.array([3, None], pa.int32()),
            "ignored": [1.5, 2.5],
        }
    )
    second = first.slice(1, 1)
    rows = list(rows_of([first, second]))
    assert rows == [
        {
            "body": b"a",
            "topic": "T1",
            "keys": ["k1", "k2"],
            "properties": {"p": "1", "q": "2"},
            "queue_id": 3,
        },
        {"body": b"b", "topic": "T2", "keys": None, "properties": {}, "queue_id": None},
        {"body": b"b", "topic": "T2", "keys": None, "properties": {}, "queue_id": None},
    ]
    msg = _message(rows[0], OPTIONS)
    assert (msg.topic, msg.body, msg.keys, msg.properties["q"]) == ("T1", b"a", "k1 k2", "2")


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process in a time zone nine hours from UTC."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("zone", [None, "UTC", "America/New_York"])
@pytest.mark.usefixtures("tokyo")
def test_a_deliver_time_is_read_as_the_instant_spark_holds_whatever_the_local_zone(
    zone: str | None,
) -> None:
    due = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    micros = int(due.timestamp()) * 1_000_000 + 678000
    times = pa.array([micros, None], pa.timestamp("us", zone))
    batch = pa.record_batch({"body": ["x", "y"], "topic": ["T", "T"], "deliver_time": times})
    timed, untimed = (_message(row, OPTIONS) for row in rows_of([batch]))
    assert timed.properties[prop.TIMER_DELIVER_MS] == str(micros // 1000)
    assert prop.TIMER_DELIVER_MS not in untimed.properties
