"""The ``pyrmq`` Spark data source against a real ``pyrmq serve``, through a real SparkSession
(local[2]): batch reads (ranges, tag filters, timestamps, data loss), streaming reads with
``availableNow`` and ``maxOffsetsPerTrigger`` resumed from their checkpoint, and writes."""

from __future__ import annotations

import asyncio
import doctest
import importlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import create_topic
from tests.helpers import fast_config, send_raw

from pyrmq.client.message import Message, SendStatus
from pyrmq.client.producer import Producer

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

QUEUE = ("topic", "broker_name", "queue_id", "queue_offset")


def send(namesrv: str, topic: str, count: int, first: int = 0) -> list[Any]:
    """``count`` messages ``m<i>`` (tag ``T<i % 2>``, keys ``k<i>`` and ``all``, property
    ``n``), spread over the topic's queues; their send results."""

    async def main() -> list[Any]:
        async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
            results = []
            for i in range(first, first + count):
                msg = Message(
                    topic,
                    f"m{i}".encode(),
                    tags=f"T{i % 2}",
                    keys=[f"k{i}", "all"],
                    properties={"n": str(i)},
                )
                results.append(await producer.send(msg))
            assert all(r.status is SendStatus.OK for r in results)
            return results

    return asyncio.run(main())


def read(spark: Any, namesrv: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("pyrmq").option("nameServer", namesrv).option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_a_batch_read_returns_every_message_once_with_its_fields(
    spark: Any, addrs: tuple[str, str]
) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkBatch"
    create_topic(broker, topic, 4)
    sent = send(namesrv, topic, 200)
    df = read(spark, namesrv, topic, includeProperties="true")
    assert df.rdd.getNumPartitions() == 4  # one per queue
    rows = df.collect()
    assert len(rows) == 200
    assert len({tuple(r[c] for c in QUEUE) for r in rows}) == 200
    by_id = {r.msg_id: r for r in rows}
    for i, result in enumerate(sent):
        r = by_id[result.msg_id]
        assert (r.body, r.tags, r.keys) == (f"m{i}".encode(), f"T{i % 2}", [f"k{i}", "all"])
        assert (r.topic, r.queue_id, r.queue_offset) == (
            topic,
            result.message_queue.queue_id,
            result.queue_offset,
        )
        assert r.properties == {"n": str(i)}
        assert r.reconsume_times == 0
        assert abs(r.store_timestamp.timestamp() - time.time()) < 600
    # Without includeProperties the column is null.
    assert read(spark, namesrv, topic).filter("properties IS NOT NULL").count() == 0


def test_a_batch_read_takes_offset_ranges_tag_expressions_and_timestamps(
    spark: Any, addrs: tuple[str, str]
) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkRange"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 40)  # 20 per queue, round robin
    # Clear of both batches: a message stored in the same millisecond counts as at it.
    time.sleep(0.05)
    middle_ms = int(time.time() * 1000)
    time.sleep(0.05)
    later = send(namesrv, topic, 10, first=40)
    start = json.dumps({topic: {"broker-a": {"0": 5, "1": -2}}})
    end = json.dumps({topic: {"broker-a": {"0": 8, "1": -1}}})
    ranged = read(spark, namesrv, topic, startingOffsets=start, endingOffsets=end).collect()
    got = sorted((r.queue_id, r.queue_offset) for r in ranged)
    assert got == [(0, o) for o in range(5, 8)] + [(1, o) for o in range(25)]
    tagged = read(spark, namesrv, topic, subExpression="T1").collect()
    assert sorted(int(r.body[1:]) for r in tagged) == list(range(1, 50, 2))
    recent = read(spark, namesrv, topic, startingTimestamp=str(middle_ms)).collect()
    assert sorted(r.msg_id for r in recent) == sorted(r.msg_id for r in later)


def test_a_range_past_the_end_of_a_queue_fails_unless_data_loss_is_allowed(
    spark: Any, addrs: tuple[str, str]
) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkLoss"
    create_topic(broker, topic, 1)
    send(namesrv, topic, 5)
    end = json.dumps({topic: {"broker-a": {"0": 9}}})
    with pytest.raises(Exception, match=r"offsets \[5, 9\) of TopicSparkLoss@broker-a:0 are gone"):
        read(spark, namesrv, topic, endingOffsets=end).collect()
    rows = read(spark, namesrv, topic, endingOffsets=end, failOnDataLoss="false").collect()
    assert sorted(r.queue_offset for r in rows) == [0, 1, 2, 3, 4]


def test_bad_options_fail_the_query_with_a_clear_message(
    spark: Any, addrs: tuple[str, str]
) -> None:
    namesrv, _ = addrs
    with pytest.raises(Exception, match="option nameServer"):
        spark.read.format("pyrmq").option("subscribe", "T").load().collect()
    with pytest.raises(Exception, match="option subscribe"):
        spark.read.format("pyrmq").option("nameServer", namesrv).load().collect()
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be at least 1"):
        read(spark, namesrv, "T", maxOffsetsPerTrigger="0").collect()
    with pytest.raises(Exception, match="topic TopicSparkMissing does not exist"):
        read(spark, namesrv, "TopicSparkMissing").collect()
    with pytest.raises(Exception, match="startingOffsets must be earliest or offsets JSON"):
        read(spark, namesrv, "T", startingOffsets="first").collect()


def stream_to_parquet(
    spark: Any, namesrv: str, topic: str | None, out: Path, checkpoint: Path, **options: str
) -> list[int]:
    """Runs an ``availableNow`` query into parquet (from the earliest offsets unless
    ``options`` say otherwise; ``topic`` None: the options name what to read); the rows of
    each micro-batch."""
    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    if topic is not None:
        reader = reader.option("subscribe", topic)
    reader = reader.option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination(240)
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def stream_batches(
    spark: Any, namesrv: str, topic: str, checkpoint: Path, log: Path, **options: str
) -> list[Any]:
    """Runs an ``availableNow`` query of ``topic`` with ``options`` whose sink appends each
    micro-batch to ``log`` as ``[batch id, sorted [queue id, queue offset] rows]``; every
    batch logged so far."""

    def record(batch: Any, batch_id: int) -> None:
        # Appended to a file: the function may run in another Python process than the test.
        rows = sorted((r.queue_id, r.queue_offset) for r in batch.collect())
        with log.open("a") as f:
            f.write(json.dumps([batch_id, rows]) + "\n")

    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_a_stream_reads_in_capped_batches_and_resumes_from_its_checkpoint(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """200 messages over 4 queues at most 80 per micro-batch: 80, 80, 40. A restart with 30
    more reads only those; the sink holds each message once."""
    namesrv, broker = addrs
    topic = "TopicSparkStream"
    create_topic(broker, topic, 4)
    send(namesrv, topic, 200)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    batches = stream_to_parquet(spark, namesrv, topic, out, checkpoint, maxOffsetsPerTrigger="80")
    assert batches == [80, 80, 40]
    assert stream_to_parquet(spark, namesrv, topic, out, checkpoint) == []
    send(namesrv, topic, 30, first=200)
    assert stream_to_parquet(spark, namesrv, topic, out, checkpoint) == [30]
    stored = spark.read.parquet(str(out))
    assert stored.count() == 230
    assert stored.select(*QUEUE).distinct().count() == 230
    assert sorted(int(r.body[1:]) for r in stored.select("body").collect()) == list(range(230))


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_stream_started_past_a_queues_end_starts_at_its_end(
    spark: Any, addrs: tuple[str, str], tmp_path: Path, fail_on_data_loss: str
) -> None:
    """As the batch read skips such a queue, the stream reads none of what it held (it took
    the queue for one made again and read it from its first offset, or failed the query)."""
    namesrv, broker = addrs
    topic = f"TopicSparkPastEnd{fail_on_data_loss}"
    create_topic(broker, topic, 2)
    sent = send(namesrv, topic, 10)
    on = {q: [r.queue_offset for r in sent if r.message_queue.queue_id == q] for q in (0, 1)}
    start = json.dumps({topic: {"broker-a": {"0": 100, "1": 0}}})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    batches = stream_to_parquet(
        spark, namesrv, topic, out, checkpoint,
        startingOffsets=start, failOnDataLoss=fail_on_data_loss,
    )  # fmt: skip
    assert batches == [len(on[1])]
    stored = spark.read.parquet(str(out)).select("queue_id", "queue_offset").collect()
    assert sorted((r.queue_id, r.queue_offset) for r in stored) == [(1, o) for o in on[1]]


def test_a_stream_replays_a_batch_that_did_not_commit_with_the_same_offsets(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """The commit of the last batch is lost (as when the driver dies before it): the restarted
    query reads that batch's exact range again, then the new messages."""
    namesrv, broker = addrs
    topic = "TopicSparkReplay"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 60)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert stream_to_parquet(spark, namesrv, topic, out, checkpoint) == [60]
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    send(namesrv, topic, 10, first=60)
    # As the query was first started.
    seen = stream_batches(
        spark, namesrv, topic, checkpoint, tmp_path / "batches.jsonl", startingOffsets="earliest"
    )
    assert [batch_id for batch_id, _ in seen] == [0, 1]
    assert seen[0][1] == [[q, o] for q in (0, 1) for o in range(30)]
    assert seen[1][1] == [[q, o] for q in (0, 1) for o in range(30, 35)]


@pytest.mark.parametrize("start", ["one queue named", "past the end", "a time after all"])
def test_a_first_batch_that_did_not_commit_is_replayed_from_the_same_start(
    spark: Any, addrs: tuple[str, str], tmp_path: Path, start: str
) -> None:
    """Where a start resolves to a queue's end (a queue the offsets JSON does not name, an
    offset past the end, a start time after every message with strategy latest), the replay
    of the first batch starts where it first did, though the queue has grown since: it read
    the queue from its first offset, messages the stream was to skip."""
    namesrv, broker = addrs
    topic = f"TopicSparkFirstReplay{start.title().replace(' ', '')}"
    create_topic(broker, topic, 2)
    for i in range(10):
        assert send_raw(broker, topic, b"m%d" % i, queue_id=i % 2).code == 0
    options = {
        "one queue named": {"startingOffsets": json.dumps({topic: {"broker-a": {"0": 0}}})},
        "past the end": {"startingOffsets": json.dumps({topic: {"broker-a": {"0": 0, "1": 99}}})},
        "a time after all": {
            "startingTimestamp": str(int(time.time() * 1000) + 3_600_000),
            "startingOffsetsByTimestampStrategy": "latest",
        },
    }[start]
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "batches.jsonl"

    def run() -> list[Any]:
        return stream_batches(spark, namesrv, topic, checkpoint, log, **options)

    first = run()
    read_first = [] if start == "a time after all" else [[0, o] for o in range(5)]
    assert first == [[0, read_first]]
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    for i in range(3):
        assert send_raw(broker, topic, b"n%d" % i, queue_id=1).code == 0
    assert run()[1:] == [[0, read_first], [1, [[1, o] for o in range(5, 8)]]]


def test_a_write_sends_each_row_as_a_message(spark: Any, addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    source, target = "TopicSparkWriteIn", "TopicSparkWriteOut"
    create_topic(broker, source, 2)
    create_topic(broker, target, 2)
    send(namesrv, source, 50)
    df = read(spark, namesrv, source, includeProperties="true").selectExpr(
        "body", "tags", "keys", "properties", f"'{target}' AS topic"
    )
    df.write.format("pyrmq").option("nameServer", namesrv).option("includeProperties", "true").mode(
        "append"
    ).save()
    copied = read(spark, namesrv, target, includeProperties="true").collect()
    assert sorted(int(r.body[1:]) for r in copied) == list(range(50))
    for r in copied:
        i = int(r.body[1:])
        assert (r.tags, r.keys, r.properties) == (f"T{i % 2}", [f"k{i}", "all"], {"n": str(i)})
    with pytest.raises(Exception, match="cannot be overwritten"):
        df.write.format("pyrmq").option("nameServer", namesrv).mode("overwrite").save()
    with pytest.raises(Exception, match="need a body column"):
        df.select("topic").write.format("pyrmq").option("nameServer", namesrv).mode("append").save()


def test_a_stream_from_latest_reads_what_came_after_it_started_and_replays_it_the_same(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """The default start: messages stored before the first run are skipped, later ones are
    read; a lost commit replays the same range even though "latest" has moved since."""
    namesrv, broker = addrs
    topic = "TopicSparkLatest"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 20)
    log = tmp_path / "batches.jsonl"

    def record(batch: Any, batch_id: int) -> None:
        rows = sorted(int(r.body[1:]) for r in batch.collect())
        with log.open("a") as f:
            f.write(json.dumps([batch_id, rows]) + "\n")

    def run() -> list[Any]:
        reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
        query = (
            reader.option("subscribe", topic)
            .load()
            .writeStream.foreachBatch(record)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(240)
        assert query.exception() is None
        return [json.loads(line) for line in log.read_text().splitlines()]

    assert [rows for _, rows in run()] == [[]]  # only fixes the position
    send(namesrv, topic, 6, first=20)
    assert run()[-1] == [1, list(range(20, 26))]
    (tmp_path / "checkpoint" / "commits" / "1").unlink()
    (tmp_path / "checkpoint" / "commits" / ".1.crc").unlink(missing_ok=True)
    send(namesrv, topic, 4, first=26)
    batches = run()[2:]
    assert batches == [[1, list(range(20, 26))], [2, list(range(26, 30))]]


@pytest.mark.parametrize(
    "module",
    [
        "pyrmq.spark",
        "pyrmq.spark.batching",
        "pyrmq.spark.offsets",
        "pyrmq.spark.pushdown",
        "pyrmq.spark.sink",
        "pyrmq.spark.source",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
    if module != "pyrmq.spark":
        assert result.attempted > 0


def test_a_batch_read_with_nothing_to_read_is_empty(spark: Any, addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkEmpty"
    create_topic(broker, topic, 2)
    assert read(spark, namesrv, topic).count() == 0
    send(namesrv, topic, 3)
    # As Spark's Kafka source, a batch does not start at the end: it would read nothing.
    with pytest.raises(Exception, match="startingOffsets can't be latest for a batch read"):
        read(spark, namesrv, topic, startingOffsets="LATEST").count()
    future = str(int(time.time() * 1000) + 3_600_000)
    with pytest.raises(Exception, match="no message of TopicSparkEmpty@broker-a:0 was stored"):
        read(spark, namesrv, topic, startingTimestamp=future).count()
    at_end = {"startingOffsetsByTimestampStrategy": "latest"}
    assert read(spark, namesrv, topic, startingTimestamp=future, **at_end).count() == 0
    # A topic named twice is read once.
    assert read(spark, namesrv, f"{topic}, {topic}").count() == 3


def test_misspelt_options_and_unfit_columns_are_refused(spark: Any, addrs: tuple[str, str]) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkRefused"
    create_topic(broker, topic, 1)
    with pytest.raises(Exception, match=r"unknown option\(s\) maxoffsetpertrigger"):
        read(spark, namesrv, topic, maxOffsetPerTrigger="10").count()
    start = json.dumps({topic: {"broker-a": {"0": 5.9}}})
    with pytest.raises(Exception, match=r"bad offset 5\.9"):
        read(spark, namesrv, topic, startingOffsets=start).count()
    with pytest.raises(Exception, match=r"startingTimestamp must be at most 9223372036854775807"):
        read(spark, namesrv, topic, startingTimestamp="99999999999999999999").count()
    # A stream's options are checked when it is loaded: the message is the query's error,
    # not buried under PySpark's UnboundLocalError once the stream has started.
    stream = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    with pytest.raises(Exception, match=r"unknown option\(s\) maxoffsetspertriger") as raised:
        stream.option("subscribe", topic).option("maxOffsetsPerTriger", "10").load()
    assert "UnboundLocalError" not in str(raised.value)

    def write(df: Any) -> None:
        df.write.format("pyrmq").option("nameServer", namesrv).option("topic", topic).option(
            "includeProperties", "true"
        ).mode("append").save()

    with pytest.raises(Exception, match="column body is bigint"):
        write(spark.range(3).selectExpr("id AS body"))
    with pytest.raises(Exception, match="holds a space"):
        write(spark.range(1).selectExpr("'b' AS body", "array('a', 'b c') AS keys"))
    with pytest.raises(Exception, match="properties DELAY are set by"):
        write(spark.range(1).selectExpr("'b' AS body", "map('DELAY', '3') AS properties"))
    # Nulls inside the columns the schema allows: a clear refusal, not a bare TypeError.
    with pytest.raises(Exception, match="column keys holds a null"):
        write(spark.range(1).selectExpr("'b' AS body", "array('a', null) AS keys"))
    with pytest.raises(Exception, match="column properties holds a null for p"):
        write(
            spark.range(1).selectExpr("'b' AS body", "map('p', CAST(NULL AS STRING)) AS properties")
        )
    assert read(spark, namesrv, topic).count() == 0


def test_big_queues_are_read_by_several_tasks(
    spark: Any, addrs: tuple[str, str], tmp_path: Path
) -> None:
    """``maxRecordsPerPartition`` and ``minPartitions`` cut queue ranges into more Spark
    partitions; every message is still read once, batch or stream."""
    namesrv, broker = addrs
    topic = "TopicSparkSplit"
    create_topic(broker, topic, 2)
    send(namesrv, topic, 100)
    capped = read(spark, namesrv, topic, maxRecordsPerPartition="20")
    assert capped.rdd.getNumPartitions() == 6  # 50 per queue: 17 + 17 + 16
    assert sorted(int(r.body[1:]) for r in capped.collect()) == list(range(100))
    spread = read(spark, namesrv, topic, minPartitions="7")
    assert spread.rdd.getNumPartitions() == 8  # 7 in proportion: 4 per queue, rounded
    assert sorted(int(r.body[1:]) for r in spread.select("body").collect()) == list(range(100))
    with pytest.raises(Exception, match="minPartitions must be at least 1"):
        read(spark, namesrv, topic, minPartitions="0").collect()
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    assert stream_to_parquet(
        spark, namesrv, topic, out, checkpoint, maxRecordsPerPartition="15"
    ) == [100]
    stored = spark.read.parquet(str(out))
    assert sorted(int(r.body[1:]) for r in stored.select("body").collect()) == list(range(100))
