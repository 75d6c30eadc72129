"""Topic attributes (RocketMQ 5's ``TopicConfig.attributes``), as ``mqadmin updateTopic -a``
changes them: ``+key=value`` adds or alters one, ``-key`` removes it.

>>> alter({}, parse_changes("+message.type=FIFO"), creating=True)
{'message.type': 'FIFO'}
>>> alter({"message.type": "FIFO"}, parse_changes("-message.type"), creating=False)
{}
>>> alter({}, parse_changes("+message.type=RANDOM"), creating=True)
Traceback (most recent call last):
...
ValueError: message.type RANDOM is not one of DELAY, FIFO, MIXED, NORMAL, TRANSACTION, UNSPECIFIED
"""

import dataclasses
from collections.abc import Mapping

__all__ = ["MESSAGE_TYPE", "MIXED", "alter", "parse_changes"]

MESSAGE_TYPE = "message.type"
MIXED = "MIXED"


@dataclasses.dataclass(frozen=True, slots=True)
class _Attribute:
    values: frozenset[str]
    changeable: bool
    supported: frozenset[str]
    """The values this broker serves (the others are RocketMQ's but need what it lacks)."""


_MESSAGE_TYPES = frozenset({"UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", MIXED})

# RocketMQ 5.3's TopicAttributes; reserve.time needs its tiered store.
_KNOWN = {
    MESSAGE_TYPE: _Attribute(_MESSAGE_TYPES, changeable=True, supported=_MESSAGE_TYPES),
    "queue.type": _Attribute(
        frozenset({"BatchCQ", "SimpleCQ"}), changeable=False, supported=frozenset({"SimpleCQ"})
    ),
    "cleanup.policy": _Attribute(
        frozenset({"DELETE", "COMPACTION"}), changeable=False, supported=frozenset({"DELETE"})
    ),
}


def parse_changes(text: str | None) -> dict[str, str]:
    """``+k1=v1,+k2=v2,-k3`` as ``{"+k1": "v1", "+k2": "v2", "-k3": ""}``; raises ValueError
    for a malformed or repeated entry."""
    changes: dict[str, str] = {}
    if not text:
        return changes
    for entry in text.split(","):
        key, eq, value = entry.partition("=")
        if eq and not key.startswith("+"):
            raise ValueError(f"add/alter attribute format is wrong: {key}")
        if not eq and not key.startswith("-"):
            raise ValueError(f"delete attribute format is wrong: {key}")
        if key in changes:
            raise ValueError(f"key duplication: {key}")
        changes[key] = value
    return changes


def alter(
    current: Mapping[str, str], changes: Mapping[str, str], *, creating: bool
) -> dict[str, str]:
    """``current`` with ``changes`` (from :func:`parse_changes`) applied; raises ValueError for
    an unknown key or value, a change of one that cannot change, or a removal of one not
    set. A topic being created takes additions only."""
    out = dict(current)
    seen: set[str] = set()
    for signed, value in changes.items():
        sign, key = signed[:1], signed[1:]
        if not key or "+" in key or "-" in key:
            raise ValueError(f"attribute {signed!r} is malformed")
        if key in seen:
            raise ValueError(f"alter duplication key. key: {key}")
        seen.add(key)
        known = _KNOWN.get(key)
        if known is None:
            raise ValueError(f"unsupported key: {key}")
        if sign == "-":
            if creating:
                raise ValueError(f"only add attribute is supported while creating topic: {key}")
            if key not in out:
                raise ValueError(f"attempt to delete a nonexistent key: {key}")
            if not known.changeable:
                raise ValueError(f"attempt to update an unchangeable attribute. key: {key}")
            del out[key]
            continue
        if not creating and not known.changeable:
            raise ValueError(f"attempt to update an unchangeable attribute. key: {key}")
        if value not in known.values:
            raise ValueError(f"{key} {value} is not one of {', '.join(sorted(known.values))}")
        if value not in known.supported:
            raise ValueError(f"{key} {value} is not supported by this broker")
        out[key] = value
    return out
