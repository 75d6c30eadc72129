"""Requests an admin tool makes of a group's consumers through the broker, which asks them on
their own connections: CONSUME_MESSAGE_DIRECTLY (309), which has one consumer run its
listener on one stored message, and INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), which
gathers each consumer's offsets on a topic (GET_CONSUMER_STATUS_FROM_CLIENT, 221).

A consumer that does not answer within ``CLIENT_ANSWER_TIMEOUT_S`` does not hold the broker
up: the direct consumption fails with CONSUME_MSG_TIMEOUT, and the status leaves that
consumer out, as RocketMQ's ``Broker2Client`` does with one that fails.
"""

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyrmq import _core
from pyrmq.broker.clients import ConsumerInfo
from pyrmq.errors import RemotingError, StoreError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.fastjson import QueueKey, dumps_queue_map, loads_fastjson, queue_entries
from pyrmq.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerStatusRequestHeader,
)
from pyrmq.remoting.protocol import MQVersion, RequestCode, ResponseCode, version_desc
from pyrmq.remoting.server import Connection, RemotingServer

from .consumer_manage import CLIENT_ANSWER_TIMEOUT_S, relay_to_consumer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["ConsumerCallsProcessor", "consumer_status_body", "parse_queue_map"]

log = logging.getLogger(__name__)


class ConsumerCallsProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_message_directly)
        server.register(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, self.consumer_status)

    def _online(self, group: str) -> list[tuple[ConsumerInfo, Connection]]:
        return [
            (m, m.connection)
            for m in self.broker.clients.members(group)
            if isinstance(m.connection, Connection)
        ]

    async def consume_message_directly(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """Reads the message the offset message id names from the store and sends it, with
        this broker's name added to the header, to the named consumer; answers with the
        consumer's answer, a ConsumeMessageDirectlyResult."""
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext(request.ext_fields)
        group, client_id = header.consumer_group, header.client_id or ""
        member = next((m for m, c in self._online(group) if m.client_id == client_id), None)
        if member is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer <{group}> <{client_id}> not online",
            )
        if member.version < MQVersion.V3_1_8_SNAPSHOT:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=(
                    f"The Consumer <{client_id}> Version <{version_desc(member.version)}> too "
                    "low to finish, please upgrade it to V3_1_8_SNAPSHOT"
                ),
            )
        try:
            _, phy_offset = _core.decode_offset_msg_id(header.msg_id or "")
        except ValueError as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad msgId {header.msg_id!r}: {e}"
            )
        try:
            raw = self.broker.store.look_record(phy_offset)
        except StoreError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if not raw:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the offset, {phy_offset}",
            )
        ext = {**request.ext_fields, "brokerName": self.broker.config.broker_name}
        forward = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, ext, raw)
        connection = member.connection
        assert isinstance(connection, Connection)
        log.info(
            "consume message directly group=%s client_id=%s phy_offset=%d",
            group,
            client_id,
            phy_offset,
        )
        return await relay_to_consumer(connection, forward, request, group, client_id)

    async def consumer_status(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Asks every consumer of the group (or only the one whose client id is
        ``clientAddr``) at once for its offsets on the topic; answers a GetConsumerStatusBody
        whose ``consumerTable`` holds each that answered, by client id.

        One difference from Java 4.9: a ``clientAddr`` that names no consumer of the group
        is refused as not online, where Java answers an empty table."""
        header = GetConsumerStatusRequestHeader.from_ext(request.ext_fields)
        group, only = header.group, header.client_addr or ""
        members = self._online(group)
        if not members:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"No Any Consumer online in the consumer group: [{group}]",
            )
        for member, _ in members:
            if member.version < MQVersion.V3_0_7_SNAPSHOT:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=(
                        "the client does not support this feature. "
                        f"version={version_desc(member.version)}"
                    ),
                )
        if only:
            members = [(m, c) for m, c in members if m.client_id == only]
            if not members:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=f"The Consumer <{group}> <{only}> not online",
                )
        log.info(
            "get consumer status peer=%s topic=%s group=%s client=%s",
            conn.peer_address,
            header.topic,
            group,
            only or "*",
        )
        ask = GetConsumerStatusRequestHeader(topic=header.topic, group=group).to_ext()
        answers = await asyncio.gather(
            *(self._ask_status(member, connection, ask) for member, connection in members)
        )
        table = {
            member.client_id: offsets
            for (member, _), offsets in zip(members, answers, strict=True)
            if offsets is not None
        }
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=consumer_status_body(table)
        )

    async def _ask_status(
        self, member: ConsumerInfo, connection: Connection, ext: dict[str, str]
    ) -> dict[QueueKey, int] | None:
        """The member's offsets; None when it fails, answers an error or does not answer."""
        request = RemotingCommand.request(RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT, ext)
        try:
            answer = await connection.request(request, timeout_s=CLIENT_ANSWER_TIMEOUT_S)
        except (RemotingError, TimeoutError) as e:
            log.warning(
                "consumer status of client_id=%s group=%s not had: %s",
                member.client_id,
                ext.get("group"),
                e or "timeout",
            )
            return None
        if answer.code != ResponseCode.SUCCESS or not answer.body:
            log.info(
                "consumer status of client_id=%s refused code=%s remark=%s",
                member.client_id,
                answer.code,
                answer.remark,
            )
            return None
        try:
            return parse_queue_map(answer.body, "messageQueueTable")
        except (ValueError, TypeError) as e:
            log.warning("unreadable consumer status from client_id=%s: %s", member.client_id, e)
            return None


def parse_queue_map(body: bytes, field: str) -> dict[QueueKey, int]:
    """Field ``field`` of a JSON object, a fastjson ``Map<MessageQueue, Long>``; entries that
    are not a queue and an integer are left out. ValueError (not JSON) or TypeError (no such
    field) if the body is no such object.

    >>> parse_queue_map(b'{"t":{{"brokerName":"b","queueId":1,"topic":"T"}:7,"x":1}}', "t")
    {('T', 'b', 1): 7}
    """
    parsed = loads_fastjson(body)
    table = parsed.get(field) if isinstance(parsed, dict) else None
    if not isinstance(table, dict):
        raise TypeError(f"no {field} object")
    return {queue: value for queue, value in queue_entries(table).items() if type(value) is int}


def consumer_status_body(
    consumers: Mapping[str, Mapping[QueueKey, int]],
    queues: Mapping[QueueKey, int] | None = None,
) -> bytes:
    """A GetConsumerStatusBody as Java writes it: ``consumerTable`` maps client ids to their
    offset tables (the broker's answer), ``messageQueueTable`` is one client's own table
    (a client's answer).

    >>> consumer_status_body({"c1": {("T", "b", 0): 3}})
    b'{"consumerTable":{"c1":{{"brokerName":"b","queueId":0,"topic":"T"}:3}},"messageQueueTable":{}}'
    """
    clients = b",".join(
        json.dumps(client_id).encode() + b":" + dumps_queue_map(table)
        for client_id, table in sorted(consumers.items())
    )
    own = dumps_queue_map(queues or {})
    return b'{"consumerTable":{' + clients + b'},"messageQueueTable":' + own + b"}"
