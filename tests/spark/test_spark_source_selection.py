"""Which messages a ``pyrmq`` read takes: topics by pattern, assigned queues, start and end
times per queue, and streams that wait for ``minOffsetsPerTrigger``; against a real
``pyrmq serve`` through a real SparkSession."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import BROKER_HA, Cluster, create_topic
from tests.spark.test_spark_source import read, send, stream_to_parquet

from pyrmq.client.admin import Admin
from pyrmq.client.message import MessageQueue
from pyrmq.errors import PyrmqError
from pyrmq.spark.broker import Brokers

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]


def now_ms() -> int:
    # Clear of the messages around: one stored in the same millisecond counts as at it.
    time.sleep(0.05)
    mark = int(time.time() * 1000)
    time.sleep(0.05)
    return mark


def bodies(rows: list[Any]) -> list[int]:
    return sorted(int(r.body[1:]) for r in rows)


def by_queue(sent: list[Any], queue_id: int) -> list[int]:
    return [int(i) for i, r in enumerate(sent) if r.message_queue.queue_id == queue_id]


def test_start_and_end_times_bound_a_batch_read(spark: Any, addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkTimes"
    create_topic(broker, topic, 2)
    sent = send(namesrv, topic, 20)
    t1 = now_ms()
    sent += send(namesrv, topic, 20, first=20)
    t2 = now_ms()
    sent += send(namesrv, topic, 20, first=40)

    def timed(**options: str) -> list[int]:
        return bodies(read(spark, namesrv, topic, **options).collect())

    assert timed(startingTimestamp=str(t1), endingTimestamp=str(t2)) == list(range(20, 40))
    assert timed(endingTimestamp=str(t1)) == list(range(20))
    assert timed(endingTimestamp=str(t2 + 3_600_000)) == list(range(60))  # past the end: all
    # Per queue: queue 0 from t1 on, queue 1 (not named) from its first message; queue 1 up to
    # t2, queue 0 (not named) to its end.
    starts = json.dumps({topic: {"broker-a": {"0": t1}}})
    ends = json.dumps({topic: {"broker-a": {"1": t2}}})
    got = timed(startingOffsetsByTimestamp=starts, endingOffsetsByTimestamp=ends)
    q0, q1 = by_queue(sent, 0), by_queue(sent, 1)
    assert got == sorted([i for i in q0 if i >= 20] + [i for i in q1 if i < 40])
    # A single start time wins over the per-queue ones and over startingOffsets.
    both = timed(startingTimestamp=str(t2), startingOffsetsByTimestamp=starts)
    assert both == list(range(40, 60))
    gone = json.dumps({topic: {"broker-a": {"7": t1}}})
    with pytest.raises(Exception, match=r"timestamps names queues not read: \['TopicSparkTimes@"):
        timed(startingOffsetsByTimestamp=gone)
    # An end before the start is refused, as a lost range, unless told to skip such queues.
    with pytest.raises(Exception, match=r"DataLossError: ranges end before they start: "):
        timed(startingTimestamp=str(t2), endingTimestamp=str(t1))
    assert timed(startingTimestamp=str(t2), endingTimestamp=str(t1), failOnDataLoss="false") == []
    past = json.dumps({topic: {"broker-a": {"0": 1_000, "1": 0}}})
    with pytest.raises(Exception, match=r"TopicSparkTimes@broker-a:0 from 1000 to 30"):
        timed(startingOffsets=past)
    assert timed(startingOffsets=past, failOnDataLoss="false") == q1


def test_a_start_time_after_the_last_message_fails_unless_told_to_start_at_the_end(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """As Spark's Kafka source: ``startingOffsetsByTimestampStrategy`` is ``error`` by
    default; ``latest`` starts such a queue at its end, so a stream reads what comes later."""
    namesrv, broker = addrs
    topic = "TopicSparkLateStart"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 10)
    later = str(now_ms())
    with pytest.raises(Exception, match=r"no message of TopicSparkLateStart@broker-a:\d was"):
        read(spark, namesrv, topic, startingTimestamp=later).collect()
    assert (
        read(
            spark,
            namesrv,
            topic,
            startingTimestamp=later,
            startingOffsetsByTimestampStrategy="latest",
        ).collect()
        == []
    )

    def run() -> list[int]:
        return stream_to_parquet(
            spark,
            namesrv,
            topic,
            tmp_path / "out",
            tmp_path / "checkpoint",
            startingTimestamp=later,
            startingOffsetsByTimestampStrategy="latest",
        )

    assert run() == []
    send(namesrv, topic, 6, first=10)
    assert run() == [6]
    assert bodies(spark.read.parquet(str(tmp_path / "out")).collect()) == list(range(10, 16))


def test_a_pattern_reads_every_matching_topic_and_a_stream_finds_new_ones(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker = addrs
    for topic in ("TopicSparkPatA1", "TopicSparkPatA2", "TopicSparkPatB1"):
        create_topic(broker, topic, 2)
    send(namesrv, "TopicSparkPatA1", 10)
    send(namesrv, "TopicSparkPatA2", 10, first=100)
    send(namesrv, "TopicSparkPatB1", 10, first=200)
    pattern = r"TopicSparkPatA\d"

    def matching() -> Any:
        reader = spark.read.format("pyrmq").option("nameServer", namesrv)
        return reader.option("subscribePattern", pattern).load()

    rows = matching().collect()
    assert bodies(rows) == list(range(10)) + list(range(100, 110))
    assert {r.topic for r in rows} == {"TopicSparkPatA1", "TopicSparkPatA2"}

    def run(**options: str) -> list[int]:
        out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
        return stream_to_parquet(
            spark, namesrv, None, out, checkpoint, subscribePattern=pattern, **options
        )

    assert run() == [20]
    create_topic(broker, "TopicSparkPatA3", 2)
    send(namesrv, "TopicSparkPatA3", 4, first=300)
    send(namesrv, "TopicSparkPatA1", 1, first=10)
    send(namesrv, "TopicSparkPatB1", 3, first=210)
    # The new topic is read from its first message.
    assert run() == [5]
    stored = spark.read.parquet(str(tmp_path / "out")).collect()
    assert bodies(stored) == list(range(11)) + list(range(100, 110)) + list(range(300, 304))
    # A matched topic deleted: it may only be away (a broker restarting looks the same), so
    # its offsets stay and the query goes on.
    asyncio.run(delete_topic(namesrv, "TopicSparkPatA3"))
    send(namesrv, "TopicSparkPatA2", 2, first=110)
    assert run() == [2]
    # Made again, its queues are behind where the query was: what was past them is lost
    # (the query fails unless told that is fine), and it is read again from its start.
    create_topic(broker, "TopicSparkPatA3", 2)
    send(namesrv, "TopicSparkPatA3", 1, first=400)
    with pytest.raises(
        Exception, match=r"offsets \[\d, 2\) of TopicSparkPatA3@broker-a:\d are gone"
    ):
        run()
    assert run(failOnDataLoss="false") == [1]
    send(namesrv, "TopicSparkPatA1", 1, first=11)
    assert run() == [1]
    stored = spark.read.parquet(str(tmp_path / "out")).collect()
    assert bodies(stored) == sorted([*range(12), *range(100, 112), *range(300, 304), 400])


async def delete_topic(namesrv: str, topic: str) -> None:
    async with Admin(namesrv) as admin:
        assert await admin.delete_topic(topic)


def test_assign_reads_only_the_named_queues(spark: Any, addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkAssign"
    create_topic(broker, topic, 4)
    sent = send(namesrv, topic, 40)
    assign = json.dumps({topic: {"broker-a": [1, 3]}})
    reader = spark.read.format("pyrmq").option("nameServer", namesrv).option("assign", assign)
    rows = reader.load().collect()
    assert {r.queue_id for r in rows} == {1, 3}
    assert bodies(rows) == sorted(by_queue(sent, 1) + by_queue(sent, 3))
    wrong = json.dumps({topic: {"broker-a": [1, 9]}})
    with pytest.raises(Exception, match=r"assign names queues not read: \['TopicSparkAssign@"):
        spark.read.format("pyrmq").option("nameServer", namesrv).option(
            "assign", wrong
        ).load().collect()
    with pytest.raises(Exception, match="exactly one of option subscribe"):
        read(spark, namesrv, topic, assign=assign).collect()


def test_a_stream_waits_for_min_offsets_per_trigger_or_the_delay(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """With ``minOffsetsPerTrigger=30`` a micro-batch waits until 30 new offsets are there,
    or until ``maxTriggerDelay`` has passed since the last one; the first goes at once."""
    namesrv, broker = addrs
    topic = "TopicSparkMinTrigger"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 5)
    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    query = (
        reader.option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", "30")
        .option("maxTriggerDelay", "12s")
        .load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start(str(tmp_path / "out"))
    )

    def batches() -> list[int]:
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    def wait_for(count: int, limit_s: float) -> float:
        began = time.monotonic()
        while len(batches()) < count:
            assert query.exception() is None
            assert time.monotonic() - began < limit_s, batches()
            time.sleep(0.1)
        return time.monotonic() - began

    try:
        wait_for(1, 120)
        assert batches() == [5]
        send(namesrv, topic, 10, first=5)
        time.sleep(2)
        assert batches() == [5]  # 10 < 30 and the delay has not passed
        send(namesrv, topic, 25, first=15)
        wait_for(2, 9)  # 35 >= 30: before the delay, 12 s after the first
        assert batches() == [5, 35]
        send(namesrv, topic, 3, first=40)
        waited = wait_for(3, 60)  # 3 < 30: only once the delay has passed
        assert batches() == [5, 35, 3]
        assert waited > 8
    finally:
        query.stop()
    stored = spark.read.parquet(str(tmp_path / "out")).collect()
    assert bodies(stored) == list(range(43))


def test_a_stream_waits_out_a_broker_restart_without_loss_or_duplicates(
    spark: Any, tmp_path: Path
) -> None:
    """The topic's only broker stops (it leaves the name server's routes, as a deleted topic
    would) and starts again on its store: the stream neither fails nor reads anything twice."""
    topic = "TopicSparkRestart"
    (tmp_path / "cluster").mkdir()
    with Cluster(tmp_path / "cluster") as cluster:
        broker = cluster.start("m", "ASYNC_MASTER")
        namesrv = cluster.namesrv
        create_topic(broker, topic, 2)
        send(namesrv, topic, 10)

        def run() -> list[int]:
            out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
            return stream_to_parquet(spark, namesrv, topic, out, checkpoint)

        assert run() == [10]
        assert cluster.procs["m"].stop() == 0
        assert run() == []
        cluster.start("m", "ASYNC_MASTER")
        send(namesrv, topic, 2, first=10)
        assert run() == [2]
    stored = spark.read.parquet(str(tmp_path / "out")).collect()
    assert bodies(stored) == list(range(12))


def test_offset_lookups_are_tried_again_while_a_broker_restarts(tmp_path: Path) -> None:
    """``fetchOffset.numRetries``: an offset look-up that fails because the topic's broker
    restarted (on another port) is tried again, with the route asked for again; without
    retries it fails."""
    topic = "TopicSparkFetchRetry"
    mq = MessageQueue(topic, BROKER_HA, 0)
    with Cluster(tmp_path) as cluster:
        broker = cluster.start("m", "ASYNC_MASTER")
        create_topic(broker, topic, 1)
        send(cluster.namesrv, topic, 3)
        with (
            Brokers(cluster.namesrv, 5.0) as once,
            Brokers(
                cluster.namesrv, 5.0, offset_retries=100, offset_retry_interval_s=0.1
            ) as retried,
        ):
            assert once.max_offset(mq) == retried.max_offset(mq) == 3
            assert cluster.procs["m"].stop() == 0
            cluster.start("m", "ASYNC_MASTER")
            with pytest.raises((PyrmqError, OSError)):
                once.max_offset(mq)
            assert retried.max_offset(mq) == 3
