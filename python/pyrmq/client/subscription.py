"""A consumer's subscription to one topic: its tag expression, as heartbeats and pulls carry it.

>>> sub = Subscription.parse("T", " TagA || TagB || TagA ")
>>> (sub.expression, sub.tags)
('TagA || TagB', ('TagA', 'TagB'))
>>> Subscription.parse("T", " * ").tags
()
>>> Subscription.parse("T", "TagA || *").tags  # within an expression, "*" is a tag
('TagA', '*')
"""

import dataclasses
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from pyrmq import _core

__all__ = ["Subscription", "consumer_data"]


class _Tagged(Protocol):
    @property
    def tags(self) -> str | None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """A topic and its tag expression: ``*``, or tags joined by ``||``."""

    topic: str
    expression: str
    tags: tuple[str, ...]
    """The tags, in the order given without repeats; empty for ``*``."""
    version: int
    """When the subscription was made (ms), RocketMQ's ``subVersion``."""

    @classmethod
    def parse(cls, topic: str, expression: str | None) -> "Subscription":
        tags = tuple(dict.fromkeys(t.strip() for t in (expression or "").split("||") if t.strip()))
        version = time.time_ns() // 1_000_000
        # As RocketMQ: "*" means every tag only as the whole expression.
        if not tags or (expression or "").strip() == "*":
            return cls(topic, "*", (), version)
        return cls(topic, " || ".join(tags), tags, version)

    @classmethod
    def everything(cls, topic: str) -> "Subscription":
        return cls(topic, "*", (), 0)

    def matches(self, msg: _Tagged) -> bool:
        # The broker filters by tag hash; different tags with equal hashes end here.
        return not self.tags or msg.tags in self.tags

    def to_json(self) -> dict[str, Any]:
        """Java's SubscriptionData, as heartbeats carry it."""
        return {
            "classFilterMode": False,
            "topic": self.topic,
            "subString": self.expression,
            "tagsSet": list(self.tags),
            "codeSet": [_core.java_string_hash(t) for t in self.tags],
            "subVersion": self.version,
            "expressionType": "TAG",
        }


def consumer_data(
    group: str,
    consume_type: str,
    message_model: str,
    consume_from_where: str,
    subscriptions: "Mapping[str, Subscription] | Iterable[Subscription]",
) -> dict[str, Any]:
    """Java's ConsumerData for a heartbeat: the group, enum names, and its subscriptions in
    topic order."""
    subs = subscriptions.values() if isinstance(subscriptions, Mapping) else subscriptions
    return {
        "groupName": group,
        "consumeType": consume_type,
        "messageModel": message_model,
        "consumeFromWhere": consume_from_where,
        "subscriptionDataSet": [s.to_json() for s in sorted(subs, key=lambda s: s.topic)],
        "unitMode": False,
    }
