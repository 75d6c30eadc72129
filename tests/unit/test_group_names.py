"""Group names RocketMQ's clients refuse at start: refused before anything connects, by the
asyncio clients and by the blocking ones (as their start failure)."""

from __future__ import annotations

import asyncio

import pytest

from pyrmq.client import blocking, exceptions
from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import ConfigError

# Nothing listens there: a check that came after connecting would fail otherwise.
NOWHERE = "127.0.0.1:1"

BAD = [
    ("", "blank|empty"),
    ("   ", "blank"),
    ("bad group", "illegal characters"),
    ("grp/1", "illegal characters"),
    ("g" * 256, "over 255"),
]


@pytest.mark.parametrize(("group", "words"), [*BAD, ("DEFAULT_PRODUCER", "name another")])
def test_a_producer_refuses_a_group_rocketmq_refuses(group: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        asyncio.run(Producer(group, NOWHERE).start())
    with pytest.raises(exceptions.ProducerStartFailed, match=words):
        blocking.Producer(group).start()


@pytest.mark.parametrize(("group", "words"), [*BAD, ("DEFAULT_CONSUMER", "name another")])
def test_consumers_refuse_a_group_rocketmq_refuses(group: str, words: str) -> None:
    async def start_push() -> None:
        consumer = PushConsumer(group, NOWHERE)
        consumer.subscribe("TopicA", "*")
        await consumer.start()

    with pytest.raises(ConfigError, match=words):
        asyncio.run(start_push())
    with pytest.raises(ConfigError, match=words):
        asyncio.run(LitePullConsumer(group, NOWHERE).start())


def test_a_group_of_the_legal_characters_is_taken() -> None:
    async def start_and_stop() -> None:
        producer = Producer("ns%PG_legal|name-1", NOWHERE)
        await producer.start()
        await producer.shutdown()

    asyncio.run(start_and_stop())
