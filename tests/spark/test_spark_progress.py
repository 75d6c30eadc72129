"""A stream shows its progress as a consumer group's offsets on the brokers (for monitoring,
as ``mqadmin consumerProgress`` shows lag), while its own progress stays in the checkpoint."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import create_topic
from tests.spark.test_spark_source import send

from pyrmq.client.admin import Admin, ConsumerProgress
from pyrmq.client.message import MessageQueue
from pyrmq.spark.options import ReadOptions
from pyrmq.spark.source import RocketMQStreamReader

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def progress(namesrv: str, group: str, topic: str) -> dict[MessageQueue, ConsumerProgress]:
    async def ask() -> dict[MessageQueue, ConsumerProgress]:
        async with Admin(namesrv) as admin:
            return await admin.consumer_progress(group, topic)

    return asyncio.run(ask())


def test_a_streams_consumer_group_shows_what_it_has_read(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkProgress"
    group = "CG_SparkProgress"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 30)
    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    query = (
        reader.option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("consumerGroup", group)
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        # Spark commits a batch's end once a later batch runs: send until that shows.
        deadline = time.monotonic() + 120
        first = 30
        while True:
            assert query.exception() is None
            assert time.monotonic() < deadline, progress(namesrv, group, topic)
            shown = progress(namesrv, group, topic)
            if sum(p.consumer_offset for p in shown.values()) >= 30:
                break
            send(namesrv, topic, 2, first=first)
            first += 2
            time.sleep(0.5)
    finally:
        query.stop()
    shown = progress(namesrv, group, topic)
    assert {mq.queue_id for mq in shown} == {0, 1}
    for mq, p in shown.items():
        # Never past what is stored; the lag is what was not read yet.
        assert 15 <= p.consumer_offset <= p.broker_offset, (mq, p)
    assert sum(p.broker_offset for p in shown.values()) == first


def test_without_a_group_each_run_makes_one_up() -> None:
    options = {"nameServer": "127.0.0.1:9876", "subscribe": "T"}
    made = RocketMQStreamReader(ReadOptions.parse(options, "stream")).group
    again = RocketMQStreamReader(ReadOptions.parse(options, "stream")).group
    assert made.startswith("spark-pyrmq-source-")
    assert made != again
    prefixed = ReadOptions.parse(options | {"consumerGroupPrefix": "etl"}, "stream")
    assert RocketMQStreamReader(prefixed).group.startswith("etl-")
    fixed = ReadOptions.parse(options | {"consumerGroup": "CG_ETL"}, "stream")
    assert RocketMQStreamReader(fixed).group == "CG_ETL"
    with pytest.raises(Exception, match=r"option consumerGroup: .*illegal characters"):
        ReadOptions.parse(options | {"consumerGroup": "bad group"}, "stream")
