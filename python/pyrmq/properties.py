"""Message properties: RocketMQ's well-known keys and the ``name\\x01value\\x02`` encoding.

>>> encode_properties({"TAGS": "A", "KEYS": "k1 k2"})
'TAGS\\x01A\\x02KEYS\\x01k1 k2'
>>> parse_properties("TAGS\\x01A\\x02KEYS\\x01k1 k2\\x02")
{'TAGS': 'A', 'KEYS': 'k1 k2'}
"""

from typing import Final

__all__ = [
    "DELAY",
    "DELAYING",
    "KEYS",
    "KEY_SEPARATOR",
    "MAX_OFFSET",
    "MAX_RECONSUME_TIMES",
    "MIN_OFFSET",
    "ORIGIN_MESSAGE_ID",
    "PRODUCER_GROUP",
    "RECONSUME_TIME",
    "RETRY_TOPIC",
    "TAGS",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TRAN_MSG",
    "UNIQ_KEY",
    "WAIT",
    "encode_properties",
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
PRODUCER_GROUP: Final = "PGROUP"
# RocketMQ 5's timers: deliver at an epoch ms, or so many s or ms after the send.
TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
DELAYING: Final = frozenset({DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS})
"""The properties that make the store hold a message back."""


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
