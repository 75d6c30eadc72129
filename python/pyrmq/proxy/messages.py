"""Messages between RocketMQ 5's gRPC form and the store's records.

A sent message's system properties become the record's well-known properties (RocketMQ's own
mapping: the message id is ``UNIQ_KEY``, the tag ``TAGS``, the keys ``KEYS``, the message group
``__SHARDINGKEY``), so 4.x consumers read gRPC-sent messages and gRPC consumers read 4.x-sent
ones. Sends are checked by the proxy's rules (RocketMQ 5's defaults), each failure a status code.
"""

import dataclasses
import hashlib
import re
import zlib
from collections.abc import Mapping

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from pyrmq import _core
from pyrmq.errors import MessageBodyError
from pyrmq.properties import CHECK_IMMUNITY, KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED
from pyrmq.store import StoredMessage

__all__ = [
    "DLQ_ORIGIN_MESSAGE_ID",
    "DLQ_ORIGIN_TOPIC",
    "MESSAGE_GROUP",
    "SendCheckError",
    "checked_properties",
    "duration_s",
    "timestamp",
    "to_delivered",
]

MESSAGE_GROUP = "__SHARDINGKEY"
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
# RocketMQ 5's proxy: a delay message is due at most a day ahead.
MAX_DELAY_MS = 24 * 3600 * 1000
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
TRACE_CONTEXT = "TRACE_CONTEXT"
BORN_HOST = "__BORNHOST"
"""The born host a gRPC producer names (its own address), delivered in place of the
connection's."""
BORN_TIMESTAMP = "BORN_TIMESTAMP"
"""The born time a gRPC producer gives, in ms; the record's is the broker's, as RocketMQ's
proxy takes the time it forwards the message."""

MAX_USER_PROPERTIES = 128
MAX_PROPERTIES_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64
# RocketMQ 5's proxy: maxTransactionRecoverySecond.
MAX_TRANSACTION_RECOVERY_S = 3600

# Property names the broker and the clients give a meaning to: not a user's to set, and not
# handed back to gRPC consumers as user properties (RocketMQ's MessageConst system names).
SYSTEM_PROPERTIES = frozenset(
    {
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "MSG_REGION",
        "TRACE_ON",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "INNER_MULTI_DISPATCH",
        TRACE_CONTEXT,
        "TIMER_DELIVER_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELAY_MS",
        "TIMER_OUT_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        BORN_TIMESTAMP,
        "__CRC32#",
        "__STARTDELIVERTIME",
        CHECK_IMMUNITY,
        BORN_HOST,
        MESSAGE_GROUP,
        DLQ_ORIGIN_TOPIC,
        DLQ_ORIGIN_MESSAGE_ID,
    }
)


class SendCheckError(Exception):
    """A message a send must refuse, with the status code to answer."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


_CONTROL = re.compile("[\x00-\x1f\x7f]")


def _has_control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def stored_sys_flag(message: pb.Message, max_inflated: int) -> int:
    """The sys flag a sent body is stored with: RocketMQ's compressed flag for a GZIP one,
    which RocketMQ's clients compress with zlib, as its proxy stores it. Raises
    :class:`SendCheckError` for one that does not inflate within ``max_inflated`` bytes, which
    no consumer could read."""
    encoding = message.system_properties.body_encoding
    if encoding in (pb.ENCODING_UNSPECIFIED, pb.IDENTITY):
        return 0
    if encoding != pb.GZIP:
        raise SendCheckError(pb.BAD_REQUEST, f"body encoding {encoding} is unknown")
    try:
        _core.inflate_body(message.body, SYSFLAG_COMPRESSED, max_inflated)
    except MessageBodyError as e:
        raise SendCheckError(pb.BAD_REQUEST, f"the GZIP body cannot be read: {e}") from e
    return SYSFLAG_COMPRESSED


def checked_properties(message: pb.Message, max_body_size: int, now_ms: int) -> dict[str, str]:
    """The record properties of a sent message; raises :class:`SendCheckError` for a message
    the send must refuse."""
    sp = message.system_properties
    body_size = len(message.body)
    if body_size == 0:
        raise SendCheckError(pb.MESSAGE_BODY_EMPTY, "the message body is empty")
    if body_size > max_body_size:
        raise SendCheckError(
            pb.MESSAGE_BODY_TOO_LARGE,
            f"the message body is {body_size} bytes, more than the {max_body_size} allowed",
        )
    message_id = sp.message_id.strip()
    if not message_id or _has_control(message_id):
        raise SendCheckError(pb.ILLEGAL_MESSAGE_ID, "the message id is blank")
    if sp.message_type == pb.TRANSACTION and (
        sp.HasField("delivery_timestamp") or sp.HasField("message_group")
    ):
        raise SendCheckError(
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "a transaction message has no delivery time and no message group",
        )
    props: dict[str, str] = {}
    if sp.message_type == pb.TRANSACTION and sp.HasField("orphaned_transaction_recovery_duration"):
        # As RocketMQ's proxy: whole seconds, the broker's first check no sooner.
        recovery_s = sp.orphaned_transaction_recovery_duration.seconds
        if recovery_s > MAX_TRANSACTION_RECOVERY_S:
            raise SendCheckError(
                pb.BAD_REQUEST,
                f"the orphaned transaction recovery duration is {recovery_s} s, more than the "
                f"{MAX_TRANSACTION_RECOVERY_S} s allowed",
            )
        if recovery_s > 0:
            props[CHECK_IMMUNITY] = str(recovery_s)
    if sp.HasField("delivery_timestamp"):
        if sp.HasField("message_group"):
            raise SendCheckError(
                pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a message has a delivery time or a message group, not both",
            )
        due = delivery_ms(sp.delivery_timestamp)
        if due - now_ms > MAX_DELAY_MS:
            raise SendCheckError(
                pb.ILLEGAL_DELIVERY_TIME,
                f"the delivery time is more than {MAX_DELAY_MS // 3_600_000} h ahead",
            )
        props[TIMER_DELIVER_MS] = str(due)
    elif sp.message_type == pb.DELAY:
        raise SendCheckError(pb.ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery time")
    user = message.user_properties
    if len(user) > MAX_USER_PROPERTIES:
        raise SendCheckError(
            pb.MESSAGE_PROPERTIES_TOO_LARGE,
            f"{len(user)} user properties, more than {MAX_USER_PROPERTIES}",
        )
    size = 0
    for name, value in user.items():
        if not name or name in SYSTEM_PROPERTIES or _has_control(name) or _has_control(value):
            raise SendCheckError(
                pb.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {name!r} is reserved or holds control characters",
            )
        props[name] = value
        size += len(name.encode()) + len(value.encode())
    # As RocketMQ's proxy: an empty tag is no tag.
    if sp.tag:
        tag = sp.tag
        if not tag.strip() or "|" in tag or _has_control(tag):
            raise SendCheckError(
                pb.ILLEGAL_MESSAGE_TAG, f"tag {tag!r} is blank or holds '|' or control characters"
            )
        props[TAGS] = tag
        size += len(tag.encode())
    # As RocketMQ's proxy: an empty key is let through, a blank one or one with control
    # characters refused. A key with a space is indexed as the words it holds, as in RocketMQ.
    keys = [key for key in sp.keys if key]
    for key in keys:
        if not key.strip() or _has_control(key):
            raise SendCheckError(
                pb.ILLEGAL_MESSAGE_KEY, f"key {key!r} is blank or holds control characters"
            )
    if keys:
        props[KEYS] = KEY_SEPARATOR.join(keys)
        size += len(props[KEYS].encode())
    if size > MAX_PROPERTIES_BYTES:
        raise SendCheckError(
            pb.MESSAGE_PROPERTIES_TOO_LARGE,
            f"properties, tag and keys take {size} bytes, more than {MAX_PROPERTIES_BYTES}",
        )
    if sp.HasField("message_group"):
        group = sp.message_group
        if (
            not group.strip()
            or len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES
            or _has_control(group)
        ):
            raise SendCheckError(
                pb.ILLEGAL_MESSAGE_GROUP,
                f"message group {group!r} is blank, {MAX_MESSAGE_GROUP_BYTES} bytes or longer, "
                "or holds control characters",
            )
        props[MESSAGE_GROUP] = group
    elif sp.message_type == pb.FIFO:
        raise SendCheckError(pb.ILLEGAL_MESSAGE_GROUP, "a FIFO message needs a message group")
    if sp.trace_context:
        props[TRACE_CONTEXT] = sp.trace_context
    if sp.born_host.strip() and not _has_control(sp.born_host):
        props[BORN_HOST] = sp.born_host
    if sp.HasField("born_timestamp") and (born_ms := timestamp_ms(sp.born_timestamp)) > 0:
        props[BORN_TIMESTAMP] = str(born_ms)
    props[UNIQ_KEY] = message_id
    return props


def message_kind(message: pb.Message, props: Mapping[str, str]) -> str:
    """The topic ``message.type`` a sent message is of, as RocketMQ's proxy reads it from the
    message's properties (``TopicMessageType.parseFromMessageProperty``)."""
    if message.system_properties.message_type == pb.TRANSACTION:
        return "TRANSACTION"
    if TIMER_DELIVER_MS in props:
        return "DELAY"
    if MESSAGE_GROUP in props:
        return "FIFO"
    return "NORMAL"


def fifo_queue(message_group: str, queue_count: int) -> int:
    """The queue every message of ``message_group`` goes to: a hash that stays the same across
    broker restarts and Python runs."""
    return zlib.crc32(message_group.encode()) % queue_count


def delivery_ms(value: Timestamp) -> int:
    """A delivery time in epoch milliseconds. The official Python client 5.1.2 puts
    milliseconds in ``seconds``; no date before the year 5138 has that many seconds."""
    if value.seconds > 100_000_000_000:
        return value.seconds
    return timestamp_ms(value)


def timestamp(ms: int) -> Timestamp:
    return Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def timestamp_ms(value: Timestamp) -> int:
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration_s(value: Duration) -> float:
    return value.seconds + value.nanos / 1e9


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """What a receive hands out with a stored message."""

    receipt_handle: str
    # 1 for a first delivery (RocketMQ's reconsumeTimes + 1).
    attempt: int
    invisible_s: float
    # The body as delivered: inflated if it was stored compressed.
    body: bytes
    queue_id: int
    generation: int


def _host(address: str) -> str:
    host, _, _ = address.rpartition(":")
    return host or address


def to_delivered(stored: StoredMessage, delivery: Delivery) -> pb.Message:
    """A stored message as a gRPC consumer receives it."""
    props: Mapping[str, str] = stored.properties
    body = delivery.body
    sp = pb.SystemProperties(
        message_id=props.get(UNIQ_KEY) or stored.msg_id,
        body_digest=pb.Digest(type=pb.MD5, checksum=hashlib.md5(body).hexdigest().upper()),
        body_encoding=pb.IDENTITY,
        born_timestamp=timestamp(stored.born_timestamp_ms),
        born_host=props.get(BORN_HOST) or _host(stored.born_host),
        store_timestamp=timestamp(stored.store_timestamp_ms),
        store_host=stored.store_host,
        receipt_handle=delivery.receipt_handle,
        queue_id=stored.queue_id,
        queue_offset=stored.queue_offset,
        invisible_duration=Duration(seconds=int(delivery.invisible_s)),
        delivery_attempt=stored.reconsume_times + delivery.attempt,
    )
    tag = props.get(TAGS)
    if tag is not None:
        sp.tag = tag
    keys = props.get(KEYS)
    if keys:
        sp.keys.extend(k for k in keys.split(KEY_SEPARATOR) if k)
    group = props.get(MESSAGE_GROUP)
    due = props.get(TIMER_DELIVER_MS)
    if group is not None:
        sp.message_group = group
        sp.message_type = pb.FIFO
    elif due is not None and due.strip().lstrip("-").isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp(int(due)))
        sp.message_type = pb.DELAY
    else:
        sp.message_type = pb.NORMAL
    trace_context = props.get(TRACE_CONTEXT)
    if trace_context is not None:
        sp.trace_context = trace_context
    origin_topic = props.get(DLQ_ORIGIN_TOPIC)
    if origin_topic is not None:
        sp.dead_letter_queue.topic = origin_topic
        sp.dead_letter_queue.message_id = props.get(DLQ_ORIGIN_MESSAGE_ID, "")
    message = pb.Message(
        topic=pb.Resource(name=stored.topic),
        system_properties=sp,
        body=body,
    )
    for name, value in props.items():
        if name not in SYSTEM_PROPERTIES:
            message.user_properties[name] = value
    return message
