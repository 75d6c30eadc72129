"""END_TRANSACTION: a 4.x producer commits or rolls back a transaction's half message."""

import logging
from typing import TYPE_CHECKING

from pyrmq.broker.services.transactions import TransactionError
from pyrmq.errors import HeaderError, MessageIllegalError, StoreError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

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

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.END_TRANSACTION, self.end)

    async def end(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ext = request.ext_fields
        try:
            phy_offset = int(ext["commitLogOffset"])
            kind = int(ext.get("commitOrRollback", "0"))
        except (KeyError, ValueError) as e:
            raise HeaderError(f"END_TRANSACTION: {e!r} in {ext}") from e
        if kind == NOT_TYPE:
            # The producer does not know yet: the half waits for a check.
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        if kind not in (COMMIT, ROLLBACK):
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"commitOrRollback {kind} is unknown"
            )
        try:
            result = self.broker.transactions.end(
                phy_offset, commit=kind == COMMIT, producer_group=ext.get("producerGroup", "")
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
