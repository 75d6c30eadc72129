"""Consumer groups' settings (RocketMQ's SubscriptionGroupConfig), persisted as RocketMQ's
``subscriptionGroup.json``.

An operator sets them with ``mqadmin updateSubGroup`` or ``pyrmq admin update-group``. pyrmq
acts on ``retryMaxTimes`` (the deliveries a message gets before the group's DLQ, over both
protocols), ``consumeMessageOrderly`` (whether 5.x clients of the group consume FIFO messages
in order), and, on a broker with ``slaveReadEnable``, ``brokerId`` and
``whichBrokerWhenConsumeSlowly`` (where its pull answers send the group's consumers). The other
fields are kept as given, so the file round-trips with RocketMQ's tools. A group without
settings behaves as RocketMQ's auto-created ones do, with the broker's ``maxReconsumeTimes``.
"""

import dataclasses
import threading
from pathlib import Path
from typing import Any

from pyrmq import _core
from pyrmq.broker.state.json_file import load_json, object_in, store_json
from pyrmq.broker.state.topics import RETRY_PREFIX
from pyrmq.errors import MessageIllegalError

__all__ = ["GroupConfig", "GroupTable", "check_group_name"]


def check_group_name(group: str) -> None:
    """Raises MessageIllegalError for a consumer group name that cannot name its retry and
    dead-letter topics (``%RETRY%<group>``, ``%DLQ%<group>``)."""
    if not group:
        raise MessageIllegalError("the consumer group name is empty")
    _core.validate_topic(RETRY_PREFIX + group, internal=True)


# Field name -> RocketMQ's JSON name.
_JSON_NAMES = {
    "group_name": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "consume_message_orderly": "consumeMessageOrderly",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
}


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    consume_message_orderly: bool = False
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, name) for name, key in _JSON_NAMES.items()}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "GroupConfig":
        """RocketMQ's JSON form; raises ValueError for a field of the wrong kind."""
        fields: dict[str, Any] = {}
        for field in dataclasses.fields(cls):
            key = _JSON_NAMES[field.name]
            if key not in value:
                continue
            raw = value[key]
            if field.type is bool:
                if not isinstance(raw, bool):
                    raise ValueError(f"{key} must be true or false, not {raw!r}")
            elif field.type is int:
                if isinstance(raw, bool) or not isinstance(raw, int):
                    raise ValueError(f"{key} must be an integer, not {raw!r}")
            elif not isinstance(raw, str):
                raise ValueError(f"{key} must be a string, not {raw!r}")
            fields[field.name] = raw
        if not fields.get("group_name"):
            raise ValueError("groupName is missing")
        config = cls(**fields)
        if config.retry_max_times < 0:
            raise ValueError(f"retryMaxTimes must be 0 or more, not {config.retry_max_times}")
        return config


class GroupTable:
    """Group settings by name; every change is written before it is answered. Fields pyrmq
    does not know (newer RocketMQ's ``groupRetryPolicy``, ``attributes``, ...) are kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._groups: dict[str, tuple[GroupConfig, dict[str, Any]]] = {}
        self._version = 0
        loaded = load_json(path, _decode)
        if loaded is not None:
            self._groups, self._version = loaded

    def get(self, group: str) -> GroupConfig | None:
        entry = self._groups.get(group)
        return None if entry is None else entry[0]

    def all(self) -> list[GroupConfig]:
        return sorted((c for c, _ in self._groups.values()), key=lambda g: g.group_name)

    def put(self, value: dict[str, Any]) -> GroupConfig:
        """Sets a group from RocketMQ's JSON form; raises ValueError for a bad one."""
        config = GroupConfig.from_json(value)
        with self._lock:
            self._groups[config.group_name] = (config, {**value, **config.to_json()})
            self._persist()
        return config

    def replace_from_master(self, wrapper: dict[str, Any]) -> None:
        """A slave takes its master's group settings (GET_ALL_SUBSCRIPTIONGROUP_CONFIG) in
        place of its own, as RocketMQ's slave does: a group deleted there goes here too."""
        groups = {}
        for value in (wrapper.get("subscriptionGroupTable") or {}).values():
            config = GroupConfig.from_json(value)
            groups[config.group_name] = (config, {**value, **config.to_json()})
        with self._lock:
            if groups != self._groups:
                self._groups = groups
                self._persist()

    def delete(self, group: str) -> bool:
        with self._lock:
            if self._groups.pop(group, None) is None:
                return False
            self._persist()
            return True

    def to_json(self) -> dict[str, Any]:
        return {
            "subscriptionGroupTable": {
                name: raw for name, (_, raw) in sorted(self._groups.items())
            },
            "dataVersion": {"counter": self._version, "timestamp": 0},
        }

    def _persist(self) -> None:
        self._version += 1
        store_json(self.path, self.to_json())


def _decode(value: Any) -> tuple[dict[str, tuple[GroupConfig, dict[str, Any]]], int]:
    """subscriptionGroup.json's groups (each with its JSON form) and data version counter."""
    file = object_in(value, "subscriptionGroup.json")
    groups = {}
    for name, entry in object_in(file.get("subscriptionGroupTable") or {}, "the table").items():
        config = GroupConfig.from_json(object_in(entry, str(name)))
        groups[config.group_name] = (config, dict(entry))
    return groups, int(object_in(file.get("dataVersion") or {}, "dataVersion").get("counter", 0))
