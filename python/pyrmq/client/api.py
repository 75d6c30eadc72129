"""The requests a client makes, one coroutine each: routes from name servers; sends, pulls,
offsets and heartbeats to brokers. Error answers become :class:`~pyrmq.errors.BrokerError`."""

import dataclasses
import enum
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal

from pyrmq import _core
from pyrmq.client.message import MessageExt, MessageQueue, SendResult, SendStatus
from pyrmq.client.route import TopicRoute, loads_loose_json
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    EndTransactionRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode

__all__ = ["ClientAPI", "PullResult", "PullStatus"]

LANGUAGE: Final = "PYTHON"

_SEND_STATUS = {
    ResponseCode.SUCCESS: SendStatus.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_PULL_STATUS = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclasses.dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt]
    suggest_which_broker_id: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class SendRequest:
    """The parts of a send that vary per message; the header is built from them."""

    producer_group: str
    queue: MessageQueue
    body: bytes
    properties: str
    flag: int = 0
    sys_flag: int = 0
    batch: bool = False
    reconsume_times: int = 0
    max_reconsume_times: int | None = None
    default_topic_queue_nums: int = 4
    reply: bool = False
    """A reply of request-reply (``MSG_TYPE=reply``): sent as SEND_REPLY_MESSAGE_V2."""


class ClientAPI:
    """Typed requests over one :class:`RemotingClient`."""

    def __init__(self, remoting: RemotingClient) -> None:
        self.remoting = remoting

    async def _call(
        self,
        addr: str,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        timeout_s: float = 3.0,
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext, body)
        request.language = LANGUAGE
        return await self.remoting.invoke(addr, request, timeout_s)

    async def _oneway(self, addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> None:
        request = RemotingCommand.request(code, ext, body, oneway=True)
        request.language = LANGUAGE
        await self.remoting.invoke_oneway(addr, request)

    @staticmethod
    def _check(addr: str, response: RemotingCommand, *ok: int) -> RemotingCommand:
        if response.code not in (ok or (ResponseCode.SUCCESS,)):
            raise BrokerError(response.code, response.remark, addr)
        return response

    # --- name server ---------------------------------------------------------------------

    async def get_route(
        self, namesrv: str, topic: str, timeout_s: float = 3.0
    ) -> TopicRoute | None:
        """The topic's route, or None if the name server knows no such topic."""
        response = await self._call(
            namesrv,
            RequestCode.GET_ROUTEINFO_BY_TOPIC,
            {"topic": topic, "acceptStandardJsonOnly": "true"},
            timeout_s=timeout_s,
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        self._check(namesrv, response)
        return TopicRoute.parse(topic, response.body)

    async def topic_list(self, namesrv: str, timeout_s: float = 3.0) -> list[str]:
        """Every topic the name server has a route for, system topics included."""
        response = await self._call(
            namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, timeout_s=timeout_s
        )
        self._check(namesrv, response)
        return [str(t) for t in loads_loose_json(response.body).get("topicList", [])]

    # --- sending -------------------------------------------------------------------------

    def _send_command(self, req: SendRequest, oneway: bool) -> RemotingCommand:
        # SEND_MESSAGE_V2's one-letter fields (see headers.SendMessageRequestHeader), built
        # inline: this runs once per message.
        ext = {
            "a": req.producer_group,
            "b": req.queue.topic,
            "c": "TBW102",
            "d": str(req.default_topic_queue_nums),
            "e": str(req.queue.queue_id),
            "f": str(req.sys_flag),
            "g": str(time.time_ns() // 1_000_000),
            "h": str(req.flag),
            "i": req.properties,
            "j": str(req.reconsume_times),
            "k": "false",
            "m": "true" if req.batch else "false",
            "n": req.queue.broker_name,
        }
        if req.max_reconsume_times is not None:
            ext["l"] = str(req.max_reconsume_times)
        if req.reply:
            code = RequestCode.SEND_REPLY_MESSAGE_V2
        elif req.batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        else:
            code = RequestCode.SEND_MESSAGE_V2
        command = RemotingCommand.request(code, ext, req.body, oneway=oneway)
        command.language = LANGUAGE
        return command

    async def send(self, addr: str, req: SendRequest, msg_id: str, timeout_s: float) -> SendResult:
        response = await self.remoting.invoke(addr, self._send_command(req, False), timeout_s)
        status = _SEND_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, response.remark, addr)
        ext = response.ext_fields
        return SendResult(
            status=status,
            msg_id=msg_id,
            offset=int(ext.get("queueOffset", "-1")),
            offset_msg_id=ext.get("msgId", ""),
            message_queue=MessageQueue(
                req.queue.topic, req.queue.broker_name, int(ext.get("queueId", req.queue.queue_id))
            ),
            recall_handle=ext.get("recallHandle"),
        )

    async def recall(
        self, addr: str, topic: str, handle: str, broker_name: str, group: str, timeout_s: float
    ) -> str:
        """Recalls the timer message ``handle`` names; returns its id."""
        ext = {"producerGroup": group, "topic": topic, "recallHandle": handle, "bname": broker_name}
        response = self._check(
            addr, await self._call(addr, RequestCode.RECALL_MESSAGE, ext, timeout_s=timeout_s)
        )
        return response.ext_fields.get("msgId", "")

    async def end_transaction(
        self, addr: str, header: EndTransactionRequestHeader, timeout_s: float
    ) -> None:
        """Commits or rolls back a half message. RocketMQ's producers send this oneway; asked
        for an answer, a broker says whether the half was there to end."""
        ext = header.to_ext()
        self._check(
            addr, await self._call(addr, RequestCode.END_TRANSACTION, ext, timeout_s=timeout_s)
        )

    async def send_oneway(self, addr: str, req: SendRequest) -> None:
        await self.remoting.invoke_oneway(addr, self._send_command(req, True))

    # --- consuming -----------------------------------------------------------------------

    async def pull(
        self,
        addr: str,
        broker_name: str,
        header: PullMessageRequestHeader,
        timeout_s: float,
        namespace: str = "",
    ) -> PullResult:
        """Pulls from a queue; the messages' topics are shown without ``namespace``."""
        ext = header.to_ext()
        return await self.pull_ext(
            addr, broker_name, ext, header.queue_offset, timeout_s, namespace
        )

    async def pull_ext(
        self,
        addr: str,
        broker_name: str,
        ext: dict[str, str],
        queue_offset: int,
        timeout_s: float,
        namespace: str = "",
    ) -> PullResult:
        """:meth:`pull` with the request header already in wire form (the push consumer keeps
        one per queue and changes only the offsets and flags)."""
        response = await self._call(addr, RequestCode.PULL_MESSAGE, ext, timeout_s=timeout_s)
        status = _PULL_STATUS.get(response.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError(response.code, response.remark, addr)
        fields = response.ext_fields
        messages = []
        min_offset = int(fields.get("minOffset", 0))
        max_offset = int(fields.get("maxOffset", 0))
        if status is PullStatus.FOUND:
            messages = _core.decode_received(
                response.body, broker_name, namespace or None, min_offset, max_offset
            )
        return PullResult(
            status=status,
            next_begin_offset=int(fields.get("nextBeginOffset", queue_offset)),
            min_offset=min_offset,
            max_offset=max_offset,
            messages=messages,
            suggest_which_broker_id=int(fields.get("suggestWhichBrokerId", 0)),
        )

    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue) -> int | None:
        """The group's committed offset for the queue, or None if it has none."""
        header = QueryConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id
        )
        response = await self._call(addr, RequestCode.QUERY_CONSUMER_OFFSET, header.to_ext())
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        self._check(addr, response)
        return int(response.ext_fields["offset"])

    async def update_consumer_offset(
        self, addr: str, group: str, mq: MessageQueue, offset: int, *, oneway: bool = True
    ) -> None:
        header = UpdateConsumerOffsetRequestHeader(
            consumer_group=group, topic=mq.topic, queue_id=mq.queue_id, commit_offset=offset
        )
        if oneway:
            await self._oneway(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext())
        else:
            self._check(
                addr, await self._call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, header.to_ext())
            )

    async def _offset(self, addr: str, code: int, ext: dict[str, str]) -> int:
        response = self._check(addr, await self._call(addr, code, ext))
        return int(response.ext_fields["offset"])

    async def max_offset(self, addr: str, mq: MessageQueue) -> int:
        header = GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return await self._offset(addr, RequestCode.GET_MAX_OFFSET, header.to_ext())

    async def min_offset(self, addr: str, mq: MessageQueue) -> int:
        header = GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id)
        return await self._offset(addr, RequestCode.GET_MIN_OFFSET, header.to_ext())

    async def search_offset(
        self,
        addr: str,
        mq: MessageQueue,
        timestamp_ms: int,
        boundary: Literal["lower", "upper"] = "lower",
    ) -> int:
        # LOWER goes as no field at all: 4.x brokers do not know it, 5.x read its absence so.
        header = SearchOffsetRequestHeader(
            topic=mq.topic,
            queue_id=mq.queue_id,
            timestamp=timestamp_ms,
            boundary_type="UPPER" if boundary == "upper" else None,
        )
        return await self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header.to_ext())

    async def send_back(
        self,
        addr: str,
        msg: MessageExt,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        origin_topic: str | None = None,
    ) -> None:
        """CONSUMER_SEND_MSG_BACK; ``origin_topic`` is the message's topic as the broker
        knows it (by default as the message shows it)."""
        header = ConsumerSendMsgBackRequestHeader(
            offset=msg.commit_log_offset,
            group=group,
            delay_level=delay_level,
            origin_msg_id=msg.id,
            origin_topic=msg.topic if origin_topic is None else origin_topic,
            max_reconsume_times=max_reconsume_times,
        )
        self._check(
            addr,
            await self._call(addr, RequestCode.CONSUMER_SEND_MSG_BACK, header.to_ext()),
        )

    # --- orderly consumption: queue locks ------------------------------------------------

    async def lock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> set[MessageQueue]:
        """LOCK_BATCH_MQ: the queues of ``mqs`` the broker at ``addr`` now holds for
        ``client_id`` (each free, already this client's, or expired at the broker)."""
        body = {
            "consumerGroup": group,
            "clientId": client_id,
            "onlyThisBroker": False,
            "mqSet": [mq.to_json() for mq in mqs],
        }
        payload = json.dumps(body, separators=(",", ":")).encode()
        response = self._check(
            addr, await self._call(addr, RequestCode.LOCK_BATCH_MQ, body=payload)
        )
        granted = loads_loose_json(response.body).get("lockOKMQSet") or []
        return {
            MessageQueue(str(q["topic"]), str(q["brokerName"]), int(q["queueId"])) for q in granted
        }

    async def unlock_batch_mq(
        self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue]
    ) -> None:
        """UNLOCK_BATCH_MQ: releases the queues of ``mqs`` that ``client_id`` holds."""
        body = {"consumerGroup": group, "clientId": client_id, "mqSet": [q.to_json() for q in mqs]}
        payload = json.dumps(body, separators=(",", ":")).encode()
        self._check(addr, await self._call(addr, RequestCode.UNLOCK_BATCH_MQ, body=payload))

    # --- clients -------------------------------------------------------------------------

    async def heartbeat(self, addr: str, data: dict[str, Any]) -> None:
        body = json.dumps(data, separators=(",", ":")).encode()
        self._check(addr, await self._call(addr, RequestCode.HEART_BEAT, body=body))

    async def unregister_client(
        self,
        addr: str,
        client_id: str,
        *,
        producer_group: str | None = None,
        consumer_group: str | None = None,
    ) -> None:
        header = UnregisterClientRequestHeader(
            client_id=client_id, producer_group=producer_group, consumer_group=consumer_group
        )
        self._check(addr, await self._call(addr, RequestCode.UNREGISTER_CLIENT, header.to_ext()))

    async def check_client(
        self, addr: str, group: str, client_id: str, subscription: dict[str, Any]
    ) -> None:
        """CHECK_CLIENT_CONFIG: raises BrokerError unless the broker at ``addr`` serves pulls
        with ``subscription`` (RocketMQ's SubscriptionData)."""
        body = {"clientId": client_id, "group": group, "subscriptionData": subscription}
        payload = json.dumps(body, separators=(",", ":")).encode()
        self._check(addr, await self._call(addr, RequestCode.CHECK_CLIENT_CONFIG, body=payload))

    async def consumer_ids(self, addr: str, group: str) -> list[str]:
        """Client ids of the group's live consumers as the broker knows them."""
        header = GetConsumerListByGroupRequestHeader(consumer_group=group)
        response = await self._call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, header.to_ext())
        if response.code != ResponseCode.SUCCESS:
            return []
        ids: Sequence[str] = loads_loose_json(response.body).get("consumerIdList") or []
        return [str(i) for i in ids]
