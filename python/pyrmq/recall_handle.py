"""Recall handles: what a send of a timer message returns so that its producer may recall it.

RocketMQ 5 gives a timer message's send result a handle, the URL-safe base64 of
``"v1 {topic} {brokerName} {timestamp} {messageId}"``; RecallMessage hands it back to the broker
it names, which checks it and drops the message before it is due. pyrmq's handles take that
form, so that clients and tools that read handles read pyrmq's too.

>>> h = RecallHandle("Orders", "broker-a", 1767225600000, "7F0000010001")
>>> RecallHandle.decode(h.encode()) == h
True
"""

import base64
import binascii
import dataclasses
import re

__all__ = ["RecallHandle", "RecallHandleError"]

_VERSION = "v1"
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")


class RecallHandleError(ValueError):
    """A recall handle that is not one (RocketMQ's words: "recall handle is invalid")."""


@dataclasses.dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    # When the message falls due, in epoch milliseconds; -1 when the handle's is not a number,
    # as RocketMQ reads it (a recall then fails as too late).
    timestamp_ms: int
    message_id: str

    def encode(self) -> str:
        raw = " ".join((_VERSION, self.topic, self.broker_name, str(self.timestamp_ms)))
        return base64.urlsafe_b64encode(f"{raw} {self.message_id}".encode()).decode("ascii")

    @classmethod
    def decode(cls, text: str) -> "RecallHandle":
        """The handle ``text`` encodes; RecallHandleError if it encodes none."""
        # URL-safe only, as Java's URL decoder: "+" and "/" are not in its alphabet.
        if not text or "+" in text or "/" in text:
            raise RecallHandleError("recall handle is invalid")
        try:
            data = text.encode("ascii")
            raw = base64.b64decode(data + b"=" * (-len(data) % 4), altchars=b"-_", validate=True)
            items = raw.decode("utf-8").split(" ")
        except (UnicodeError, binascii.Error):
            raise RecallHandleError("recall handle is invalid") from None
        # As Java's String.split: trailing empty fields are dropped.
        while items and not items[-1]:
            items.pop()
        if len(items) < 5 or items[0] != _VERSION:
            raise RecallHandleError("recall handle is invalid")
        timestamp = int(items[3]) if _JAVA_LONG.fullmatch(items[3]) else -1
        if not -(2**63) <= timestamp < 2**63:
            timestamp = -1
        return cls(items[1], items[2], timestamp, items[4])
