"""Messages as the client sees them: :class:`Message` to send, :class:`MessageExt` received,
:class:`MessageQueue` naming one queue, and the producer's unique message ids."""

import dataclasses
import enum
import os
import random
import socket
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Final, NamedTuple

from pyrmq import _core
from pyrmq.errors import MessageBodyError
from pyrmq.properties import (
    DELAY,
    KEY_SEPARATOR,
    KEYS,
    TAGS,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    WAIT,
)
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED

__all__ = [
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "new_message_id",
    "unreadable",
]

RETRY_PREFIX: Final = "%RETRY%"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Message:
    """A message to send: topic, body, tags, keys, user properties and a delay level.

    Both the official client's setters and keyword arguments work:

    >>> m = Message("TopicTest", b"hello", tags="TagA", keys=["k1", "k2"])
    >>> m.set_property("region", "eu")
    >>> (m.tags, m.keys, m.properties["region"])
    ('TagA', 'k1 k2', 'eu')
    >>> m.set_delay_time_level(3)
    >>> m.delay_time_level
    3
    """

    __slots__ = ("body", "flag", "properties", "topic")

    def __init__(
        self,
        topic: str | bytes,
        body: str | bytes = b"",
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
        delay_time_level: int = 0,
        flag: int = 0,
    ) -> None:
        # A str topic and a bytes body (the common case) take no call: producers build a
        # message per send, or 32 per batch.
        self.topic: str = topic if type(topic) is str else _text(topic)
        if type(body) is not bytes:
            body = body.encode() if isinstance(body, str) else bytes(body)
        self.body: bytes = body
        self.flag = flag
        self.properties: dict[str, str] = dict(properties) if properties else {}
        if tags is not None:
            self.set_tags(tags)
        if keys is not None:
            self.set_keys(keys)
        if delay_time_level:
            self.set_delay_time_level(delay_time_level)

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> str | None:
        """The keys, separated by spaces."""
        return self.properties.get(KEYS)

    @property
    def delay_time_level(self) -> int:
        return int(self.properties.get(DELAY, "0"))

    def set_tags(self, tags: str | bytes) -> None:
        self.properties[TAGS] = _text(tags)

    def set_keys(self, keys: str | bytes | Iterable[str]) -> None:
        if isinstance(keys, str | bytes):
            self.properties[KEYS] = _text(keys)
        else:
            self.properties[KEYS] = KEY_SEPARATOR.join(keys)

    def set_body(self, body: str | bytes) -> None:
        if isinstance(body, str):
            self.body = body.encode()
        elif isinstance(body, bytes | bytearray | memoryview):
            self.body = bytes(body)
        else:
            # bytes(5) would be five zero bytes: refused, as the official client refuses it.
            raise TypeError(f"a message body is str or bytes, not {type(body).__name__}")

    def set_property(self, key: str | bytes, value: str | bytes) -> None:
        self.properties[_text(key)] = _text(value)

    def set_delay_time_level(self, delay_time_level: int) -> None:
        if delay_time_level > 0:
            self.properties[DELAY] = str(delay_time_level)
        else:
            self.properties.pop(DELAY, None)

    def set_deliver_time_ms(self, epoch_ms: int) -> None:
        """Makes this a timer message, delivered at ``epoch_ms`` (RocketMQ 5's
        ``TIMER_DELIVER_MS``); its send result then carries a ``recall_handle``."""
        self._set_timer(TIMER_DELIVER_MS, epoch_ms)

    def set_delay_time_sec(self, seconds: int) -> None:
        """Makes this a timer message, delivered ``seconds`` after the broker stores it."""
        self._set_timer(TIMER_DELAY_SEC, seconds)

    def set_delay_time_ms(self, ms: int) -> None:
        """Makes this a timer message, delivered ``ms`` after the broker stores it."""
        self._set_timer(TIMER_DELAY_MS, ms)

    def _set_timer(self, name: str, value: int) -> None:
        # One timer per message: the broker goes by the first it finds.
        for other in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
            self.properties.pop(other, None)
        self.properties[name] = str(int(value))

    def set_wait_store_msg_ok(self, wait: bool) -> None:
        """Whether a SYNC_FLUSH broker answers only once the message is durable (default)."""
        self.properties[WAIT] = "true" if wait else "false"

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, tags={self.tags!r}, body=<{len(self.body)} bytes>)"


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker; orders like Java's (topic, broker, queue id)."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> dict[str, object]:
        return {"topic": self.topic, "brokerName": self.broker_name, "queueId": self.queue_id}

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


MessageExt = _core.MessageExt
"""A received message (built in Rust straight from the pull answer): every stored field under
the official client's names, the producer's id, the broker it came from, and the body inflated
when it was compressed. A message redelivered from the group's retry topic shows its original
topic; ``stored`` is the record as stored."""


def unreadable(msg: MessageExt) -> bool:
    """Whether ``msg``'s body does not inflate (corrupt, or a compression RocketMQ does not
    have): no listener can ever consume it, so it goes to the dead-letter queue at once, as
    RocketMQ 5's clients send corrupted messages there."""
    if not msg.sys_flag & SYSFLAG_COMPRESSED:
        return False
    try:
        msg.body  # noqa: B018 - inflated here, and kept for the listener
    except MessageBodyError:
        return True
    return False


class SendStatus(enum.IntEnum):
    """How a send ended; anything but OK means stored, with a caveat."""

    OK = 0
    FLUSH_DISK_TIMEOUT = 1
    FLUSH_SLAVE_TIMEOUT = 2
    SLAVE_NOT_AVAILABLE = 3


class _SendResultFields(NamedTuple):
    status: SendStatus
    msg_id: str
    offset: int


class SendResult(_SendResultFields):
    """What a broker answered to a send: ``(status, msg_id, offset)`` like the official
    client's namedtuple, plus the broker's ``offset_msg_id`` and the ``message_queue``.

    ``msg_id`` is the producer's id (``UNIQ_KEY``; for a batch, the ids joined by commas) and
    ``offset`` the queue offset.

    >>> r = SendResult(SendStatus.OK, "ID", 7, "OFFSET_ID", MessageQueue("T", "b", 1))
    >>> status, msg_id, offset = r
    >>> (status.name, offset, r.offset_msg_id, r.message_queue.queue_id)
    ('OK', 7, 'OFFSET_ID', 1)
    """

    offset_msg_id: str
    message_queue: MessageQueue | None
    # What Producer.recall_message takes to recall a timer message before it falls due; None
    # for other messages.
    recall_handle: str | None

    def __new__(
        cls,
        status: SendStatus,
        msg_id: str,
        offset: int,
        offset_msg_id: str = "",
        message_queue: MessageQueue | None = None,
        recall_handle: str | None = None,
    ) -> "SendResult":
        self = super().__new__(cls, status, msg_id, offset)
        self.offset_msg_id = offset_msg_id
        self.message_queue = message_queue
        self.recall_handle = recall_handle
        return self

    @property
    def queue_offset(self) -> int:
        return self.offset

    def __repr__(self) -> str:
        return (
            f"SendResult(status={self.status.name}, msg_id={self.msg_id!r}, "
            f"offset={self.offset}, offset_msg_id={self.offset_msg_id!r}, "
            f"message_queue={self.message_queue})"
        )


_MONTH: tuple[int, int] = (0, 0)
"""(start, end) of the current month in epoch ms: ids count ms from its start."""
_ID_LOCK = threading.Lock()


def _local_ip() -> bytes:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            # No packet is sent: connect() on UDP only picks the outgoing interface.
            s.connect(("10.255.255.255", 1))
            return socket.inet_aton(s.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


def _id_prefix() -> bytes:
    return _local_ip() + struct.pack(">H", os.getpid() & 0xFFFF) + random.randbytes(4)


_ID_PREFIX = _id_prefix()


def _renew_id_prefix() -> None:
    # A forked child would otherwise make its parent's ids, counter included.
    global _ID_PREFIX
    _ID_PREFIX = _id_prefix()


os.register_at_fork(after_in_child=_renew_id_prefix)


def _month_bounds(now_ms: int) -> tuple[int, int]:
    t = time.localtime(now_ms / 1000)
    start = time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1))
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    end = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
    return int(start * 1000), int(end * 1000)


def new_message_id() -> str:
    """A producer message id in Java's layout: IP, PID, a random instance part, then the ms
    since the start of the month and a counter; 32 upper-case hex digits.

    >>> a, b = new_message_id(), new_message_id()
    >>> len(a), a != b, a[:20] == b[:20]
    (32, True, True)
    """
    return new_message_ids(1)[0]


def new_message_ids(count: int) -> list[str]:
    """``count`` fresh ids at once (one clock read), as :func:`new_message_id` makes them.

    >>> ids = new_message_ids(3)
    >>> len(set(ids)), ids[0][:20] == ids[2][:20]
    (3, True)
    """
    global _MONTH
    now_ms = time.time_ns() // 1_000_000
    start, end = _MONTH
    if not start <= now_ms < end:
        with _ID_LOCK:
            _MONTH = _month_bounds(now_ms)
            start = _MONTH[0]
    return _core.message_ids(_ID_PREFIX + struct.pack(">I", (now_ms - start) & 0xFFFFFFFF), count)


def set_unique_id(message: Message) -> str:
    """Gives ``message`` a fresh ``UNIQ_KEY`` unless it has one; returns it."""
    uniq = message.properties.get(UNIQ_KEY)
    if uniq is None:
        uniq = message.properties[UNIQ_KEY] = new_message_id()
    return uniq
