"""Request-reply (RocketMQ 4.6+'s "RPC" messages): the requests a client waits on, the reply
that comes back, and the reply a consumer makes from a request.

A requester sends a request as a normal message carrying ``CORRELATION_ID`` (fresh for each
request), ``REPLY_TO_CLIENT`` (its client id) and ``TTL`` (its timeout in ms); the broker adds
``CLUSTER``. A consumer of the request builds its reply with :func:`create_reply_message` and
sends it with any producer: a message with ``MSG_TYPE=reply`` goes as SEND_REPLY_MESSAGE_V2 to
``{cluster}_REPLY_TOPIC``. The broker pushes it (PUSH_REPLY_MESSAGE_TO_CLIENT) to the
requester's client instance, whose :class:`RequestTable` hands it to the request waiting on its
correlation id.

>>> request = Message("Orders", b"price?", properties={CLUSTER: "DefaultCluster",
...     CORRELATION_ID: "c-1", REPLY_TO_CLIENT: "10.0.0.2@1", TTL: "3000"})
>>> reply = create_reply_message(request, b"42")
>>> reply.topic, reply.properties[MSG_TYPE], reply.properties[CORRELATION_ID]
('DefaultCluster_REPLY_TOPIC', 'reply', 'c-1')
"""

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Mapping
from typing import Protocol

from pyrmq import _core
from pyrmq.client.message import Message
from pyrmq.errors import ClientStateError, MessageIllegalError
from pyrmq.properties import (
    ARRIVE_TIME,
    CLUSTER,
    CORRELATION_ID,
    KEY_SEPARATOR,
    KEYS,
    MSG_TYPE,
    REPLY_MESSAGE_FLAG,
    REPLY_TO_CLIENT,
    REPLY_TOPIC_SUFFIX,
    TAGS,
    TTL,
    UNIQ_KEY,
    parse_properties,
)
from pyrmq.remoting.headers import ReplyMessageRequestHeader
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED

__all__ = [
    "ReplyMessage",
    "RequestTable",
    "create_reply_message",
    "get_reply_to_client",
    "new_correlation_id",
]

log = logging.getLogger(__name__)


class _WithProperties(Protocol):
    @property
    def properties(self) -> Mapping[str, str]: ...


def new_correlation_id() -> str:
    """A fresh correlation id (a random UUID, as RocketMQ's CorrelationIdUtil makes them)."""
    return str(uuid.uuid4())


def create_reply_message(request: _WithProperties, body: str | bytes) -> Message:
    """The reply to ``request`` (a received :class:`~pyrmq.client.message.MessageExt`):
    ``body`` for the reply topic of the request's cluster, with the request's correlation id,
    requester and TTL, and ``MSG_TYPE=reply``, so that a producer's ``send`` delivers it to
    the requester (RocketMQ's MessageUtil.createReplyMessage).

    Raises:
        MessageIllegalError: ``request`` has no ``CLUSTER`` property: it did not come
            through a broker as a request.
    """
    props = request.properties
    cluster = props.get(CLUSTER)
    if cluster is None:
        raise MessageIllegalError(
            f"cannot create a reply: the request has no {CLUSTER} property (a broker names "
            "its cluster on the requests it stores)"
        )
    reply = Message(cluster + REPLY_TOPIC_SUFFIX, body)
    reply.properties[MSG_TYPE] = REPLY_MESSAGE_FLAG
    for name in (CORRELATION_ID, REPLY_TO_CLIENT, TTL):
        value = props.get(name)
        if value is not None:
            reply.properties[name] = value
    return reply


def get_reply_to_client(msg: _WithProperties) -> str | None:
    """The client id a request's reply goes back to (RocketMQ's MessageUtil.getReplyToClient)."""
    return msg.properties.get(REPLY_TO_CLIENT)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplyMessage:
    """A reply, as a broker pushed it to the requester: the replier's message with the
    broker's hosts and store time (no queue offset: a pushed reply is not read from a queue).
    Attribute names are those of :class:`~pyrmq.client.message.MessageExt`.

    >>> r = ReplyMessage(topic="C_REPLY_TOPIC", body=b"42", properties={"UNIQ_KEY": "ID",
    ...     "CORRELATION_ID": "c-1", "TAGS": "A"})
    >>> r.msg_id, r.correlation_id, r.tags, r.get_property("missing")
    ('ID', 'c-1', 'A', None)
    """

    topic: str
    body: bytes
    properties: Mapping[str, str]
    queue_id: int = 0
    flag: int = 0
    sys_flag: int = 0
    reconsume_times: int = 0
    born_timestamp: int = 0
    store_timestamp: int = 0
    born_host: str = ""
    """``ip:port`` of the replier."""
    store_host: str = ""
    """``ip:port`` of the broker that pushed the reply."""

    @property
    def msg_id(self) -> str:
        """The replier's message id (``UNIQ_KEY``), "" if it gave none."""
        return self.properties.get(UNIQ_KEY, "")

    @property
    def id(self) -> str:
        return self.msg_id

    @property
    def correlation_id(self) -> str | None:
        return self.properties.get(CORRELATION_ID)

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> str:
        """The keys, separated by spaces ("" if none)."""
        return KEY_SEPARATOR.join(self.properties.get(KEYS, "").split())

    def get_property(self, name: str) -> str | None:
        return self.properties.get(name)

    @classmethod
    def from_push(cls, ext: Mapping[str, str], body: bytes) -> "ReplyMessage":
        """The reply of a PUSH_REPLY_MESSAGE_TO_CLIENT command (its ext fields and body); the
        body inflated if the replier compressed it. Raises HeaderError for a malformed header,
        MessageBodyError for a body that does not inflate."""
        header = ReplyMessageRequestHeader.from_ext(ext)
        if header.sys_flag & SYSFLAG_COMPRESSED:
            body = _core.inflate_body(body, header.sys_flag)
        props = parse_properties(header.properties)
        props[ARRIVE_TIME] = str(int(time.time() * 1000))
        return cls(
            topic=header.topic,
            body=body,
            properties=props,
            queue_id=header.queue_id,
            flag=header.flag,
            sys_flag=header.sys_flag,
            reconsume_times=header.reconsume_times or 0,
            born_timestamp=header.born_timestamp,
            store_timestamp=header.store_timestamp,
            born_host=header.born_host,
            store_host=header.store_host,
        )


class RequestTable:
    """The requests of one client instance waiting for their replies, by correlation id
    (RocketMQ's RequestFutureHolder). Each entry is removed by the request that made it,
    however that ends."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[asyncio.Future[ReplyMessage], object]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def open(self, correlation_id: str, owner: object) -> "asyncio.Future[ReplyMessage]":
        """A future for the reply to ``correlation_id``, a request of ``owner``."""
        fut: asyncio.Future[ReplyMessage] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = (fut, owner)
        return fut

    def close(self, correlation_id: str) -> None:
        """Forgets the request (answered, timed out or failed)."""
        entry = self._waiting.pop(correlation_id, None)
        if entry is not None and entry[0].done() and not entry[0].cancelled():
            entry[0].exception()  # a failure nobody awaited any more is not reported as lost

    def complete(self, reply: ReplyMessage) -> bool:
        """Hands ``reply`` to the request waiting on its correlation id; False when none
        waits (it timed out, or was never made here)."""
        correlation_id = reply.correlation_id
        entry = self._waiting.get(correlation_id) if correlation_id is not None else None
        if entry is None or entry[0].done():
            return False
        entry[0].set_result(reply)
        return True

    def fail(self, owner: object, reason: str) -> int:
        """Fails the waiting requests of ``owner`` (shutting down) with a ClientStateError
        saying ``reason``; returns how many there were."""
        failed = 0
        for fut, made_by in list(self._waiting.values()):
            if made_by is owner and not fut.done():
                fut.set_exception(ClientStateError(reason))
                failed += 1
        return failed
