"""The Spark source and sink against a broker with RocketMQ's plain ACL: requests signed with
the account of ``rocketmq.accessKey``/``rocketmq.secretKey``, refused without it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from tests.compat.servers import serving
from tests.spark.test_spark_source import read, stream_to_parquet

from pyrmq.acl import Credentials
from pyrmq.client.admin import Admin
from pyrmq.spark.options import ReadOptions
from pyrmq.spark.source import RocketMQStreamReader

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TOPIC = "TopicSparkAcl"
GROUP = "GID_SPARK_ACL"
ADMIN = Credentials("adminuser", "admin-secret")
WRITER = {"rocketmq.accessKey": "writer1", "rocketmq.secretKey": "writer-secret"}
READER = {"rocketmq.accessKey": "reader1", "rocketmq.secretKey": "reader-secret"}

PLAIN = f"""
accounts:
  - accessKey: writer1
    secretKey: writer-secret
    topicPerms: [{TOPIC}=PUB]
  - accessKey: reader1
    secretKey: reader-secret
    topicPerms: [{TOPIC}=SUB]
    groupPerms: [{GROUP}=SUB]
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


@pytest.fixture(scope="module")
def acl_addrs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    root = Path(tmp_path_factory.mktemp("acl"))
    (root / "plain_acl.yml").write_text(PLAIN)
    with serving(root, "--acl", str(root / "plain_acl.yml")) as server:
        namesrv, broker = server.addresses()

        async def create() -> None:
            async with Admin(namesrv, credentials=ADMIN) as admin:
                await admin.create_topic(TOPIC, queue_nums=2, broker_addr=broker)

        asyncio.run(create())
        yield namesrv, broker


def _write(spark: Any, namesrv: str, rows: list[str], **options: str) -> None:
    frame = spark.createDataFrame([(r.encode(),) for r in rows], "body binary")
    writer = frame.write.format("pyrmq").option("nameServer", namesrv).option("topic", TOPIC)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def test_reads_and_writes_sign_with_the_account_they_are_given(
    spark: Any, acl_addrs: tuple[str, str], tmp_path: Path
) -> None:
    namesrv, _ = acl_addrs
    rows = [f"r{i}" for i in range(50)]
    _write(spark, namesrv, rows, **WRITER)
    with pytest.raises(Exception, match="No accessKey is configured"):
        _write(spark, namesrv, ["unsigned"])
    with pytest.raises(Exception, match=f"No PUB permission for topic {TOPIC}"):
        _write(spark, namesrv, ["as the reader"], **READER)

    # Pulls name the read's consumer group, which the account must be allowed to consume as.
    got = read(spark, namesrv, TOPIC, consumerGroup=GROUP, **READER).select("body").collect()
    assert sorted(r.body.decode() for r in got) == sorted(rows)
    with pytest.raises(Exception, match="No SUB permission for group spark-pyrmq-source"):
        read(spark, namesrv, TOPIC, **READER).collect()
    with pytest.raises(Exception, match="No accessKey is configured"):
        read(spark, namesrv, TOPIC).collect()
    with pytest.raises(Exception, match=f"No SUB permission for topic {TOPIC}"):
        read(spark, namesrv, TOPIC, consumerGroup=GROUP, **WRITER).collect()

    # A stream stores its progress as the group's offsets: the reader's group may.
    counts = stream_to_parquet(
        spark, namesrv, TOPIC, tmp_path / "out", tmp_path / "ckpt", consumerGroup=GROUP, **READER
    )
    assert sum(counts) == len(rows)

    async def lag() -> int:
        async with Admin(namesrv, credentials=ADMIN) as admin:
            return (await admin.consume_stats(GROUP, TOPIC)).lag

    # Spark leaves the last batch's commit out; a stream's commit of every queue's end stores
    # the group's offsets, signed as the reader (as the writer, only a warning).
    end = {"startingOffsets": "latest"} | READER | {"consumerGroup": GROUP, "subscribe": TOPIC}
    as_writer = {**end, **WRITER}
    for options in (as_writer, end):
        reader = RocketMQStreamReader(
            ReadOptions.parse({"nameServer": namesrv, **options}, "stream")
        )
        reader.commit(reader.latestOffset(reader.initialOffset(), ReadAllAvailable()))
        assert asyncio.run(lag()) == (len(rows) if options is as_writer else 0)


def test_an_access_key_needs_its_secret(spark: Any, acl_addrs: tuple[str, str]) -> None:
    namesrv, _ = acl_addrs
    with pytest.raises(Exception, match=r"rocketmq\.accessKey and rocketmq\.secretKey go together"):
        read(spark, namesrv, TOPIC, **{"rocketmq.accessKey": "reader1"}).collect()
