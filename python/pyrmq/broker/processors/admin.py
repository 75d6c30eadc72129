"""Topic administration and message lookup: UPDATE_AND_CREATE_TOPIC, QUERY_MESSAGE,
VIEW_MESSAGE_BY_ID."""

import logging
from typing import TYPE_CHECKING

from pyrmq import _core
from pyrmq.broker.state.topics import TopicConfig
from pyrmq.errors import MessageIllegalError, StoreError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    CreateTopicRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["AdminProcessor"]

log = logging.getLogger(__name__)


class AdminProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)

    async def create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext(request.ext_fields)
        topic = header.topic
        try:
            _core.validate_topic(topic, internal=True)
        except MessageIllegalError as e:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The specified topic[{topic}] contains illegal characters: {e}",
            )
        if topic == self.broker.config.broker_cluster_name:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"the topic[{topic}] is conflict with system reserved words.",
            )
        self.broker.topics.put(
            TopicConfig(
                topic,
                read_queue_nums=header.read_queue_nums,
                write_queue_nums=header.write_queue_nums,
                perm=header.perm,
                topic_sys_flag=header.topic_sys_flag or 0,
                order=header.order,
            )
        )
        self.broker.request_registration()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_ext(request.ext_fields)
        store = self.broker.store
        found = store.query_message(
            header.topic,
            header.key,
            max_count=max(1, min(header.max_num, 64)),
            begin_ms=header.begin_timestamp,
            end_ms=header.end_timestamp,
        )
        if not found:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct",
            )
        body = b"".join(store.look_record(m.phy_offset) or b"" for m in found)
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={
                "indexLastUpdateTimestamp": str(max(m.store_timestamp_ms for m in found)),
                "indexLastUpdatePhyoffset": str(max(m.phy_offset for m in found)),
            },
            body=body,
        )

    async def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_ext(request.ext_fields)
        try:
            raw = self.broker.store.look_record(header.offset) or b""
        except StoreError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if not raw:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the offset, {header.offset}",
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=raw)
