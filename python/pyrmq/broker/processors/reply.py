"""SEND_REPLY_MESSAGE and SEND_REPLY_MESSAGE_V2: the reply to a request of request-reply
(RocketMQ 4.6+), pushed to the requester with PUSH_REPLY_MESSAGE_TO_CLIENT and, with
``storeReplyMessageEnable`` (on by default), also stored in its topic, normally
``{brokerClusterName}_REPLY_TOPIC``. As RocketMQ's ReplyMessageProcessor.

A reply is checked as a send is. Its ``REPLY_TO_CLIENT`` property names the requester's client
id, which the broker knows from that client's producer heartbeats. The replier's answer says
whether the push worked: SUCCESS once the requester took the reply, else SYSTEM_ERROR with the
reason (no ``REPLY_TO_CLIENT``, no producer connected under that id, a push refused or left
unanswered for 10 s). Storing never changes the code; a stored reply's answer names its offset
message id, queue and queue offset.
"""

import logging
import time
from typing import TYPE_CHECKING, Final

from pyrmq.acl.refusals import RefusalLog
from pyrmq.broker.processors.send import SYSFLAG_TRANSACTION_MASK, SendProcessor
from pyrmq.errors import MessageIllegalError, RemotingError, StoreError
from pyrmq.properties import PUSH_REPLY_TIME, REPLY_TO_CLIENT, encode_properties, parse_properties
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    ReplyMessageRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import PutResult

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["PUSH_REPLY_TIMEOUT_S", "ReplyProcessor"]

log = logging.getLogger(__name__)

PUSH_REPLY_TIMEOUT_S = 10.0
"""How long the requester has to take a pushed reply (RocketMQ's Broker2Client.callClient)."""
_REGION = "DefaultRegion"
_NO_MESSAGE: Final = {"MSG_REGION": _REGION, "TRACE_ON": "true"}


def _answer(msg_id: str, queue_id: int, queue_offset: int) -> SendMessageResponseHeader:
    return SendMessageResponseHeader(
        msg_id=msg_id,
        queue_id=queue_id,
        queue_offset=queue_offset,
        msg_region=_REGION,
        trace_on=True,
    )


class ReplyProcessor:
    def __init__(self, broker: "BrokerController", sends: SendProcessor) -> None:
        self.broker = broker
        self.sends = sends
        # Replies to requesters long gone, or a full disk, log a few lines a while, not one each.
        self._refusals = RefusalLog(log)

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.SEND_REPLY_MESSAGE, self.reply)
        server.register(RequestCode.SEND_REPLY_MESSAGE_V2, self.reply)

    async def reply(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Pushes the reply to its requester, stores it, and answers with the push's outcome."""
        header = self.sends.parse_header(request)
        if header.batch:
            return RemotingCommand.response_to(
                request, ResponseCode.MESSAGE_ILLEGAL, remark="a reply message cannot be a batch"
            )
        checked = self.sends.check(conn, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        queue_id = checked
        remark = await self._push(conn, header, request.body)
        answer: SendMessageResponseHeader | None = None
        if remark is None:
            code = ResponseCode.SUCCESS
            # RocketMQ's answer for a reply it does not store: clients read these fields.
            answer = _answer("0", queue_id, 0)
        else:
            code = ResponseCode.SYSTEM_ERROR
            self._refusals.refused(conn.peer[0], "push of a reply", remark)
        if self.broker.config.store_reply_message_enable:
            result = await self._store(conn, header, queue_id, request.body)
            if result is not None:
                answer = _answer(result.msg_ids_joined, queue_id, result.queue_offset)
        # A reply refused and not stored names no message.
        fields = dict(_NO_MESSAGE) if answer is None else answer.to_ext()
        return RemotingCommand.response_to(request, code, remark=remark, ext_fields=fields)

    async def _push(
        self, conn: Connection, header: SendMessageRequestHeader, body: bytes
    ) -> str | None:
        """Hands the reply to its requester; None once it took it, else why not."""
        props = parse_properties(header.properties)
        requester = props.get(REPLY_TO_CLIENT)
        if requester is None:
            return f"reply message properties[{REPLY_TO_CLIENT}] is null"
        target = self.broker.clients.producer_connection(requester)
        if target is None:
            return f"push reply message fail, channel of <{requester}> not found."
        now_ms = int(time.time() * 1000)
        props[PUSH_REPLY_TIME] = str(now_ms)
        push = ReplyMessageRequestHeader(
            producer_group=header.producer_group,
            topic=header.topic,
            default_topic=header.default_topic,
            default_topic_queue_nums=header.default_topic_queue_nums,
            queue_id=header.queue_id,
            sys_flag=header.sys_flag,
            born_timestamp=header.born_timestamp,
            flag=header.flag,
            properties=encode_properties(props),
            reconsume_times=header.reconsume_times,
            unit_mode=header.unit_mode,
            born_host=conn.peer_address,
            store_host=self.broker.address,
            store_timestamp=now_ms,
        )
        command = RemotingCommand.request(
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, push.to_ext(), body
        )
        try:
            answer = await target.request(command, PUSH_REPLY_TIMEOUT_S)
        except (RemotingError, TimeoutError) as e:
            reason = str(e) or f"no answer within {PUSH_REPLY_TIMEOUT_S} s"
            return f"push reply message to <{requester}> at {target.peer_address} fail: {reason}"
        if answer.code != ResponseCode.SUCCESS:
            return (
                f"push reply message to <{requester}> fail: the client answered code "
                f"{answer.code} {answer.remark or ''}".rstrip()
            )
        return None

    async def _store(
        self, conn: Connection, header: SendMessageRequestHeader, queue_id: int, body: bytes
    ) -> PutResult | None:
        """Stores the reply as sent; None when the store refused it (logged: the replier's
        answer is the push's)."""
        broker = self.broker
        store = broker.store

        def put() -> PutResult:
            return store.put(
                header.topic,
                body,
                queue_id=queue_id,
                properties=header.properties,
                flag=header.flag,
                # A reply is never a transaction's half.
                sys_flag=header.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
                born_timestamp_ms=header.born_timestamp,
                born_host=conn.peer_address,
                reconsume_times=header.reconsume_times,
                wait_for_flush=False,
            )

        try:
            result, _ = await broker.put(put)
        except (MessageIllegalError, StoreError) as e:
            self._refusals.refused(
                conn.peer[0], f"store of a reply topic={header.topic} queue_id={queue_id}", str(e)
            )
            return None
        broker.stats_items.stored(
            header.topic, result.count, result.wrote_bytes, broker.config.broker_cluster_name
        )
        if (metrics := broker.metrics) is not None:
            metrics.received(header.topic, "normal", result.count, result.wrote_bytes)
        return result
