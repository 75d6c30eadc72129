"""The asyncio producer: sends to a topic's queues round robin, across brokers, with retries
on another broker and a latency-fault list that steers around brokers that failed.

Every check on a message (topic name, empty or oversized body, property names, batch rules)
runs before anything goes on the wire and raises a :class:`~pyrmq.errors.MessageIllegalError`
subclass. A send that no broker accepted raises :class:`~pyrmq.errors.SendError`, whose
``__cause__`` is the last failure; a broker's refusal of the message itself (a code no other
broker would answer differently, such as MESSAGE_ILLEGAL) raises
:class:`~pyrmq.errors.BrokerError` at once, as RocketMQ's producer does.
"""

import asyncio
import dataclasses
import itertools
import logging
import math
import random
import struct
import time
import zlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Final

from pyrmq import _core
from pyrmq.client.api import SendRequest
from pyrmq.client.fault import FAILURE_ISOLATION_MS, LatencyFaults
from pyrmq.client.instance import DEFAULT_TOPIC, ClientConfig, ClientInstance, ClientLifecycle
from pyrmq.client.message import (
    RETRY_PREFIX,
    Message,
    MessageQueue,
    SendResult,
    new_message_ids,
    set_unique_id,
)
from pyrmq.client.namespaced import name_in, queue_in, queue_shown, topic_in
from pyrmq.client.request import ReplyMessage, new_correlation_id
from pyrmq.client.route import PERM_WRITE, TopicRoute
from pyrmq.errors import (
    BrokerError,
    ConfigError,
    MessageIllegalError,
    NoRouteError,
    PyrmqError,
    RequestTimeoutError,
    SendError,
)
from pyrmq.properties import (
    CORRELATION_ID,
    MSG_TYPE,
    REPLY_MESSAGE_FLAG,
    REPLY_TO_CLIENT,
    TTL,
    UNIQ_KEY,
)
from pyrmq.recall_handle import RecallHandle
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED, ResponseCode

__all__ = ["MessageQueueSelector", "Producer", "select_by_hash"]

log = logging.getLogger(__name__)

MAX_MESSAGE_SIZE: Final = 4 * 1024 * 1024
COMPRESS_TYPES: Final = ("zlib", "lz4", "zstd")
# PROPERTIESLEN is a signed 2-byte field of the stored record.
_BATCH_ITEM = struct.Struct(">iiiii")
_BATCH_PROPS_LEN = struct.Struct(">h")

# Answers after which another broker may succeed (RocketMQ's retryResponseCodes).
_RETRYABLE: Final = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
        ResponseCode.NO_BUYER_ID,
        ResponseCode.NOT_IN_CURRENT_UNIT,
    }
)

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]
"""``(queues, message, arg) -> the queue to send to``, for ordered sends."""


def select_by_hash(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """The queue at ``hash(arg) % len(mqs)``; ints are used as they are, strings hashed as
    Java's ``String.hashCode`` so that Java and Python producers agree (RocketMQ's
    SelectMessageQueueByHash).

    >>> qs, m = [MessageQueue("T", "b", i) for i in range(4)], Message("T", b"x")
    >>> select_by_hash(qs, m, 6).queue_id, select_by_hash(qs, m, -6).queue_id
    (2, 2)
    >>> select_by_hash(qs, m, "order-1") == select_by_hash(qs, Message("T", b"y"), "order-1")
    True
    """
    key = abs(_core.java_string_hash(arg)) if isinstance(arg, str) else abs(int(arg))
    return mqs[key % len(mqs)]


class _PublishInfo:
    __slots__ = ("broker_names", "from_default", "queues", "route")

    def __init__(self, route: TopicRoute, queues: list[MessageQueue], from_default: bool) -> None:
        self.route = route
        self.queues = queues
        self.from_default = from_default
        self.broker_names = tuple(dict.fromkeys(q.broker_name for q in queues))


@dataclasses.dataclass(frozen=True, slots=True)
class _Outgoing:
    """One message or one batch, checked and encoded once; each attempt only names a queue."""

    topic: str
    body: bytes
    properties: str
    flag: int
    sys_flag: int
    batch: bool
    msg_id: str
    reply: bool = False


class Producer(ClientLifecycle):
    """Sends messages; use ``async with`` or :meth:`start` / :meth:`shutdown`.

    Args:
        group: The producer group.
        namesrv_addr: Name servers, ``host:port`` separated by ``;`` (default
            ``127.0.0.1:9876``).
        send_timeout_s: Time for one send, retries included.
        retry_times_when_send_failed: Further attempts, each on another broker when there is
            one, after a send that got no answer or a retryable error code.
        compress_over: Bodies of at least this many bytes are sent compressed (when that
            makes them smaller), with sysflag bit 0 set.
        compress_level: zlib level.
        compress_type: ``"zlib"``, or, as RocketMQ 4.9.4 producers may (``compressType``),
            ``"lz4"`` or ``"zstd"``: faster, and named in sysflag bits 8-10. Consumers older
            than RocketMQ 4.9.4 (the C++ clients among them) read zlib bodies only.
        max_message_size: Largest body (or encoded batch) accepted, in bytes.
        default_topic_queue_nums: Queues per broker of a topic the broker auto-creates.
        send_latency_fault_enable: Steer around brokers that failed or answered slowly.
        fault_isolation_s: How long a broker that failed a send is avoided.
        instance_name: Distinguishes client instances in one process.
        client_config: Settings of the shared client instance; ``namesrv_addr`` and
            ``instance_name``, when given as well, replace its own.

    >>> async def main(namesrv: str) -> None:  # doctest: +SKIP
    ...     async with Producer("PG", namesrv) as producer:
    ...         result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))
    ...         print(result.status, result.msg_id)
    """

    _KIND = "producer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        send_timeout_s: float = 3.0,
        retry_times_when_send_failed: int = 2,
        compress_over: int = 4096,
        compress_level: int = 5,
        compress_type: str = "zlib",
        max_message_size: int = MAX_MESSAGE_SIZE,
        default_topic_queue_nums: int = 4,
        send_latency_fault_enable: bool = True,
        fault_isolation_s: float = FAILURE_ISOLATION_MS / 1000,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
    ) -> None:
        self.config = ClientConfig.of(client_config, namesrv_addr, instance_name)
        self.namespace = self.config.namespace
        self.group = name_in(self.namespace, group)
        self.send_timeout_s = send_timeout_s
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.compress_over = compress_over
        self.compress_level = compress_level
        if compress_type.lower() not in COMPRESS_TYPES:
            raise ConfigError(f"compress_type {compress_type!r} is not one of {COMPRESS_TYPES}")
        self.compress_type = compress_type.lower()
        self.max_message_size = max_message_size
        self.default_topic_queue_nums = default_topic_queue_nums
        self.faults = (
            LatencyFaults(failure_isolation_ms=int(fault_isolation_s * 1000))
            if send_latency_fault_enable
            else None
        )
        self._publish: dict[str, _PublishInfo] = {}
        self._index = itertools.count(random.randrange(1 << 16))
        self._instance: ClientInstance | None = None
        self._async_sends: set[asyncio.Task[SendResult]] = set()

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        if self._instance is not None:
            return
        inst = ClientInstance.acquire(self.config, self.group, consumer=False)
        inst.producers[self.group] = self
        inst.start()
        self._instance = inst
        # As RocketMQ's producer: the brokers an instance already knows learn of this group
        # now, not at the next round (they push replies to the producers they know).
        await inst.heartbeat_all()

    async def shutdown(self) -> None:
        """Waits (up to ``send_timeout_s``) for sends started by :meth:`send_async`,
        unregisters from the brokers and stops the client instance if nothing else uses it."""
        if self._instance is None:
            return
        self._instance.requests.fail(self, f"producer {self.group} shut down before the reply came")
        if self._async_sends:
            await asyncio.wait(set(self._async_sends), timeout=self.send_timeout_s)
        for task in list(self._async_sends):
            task.cancel()
        inst, self._instance = self._instance, None
        inst.producers.pop(self.group, None)
        await inst.unregister(producer_group=self.group)
        await inst.release()

    # --- ClientInstance member -----------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self._publish)

    def on_route(self, topic: str, route: TopicRoute) -> None:
        # As RocketMQ's producer, the name servers' route replaces what was known, even one
        # whose queues all lost write permission (a broker drained with wipeWritePerm).
        self._publish[topic] = _PublishInfo(route, route.publish_queues(), False)

    # --- routes --------------------------------------------------------------------------

    async def _publish_info(self, topic: str) -> _PublishInfo:
        info = self._publish.get(topic)
        if info is None or not info.queues:
            info = await self._fetch_publish_info(topic, info)
        if not info.queues:
            raise NoRouteError(f"no route info of topic {topic}: none of its queues takes sends")
        return info

    async def _fetch_publish_info(self, topic: str, info: _PublishInfo | None) -> _PublishInfo:
        """The queues of ``topic``'s route from the name servers; TBW102's, as RocketMQ's
        producer takes them, only while no name server knows the topic. Those are kept until
        the periodic route refresh finds the topic, so its first sends spread over every broker
        that auto-creates it."""
        inst = self.instance
        try:
            route = await inst.update_route(topic)
        except NoRouteError:
            if info is None:
                raise
            return info  # no name server answered: keep what was known
        if route is not None:
            info = self._publish[topic] = _PublishInfo(route, route.publish_queues(), False)
            return info
        if info is not None:
            return info
        # Unknown topic: send to the brokers that auto-create topics (TBW102's route); each
        # creates the topic and registers it.
        default = await inst.update_route(DEFAULT_TOPIC)
        if default is None:
            raise NoRouteError(f"no route info of topic {topic}, nor of {DEFAULT_TOPIC}")
        queues = []
        for q in default.queues:
            broker = default.brokers.get(q.broker_name)
            if q.perm & PERM_WRITE and broker is not None and broker.master is not None:
                count = min(q.write_queue_nums, self.default_topic_queue_nums)
                queues += [MessageQueue(topic, q.broker_name, i) for i in range(count)]
        if not queues:
            raise NoRouteError(f"no route info of topic {topic}: no broker auto-creates it")
        info = self._publish[topic] = _PublishInfo(default, queues, True)
        return info

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a send to ``topic`` may go to."""
        queues = (await self._publish_info(topic_in(self.namespace, topic))).queues
        return [queue_shown(self.namespace, q) for q in queues]

    def _select(self, info: _PublishInfo, last_broker: str | None) -> MessageQueue:
        """The next queue round robin, passing over brokers the fault list avoids and, on a
        retry, the broker that just failed."""
        queues = info.queues
        start = next(self._index)
        faults = self.faults
        if last_broker is None and not faults:
            return queues[start % len(queues)]
        usable = [q for q in queues if faults is None or faults.is_available(q.broker_name)]
        others = [q for q in usable if q.broker_name != last_broker]
        pick = others or usable
        if not pick:
            # Every broker is avoided: try the one whose pause ends first.
            least = faults.least_bad(info.broker_names) if faults is not None else None
            pick = [q for q in queues if q.broker_name == least] or queues
        return pick[start % len(pick)]

    # --- encoding ------------------------------------------------------------------------

    def _encode(self, msg: Message) -> _Outgoing:
        """Checks (RocketMQ's Validators.checkMessage, before any I/O) and encodes one message."""
        reply = msg.properties.get(MSG_TYPE) == REPLY_MESSAGE_FLAG
        topic = topic_in(self.namespace, msg.topic)
        _core.validate_topic(topic)
        uniq = set_unique_id(msg)
        # Rust checks body and properties as it does for each message of a batch.
        props = _core.encode_message(msg, topic, self.max_message_size)
        body, sys_flag = msg.body, 0
        if len(body) >= self.compress_over:
            packed, flag = self._compress(body)
            if len(packed) < len(body):
                body, sys_flag = packed, flag
        return _Outgoing(topic, body, props, msg.flag, sys_flag, False, uniq, reply)

    def _compress(self, body: bytes) -> tuple[bytes, int]:
        if self.compress_type == "zlib":
            return zlib.compress(body, self.compress_level), SYSFLAG_COMPRESSED
        return _core.compress_body(bytes(body), self.compress_type, self.compress_level)

    def _encode_batch(self, msgs: Sequence[Message]) -> _Outgoing:
        """One body of encoded messages (spec §7.3); the batch's ids joined by commas."""
        if not msgs:
            raise MessageIllegalError("a batch needs at least one message")
        topic = msgs[0].topic
        if topic.startswith(RETRY_PREFIX):
            raise MessageIllegalError(f"messages to retry topic {topic} cannot be batched")
        for m in msgs:
            if m.topic != topic:
                raise MessageIllegalError(
                    f"every message of a batch must have one topic: {m.topic} is not {topic}"
                )
        topic = topic_in(self.namespace, topic)
        _core.validate_topic(topic)
        props = [m.properties for m in msgs]
        fresh = [p for p in props if UNIQ_KEY not in p]
        for p, uniq in zip(fresh, new_message_ids(len(fresh)), strict=True):
            p[UNIQ_KEY] = uniq
        ids = [p[UNIQ_KEY] for p in props]
        # Rust checks and encodes each message (body, properties, delay level, sizes).
        body = _core.encode_batch(msgs, topic, self.max_message_size)
        return _Outgoing(topic, body, "", 0, 0, True, ",".join(ids))

    def _request(self, out: _Outgoing, mq: MessageQueue) -> SendRequest:
        return SendRequest(
            producer_group=self.group,
            queue=mq,
            body=out.body,
            properties=out.properties,
            flag=out.flag,
            sys_flag=out.sys_flag,
            batch=out.batch,
            default_topic_queue_nums=self.default_topic_queue_nums,
            reply=out.reply,
        )

    # --- sending -------------------------------------------------------------------------

    async def _send_with_retries(
        self,
        out: _Outgoing,
        timeout_s: float | None,
        queue: MessageQueue | None = None,
    ) -> SendResult:
        inst = self.instance
        deadline = time.monotonic() + (self.send_timeout_s if timeout_s is None else timeout_s)
        if queue is not None:
            queue = queue_in(self.namespace, queue)
        # A send to a chosen queue never moves (RocketMQ sends those once).
        attempts = 1 if queue is not None else 1 + self.retry_times_when_send_failed
        last_broker: str | None = None
        last_error: PyrmqError | None = None
        # A reply goes to each broker once at most: one that failed it may have stored it all
        # the same (a broker refuses a reply whose requester it does not know, and stores it).
        tried: set[str] = set()
        made = 0
        while made < attempts:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if queue is not None:
                mq = queue
            else:
                info = await self._publish_info(out.topic)
                if out.reply and last_broker is not None:
                    tried.add(last_broker)
                    untried = [q for q in info.queues if q.broker_name not in tried]
                    if not untried:
                        break
                    info = _PublishInfo(info.route, untried, info.from_default)
                mq = self._select(info, last_broker)
            made += 1
            started = time.monotonic()
            try:
                addr = await inst.master_addr(mq.broker_name, out.topic)
                result = await inst.api.send(addr, self._request(out, mq), out.msg_id, remaining)
            except BrokerError as e:
                if e.code not in _RETRYABLE:
                    # The message itself was refused: no broker would take it.
                    self._fault(mq.broker_name, started, failed=False)
                    raise
                self._fault(mq.broker_name, started, failed=True)
                last_broker, last_error = mq.broker_name, e
                log.info("send to %s failed attempt=%d: %s", mq, made, e)
            except PyrmqError as e:  # no connection, no answer in time, no address
                self._fault(mq.broker_name, started, failed=True)
                last_broker, last_error = mq.broker_name, e
                log.info("send to %s failed attempt=%d: %s", mq, made, e)
            else:
                self._fault(mq.broker_name, started, failed=False)
                if self.namespace and result.message_queue is not None:
                    result.message_queue = queue_shown(self.namespace, result.message_queue)
                return result
        if last_error is None:
            raise SendError(f"send to {out.topic} ran out of time before an attempt")
        raise SendError(
            f"send to {out.topic} failed after {made} attempt(s): {last_error}"
        ) from last_error

    def _in_topic(self, queue: MessageQueue, topic: str) -> bool:
        """Whether ``queue`` is one of ``topic``'s, either named with or without the
        namespace."""
        return topic_in(self.namespace, queue.topic) == topic_in(self.namespace, topic)

    def _fault(self, broker: str, started: float, *, failed: bool) -> None:
        if self.faults is not None:
            latency_ms = int((time.monotonic() - started) * 1000)
            self.faults.update(broker, latency_ms, failed=failed)

    async def send(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Sends one message and returns the broker's answer.

        Retries on another broker up to ``retry_times_when_send_failed`` times, within
        ``timeout_s`` (default ``send_timeout_s``) in all. With ``queue``, sends there once. A
        reply (:func:`~pyrmq.client.request.create_reply_message`) goes to each broker at most
        once: one that refused it may have stored it.

        Raises:
            MessageIllegalError: The message failed a client-side check; nothing was sent.
            SendError: No broker took the message; ``__cause__`` is the last failure.
            BrokerError: A broker refused the message itself (for example MESSAGE_ILLEGAL).
            NoRouteError: Neither the topic nor TBW102 has a route.
        """
        if queue is not None and not self._in_topic(queue, msg.topic):
            raise MessageIllegalError(f"message topic {msg.topic} is not the queue's ({queue})")
        return await self._send_with_retries(self._encode(msg), timeout_s, queue)

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Sends messages of one topic in one request, stored together in one queue.

        ``msg_id`` of the result is the messages' ids joined by commas. A batch must not carry
        delay levels or go to a retry topic.
        """
        out = self._encode_batch(msgs)
        if queue is not None and not self._in_topic(queue, out.topic):
            raise MessageIllegalError(f"batch topic {out.topic} is not the queue's ({queue})")
        return await self._send_with_retries(out, timeout_s, queue)

    async def send_orderly(
        self,
        msg: Message,
        arg: Any,
        selector: MessageQueueSelector = select_by_hash,
        *,
        timeout_s: float | None = None,
    ) -> SendResult:
        """Sends to the queue ``selector`` picks for ``arg`` (by default ``hash(arg) % n``),
        so messages with one sharding key keep their order. Never moves to another queue."""
        out = self._encode(msg)
        queues = (await self._publish_info(out.topic)).queues
        if self.namespace:
            queues = [queue_shown(self.namespace, q) for q in queues]
        mq = selector(queues, msg, arg)
        if not self._in_topic(mq, out.topic):
            raise MessageIllegalError(f"the selector chose {mq}, not a queue of {msg.topic}")
        return await self._send_with_retries(out, timeout_s, mq)

    async def request(
        self,
        msg: Message,
        timeout_s: float = 3.0,
        *,
        queue: MessageQueue | None = None,
    ) -> ReplyMessage:
        """Sends ``msg`` as a request and returns its reply (RocketMQ 4.6+'s
        ``DefaultMQProducer.request``): a consumer of the request answers with
        :func:`~pyrmq.client.request.create_reply_message` and any producer's :meth:`send`, and
        the broker pushes that reply back to this client.

        ``msg`` gets a fresh ``CORRELATION_ID``, this client's id as ``REPLY_TO_CLIENT`` and
        ``timeout_s`` in ms as ``TTL``. ``timeout_s`` bounds the whole request: route lookup,
        the heartbeat that makes this client known to the brokers, the send (which retries as
        :meth:`send` does; with ``queue``, it goes there once) and the wait for the reply.

        Raises:
            ValueError: ``timeout_s`` is not a positive finite number.
            RequestTimeoutError: No reply came within ``timeout_s``, also when the time ran out
                before the send completed.
            ClientStateError: The producer shut down while the request waited.
            MessageIllegalError, SendError, BrokerError, NoRouteError: As :meth:`send`: the
                request was not sent.

        >>> async def ask(producer: Producer) -> bytes:  # doctest: +SKIP
        ...     reply = await producer.request(Message("PriceRequests", b"AAPL"), timeout_s=3)
        ...     return reply.body
        """
        return await self._await_reply(
            msg, timeout_s, lambda remaining_s: self.send(msg, queue=queue, timeout_s=remaining_s)
        )

    async def request_orderly(
        self,
        msg: Message,
        arg: Any,
        selector: MessageQueueSelector = select_by_hash,
        *,
        timeout_s: float = 3.0,
    ) -> ReplyMessage:
        """:meth:`request` to the queue ``selector`` picks for ``arg``, as :meth:`send_orderly`
        sends."""
        return await self._await_reply(
            msg,
            timeout_s,
            lambda remaining_s: self.send_orderly(msg, arg, selector, timeout_s=remaining_s),
        )

    async def _await_reply(
        self,
        msg: Message,
        timeout_s: float,
        send: Callable[[float], Awaitable[SendResult]],
    ) -> ReplyMessage:
        if not (timeout_s > 0 and math.isfinite(timeout_s)):
            raise ValueError(f"a request's timeout must be a positive number, not {timeout_s}")
        inst = self.instance
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        correlation_id = new_correlation_id()
        msg.properties[CORRELATION_ID] = correlation_id
        msg.properties[REPLY_TO_CLIENT] = inst.client_id
        msg.properties[TTL] = str(int(timeout_s * 1000))
        topic = topic_in(self.namespace, msg.topic)
        requests = inst.requests

        def timed_out(sent: bool) -> RequestTimeoutError:
            stage = "was sent, but" if sent else "ran out of time before its send completed:"
            return RequestTimeoutError(
                f"request to {msg.topic} {stage} no reply came within {timeout_s} s "
                f"(correlation id {correlation_id})"
            )

        # One deadline for everything: route lookup, heartbeat, send and the wait.
        timer = asyncio.timeout_at(deadline)
        sent = False
        try:
            async with timer:
                # The brokers find this client for the reply by its producer heartbeats: first
                # heartbeat those the request may go to that have had none naming a producer
                # (RocketMQ's client does so for a topic whose route it lacks).
                info = await self._publish_info(topic)
                await inst.introduce_producers(info.broker_names)
                reply = requests.open(correlation_id, self)
                try:
                    await send(deadline - loop.time())
                except PyrmqError as e:
                    if loop.time() < deadline:
                        raise
                    raise timed_out(sent=False) from e
                sent = True
                # Not wait_for: the reply's future stays as it is for the table to close.
                await asyncio.wait({reply})
                return reply.result()
        except TimeoutError:
            if not timer.expired():
                raise  # not this deadline's
            raise timed_out(sent) from None
        finally:
            requests.close(correlation_id)

    async def recall_message(
        self, topic: str, recall_handle: str, *, timeout_s: float | None = None
    ) -> str:
        """Recalls a timer message before it falls due (RocketMQ 5.3's ``recallMessage``),
        with the ``recall_handle`` its send returned; returns the message's id. The broker
        named in the handle must have ``recallMessageEnable`` on.

        Raises:
            RecallHandleError: ``recall_handle`` is not a handle.
            BrokerError: The broker refused, for example ILLEGAL_OPERATION once the message
                is due, or NO_PERMISSION where recalls are off.
        """
        if topic.startswith((RETRY_PREFIX, "%DLQ%")):
            raise MessageIllegalError(f"topic {topic} takes no recalls")
        handle = RecallHandle.decode(recall_handle)
        inst = self.instance
        topic = topic_in(self.namespace, topic)
        addr = await inst.master_addr(handle.broker_name, topic)
        return await inst.api.recall(
            addr,
            topic,
            recall_handle,
            handle.broker_name,
            self.group,
            self.send_timeout_s if timeout_s is None else timeout_s,
        )

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Sends without waiting for an answer: fastest, and unacknowledged. Raises
        :class:`~pyrmq.errors.SendError` only if the request could not be written."""
        if queue is not None and not self._in_topic(queue, msg.topic):
            raise MessageIllegalError(f"message topic {msg.topic} is not the queue's ({queue})")
        out = self._encode(msg)
        inst = self.instance
        if queue is not None:
            mq = queue_in(self.namespace, queue)
        else:
            mq = self._select(await self._publish_info(out.topic), None)
        started = time.monotonic()
        try:
            addr = await inst.master_addr(mq.broker_name, out.topic)
            await inst.api.send_oneway(addr, self._request(out, mq))
        except PyrmqError as e:
            self._fault(mq.broker_name, started, failed=True)
            raise SendError(f"oneway send to {mq} failed: {e}") from e

    def send_async(
        self,
        msg: Message,
        on_success: Callable[[SendResult], None] | None = None,
        on_exception: Callable[[BaseException], None] | None = None,
        *,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> "asyncio.Task[SendResult]":
        """Starts :meth:`send` and returns its task; the callbacks run in the event loop when
        it ends. The producer keeps the task until it ends, and :meth:`shutdown` waits for it
        (a send still running after ``send_timeout_s`` is cancelled, and ``on_exception`` gets
        a CancelledError). A callback that raises is logged."""
        self.instance  # noqa: B018 (raises ClientStateError when not started)
        return self._track(
            self.send(msg, queue=queue, timeout_s=timeout_s), msg, on_success, on_exception
        )

    async def send_async_checked(
        self,
        msg: Message,
        on_success: Callable[[SendResult], None] | None = None,
        on_exception: Callable[[BaseException], None] | None = None,
    ) -> "asyncio.Task[SendResult]":
        """:meth:`send_async`, but what fails before anything is sent raises here instead of
        reaching ``on_exception``: the client-side checks (:class:`MessageIllegalError`) and a
        topic without a route (:class:`NoRouteError`), as the official client's async send."""
        self.instance  # noqa: B018 (raises ClientStateError when not started)
        out = self._encode(msg)
        await self._publish_info(out.topic)
        return self._track(self._send_with_retries(out, None, None), msg, on_success, on_exception)

    def _track(
        self,
        send: Coroutine[Any, Any, SendResult],
        msg: Message,
        on_success: Callable[[SendResult], None] | None,
        on_exception: Callable[[BaseException], None] | None,
    ) -> "asyncio.Task[SendResult]":
        task = asyncio.get_running_loop().create_task(send)
        self._async_sends.add(task)

        def done(t: "asyncio.Task[SendResult]") -> None:
            self._async_sends.discard(t)
            exc = asyncio.CancelledError() if t.cancelled() else t.exception()
            try:
                if exc is None:
                    if on_success is not None:
                        on_success(t.result())
                elif on_exception is not None:
                    on_exception(exc)
            except Exception:
                log.exception("send callback failed topic=%s", msg.topic)

        task.add_done_callback(done)
        return task
