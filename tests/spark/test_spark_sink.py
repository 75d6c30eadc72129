"""The ``pyrmq`` sink through a real SparkSession (local[2]) against a real ``pyrmq serve``
whose broker checks open transactions every half second: streaming writes at least once and
exactly once, a micro-batch replayed after its checkpoint entry was lost, a task that fails
mid-write, and batch writes that commit or leave nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import create_topic, serving
from tests.spark.test_spark_source import read, send

from pyrmq.client.api import ClientAPI
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.client import RemotingClient

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

HALF_TOPIC, OP_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"


@pytest.fixture(scope="module")
def tx_addrs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(name server, broker) of a ``pyrmq serve`` that checks open halves 1 s after they
    were stored, every 0.5 s, and never gives one up."""
    root = Path(tmp_path_factory.mktemp("sink"))
    conf = root / "broker.conf"
    conf.write_text(
        "transactionTimeOut=1000\ntransactionCheckInterval=500\ntransactionCheckMax=100000\n"
    )
    with serving(root, "-c", str(conf)) as server:
        yield server.addresses()


def bodies(spark: Any, namesrv: str, topic: str) -> list[int]:
    """The numbers ``i`` of the ``m<i>`` bodies in ``topic``, sorted, duplicates kept."""
    return sorted(int(r.body[1:]) for r in read(spark, namesrv, topic).select("body").collect())


def transactions(broker: str) -> tuple[int, int]:
    """(halves stored, halves ended) on the broker: RocketMQ writes one op record per end."""

    async def ask() -> tuple[int, int]:
        remoting = RemotingClient()
        api = ClientAPI(remoting)
        try:
            counts = []
            for topic in (HALF_TOPIC, OP_TOPIC):
                try:
                    counts.append(await api.max_offset(broker, MessageQueue(topic, "", 0)))
                except Exception:
                    counts.append(0)
            return counts[0], counts[1]
        finally:
            await remoting.close()

    return asyncio.run(ask())


def stream_copy(
    spark: Any,
    namesrv: str,
    source: str,
    target: str,
    checkpoint: Path,
    *,
    body: str = "body",
    keys: str = "keys",
    trigger: dict[str, Any] | None = None,
    **options: str,
) -> Any:
    """Starts a query copying ``source`` to ``target`` through the sink."""
    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    frame = reader.option("subscribe", source).option("startingOffsets", "earliest").load()
    writer = (
        frame.selectExpr(f"{body} AS body", f"{keys} AS keys", "tags")
        .writeStream.format("pyrmq")
        .option("nameServer", namesrv)
        .option("topic", target)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(**(trigger or {"availableNow": True})).start()


def finish(query: Any) -> None:
    query.awaitTermination(240)
    assert query.exception() is None, query.exception()


def prepare(addrs: tuple[str, str], name: str, count: int) -> tuple[str, str]:
    """Topics ``<name>In`` (with ``count`` messages) and ``<name>Out``, two queues each."""
    namesrv, broker = addrs
    source, target = f"{name}In", f"{name}Out"
    create_topic(broker, source, 2)
    create_topic(broker, target, 2)
    send(namesrv, source, count)
    return source, target


def forget_commit(checkpoint: Path, batch: int) -> None:
    """As when the driver dies after the sink committed but before Spark noted it."""
    (checkpoint / "commits" / str(batch)).unlink()
    (checkpoint / "commits" / f".{batch}.crc").unlink(missing_ok=True)


def test_at_least_once_a_replayed_micro_batch_is_sent_again(
    spark: Any, tx_addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, _ = tx_addrs
    source, target = prepare(tx_addrs, "TopicSinkAlo", 40)
    checkpoint = tmp_path / "checkpoint"
    finish(stream_copy(spark, namesrv, source, target, checkpoint))
    assert bodies(spark, namesrv, target) == list(range(40))
    forget_commit(checkpoint, 0)
    finish(stream_copy(spark, namesrv, source, target, checkpoint))
    assert bodies(spark, namesrv, target) == sorted(list(range(40)) * 2)


def test_exactly_once_a_replayed_micro_batch_is_sent_once(
    spark: Any, tx_addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, broker = tx_addrs
    source, target = prepare(tx_addrs, "TopicSinkEo", 40)
    checkpoint = tmp_path / "checkpoint"
    eo = {"deliveryGuarantee": "exactly_once"}
    finish(stream_copy(spark, namesrv, source, target, checkpoint, **eo))
    assert bodies(spark, namesrv, target) == list(range(40))
    forget_commit(checkpoint, 0)
    finish(stream_copy(spark, namesrv, source, target, checkpoint, **eo))
    assert bodies(spark, namesrv, target) == list(range(40))
    send(namesrv, source, 10, first=40)
    finish(stream_copy(spark, namesrv, source, target, checkpoint, **eo))
    copied = read(spark, namesrv, target, includeProperties="true").collect()
    assert sorted(int(r.body[1:]) for r in copied) == list(range(50))
    # The sink's and the transaction's properties stay out of the rows.
    assert {json.dumps(r.properties) for r in copied} == {"{}"}
    assert all(r.keys is not None and r.keys[-1] == "all" for r in copied)
    # The replay's halves were rolled back, not left for the broker to give up.
    halves, ended = transactions(broker)
    assert halves >= 90
    assert ended == halves


def test_exactly_once_a_task_that_fails_mid_write_leaves_nothing_delivered(
    spark: Any, tx_addrs: tuple[str, str], tmp_path: Path
) -> None:
    """One task fails at a row late in its partition (a key with a space, which the sink
    refuses), after it sent the rows before as halves: the query fails and nothing is
    delivered. Run again, the micro-batch is delivered once, and the failed attempt's halves
    are rolled back when the broker checks them with the running query."""
    from pyspark.sql.functions import udf
    from pyspark.sql.types import ArrayType, StringType

    namesrv, broker = tx_addrs
    source, target = prepare(tx_addrs, "TopicSinkFail", 200)
    flag = tmp_path / "failed-once"

    def keys_once(body: bytes) -> list[str]:
        # m190 is the 96th row of its queue's partition.
        if body == b"m190" and not flag.exists():
            flag.touch()
            return ["bad key"]
        return ["ok"]

    spark.udf.register("keys_once", udf(keys_once, ArrayType(StringType()), useArrow=False))
    checkpoint = tmp_path / "checkpoint"
    before = transactions(broker)[0]
    query = stream_copy(
        spark,
        namesrv,
        source,
        target,
        checkpoint,
        keys="keys_once(body)",
        deliveryGuarantee="exactly_once",
        checkImmunitySeconds="10",
    )
    with pytest.raises(Exception, match="holds a space"):
        query.awaitTermination(240)
    assert flag.exists()
    assert transactions(broker)[0] > before  # halves were sent before the failure
    assert bodies(spark, namesrv, target) == []
    query = stream_copy(
        spark,
        namesrv,
        source,
        target,
        checkpoint,
        keys="keys_once(body)",
        trigger={"processingTime": "1 second"},
        deliveryGuarantee="exactly_once",
        checkImmunitySeconds="10",
    )
    try:
        # The failed attempt's halves are first checked 10 s after they were written.
        deadline = asyncio.run(_deadline(90))
        while True:
            halves, ended = transactions(broker)
            if halves == ended and len(bodies(spark, namesrv, target)) == 200:
                break
            assert asyncio.run(_deadline(0)) < deadline, f"{ended} of {halves} halves ended"
            query.awaitTermination(0.5)
            assert query.exception() is None, query.exception()
    finally:
        query.stop()
    assert bodies(spark, namesrv, target) == list(range(200))


async def _deadline(after_s: float) -> float:
    return asyncio.get_running_loop().time() + after_s


def test_exactly_once_batch_writes_commit_whole_or_not_at_all(
    spark: Any, tx_addrs: tuple[str, str], tmp_path: Path
) -> None:
    from pyspark.sql.functions import udf
    from pyspark.sql.types import StringType

    namesrv, broker = tx_addrs
    target = "TopicSinkBatchEo"
    create_topic(broker, target, 2)

    def write(df: Any) -> None:
        df.write.format("pyrmq").option("nameServer", namesrv).option("topic", target).option(
            "deliveryGuarantee", "exactly_once"
        ).mode("append").save()

    write(spark.range(0, 30, numPartitions=3).selectExpr("concat('m', id) AS body"))
    assert bodies(spark, namesrv, target) == list(range(30))

    def boom(n: int) -> str:
        if n == 55:
            raise RuntimeError("the job failed on purpose")
        return f"m{n}"

    spark.udf.register("boom", udf(boom, StringType(), useArrow=False))
    # Three partitions; the last fails after the others may have sent all their rows.
    failing = spark.range(30, 60, numPartitions=3).selectExpr("boom(id) AS body")
    with pytest.raises(Exception, match="the job failed on purpose"):
        write(failing)
    assert bodies(spark, namesrv, target) == list(range(30))
    # The broker checks the failed task's halves meanwhile: they stay undelivered.
    time.sleep(2.0)
    write(spark.range(60, 70, numPartitions=2).selectExpr("concat('m', id) AS body"))
    assert bodies(spark, namesrv, target) == [*range(30), *range(60, 70)]


@pytest.mark.parametrize("delivery", ["at_least_once", "exactly_once"])
def test_rows_go_to_the_queue_they_name_in_order(
    spark: Any, tx_addrs: tuple[str, str], delivery: str
) -> None:
    """``queueSelector=hash`` puts each sharding key on one queue (``hash % 4`` as Java
    producers pick it), its rows in the partition's order; a ``queue_id`` column wins."""
    from pyrmq import _core

    namesrv, broker = tx_addrs
    target = f"TopicSinkPlaced{delivery.split('_')[0].title()}"
    create_topic(broker, target, 4)

    def write(df: Any, **options: str) -> None:
        writer = df.write.format("pyrmq").option("nameServer", namesrv).option("topic", target)
        for key, value in {"deliveryGuarantee": delivery, **options}.items():
            writer = writer.option(key, value)
        writer.mode("append").save()

    rows = spark.range(0, 300, numPartitions=2).selectExpr(
        "concat('m', id) AS body", "concat('order-', id % 7) AS sharding_key"
    )
    write(rows, queueSelector="hash")
    stored = read(spark, namesrv, target).select("body", "queue_id", "queue_offset").collect()
    assert len(stored) == 300
    by_key: dict[str, list[tuple[int, int, int]]] = {}
    for r in stored:
        n = int(r.body[1:])
        by_key.setdefault(f"order-{n % 7}", []).append((r.queue_offset, n, r.queue_id))
    for key, placed in by_key.items():
        assert {q for _, _, q in placed} == {abs(_core.java_string_hash(key)) % 4}, key
        # Within each partition (ids 0-149, 150-299) in order of id.
        for half in (range(0, 150), range(150, 300)):
            ids = [n for _, n, _ in sorted(placed) if n in half]
            assert ids == sorted(ids), key
    pinned = spark.range(300, 320, numPartitions=2).selectExpr(
        "concat('m', id) AS body", "CAST(id % 2 + 2 AS INT) AS queue_id"
    )
    write(pinned)
    stored = read(spark, namesrv, target).select("body", "queue_id").collect()
    assert {(int(r.body[1:]), r.queue_id) for r in stored if int(r.body[1:]) >= 300} == {
        (n, n % 2 + 2) for n in range(300, 320)
    }
    with pytest.raises(Exception, match="has no writable queue 9"):
        write(spark.range(1).selectExpr("'x' AS body", "9 AS queue_id"))


def test_rows_with_a_delay_arrive_when_due(spark: Any, tx_addrs: tuple[str, str]) -> None:
    """``delay_ms`` and ``deliver_time`` columns make timer messages (RocketMQ 5's
    TIMER_DELAY_MS / TIMER_DELIVER_MS), held back until due; not with exactly once."""
    namesrv, broker = tx_addrs
    target = "TopicSinkDelayed"
    create_topic(broker, target, 2)
    due_ms = int(time.time() * 1000) + 6000
    frame = spark.range(0, 12, numPartitions=2).selectExpr(
        "concat('m', id) AS body",
        "IF(id < 6, 3000, NULL) AS delay_ms",
        f"IF(id >= 6, timestamp_millis({due_ms}), NULL) AS deliver_time",
    )
    writer = frame.write.format("pyrmq").option("nameServer", namesrv).option("topic", target)
    writer.mode("append").save()
    deadline = time.monotonic() + 30
    while (got := bodies(spark, namesrv, target)) != list(range(12)):
        assert time.monotonic() < deadline, got
        time.sleep(0.5)
    # Stored in the topic when due, never before.
    for r in read(spark, namesrv, target).collect():
        stored_ms = r.store_timestamp.timestamp() * 1000
        if int(r.body[1:]) < 6:
            held = stored_ms - r.born_timestamp.timestamp() * 1000
            assert 3000 <= held < 15_000, (r.body, held)
        else:
            assert due_ms <= stored_ms < due_ms + 15_000, (r.body, stored_ms - due_ms)
    with pytest.raises(Exception, match="delayed messages cannot be written exactly once"):
        writer.option("deliveryGuarantee", "exactly_once").mode("append").save()


def test_rows_a_broker_refuses_in_batches_go_one_by_one(spark: Any, tmp_path: Path) -> None:
    """A broker with a low ``maxMessageSize`` refuses a batch of rows it takes one by one:
    the write goes on without batches, each row once, placed ones in order."""
    conf = tmp_path / "broker.conf"
    conf.write_text("maxMessageSize=65536\n")
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        target = "TopicSinkSmallMax"
        create_topic(broker, target, 2)
        rows = spark.range(0, 100, numPartitions=2).selectExpr(
            "concat(cast(id AS STRING), ':', repeat('x', 4000)) AS body",
            "CAST(id % 2 AS INT) AS queue_id",
        )
        for placed in (False, True):
            frame = rows if placed else rows.drop("queue_id")
            frame.write.format("pyrmq").option("nameServer", namesrv).option("topic", target).mode(
                "append"
            ).save()
        stored = read(spark, namesrv, target).select("body", "queue_id", "queue_offset").collect()
    ids = [(int(r.body.split(b":")[0]), r.queue_id, r.queue_offset) for r in stored]
    assert sorted(n for n, _, _ in ids) == sorted([*range(100), *range(100)])
    # The placed copy, written last: the last 50 of each queue, each partition's in order.
    for queue in (0, 1):
        mine = [n for n, q, _ in sorted(ids, key=lambda t: t[2]) if q == queue]
        second = mine[len(mine) - 50 :]
        assert all(n % 2 == queue for n in second)
        for part in (range(0, 50), range(50, 100)):
            in_part = [n for n in second if n in part]
            assert in_part == sorted(in_part)
