"""POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME: RocketMQ 5's
pop consumption over the 4.x protocol, as Java consumers in pop mode and RocketMQ's proxy (in
cluster mode) speak it to a broker.

The groups' pop state is the gRPC front's (:mod:`pyrmq.proxy.pop`), so a message popped over
either protocol is invisible to the group on both. A client makes each message's handle, its
``POP_CK``, from the answer: ``<start offset> <pop time> <invisible time> <revive queue>
<retry mark> <broker> <queue id> <offset>``. Each pop here gets a pop time of its own, which
is its deliveries' generation: an ack or a change of invisible time names the delivery by it,
and one from an earlier delivery, or from before the last change, is refused. As in the gRPC
front, a message comes back in place rather than through a retry topic, and its stored
reconsume times are raised by the deliveries before this one.
"""

import base64
import dataclasses
import json
import logging
import time
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

from pyrmq.broker.clients import Subscription
from pyrmq.broker.processors.pull import FilterRefused, compile_filter
from pyrmq.broker.state.topics import PERM_READ
from pyrmq.errors import HeaderError
from pyrmq.proxy.messages import Delivery
from pyrmq.proxy.service import MAX_INVISIBLE_S, Client, Receive
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import StoredMessage

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["PopHandle", "PopProcessor"]

log = logging.getLogger(__name__)

MAX_POP_NUMS = 32
# RocketMQ answers a pop that reached it this much later than its poll time allowed at once.
LATE_MS = 500
# The longest a pop is held for messages to arrive.
MAX_POLL_S = 60.0
# RocketMQ's KeyBuilder.POP_ORDER_REVIVE_QUEUE: the revive queue an orderly pop names.
ORDER_REVIVE_QID = 999
# The retry mark of a handle for a message of the topic itself; pyrmq never pops from a
# retry topic (RocketMQ's marks 1 and 2).
NORMAL_MARK = "0"
INIT_MIN = 0
_NOT_DELIVERED = "the handle is unknown, or replaced by a later one"
# Every 4.x pop is this client's: a pop repeating an attempt id (RocketMQ's proxy retrying a
# receive whose answer was lost) gets that attempt's messages again whatever connection it
# comes over, as RocketMQ keys attempts by group, topic and queue.
_POPPER = Client("4.x pop")
_NO_POP = PopMessageResponseHeader(pop_time=0, invisible_time=0, revive_qid=0, rest_num=0)


@dataclasses.dataclass(frozen=True, slots=True)
class PopHandle:
    """A ``POP_CK`` (RocketMQ's extraInfo), as acks and changes of invisible time carry it.

    Its other fields (start offset, invisible time, broker, queue id, offset) are the
    request header's to give, or RocketMQ's revive bookkeeping.

    >>> PopHandle.parse("5 1700000000000 60000 0 0 broker-a 1 7")
    PopHandle(pop_time=1700000000000, revive_qid=0, retry_mark='0')
    >>> PopHandle.parse("5 x") is None
    True
    """

    pop_time: int
    revive_qid: int
    retry_mark: str

    @classmethod
    def parse(cls, text: str) -> "PopHandle | None":
        parts = text.split(" ")
        if len(parts) < 7:
            return None
        try:
            # The start offset is read too, only to refuse a handle RocketMQ cannot read.
            _start, pop_time, revive_qid = int(parts[0]), int(parts[1]), int(parts[3])
            return cls(pop_time=pop_time, revive_qid=revive_qid, retry_mark=parts[4])
        except ValueError:
            return None


class PopProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register_inline(RequestCode.POP_MESSAGE, self.pop)
        server.register_inline(RequestCode.ACK_MESSAGE, self.ack)
        server.register_inline(RequestCode.BATCH_ACK_MESSAGE, self.batch_ack)
        server.register_inline(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, self.change_invisible)

    # -- pop ---------------------------------------------------------------------------------

    def pop(
        self, conn: Connection, request: RemotingCommand
    ) -> "RemotingCommand | Awaitable[RemotingCommand]":
        header = PopMessageRequestHeader.from_ext(request.ext_fields)
        checked = self._check_pop(conn, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        # Answered at once when there is something to deliver or no time to wait, as most
        # pops of a busy topic are; a task only for a pop that is held.
        popped = self.broker.pops.pop_now(checked)
        window_s = min(max(header.poll_time, 0) / 1000, MAX_POLL_S)
        if popped or window_s <= 0:
            return self._popped(request, header, checked, popped)
        return self._held(request, header, checked, window_s)

    async def _held(
        self,
        request: RemotingCommand,
        header: PopMessageRequestHeader,
        checked: "Receive",
        window_s: float,
    ) -> RemotingCommand:
        popped = await self.broker.pops.pop_later(checked, window_s)
        return self._popped(request, header, checked, popped)

    def _popped(
        self,
        request: RemotingCommand,
        header: PopMessageRequestHeader,
        checked: "Receive",
        popped: list[tuple[StoredMessage, Delivery]],
    ) -> RemotingCommand:
        pops = self.broker.pops
        answer = PopMessageResponseHeader(
            pop_time=popped[0][1].generation if popped else checked.pop_time,
            invisible_time=header.invisible_time,
            revive_qid=ORDER_REVIVE_QID if header.order else 0,
            rest_num=pops.rest(checked),
        )
        if not popped:
            return RemotingCommand.response_to(
                request,
                ResponseCode.POLLING_TIMEOUT,
                remark="NO_MESSAGE_IN_QUEUE",
                ext_fields=answer.to_ext(),
            )
        body, answer = self._answer(answer, popped, header.order)
        broker = self.broker
        config = checked.config
        broker.stats_items.delivered(
            config.topic_name,
            header.consumer_group,
            len(popped),
            len(body),
            broker.config.broker_cluster_name,
        )
        if (metrics := broker.metrics) is not None:
            metrics.delivered(config.topic_name, header.consumer_group, len(popped), len(body))
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=answer.to_ext(), body=body
        )

    def _check_pop(
        self, conn: Connection, request: RemotingCommand, header: PopMessageRequestHeader
    ) -> "Receive | RemotingCommand":
        """The pop to run, or the answer refusing it, with RocketMQ's codes in its order."""
        broker = self.broker
        config = broker.config

        def refused(code: int, remark: str) -> RemotingCommand:
            # With the header's numbers at 0, as RocketMQ's: Java reads them from a
            # POLLING_TIMEOUT, and fails on one that lacks them.
            return RemotingCommand.response_to(
                request, code, remark=remark, ext_fields=_NO_POP.to_ext()
            )

        now_ms = _now_ms()
        if now_ms - header.born_time - header.poll_time > LATE_MS:
            return refused(
                ResponseCode.POLLING_TIMEOUT,
                f"the broker[{config.broker_ip1}] pop message is timeout too much",
            )
        if not config.broker_permission & PERM_READ:
            return refused(
                ResponseCode.NO_PERMISSION,
                f"the broker[{config.broker_ip1}] pop message is forbidden",
            )
        if header.max_msg_nums > MAX_POP_NUMS:
            return refused(
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{config.broker_ip1}] pop message's num is greater than 32",
            )
        if header.max_msg_nums < 1 or header.queue_id < -1 or not header.consumer_group:
            return refused(
                ResponseCode.INVALID_PARAMETER,
                f"maxMsgNums {header.max_msg_nums}, queueId {header.queue_id} or consumerGroup "
                f"{header.consumer_group!r} is illegal",
            )
        if not 0 < header.invisible_time <= MAX_INVISIBLE_S * 1000:
            return refused(
                ResponseCode.INVALID_PARAMETER,
                f"invisibleTime {header.invisible_time} ms is outside "
                f"(0, {int(MAX_INVISIBLE_S * 1000)}]",
            )
        topic = broker.topic(header.topic)
        if topic is None:
            return refused(
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{header.topic}] not exist, apply first please!",
            )
        if not topic.perm & PERM_READ:
            return refused(
                ResponseCode.NO_PERMISSION,
                f"the topic[{header.topic}] peeking message is forbidden",
            )
        if header.queue_id >= topic.read_queue_nums:
            return refused(
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{topic.read_queue_nums}] "
                f"consumer:[{conn.peer_address}]",
            )
        settings = broker.group_config(header.consumer_group)
        if not settings.consume_enable:
            return refused(
                ResponseCode.NO_PERMISSION,
                f"subscription group no permission, {header.consumer_group}",
            )
        subscription = Subscription.parse(header.topic, header.exp or "*", header.exp_type)
        try:
            sql = compile_filter(subscription, config.enable_property_filter)
        except FilterRefused as e:
            return refused(e.code, e.remark)
        return Receive(
            client=_POPPER,
            group=header.consumer_group,
            config=topic,
            expression="*" if sql is not None else subscription.expression,
            sql=sql,
            batch=header.max_msg_nums,
            invisible_s=header.invisible_time / 1000,
            auto_renew=False,
            queue_id=header.queue_id,
            attempt_id=header.attempt_id or "",
            orderly=header.order,
            max_attempts=settings.retry_max_times + 1,
            pop_time=broker.pops.next_pop_time(),
            raw_bodies=True,
            start_at_min=header.init_mode == INIT_MIN,
        )

    def _answer(
        self,
        header: PopMessageResponseHeader,
        popped: list[tuple[StoredMessage, Delivery]],
        order: bool,
    ) -> tuple[bytes, PopMessageResponseHeader]:
        """The body (the records, each with its deliveries counted in its reconsume times)
        and the infos a client makes the handles from."""
        records: list[bytes] = []
        starts: dict[int, int] = {}
        offsets: dict[int, list[int]] = {}
        counts: list[str] = []
        for stored, delivery in popped:
            times = stored.reconsume_times + delivery.attempt - 1
            records.append(stored.record(times))
            queue_id, offset = delivery.queue_id, stored.queue_offset
            starts[queue_id] = min(starts.get(queue_id, offset), offset)
            offsets.setdefault(queue_id, []).append(offset)
            if order:
                counts.append(f"{NORMAL_MARK} qo{queue_id}%{offset} {times}")
        header = dataclasses.replace(
            header,
            start_offset_info=";".join(f"{NORMAL_MARK} {q} {o}" for q, o in starts.items()),
            msg_offset_info=";".join(
                f"{NORMAL_MARK} {q} {','.join(map(str, o))}" for q, o in offsets.items()
            ),
            order_count_info=";".join(counts) if order else None,
        )
        return b"".join(records), header

    # -- ack and change of invisible time ------------------------------------------------------

    def ack(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = AckMessageRequestHeader.from_ext(request.ext_fields)
        found = self._delivery(
            request, header.topic, header.queue_id, header.offset, header.extra_info
        )
        if isinstance(found, RemotingCommand):
            return found
        if not self.broker.pops.ack(
            header.consumer_group, header.topic, header.queue_id, header.offset, found.pop_time
        ):
            return RemotingCommand.response_to(request, ResponseCode.NO_MESSAGE, _NOT_DELIVERED)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def batch_ack(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Acks each offset a BatchAck's bit set names within its queue's offsets, as RocketMQ
        does: the answer is SUCCESS whatever each ack found, and NO_MESSAGE for a body with no
        ack in it."""
        try:
            acks = _batch_acks(request.body)
        except (ValueError, TypeError, KeyError, RecursionError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, f"bad batch ack body: {e}"
            )
        if not acks:
            return RemotingCommand.response_to(request, ResponseCode.NO_MESSAGE)
        broker = self.broker
        pops, store = broker.pops, broker.store
        for ack in acks:
            config = broker.topic(ack.topic)
            if (
                ack.retry_mark != NORMAL_MARK
                or config is None
                or not 0 <= ack.queue_id < config.read_queue_nums
            ):
                continue
            low = store.min_offset(ack.topic, ack.queue_id)
            high = store.max_offset(ack.topic, ack.queue_id)
            for offset in ack.offsets(low, high):
                pops.ack(ack.group, ack.topic, ack.queue_id, offset, ack.pop_time)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def change_invisible(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ChangeInvisibleTimeRequestHeader.from_ext(request.ext_fields)
        if not 0 <= header.invisible_time <= MAX_INVISIBLE_S * 1000:
            return RemotingCommand.response_to(
                request,
                ResponseCode.INVALID_PARAMETER,
                f"invisibleTime {header.invisible_time} ms is outside "
                f"[0, {int(MAX_INVISIBLE_S * 1000)}]",
            )
        found = self._delivery(
            request, header.topic, header.queue_id, header.offset, header.extra_info, last=False
        )
        if isinstance(found, RemotingCommand):
            return found
        pop_time = self.broker.pops.change_invisible(
            header.consumer_group,
            header.topic,
            header.queue_id,
            header.offset,
            found.pop_time,
            header.invisible_time / 1000,
        )
        if pop_time is None:
            return RemotingCommand.response_to(request, ResponseCode.NO_MESSAGE, _NOT_DELIVERED)
        answer = ChangeInvisibleTimeResponseHeader(
            pop_time=pop_time, invisible_time=header.invisible_time, revive_qid=found.revive_qid
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=answer.to_ext()
        )

    def _delivery(
        self,
        request: RemotingCommand,
        topic: str,
        queue_id: int,
        offset: int,
        extra_info: str,
        *,
        last: bool = True,
    ) -> "PopHandle | RemotingCommand":
        """The handle of an ack or a change, or the answer refusing it (RocketMQ's checks; an
        ack may name the queue's max offset, ``last``, a change may not)."""
        config = self.broker.topic(topic)
        if config is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        if not 0 <= queue_id < config.read_queue_nums:
            return RemotingCommand.response_to(
                request,
                ResponseCode.MESSAGE_ILLEGAL,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}]",
            )
        store = self.broker.store
        low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
        if not low <= offset <= (high if last else high - 1):
            return RemotingCommand.response_to(
                request,
                ResponseCode.NO_MESSAGE,
                f"offset is illegal, key:{topic}@{queue_id}, offset:{offset}, "
                f"minOffset:{low}, maxOffset:{high}",
            )
        handle = PopHandle.parse(extra_info)
        if handle is None:
            raise HeaderError(f"extraInfo {extra_info[:200]!r} is not a pop handle")
        if handle.retry_mark != NORMAL_MARK:
            # A retry topic's: pyrmq never pops one.
            return RemotingCommand.response_to(request, ResponseCode.NO_MESSAGE, _NOT_DELIVERED)
        return handle


@dataclasses.dataclass(frozen=True, slots=True)
class _BatchAck:
    group: str
    topic: str
    retry_mark: str
    start_offset: int
    queue_id: int
    pop_time: int
    bits: bytes

    def offsets(self, low: int, high: int) -> Iterator[int]:
        """The offsets within ``[low, high]`` the bit set names (Java's
        ``BitSet.toByteArray``: bit ``i`` is bit ``i % 8`` of byte ``i // 8``)."""
        bits, start = self.bits, self.start_offset
        first = max(0, (low - start) // 8)
        last = min(len(bits), (high - start) // 8 + 1)
        for at in range(first, last):
            byte = bits[at]
            while byte:
                bit = byte & -byte
                offset = start + at * 8 + bit.bit_length() - 1
                if low <= offset <= high:
                    yield offset
                byte ^= bit


# A BatchAck's fields: fastjson writes the short names, and reads the long ones too.
_BATCH_FIELDS = {
    "group": ("c", "consumerGroup"),
    "topic": ("t", "topic"),
    "retry_mark": ("r", "retry"),
    "start_offset": ("so", "startOffset"),
    "queue_id": ("q", "queueId"),
    "pop_time": ("pt", "popTime"),
    "bits": ("b", "bitSet"),
}
# What one request may ask, in bytes of bit sets: far more than pops deliver at once (32
# messages each), and a bounded pass for the event loop.
_MAX_BITS_BYTES = 1 << 16


def _batch_acks(body: bytes) -> list[_BatchAck]:
    """The acks of a BATCH_ACK_MESSAGE body (BatchAckMessageRequestBody as JSON)."""
    data = json.loads(body) if body else {}
    if not isinstance(data, dict):
        raise TypeError("the body is not a JSON object")
    out = []
    total = 0
    for entry in data.get("acks") or []:
        if not isinstance(entry, dict):
            raise TypeError("an ack is not a JSON object")
        values: dict[str, object] = {}
        for name, keys in _BATCH_FIELDS.items():
            found = next((entry[k] for k in keys if k in entry), None)
            if found is None:
                raise KeyError(f"a batch ack has no {keys[1]}")
            values[name] = found
        bits = base64.b64decode(str(values["bits"]), validate=True)
        total += len(bits)
        if total > _MAX_BITS_BYTES:
            raise ValueError(f"bit sets of more than {_MAX_BITS_BYTES} bytes")
        out.append(
            _BatchAck(
                group=str(values["group"]),
                topic=str(values["topic"]),
                retry_mark=str(values["retry_mark"]),
                start_offset=int(str(values["start_offset"])),
                queue_id=int(str(values["queue_id"])),
                pop_time=int(str(values["pop_time"])),
                bits=bits,
            )
        )
    return out


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
