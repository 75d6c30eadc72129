"""A consumer's subscription to one topic: its tag expression, or a SQL92 expression over
message properties that brokers with ``enablePropertyFilter`` evaluate, as heartbeats and pulls
carry it.

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

__all__ = ["MessageSelector", "Subscription", "consumer_data"]

TAG = "TAG"
SQL92 = "SQL92"


@dataclasses.dataclass(frozen=True, slots=True)
class MessageSelector:
    """Which messages of a topic a consumer takes, as RocketMQ's ``MessageSelector``: a tag
    expression, or a SQL92 expression over message properties (``a > 5 AND region = 'eu'``),
    which only brokers with ``enablePropertyFilter=true`` evaluate; a consumer with one
    starts only where its brokers take it.

    >>> MessageSelector.by_sql("a > 5")
    MessageSelector(expression='a > 5', expression_type='SQL92')
    """

    expression: str
    expression_type: str = TAG

    @classmethod
    def by_tag(cls, expression: str = "*") -> "MessageSelector":
        return cls(expression, TAG)

    @classmethod
    def by_sql(cls, expression: str) -> "MessageSelector":
        if not expression.strip():
            raise ValueError("a SQL92 selector needs an expression")
        return cls(expression.strip(), SQL92)


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
    expression_type: str = TAG
    """``TAG``, or ``SQL92``: the broker filters by it, the client takes what comes."""

    @classmethod
    def of(cls, topic: str, selector: "str | MessageSelector | None") -> "Subscription":
        """A subscription to ``topic`` with a tag expression or a selector."""
        if isinstance(selector, MessageSelector):
            if selector.expression_type == TAG:
                return cls.parse(topic, selector.expression)
            version = time.time_ns() // 1_000_000
            return cls(topic, selector.expression, (), version, selector.expression_type)
        return cls.parse(topic, selector)

    @property
    def by_tag(self) -> bool:
        return self.expression_type == TAG

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
            "expressionType": self.expression_type,
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
