"""Consumer groups and offsets: GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET,
GET_ALL_CONSUMER_OFFSET, QUERY_CORRECTION_OFFSET,
GET_MAX/MIN_OFFSET, GET_EARLIEST_MSG_STORETIME, SEARCH_OFFSET_BY_TIMESTAMP, LOCK/UNLOCK_BATCH_MQ."""

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from pyrmq.broker.state.queue_locks import LockKey
from pyrmq.errors import RemotingError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetMaxOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    QueryCorrectionOffsetHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

from .client_manage import consumer_list_body

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["ConsumerManageProcessor"]

log = logging.getLogger(__name__)

# How long the broker waits for a client it forwards a request to.
CLIENT_ANSWER_TIMEOUT_S = 5.0
# Java's Long.MAX_VALUE: a correction offset that says the compared group is behind it.
BEHIND = (1 << 63) - 1


async def relay_to_consumer(
    connection: Connection,
    forward: RemotingCommand,
    request: RemotingCommand,
    group: str,
    client_id: str,
) -> RemotingCommand:
    """Asks a consumer ``forward`` on its connection and answers ``request`` with what it
    says, as RocketMQ's ``callConsumer``: CONSUME_MSG_TIMEOUT when it does not answer within
    ``CLIENT_ANSWER_TIMEOUT_S``, SYSTEM_ERROR when the call fails otherwise."""
    try:
        answer = await connection.request(forward, timeout_s=CLIENT_ANSWER_TIMEOUT_S)
    except TimeoutError as e:
        return RemotingCommand.response_to(
            request,
            ResponseCode.CONSUME_MSG_TIMEOUT,
            remark=(
                f"consumer <{group}> <{client_id}> Timeout: no answer within "
                f"{CLIENT_ANSWER_TIMEOUT_S:g} s{f' ({e})' if str(e) else ''}"
            ),
        )
    except RemotingError as e:
        return RemotingCommand.response_to(
            request,
            ResponseCode.SYSTEM_ERROR,
            remark=f"invoke consumer <{group}> <{client_id}> Exception: {e}",
        )
    return RemotingCommand.response_to(request, answer.code, remark=answer.remark, body=answer.body)


class ConsumerManageProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        self._locks = broker.queue_locks

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list)
        server.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        server.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        server.register(RequestCode.GET_ALL_CONSUMER_OFFSET, self.all_offsets)
        server.register(RequestCode.QUERY_CORRECTION_OFFSET, self.correction_offset)
        server.register(RequestCode.GET_MAX_OFFSET, self.max_offset)
        server.register(RequestCode.GET_MIN_OFFSET, self.min_offset)
        server.register(RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_time)
        server.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        server.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self.consumer_running_info)
        server.register(RequestCode.LOCK_BATCH_MQ, self.lock)
        server.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock)

    async def all_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every group's committed offsets, as consumerOffset.json holds them (a slave copies
        them)."""
        body = json.dumps(self.broker.offsets.to_json()).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def correction_offset(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """Per queue of the topic, the lowest offset any group but the ``filterGroups`` has
        committed there, leaving out offsets below the queue's first message; where
        ``compareGroup``'s own offset is lower than that, Java's Long.MAX_VALUE. As
        RocketMQ's QueryCorrectionOffsetBody, with fastjson's bare integer keys.

        Java 4.9 drops the filtered groups' offsets from its table while it reads them, so a
        filtered ``compareGroup`` is compared with nothing there; the answer here is the
        same, and the offsets stay."""
        header = QueryCorrectionOffsetHeader.from_ext(request.ext_fields)
        topic, store = header.topic, self.broker.store
        left_out = set(filter(None, (header.filter_groups or "").split(",")))
        groups = {
            g: offsets
            for g, offsets in self.broker.offsets.on_topic(topic).items()
            if g not in left_out
        }
        lowest: dict[int, int] = {}
        for offsets in groups.values():
            for queue_id, offset in offsets.items():
                if offset >= store.min_offset(topic, queue_id):
                    lowest[queue_id] = min(offset, lowest.get(queue_id, offset))
        for queue_id, offset in groups.get(header.compare_group, {}).items():
            # Java fails on a queue only the compared group, below the queue's start, has.
            if queue_id in lowest and lowest[queue_id] > offset:
                lowest[queue_id] = BEHIND
        table = ",".join(f"{q}:{o}" for q, o in sorted(lowest.items()))
        body = f'{{"correctionOffsets":{{{table}}}}}'.encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def consumer_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext(request.ext_fields)
        ids = self.broker.clients.consumer_ids(header.consumer_group)
        if not ids:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"no consumer for this group, {header.consumer_group}",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=consumer_list_body(ids)
        )

    async def consumer_running_info(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """Asks the named consumer for its running info on its own connection and relays the
        answer unchanged (C++ clients answer with text that is not valid JSON)."""
        header = GetConsumerRunningInfoRequestHeader.from_ext(request.ext_fields)
        member = next(
            (
                m
                for m in self.broker.clients.members(header.consumer_group)
                if m.client_id == header.client_id
            ),
            None,
        )
        if member is None or not isinstance(member.connection, Connection):
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer <{header.client_id}> not online",
            )
        forward = RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO, header.to_ext())
        return await relay_to_consumer(
            member.connection, forward, request, header.consumer_group, header.client_id
        )

    async def query_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_ext(request.ext_fields)
        offset = self.broker.offsets.query(header.consumer_group, header.topic, header.queue_id)
        # As RocketMQ, a negative commit (which it stores as asked) counts as none.
        if offset is None or offset < 0:
            store = self.broker.store
            # As RocketMQ: a group new to a queue that still starts at 0, with its first
            # message not yet left to the disk, starts at 0, so that nothing sent before its
            # first commit is skipped (a crash before that commit included). Otherwise the
            # client starts where its consumeFromWhere says.
            if store.min_offset(header.topic, header.queue_id) == 0 and not store.offset_in_disk(
                header.topic, header.queue_id, 0
            ):
                return RemotingCommand.response_to(
                    request, ResponseCode.SUCCESS, ext_fields={"offset": "0"}
                )
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
            )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)}
        )

    async def update_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_ext(request.ext_fields)
        key = (header.consumer_group, header.topic, header.queue_id)
        self.broker.pulls.commit_from(conn, key, header.commit_offset)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext(request.ext_fields)
        value = self.broker.store.max_offset(header.topic, header.queue_id)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"offset": str(value)}
        )

    async def min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext(request.ext_fields)
        value = self.broker.store.min_offset(header.topic, header.queue_id)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"offset": str(value)}
        )

    async def earliest_time(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetMaxOffsetRequestHeader.from_ext(request.ext_fields)
        value = self.broker.store.earliest_store_time(header.topic, header.queue_id) or 0
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"timestamp": str(value)}
        )

    async def search_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = SearchOffsetRequestHeader.from_ext(request.ext_fields)
        value = self.broker.store.offset_for_time(
            header.topic, header.queue_id, header.timestamp, boundary=header.boundary
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields={"offset": str(value)}
        )

    def _parse_lock_body(self, request: RemotingCommand) -> tuple[str, list[LockKey]]:
        """The asking client id and the queues a (Un)LockBatchRequestBody names."""
        body = json.loads(request.body.decode().strip() or "{}")
        group = str(body.get("consumerGroup", ""))
        keys = [
            (group, str(mq.get("topic")), str(mq.get("brokerName")), int(mq.get("queueId", -1)))
            for mq in body.get("mqSet") or []
        ]
        return str(body.get("clientId", "")), keys

    async def lock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Grants every named queue that is free, already the caller's, or expired (60 s)."""
        try:
            client_id, keys = self._parse_lock_body(request)
        except (ValueError, TypeError, AttributeError, OverflowError, UnicodeDecodeError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad lock body: {e}"
            )
        granted, changed = self._locks.lock(client_id, keys)
        if changed:
            # On disk before the answer: a restart must not give the queue to another.
            await self._save_locks()
        mqs = [{"brokerName": k[2], "queueId": k[3], "topic": k[1]} for k in granted]
        body = json.dumps({"lockOKMQSet": mqs}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def unlock(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            client_id, keys = self._parse_lock_body(request)
        except (ValueError, TypeError, AttributeError, OverflowError, UnicodeDecodeError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad unlock body: {e}"
            )
        if self._locks.unlock(client_id, keys):
            await self._save_locks()
        # A concurrent consumer unlocks too, once it has committed what it was delivered:
        # the queue's next owner may start at once.
        broker_name = self.broker.config.broker_name
        self.broker.pulls.release([(g, t, q) for g, t, b, q in keys if b == broker_name], client_id)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def _save_locks(self) -> None:
        try:
            await asyncio.to_thread(self._locks.save, self._locks.snapshot())
        except OSError as e:
            # Answered anyway: the locks hold in memory, only a restart would forget them.
            log.error("cannot save the queue locks to %s: %s", self._locks.path, e)
