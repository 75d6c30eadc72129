"""The topic table: one TopicConfig per topic, persisted as RocketMQ's topics.json."""

import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

from pyrmq.broker.state.json_file import load_json, object_in, store_json
from pyrmq.broker.state.topic_attributes import MESSAGE_TYPE, MIXED
from pyrmq.properties import REPLY_TOPIC_SUFFIX

__all__ = [
    "AUTO_CREATE_TOPIC",
    "LMQ_PREFIX",
    "PERM_INHERIT",
    "PERM_READ",
    "PERM_WRITE",
    "RECALL_TOPIC",
    "SCHEDULE_TOPIC",
    "TopicConfig",
    "TopicTable",
]

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1
AUTO_CREATE_TOPIC = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
SCHEDULE_QUEUE_NUMS = 18
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
# RocketMQ's TopicConfig default, which the cluster-named topic keeps.
NAMED_TOPIC_QUEUE_NUMS = 16
RECALL_TOPIC = "rmq_sys_wheel_timer"
"""The store's own queue of recall markers (RocketMQ 5's timer wheel topic)."""
LMQ_PREFIX = "%LMQ%"


@dataclasses.dataclass(slots=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0
    order: bool = False
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)
    """RocketMQ 5's topic attributes (see :mod:`pyrmq.broker.state.topic_attributes`)."""

    @property
    def message_type(self) -> str:
        """The ``message.type`` attribute: the kinds of messages gRPC producers may send. A
        topic without one takes them all (``MIXED``), where RocketMQ takes only NORMAL."""
        return self.attributes.get(MESSAGE_TYPE, MIXED)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": "SINGLE_TAG",
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }
        if self.attributes:
            out["attributes"] = dict(self.attributes)
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "TopicConfig":
        return cls(
            topic_name=str(value["topicName"]),
            read_queue_nums=int(value.get("readQueueNums", 16)),
            write_queue_nums=int(value.get("writeQueueNums", 16)),
            perm=int(value.get("perm", PERM_READ | PERM_WRITE)),
            topic_sys_flag=int(value.get("topicSysFlag", 0)),
            order=bool(value.get("order", False)),
            attributes={str(k): str(v) for k, v in (value.get("attributes") or {}).items()},
        )


class TopicTable:
    """Topic configs with RocketMQ's auto-creation rules, persisted on every change."""

    def __init__(
        self,
        path: Path,
        *,
        auto_create_topic_enable: bool,
        default_topic_queue_nums: int,
        cluster_name: str | None = None,
        broker_name: str | None = None,
        cluster_topic_enable: bool = True,
        broker_topic_enable: bool = True,
    ) -> None:
        """``cluster_name``, ``broker_name``: the broker's; topics named after them, and the
        cluster's reply topic, are system topics (none without them). The first two take
        sends only with ``cluster_topic_enable``, ``broker_topic_enable``."""
        self.path = path
        self._named = {
            name: (queues, PERM_INHERIT | (PERM_READ | PERM_WRITE if enabled else 0))
            for name, queues, enabled in (
                (cluster_name, NAMED_TOPIC_QUEUE_NUMS, cluster_topic_enable),
                (broker_name, 1, broker_topic_enable),
            )
            if name
        }
        self.auto_create_topic_enable = auto_create_topic_enable
        self.default_topic_queue_nums = default_topic_queue_nums
        self.reply_topic = None if cluster_name is None else cluster_name + REPLY_TOPIC_SUFFIX
        self._lock = threading.Lock()
        self._topics: dict[str, TopicConfig] = {}
        self.data_version = {"counter": 0, "timestamp": int(time.time() * 1000)}
        loaded = load_json(path, _decode)
        if loaded is not None:
            self._topics, version = loaded
            self.data_version = version or self.data_version
        self._system_topics_unsaved = self._add_system_topics()

    def own_system_topics(self) -> set[str]:
        """The system topics this broker's names make: its cluster's reply topic and the
        topics named after its cluster and itself."""
        own = set(self._named)
        if self.reply_topic is not None:
            own.add(self.reply_topic)
        return own

    def _add_system_topics(self) -> bool:
        changed = False
        if self.auto_create_topic_enable and AUTO_CREATE_TOPIC not in self._topics:
            self._topics[AUTO_CREATE_TOPIC] = TopicConfig(
                AUTO_CREATE_TOPIC,
                self.default_topic_queue_nums,
                self.default_topic_queue_nums,
                PERM_READ | PERM_WRITE | PERM_INHERIT,
            )
            changed = True
        if SCHEDULE_TOPIC not in self._topics:
            self._topics[SCHEDULE_TOPIC] = TopicConfig(
                SCHEDULE_TOPIC, SCHEDULE_QUEUE_NUMS, SCHEDULE_QUEUE_NUMS, PERM_READ | PERM_WRITE
            )
            changed = True
        # As RocketMQ's broker: one queue, for the replies it stores (storeReplyMessageEnable).
        if self.reply_topic is not None and self.reply_topic not in self._topics:
            self._topics[self.reply_topic] = TopicConfig(self.reply_topic, 1, 1)
            changed = True
        if SELF_TEST_TOPIC not in self._topics:
            self._topics[SELF_TEST_TOPIC] = TopicConfig(SELF_TEST_TOPIC, 1, 1)
            changed = True
        # Set at every start, as RocketMQ's: their perms follow the broker's settings.
        for name, (queues, perm) in self._named.items():
            wanted = TopicConfig(name, queues, queues, perm)
            if self._topics.get(name) != wanted:
                self._topics[name] = wanted
                changed = True
        return changed

    def save_system_topics(self) -> None:
        """Writes the system topics added at load. The broker calls it once its store is open,
        so that a directory the store refuses to open is left as it was."""
        with self._lock:
            if self._system_topics_unsaved:
                self._persist()
                self._system_topics_unsaved = False

    def _set(self, name: str, config: TopicConfig | None) -> None:
        """Sets (None: removes) one topic and saves the table. A save that fails (a full disk)
        leaves the table as it was: a topic in memory only would be gone after a restart."""
        previous = self._topics.get(name)
        if config is None:
            self._topics.pop(name, None)
        else:
            self._topics[name] = config
        try:
            self._persist()
        except BaseException:
            if previous is None:
                self._topics.pop(name, None)
            else:
                self._topics[name] = previous
            raise

    def _persist(self) -> None:
        self.data_version = {
            "counter": int(self.data_version.get("counter", 0)) + 1,
            "timestamp": int(time.time() * 1000),
        }
        store_json(self.path, self.to_json())

    def next_version(self) -> None:
        """Moves the data version on (and saves the table), so that the name servers take
        the next registration whole: what it says of the topics changed otherwise."""
        with self._lock:
            self._persist()

    def to_json(self) -> dict[str, Any]:
        return {
            "dataVersion": self.data_version,
            "topicConfigTable": {n: c.to_json() for n, c in sorted(self._topics.items())},
        }

    def replace_from_master(self, wrapper: dict[str, Any]) -> bool:
        """A slave takes its master's topics (GET_ALL_TOPIC_CONFIG's body) when their data
        version differs from its own; returns whether they did."""
        version = wrapper.get("dataVersion") or {}
        topics = {
            name: TopicConfig.from_json(value)
            for name, value in (wrapper.get("topicConfigTable") or {}).items()
        }
        with self._lock:
            if version == self.data_version:
                return False
            previous = self._topics, self.data_version
            self._topics = topics
            self._add_system_topics()
            self.data_version = dict(version)
            try:
                store_json(self.path, self.to_json())
            except BaseException:
                self._topics, self.data_version = previous
                raise
        return True

    def get(self, topic: str) -> TopicConfig | None:
        with self._lock:
            return self._topics.get(topic)

    def all(self) -> list[TopicConfig]:
        with self._lock:
            return list(self._topics.values())

    def put(self, config: TopicConfig) -> None:
        """Creates or replaces a topic (UPDATE_AND_CREATE_TOPIC)."""
        with self._lock:
            self._set(config.topic_name, config)
        log.info("topic updated name=%s queues=%d/%d perm=%d", config.topic_name,
                 config.read_queue_nums, config.write_queue_nums, config.perm)  # fmt: skip

    def set_order_topics(self, order: set[str]) -> bool:
        """Marks the topics named in the name servers' ORDER_TOPIC_CONFIG orderly, as RocketMQ
        5's broker does with the table its registration gets back (it no longer clears the
        flag of the others: a topic made orderly here stays so); saves (with a new data
        version) and returns True if that changed any."""
        with self._lock:
            changed = {
                name: dataclasses.replace(config, order=True)
                for name, config in self._topics.items()
                if name in order and not config.order
            }
            if not changed:
                return False
            previous = dict(self._topics)
            self._topics.update(changed)
            try:
                self._persist()
            except BaseException:
                self._topics = previous
                raise
        log.info("topics now orderly per the name servers: %s", sorted(order & set(changed)))
        return True

    def delete(self, topic: str) -> bool:
        """Removes a topic (DELETE_TOPIC_IN_BROKER); returns whether it existed."""
        with self._lock:
            if topic not in self._topics:
                return False
            self._set(topic, None)
        log.info("topic deleted name=%s", topic)
        return True

    def create_on_send(
        self, topic: str, default_topic: str, requested_queue_nums: int
    ) -> tuple[TopicConfig | None, bool]:
        """The config a send to ``topic`` uses, creating the topic from ``default_topic`` when that
        one may be inherited (RocketMQ's createTopicInSendMessageMethod). Returns the config and
        whether it was created."""
        with self._lock:
            existing = self._topics.get(topic)
            if existing is not None:
                return existing, False
            created = self._inherited(topic, default_topic, requested_queue_nums)
            if created is None:
                return None, False
            self._set(topic, created)
        log.info("topic auto-created name=%s queues=%d", topic, created.write_queue_nums)
        return created, True

    def config_on_send(
        self, topic: str, default_topic: str, requested_queue_nums: int
    ) -> TopicConfig | None:
        """The config a send to ``topic`` would use, creating nothing: the topic's own, or
        the one :meth:`create_on_send` would create it with (None if it would not)."""
        with self._lock:
            existing = self._topics.get(topic)
            if existing is not None:
                return existing
            return self._inherited(topic, default_topic, requested_queue_nums)

    def _inherited(
        self, topic: str, default_topic: str, requested_queue_nums: int
    ) -> TopicConfig | None:
        if topic.startswith(RETRY_PREFIX):
            return TopicConfig(topic, 1, 1, PERM_READ | PERM_WRITE)
        default = self._topics.get(default_topic)
        if default is None or not default.perm & PERM_INHERIT or default.write_queue_nums < 1:
            return None
        nums = min(max(requested_queue_nums, 1), default.write_queue_nums)
        return TopicConfig(topic, nums, nums, default.perm & ~PERM_INHERIT)

    def create_system(
        self, topic: str, queue_nums: int, perm: int = PERM_READ | PERM_WRITE
    ) -> tuple[TopicConfig, bool]:
        """Creates a broker-owned topic (%RETRY%, %DLQ%) if missing."""
        with self._lock:
            existing = self._topics.get(topic)
            if existing is not None:
                return existing, False
            created = TopicConfig(topic, queue_nums, queue_nums, perm)
            self._set(topic, created)
        log.info("topic created name=%s queues=%d", topic, queue_nums)
        return created, True


def _decode(value: Any) -> tuple[dict[str, TopicConfig], dict[str, Any] | None]:
    """topics.json's table and data version."""
    table = object_in(object_in(value, "topics.json").get("topicConfigTable") or {}, "the table")
    topics = {str(n): TopicConfig.from_json(object_in(t, str(n))) for n, t in table.items()}
    version = value.get("dataVersion")
    return topics, version if isinstance(version, dict) else None
