"""The client's transactional producers (asyncio and blocking) against a real ``pyrmq serve``
whose broker checks open halves within a second: a committed message is delivered once with
the producer's id, a rolled-back one never, and a half its producer left open is settled by
whichever producer of the group the broker asks."""

from __future__ import annotations

import asyncio
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from tests.compat.servers import ServerProcess, create_topic, serving
from tests.helpers import eventually, fast_config, pull_head

from pyrmq.client import TransactionMQProducer, TransactionStatus
from pyrmq.client.aio import (
    Message,
    MessageExt,
    Producer,
    TransactionProducer,
    TransactionState,
)
from pyrmq.client.message import SendStatus
from pyrmq.errors import BrokerError, MessageIllegalError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("tx")
    conf = root / "broker.conf"
    conf.write_text("transactionTimeOut=300\ntransactionCheckInterval=200\n")
    with serving(root, "-c", str(conf)) as s:
        yield s


def _topic(server: ServerProcess, name: str) -> tuple[str, str]:
    namesrv, broker = server.addresses()
    create_topic(broker, name, 1)
    return namesrv, broker


async def _delivered(broker: str, topic: str) -> list[MessageExt]:
    try:
        return (await pull_head(broker, "broker-a", topic, 0)).messages
    except BrokerError:
        return []


def _refuse(half: MessageExt) -> TransactionState:
    raise AssertionError(f"no check expected, got one for {half.id}")


def test_commit_delivers_and_rollback_drops(server: ServerProcess) -> None:
    namesrv, broker = _topic(server, "TopicTxClient")

    async def scenario() -> None:
        config = fast_config(namesrv)
        async with TransactionProducer("PG_TXC", checker=_refuse, client_config=config) as p:
            seen: list[tuple[str, Any]] = []

            def execute(msg: Message, arg: Any) -> TransactionState:
                seen.append((msg.body.decode(), arg))
                return TransactionState.COMMIT if arg == "yes" else TransactionState.ROLLBACK

            async def execute_async(msg: Message, arg: Any) -> TransactionState:
                await asyncio.sleep(0)
                return TransactionState.COMMIT

            kept = await p.send_in_transaction(
                Message("TopicTxClient", b"kept", keys="order-1", properties={"p": "v"}),
                execute,
                "yes",
            )
            dropped = await p.send_in_transaction(Message("TopicTxClient", b"dropped"), execute)
            later = await p.send_in_transaction(Message("TopicTxClient", b"async"), execute_async)
            # Compressed on the wire (4 KiB and more): still a half, and whole once committed.
            big = bytes(range(256)) * 64
            await p.send_in_transaction(Message("TopicTxClient", big), execute_async)
            assert seen == [("kept", "yes"), ("dropped", None)]
            assert (kept.state, dropped.state, later.state) == (
                TransactionState.COMMIT,
                TransactionState.ROLLBACK,
                TransactionState.COMMIT,
            )
            assert kept.send_result.status is SendStatus.OK
            assert kept.half is not None
            # A second end of the same half is refused: its transaction is over.
            with pytest.raises(BrokerError, match="already ended"):
                await p.end(kept.half, TransactionState.ROLLBACK)
            with pytest.raises(MessageIllegalError, match="delay level"):
                await p.send_in_transaction(
                    Message("TopicTxClient", b"x", delay_time_level=2), execute
                )
            msgs = await _delivered(broker, "TopicTxClient")
            assert [m.body for m in msgs] == [b"kept", b"async", big]
            assert msgs[0].id == kept.send_result.msg_id
            assert (msgs[0].keys, msgs[0].properties["p"]) == ("order-1", "v")
            await asyncio.sleep(1.0)  # past the check time: nothing is left open to check
        assert len(await _delivered(broker, "TopicTxClient")) == 3

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_the_checker_settles_halves_left_unknown_or_whose_execute_raised(
    server: ServerProcess,
) -> None:
    namesrv, broker = _topic(server, "TopicTxCheckClient")

    async def scenario() -> None:
        checked: list[tuple[str, str, str]] = []

        async def checker(half: MessageExt) -> TransactionState:
            checked.append((half.topic, half.keys, half.id))
            return TransactionState.COMMIT if half.keys == "commit" else TransactionState.ROLLBACK

        def unknown(msg: Message, arg: Any) -> TransactionState:
            return TransactionState.UNKNOWN

        def fails(msg: Message, arg: Any) -> TransactionState:
            raise RuntimeError("the local transaction broke")

        config = fast_config(namesrv)
        async with TransactionProducer("PG_TXK", checker=checker, client_config=config) as p:
            first = await p.send_in_transaction(
                Message("TopicTxCheckClient", b"c", keys="commit"), unknown
            )
            await p.send_in_transaction(
                Message("TopicTxCheckClient", b"r", keys="rollback"), unknown
            )
            with pytest.raises(RuntimeError, match="broke"):
                await p.send_in_transaction(
                    Message("TopicTxCheckClient", b"c2", keys="commit"), fails
                )
            assert await _delivered(broker, "TopicTxCheckClient") == []
            await eventually(lambda: len(checked) >= 3, 15, "three checks")
            deadline = asyncio.get_running_loop().time() + 10
            while len(await _delivered(broker, "TopicTxCheckClient")) < 2:
                assert asyncio.get_running_loop().time() < deadline, "committed halves missing"
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # checks would come again if anything were left open
        msgs = await _delivered(broker, "TopicTxCheckClient")
        assert sorted(m.body for m in msgs) == [b"c", b"c2"]
        assert first.send_result.msg_id in {m.id for m in msgs}
        # Each half was asked about once: every answer ended its transaction.
        assert sorted(k for _, k, _ in checked) == ["commit", "commit", "rollback"]
        assert {t for t, _, _ in checked} == {"TopicTxCheckClient"}

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_a_half_is_ended_by_another_producer_of_its_group(server: ServerProcess) -> None:
    """One producer sends halves and goes away; another of its group, which only started,
    is asked about the half no one ended (it made itself known at start); a handle crosses
    a process boundary (as a pickle) and that producer ends it."""
    namesrv, broker = _topic(server, "TopicTxHandOver")

    async def scenario() -> None:
        async with TransactionProducer(
            "PG_TXH", checker=_refuse, client_config=fast_config(namesrv, instance_name="a")
        ) as first:
            _, ended = await first.send_half(Message("TopicTxHandOver", b"ended elsewhere"))
            _, orphan = await first.send_half(Message("TopicTxHandOver", b"orphan", keys="o"))
        handle = pickle.loads(pickle.dumps(ended))
        asked: list[str] = []

        def checker(half: MessageExt) -> TransactionState:
            asked.append(half.keys)
            # The other half is the handle's, which the test ends itself.
            return TransactionState.COMMIT if half.keys == "o" else TransactionState.UNKNOWN

        # Heartbeats 30 s apart, and the instance's first round (1 s after it started, while it
        # knew no broker) past: only the introduction at start lets the broker ask it.
        config = fast_config(namesrv, instance_name="b", heartbeat_broker_interval_s=30.0)
        async with Producer("PG_TXH_PLAIN", client_config=config) as plain:
            await asyncio.sleep(1.5)
            async with TransactionProducer(
                "PG_TXH", checker=checker, client_config=config
            ) as second:
                assert second.instance is plain.instance
                await eventually(lambda: "o" in asked, 20, "the orphan checked")
                await second.end(handle, TransactionState.COMMIT)
                deadline = asyncio.get_running_loop().time() + 10
                while len(await _delivered(broker, "TopicTxHandOver")) < 2:
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.1)
        msgs = await _delivered(broker, "TopicTxHandOver")
        assert {m.body: m.id for m in msgs} == {
            b"ended elsewhere": ended.msg_id,
            b"orphan": orphan.msg_id,
        }

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_the_blocking_transaction_producer(server: ServerProcess, tmp_path: Path) -> None:
    """rocketmq-client-python 2.x's TransactionMQProducer: local_execute sees the message
    with its id, its answer ends the half, and the checker callback answers checks."""
    namesrv, broker = _topic(server, "TopicTxBlocking")
    checked = threading.Event()
    executed: list[tuple[str, bytes, Any]] = []
    threads: set[int] = set()

    def checker(msg: Any) -> TransactionStatus:
        checked.set()
        return TransactionStatus.COMMIT if msg.keys == b"late" else TransactionStatus.ROLLBACK

    def local_execute(msg: Any, args: Any) -> TransactionStatus:
        executed.append((msg.id, msg.body, args))
        threads.add(threading.get_ident())
        return args

    producer = TransactionMQProducer("PG_TXB", checker, timeout=5000)
    producer.set_name_server_address(namesrv)
    producer.start()
    try:
        m1 = Message("TopicTxBlocking", b"now")
        r1 = producer.send_message_in_transaction(m1, local_execute, TransactionStatus.COMMIT)
        m2 = Message("TopicTxBlocking", b"late", keys="late")
        r2 = producer.send_message_in_transaction(m2, local_execute, TransactionStatus.UNKNOWN)
        m3 = Message("TopicTxBlocking", b"never")
        producer.send_message_in_transaction(m3, local_execute, TransactionStatus.ROLLBACK)
        assert [(i, b) for i, b, _ in executed] == [
            (r1.msg_id, b"now"),
            (r2.msg_id, b"late"),
            (executed[2][0], b"never"),
        ]
        # On the caller's thread, where an application keeps its own transaction.
        assert threads == {threading.get_ident()}

        def nested(msg: Any, args: Any) -> int:
            # Another transactional send from inside one, and a plain int for COMMIT.
            inner = Message("TopicTxBlocking", b"inner")
            producer.send_message_in_transaction(inner, local_execute, TransactionStatus.COMMIT)
            return 0

        r4 = producer.send_message_in_transaction(Message("TopicTxBlocking", b"outer"), nested)
        assert checked.wait(15), "the half left UNKNOWN was not checked"

        async def wait_delivered() -> list[MessageExt]:
            for _ in range(100):
                msgs = await _delivered(broker, "TopicTxBlocking")
                if len(msgs) >= 4:
                    return msgs
                await asyncio.sleep(0.1)
            return msgs

        msgs = asyncio.run(wait_delivered())
        assert sorted((m.body, m.id) for m in msgs) == sorted(
            [(b"now", r1.msg_id), (b"late", r2.msg_id), (b"outer", r4.msg_id), (b"inner", ANY)]
        )
    finally:
        producer.shutdown()
