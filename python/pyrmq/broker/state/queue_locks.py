"""The queue locks of orderly consumers (LOCK_BATCH_MQ), which survive a broker restart.

RocketMQ keeps them in memory only. A restarted broker then grants every queue to the first
client that asks, often one that counted the group without a member whose heartbeat has not
arrived yet, while that member still trusts its lock for up to 30 s and consumes the same
queue: two consumers at once, out of order. Holders are therefore written to disk whenever
one changes (never on a mere renewal), before the answer goes out, and a loaded lock counts
as renewed at load time: its holder may have renewed just before the stop.
"""

import logging
import threading
import time
from pathlib import Path
from typing import Any, TypeAlias

from pyrmq.broker.state.json_file import load_json, object_in, store_json
from pyrmq.errors import ConfigError

__all__ = ["LOCK_MAX_LIVE_MS", "LockKey", "QueueLockTable"]

log = logging.getLogger(__name__)

LOCK_MAX_LIVE_MS = 60_000
"""rocketmq.broker.rebalance.lockMaxLiveTime: a lock not renewed this long is free."""

LockKey: TypeAlias = tuple[str, str, str, int]
"""(group, topic, broker name, queue id)"""


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class QueueLockTable:
    """Lock holders by queue, with their last renewal (monotonic ms)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._locks: dict[LockKey, tuple[str, int]] = {}
        self._version = 0
        self._written = 0
        self._writing = threading.Lock()
        try:
            holders = load_json(path, _decode) or {}
        except ConfigError as e:
            # As a RocketMQ broker, which keeps no locks across a restart.
            log.error("queue locks not restored: %s", e)
            holders = {}
        now = _now_ms()
        self._locks = {key: (client_id, now) for key, client_id in holders.items()}

    def lock(self, client_id: str, keys: list[LockKey]) -> tuple[list[LockKey], bool]:
        """Grants each of ``keys`` that is free, already ``client_id``'s, or expired; returns
        the granted keys and whether a holder changed (then :meth:`save` before answering)."""
        now = _now_ms()
        granted = []
        changed = False
        for key in keys:
            held = self._locks.get(key)
            if held is None or held[0] == client_id or now - held[1] > LOCK_MAX_LIVE_MS:
                changed = changed or held is None or held[0] != client_id
                self._locks[key] = (client_id, now)
                granted.append(key)
        if changed:
            self._version += 1
        return granted, changed

    def holder(self, key: LockKey) -> str | None:
        """The client holding the unexpired lock of ``key``."""
        held = self._locks.get(key)
        if held is None or _now_ms() - held[1] > LOCK_MAX_LIVE_MS:
            return None
        return held[0]

    def holds_any(self, group: str) -> bool:
        """Whether ``group`` holds an unexpired lock (RocketMQ's ``!isLockAllExpired``): it
        consumes orderly."""
        now = _now_ms()
        return any(
            key[0] == group and now - renewed <= LOCK_MAX_LIVE_MS
            for key, (_, renewed) in self._locks.items()
        )

    def unlock(self, client_id: str, keys: list[LockKey]) -> bool:
        """Releases the keys ``client_id`` holds; whether any was released."""
        released = False
        for key in keys:
            held = self._locks.get(key)
            if held is not None and held[0] == client_id:
                del self._locks[key]
                released = True
        if released:
            self._version += 1
        return released

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        """The table as its file holds it, with the version it shows."""
        now = _now_ms()
        locks = [
            {"group": g, "topic": t, "brokerName": b, "queueId": q, "clientId": client}
            for (g, t, b, q), (client, renewed) in sorted(self._locks.items())
            if now - renewed <= LOCK_MAX_LIVE_MS
        ]
        return self._version, {"locks": locks}

    def save(self, snapshot: tuple[int, dict[str, Any]]) -> None:
        """Writes ``snapshot`` unless a later one is on disk already (any thread)."""
        version, value = snapshot
        with self._writing:
            if version <= self._written:
                return
            store_json(self.path, value)
            self._written = version


def _decode(value: Any) -> dict[LockKey, str]:
    """queueLocks.json's holders by queue."""
    entries = object_in(value, "queueLocks.json").get("locks") or []
    if not isinstance(entries, list):
        raise TypeError("locks is not a list")
    holders = {}
    for entry in entries:
        entry = object_in(entry, "a lock")
        key = (
            str(entry["group"]),
            str(entry["topic"]),
            str(entry["brokerName"]),
            int(entry["queueId"]),
        )
        holders[key] = str(entry["clientId"])
    return holders
