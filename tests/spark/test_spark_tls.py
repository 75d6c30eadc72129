"""The Spark source and sink over TLS (``rocketmq.tls.*``) to a broker that enforces it: the
settings cross to the executors and each task connects with them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import serving
from tests.pki import Pki
from tests.spark.test_spark_source import read, stream_to_parquet

from pyrmq.client.admin import Admin

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TOPIC = "TopicSparkTls"


@pytest.fixture(scope="module")
def tls_addrs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Pki]]:
    root = Path(tmp_path_factory.mktemp("tls"))
    pki = Pki(root)
    settings = pki.properties(root / "tls.properties", tls_server_mode="enforcing")
    with serving(root, "--tls-config", str(settings)) as server:
        namesrv = server.addresses()[0]

        async def create() -> None:
            async with Admin(namesrv, tls=pki.client()) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)

        asyncio.run(create())
        yield namesrv, pki


def test_reads_writes_and_streams_connect_over_tls(
    spark: Any, tls_addrs: tuple[str, Pki], tmp_path: Path
) -> None:
    namesrv, pki = tls_addrs
    tls = {"rocketmq.tls": "true", "rocketmq.tls.caFile": str(pki.ca_file)}
    rows = [f"t{i}" for i in range(40)]
    frame = spark.createDataFrame([(r.encode(),) for r in rows], "body binary")
    writer = frame.write.format("pyrmq").option("nameServer", namesrv).option("topic", TOPIC)
    for key, value in tls.items():
        writer = writer.option(key, value)
    writer.mode("append").save()

    got = read(spark, namesrv, TOPIC, **tls).select("body").collect()
    assert sorted(r.body.decode() for r in got) == sorted(rows)
    counts = stream_to_parquet(
        spark, namesrv, TOPIC, tmp_path / "out", tmp_path / "ckpt", consumerGroup="GID_TLS", **tls
    )
    assert sum(counts) == len(rows)
    # Without TLS the broker closes the connection; with an unknown CA the handshake fails.
    with pytest.raises(Exception, match="closed"):
        read(spark, namesrv, TOPIC).collect()
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        read(spark, namesrv, TOPIC, **{"rocketmq.tls": "true"}).collect()
