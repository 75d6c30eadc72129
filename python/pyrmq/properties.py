"""Message properties: RocketMQ's well-known keys and the ``name\\x01value\\x02`` encoding.

>>> encode_properties({"TAGS": "A", "KEYS": "k1 k2"})
'TAGS\\x01A\\x02KEYS\\x01k1 k2'
>>> parse_properties("TAGS\\x01A\\x02KEYS\\x01k1 k2\\x02")
{'TAGS': 'A', 'KEYS': 'k1 k2'}
"""

from collections.abc import Mapping
from typing import Final

__all__ = [
    "ARRIVE_TIME",
    "CHECK_IMMUNITY",
    "CLUSTER",
    "CORRELATION_ID",
    "DELAY",
    "DELAYING",
    "KEYS",
    "KEY_SEPARATOR",
    "MAX_OFFSET",
    "MAX_RECONSUME_TIMES",
    "MIN_OFFSET",
    "MSG_TYPE",
    "ORIGIN_MESSAGE_ID",
    "PRODUCER_GROUP",
    "PUSH_REPLY_TIME",
    "RECONSUME_TIME",
    "REPLY_MESSAGE_FLAG",
    "REPLY_TOPIC_SUFFIX",
    "REPLY_TO_CLIENT",
    "RETRY_TOPIC",
    "TAGS",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TRAN_MSG",
    "TTL",
    "UNIQ_KEY",
    "WAIT",
    "encode_properties",
    "holding_back",
    "parse_properties",
]

NAME_VALUE: Final = "\x01"
PROPERTY_SEP: Final = "\x02"
KEY_SEPARATOR: Final = " "

KEYS: Final = "KEYS"
TAGS: Final = "TAGS"
WAIT: Final = "WAIT"
DELAY: Final = "DELAY"
RETRY_TOPIC: Final = "RETRY_TOPIC"
UNIQ_KEY: Final = "UNIQ_KEY"
ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME: Final = "RECONSUME_TIME"
MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
MIN_OFFSET: Final = "MIN_OFFSET"
MAX_OFFSET: Final = "MAX_OFFSET"
TRAN_MSG: Final = "TRAN_MSG"
# Seconds from a transaction's half to the broker's first check of it.
CHECK_IMMUNITY: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PRODUCER_GROUP: Final = "PGROUP"
# RocketMQ 5's timers: deliver at an epoch ms, or so many s or ms after the send.
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
# Request-reply (RocketMQ 4.6+): a request names its reply's correlation id, the client id
# the reply goes back to and the requester's timeout in ms; the broker names its cluster,
# whose reply topic the reply is sent to with MSG_TYPE=reply.
CORRELATION_ID: Final = "CORRELATION_ID"
REPLY_TO_CLIENT: Final = "REPLY_TO_CLIENT"
TTL: Final = "TTL"
CLUSTER: Final = "CLUSTER"
MSG_TYPE: Final = "MSG_TYPE"
REPLY_MESSAGE_FLAG: Final = "reply"
REPLY_TOPIC_SUFFIX: Final = "_REPLY_TOPIC"
"""A cluster's replies go to ``{brokerClusterName}_REPLY_TOPIC`` (RocketMQ's MixAll)."""
PUSH_REPLY_TIME: Final = "PUSH_REPLY_TIME"
ARRIVE_TIME: Final = "ARRIVE_TIME"
DELAYING: Final = frozenset({DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS})
"""The properties that make the store hold a message back."""


def holding_back(properties: Mapping[str, str], now_ms: int) -> list[str]:
    """Which of ``properties`` hold a message back at ``now_ms``: a ``DELAY`` level above 0,
    a timer still ahead, or one that is not a number. A level of 0 and a timer already due
    deliver at once, as in RocketMQ.

    >>> holding_back({"DELAY": "0", "TIMER_DELIVER_MS": "1000"}, now_ms=5000)
    []
    >>> holding_back({"DELAY": "2", "TIMER_DELAY_SEC": "x"}, now_ms=5000)
    ['DELAY', 'TIMER_DELAY_SEC']
    """
    out = []
    for name in sorted(properties.keys() & DELAYING):
        try:
            value = int(properties[name].strip())
        except ValueError:
            if name != DELAY:  # RocketMQ reads a level that is no number as none
                out.append(name)
            continue
        if value > (now_ms if name == TIMER_DELIVER_MS else 0):
            out.append(name)
    return out


def parse_properties(encoded: str) -> dict[str, str]:
    """Decodes properties; a trailing separator (C++ clients) is accepted."""
    props = {}
    for pair in encoded.split(PROPERTY_SEP):
        name, sep, value = pair.partition(NAME_VALUE)
        if sep and name:
            props[name] = value
    return props


def encode_properties(props: dict[str, str]) -> str:
    """Encodes properties as Java 4.9 does: no trailing separator."""
    return PROPERTY_SEP.join(f"{k}{NAME_VALUE}{v}" for k, v in props.items())
