"""The official RocketMQ 4.x client (``rocketmq==0.4.4``, C++ 1.2.3 inside) as the consumer an
admin tool reaches through the broker: C++ 1.2.3 does not answer CONSUME_MESSAGE_DIRECTLY or
GET_CONSUMER_STATUS_FROM_CLIENT, and the broker answers the admin tool after its bounded wait
all the same."""

from __future__ import annotations

import asyncio
import platform
import sys
import time
from typing import TYPE_CHECKING

import pytest

from .rmq_client import start_push_consumer
from .servers import ServerProcess, create_topic

if TYPE_CHECKING:
    from pyrmq.remoting.client import RemotingClient

pytestmark = [
    pytest.mark.compat,
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]


def test_the_broker_answers_for_a_cpp_consumer_that_does_not_answer(
    serve_process: ServerProcess,
) -> None:
    from pyrmq.client.admin import Admin
    from pyrmq.client.message import Message
    from pyrmq.client.producer import Producer
    from pyrmq.errors import BrokerError
    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.protocol import ResponseCode

    namesrv, broker = serve_process.addresses()
    topic, group = "TopicCppDirect", "CG_CPP_DIRECT"
    create_topic(broker, topic, 1)

    async def scenario() -> None:
        async with Producer("PG_CPP_DIRECT", namesrv) as producer:
            sent = await producer.send(Message(topic, b"direct"))
        remoting = RemotingClient()
        try:
            deadline = time.monotonic() + 30
            while not (ids := await _consumer_ids(remoting, broker, group)):
                assert time.monotonic() < deadline, "the C++ consumer never registered"
                await asyncio.sleep(0.1)
        finally:
            await remoting.close()
        [client_id] = ids
        async with Admin(namesrv, timeout_s=4.0) as admin:
            began = time.monotonic()
            with pytest.raises(BrokerError, match="Timeout") as e:
                await admin.consume_message_directly(group, client_id, sent.offset_msg_id)
            assert e.value.code == ResponseCode.CONSUME_MSG_TIMEOUT
            assert time.monotonic() - began < 8
            began = time.monotonic()
            # Left out of the table, which is then empty.
            assert await admin.consumer_status(group, topic) == {}
            assert time.monotonic() - began < 8

    with start_push_consumer(namesrv, topic, group=group):
        asyncio.run(asyncio.wait_for(scenario(), 90))


async def _consumer_ids(remoting: RemotingClient, broker: str, group: str) -> list[str]:
    from pyrmq.client.api import ClientAPI
    from pyrmq.errors import BrokerError

    try:
        return await ClientAPI(remoting).consumer_ids(broker, group)
    except BrokerError:
        return []
