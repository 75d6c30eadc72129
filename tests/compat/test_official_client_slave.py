"""The official RocketMQ client (``rocketmq==0.4.4``, C++ 1.2.3) with a pyrmq master and slave:
its sends to a SYNC_MASTER are answered once the slave has them, and once the master is killed
its push consumer reads every one of them from the slave."""

from __future__ import annotations

import collections
import platform
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .rmq_client import run_producer, start_push_consumer
from .servers import Cluster

pytestmark = [
    pytest.mark.compat,
    pytest.mark.slow,
    pytest.mark.timeout(150),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path) as c:
        yield c


def test_the_official_consumer_reads_from_the_slave_once_the_master_is_killed(
    cluster: Cluster,
) -> None:
    cluster.start("master", "SYNC_MASTER")
    cluster.start("slave", "SLAVE")
    topic, count = "TopicOfficialSlave", 120
    messages = [f"slave-{i}" for i in range(count)]
    sent = run_producer(cluster.namesrv, topic, messages)
    # SEND_OK from a SYNC_MASTER: the slave has each of them.
    assert [s["status"] for s in sent] == ["SEND_OK"] * count
    cluster.procs["master"].kill()
    with start_push_consumer(
        cluster.namesrv, topic, group="CG_OFFICIAL_SLAVE", expected=count, timeout=90
    ) as consumer:
        got = consumer.wait_for(count, timeout=60)
        assert not consumer.errors()
    bodies = collections.Counter(m["body"] for m in got)
    assert set(bodies) == {m.encode() for m in messages}
    assert {m["msg_id"] for m in got} == {s["msg_id"] for s in sent}
