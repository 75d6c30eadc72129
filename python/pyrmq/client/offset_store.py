"""Consumer offsets on the client: kept per queue in memory, persisted to the broker
(clustering) or to a local file (broadcasting, where each consumer has its own progress)."""

import asyncio
import json
import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pyrmq.client.message import MessageQueue
from pyrmq.errors import PyrmqError

if TYPE_CHECKING:
    from pyrmq.client.instance import ClientInstance

__all__ = ["LocalFileOffsetStore", "OffsetStore", "RemoteBrokerOffsetStore"]

log = logging.getLogger(__name__)


class OffsetStore(Protocol):
    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None: ...
    def read(self, mq: MessageQueue) -> int | None: ...
    async def read_from_store(self, mq: MessageQueue) -> int | None: ...
    async def persist(self, mqs: list[MessageQueue]) -> None: ...
    def remove(self, mq: MessageQueue) -> None: ...
    def offsets_of(self, topic: str) -> dict[MessageQueue, int]: ...


class _MemoryTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        if offset < 0:
            return
        with self._lock:
            old = self.table.get(mq)
            if old is None or not increase_only or offset > old:
                self.table[mq] = offset

    def read(self, mq: MessageQueue) -> int | None:
        return self.table.get(mq)

    def remove(self, mq: MessageQueue) -> None:
        with self._lock:
            self.table.pop(mq, None)

    def offsets_of(self, topic: str) -> dict[MessageQueue, int]:
        """A copy of the offsets of ``topic``'s queues (of every queue when it is blank)."""
        with self._lock:
            return {mq: o for mq, o in self.table.items() if not topic or mq.topic == topic}


class RemoteBrokerOffsetStore(_MemoryTable):
    """Clustering: the group's offsets live on the queue's master broker."""

    def __init__(self, instance: "ClientInstance", group: str) -> None:
        super().__init__()
        self._instance = instance
        self._group = group

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        """The committed offset on the broker; None if the group has none for the queue.

        Raises :class:`~pyrmq.errors.PyrmqError` when the broker cannot be asked.
        """
        addr = await self._instance.offset_addr(mq.broker_name, mq.topic)
        offset = await self._instance.api.query_consumer_offset(addr, self._group, mq)
        if offset is not None:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mqs: list[MessageQueue]) -> None:
        for mq in mqs:
            offset = self.table.get(mq)
            if offset is None:
                continue
            try:
                addr = await self._instance.offset_addr(mq.broker_name, mq.topic)
                await self._instance.api.update_consumer_offset(addr, self._group, mq, offset)
            except PyrmqError as e:
                log.warning("cannot persist offset %d of %s for %s: %s", offset, mq, self._group, e)

    async def commit_all(self, mqs: list[MessageQueue]) -> None:
        """Persists the queues' offsets and waits for the brokers' answers (at shutdown, so
        that the consumers taking the queues over read them); failures are logged."""
        results = await asyncio.gather(*(self.commit_now(mq) for mq in mqs), return_exceptions=True)
        for mq, result in zip(mqs, results, strict=True):
            if isinstance(result, PyrmqError):
                log.warning("cannot commit the offset of %s for %s: %s", mq, self._group, result)
            elif isinstance(result, BaseException):
                raise result

    async def commit_now(self, mq: MessageQueue) -> None:
        """Persists one queue's offset and waits for the broker's answer."""
        offset = self.table.get(mq)
        if offset is not None:
            addr = await self._instance.offset_addr(mq.broker_name, mq.topic)
            await self._instance.api.update_consumer_offset(
                addr, self._group, mq, offset, oneway=False
            )


def default_offsets_dir() -> Path:
    return Path(os.environ.get("PYRMQ_OFFSETS_DIR", Path.home() / ".rocketmq_offsets"))


class LocalFileOffsetStore(_MemoryTable):
    """Broadcasting: offsets in ``<dir>/<client id>/<group>/offsets.json``, written atomically."""

    def __init__(self, directory: Path, client_id: str, group: str) -> None:
        super().__init__()
        safe_id = client_id.replace("/", "_").replace("@", "_")
        self.path = directory / safe_id / group / "offsets.json"
        self._loaded: dict[MessageQueue, int] = {}
        try:
            raw = json.loads(self.path.read_text())
            for entry in raw.get("offsetTable", []):
                mq = MessageQueue(entry["topic"], entry["brokerName"], int(entry["queueId"]))
                self._loaded[mq] = int(entry["offset"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, TypeError) as e:
            log.warning("ignoring unreadable offsets file %s: %s", self.path, e)

    async def read_from_store(self, mq: MessageQueue) -> int | None:
        offset = self._loaded.get(mq)
        if offset is not None:
            self.update(mq, offset, increase_only=False)
        return offset

    async def persist(self, mqs: list[MessageQueue]) -> None:
        """Writes every offset known, those of queues not held now included (a broker that
        is down for a while must not lose its queues' progress from the file)."""
        with self._lock:
            # Consume threads update the table while this runs: copy it under the lock.
            offsets = {**self._loaded, **self.table}
        entries = [{**mq.to_json(), "offset": offset} for mq, offset in sorted(offsets.items())]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offsetTable": entries}, indent=1))
        os.replace(tmp, self.path)
        self._loaded = offsets
