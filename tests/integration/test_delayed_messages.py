"""Delayed messages and retry delays through a real ``pyrmq serve``: a message sent with a delay
level reaches consumers once its delay has passed, not before; one pending when the broker
stops, cleanly or by SIGKILL, still arrives after the restart; a message a consumer fails comes
back after its retry level's delay. Delay levels are shortened by ``messageDelayLevel``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests import helpers
from tests.compat.servers import ServerProcess, create_topic, serving, start_serve
from tests.helpers import fast_config

from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.message import Message, MessageExt, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

LEVELS = "1s 2s 3s 4s"


def broker_conf(root: Path, *extra: str) -> Path:
    conf = root / "broker.conf"
    conf.write_text("\n".join([f"messageDelayLevel={LEVELS}", *extra]) + "\n")
    return conf


def start(root: Path, *args: str) -> ServerProcess:
    return start_serve(root, "-c", str(broker_conf(root)), *args)


class Received:
    """Every delivery with the wall-clock time (ms) it reached the listener."""

    def __init__(self, fail_first: bool = False) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[MessageExt, int]] = []
        self.fail_first = fail_first

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        now = time.time_ns() // 1_000_000
        with self.lock:
            self.got.extend((m, now) for m in msgs)
        if self.fail_first and any(m.reconsume_times == 0 for m in msgs):
            return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m, _ in self.got]


async def consume(namesrv: str, group: str, topic: str, received: Received, done: Any) -> None:
    c = PushConsumer(
        group, client_config=fast_config(namesrv), consume_from_where="CONSUME_FROM_FIRST_OFFSET"
    )
    c.subscribe(topic, "*", received)
    await c.start()
    try:
        await helpers.eventually(done, timeout_s=30.0, what=f"{topic} consumed")
        await asyncio.sleep(1.0)  # nothing more arrives
    finally:
        await c.shutdown()


async def send(namesrv: str, topic: str, messages: list[Message]) -> list[Any]:
    async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
        results = [await producer.send(m) for m in messages]
    assert all(r.status is SendStatus.OK for r in results)
    return results


def test_a_delayed_message_arrives_after_its_delay_and_not_before(tmp_path: Path) -> None:
    topic = "TopicDelayed"
    with serving(tmp_path, "-c", str(broker_conf(tmp_path))) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 2)

        async def scenario() -> None:
            sent = await send(
                namesrv,
                topic,
                [
                    Message(topic, b"one", tags="TagA", keys="K1", delay_time_level=1),
                    Message(topic, b"three", properties={"p": "v"}, delay_time_level=3),
                    Message(topic, b"now"),
                ],
            )
            sent_ms = time.time_ns() // 1_000_000
            # A delayed send is answered with the queue it was sent to.
            assert all(r.message_queue.queue_id in (0, 1) for r in sent)
            received = Received()
            await consume(
                namesrv, "CG_DELAYED", topic, received, lambda: len(received.bodies()) >= 3
            )
            assert sorted(received.bodies()) == [b"now", b"one", b"three"]
            at = {m.body: (m, ms) for m, ms in received.got}
            for body, level_ms in ((b"one", 1_000), (b"three", 3_000)):
                msg, reached_ms = at[body]
                assert msg.store_timestamp - msg.born_timestamp >= level_ms
                assert reached_ms - sent_ms >= level_ms - 1_000  # sends took under a second
                assert msg.delay_time_level == 0
                assert msg.queue_id == sent[[b"one", b"three"].index(body)].message_queue.queue_id
            assert (at[b"one"][0].tags, at[b"one"][0].keys) == ("TagA", "K1")
            assert at[b"three"][0].properties["p"] == "v"
            # Delivered from the schedule topic, the delayed ones name where they were bound;
            # the undelayed one was never parked.
            assert at[b"one"][0].properties["REAL_TOPIC"] == topic
            assert "REAL_TOPIC" not in at[b"now"][0].properties

        helpers.run(scenario, timeout_s=90)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_message_still_waiting_when_the_broker_stops_arrives_after_the_restart(
    tmp_path: Path, how: str
) -> None:
    topic = "TopicDelayRestart"
    server = start(tmp_path, "--flush", "sync")
    try:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 1)
        asyncio.run(send(namesrv, topic, [Message(topic, b"pending", delay_time_level=4)]))
    finally:
        if how == "SIGTERM":
            assert server.stop() == 0
        else:
            server.kill()
    server = start(tmp_path, "--flush", "sync")
    try:
        namesrv, _ = server.addresses()
        received = Received()
        asyncio.run(
            consume(namesrv, "CG_DELAY_RESTART", topic, received, lambda: received.bodies())
        )
        assert received.bodies() == [b"pending"]
    finally:
        assert server.stop() == 0
    # Delivered once: after another restart it does not come again.
    server = start(tmp_path, "--flush", "sync")
    try:
        namesrv, _ = server.addresses()
        again = Received()

        async def nothing_more() -> None:
            c = PushConsumer(
                "CG_DELAY_AGAIN",
                client_config=fast_config(namesrv),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            c.subscribe(topic, "*", again)
            await c.start()
            try:
                await helpers.eventually(lambda: again.bodies(), timeout_s=30.0)
                await asyncio.sleep(5.0)  # past every level's delay
            finally:
                await c.shutdown()

        asyncio.run(nothing_more())
        assert again.bodies() == [b"pending"]
    finally:
        assert server.stop() == 0


def test_a_failed_message_comes_back_after_its_retry_delay(tmp_path: Path) -> None:
    topic = "TopicRetryDelay"
    with serving(tmp_path, "-c", str(broker_conf(tmp_path))) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, topic, 1)

        async def scenario() -> None:
            await send(namesrv, topic, [Message(topic, b"flaky")])
            received = Received(fail_first=True)
            await consume(
                namesrv, "CG_RETRY_DELAY", topic, received, lambda: len(received.got) >= 2
            )
            [(first, first_ms), (second, second_ms)] = received.got
            assert (first.body, second.body) == (b"flaky", b"flaky")
            assert (first.reconsume_times, second.reconsume_times) == (0, 1)
            # The first retry waits for level 3: 3 s with these levels.
            assert second_ms - first_ms >= 3_000 - 100
            assert second.topic == topic

        helpers.run(scenario, timeout_s=90)
