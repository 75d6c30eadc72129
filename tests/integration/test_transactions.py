"""Transaction messages over RocketMQ's 4.x protocol against a real ``pyrmq serve``: a half
message is held back until END_TRANSACTION commits it (stored under its topic) or rolls it
back (never readable), ends only once, and stays open across a broker restart."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import pull_head, remoting_call, send_raw

from pyrmq import _core
from pyrmq.errors import BrokerError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

COMMIT, ROLLBACK = 8, 12


def _send_half(broker: str, topic: str, body: bytes) -> str:
    """A 4.x transactional producer's half message; returns its offset message id."""
    properties = "TRAN_MSG\x01true\x02PGROUP\x01PG_TX\x02KEYS\x01k-" + body.decode()
    sent = send_raw(broker, topic, body, sys_flag=4, properties=properties, producer_group="PG_TX")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    return sent.ext_fields["msgId"]


def _end(broker: str, msg_id: str, kind: int, group: str = "PG_TX") -> RemotingCommand:
    _, phy_offset = _core.decode_offset_msg_id(msg_id)
    ext = {
        "producerGroup": group,
        "tranStateTableOffset": "0",
        "commitLogOffset": str(phy_offset),
        "commitOrRollback": str(kind),
        "fromTransactionCheck": "false",
        "msgId": msg_id,
    }
    return remoting_call(broker, RequestCode.END_TRANSACTION, ext)


def _bodies(broker: str, topic: str) -> list[bytes]:
    try:
        return [m.body for m in asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages]
    except BrokerError:
        return []


def test_a_half_message_is_held_until_committed_and_never_read_when_rolled_back(
    tmp_path: Path,
) -> None:
    topic = "TopicTx4"
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        kept, dropped, later = (
            _send_half(broker, topic, b) for b in (b"kept", b"dropped", b"later")
        )
        assert _bodies(broker, topic) == []
        # Only the producer group that sent it ends a transaction.
        wrong = _end(broker, kept, COMMIT, group="PG_OTHER")
        assert wrong.code == ResponseCode.SYSTEM_ERROR
        assert "producer group wrong" in (wrong.remark or "")
        assert _bodies(broker, topic) == []
        assert _end(broker, kept, COMMIT).code == ResponseCode.SUCCESS
        assert _end(broker, dropped, ROLLBACK).code == ResponseCode.SUCCESS
        [message] = asyncio.run(pull_head(broker, "broker-a", topic, 0)).messages
        assert (message.body, message.keys) == (b"kept", "k-kept")
        # No longer a half (a Java consumer's send-back would make it one again).
        assert message.get_property("TRAN_MSG") is None
        # A transaction ends once.
        for msg_id, kind in ((kept, ROLLBACK), (dropped, COMMIT)):
            again = _end(broker, msg_id, kind)
            assert again.code == ResponseCode.SYSTEM_ERROR
            assert "already ended" in (again.remark or "")
    # The open half survives a restart, and ends there.
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        assert _bodies(broker, topic) == [b"kept"]
        assert _end(broker, kept, COMMIT).code == ResponseCode.SYSTEM_ERROR
        assert _end(broker, later, COMMIT).code == ResponseCode.SUCCESS
        assert _bodies(broker, topic) == [b"kept", b"later"]


def test_a_half_left_open_is_checked_with_a_producer_of_its_group(tmp_path: Path) -> None:
    """CHECK_TRANSACTION_STATE goes to a connected producer of the half's group, with the half
    under its real topic; the producer's END_TRANSACTION from the check commits it."""
    import json

    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.command import RemotingCommand as Command

    topic = "TopicTxCheck"
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=500\ntransactionCheckInterval=300\n")

    async def scenario(broker: str) -> list[Any]:
        checks: asyncio.Queue[Command] = asyncio.Queue()

        async def on_check(request: Command, _addr: str) -> None:
            checks.put_nowait(request)

        producer = RemotingClient()
        producer.server_request_handlers[RequestCode.CHECK_TRANSACTION_STATE] = on_check
        try:
            heartbeat = {
                "clientID": "127.0.0.1@tx",
                "producerDataSet": [{"groupName": "PG_TX"}],
                "consumerDataSet": [],
            }
            beat = Command.request(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat).encode())
            assert (await producer.invoke(broker, beat, 5.0)).code == ResponseCode.SUCCESS
            msg_id = await asyncio.to_thread(_send_half, broker, topic, b"checked")
            # Left unanswered, the first check is followed by a second; each says which it is.
            for times in ("1", "2"):
                check = await asyncio.wait_for(checks.get(), 20)
                [half] = _core.decode_messages(check.body)
                assert half.properties["TRANSACTION_CHECK_TIMES"] == times
                assert half.properties["PGROUP"] == "PG_TX"
            _, phy_offset = _core.decode_offset_msg_id(msg_id)
            assert check.ext_fields["commitLogOffset"] == str(phy_offset)
            end = {
                "producerGroup": "PG_TX",
                "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
                "commitLogOffset": check.ext_fields["commitLogOffset"],
                "commitOrRollback": str(COMMIT),
                "fromTransactionCheck": "true",
                "msgId": check.ext_fields["msgId"],
            }
            answer = await producer.invoke(
                broker, Command.request(RequestCode.END_TRANSACTION, end), 5.0
            )
            assert answer.code == ResponseCode.SUCCESS, answer.remark
            return [half]
        finally:
            await producer.close()

    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        [half] = asyncio.run(scenario(broker))
        # The producer saw the half under its real topic, as RocketMQ shows it.
        assert (half.topic, half.queue_id, half.body) == (topic, 0, b"checked")
        assert _bodies(broker, topic) == [b"checked"]


def test_a_half_no_producer_resolves_is_given_up_to_the_check_max_time_topic(
    tmp_path: Path,
) -> None:
    """With no producer of its group to ask, every check round still counts; after
    ``transactionCheckMax`` of them the half goes to ``TRANS_CHECK_MAX_TIME_TOPIC`` (where
    an operator finds it), never to its topic, and stays ended across a restart. A late end
    still commits or rolls it back, once, as RocketMQ finds a half by its offset whatever
    became of it (it was refused)."""
    topic = "TopicTxGivenUp"
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionTimeOut=200\ntransactionCheckInterval=200\ntransactionCheckMax=2\n")

    def given_up(broker: str) -> list[Any]:
        try:
            result = asyncio.run(pull_head(broker, "broker-a", "TRANS_CHECK_MAX_TIME_TOPIC", 0))
        except BrokerError:
            return []
        return result.messages

    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        msg_ids = [_send_half(broker, topic, body) for body in (b"orphan", b"dropped")]
        deadline = time.monotonic() + 20
        while len(kept := given_up(broker)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [m.body for m in kept] == [b"orphan", b"dropped"]
        message = kept[0]
        assert message.properties["REAL_TOPIC"] == topic
        assert message.properties["PGROUP"] == "PG_TX"
        assert message.properties["TRANSACTION_CHECK_TIMES"] == "2"
        assert message.keys == "k-orphan"
        assert _bodies(broker, topic) == []

    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        time.sleep(1.0)  # a few check rounds: the halves are not open again
        assert len(given_up(broker)) == 2
        assert _bodies(broker, topic) == []
        assert _end(broker, msg_ids[0], COMMIT).code == ResponseCode.SUCCESS
        assert _end(broker, msg_ids[1], ROLLBACK).code == ResponseCode.SUCCESS
        assert _bodies(broker, topic) == [b"orphan"]
        again = _end(broker, msg_ids[0], COMMIT)
        assert "already ended" in (again.remark or "")
        assert _bodies(broker, topic) == [b"orphan"]


def test_a_restart_keeps_the_checks_a_half_has_had(tmp_path: Path) -> None:
    """A half checked twice before a stop is given up at the first round after it when
    ``transactionCheckMax`` is 2; were the count lost it would get two more checks, a check
    interval each."""
    topic = "TopicTxChecksKept"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "transactionTimeOut=100\ntransactionCheckInterval=150\ntransactionCheckMax=50\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        create_topic(broker, topic, 1)
        _send_half(broker, topic, b"twice")
        time.sleep(1.5)  # several rounds: two checks at least
    conf.write_text(
        "transactionTimeOut=100\ntransactionCheckInterval=3000\ntransactionCheckMax=2\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        broker = server.addresses()[1]
        started = time.monotonic()
        kept: list[Any] = []
        # Given up at the first round (3 s); with the count lost, at the third (9 s).
        while not kept and time.monotonic() - started < 6.0:
            time.sleep(0.1)
            with contextlib.suppress(BrokerError):
                kept = asyncio.run(
                    pull_head(broker, "broker-a", "TRANS_CHECK_MAX_TIME_TOPIC", 0)
                ).messages
        assert [m.body for m in kept] == [b"twice"]
        assert _bodies(broker, topic) == []
