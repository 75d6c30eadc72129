"""Consumer offsets per (group, topic, queue), persisted as RocketMQ's consumerOffset.json."""

import json
import logging
import threading
from pathlib import Path
from typing import Any, NamedTuple

from pyrmq.broker.state.json_file import load_json, object_in, write_atomic

__all__ = ["OffsetTable", "Snapshot"]

log = logging.getLogger(__name__)


class Snapshot(NamedTuple):
    """The table's file contents, numbered in the order they were taken."""

    number: int
    data: bytes


class OffsetTable:
    """``topic@group -> queue id -> offset``, flushed periodically and at shutdown."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._table: dict[str, dict[int, int]] = load_json(path, _decode) or {}
        self._dirty = False
        self._taken = 0
        # Held while the file is written: the periodic writer's thread and a deletion's may
        # write at once, and the later snapshot must win.
        self._writing = threading.Lock()
        self._written = 0

    @staticmethod
    def _key(group: str, topic: str) -> str:
        return f"{topic}@{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        with self._lock:
            self._table.setdefault(self._key(group, topic), {})[queue_id] = offset
            self._dirty = True

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self._table.get(self._key(group, topic), {}).get(queue_id)

    def topics(self, group: str) -> list[str]:
        """The topics ``group`` has committed offsets on (RocketMQ's whichTopicByConsumer)."""
        suffix = f"@{group}"
        with self._lock:
            return sorted(k[: -len(suffix)] for k in self._table if k.endswith(suffix))

    def groups_on(self, topic: str) -> list[str]:
        """The groups with committed offsets on ``topic`` (RocketMQ's whichGroupByTopic)."""
        prefix = f"{topic}@"
        with self._lock:
            return sorted(k[len(prefix) :] for k in self._table if k.startswith(prefix))

    def on_topic(self, topic: str) -> dict[str, dict[int, int]]:
        """Each group's offsets on ``topic``, by group."""
        prefix = f"{topic}@"
        with self._lock:
            return {
                k[len(prefix) :]: dict(v) for k, v in self._table.items() if k.startswith(prefix)
            }

    def groups(self) -> list[str]:
        """The groups that have committed offsets on some topic."""
        with self._lock:
            return sorted({k.rpartition("@")[2] for k in self._table})

    def clone(self, src_group: str, dest_group: str, topic: str) -> bool:
        """``dest_group`` takes a copy of ``src_group``'s offsets on ``topic``, in place of its
        own (RocketMQ's cloneOffset); False, and nothing changed, when the source has none."""
        with self._lock:
            offsets = self._table.get(self._key(src_group, topic))
            if offsets is None:
                return False
            self._table[self._key(dest_group, topic)] = dict(offsets)
            self._dirty = True
            return True

    def merge_from_master(self, table: dict[str, dict[str, int]]) -> None:
        """A slave takes its master's offsets (GET_ALL_CONSUMER_OFFSET): each ``topic@group``
        the master has replaces the slave's; the others stay (commits made here while the
        master was away)."""
        parsed = {key: {int(q): int(o) for q, o in queues.items()} for key, queues in table.items()}
        with self._lock:
            for key, queues in parsed.items():
                if self._table.get(key) != queues:
                    self._table[key] = queues
                    self._dirty = True

    def to_json(self) -> dict[str, Any]:
        """The table as GET_ALL_CONSUMER_OFFSET answers it: the file's form."""
        with self._lock:
            return self._file_form()

    def _file_form(self) -> dict[str, Any]:
        """The file's JSON object; the caller holds the lock."""
        return {
            "offsetTable": {k: {str(q): o for q, o in v.items()} for k, v in self._table.items()}
        }

    def clean_group(self, group: str) -> None:
        """Forgets ``group``'s offsets on every topic (a group deleted with its offsets)."""
        with self._lock:
            for key in [k for k in self._table if k.partition("@")[2] == group]:
                del self._table[key]
                self._dirty = True

    def clean_topic(self, topic: str) -> None:
        """Forgets every group's offsets on ``topic`` (a deleted topic)."""
        prefix = f"{topic}@"
        with self._lock:
            for key in [k for k in self._table if k.startswith(prefix)]:
                del self._table[key]
                self._dirty = True

    def encode(self, *, force: bool = False) -> Snapshot | None:
        """The table as the file's JSON, or None when nothing changed since the last call.

        Compact, so that the C encoder does it (``indent`` falls back to the pure-Python one,
        about 4 times slower): the broker calls this in its event loop, and a thread doing it
        would hold the GIL that the loop waits for.
        """
        with self._lock:
            if not (self._dirty or force):
                return None
            snapshot = self._file_form()
            self._dirty = False
            self._taken += 1
            number = self._taken
        return Snapshot(number, json.dumps(snapshot, sort_keys=True).encode())

    def write(self, snapshot: Snapshot) -> None:
        """Writes what :meth:`encode` returned, unless a later snapshot is on disk already
        (file I/O only: fit for a worker thread). A failed write leaves the table marked
        changed, so the next save writes it."""
        with self._writing:
            if snapshot.number < self._written:
                return
            try:
                write_atomic(self.path, snapshot.data)
            except OSError:
                with self._lock:
                    self._dirty = True
                raise
            self._written = snapshot.number

    def persist(self, *, force: bool = False) -> None:
        snapshot = self.encode(force=force)
        if snapshot is not None:
            self.write(snapshot)


def _decode(value: Any) -> dict[str, dict[int, int]]:
    """consumerOffset.json's table: ``topic@group -> queue id -> offset``."""
    table = object_in(object_in(value, "the file").get("offsetTable") or {}, "offsetTable")
    return {
        str(key): {int(q): int(o) for q, o in object_in(queues, str(key)).items()}
        for key, queues in table.items()
    }
