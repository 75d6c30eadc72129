"""Connected producers and consumers: groups, client ids, subscriptions, liveness."""

import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from pyrmq import _core
from pyrmq.remoting.server import Connection

__all__ = ["ClientTable", "ConsumerInfo", "Subscription", "parse_heartbeat"]

log = logging.getLogger(__name__)

CONSUME_TYPES = {0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY"}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}
CONSUME_FROM = {
    0: "CONSUME_FROM_LAST_OFFSET",
    1: "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    2: "CONSUME_FROM_MIN_OFFSET",
    3: "CONSUME_FROM_MAX_OFFSET",
    4: "CONSUME_FROM_FIRST_OFFSET",
    5: "CONSUME_FROM_TIMESTAMP",
}


def _enum_name(value: object, names: dict[int, str]) -> str:
    """C++ clients send enum ordinals, Java clients their names: accept both."""
    if isinstance(value, int):
        return names.get(value, str(value))
    return str(value)


def _sub_version(value: object) -> int:
    """A heartbeat's subVersion (a number, or a string of one as C++ clients send it); 0 for
    anything else."""
    try:
        return int(str(value))
    except ValueError:
        return 0


TAG = "TAG"
"""The one expression type this broker filters by (RocketMQ's ``enablePropertyFilter`` off)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    topic: str
    expression: str
    # Tag hashes computed here: C++ 1.2.3 sends zeros in codeSet.
    tags_codes: tuple[int, ...] | None
    # Another type (SQL92) is kept to be refused at pull, never read as tags.
    expression_type: str = TAG
    # RocketMQ's subVersion: when the client made the subscription (ms).
    version: int = 0

    @classmethod
    def parse(
        cls, topic: str, expression: str, expression_type: str | None = None, version: int = 0
    ) -> "Subscription":
        kind = (expression_type or TAG).strip().upper() or TAG
        expr = (expression or "").strip()
        if kind != TAG:
            return cls(topic, expr, None, kind, version)
        if expr in ("", "*"):
            return cls(topic, "*", None, TAG, version)
        # As RocketMQ: "*" is "all" only as the whole expression; within one it is a tag.
        tags = [t.strip() for t in expr.split("||") if t.strip()]
        if not tags:
            return cls(topic, "*", None, TAG, version)
        return cls(topic, expr, tuple(_core.java_string_hash(t) for t in tags), TAG, version)

    def to_json(self) -> dict[str, object]:
        """RocketMQ's SubscriptionData, as the broker reports a group's subscription."""
        tags = [] if self.tags_codes is None else [t.strip() for t in self.expression.split("||")]
        return {
            "classFilterMode": False,
            "codeSet": list(self.tags_codes or ()),
            "expressionType": self.expression_type,
            "subString": self.expression,
            "subVersion": self.version,
            "tagsSet": [t for t in tags if t],
            "topic": self.topic,
        }


@dataclasses.dataclass(slots=True)
class ConsumerInfo:
    client_id: str
    connection: object
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: dict[str, Subscription]
    last_update_ms: int
    # From the heartbeat's command: what the broker may send the client, and in which form.
    language: str = "JAVA"
    version: int = 0


def parse_heartbeat(body: bytes) -> dict[str, Any]:
    """HeartbeatData JSON (possibly with a trailing newline)."""
    value = json.loads(body.decode().strip() or "{}")
    if not isinstance(value, dict):
        raise TypeError("heartbeat body is not a JSON object")
    return value


class ProducerInfo(NamedTuple):
    connection: object
    last_update_ms: int
    language: str = "JAVA"
    version: int = 0


class ClientTable:
    """Consumer groups and producer groups with their live clients."""

    def __init__(self) -> None:
        self.consumers: dict[str, dict[str, ConsumerInfo]] = {}
        self.producers: dict[str, dict[str, ProducerInfo]] = {}
        # Called with (group, client id) for each consumer that leaves, however it leaves.
        self.on_consumer_left: list[Callable[[str, str], None]] = []

    def _left(self, group: str, client_id: str) -> None:
        for callback in self.on_consumer_left:
            callback(group, client_id)

    def register_consumer(
        self,
        group: str,
        data: dict[str, Any],
        client_id: str,
        connection: object,
        now_ms: int,
        *,
        language: str = "JAVA",
        version: int = 0,
    ) -> bool:
        """Records one consumer group entry of a heartbeat; returns whether the group's
        membership changed. ``language`` and ``version`` come from the heartbeat command."""
        members = self.consumers.setdefault(group, {})
        before = members.get(client_id)
        subs: dict[str, Subscription] = {}
        for sub in data.get("subscriptionDataSet") or []:
            topic = str(sub.get("topic", ""))
            if topic:
                new = Subscription.parse(
                    topic,
                    str(sub.get("subString", "*")),
                    str(sub.get("expressionType") or TAG),
                    _sub_version(sub.get("subVersion")),
                )
                old = before.subscriptions.get(topic) if before is not None else None
                # As RocketMQ, an older subscription (a heartbeat overtaken by a newer one)
                # does not replace a newer.
                subs[topic] = old if old is not None and old.version > new.version else new
        # As RocketMQ, a member whose topics changed is news to the group too: the others
        # rebalance those topics now rather than at their next timer.
        changed = before is None or before.subscriptions.keys() != subs.keys()
        members[client_id] = ConsumerInfo(
            client_id=client_id,
            connection=connection,
            consume_type=_enum_name(data.get("consumeType", 1), CONSUME_TYPES),
            message_model=_enum_name(data.get("messageModel", 1), MESSAGE_MODELS),
            consume_from_where=_enum_name(data.get("consumeFromWhere", 0), CONSUME_FROM),
            subscriptions=subs,
            last_update_ms=now_ms,
            language=language,
            version=version,
        )
        if before is None:
            log.info("consumer joined group=%s client_id=%s", group, client_id)
        elif changed:
            log.info(
                "consumer changed its topics group=%s client_id=%s topics=%s",
                group,
                client_id,
                sorted(subs),
            )
        return changed

    def register_producer(
        self,
        group: str,
        client_id: str,
        connection: object,
        now_ms: int,
        *,
        language: str = "JAVA",
        version: int = 0,
    ) -> None:
        info = ProducerInfo(connection, now_ms, language, version)
        self.producers.setdefault(group, {})[client_id] = info

    def unregister(self, connection: object, consumer_group: str, producer_group: str) -> list[str]:
        """Removes the clients of ``connection`` from the named groups; returns consumer groups
        whose members changed. As RocketMQ, by connection and not by the client id the request
        names: a client cannot take another's place in a group."""
        members = self.consumers.get(consumer_group, {}) if consumer_group else {}
        left = [cid for cid, info in members.items() if info.connection is connection]
        for cid in left:
            del members[cid]
            log.info("consumer left group=%s client_id=%s", consumer_group, cid)
            self._left(consumer_group, cid)
        producers = self.producers.get(producer_group, {}) if producer_group else {}
        for cid in [cid for cid, p in producers.items() if p.connection is connection]:
            del producers[cid]
        self._drop_empty_groups()
        return [consumer_group] if left else []

    def _drop_empty_groups(self) -> None:
        """Forgets groups whose last client left, as RocketMQ's client managers do: with
        clients coming and going, the tables (and each walk over them) would only grow."""
        for table in (self.consumers, self.producers):
            for group in [g for g, members in table.items() if not members]:
                del table[group]

    def drop_connection(self, connection: object) -> list[str]:
        """Removes every client on ``connection``; returns consumer groups that changed."""
        changed = []
        for group, members in self.consumers.items():
            for cid, info in list(members.items()):
                if info.connection is connection:
                    del members[cid]
                    changed.append(group)
                    log.info("consumer gone group=%s client_id=%s (connection closed)", group, cid)
                    self._left(group, cid)
        for producers in self.producers.values():
            for cid, producer in list(producers.items()):
                if producer.connection is connection:
                    del producers[cid]
        self._drop_empty_groups()
        return changed

    def expire(self, now_ms: int, expired_after_ms: int) -> list[str]:
        changed = []
        for group, members in self.consumers.items():
            for cid, info in list(members.items()):
                if now_ms - info.last_update_ms > expired_after_ms:
                    del members[cid]
                    changed.append(group)
                    log.warning("consumer expired group=%s client_id=%s", group, cid)
                    self._left(group, cid)
        for producers in self.producers.values():
            for cid, producer in list(producers.items()):
                if now_ms - producer.last_update_ms > expired_after_ms:
                    del producers[cid]
        self._drop_empty_groups()
        return changed

    def producer_connection(self, client_id: str) -> Connection | None:
        """The remoting connection of the producer ``client_id`` (from any group), as its
        heartbeats last came over it; None for a client no producer group knows. Replies to a
        request are pushed over it."""
        for producers in self.producers.values():
            entry = producers.get(client_id)
            if entry is not None and isinstance(entry.connection, Connection):
                return entry.connection
        return None

    def consumer_ids(self, group: str) -> list[str]:
        return sorted(self.consumers.get(group, {}))

    def consumer_on(self, group: str, connection: object) -> ConsumerInfo | None:
        """The member of ``group`` whose heartbeats come over ``connection``."""
        for info in self.consumers.get(group, {}).values():
            if info.connection is connection:
                return info
        return None

    def members(self, group: str) -> list[ConsumerInfo]:
        return list(self.consumers.get(group, {}).values())

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic``: its members' latest (RocketMQ keeps one per
        group, replaced by newer versions only)."""
        found = None
        for info in self.consumers.get(group, {}).values():
            sub = info.subscriptions.get(topic)
            if sub is not None and (found is None or sub.version > found.version):
                found = sub
        return found
