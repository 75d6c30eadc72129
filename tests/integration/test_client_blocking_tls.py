"""The blocking API over TLS (``set_tls``), against a ``pyrmq serve`` that enforces TLS with the
certificate it signed itself: sends and pulls go through, and a client without TLS gets
nowhere."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from tests import helpers
from tests.compat import servers

from pyrmq.client import Message, Producer, PullConsumer, SendStatus
from pyrmq.client import exceptions as rmq_exceptions
from pyrmq.client.admin import Admin
from pyrmq.remoting.tls import client_context

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

TOPIC = "TopicBlockingTls"


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("serve")
    conf = root / "broker.conf"
    # TLS only, on every port; the broker's own connections to its name server too.
    conf.write_text("tls.server.mode=enforcing\ntls.enable=true\n")
    with servers.serving(root, "-c", str(conf)) as proc:
        address = str(proc.addresses()[0])

        async def create() -> None:
            async with Admin(address, tls=client_context(verify=False)) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)

        helpers.run(create, 60)
        yield address


def _message(body: str) -> Message:
    msg = Message(TOPIC)
    msg.set_body(body)
    return msg


def _pull_all(consumer: PullConsumer, want: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        got += list(consumer.pull(TOPIC))
        if len(got) < want:
            time.sleep(0.2)
    return got


def test_a_blocking_producer_and_pull_consumer_over_tls(namesrv: str) -> None:
    producer = Producer("PG_BLOCKING_TLS", timeout=5000)
    producer.set_namesrv_addr(namesrv)
    producer.set_tls(client_context(verify=False))
    producer.start()
    try:
        for i in range(4):
            result = producer.send_sync(_message(f"tls-{i}"))
            assert result.status == SendStatus.OK
    finally:
        producer.shutdown()
    consumer = PullConsumer("CG_BLOCKING_TLS")
    consumer.set_namesrv_addr(namesrv)
    consumer.set_tls(client_context(verify=False))
    consumer.start()
    try:
        bodies = sorted(m.body for m in _pull_all(consumer, 4))
    finally:
        consumer.shutdown()
    assert bodies == [f"tls-{i}".encode() for i in range(4)]


def test_a_blocking_producer_without_tls_gets_nowhere(namesrv: str) -> None:
    producer = Producer("PG_BLOCKING_PLAIN", timeout=2000)
    producer.set_namesrv_addr(namesrv)
    producer.start()
    try:
        with pytest.raises(rmq_exceptions.ProducerSendSyncFailed):
            producer.send_sync(_message("plain"))
    finally:
        producer.shutdown()
