"""Which client of a clustering push group may pull each queue: the hand-over of a queue at a
rebalance without messages consumed twice (DeFiBus's access lock).

Duplicates at a rebalance come from a queue that moves while its last owner still has messages
it was delivered and has not acked: the next owner starts at the committed offset and gets them
again. So each queue a group pulls has an owner here, with the offset after the last message
it was answered (``delivered``). Another client's pull takes the queue only when the owner is
caught up (the group's committed offset has reached ``delivered``), has released it, is gone,
or has not pulled or committed it for ``lockQueueTimeout``; until then it is refused. Where a
client holds the queue's orderly lock, only that client may take it. A pull that takes a queue
starts at the committed offset if that is further on than where it asked to start, since it
read the offset before the last owner's final commit; for the same reason its commits below
that offset are ignored, and a client that does not own the queue only moves it forward.

DeFiBus also waits for the delivered offset to stay unchanged over three refused pulls. Here a
grant and the owner's next answer are ordered on the broker's event loop, so an owner caught up
at the grant cannot be delivered more afterwards: its next pull is refused.

In memory, as in DeFiBus: after a restart the first client to pull a queue owns it.
"""

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import TypeAlias

__all__ = ["Access", "AccessKey", "QueueAccessTable"]

AccessKey: TypeAlias = tuple[str, str, int]
"""(group, topic, queue id)"""


class Access(enum.Enum):
    OWNER = "owner"
    # The asking client has just become the owner.
    ACQUIRED = "acquired"
    REFUSED = "refused"


@dataclasses.dataclass(slots=True)
class _Entry:
    client_id: str
    # Monotonic ms of the owner's last pull or answer.
    last_access_ms: int
    # The offset after the last message answered to the owner; -1 before any.
    delivered: int = -1
    # A held pull of the owner counts as access until it is answered or its deadline.
    held_until_ms: int = 0
    # The group's committed offset when the owner took the queue: its commits below it come
    # from an offset it read before the last owner's final commit.
    floor: int = -1


class QueueAccessTable:
    def __init__(
        self, timeout_ms: int, on_displaced: Callable[[AccessKey, str], None] | None = None
    ) -> None:
        self.timeout_ms = timeout_ms
        # Called with the key and the owner a client has just taken it from.
        self.on_displaced = on_displaced
        self._entries: dict[AccessKey, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def owner(self, key: AccessKey) -> str | None:
        entry = self._entries.get(key)
        return None if entry is None else entry.client_id

    def access(
        self,
        key: AccessKey,
        client_id: str,
        now_ms: int,
        committed: Callable[[AccessKey], int | None],
        lock_holder: Callable[[AccessKey], str | None],
    ) -> Access:
        """Whether ``client_id`` may pull ``key`` now, taking the queue when it may. Asked
        only when another client owns it or nobody does: ``committed``, the group's committed
        offset of the queue, and ``lock_holder``, the client holding the queue's orderly lock,
        whose word is final (only the holder may take a locked queue, whenever it asks)."""
        entry = self._entries.get(key)
        if entry is not None and entry.client_id == client_id:
            entry.last_access_ms = now_ms
            return Access.OWNER
        holder = lock_holder(key)
        if holder is not None and holder != client_id:
            return Access.REFUSED
        if entry is not None:
            if holder is None and not self._free(entry, committed(key), now_ms):
                return Access.REFUSED
            if self.on_displaced is not None:
                self.on_displaced(key, entry.client_id)
        self._entries[key] = _Entry(client_id, now_ms)
        return Access.ACQUIRED

    def _free(self, entry: _Entry, committed: int | None, now_ms: int) -> bool:
        caught_up = entry.delivered < 0 or (committed is not None and committed >= entry.delivered)
        idle = now_ms > entry.held_until_ms and now_ms - entry.last_access_ms > self.timeout_ms
        return caught_up or idle

    def set_floor(self, key: AccessKey, client_id: str, committed: int) -> None:
        entry = self._entries.get(key)
        if entry is not None and entry.client_id == client_id:
            entry.floor = committed

    def floor(self, key: AccessKey, client_id: str) -> int | None:
        """The lowest offset the owner ``client_id`` may commit; None if it does not own
        ``key``."""
        entry = self._entries.get(key)
        if entry is None or entry.client_id != client_id:
            return None
        return entry.floor

    def clear_floors(self, group: str, topic: str) -> None:
        """The group's offsets on ``topic`` were reset: its owners follow the reset."""
        for key, entry in self._entries.items():
            if key[0] == group and key[1] == topic:
                entry.floor = -1

    def touch(self, key: AccessKey, client_id: str, now_ms: int) -> bool:
        """Counts a sign of life from ``client_id`` as access if it owns ``key``; whether
        it does."""
        entry = self._entries.get(key)
        if entry is None or entry.client_id != client_id:
            return False
        entry.last_access_ms = now_ms
        return True

    def answered(self, key: AccessKey, client_id: str, delivered: int | None, now_ms: int) -> None:
        """Records an answer to the owner's pull: with messages, ``delivered`` is the offset
        after the last of them (what the owner commits once it has consumed them); None for
        an answer without any."""
        entry = self._entries.get(key)
        if entry is not None and entry.client_id == client_id:
            if delivered is not None:
                entry.delivered = delivered
            entry.last_access_ms = now_ms
            entry.held_until_ms = 0

    def held(self, key: AccessKey, client_id: str, until_ms: int) -> None:
        """The owner's pull of ``key`` waits at the broker until ``until_ms`` at most."""
        entry = self._entries.get(key)
        if entry is not None and entry.client_id == client_id:
            entry.held_until_ms = until_ms

    def release(self, keys: Iterable[AccessKey], client_id: str) -> list[AccessKey]:
        """Frees the keys ``client_id`` owns; returns them."""
        released = []
        for key in keys:
            entry = self._entries.get(key)
            if entry is not None and entry.client_id == client_id:
                del self._entries[key]
                released.append(key)
        return released

    def keys_of(self, group: str, client_id: str) -> list[AccessKey]:
        """The queues of ``group`` that ``client_id`` owns."""
        return [k for k, e in self._entries.items() if k[0] == group and e.client_id == client_id]

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._entries if k[1] == topic]:
            del self._entries[key]

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._entries if k[0] == group]:
            del self._entries[key]
