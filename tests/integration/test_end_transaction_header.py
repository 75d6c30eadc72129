"""END_TRANSACTION's header against a real ``pyrmq serve``: the fields official clients send
(C++ writes ``fromTransactionCheck`` as ``0``/``1``, Go an empty ``transactionId``) end a
half; an end without a field RocketMQ's broker requires is refused and leaves it open."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import pull_head, remoting_call, send_raw

from pyrmq import _core
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicTxHeader"


def _send_half(broker: str, body: bytes) -> tuple[str, int]:
    """A half from producer group PG_TX; its offset message id and commit log offset."""
    properties = "TRAN_MSG\x01true\x02PGROUP\x01PG_TX\x02UNIQ_KEY\x01U-" + body.decode()
    sent = send_raw(broker, TOPIC, body, sys_flag=4, properties=properties, producer_group="PG_TX")
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    msg_id = sent.ext_fields["msgId"]
    return msg_id, _core.decode_offset_msg_id(msg_id)[1]


def _end(broker: str, phy_offset: int, body: bytes, **fields: str) -> RemotingCommand:
    """END_TRANSACTION as the C++ client sends it, with ``fields`` replacing its own (an empty
    value leaves the field out)."""
    ext = {
        "msgId": "U-" + body.decode(),
        "transactionId": "U-" + body.decode(),
        "producerGroup": "PG_TX",
        "tranStateTableOffset": "0",
        "commitLogOffset": str(phy_offset),
        "commitOrRollback": "8",
        "fromTransactionCheck": "0",
    }
    ext.update(fields)
    return remoting_call(
        broker, RequestCode.END_TRANSACTION, {k: v for k, v in ext.items() if v != ""}
    )


def test_official_clients_ends_are_taken_and_an_incomplete_one_is_refused(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as server:
        broker = server.addresses()[1]
        create_topic(broker, TOPIC, 1)
        _, cpp = _send_half(broker, b"cpp")
        _, go = _send_half(broker, b"go")
        _, later = _send_half(broker, b"later")
        assert _end(broker, cpp, b"cpp").code == ResponseCode.SUCCESS
        # Go's: booleans as words, an empty transaction id sent as is.
        go_end = remoting_call(
            broker,
            RequestCode.END_TRANSACTION,
            {
                "producerGroup": "PG_TX",
                "tranStateTableOffset": "1",
                "commitLogOffset": str(go),
                "commitOrRollback": "8",
                "fromTransactionCheck": "true",
                "msgId": "U-go",
                "transactionId": "",
            },
        )
        assert go_end.code == ResponseCode.SUCCESS, go_end.remark
        # Not known yet: taken, and the half stays open.
        assert _end(broker, later, b"later", commitOrRollback="0").code == ResponseCode.SUCCESS
        for missing in ("msgId", "commitOrRollback", "producerGroup", "commitLogOffset"):
            refused = _end(broker, later, b"later", **{missing: ""})
            assert refused.code == ResponseCode.SYSTEM_ERROR
            assert missing in (refused.remark or "")
        bad = _end(broker, later, b"later", commitOrRollback="eight")
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert "commitOrRollback" in (bad.remark or "")
        assert _end(broker, later, b"later").code == ResponseCode.SUCCESS
        committed = asyncio.run(pull_head(broker, "broker-a", TOPIC, 0)).messages
        assert [m.body for m in committed] == [b"cpp", b"go", b"later"]
        # As RocketMQ's commit: each names where its half is.
        assert [m.prepared_transaction_offset for m in committed] == [cpp, go, later]


def test_a_delayed_half_is_refused_by_the_broker_and_the_client(tmp_path: Path) -> None:
    """A delay level or a timer would make the store hold a half back as a delayed message,
    in another topic, where no end finds it; one that delays nothing is taken."""
    from tests.helpers import fast_config

    from pyrmq.client.aio import Message, TransactionProducer, TransactionState
    from pyrmq.errors import MessageIllegalError

    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, TOPIC, 1)
        soon = int(time.time() * 1000) + 5000
        for delay in ("DELAY\x013", "TIMER_DELAY_MS\x015000", f"TIMER_DELIVER_MS\x01{soon}"):
            properties = f"TRAN_MSG\x01true\x02PGROUP\x01PG_TX\x02{delay}"
            sent = send_raw(
                broker, TOPIC, b"late", sys_flag=4, properties=properties, producer_group="PG_TX"
            )
            assert sent.code == ResponseCode.MESSAGE_ILLEGAL, sent.remark
            assert "cannot have a delay level or timer" in (sent.remark or "")
        # Nothing was held back as a half: a plain half still ends.
        _, offset = _send_half(broker, b"plain")
        assert _end(broker, offset, b"plain").code == ResponseCode.SUCCESS
        assert [m.body for m in asyncio.run(pull_head(broker, "broker-a", TOPIC, 0)).messages] == [
            b"plain"
        ]
        # A level of 0 or below (a Java client's setDelayTimeLevel(0)) and a timer already
        # due delay nothing: halves as any other, delivered at once when committed (they were
        # refused).
        past = int(time.time() * 1000) - 5000
        for i, delay in enumerate(
            ("DELAY\x010", "DELAY\x01-1", "TIMER_DELAY_SEC\x010", f"TIMER_DELIVER_MS\x01{past}")
        ):
            body = f"now{i}".encode()
            properties = f"TRAN_MSG\x01true\x02PGROUP\x01PG_TX\x02UNIQ_KEY\x01U-now{i}\x02{delay}"
            sent = send_raw(
                broker, TOPIC, body, sys_flag=4, properties=properties, producer_group="PG_TX"
            )
            assert sent.code == ResponseCode.SUCCESS, (delay, sent.remark)
            phy = _core.decode_offset_msg_id(sent.ext_fields["msgId"])[1]
            assert _end(broker, phy, body).code == ResponseCode.SUCCESS
        delivered = asyncio.run(pull_head(broker, "broker-a", TOPIC, 0)).messages
        assert [m.body for m in delivered] == [b"plain", b"now0", b"now1", b"now2", b"now3"]

        async def client() -> None:
            config = fast_config(namesrv)
            async with TransactionProducer(
                "PG_TX", checker=lambda _: TransactionState.UNKNOWN, client_config=config
            ) as producer:
                late = Message(TOPIC, b"late", properties={"TIMER_DELAY_MS": "5000"})
                with pytest.raises(MessageIllegalError, match="cannot have a delay level or timer"):
                    await producer.send_half(late)
                now = Message(TOPIC, b"now", properties={"DELAY": "0"})
                result, _ = await producer.send_half(now)
                assert result.status.name == "OK"

        asyncio.run(client())
