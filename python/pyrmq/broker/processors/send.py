"""SEND_MESSAGE (v1 and v2) and SEND_BATCH_MESSAGE, and CONSUMER_SEND_MSG_BACK."""

import asyncio
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from pyrmq import _core
from pyrmq.broker.metrics import message_type
from pyrmq.broker.processors.recall import recall_handle
from pyrmq.broker.state.groups import check_group_name
from pyrmq.broker.state.topics import DLQ_PREFIX, PERM_READ, PERM_WRITE, RETRY_PREFIX, TopicConfig
from pyrmq.errors import (
    DiskFullError,
    MessageBodyError,
    MessageIllegalError,
    StoreClosedError,
    StoreError,
    StoreReadOnlyError,
    SystemTopicError,
)
from pyrmq.properties import (
    CLUSTER,
    NAME_VALUE,
    REPLY_TO_CLIENT,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    encode_properties,
    parse_properties,
)
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import ConsumerSendMsgBackRequestHeader, SendMessageRequestHeader
from pyrmq.remoting.protocol import (
    SYSFLAG_COMPRESSED,
    SYSFLAG_COMPRESSION_TYPE,
    RequestCode,
    ResponseCode,
)
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import PutResult, PutStatus

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["SendProcessor"]

log = logging.getLogger(__name__)

SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_PREPARED = 0x4
TIMER_PREFIX = "TIMER_"
# In the order the store reads them.
# In the order RocketMQ's broker reads them: the first present is the message's timer.
TIMER_PROPERTIES = (TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS)
_DECIMAL_INTEGER = re.compile(r"[+-]?[0-9]+")
# From this MQVersion ordinal (V3_4_9) on, a client's maxReconsumeTimes is honoured.
MAX_RECONSUME_TIMES_MIN_VERSION = 121
_V2_CODES = frozenset(
    {
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    }
)
# Only a request of request-reply carries it.
_REQUEST_MARK = REPLY_TO_CLIENT + NAME_VALUE
# RocketMQ's answer to a send a slave gets (its store refuses every put).
SLAVE_REMARK = "service not available now: this broker is a slave; messages are sent to its master"


class SendProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        # Answered at once when the request arrives (no task per send), see send().
        server.register_inline(RequestCode.SEND_MESSAGE, self.send)
        server.register_inline(RequestCode.SEND_MESSAGE_V2, self.send)
        server.register_inline(RequestCode.SEND_BATCH_MESSAGE, self.send)
        server.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    def parse_header(self, request: RemotingCommand) -> SendMessageRequestHeader:
        """The send header of a send or a reply: one-letter names for the V2 codes."""
        if request.code in _V2_CODES:
            header = SendMessageRequestHeader.from_ext_v2(request.ext_fields)
        else:
            header = SendMessageRequestHeader.from_ext(request.ext_fields)
        return header

    def _error(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        return RemotingCommand.response_to(request, code, remark=remark)

    def send(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand | Awaitable[RemotingCommand]:
        """Stores a message (or a batch) and answers at once; under SYNC_FLUSH it returns a
        future answer instead, completed when the flush that covers the append lands (see
        ``register_inline``), so every send in flight shares one fsync."""
        header = self.parse_header(request)
        batch = header.batch or request.code == RequestCode.SEND_BATCH_MESSAGE
        topic = header.topic
        broker = self.broker
        checked = self.check(conn, request, header)
        if isinstance(checked, RemotingCommand):
            return checked
        queue_id = checked
        properties = header.properties
        if not batch and _REQUEST_MARK in properties:
            # A request of request-reply: its replier sends the reply to this cluster's reply
            # topic. RocketMQ's broker names its cluster on every message; only a request
            # needs it.
            properties = _with_cluster(properties, broker.config.broker_cluster_name)
        if not batch and TIMER_PREFIX in properties:
            timer_props = parse_properties(properties)
            if _drop_unread_timers(timer_props):
                properties = encode_properties(timer_props)
            illegal = _timer_problem(timer_props, broker.config.timer_max_delay_s)
            if illegal is not None:
                return self._error(request, ResponseCode.MESSAGE_ILLEGAL, illegal)
        reconsume_times = header.reconsume_times
        if topic.startswith(RETRY_PREFIX) and not batch:
            group = topic[len(RETRY_PREFIX) :]
            limit_times = broker.group_config(group).retry_max_times
            if (
                request.version >= MAX_RECONSUME_TIMES_MIN_VERSION
                and header.max_reconsume_times is not None
            ):
                limit_times = header.max_reconsume_times
            # As RocketMQ 5 (4.9's >= sent it one retry early): the client counted the
            # delivery that failed before it sent the message here. An orderly group (one
            # holding queue locks) sends a message here only once it is out of retries.
            if reconsume_times > limit_times or broker.queue_locks.holds_any(group):
                topic = DLQ_PREFIX + group
                broker.topics.create_system(topic, 1, PERM_READ | PERM_WRITE)
                queue_id = 0
                props = parse_properties(properties)
                props.pop("DELAY", None)
                properties = encode_properties(props)
                broker.request_registration(topic)
        born_host = conn.peer_address
        body = request.body
        sys_flag = header.sys_flag
        store = broker.store
        half = not batch and _is_half(properties, sys_flag, reconsume_times)
        put: Callable[[], PutResult]
        if batch:
            if sys_flag & SYSFLAG_COMPRESSED:
                # C++ 1.2.3 compresses whole batches: inflate, then store each uncompressed.
                # No further than a batch may be: a small body can inflate to gigabytes.
                limit = broker.config.store.max_message_size
                try:
                    body = _core.inflate_body(body, sys_flag, limit)
                except MessageBodyError as e:
                    return self._error(
                        request,
                        ResponseCode.MESSAGE_ILLEGAL,
                        f"compressed batch (maxMessageSize {limit}): {e}",
                    )
                sys_flag &= ~(SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_TYPE)
            if (_i64(parse_properties(properties).get("DELAY", "")) or 0) > 0:
                return self._error(
                    request,
                    ResponseCode.MESSAGE_ILLEGAL,
                    "a batch must not carry a delay level",
                )
            if topic.startswith(RETRY_PREFIX):
                # RocketMQ 5's refusal: a retry goes back one message at a time.
                return self._error(
                    request,
                    ResponseCode.MESSAGE_ILLEGAL,
                    f"batch request does not support retry group {topic}",
                )
            # The store parks each message of a batch with a timer as it does a single one:
            # the same checks first.
            if b"TIMER_" in body:
                illegal = _batch_timer_problem(body, broker.config.timer_max_delay_s)
                if illegal is not None:
                    return self._error(request, ResponseCode.MESSAGE_ILLEGAL, illegal)

            def put() -> PutResult:
                return store.put_encoded_batch(
                    topic,
                    body,
                    queue_id=queue_id,
                    sys_flag=sys_flag,
                    born_timestamp_ms=header.born_timestamp,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                    internal=True,
                    wait_for_flush=False,
                    # As RocketMQ's batch encoder: the request's after each message's own.
                    batch_properties=properties,
                )

        elif half:
            # A transaction's half message: held back until END_TRANSACTION. The service
            # appends it with put_now itself.
            def put() -> PutResult:
                return broker.transactions.prepare(
                    topic,
                    queue_id,
                    body,
                    parse_properties(properties),
                    header.producer_group,
                    flag=header.flag,
                    sys_flag=sys_flag,
                    born_timestamp_ms=header.born_timestamp,
                    born_host=born_host,
                )

        else:

            def put() -> PutResult:
                return store.put(
                    topic,
                    body,
                    queue_id=queue_id,
                    properties=properties,
                    flag=header.flag,
                    sys_flag=sys_flag,
                    born_timestamp_ms=header.born_timestamp,
                    born_host=born_host,
                    reconsume_times=reconsume_times,
                    internal=topic.startswith((RETRY_PREFIX, DLQ_PREFIX)),
                    wait_for_flush=False,
                )

        try:
            result = put() if half else broker.put_now(put)
        except (MessageIllegalError, StoreError) as e:
            return self._put_failed(request, e, topic, queue_id)
        broker.stats_items.stored(
            topic, result.count, result.wrote_bytes, broker.config.broker_cluster_name
        )
        if (metrics := broker.metrics) is not None:
            props = parse_properties(properties)
            if topic != header.topic:
                origin = props.get("RETRY_TOPIC", header.topic)
                metrics.dead_lettered(origin, topic[len(DLQ_PREFIX) :])
            kind = "normal" if batch else message_type(props)
            metrics.received(topic, kind, result.count, result.wrote_bytes)
        handle = None
        # RocketMQ gives a handle to single sends only, and none to retry topics'.
        timer = not batch and not half and TIMER_PREFIX in properties
        if timer and topic == header.topic and not topic.startswith(RETRY_PREFIX):
            handle = recall_handle(broker.store, broker.config.broker_name, topic, result)
        if broker.puts_wait and _waits_for_store(properties):
            return self._answer_when_stored(request, result, queue_id, handle)
        return self._stored(request, result, queue_id, recall=handle)

    def check(
        self, conn: Connection, request: RemotingCommand, header: SendMessageRequestHeader
    ) -> RemotingCommand | int:
        """RocketMQ's checks of a send (and of a reply) before anything is stored: a master,
        a valid topic that is not the broker's own, known or auto-created, writable, with the
        queue asked for. Returns the queue id to store in (a random one for a negative id),
        or the refusal to answer with."""
        topic = header.topic
        broker = self.broker
        if broker.config.is_slave:
            return self._error(request, ResponseCode.SERVICE_NOT_AVAILABLE, SLAVE_REMARK)
        try:
            _core.validate_topic(topic)
        except SystemTopicError:
            # RocketMQ's code and words: clients retry NO_PERMISSION on another broker.
            return self._error(
                request,
                ResponseCode.NO_PERMISSION,
                f"Sending message to topic[{topic}] is forbidden.",
            )
        except MessageIllegalError as e:
            return self._error(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
        config = self._topic_for_send(header)
        if config is None:
            return self._error(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic[{topic}] not exist, apply first please!",
            )
        if not config.perm & PERM_WRITE:
            return self._error(
                request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending is forbidden"
            )
        if config.order and not broker.config.broker_permission & PERM_WRITE:
            # RocketMQ's rule: an ordered topic's producers pick queues themselves, and a
            # read-only broker's route does not keep them away.
            return self._error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] sending message is forbidden",
            )
        queue_id = header.queue_id
        if queue_id < 0:
            queue_id = random.randrange(config.write_queue_nums)
        limit = max(config.write_queue_nums, config.read_queue_nums)
        if queue_id >= limit:
            return self._error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{queue_id}] is illegal, {config} Producer: {conn.peer_address}",
            )
        return queue_id

    def _answer_when_stored(
        self, request: RemotingCommand, result: PutResult, queue_id: int, recall: str | None
    ) -> asyncio.Future[RemotingCommand]:
        answer: asyncio.Future[RemotingCommand] = self.broker.loop.create_future()

        def stored(code: int) -> None:
            if not answer.done():
                answer.set_result(self._stored(request, result, queue_id, code=code, recall=recall))

        self.broker.when_stored(result, stored)
        return answer

    def _put_failed(
        self, request: RemotingCommand, e: Exception, topic: str, queue_id: int
    ) -> RemotingCommand:
        if isinstance(e, MessageIllegalError):
            return self._error(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
        if isinstance(e, (DiskFullError, StoreClosedError, StoreReadOnlyError)):
            return self._error(request, ResponseCode.SERVICE_NOT_AVAILABLE, str(e))
        log.error("store failed a send topic=%s queue_id=%s: %s", topic, queue_id, e)
        return self._error(request, ResponseCode.SYSTEM_ERROR, str(e))

    def _stored(
        self,
        request: RemotingCommand,
        result: PutResult,
        queue_id: int,
        *,
        code: int = ResponseCode.SUCCESS,
        recall: str | None = None,
    ) -> RemotingCommand:
        """The send's answer. As RocketMQ's, it names the queue the send asked for (or the DLQ's)
        even when the store parked a delayed message in SCHEDULE_TOPIC_XXXX, and a timer
        message's handle to recall it. A send stored but not as safe as promised (the disk, a
        slave) is answered with that code and the ids."""
        if result.status is PutStatus.FLUSH_DISK_TIMEOUT:
            code = ResponseCode.FLUSH_DISK_TIMEOUT
        fields = {
            "msgId": result.msg_ids_joined,
            "queueId": str(queue_id),
            "queueOffset": str(result.queue_offset),
            "MSG_REGION": "DefaultRegion",
            "TRACE_ON": "true",
        }
        if recall is not None:
            fields["recallHandle"] = recall
        return RemotingCommand.response_to(request, code, ext_fields=fields)

    def _topic_for_send(self, header: SendMessageRequestHeader) -> TopicConfig | None:
        broker = self.broker
        config = broker.topics.get(header.topic)
        if config is not None:
            return config
        if not (broker.config.auto_create_topic_enable or header.topic.startswith(RETRY_PREFIX)):
            return None
        config, created = broker.topics.create_on_send(
            header.topic, header.default_topic or "TBW102", header.default_topic_queue_nums or 4
        )
        if created:
            broker.request_registration(header.topic)
        return config

    async def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Stores a message a consumer failed to the group's retry topic (or its DLQ)."""
        header = ConsumerSendMsgBackRequestHeader.from_ext(request.ext_fields)
        broker = self.broker
        if broker.config.is_slave:
            return self._error(request, ResponseCode.SERVICE_NOT_AVAILABLE, SLAVE_REMARK)
        try:
            # The group names its retry and dead-letter topics; refused before either exists.
            check_group_name(header.group)
        except MessageIllegalError as e:
            return self._error(request, ResponseCode.SYSTEM_ERROR, f"group {header.group!r}: {e}")
        settings = broker.group_config(header.group)
        if not broker.config.broker_permission & PERM_WRITE:
            # Unlike a plain send, refused whatever the topic, as RocketMQ's send-back is.
            return self._error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the broker[{broker.config.broker_ip1}] sending message is forbidden",
            )
        if settings.retry_queue_nums <= 0:
            # The group's retries are off: RocketMQ answers SUCCESS and stores nothing.
            return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
        # As RocketMQ: the retry topic exists, and takes messages, even for one bound for the DLQ.
        retry_topic = RETRY_PREFIX + header.group
        retry_config, created = broker.topics.create_system(
            retry_topic, settings.retry_queue_nums, PERM_READ | PERM_WRITE
        )
        if created:
            broker.request_registration(retry_topic)
        if not retry_config.perm & PERM_WRITE:
            return self._error(
                request,
                ResponseCode.NO_PERMISSION,
                f"the topic[{retry_topic}] sending message is forbidden",
            )
        try:
            original = broker.store.look_message_by_offset(header.offset)
        except StoreError as e:
            original = None
            log.error("send-back lookup failed offset=%s: %s", header.offset, e)
        if original is None:
            return self._error(
                request,
                ResponseCode.SYSTEM_ERROR,
                f"look message by offset failed, {header.offset}",
            )
        group = header.group
        props = dict(original.properties)
        props.setdefault("RETRY_TOPIC", original.topic)
        # The id the store gave the first copy, whatever the client's header says: it finds the
        # message by offset (mqadmin queryMsgById) from any retry or dead letter.
        if not props.get("ORIGIN_MESSAGE_ID", "").strip():
            props["ORIGIN_MESSAGE_ID"] = original.msg_id
        props["WAIT"] = "false"
        props.pop("DELAY", None)
        max_times = settings.retry_max_times
        if (
            request.version >= MAX_RECONSUME_TIMES_MIN_VERSION
            and header.max_reconsume_times is not None
        ):
            max_times = header.max_reconsume_times
        topic = retry_topic
        # A queue of the group's retryQueueNums at random, as RocketMQ spreads retries over its
        # consumers; within the topic's queues (made before the setting grew, it has fewer).
        queue_id = random.randrange(
            max(1, min(settings.retry_queue_nums, retry_config.write_queue_nums))
        )
        if original.reconsume_times >= max_times or header.delay_level < 0:
            topic = DLQ_PREFIX + group
            queue_id = 0
            _, created = broker.topics.create_system(topic, 1, PERM_READ | PERM_WRITE)
            if created:
                broker.request_registration(topic)
        else:
            # Parked by the store until due: level 3 (10 s) for a first retry, one level more
            # for each further one, unless the consumer chose a level.
            level = header.delay_level or 3 + original.reconsume_times
            props["DELAY"] = str(level)
        try:
            # As RocketMQ's (its copy has WAIT=false): no wait for a slave, whose absence
            # would fail the send-back and have the client send it back again and again.
            _, durable = await broker.put(
                lambda: broker.store.put(
                    topic,
                    original.body,
                    queue_id=queue_id,
                    properties=props,
                    flag=original.flag,
                    sys_flag=original.sys_flag & ~SYSFLAG_TRANSACTION_MASK,
                    born_timestamp_ms=original.born_timestamp_ms,
                    born_host=original.born_host,
                    reconsume_times=original.reconsume_times + 1,
                    internal=True,
                    wait_for_flush=False,
                ),
                slave=False,
            )
        except StoreError as e:
            return self._error(request, ResponseCode.SYSTEM_ERROR, str(e))
        except MessageIllegalError as e:
            return self._error(request, ResponseCode.SYSTEM_ERROR, str(e))
        broker.stats_items.sent_back(topic, group)
        if topic != retry_topic and (metrics := broker.metrics) is not None:
            metrics.dead_lettered(props["RETRY_TOPIC"], group)
        if not durable:
            # As RocketMQ answers a send-back whose put was not PUT_OK.
            return self._error(request, ResponseCode.SYSTEM_ERROR, "FLUSH_DISK_TIMEOUT")
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _with_cluster(properties: str, cluster: str) -> str:
    """``properties`` with ``CLUSTER`` set to ``cluster``."""
    props = parse_properties(properties)
    props[CLUSTER] = cluster
    return encode_properties(props)


def _waits_for_store(properties: str) -> bool:
    """False for a message whose WAIT property is "false": RocketMQ answers it once stored,
    without waiting for the disk or a slave."""
    if "WAIT\x01false" not in properties:
        return True
    return parse_properties(properties).get("WAIT") != "false"


def _batch_timer_problem(body: bytes, max_delay_s: int) -> str | None:
    """The first timer problem among the messages of a client batch body."""
    for properties in _core.batch_timer_properties(body):
        problem = _timer_problem(parse_properties(properties), max_delay_s)
        if problem is not None:
            return problem
    return None


def _drop_unread_timers(props: dict[str, str]) -> bool:
    r"""Keeps in ``props`` the one timer RocketMQ's broker goes by: none when a delay level is
    set (the level wins), else the first of :data:`TIMER_PROPERTIES` present. Returns whether
    any was dropped.

    >>> props = {"DELAY": "2", "TIMER_DELAY_SEC": "60"}
    >>> _drop_unread_timers(props), props
    (True, {'DELAY': '2'})
    >>> props = {"TIMER_DELIVER_MS": "123", "TIMER_DELAY_SEC": "60"}
    >>> _drop_unread_timers(props), props
    (True, {'TIMER_DELAY_SEC': '60'})
    """
    present = [name for name in TIMER_PROPERTIES if name in props]
    level = _i64(props.get("DELAY", ""))
    drop = present if level is not None and level > 0 else present[1:]
    for name in drop:
        del props[name]
    return bool(drop)


def _timer_problem(props: Mapping[str, str], max_delay_s: int) -> str | None:
    """What is wrong with a timer message's timer (RocketMQ's checks), or None: the first
    timer property present must be a 64-bit integer, read as the store reads it, and not
    more than ``max_delay_s`` ahead. One in the past is no timer: the message is delivered at
    once, as RocketMQ stores it."""
    present = [(name, props[name]) for name in TIMER_PROPERTIES if name in props]
    if not present:
        return None
    name, raw = present[0]
    value = _i64(raw)
    if value is None:
        return f"timer message illegal: {name} {raw!r} is not a 64-bit integer"
    now_ms = int(time.time() * 1000)
    if name == TIMER_DELIVER_MS:
        due_ms = value
    else:
        due_ms = now_ms + (value * 1000 if name == TIMER_DELAY_SEC else value)
    if due_ms - now_ms > max_delay_s * 1000:
        return (
            f"timer message illegal: {name} is more than timerMaxDelaySec ({max_delay_s} s) ahead"
        )
    return None


def _i64(text: str) -> int | None:
    """``text`` as Rust's ``str::trim().parse::<i64>()`` reads it, or None."""
    stripped = text.strip()
    if not _DECIMAL_INTEGER.fullmatch(stripped):
        return None
    value = int(stripped)
    return value if -(2**63) <= value < 2**63 else None


def _is_half(properties: str, sys_flag: int, reconsume_times: int) -> bool:
    """Whether a send is a transaction's half message: as RocketMQ decides it, by its
    ``TRAN_MSG`` property (or the prepared type in its sys flag), unless it is a
    reconsumed message with a delay level, which clients before 4.6.1 send back with the
    property still set."""
    if sys_flag & SYSFLAG_TRANSACTION_MASK != SYSFLAG_TRANSACTION_PREPARED:
        if "TRAN_MSG" not in properties:
            return False
        props = parse_properties(properties)
        if props.get("TRAN_MSG", "").lower() != "true":
            return False
    else:
        props = parse_properties(properties) if "DELAY" in properties else {}
    return not (reconsume_times > 0 and (_i64(props.get("DELAY", "")) or 0) > 0)
