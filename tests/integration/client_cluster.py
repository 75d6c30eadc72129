"""An in-process cluster for client tests: one name server and N brokers on 127.0.0.1, port 0,
each broker over its own store under ``tmp_path``.

Brokers are named ``broker-a``, ``broker-b``, ... A broker can be stopped and restarted on the
same port over the same store. Helpers read what a broker stored straight from its store.

>>> async with client_cluster(tmp_path, brokers=2) as c:  # doctest: +SKIP
...     await c.create_topic("T", queue_nums=4)
...     ... Producer("PG", c.namesrv_addr) ...
...     assert [m.body for m in c.stored("T")] == [...]
"""

from __future__ import annotations

import dataclasses
import string
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.helpers import eventually

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.controller import BrokerController
from pyrmq.broker.state.topics import PERM_READ, PERM_WRITE, TopicConfig
from pyrmq.config import StoreConfig
from pyrmq.namesrv import NameServer, NamesrvConfig
from pyrmq.store import StoredMessage

__all__ = ["ClientCluster", "client_cluster"]

SMALL_STORE: dict[str, Any] = {
    "mapped_file_size_commit_log": 1 << 20,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 100,
    "max_index_num": 1000,
}
"""Segment and index sizes that keep stores small and quick to open."""


@dataclasses.dataclass
class ClientCluster:
    namesrv: NameServer
    brokers: list[BrokerController]
    """Every broker, running or not, in name order; a restart replaces its entry."""
    running: list[bool]

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.address

    def broker(self, which: int | str) -> BrokerController:
        """A broker by index or by name."""
        if isinstance(which, int):
            return self.brokers[which]
        for b in self.brokers:
            if b.config.broker_name == which:
                return b
        raise KeyError(which)

    def _index(self, which: int | str) -> int:
        return self.brokers.index(self.broker(which))

    # --- broker lifecycle ----------------------------------------------------------------

    async def stop_broker(self, which: int | str) -> None:
        """Stops a broker (it unregisters from the name server, closes its connections and
        its store); its port and store directory are kept for :meth:`restart_broker`."""
        i = self._index(which)
        if self.running[i]:
            self.running[i] = False
            await self.brokers[i].stop()

    async def restart_broker(self, which: int | str) -> BrokerController:
        """Starts a stopped broker again on the same port over the same store."""
        i = self._index(which)
        old = self.brokers[i]
        if self.running[i]:
            await self.stop_broker(i)
        # The HA port stays one the system picks, as at the first start: the listen port + 1
        # may be a client connection's by now.
        ha_port = 0 if old.config.ha_listen_port == -1 else old.config.ha_listen_port
        config = dataclasses.replace(
            old.config, listen_port=old.server.port, ha_listen_port=ha_port
        )
        broker = BrokerController(config)
        await broker.start()
        self.brokers[i], self.running[i] = broker, True
        return broker

    # --- topics and routes ---------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        queue_nums: int = 4,
        *,
        brokers: Sequence[int | str] | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        timeout_s: float = 5.0,
    ) -> None:
        """Creates (or resizes) ``topic`` on the given brokers (default: every running one)
        and waits until the name server routes it to each of them."""
        targets = [self.broker(b) for b in brokers] if brokers is not None else self.live()
        for b in targets:
            b.topics.put(TopicConfig(topic, queue_nums, queue_nums, perm))
            b.request_registration()

        def routed() -> bool:
            queues = self.routed_queues(topic)
            return all(queues.get(b.config.broker_name) == queue_nums for b in targets)

        await eventually(routed, timeout_s, f"route of {topic} on {len(targets)} broker(s)")

    def routed_queues(self, topic: str) -> dict[str, int]:
        """Write queue count per broker name in the name server's route of ``topic``."""
        route = self.namesrv.routes.route(topic) or {}
        return {q["brokerName"]: q["writeQueueNums"] for q in route.get("queueDatas", [])}

    def live(self) -> list[BrokerController]:
        return [b for b, up in zip(self.brokers, self.running, strict=True) if up]

    # --- reading back ----------------------------------------------------------------------

    def stored(
        self, topic: str, *, brokers: Sequence[int | str] | None = None
    ) -> list[StoredMessage]:
        """Every message of ``topic`` on the given running brokers (default: all running),
        broker by broker, queue by queue, in queue-offset order."""
        targets = [self.broker(b) for b in brokers] if brokers is not None else self.live()
        out: list[StoredMessage] = []
        for b in targets:
            config = b.topics.get(topic)
            if config is None:
                continue
            for queue_id in range(max(config.read_queue_nums, config.write_queue_nums)):
                out += self.stored_in(b, topic, queue_id)
        return out

    @staticmethod
    def stored_in(broker: BrokerController, topic: str, queue_id: int) -> list[StoredMessage]:
        """Every message of one queue of one broker, in queue-offset order."""
        store = broker.store
        out: list[StoredMessage] = []
        offset = store.min_offset(topic, queue_id)
        end = store.max_offset(topic, queue_id)
        while offset < end:
            got = store.get(topic, queue_id, offset, max_count=256)
            batch = got.messages()
            if not batch:
                break
            out += batch
            offset = got.next_begin_offset
        return out


@asynccontextmanager
async def client_cluster(
    tmp_path: Path,
    brokers: int = 1,
    *,
    per_broker: Sequence[Mapping[str, Any]] = (),
    store: Mapping[str, Any] | None = None,
    **broker_changes: Any,
) -> AsyncIterator[ClientCluster]:
    """A name server and ``brokers`` brokers (``broker-a``, ``broker-b``, ...) on port 0.

    Args:
        tmp_path: Stores go to ``tmp_path / "broker-x"``.
        brokers: How many brokers.
        per_broker: BrokerConfig changes for broker i (``per_broker[i]``).
        store: StoreConfig changes for every broker, over small segment sizes.
        broker_changes: BrokerConfig changes for every broker.
    """
    namesrv = NameServer(NamesrvConfig(listen_port=0, kv_config_path=None))
    await namesrv.start()
    cluster = ClientCluster(namesrv, [], [])
    try:
        for i in range(brokers):
            name = f"broker-{string.ascii_lowercase[i]}"
            store_config = StoreConfig(
                store_path_root_dir=str(tmp_path / name), **{**SMALL_STORE, **(store or {})}
            )
            config = BrokerConfig(
                broker_name=name,
                listen_port=0,
                namesrv_addr=namesrv.address,
                store=store_config,
            )
            changes = {**broker_changes, **(per_broker[i] if i < len(per_broker) else {})}
            broker = BrokerController(dataclasses.replace(config, **changes))
            await broker.start()
            cluster.brokers.append(broker)
            cluster.running.append(True)
        yield cluster
    finally:
        for i in reversed(range(len(cluster.brokers))):
            await cluster.stop_broker(i)
        await namesrv.stop()
