"""Queue allocation strategies: each queue goes to exactly one member, and the consistent-hash
ring gives the shares RocketMQ's Java client gives, so a group mixing both agrees."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pyrmq.client.allocate import (
    AllocateConsistentHash,
    allocate_averagely,
    allocate_averagely_by_circle,
)
from pyrmq.client.message import MessageQueue

STRATEGIES = [allocate_averagely, allocate_averagely_by_circle, AllocateConsistentHash()]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=["averagely", "by-circle", "hash"])
@given(
    queues=st.integers(0, 40),
    cids=st.lists(st.from_regex(r"10\.0\.0\.[0-9]{1,3}@[0-9]{1,5}", fullmatch=True), min_size=1,
                  max_size=12, unique=True),
)  # fmt: skip
def test_every_queue_goes_to_exactly_one_member(strategy, queues: int, cids: list[str]) -> None:
    mqs = [MessageQueue("TopicAlloc", "broker-a", i) for i in range(queues)]
    cids = sorted(cids)
    shares = [strategy("CG", cid, mqs, cids) for cid in cids]
    assert sorted((q for share in shares for q in share), key=lambda q: q.queue_id) == mqs
    assert strategy("CG", "10.0.0.1@not-a-member", mqs, cids) == []


# Shares from RocketMQ 4.9.7's AllocateMessageQueueConsistentHash (10 virtual nodes), queue id
# -> client id.
JAVA_SHARES = [
    (
        "T",
        "broker-a",
        ["127.0.0.1@111", "127.0.0.1@222", "127.0.0.1@333"],
        ["127.0.0.1@333", "127.0.0.1@333", "127.0.0.1@111", "127.0.0.1@111",
         "127.0.0.1@222", "127.0.0.1@111", "127.0.0.1@222", "127.0.0.1@111"],
    ),
    (
        "TopicTest",
        "broker-b",
        ["10.0.0.5@4242", "10.0.0.6@4242", "10.0.0.7@777", "10.0.0.8@1"],
        ["10.0.0.6@4242", "10.0.0.5@4242", "10.0.0.6@4242", "10.0.0.7@777",
         "10.0.0.7@777", "10.0.0.6@4242", "10.0.0.5@4242", "10.0.0.8@1",
         "10.0.0.6@4242", "10.0.0.6@4242", "10.0.0.7@777", "10.0.0.5@4242"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("topic", "broker", "cids", "owners"), JAVA_SHARES)
def test_the_hash_ring_shares_queues_as_rocketmqs_java_client(
    topic: str, broker: str, cids: list[str], owners: list[str]
) -> None:
    mqs = [MessageQueue(topic, broker, i) for i in range(len(owners))]
    ring = AllocateConsistentHash()
    got = {mq.queue_id: cid for cid in cids for mq in ring("CG", cid, mqs, cids)}
    assert [got[i] for i in range(len(owners))] == owners
