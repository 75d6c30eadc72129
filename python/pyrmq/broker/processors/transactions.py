"""END_TRANSACTION: a 4.x producer commits or rolls back a transaction's half message;
CHECK_TRANSACTION_STATE, the broker asking a producer of the half's group to do so; and
RESUME_CHECK_HALF_MESSAGE, an operator having a half given up checked again."""

import logging
import random
from typing import TYPE_CHECKING

from pyrmq.broker.services import transactions
from pyrmq.broker.services.transactions import TransactionError
from pyrmq.errors import MessageIllegalError, StoreError
from pyrmq.properties import PRODUCER_GROUP, UNIQ_KEY
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
    ResumeCheckHalfMessageRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import StoredMessage

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["EndTransactionProcessor"]

log = logging.getLogger(__name__)

# commitOrRollback: RocketMQ's MessageSysFlag transaction types.
COMMIT = 0x8
ROLLBACK = 0xC
NOT_TYPE = 0x0


class EndTransactionProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        broker.transactions.askers.append(self.ask_producer)

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end)
        server.register(RequestCode.RESUME_CHECK_HALF_MESSAGE, self.resume_check)

    async def end(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        # Every official client sends each field RocketMQ's broker requires (producerGroup,
        # tranStateTableOffset, commitLogOffset, commitOrRollback, msgId); one missing is refused.
        header = EndTransactionRequestHeader.from_ext(request.ext_fields)
        kind = header.commit_or_rollback
        if self.broker.config.is_slave:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SLAVE_NOT_AVAILABLE,
                remark="this broker is a slave: a transaction ends on its master",
            )
        if kind == NOT_TYPE:
            # The producer does not know yet: the half waits for a check.
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        if kind not in (COMMIT, ROLLBACK):
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"commitOrRollback {kind} is unknown"
            )
        try:
            result = self.broker.transactions.end(
                header.commit_log_offset,
                commit=kind == COMMIT,
                producer_group=header.producer_group,
            )
        except TransactionError as e:
            log.warning("END_TRANSACTION from %s refused: %s", conn.peer_address, e)
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        except (StoreError, MessageIllegalError) as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if not await self.broker.durable(result):
            return RemotingCommand.response_to(
                request, ResponseCode.FLUSH_DISK_TIMEOUT, remark="the end was not flushed in time"
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def resume_check(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """The half message ``msgId`` (an offset message id, of the half or of its copy in
        TRANS_CHECK_MAX_TIME_TOPIC) is checked again from a count of none; SYSTEM_ERROR with
        the reason when there is no such half here."""
        header = ResumeCheckHalfMessageRequestHeader.from_ext(request.ext_fields)
        msg_id = header.msg_id or ""
        if self.broker.config.is_slave:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark="this broker is a slave: a half message is resumed on its master",
            )
        stored = self.broker.store.view_message_by_id(msg_id)
        if stored is None:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"no message {msg_id!r} on this broker"
            )
        try:
            result = self.broker.transactions.resume(stored)
        except (TransactionError, StoreError, MessageIllegalError) as e:
            log.warning("RESUME_CHECK_HALF_MESSAGE from %s refused: %s", conn.peer_address, e)
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if result is not None and not await self.broker.durable(result):
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark="the half message stored again was not flushed in time",
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def ask_producer(self, stored: StoredMessage, transaction_id: str) -> bool:
        """Sends CHECK_TRANSACTION_STATE (oneway) to a connected producer of the half's group;
        False when none is connected."""
        group = stored.property(PRODUCER_GROUP) or ""
        members = self.broker.clients.producers.get(group) or {}
        connections = [
            m.connection for m in members.values() if isinstance(m.connection, Connection)
        ]
        if not connections:
            return False
        topic = stored.property(transactions.REAL_TOPIC) or stored.topic
        queue_id = int(stored.property(transactions.REAL_QID) or 0)
        # The producer sees how many times it has been asked, as RocketMQ's checks tell it.
        half = self.broker.transactions.open.get(stored.queue_offset)
        properties = {
            **stored.properties,
            transactions.CHECK_TIMES: str(half.checks if half is not None else 1),
        }
        unique = stored.property(UNIQ_KEY) or ""
        request = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE,
            CheckTransactionStateRequestHeader(
                tran_state_table_offset=stored.queue_offset,
                commit_log_offset=stored.phy_offset,
                msg_id=unique,
                transaction_id=unique or transaction_id,
                offset_msg_id=stored.msg_id,
                topic=topic,
                broker_name=self.broker.config.broker_name,
            ).to_ext(),
            transactions.as_real_topic(stored.record(), topic, queue_id, properties),
            oneway=True,
        )
        random.choice(connections).send(request)
        return True
