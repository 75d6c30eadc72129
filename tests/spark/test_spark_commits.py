"""The exactly-once bookkeeping against a real ``pyrmq serve``, without a SparkSession: a
commit cut short (the driver dies after the commit record, before every half is ended) is
finished by the next commit of the same batch, which rolls its own halves back."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="pyrmq.spark needs pyspark")

from tests.compat.servers import create_topic, serving
from tests.helpers import pull_head
from tests.spark.test_spark_sink import transactions

from pyrmq.client.instance import ClientConfig
from pyrmq.client.transaction import HalfMessage, TransactionProducer
from pyrmq.errors import PyrmqError
from pyrmq.spark import commits, sink
from pyrmq.spark.commits import (
    CommitRecord,
    SinkChecker,
    Written,
    decode_handles,
    encode_handles,
    settle,
)
from pyrmq.spark.options import WriteOptions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_handles_round_trip_in_chunks() -> None:
    halves = [HalfMessage("b", i * 100, i, f"ID{i}", "", "T") for i in range(25_000)]
    chunks = encode_handles(halves, 1234)
    assert len(chunks) == 3
    assert all(len(c) < 4 * 1024 * 1024 for c in chunks)
    back = [h for c in chunks for h in decode_handles(c)[1]]
    assert [(h.commit_log_offset, h.queue_offset, h.msg_id) for h in back] == [
        (h.commit_log_offset, h.queue_offset, h.msg_id) for h in halves
    ]
    assert decode_handles(chunks[0])[0] == 1234


class _CutShort(TransactionProducer):
    """Ends only the first ``reach`` halves: the driver died after that."""

    def __init__(self, *args: Any, reach: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.reach = reach

    async def end(self, half: HalfMessage, state: Any, *, timeout_s: float | None = None) -> None:
        if self.reach <= 0:
            raise PyrmqError("the driver is gone")
        self.reach -= 1
        await super().end(half, state, timeout_s=timeout_s)


def test_a_commit_cut_short_is_finished_by_the_next_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small chunks, so that the replay reads many (a big batch's handles take several).
    monkeypatch.setattr(commits, "HANDLES_PER_CHUNK", 4)
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, "TopicCommitsCut", 1)
        options = WriteOptions.parse(
            {
                "nameServer": namesrv,
                "topic": "TopicCommitsCut",
                "deliveryGuarantee": "exactly_once",
                "commitTopic": "CommitsCut",
            }
        )
        rows = [{"body": f"m{i}".encode()} for i in range(30)]

        async def write(attempt: str) -> Written:
            halves = await sink._send_halves(iter(rows), options, "query-q", 0, attempt)
            return Written(attempt, int(time.time() * 1000), tuple(halves))

        async def scenario() -> None:
            first = await write("a1")
            config = ClientConfig(namesrv_addr=namesrv)
            checker = SinkChecker(options)
            async with _CutShort(
                "spark-pyrmq-sink", checker=checker, client_config=config, reach=10
            ) as dying:
                assert await settle(dying, options, "query-q", 0, [first], commit=True) == 10
            # The replay of the batch: its own attempt, the same rows.
            second = await write("a2")
            async with TransactionProducer(
                "spark-pyrmq-sink", checker=checker, client_config=config
            ) as producer:
                ended = await settle(producer, options, "query-q", 0, [second], commit=True)
                # 20 of the first attempt's committed, all 30 of its own rolled back.
                assert ended == 50
                # Now settled: a third commit ends only its own halves.
                third = await write("a3")
                assert await settle(producer, options, "query-q", 0, [third], commit=True) == 30
                record = await checker.record("query-q", 0)
                # 30 handles, 4 to a chunk.
                assert record == CommitRecord("query-q", 0, {"a1": 8}, "spark-pyrmq-sink")
            await checker.close()
            msgs = (await pull_head(broker, "broker-a", "TopicCommitsCut", 0)).messages
            assert sorted(int(m.body[1:]) for m in msgs) == list(range(30))
            assert {m.id for m in msgs} == {h.msg_id for h in first.halves}

        asyncio.run(asyncio.wait_for(scenario(), 90))
        halves, ended = transactions(broker)
        assert halves == ended == 90


def test_the_record_is_found_with_a_broker_of_the_commit_topic_away(tmp_path: Path) -> None:
    """The record goes to every broker of the commit topic, so a replay that cannot reach one
    of them still finds it and sends nothing twice."""
    from tests.compat.servers import Cluster

    with Cluster(tmp_path) as cluster:
        a = cluster.start("a", "ASYNC_MASTER", "brokerName=broker-a")
        b = cluster.start("b", "ASYNC_MASTER", "brokerName=broker-b")
        create_topic(a, "TopicCommitsTwo", 1)
        # The commit topic is the sink's to create: on both brokers, the record on both.
        options = WriteOptions.parse(
            {
                "nameServer": cluster.namesrv,
                "topic": "TopicCommitsTwo",
                "deliveryGuarantee": "exactly_once",
                "commitTopic": "CommitsTwo",
            }
        )
        rows = [{"body": f"m{i}".encode()} for i in range(10)]
        config = ClientConfig(namesrv_addr=cluster.namesrv)

        async def commit(attempt: str) -> int:
            halves = await sink._send_halves(iter(rows), options, "query-two", 0, attempt)
            written = Written(attempt, int(time.time() * 1000), tuple(halves))
            async with TransactionProducer(
                "spark-pyrmq-sink", checker=SinkChecker(options), client_config=config
            ) as producer:
                return await settle(producer, options, "query-two", 0, [written], commit=True)

        assert asyncio.run(commit("first")) == 10
        for addr in (a, b):
            msgs = asyncio.run(pull_head(addr, "x", "CommitsTwo", 0)).messages
            assert any(m.keys == "query-two:0" for m in msgs), addr
        cluster.procs["b"].kill()

        async def until_gone() -> None:
            from pyrmq.client.admin import Admin

            async with Admin(cluster.namesrv) as admin:
                for _ in range(300):
                    if "broker-b" not in {x.broker_name for x in await admin.clusters()}:
                        return
                    await asyncio.sleep(0.1)
            raise AssertionError("broker-b still registered")

        asyncio.run(until_gone())
        assert asyncio.run(commit("replay")) == 10  # its own, rolled back
        msgs = asyncio.run(pull_head(a, "broker-a", "TopicCommitsTwo", 0)).messages
        assert sorted(int(m.body[1:]) for m in msgs) == list(range(10))


def test_a_commit_refuses_what_it_cannot_commit_safely(tmp_path: Path) -> None:
    """Halves written longer ago than their check immunity allows are rolled back and the
    commit fails (Spark writes the batch again); a replay under another producer group
    than the record's fails clearly and rolls back its own halves."""
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, "TopicCommitsRefused", 1)
        options = WriteOptions.parse(
            {
                "nameServer": namesrv,
                "topic": "TopicCommitsRefused",
                "deliveryGuarantee": "exactly_once",
                "commitTopic": "CommitsRefused",
                "checkImmunitySeconds": "60",
            }
        )
        other = dataclasses.replace(options, producer_group="another-group")
        rows = [{"body": f"m{i}".encode()} for i in range(5)]
        config = ClientConfig(namesrv_addr=namesrv)

        async def write(attempt: str, o: WriteOptions, age_ms: int = 0) -> Written:
            halves = await sink._send_halves(iter(rows), o, "query-r", 0, attempt)
            return Written(attempt, int(time.time() * 1000) - age_ms, tuple(halves))

        async def scenario() -> None:
            checker = SinkChecker(options)
            async with TransactionProducer(
                "spark-pyrmq-sink", checker=checker, client_config=config
            ) as producer:
                stale = await write("stale", options, age_ms=58_000)
                with pytest.raises(PyrmqError, match="too close to checkImmunitySeconds"):
                    await settle(producer, options, "query-r", 0, [stale], commit=True)
                assert await checker.record("query-r", 0) is None
                # Committed under one group and cut short (no end reached)...
                first = await write("first", options)
                async with _CutShort(
                    "spark-pyrmq-sink", checker=checker, client_config=config, reach=0
                ) as dying:
                    await settle(dying, options, "query-r", 0, [first], commit=True)
            # ...replayed under another.
            async with TransactionProducer(
                "another-group", checker=SinkChecker(other), client_config=config
            ) as producer:
                replay = await write("replay", other)
                with pytest.raises(PyrmqError, match="write with producerGroup=spark-pyrmq-sink"):
                    await settle(producer, other, "query-r", 0, [replay], commit=True)
            # The right group finishes it.
            async with TransactionProducer(
                "spark-pyrmq-sink", checker=checker, client_config=config
            ) as producer:
                again = await write("again", options)
                assert await settle(producer, options, "query-r", 0, [again], commit=True) == 10
            await checker.close()
            msgs = (await pull_head(broker, "broker-a", "TopicCommitsRefused", 0)).messages
            assert {m.id for m in msgs} == {h.msg_id for h in first.halves}

        asyncio.run(asyncio.wait_for(scenario(), 90))
        halves, ended = transactions(broker)
        assert halves == ended == 20
