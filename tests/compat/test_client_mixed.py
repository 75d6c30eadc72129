"""pyrmq's asyncio Producer and the official RocketMQ 4.x client (``rocketmq==0.4.4``, C++ 1.2.3
inside) on one real ``pyrmq serve`` process: what our producer sends, the official push
consumer receives exactly (body, tags, keys, properties, message id)."""

from __future__ import annotations

import asyncio
import platform
import sys
import time
from collections import Counter
from typing import Any

import pytest

from pyrmq.client.message import Message, SendResult
from pyrmq.client.producer import Producer

from .rmq_client import PushConsumerHandle, start_push_consumer
from .servers import ServerProcess, create_topic

pytestmark = [
    pytest.mark.compat,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]


def send_all(namesrv: str, build: Any) -> Any:
    """Runs ``build(producer)`` (a coroutine function) with a started Producer."""

    async def main() -> Any:
        async with Producer("PG_MIXED", namesrv, send_timeout_s=5.0) as producer:
            return await build(producer)

    return asyncio.run(asyncio.wait_for(main(), 30))


def wait_until_consuming(consumer: PushConsumerHandle, namesrv: str, topic: str) -> None:
    """Sends probes until the consumer gets one: a new group starts at the queues' ends once it
    has them, so messages sent before its first rebalance would never reach it."""
    deadline = time.monotonic() + 40
    n = 0
    while time.monotonic() < deadline:

        async def probe(p: Producer, body: bytes = f"probe-{n}".encode()) -> None:
            await p.send(Message(topic, body, tags="Probe"))

        send_all(namesrv, probe)
        n += 1
        for _ in range(10):
            if any(m["body"].startswith(b"probe-") for m in consumer.messages()):
                return
            time.sleep(0.1)
    raise AssertionError(f"the push consumer got no probe within 40 s: {consumer.errors()}")


def test_official_push_consumer_receives_what_our_producer_sent_exactly(
    serve_process: ServerProcess,
) -> None:
    namesrv, broker = serve_process.addresses()[:2]
    topic = "TopicMixed"
    create_topic(broker, topic, 4)
    big = "".join(f"line {i:05d}: a body the producer compresses\n" for i in range(300))
    assert len(big) > 4096

    singles = [
        Message(
            topic,
            f"mixed-{i}".encode(),
            tags=f"Tag{i % 2}",
            keys=[f"k{i}", f"kk{i}"],
            properties={"custom": f"v{i}", "region": "eu"},
        )
        for i in range(6)
    ]
    large = Message(topic, big, tags="Big", keys=["kbig"], properties={"custom": "vbig"})
    batch = [
        Message(
            topic,
            f"batch-{i}".encode(),
            tags="TagB",
            keys=[f"kb{i}"],
            properties={"custom": f"vb{i}", "region": "us"},
        )
        for i in range(5)
    ]

    async def produce(p: Producer) -> list[SendResult]:
        results = [await p.send(m) for m in singles]
        results.append(await p.send(large))
        results.append(await p.send_batch(batch))
        return results

    with start_push_consumer(
        namesrv, topic, group="CG_MIXED", property_keys=["custom", "region"], timeout=120
    ) as consumer:
        wait_until_consuming(consumer, namesrv, topic)
        results = send_all(namesrv, produce)
        sent = [*singles, large, *batch]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = [m for m in consumer.messages() if not m["body"].startswith(b"probe-")]
            if len(got) >= len(sent):
                break
            time.sleep(0.1)
        time.sleep(1.0)  # anything delivered twice would show up now
        got = [m for m in consumer.messages() if not m["body"].startswith(b"probe-")]
        errors = consumer.errors()

    assert errors == []
    ids = [m.properties["UNIQ_KEY"] for m in sent]
    assert [r.msg_id for r in results[:7]] == ids[:7]
    assert results[7].msg_id.split(",") == ids[7:]
    assert Counter(m["msg_id"] for m in got) == Counter(ids), "each message exactly once"
    by_id = {m["msg_id"]: m for m in got}
    for msg in sent:
        m = by_id[msg.properties["UNIQ_KEY"]]
        assert m["topic"] == topic
        assert m["body"] == msg.body
        assert m["tags"] == msg.tags
        assert m["keys"] == msg.keys
        assert m["properties"]["custom"] == msg.properties["custom"]
        assert m["properties"]["UNIQ_KEY"] == msg.properties["UNIQ_KEY"]
        assert m["properties"].get("region") == msg.properties.get("region")
        assert m["reconsume_times"] == 0
    # The batch is stored in one queue, in order.
    batch_got = [by_id[m.properties["UNIQ_KEY"]] for m in batch]
    assert len({m["queue_id"] for m in batch_got}) == 1
    offsets = [m["queue_offset"] for m in batch_got]
    assert offsets == list(range(offsets[0], offsets[0] + 5))
    assert offsets[0] == results[7].offset
