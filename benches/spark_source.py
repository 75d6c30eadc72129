"""The Spark source's read rate, against the same pulls without Spark, in one run.

    python benches/spark_source.py            # 200,000 rows, three interleaved rounds
    python benches/spark_source.py --quick    # 5,000 rows, one round (CI smoke)

One ``pyrmq serve`` (ASYNC_FLUSH, temporary store, ephemeral ports) and one SparkSession
(``local[2]``). A topic of four queues holds 100 B bodies written by the sink. Each round reads
all of it three ways:

- ``pulls``: the source's own range reads (the Arrow batches its tasks return), the four
  queues one after another in this process: the rate Spark's tasks could at most reach one at a
  time;
- ``batch``: ``spark.read`` of the topic, ``count(*)`` and ``sum(length(body))`` (every row and
  body reaches the JVM);
- ``stream``: an ``availableNow`` query over the topic into Spark's ``noop`` sink, checkpoint
  included.

Reported only: rows/s and MB/s of bodies, and each Spark rate over the ``pulls`` rate of the
same round (two tasks run at once on two vCPUs, beside the broker).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.servers import create_topic, serving

from benches.spark_session import local_session

TOPIC = "BenchSparkSource"
BODY = 100
WAYS = ("pulls", "batch", "stream")


def pulls(namesrv: str) -> int:
    from pyrmq.spark.options import ReadOptions
    from pyrmq.spark.source import RocketMQBatchReader, read_range

    options = ReadOptions.parse({"nameServer": namesrv, "subscribe": TOPIC}, "batch")
    reader = RocketMQBatchReader(options)
    return sum(b.num_rows for p in reader.partitions() for b in read_range(options, p))  # type: ignore[arg-type]


def batch(spark: Any, namesrv: str) -> int:
    frame = spark.read.format("pyrmq").option("nameServer", namesrv).option("subscribe", TOPIC)
    count, size = frame.load().selectExpr("count(*)", "sum(length(body))").collect()[0]
    assert size == count * BODY
    return int(count)


def stream(spark: Any, namesrv: str, checkpoint: Path) -> int:
    reader = spark.readStream.format("pyrmq").option("nameServer", namesrv)
    query = (
        reader.option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(600)
    assert query.exception() is None
    return sum(p["numInputRows"] for p in query.recentProgress)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5,000 rows, one round")
    args = parser.parse_args(argv)
    rows, rounds = (5_000, 1) if args.quick else (200_000, 3)
    spark = local_session()
    try:
        with (
            tempfile.TemporaryDirectory() as root,
            serving(Path(root), "--log-level", "WARNING") as server,
        ):
            namesrv, broker = server.addresses()
            create_topic(broker, TOPIC, 4)
            frame = spark.range(0, rows, numPartitions=2).selectExpr(f"repeat('x', {BODY}) AS body")
            frame.write.format("pyrmq").option("nameServer", namesrv).option("topic", TOPIC).mode(
                "append"
            ).save()
            checkpoints = iter(range(1_000))

            def timed(way: str) -> float:
                started = time.perf_counter()
                if way == "pulls":
                    got = pulls(namesrv)
                elif way == "batch":
                    got = batch(spark, namesrv)
                else:
                    got = stream(spark, namesrv, Path(root) / f"ckpt-{next(checkpoints)}")
                took = time.perf_counter() - started
                assert got == rows, (way, got)
                return took

            timed("batch")  # warm-up: JVM, workers
            print("| round | " + " | ".join(WAYS) + " | batch / pulls | stream / pulls |")
            print("| ---: |" + " ---: |" * (len(WAYS) + 2))
            for n in range(rounds):
                took = {way: timed(way) for way in WAYS}
                rates = [
                    f"{rows / took[w]:,.0f} rows/s ({rows * BODY / took[w] / 1e6:.1f} MB/s)"
                    for w in WAYS
                ]
                ratios = [f"{took['pulls'] / took[w]:.2f}x" for w in ("batch", "stream")]
                print(f"| {n + 1} | {' | '.join(rates + ratios)} |", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
