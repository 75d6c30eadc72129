"""Route tables: which brokers are alive, which topics they serve, and the routes built from them.

Mirrors RocketMQ's RouteInfoManager: brokers by name (with their ids and addresses), clusters by
name, liveness by broker address, and queue data by topic and broker name. A broker that has not
registered for ``broker_expired_ms`` (120 s) or whose connection closed is removed with
everything it registered.
"""

import dataclasses
import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

__all__ = ["BrokerLive", "QueueData", "RouteInfo", "encode_json_with_int_keys"]

log = logging.getLogger(__name__)

PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1


@dataclasses.dataclass(slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclasses.dataclass(slots=True)
class BrokerLive:
    last_update_ms: int
    data_version: str
    connection: object | None
    ha_server_addr: str


@dataclasses.dataclass(slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerAddrs": {k: self.broker_addrs[k] for k in sorted(self.broker_addrs)},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }


def encode_json_with_int_keys(value: object, *, standard: bool) -> bytes:
    """Compact JSON with sorted keys. Without ``standard``, integer map keys are written
    unquoted (``{0:"addr"}``), as Java's name server does for clients older than 4.9.4."""
    if standard:
        return json.dumps(_stringify_keys(value), separators=(",", ":"), sort_keys=True).encode()
    return _encode_loose(value).encode()


def _stringify_keys(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify_keys(v) for v in value]
    return value


def _encode_loose(value: object) -> str:
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: (isinstance(kv[0], int), str(kv[0])))
        parts = []
        for k, v in items:
            key = str(k) if isinstance(k, int) else json.dumps(k)
            parts.append(f"{key}:{_encode_loose(v)}")
        return "{" + ",".join(parts) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_encode_loose(v) for v in value) + "]"
    return json.dumps(value, separators=(",", ":"))


class RouteInfo:
    """The name server's tables. Thread-safe; every method takes the one lock briefly."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.topic_queues: dict[str, dict[str, QueueData]] = {}
        self.brokers: dict[str, BrokerData] = {}
        self.clusters: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}

    def register_broker(
        self,
        *,
        cluster: str,
        broker_addr: str,
        broker_name: str,
        broker_id: int,
        ha_server_addr: str,
        topic_config: Mapping[str, Mapping[str, Any]],
        data_version: str,
        connection: object | None,
        now_ms: int,
    ) -> tuple[str, str]:
        """Records a broker and (for a master) its topics; returns (ha server, master address)."""
        with self._lock:
            self.clusters.setdefault(cluster, set()).add(broker_name)
            data = self.brokers.get(broker_name)
            first = data is None
            if data is None:
                data = BrokerData(cluster, broker_name)
                self.brokers[broker_name] = data
            # An address registered under another id (a role switch) is replaced.
            for bid, addr in list(data.broker_addrs.items()):
                if addr == broker_addr and bid != broker_id:
                    del data.broker_addrs[bid]
            # As RocketMQ: an id new to the name (a slave promoted in place, whose data version
            # is its old master's) applies its whole topic table, whatever its data version.
            first = first or broker_id not in data.broker_addrs
            data.broker_addrs[broker_id] = broker_addr
            previous = self.live.get(broker_addr)
            changed = previous is None or previous.data_version != data_version
            self.live[broker_addr] = BrokerLive(now_ms, data_version, connection, ha_server_addr)
            # As RocketMQ: a registration adds and updates topics and never removes one. A
            # broker registers just the topic an admin changed (an "increment"), with a new
            # data version, so a topic missing from one registration is no deleted topic;
            # deletions come as DELETE_TOPIC_IN_NAMESRV, as mqadmin and pyrmq's admin send it.
            # Unchanged data updates no topic (a drained broker stays drained), but adds those
            # missing here: an increment may have been the first this name server heard.
            if broker_id == 0:
                for topic, conf in topic_config.items():
                    by_broker = self.topic_queues.setdefault(topic, {})
                    if not (changed or first) and broker_name in by_broker:
                        continue
                    by_broker[broker_name] = QueueData(
                        broker_name=broker_name,
                        read_queue_nums=int(conf.get("readQueueNums", 0)),
                        write_queue_nums=int(conf.get("writeQueueNums", 0)),
                        perm=int(conf.get("perm", PERM_READ | PERM_WRITE)),
                        topic_sys_flag=int(conf.get("topicSysFlag", 0)),
                    )
            if first or previous is None:
                log.info(
                    "broker registered name=%s id=%s addr=%s cluster=%s topics=%d",
                    broker_name, broker_id, broker_addr, cluster, len(topic_config),
                )  # fmt: skip
            master = data.broker_addrs.get(0, "") if broker_id != 0 else ""
            master_live = self.live.get(master) if master else None
            return (master_live.ha_server_addr if master_live else "", master)

    def unregister_broker(self, *, broker_addr: str, broker_name: str, broker_id: int) -> None:
        with self._lock:
            self._remove(broker_addr, broker_name, broker_id)

    def _remove(self, broker_addr: str, broker_name: str, broker_id: int | None) -> None:
        self.live.pop(broker_addr, None)
        data = self.brokers.get(broker_name)
        if data is None:
            return
        for bid, addr in list(data.broker_addrs.items()):
            if addr == broker_addr and (broker_id is None or bid == broker_id):
                del data.broker_addrs[bid]
        log.info("broker removed name=%s addr=%s", broker_name, broker_addr)
        if data.broker_addrs:
            return
        del self.brokers[broker_name]
        # From every cluster: a name registered in several is in each one's set.
        for cluster, names in list(self.clusters.items()):
            names.discard(broker_name)
            if not names:
                del self.clusters[cluster]
        for topic, by_broker in list(self.topic_queues.items()):
            by_broker.pop(broker_name, None)
            if not by_broker:
                del self.topic_queues[topic]

    def _name_of(self, broker_addr: str) -> str | None:
        for name, data in self.brokers.items():
            if broker_addr in data.broker_addrs.values():
                return name
        return None

    def expire(self, now_ms: int, expired_after_ms: int) -> list[str]:
        """Removes brokers silent for longer than ``expired_after_ms``; returns their addresses."""
        with self._lock:
            gone = [
                a
                for a, live in self.live.items()
                if now_ms - live.last_update_ms > expired_after_ms
            ]
            for addr in gone:
                name = self._name_of(addr)
                log.warning("broker expired addr=%s name=%s", addr, name)
                if name is not None:
                    self._remove(addr, name, None)
                else:
                    self.live.pop(addr, None)
            return gone

    def connection_closed(self, connection: object) -> None:
        """A broker's connection closed: remove it at once, as RocketMQ does."""
        with self._lock:
            for addr, live in list(self.live.items()):
                if live.connection is connection:
                    name = self._name_of(addr)
                    if name is not None:
                        self._remove(addr, name, None)
                    else:
                        self.live.pop(addr, None)

    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData for ``topic``, or None when no live broker serves it."""
        with self._lock:
            by_broker = self.topic_queues.get(topic)
            if not by_broker:
                return None
            queue_datas = [by_broker[name].to_json() for name in sorted(by_broker)]
            broker_datas = [
                self.brokers[name].to_json() for name in sorted(by_broker) if name in self.brokers
            ]
            if not broker_datas:
                return None
            return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        """Drops ``topic`` from the routes: from every broker, or from ``cluster``'s only."""
        with self._lock:
            by_broker = self.topic_queues.get(topic)
            if by_broker is None:
                return
            if cluster is None:
                del self.topic_queues[topic]
            else:
                for name in self.clusters.get(cluster, set()):
                    by_broker.pop(name, None)
                if not by_broker:
                    del self.topic_queues[topic]
        log.info("topic deleted from routes name=%s cluster=%s", topic, cluster or "*")

    def cluster_info(self) -> dict[str, Any]:
        with self._lock:
            return {
                "brokerAddrTable": {name: d.to_json() for name, d in sorted(self.brokers.items())},
                "clusterAddrTable": {c: sorted(n) for c, n in sorted(self.clusters.items())},
            }

    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self.topic_queues)

    def system_topics(self) -> tuple[list[str], str | None]:
        """Every cluster name and broker name (RocketMQ's getSystemTopicList), and the address
        of one broker (the first by name, its lowest id), or None when none is registered."""
        with self._lock:
            names = set(self.clusters)
            for brokers in self.clusters.values():
                names |= brokers
            addr = next(
                (d.broker_addrs[min(d.broker_addrs)] for _, d in sorted(self.brokers.items())
                 if d.broker_addrs),
                None,
            )  # fmt: skip
            return sorted(names), addr

    def topics_of_cluster(self, cluster: str) -> list[str]:
        """Topics some broker of ``cluster`` serves (``mqadmin topicList -c``)."""
        with self._lock:
            names = self.clusters.get(cluster, set())
            return sorted(t for t, brokers in self.topic_queues.items() if names & brokers.keys())

    def set_write_perm(self, broker_name: str, *, writable: bool) -> int:
        """Takes the write permission from every topic of ``broker_name`` in the routes, or
        makes each readable and writable, as RocketMQ's wipeWritePerm/addWritePerm do to drain
        a broker and bring it back; returns how many topics the broker has, as they count. A
        registration of the whole topic table with new data resets them; the broker registers
        a topic an admin creates or changes alone."""
        count = 0
        with self._lock:
            for by_broker in self.topic_queues.values():
                data = by_broker.get(broker_name)
                if data is None:
                    continue
                data.perm = PERM_READ | PERM_WRITE if writable else data.perm & ~PERM_WRITE
                count += 1
        log.info("write permission %s broker=%s topics=%d",
                 "given to" if writable else "taken from", broker_name, count)  # fmt: skip
        return count

    def data_version_changed(self, broker_addr: str, data_version: str, now_ms: int) -> bool:
        """Whether a broker's topic data differs from what it last registered (RocketMQ's
        QUERY_DATA_VERSION, asked before a registration it may skip); an unchanged broker
        counts as heard from."""
        with self._lock:
            live = self.live.get(broker_addr)
            if live is None or live.data_version != data_version:
                return True
            live.last_update_ms = now_ms
            return False

    def data_version_of(self, broker_addr: str) -> str | None:
        with self._lock:
            live = self.live.get(broker_addr)
            return None if live is None else live.data_version
