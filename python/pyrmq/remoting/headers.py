"""Typed custom headers: the ext fields of a command as frozen dataclasses.

This module is the only place where RocketMQ's camelCase field names live. Attribute names are
the snake_case of the Java field names (``bornTimestamp`` -> ``born_timestamp``), so each header
can be read side by side with its Java class.

``from_ext`` parses a command's ``ext_fields`` and raises :class:`~pyrmq.errors.HeaderError`
naming the header and the field that is missing or malformed; fields it does not know (the C++
client's ``AccessKey``/``OnsChannel``/``Signature`` trio, say) are ignored. ``to_ext`` gives the
ext fields back, every value a string, optional fields left out when None. Integers are
parsed like Java's ``Integer.parseInt``/``Long.parseLong`` (ASCII digits with an optional sign,
within int32/int64). Booleans are lenient: ``"true"`` in any case or ``"1"`` is true, anything
else false; they are written as ``"true"``/``"false"``.

>>> h = PullMessageRequestHeader.from_ext({"consumerGroup": "G", "topic": "T", "queueId": "1",
...     "queueOffset": "5", "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0",
...     "suspendTimeoutMillis": "15000", "subVersion": "0", "subscription": "*"})
>>> (h.queue_id, h.queue_offset, h.subscription)
(1, 5, '*')
>>> GetRouteInfoRequestHeader.from_ext({"AccessKey": ""})
Traceback (most recent call last):
    ...
pyrmq.errors.HeaderError: GetRouteInfoRequestHeader: missing required field 'topic'
"""

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Final, Literal, Self

from pyrmq.errors import HeaderError
from pyrmq.remoting.protocol import PullSysFlag

__all__ = [
    "AckMessageRequestHeader",
    "BrokerWritePermRequestHeader",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "CheckTransactionStateRequestHeader",
    "CloneGroupOffsetRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateAccessConfigRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteAccessConfigRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetBrokerAclConfigResponseHeader",
    "GetConsumeStatsInBrokerHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMinOffsetRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GetTopicsByClusterRequestHeader",
    "KvConfigRequestHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumeQueueRequestHeader",
    "QueryConsumeTimeSpanRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryCorrectionOffsetHeader",
    "QueryMessageRequestHeader",
    "RegisterBrokerRequestHeader",
    "ReplyMessageRequestHeader",
    "ResetOffsetRequestHeader",
    "ResumeCheckHalfMessageRequestHeader",
    "SearchOffsetRequestHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnregisterBrokerRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UpdateGlobalWhiteAddrsConfigRequestHeader",
    "ViewMessageRequestHeader",
    "parse_bool",
]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_I32: Final = (-(2**31), 2**31 - 1)
_I64: Final = (-(2**63), 2**63 - 1)
# Java reads any number of leading zeros; this many characters stay well below the 4,300
# digits past which Python's int() refuses a string.
_MAX_DIGITS: Final = 1000

_Value = str | int | bool | None


def parse_bool(text: str) -> bool:
    """RocketMQ's lenient boolean: ``"true"`` (any case) or ``"1"`` is true, anything else false.

    Java's ``Boolean.parseBoolean("1")`` is false, but the C++ client sends ``batch`` as
    ``"1"``, so ``"1"`` must count as true.

    >>> parse_bool("1"), parse_bool("TRUE"), parse_bool("0"), parse_bool("yes")
    (True, True, False, False)
    """
    return text == "1" or text.lower() == "true"


def _int_or_raise(text: str, low: int = _I32[0], high: int = _I32[1]) -> int:
    """``int(text)`` for ``[+-]?[0-9]+`` within ``[low, high]`` (int32 by default), else
    ValueError.

    The hot headers (send, pull) read their fields with this first, in straight-line code,
    and only after an error read them again through :class:`_Fields` for its message.

    >>> _int_or_raise("-12"), _int_or_raise("+7"), _int_or_raise("2147483648", *_I64)
    (-12, 7, 2147483648)
    >>> _int_or_raise("1_0")
    Traceback (most recent call last):
    ...
    ValueError: 1_0
    """
    if (
        text.isascii()
        and len(text) <= _MAX_DIGITS
        and (text.isdigit() or (text[1:].isdigit() and text[0] in "+-"))
    ):
        value = int(text)
        if low <= value <= high:
            return value
    raise ValueError(text)


class _Fields:
    """Reads ext fields for one header; errors name the header and the wire field."""

    __slots__ = ("_ext", "_header", "_wire")

    def __init__(
        self, header: str, ext: Mapping[str, str], wire: Mapping[str, str] | None = None
    ) -> None:
        self._header = header
        self._ext = ext
        # Field name -> the name on the wire, when they differ (SEND_MESSAGE_V2's letters).
        self._wire = wire or {}

    def _label(self, name: str) -> str:
        wire = self._wire.get(name)
        return f"{wire!r} ({name})" if wire else repr(name)

    def _get(self, name: str) -> str | None:
        return self._ext.get(self._wire.get(name, name))

    def _required(self, name: str) -> str:
        value = self._get(name)
        if value is None:
            raise HeaderError(f"{self._header}: missing required field {self._label(name)}")
        return value

    def _int(self, name: str, text: str, bounds: tuple[int, int], kind: str) -> int:
        # Past Python's limit on digits, int() raises: such a number is out of bounds anyway.
        if _INTEGER.fullmatch(text) is not None and len(text) <= _MAX_DIGITS:
            value = int(text)
            if bounds[0] <= value <= bounds[1]:
                return value
        raise HeaderError(f"{self._header}: field {self._label(name)} is not an {kind}: {text!r}")

    def text(self, name: str) -> str:
        return self._required(name)

    def opt_text(self, name: str) -> str | None:
        return self._get(name)

    def i32(self, name: str) -> int:
        return self._int(name, self._required(name), _I32, "int32")

    def opt_i32(self, name: str) -> int | None:
        value = self._get(name)
        return None if value is None else self._int(name, value, _I32, "int32")

    def i64(self, name: str) -> int:
        return self._int(name, self._required(name), _I64, "int64")

    def opt_i64(self, name: str) -> int | None:
        value = self._get(name)
        return None if value is None else self._int(name, value, _I64, "int64")

    def flag(self, name: str, default: bool = False) -> bool:
        value = self._get(name)
        return default if value is None else parse_bool(value)

    def opt_flag(self, name: str) -> bool | None:
        value = self._get(name)
        return None if value is None else parse_bool(value)


def _ext(pairs: Iterable[tuple[str, _Value]]) -> dict[str, str]:
    """Ext fields from (wire name, value) pairs: None left out, every value a string."""
    out: dict[str, str] = {}
    for name, value in pairs:
        if value is None:
            continue
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        else:
            out[name] = str(value)
    return out


# --- sending ------------------------------------------------------------------------------

_SEND_V2_LETTERS: Final[Mapping[str, str]] = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "brokerName": "n",
}
_SEND_NAMES: Final = tuple(_SEND_V2_LETTERS)
"""The send header's long names, in the order ``SendMessageRequestHeader._read`` takes them."""
_SEND_LETTERS: Final = tuple(_SEND_V2_LETTERS.values())


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendMessageRequestHeader:
    """SEND_MESSAGE (10) header, or SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) with
    one-letter names (:meth:`from_ext_v2`).

    >>> h = SendMessageRequestHeader.from_ext_v2({"a": "PG", "b": "T", "c": "TBW102", "d": "4",
    ...     "e": "0", "f": "0", "g": "1700000000000", "h": "0", "m": "true"})
    >>> (h.producer_group, h.topic, h.batch, h.properties)
    ('PG', 'T', True, '')
    >>> h.to_ext_v2()["b"], h.to_ext()["topic"]
    ('T', 'T')
    """

    producer_group: str
    topic: str
    default_topic: str
    """The topic whose settings an auto-created topic copies (``TBW102``)."""
    default_topic_queue_nums: int
    queue_id: int
    """The queue chosen by the client; negative means "pick one"."""
    sys_flag: int
    born_timestamp: int
    """Milliseconds since the epoch, from the client's clock."""
    flag: int
    """The user flag, stored unchanged."""
    properties: str = ""
    """Message properties in the stored encoding (``name\\x01value\\x02``...)."""
    reconsume_times: int = 0
    unit_mode: bool = False
    batch: bool = False
    """The body is a batch (§7.3); the C++ client sends ``"1"`` under code 10."""
    max_reconsume_times: int | None = None
    broker_name: str | None = None
    """Only in V2 headers (``n``, from 5.x clients)."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        """Parses the long field names of SEND_MESSAGE (10)."""
        try:
            return cls._read(ext, _SEND_NAMES, broker_name=False)
        except (KeyError, ValueError):
            return cls._parse(_Fields(cls.__name__, ext))

    @classmethod
    def from_ext_v2(cls, ext: Mapping[str, str]) -> Self:
        """Parses the one-letter field names of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""
        try:
            return cls._read(ext, _SEND_LETTERS, broker_name=True)
        except (KeyError, ValueError):
            return cls._parse(_Fields(cls.__name__, ext, _SEND_V2_LETTERS), broker_name=True)

    @classmethod
    def _read(cls, ext: Mapping[str, str], keys: tuple[str, ...], *, broker_name: bool) -> Self:
        """:meth:`_parse` in straight-line code, for a send's hot path: raises KeyError or
        ValueError where :meth:`_parse` raises HeaderError."""
        pg, tp, dt, dq, qi, sf, bt, fl, pr, rt, um, mr, ba, bn = keys
        get = ext.get
        reconsume = get(rt)
        unit_mode = get(um)
        max_reconsume = get(mr)
        batch = get(ba)
        return cls(
            producer_group=ext[pg],
            topic=ext[tp],
            default_topic=ext[dt],
            default_topic_queue_nums=_int_or_raise(ext[dq]),
            queue_id=_int_or_raise(ext[qi]),
            sys_flag=_int_or_raise(ext[sf]),
            born_timestamp=_int_or_raise(ext[bt], *_I64),
            flag=_int_or_raise(ext[fl]),
            properties=get(pr) or "",
            reconsume_times=0 if reconsume is None else _int_or_raise(reconsume),
            unit_mode=unit_mode is not None and parse_bool(unit_mode),
            batch=batch is not None and parse_bool(batch),
            max_reconsume_times=None if max_reconsume is None else _int_or_raise(max_reconsume),
            broker_name=get(bn) if broker_name else None,
        )

    @classmethod
    def _parse(cls, f: _Fields, broker_name: bool = False) -> Self:
        return cls(
            producer_group=f.text("producerGroup"),
            topic=f.text("topic"),
            default_topic=f.text("defaultTopic"),
            default_topic_queue_nums=f.i32("defaultTopicQueueNums"),
            queue_id=f.i32("queueId"),
            sys_flag=f.i32("sysFlag"),
            born_timestamp=f.i64("bornTimestamp"),
            flag=f.i32("flag"),
            properties=f.opt_text("properties") or "",
            reconsume_times=f.opt_i32("reconsumeTimes") or 0,
            unit_mode=f.flag("unitMode"),
            batch=f.flag("batch"),
            max_reconsume_times=f.opt_i32("maxReconsumeTimes"),
            broker_name=f.opt_text("brokerName") if broker_name else None,
        )

    def _pairs(self) -> list[tuple[str, _Value]]:
        return [
            ("producerGroup", self.producer_group),
            ("topic", self.topic),
            ("defaultTopic", self.default_topic),
            ("defaultTopicQueueNums", self.default_topic_queue_nums),
            ("queueId", self.queue_id),
            ("sysFlag", self.sys_flag),
            ("bornTimestamp", self.born_timestamp),
            ("flag", self.flag),
            ("properties", self.properties),
            ("reconsumeTimes", self.reconsume_times),
            ("unitMode", self.unit_mode),
            ("batch", self.batch),
            ("maxReconsumeTimes", self.max_reconsume_times),
        ]

    def to_ext(self) -> dict[str, str]:
        """Ext fields with the long names of SEND_MESSAGE (10); ``broker_name`` is left out."""
        return _ext(self._pairs())

    def to_ext_v2(self) -> dict[str, str]:
        """Ext fields with the one-letter names of SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE."""
        pairs = [*self._pairs(), ("brokerName", self.broker_name)]
        return _ext((_SEND_V2_LETTERS[name], value) for name, value in pairs)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SendMessageResponseHeader:
    """Answer to a send: where the message went.

    >>> SendMessageResponseHeader(msg_id="7F00", queue_id=1, queue_offset=9).to_ext()
    {'msgId': '7F00', 'queueId': '1', 'queueOffset': '9'}
    """

    msg_id: str
    """The offsetMsgId; for a batch, the offsetMsgIds joined by ``,``."""
    queue_id: int
    queue_offset: int
    """Queue offset of the (first) message."""
    transaction_id: str | None = None
    msg_region: str | None = None
    """``MSG_REGION``, which Java adds (``DefaultRegion``)."""
    trace_on: bool | None = None
    """``TRACE_ON``, which Java adds (``true``)."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            msg_id=f.text("msgId"),
            queue_id=f.i32("queueId"),
            queue_offset=f.i64("queueOffset"),
            transaction_id=f.opt_text("transactionId"),
            msg_region=f.opt_text("MSG_REGION"),
            trace_on=f.opt_flag("TRACE_ON"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("msgId", self.msg_id),
                ("queueId", self.queue_id),
                ("queueOffset", self.queue_offset),
                ("transactionId", self.transaction_id),
                ("MSG_REGION", self.msg_region),
                ("TRACE_ON", self.trace_on),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerSendMsgBackRequestHeader:
    """CONSUMER_SEND_MSG_BACK (36): a consumer hands back a message it failed to consume."""

    offset: int
    """CommitLog offset of the message."""
    group: str
    delay_level: int
    """0 lets the broker choose ``3 + reconsumeTimes``; negative sends it to the DLQ."""
    origin_msg_id: str | None = None
    origin_topic: str | None = None
    unit_mode: bool = False
    max_reconsume_times: int | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            offset=f.i64("offset"),
            group=f.text("group"),
            delay_level=f.i32("delayLevel"),
            origin_msg_id=f.opt_text("originMsgId"),
            origin_topic=f.opt_text("originTopic"),
            unit_mode=f.flag("unitMode"),
            max_reconsume_times=f.opt_i32("maxReconsumeTimes"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("offset", self.offset),
                ("group", self.group),
                ("delayLevel", self.delay_level),
                ("originMsgId", self.origin_msg_id),
                ("originTopic", self.origin_topic),
                ("unitMode", self.unit_mode),
                ("maxReconsumeTimes", self.max_reconsume_times),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ReplyMessageRequestHeader:
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326): a broker hands a reply to the client that sent the
    request; the reply's body is the command's body. The send fields are the replier's, as
    its SEND_REPLY_MESSAGE header gave them; the hosts and the store time are the broker's.

    >>> h = ReplyMessageRequestHeader(producer_group="PG", topic="C_REPLY_TOPIC",
    ...     default_topic="TBW102", default_topic_queue_nums=4, queue_id=0, sys_flag=0,
    ...     born_timestamp=1, flag=0, born_host="10.0.0.2:5", store_host="10.0.0.1:10911",
    ...     store_timestamp=2)
    >>> ReplyMessageRequestHeader.from_ext(h.to_ext()) == h
    True
    """

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str = ""
    reconsume_times: int | None = None
    unit_mode: bool = False
    born_host: str
    """``ip:port`` of the replier."""
    store_host: str
    """``ip:port`` of the broker."""
    store_timestamp: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            producer_group=f.text("producerGroup"),
            topic=f.text("topic"),
            default_topic=f.text("defaultTopic"),
            default_topic_queue_nums=f.i32("defaultTopicQueueNums"),
            queue_id=f.i32("queueId"),
            sys_flag=f.i32("sysFlag"),
            born_timestamp=f.i64("bornTimestamp"),
            flag=f.i32("flag"),
            properties=f.opt_text("properties") or "",
            reconsume_times=f.opt_i32("reconsumeTimes"),
            unit_mode=f.flag("unitMode"),
            born_host=f.text("bornHost"),
            store_host=f.text("storeHost"),
            store_timestamp=f.i64("storeTimestamp"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("producerGroup", self.producer_group),
                ("topic", self.topic),
                ("defaultTopic", self.default_topic),
                ("defaultTopicQueueNums", self.default_topic_queue_nums),
                ("queueId", self.queue_id),
                ("sysFlag", self.sys_flag),
                ("bornTimestamp", self.born_timestamp),
                ("flag", self.flag),
                ("properties", self.properties),
                ("reconsumeTimes", self.reconsume_times),
                ("unitMode", self.unit_mode),
                ("bornHost", self.born_host),
                ("storeHost", self.store_host),
                ("storeTimestamp", self.store_timestamp),
            ]
        )


# --- pulling and offsets ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PullMessageRequestHeader:
    """PULL_MESSAGE (11)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    """Queue offset to read from."""
    max_msg_nums: int
    sys_flag: int
    """PullSysFlag bits: commit offset, suspend, subscription, class filter."""
    commit_offset: int
    """Queue offset to store for the group, when the commit-offset bit is set."""
    suspend_timeout_millis: int
    """How long the broker may park the pull when nothing is there."""
    sub_version: int
    subscription: str | None = None
    """The tag expression, e.g. ``TagA || TagB``."""
    expression_type: str | None = None
    """``TAG`` or ``SQL92``; Java clients only."""
    max_msg_bytes: int | None = None

    @classmethod
    def immediate(
        cls,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_nums: int = 32,
        expression: str = "*",
    ) -> Self:
        """A pull the broker answers at once (never parked), filtering by ``expression`` and
        committing nothing: a pull consumer's, or a reader's that keeps its own offsets."""
        return cls(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=int(PullSysFlag.SUBSCRIPTION),
            commit_offset=0,
            suspend_timeout_millis=0,
            sub_version=0,
            subscription=expression,
            expression_type="TAG",
        )

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        try:
            return cls._read(ext)
        except (KeyError, ValueError):
            return cls._parse(_Fields(cls.__name__, ext))

    @classmethod
    def _read(cls, ext: Mapping[str, str]) -> Self:
        """:meth:`_parse` in straight-line code, for a pull's hot path: raises KeyError or
        ValueError where :meth:`_parse` raises HeaderError."""
        get = ext.get
        max_bytes = get("maxMsgBytes")
        return cls(
            consumer_group=ext["consumerGroup"],
            topic=ext["topic"],
            queue_id=_int_or_raise(ext["queueId"]),
            queue_offset=_int_or_raise(ext["queueOffset"], *_I64),
            max_msg_nums=_int_or_raise(ext["maxMsgNums"]),
            sys_flag=_int_or_raise(ext["sysFlag"]),
            commit_offset=_int_or_raise(ext["commitOffset"], *_I64),
            suspend_timeout_millis=_int_or_raise(ext["suspendTimeoutMillis"], *_I64),
            sub_version=_int_or_raise(ext["subVersion"], *_I64),
            subscription=get("subscription"),
            expression_type=get("expressionType"),
            max_msg_bytes=None if max_bytes is None else _int_or_raise(max_bytes),
        )

    @classmethod
    def _parse(cls, f: _Fields) -> Self:
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            queue_offset=f.i64("queueOffset"),
            max_msg_nums=f.i32("maxMsgNums"),
            sys_flag=f.i32("sysFlag"),
            commit_offset=f.i64("commitOffset"),
            suspend_timeout_millis=f.i64("suspendTimeoutMillis"),
            sub_version=f.i64("subVersion"),
            subscription=f.opt_text("subscription"),
            expression_type=f.opt_text("expressionType"),
            max_msg_bytes=f.opt_i32("maxMsgBytes"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("queueOffset", self.queue_offset),
                ("maxMsgNums", self.max_msg_nums),
                ("sysFlag", self.sys_flag),
                ("commitOffset", self.commit_offset),
                ("suspendTimeoutMillis", self.suspend_timeout_millis),
                ("subVersion", self.sub_version),
                ("subscription", self.subscription),
                ("expressionType", self.expression_type),
                ("maxMsgBytes", self.max_msg_bytes),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PullMessageResponseHeader:
    """Answer to PULL_MESSAGE: where to pull next. The offsets are queue offsets.

    >>> PullMessageResponseHeader(suggest_which_broker_id=0, next_begin_offset=2, min_offset=0,
    ...     max_offset=2).to_ext()["nextBeginOffset"]
    '2'
    """

    suggest_which_broker_id: int
    next_begin_offset: int
    min_offset: int
    max_offset: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            suggest_which_broker_id=f.i64("suggestWhichBrokerId"),
            next_begin_offset=f.i64("nextBeginOffset"),
            min_offset=f.i64("minOffset"),
            max_offset=f.i64("maxOffset"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("suggestWhichBrokerId", self.suggest_which_broker_id),
                ("nextBeginOffset", self.next_begin_offset),
                ("minOffset", self.min_offset),
                ("maxOffset", self.max_offset),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueryConsumerOffsetRequestHeader:
    """QUERY_CONSUMER_OFFSET (14): the group's stored queue offset."""

    consumer_group: str
    topic: str
    queue_id: int
    set_zero_if_not_found: bool | None = None
    """5.x clients only."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            set_zero_if_not_found=f.opt_flag("setZeroIfNotFound"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("setZeroIfNotFound", self.set_zero_if_not_found),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UpdateConsumerOffsetRequestHeader:
    """UPDATE_CONSUMER_OFFSET (15): store the group's queue offset."""

    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            commit_offset=f.i64("commitOffset"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("commitOffset", self.commit_offset),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetMaxOffsetRequestHeader:
    """GET_MAX_OFFSET (30): one queue, by topic and queue id."""

    topic: str
    queue_id: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(topic=f.text("topic"), queue_id=f.i32("queueId"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("topic", self.topic), ("queueId", self.queue_id)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetMinOffsetRequestHeader(GetMaxOffsetRequestHeader):
    """GET_MIN_OFFSET (31): the same fields as GET_MAX_OFFSET."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetEarliestMsgStoretimeRequestHeader(GetMaxOffsetRequestHeader):
    """GET_EARLIEST_MSG_STORETIME (32): the same fields as GET_MAX_OFFSET."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SearchOffsetRequestHeader:
    """SEARCH_OFFSET_BY_TIMESTAMP (29)."""

    topic: str
    queue_id: int
    timestamp: int
    """Milliseconds since the epoch."""
    boundary_type: str | None = None
    """RocketMQ 5's ``LOWER`` or ``UPPER`` (any case); absent, as from 4.x clients, is LOWER."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            timestamp=f.i64("timestamp"),
            boundary_type=f.opt_text("boundaryType"),
        )

    @property
    def boundary(self) -> Literal["lower", "upper"]:
        """The store's name for the boundary; anything but UPPER means LOWER, as in RocketMQ."""
        return "upper" if (self.boundary_type or "").lower() == "upper" else "lower"

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("timestamp", self.timestamp),
                ("boundaryType", self.boundary_type),
            ]
        )


# --- clients and groups -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumerListByGroupRequestHeader:
    """GET_CONSUMER_LIST_BY_GROUP (38)."""

    consumer_group: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(consumer_group=_Fields(cls.__name__, ext).text("consumerGroup"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("consumerGroup", self.consumer_group)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumerRunningInfoRequestHeader:
    """GET_CONSUMER_RUNNING_INFO (307): from an admin tool to the broker, which forwards it to
    the client. ``jstackEnable`` goes out as a string: C++ 1.2.3 reads it only in that form."""

    consumer_group: str
    client_id: str
    jstack_enable: bool = False

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            client_id=f.text("clientId"),
            jstack_enable=f.flag("jstackEnable"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("clientId", self.client_id),
                ("jstackEnable", self.jstack_enable),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResetOffsetRequestHeader:
    """INVOKE_BROKER_TO_RESET_OFFSET (222), from an admin tool to the broker, and
    RESET_CONSUMER_CLIENT_OFFSET (220), from the broker to each consumer of the group.

    ``isForce`` keeps Java's field name on the wire. C++ 1.2.3 reads ``timestamp`` and
    ``isForce`` only as JSON strings, which is how :meth:`to_ext` writes every value.

    >>> h = ResetOffsetRequestHeader.from_ext({"topic": "T", "group": "G",
    ...     "timestamp": "-1", "isForce": "true"})
    >>> (h.timestamp, h.is_force, h.queue_id)
    (-1, True, None)
    >>> h.to_ext()
    {'topic': 'T', 'group': 'G', 'timestamp': '-1', 'isForce': 'true'}
    """

    topic: str
    group: str
    timestamp: int
    """Milliseconds since the epoch; -1 means each queue's max offset."""
    is_force: bool
    """Also move offsets forwards; without it a committed offset below the target is kept."""
    queue_id: int | None = None
    """5.x admin tools only: reset this queue alone (negative means every queue)."""
    offset: int | None = None
    """5.x admin tools only: the queue offset to use for ``queue_id`` instead of the
    timestamp's."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            group=f.text("group"),
            timestamp=f.i64("timestamp"),
            # Required, as in Java (@CFNotNull on a primitive boolean).
            is_force=parse_bool(f.text("isForce")),
            queue_id=f.opt_i32("queueId"),
            offset=f.opt_i64("offset"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("topic", self.topic),
                ("group", self.group),
                ("timestamp", self.timestamp),
                ("isForce", self.is_force),
                ("queueId", self.queue_id),
                ("offset", self.offset),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterClientRequestHeader:
    """UNREGISTER_CLIENT (35). The C++ client sends ``""`` for the group it does not leave."""

    client_id: str
    producer_group: str | None = None
    consumer_group: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            client_id=f.text("clientID"),
            producer_group=f.opt_text("producerGroup"),
            consumer_group=f.opt_text("consumerGroup"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("clientID", self.client_id),
                ("producerGroup", self.producer_group),
                ("consumerGroup", self.consumer_group),
            ]
        )


# --- transactions -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EndTransactionRequestHeader:
    """END_TRANSACTION (37): a producer commits (8) or rolls back (12) the half message at
    ``commit_log_offset``, or says it does not know yet (0)."""

    producer_group: str
    tran_state_table_offset: int
    commit_log_offset: int
    commit_or_rollback: int
    msg_id: str
    from_transaction_check: bool = False
    transaction_id: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            producer_group=f.text("producerGroup"),
            tran_state_table_offset=f.i64("tranStateTableOffset"),
            commit_log_offset=f.i64("commitLogOffset"),
            commit_or_rollback=f.i32("commitOrRollback"),
            msg_id=f.text("msgId"),
            from_transaction_check=f.flag("fromTransactionCheck"),
            transaction_id=f.opt_text("transactionId"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("producerGroup", self.producer_group),
                ("tranStateTableOffset", self.tran_state_table_offset),
                ("commitLogOffset", self.commit_log_offset),
                ("commitOrRollback", self.commit_or_rollback),
                ("fromTransactionCheck", self.from_transaction_check),
                ("msgId", self.msg_id),
                ("transactionId", self.transaction_id),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CheckTransactionStateRequestHeader:
    """CHECK_TRANSACTION_STATE (39): a broker asks a producer of a half's group how its
    transaction ended; the half itself is the body. ``topic`` and ``broker_name`` came with
    RocketMQ 5."""

    tran_state_table_offset: int
    commit_log_offset: int
    msg_id: str | None = None
    transaction_id: str | None = None
    offset_msg_id: str | None = None
    topic: str | None = None
    broker_name: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            tran_state_table_offset=f.i64("tranStateTableOffset"),
            commit_log_offset=f.i64("commitLogOffset"),
            msg_id=f.opt_text("msgId"),
            transaction_id=f.opt_text("transactionId"),
            offset_msg_id=f.opt_text("offsetMsgId"),
            topic=f.opt_text("topic"),
            # RocketMQ 5's RpcRequestHeader names it bname.
            broker_name=f.opt_text("brokerName") or f.opt_text("bname"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("tranStateTableOffset", self.tran_state_table_offset),
                ("commitLogOffset", self.commit_log_offset),
                ("msgId", self.msg_id),
                ("transactionId", self.transaction_id),
                ("offsetMsgId", self.offset_msg_id),
                ("topic", self.topic),
                ("brokerName", self.broker_name),
            ]
        )


# --- name server --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetRouteInfoRequestHeader:
    """GET_ROUTEINFO_BY_TOPIC (105)."""

    topic: str
    accept_standard_json_only: bool = False
    """Sent by 5.x clients: answer with standard JSON (quoted ``brokerAddrs`` keys)."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            accept_standard_json_only=f.flag("acceptStandardJsonOnly"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [("topic", self.topic), ("acceptStandardJsonOnly", self.accept_standard_json_only)]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RegisterBrokerRequestHeader:
    """REGISTER_BROKER (103): a broker announces itself and its topics (in the body)."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    ha_server_addr: str
    broker_id: int
    """0 is the master."""
    compressed: bool = False
    """The body is compressed."""
    body_crc32: int = 0
    heartbeat_timeout_millis: int | None = None
    """5.x brokers only."""
    enable_acting_master: bool | None = None
    """5.x brokers only."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            broker_name=f.text("brokerName"),
            broker_addr=f.text("brokerAddr"),
            cluster_name=f.text("clusterName"),
            ha_server_addr=f.text("haServerAddr"),
            broker_id=f.i64("brokerId"),
            compressed=f.flag("compressed"),
            body_crc32=f.opt_i32("bodyCrc32") or 0,
            heartbeat_timeout_millis=f.opt_i64("heartbeatTimeoutMillis"),
            enable_acting_master=f.opt_flag("enableActingMaster"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("brokerName", self.broker_name),
                ("brokerAddr", self.broker_addr),
                ("clusterName", self.cluster_name),
                ("haServerAddr", self.ha_server_addr),
                ("brokerId", self.broker_id),
                ("compressed", self.compressed),
                ("bodyCrc32", self.body_crc32),
                ("heartbeatTimeoutMillis", self.heartbeat_timeout_millis),
                ("enableActingMaster", self.enable_acting_master),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UnregisterBrokerRequestHeader:
    """UNREGISTER_BROKER (104); QUERY_DATA_VERSION (322) names its broker the same way."""

    broker_name: str
    broker_addr: str
    cluster_name: str
    broker_id: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            broker_name=f.text("brokerName"),
            broker_addr=f.text("brokerAddr"),
            cluster_name=f.text("clusterName"),
            broker_id=f.i64("brokerId"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("brokerName", self.broker_name),
                ("brokerAddr", self.broker_addr),
                ("clusterName", self.cluster_name),
                ("brokerId", self.broker_id),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerWritePermRequestHeader:
    """WIPE_WRITE_PERM_OF_BROKER (205) and ADD_WRITE_PERM_OF_BROKER (327)."""

    broker_name: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(broker_name=_Fields(cls.__name__, ext).text("brokerName"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("brokerName", self.broker_name)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetTopicsByClusterRequestHeader:
    """GET_TOPICS_BY_CLUSTER (224)."""

    cluster: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(cluster=_Fields(cls.__name__, ext).text("cluster"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("cluster", self.cluster)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KvConfigRequestHeader:
    """PUT_KV_CONFIG (100) with a value; GET_KV_CONFIG (101) and DELETE_KV_CONFIG (102) with a
    key; GET_KVLIST_BY_NAMESPACE (219) with the namespace alone. A handler asks for the fields
    its request needs with :meth:`need`."""

    namespace: str
    key: str | None = None
    value: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(namespace=f.text("namespace"), key=f.opt_text("key"), value=f.opt_text("value"))

    def need(self, *fields: str) -> list[str]:
        """The values of ``fields`` ("key", "value"); HeaderError names one that is missing."""
        values = [getattr(self, name) for name in fields]
        for name, value in zip(fields, values, strict=True):
            if value is None:
                raise HeaderError(f"{type(self).__name__}: missing required field {name!r}")
        return values

    def to_ext(self) -> dict[str, str]:
        return _ext([("namespace", self.namespace), ("key", self.key), ("value", self.value)])


# --- admin --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicRequestHeader:
    """UPDATE_AND_CREATE_TOPIC (17)."""

    topic: str
    default_topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    """PermName bits: 2 write, 4 read, 1 inherit."""
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    attributes: str | None = None
    """RocketMQ 5's changes of topic attributes, ``+key=value,-key``."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            default_topic=f.text("defaultTopic"),
            read_queue_nums=f.i32("readQueueNums"),
            write_queue_nums=f.i32("writeQueueNums"),
            perm=f.i32("perm"),
            topic_filter_type=f.opt_text("topicFilterType") or "SINGLE_TAG",
            topic_sys_flag=f.opt_i32("topicSysFlag") or 0,
            order=f.flag("order"),
            attributes=f.opt_text("attributes"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("topic", self.topic),
                ("defaultTopic", self.default_topic),
                ("readQueueNums", self.read_queue_nums),
                ("writeQueueNums", self.write_queue_nums),
                ("perm", self.perm),
                ("topicFilterType", self.topic_filter_type),
                ("topicSysFlag", self.topic_sys_flag),
                ("order", self.order),
                ("attributes", self.attributes),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueryMessageRequestHeader:
    """QUERY_MESSAGE (12): messages of a topic by key within a store-time range."""

    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    """Milliseconds since the epoch."""
    end_timestamp: int
    """Milliseconds since the epoch."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            key=f.text("key"),
            max_num=f.i32("maxNum"),
            begin_timestamp=f.i64("beginTimestamp"),
            end_timestamp=f.i64("endTimestamp"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("topic", self.topic),
                ("key", self.key),
                ("maxNum", self.max_num),
                ("beginTimestamp", self.begin_timestamp),
                ("endTimestamp", self.end_timestamp),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ViewMessageRequestHeader:
    """VIEW_MESSAGE_BY_ID (33): one message by CommitLog offset."""

    offset: int
    """CommitLog offset (decoded from the offsetMsgId)."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(offset=_Fields(cls.__name__, ext).i64("offset"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("offset", self.offset)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueryConsumeQueueRequestHeader:
    """QUERY_CONSUME_QUEUE (321): ``count`` units of a ConsumeQueue from unit ``index``, with
    whether a group's subscription takes each."""

    topic: str
    queue_id: int
    index: int
    count: int
    consumer_group: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            index=f.i64("index"),
            count=f.i32("count"),
            consumer_group=f.opt_text("consumerGroup"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("index", self.index),
                ("count", self.count),
                ("consumerGroup", self.consumer_group),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetTopicStatsInfoRequestHeader:
    """GET_TOPIC_STATS_INFO (202): each queue's offsets and last store time."""

    topic: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(topic=_Fields(cls.__name__, ext).text("topic"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("topic", self.topic)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumeStatsRequestHeader:
    """GET_CONSUME_STATS (208): a group's progress per queue, on one topic or (``topic``
    blank) on every topic it has committed offsets for."""

    consumer_group: str
    topic: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(consumer_group=f.text("consumerGroup"), topic=f.opt_text("topic"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("consumerGroup", self.consumer_group), ("topic", self.topic)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicRequestHeader:
    """DELETE_TOPIC_IN_BROKER (215) and DELETE_TOPIC_IN_NAMESRV (216); the name server's may
    name a cluster, whose brokers alone then drop the topic from its route."""

    topic: str
    cluster_name: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(topic=f.text("topic"), cluster_name=f.opt_text("clusterName") or None)

    def to_ext(self) -> dict[str, str]:
        return _ext([("topic", self.topic), ("clusterName", self.cluster_name)])


# --- admin operations: consume time span, group offset clone, broker-wide consume stats ------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueryConsumeTimeSpanRequestHeader:
    """QUERY_CONSUME_TIME_SPAN (303): per queue of a topic, the store times of its first and
    last messages and of the message a group consumed last."""

    topic: str
    group: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(topic=f.text("topic"), group=f.text("group"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("topic", self.topic), ("group", self.group)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CloneGroupOffsetRequestHeader:
    """CLONE_GROUP_OFFSET (314): ``dest_group`` takes ``src_group``'s offsets on ``topic`` (on
    every topic ``src_group`` has offsets for when blank). Unless ``offline``, a topic that the
    live source group does not subscribe to is passed over."""

    src_group: str
    dest_group: str
    topic: str | None = None
    offline: bool = False

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            src_group=f.text("srcGroup"),
            dest_group=f.text("destGroup"),
            topic=f.opt_text("topic") or None,
            offline=f.flag("offline"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("srcGroup", self.src_group),
                ("destGroup", self.dest_group),
                ("topic", self.topic),
                ("offline", self.offline),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumeStatsInBrokerHeader:
    """GET_BROKER_CONSUME_STATS (317): every group's progress on one broker; with ``is_order``
    on its ordered topics only. Java names the field ``isOrder`` on the wire too."""

    is_order: bool = False

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(is_order=_Fields(cls.__name__, ext).flag("isOrder"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("isOrder", self.is_order)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class QueryCorrectionOffsetHeader:
    """QUERY_CORRECTION_OFFSET (308): per queue of ``topic``, the lowest offset committed by
    any group but those of ``filter_groups`` (a comma list), checked against
    ``compare_group``'s own."""

    topic: str
    compare_group: str
    filter_groups: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"),
            compare_group=f.text("compareGroup"),
            filter_groups=f.opt_text("filterGroups"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("filterGroups", self.filter_groups),
                ("compareGroup", self.compare_group),
                ("topic", self.topic),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ResumeCheckHalfMessageRequestHeader:
    """RESUME_CHECK_HALF_MESSAGE (323): the half message ``msg_id`` (an offset message id)
    is checked with its producer again, from a count of none."""

    msg_id: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(msg_id=_Fields(cls.__name__, ext).opt_text("msgId"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("msgId", self.msg_id)])


# --- requests the broker forwards to one consumer ----------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ConsumeMessageDirectlyResultRequestHeader:
    """CONSUME_MESSAGE_DIRECTLY (309): from an admin tool to the broker, which adds its own
    ``brokerName`` and forwards it, with the stored message as the body, to the client.

    >>> h = ConsumeMessageDirectlyResultRequestHeader.from_ext({"consumerGroup": "G",
    ...     "clientId": "10.0.0.1@7", "msgId": "0A00000100002A9F0000000000000000"})
    >>> (h.consumer_group, h.client_id, h.broker_name)
    ('G', '10.0.0.1@7', None)
    """

    consumer_group: str
    client_id: str | None = None
    msg_id: str | None = None
    """The offset message id: the broker that stored the message and its CommitLog offset."""
    broker_name: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            client_id=f.opt_text("clientId"),
            msg_id=f.opt_text("msgId"),
            broker_name=f.opt_text("brokerName"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("clientId", self.client_id),
                ("msgId", self.msg_id),
                ("brokerName", self.broker_name),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetConsumerStatusRequestHeader:
    """INVOKE_BROKER_TO_GET_CONSUMER_STATUS (223), from an admin tool to the broker, and
    GET_CONSUMER_STATUS_FROM_CLIENT (221), from the broker to each consumer of the group.
    ``clientAddr`` (Java's name) holds a client id: only that consumer is asked."""

    topic: str
    group: str
    client_addr: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            topic=f.text("topic"), group=f.text("group"), client_addr=f.opt_text("clientAddr")
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [("topic", self.topic), ("group", self.group), ("clientAddr", self.client_addr)]
        )


# --- ACL accounts (plain_acl.yml) -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CreateAccessConfigRequestHeader:
    """UPDATE_AND_CREATE_ACL_CONFIG (50): an account of the broker's ``plain_acl.yml``,
    created or updated. ``topic_perms`` and ``group_perms`` are ``name=PERM`` items joined by
    ``,``; a field left out keeps what the account had, except ``admin``, which is always set.

    >>> CreateAccessConfigRequestHeader(access_key="user0001", topic_perms="T=PUB").to_ext()
    {'accessKey': 'user0001', 'admin': 'false', 'topicPerms': 'T=PUB'}
    """

    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: str | None = None
    group_perms: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            access_key=f.text("accessKey"),
            secret_key=f.opt_text("secretKey"),
            white_remote_address=f.opt_text("whiteRemoteAddress"),
            admin=f.flag("admin"),
            default_topic_perm=f.opt_text("defaultTopicPerm"),
            default_group_perm=f.opt_text("defaultGroupPerm"),
            topic_perms=f.opt_text("topicPerms"),
            group_perms=f.opt_text("groupPerms"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("accessKey", self.access_key),
                ("secretKey", self.secret_key),
                ("whiteRemoteAddress", self.white_remote_address),
                ("admin", self.admin),
                ("defaultTopicPerm", self.default_topic_perm),
                ("defaultGroupPerm", self.default_group_perm),
                ("topicPerms", self.topic_perms),
                ("groupPerms", self.group_perms),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeleteAccessConfigRequestHeader:
    """DELETE_ACL_CONFIG (51): the account to take out of ``plain_acl.yml``."""

    access_key: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        return cls(access_key=_Fields(cls.__name__, ext).text("accessKey"))

    def to_ext(self) -> dict[str, str]:
        return _ext([("accessKey", self.access_key)])


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class UpdateGlobalWhiteAddrsConfigRequestHeader:
    """UPDATE_GLOBAL_WHITE_ADDRS_CONFIG (53): the new global white list, patterns joined by
    ``,``, and the ACL file it goes to (RocketMQ's brokers may read several; by default the
    broker's own)."""

    global_white_addrs: str
    acl_file_full_path: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            global_white_addrs=f.text("globalWhiteAddrs"),
            acl_file_full_path=f.opt_text("aclFileFullPath") or None,
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("globalWhiteAddrs", self.global_white_addrs),
                ("aclFileFullPath", self.acl_file_full_path),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GetBrokerAclConfigResponseHeader:
    """Answer to GET_BROKER_CLUSTER_ACL_INFO (52): which broker answers and the data version of
    its ACL file. ``version`` is a DataVersion as JSON (``{"counter":3,"timestamp":...}``);
    ``all_acl_file_version`` maps each ACL file's path to its DataVersion, as JSON."""

    version: str
    all_acl_file_version: str | None = None
    broker_name: str
    broker_addr: str
    cluster_name: str

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            version=f.text("version"),
            all_acl_file_version=f.opt_text("allAclFileVersion"),
            broker_name=f.text("brokerName"),
            broker_addr=f.text("brokerAddr"),
            cluster_name=f.text("clusterName"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("version", self.version),
                ("allAclFileVersion", self.all_acl_file_version),
                ("brokerName", self.broker_name),
                ("brokerAddr", self.broker_addr),
                ("clusterName", self.cluster_name),
            ]
        )


# --- pop (RocketMQ 5) ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PopMessageRequestHeader:
    """POP_MESSAGE (200050): take messages of a group's queue (or of every queue, ``queue_id``
    -1) and keep them invisible to the group until acked or ``invisible_time`` ms pass.

    >>> PopMessageRequestHeader.from_ext({"consumerGroup": "G", "topic": "T", "queueId": "-1",
    ...     "maxMsgNums": "8", "invisibleTime": "60000", "pollTime": "0", "bornTime": "1",
    ...     "initMode": "0", "order": "false"}).max_msg_nums
    8
    """

    consumer_group: str
    topic: str
    queue_id: int
    max_msg_nums: int
    invisible_time: int
    poll_time: int
    """How long the broker may hold the pop when nothing is there, in ms."""
    born_time: int
    """The client's clock when it sent the pop, in ms."""
    init_mode: int
    """Where a group new to a queue starts: 0 its first message, 1 its end."""
    exp_type: str | None = None
    exp: str | None = None
    order: bool = False
    attempt_id: str | None = None
    """The same id again: the client never got the answer to its last pop."""

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            max_msg_nums=f.i32("maxMsgNums"),
            invisible_time=f.i64("invisibleTime"),
            poll_time=f.i64("pollTime"),
            born_time=f.i64("bornTime"),
            init_mode=f.i32("initMode"),
            exp_type=f.opt_text("expType"),
            exp=f.opt_text("exp"),
            order=f.flag("order"),
            attempt_id=f.opt_text("attemptId"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("maxMsgNums", self.max_msg_nums),
                ("invisibleTime", self.invisible_time),
                ("pollTime", self.poll_time),
                ("bornTime", self.born_time),
                ("initMode", self.init_mode),
                ("expType", self.exp_type),
                ("exp", self.exp),
                ("order", self.order),
                ("attemptId", self.attempt_id),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PopMessageResponseHeader:
    """Answer to POP_MESSAGE. A client makes each message's handle (its ``POP_CK``) from these:
    the start offset of its queue in the answer, ``pop_time``, ``invisible_time``,
    ``revive_qid``, the broker name, the queue id and the message's offset. The infos are
    ``;``-separated ``<retry mark> <queue id> <value>`` entries."""

    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    """Messages left to read in the queues the pop read."""
    start_offset_info: str | None = None
    msg_offset_info: str | None = None
    order_count_info: str | None = None

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            pop_time=f.i64("popTime"),
            invisible_time=f.i64("invisibleTime"),
            revive_qid=f.i32("reviveQid"),
            rest_num=f.i64("restNum"),
            start_offset_info=f.opt_text("startOffsetInfo"),
            msg_offset_info=f.opt_text("msgOffsetInfo"),
            order_count_info=f.opt_text("orderCountInfo"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("popTime", self.pop_time),
                ("invisibleTime", self.invisible_time),
                ("reviveQid", self.revive_qid),
                ("restNum", self.rest_num),
                ("startOffsetInfo", self.start_offset_info),
                ("msgOffsetInfo", self.msg_offset_info),
                ("orderCountInfo", self.order_count_info),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AckMessageRequestHeader:
    """ACK_MESSAGE (200051): a popped message is consumed. ``extra_info`` is its ``POP_CK``."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            extra_info=f.text("extraInfo"),
            offset=f.i64("offset"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("extraInfo", self.extra_info),
                ("offset", self.offset),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChangeInvisibleTimeRequestHeader:
    """CHANGE_MESSAGE_INVISIBLETIME (200053): a popped message comes back ``invisible_time``
    ms from now, unless acked first under the handle the answer makes."""

    consumer_group: str
    topic: str
    queue_id: int
    extra_info: str
    offset: int
    invisible_time: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            consumer_group=f.text("consumerGroup"),
            topic=f.text("topic"),
            queue_id=f.i32("queueId"),
            extra_info=f.text("extraInfo"),
            offset=f.i64("offset"),
            invisible_time=f.i64("invisibleTime"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("consumerGroup", self.consumer_group),
                ("topic", self.topic),
                ("queueId", self.queue_id),
                ("extraInfo", self.extra_info),
                ("offset", self.offset),
                ("invisibleTime", self.invisible_time),
            ]
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChangeInvisibleTimeResponseHeader:
    """Answer to CHANGE_MESSAGE_INVISIBLETIME: the message's new handle takes ``pop_time``."""

    pop_time: int
    invisible_time: int
    revive_qid: int

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        f = _Fields(cls.__name__, ext)
        return cls(
            pop_time=f.i64("popTime"),
            invisible_time=f.i64("invisibleTime"),
            revive_qid=f.i32("reviveQid"),
        )

    def to_ext(self) -> dict[str, str]:
        return _ext(
            [
                ("popTime", self.pop_time),
                ("invisibleTime", self.invisible_time),
                ("reviveQid", self.revive_qid),
            ]
        )
