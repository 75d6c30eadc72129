"""A client namespace (RocketMQ's ``ClientConfig.namespace``, Java's ``setNamespace``) against a
real ``pyrmq serve``: producers and consumers work in ``ns%Topic`` and ``ns%Group`` on the
broker, and their callers see their own names, retries and transaction checks included."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from tests import helpers
from tests.compat.servers import create_topic, serving
from tests.helpers import committed_offset, fast_config, pull_head

from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.request import create_reply_message
from pyrmq.client.transaction import TransactionProducer, TransactionState
from pyrmq.errors import BrokerError, ConfigError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NS = "nsA"
TOPIC = "TopicNs"


def _stored(broker: str, topic: str, queue_id: int = 0) -> list[bytes]:
    try:
        return [
            m.body for m in asyncio.run(pull_head(broker, "broker-a", topic, queue_id)).messages
        ]
    except BrokerError:
        return []


def test_a_namespace_must_be_a_plain_name() -> None:
    for bad in ("a%b", "a b", "x" * 200):
        with pytest.raises(ConfigError, match="namespace"):
            fast_config("127.0.0.1:9876", namespace=bad)


def test_producers_send_into_the_namespace_and_see_their_own_names(tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, f"{NS}%{TOPIC}", 2)

        async def main() -> None:
            config = fast_config(namesrv, namespace=NS, instance_name="ns-producer")
            async with Producer("PG_NS", client_config=config) as producer:
                assert producer.group == f"{NS}%PG_NS"
                one = await producer.send(Message(TOPIC, b"one"))
                assert one.status is SendStatus.OK
                assert one.message_queue is not None
                assert one.message_queue.topic == TOPIC
                queues = await producer.fetch_publish_queues(TOPIC)
                assert {q.topic for q in queues} == {TOPIC}
                chosen = await producer.send_orderly(
                    Message(TOPIC, b"two"), 1, lambda qs, _m, arg: qs[arg]
                )
                assert chosen.message_queue == MessageQueue(TOPIC, "broker-a", 1)
                # A queue named either way is the same queue.
                await producer.send(
                    Message(TOPIC, b"three"), queue=MessageQueue(f"{NS}%{TOPIC}", "broker-a", 0)
                )
                batch = await producer.send_batch([Message(TOPIC, b"b1"), Message(TOPIC, b"b2")])
                assert batch.message_queue is not None
                assert batch.message_queue.topic == TOPIC

        asyncio.run(main())
        stored = _stored(broker, f"{NS}%{TOPIC}", 0) + _stored(broker, f"{NS}%{TOPIC}", 1)
        assert sorted(stored) == [b"b1", b"b2", b"one", b"three", b"two"]
        # Nothing went to the topic outside the namespace.
        assert _stored(broker, TOPIC) == []


def test_a_push_consumer_in_a_namespace_consumes_retries_and_commits_there(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, f"{NS}%{TOPIC}", 1)
        seen: list[tuple[str, str, bytes, int]] = []
        lock = threading.Lock()

        def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
            with lock:
                for m in msgs:
                    seen.append((m.topic, ctx.message_queue.topic, m.body, m.reconsume_times))
            if any(m.body == b"fail once" and m.reconsume_times == 0 for m in msgs):
                ctx.delay_level_when_next_consume = 1
                return ConsumeStatus.RECONSUME_LATER
            return ConsumeStatus.CONSUME_SUCCESS

        async def main() -> None:
            config = fast_config(namesrv, namespace=NS, instance_name="ns-consumer")
            consumer = PushConsumer(
                "GID_NS", client_config=config, consume_from_where="CONSUME_FROM_FIRST_OFFSET"
            )
            consumer.subscribe(TOPIC, "*", listener)
            async with consumer:
                async with Producer(
                    "PG_NS", client_config=fast_config(namesrv, namespace=NS)
                ) as producer:
                    for body in (b"ok", b"fail once"):
                        await producer.send(Message(TOPIC, body))
                await helpers.eventually(lambda: len(seen) >= 3, timeout_s=30)
                assert {q.topic for q in consumer.assigned_queues()} == {TOPIC, "%RETRY%GID_NS"}
            mq = MessageQueue(f"{NS}%{TOPIC}", "broker-a", 0)
            assert await committed_offset(broker, f"{NS}%GID_NS", mq) == 2

        helpers.run(main, timeout_s=60)
        assert sorted(seen) == [
            # The retry from %RETRY%nsA%GID_NS shows its topic as its producer named it.
            (TOPIC, "%RETRY%GID_NS", b"fail once", 1),
            (TOPIC, TOPIC, b"fail once", 0),
            (TOPIC, TOPIC, b"ok", 0),
        ]
        assert _stored(broker, f"%RETRY%{NS}%GID_NS") == [b"fail once"]


def test_a_lite_pull_consumer_and_a_transaction_checker_see_names_without_it(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=500\ntransactionCheckInterval=300\n")
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, f"{NS}%{TOPIC}", 1)
        checked: list[str] = []

        def checker(half: MessageExt) -> TransactionState:
            checked.append(half.topic)
            return TransactionState.COMMIT

        async def main() -> None:
            config = fast_config(namesrv, namespace=NS, instance_name="ns-tx")
            async with TransactionProducer(
                "PG_NS_TX", checker=checker, client_config=config
            ) as producer:
                await producer.send_in_transaction(
                    Message(TOPIC, b"checked"), lambda _m, _a: TransactionState.UNKNOWN
                )
                # Until the commit the check answered with has reached the broker.
                deadline = time.monotonic() + 20
                while not (await pull_head(broker, "broker-a", f"{NS}%{TOPIC}", 0)).messages:
                    assert time.monotonic() < deadline, checked
                    await asyncio.sleep(0.1)
            consumer = LitePullConsumer(
                "GID_NS_LITE",
                client_config=fast_config(namesrv, namespace=NS, instance_name="ns-lite"),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            async with consumer:
                [mq] = await consumer.fetch_message_queues(TOPIC)
                assert mq == MessageQueue(TOPIC, "broker-a", 0)
                consumer.assign([mq])
                await consumer.seek_to_begin(mq)
                got: list[MessageExt] = []
                deadline = time.monotonic() + 20
                while not got and time.monotonic() < deadline:
                    got = await consumer.poll(1.0)
                assert [(m.topic, m.body) for m in got] == [(TOPIC, b"checked")]
                # The queue a message came from is one the consumer was assigned.
                assert got[0].message_queue == mq
                assert consumer.assignment() == {mq}
                await consumer.commit({mq: 1})
                assert await consumer.committed(mq) == 1
            stored = MessageQueue(f"{NS}%{TOPIC}", "broker-a", 0)
            assert await committed_offset(broker, f"{NS}%GID_NS_LITE", stored) == 1

        helpers.run(main, timeout_s=60)
        assert checked[0] == TOPIC


def test_replies_in_a_namespace_go_to_the_cluster_reply_topic(tmp_path: Path) -> None:
    """Requester, replier and the replier's consumer all in the namespace: the request goes to
    ``ns%Topic``, and its reply, sent through the topic's route or to a queue the replier
    names, to the cluster's reply topic, which no namespace owns."""
    reply_topic = "DefaultCluster_REPLY_TOPIC"
    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, f"{NS}%RpcNs", 1)
        sent: list[MessageQueue | None] = []

        async def main() -> None:
            replier = Producer(
                "PG_NS_REPLIER",
                client_config=fast_config(namesrv, namespace=NS, instance_name="ns-replier"),
            )

            async def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
                for msg in msgs:
                    reply = create_reply_message(msg, b"re:" + msg.body)
                    named = MessageQueue(reply.topic, "broker-a", 0)
                    queue = named if msg.body == b"to a queue" else None
                    sent.append((await replier.send(reply, queue=queue)).message_queue)
                return ConsumeStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "GID_NS_REPLIER",
                client_config=fast_config(namesrv, namespace=NS, instance_name="ns-replier-c"),
                consume_from_where="CONSUME_FROM_FIRST_OFFSET",
            )
            consumer.subscribe("RpcNs", "*", listener)
            config = fast_config(namesrv, namespace=NS, instance_name="ns-requester")
            async with (
                replier,
                consumer,
                Producer("PG_NS_REQUESTER", client_config=config) as requester,
            ):
                queues = await replier.fetch_publish_queues(reply_topic)
                assert queues == [MessageQueue(reply_topic, "broker-a", 0)]
                for body in (b"by route", b"to a queue"):
                    reply = await requester.request(Message("RpcNs", body), timeout_s=15)
                    assert (reply.topic, reply.body) == (reply_topic, b"re:" + body)
            assert sent == [MessageQueue(reply_topic, "broker-a", 0)] * 2

        helpers.run(main, timeout_s=60)
        assert _stored(broker, reply_topic) == [b"re:by route", b"re:to a queue"]
        assert _stored(broker, f"{NS}%{reply_topic}") == []
        assert _stored(broker, f"{NS}%RpcNs") == [b"by route", b"to a queue"]
