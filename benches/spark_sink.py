"""The Spark sink's write rate, at least once against exactly once, in one run.

    python benches/spark_sink.py            # 50,000 rows, three interleaved rounds
    python benches/spark_sink.py --quick    # 2,000 rows, one round (CI smoke)

One ``pyrmq serve`` (ASYNC_FLUSH, temporary store, ephemeral ports) and one SparkSession
(``local[2]``). A cached DataFrame of 100 B bodies in two partitions is written to a topic of
four queues with ``deliveryGuarantee=at_least_once`` and then ``exactly_once``, after one
warm-up write of each; rows/s is rows over the wall time of ``save()``, commit included. The
exactly-once write sends each row as a transactional half, stores the halves' handles and the
commit record, and ends every half. Reported only: the note is the exactly-once rate over the
at-least-once rate of the same round.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.servers import create_topic, serving

from benches.spark_session import local_session

MODES = ("at_least_once", "exactly_once")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 rows, one round")
    args = parser.parse_args(argv)
    rows, rounds = (2_000, 1) if args.quick else (50_000, 3)
    spark = local_session()
    try:
        with (
            tempfile.TemporaryDirectory() as root,
            serving(Path(root), "--log-level", "WARNING") as server,
        ):
            namesrv, broker = server.addresses()
            create_topic(broker, "BenchSparkSink", 4)
            frame = spark.range(0, rows, numPartitions=2).selectExpr("repeat('x', 100) AS body")
            frame = frame.cache()
            frame.count()

            def write(mode: str) -> float:
                started = time.perf_counter()
                frame.write.format("pyrmq").option("nameServer", namesrv).option(
                    "topic", "BenchSparkSink"
                ).option("deliveryGuarantee", mode).mode("append").save()
                return time.perf_counter() - started

            for mode in MODES:
                write(mode)
            print(f"| round | {' | '.join(MODES)} | exactly / at least |")
            print("| ---: | ---: | ---: | ---: |")
            for n in range(rounds):
                took = {mode: write(mode) for mode in MODES}
                rates = [f"{rows / took[m]:,.0f} rows/s" for m in MODES]
                ratio = took["at_least_once"] / took["exactly_once"]
                print(f"| {n + 1} | {' | '.join(rates)} | {ratio:.2f}x |", flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
