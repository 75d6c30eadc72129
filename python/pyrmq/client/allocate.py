"""Queue allocation strategies: which of a topic's queues each consumer of a group takes.

Every consumer runs the same strategy over the same sorted inputs, so the shares are disjoint
and cover every queue. Pass any callable with :data:`AllocateStrategy`'s signature to use
another strategy.

>>> mqs = list(range(8))
>>> [allocate_averagely("g", c, mqs, ["a", "b", "c"]) for c in "abc"]
[[0, 1, 2], [3, 4, 5], [6, 7]]
>>> [allocate_averagely_by_circle("g", c, mqs, ["a", "b", "c"]) for c in "abc"]
[[0, 3, 6], [1, 4, 7], [2, 5]]
>>> shares = [AllocateConsistentHash()("g", c, mqs, ["a", "b", "c"]) for c in "abc"]
>>> sorted(q for s in shares for q in s) == mqs
True
"""

import bisect
import hashlib
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = [
    "AllocateConsistentHash",
    "AllocateStrategy",
    "allocate_averagely",
    "allocate_averagely_by_circle",
]

Q = TypeVar("Q")

AllocateStrategy = Callable[[str, str, Sequence[Q], Sequence[str]], list[Q]]
"""``(group, this client id, all queues sorted, all client ids sorted) -> this client's queues``."""


def allocate_averagely(
    group: str, client_id: str, mqs: Sequence[Q], cids: Sequence[str]
) -> list[Q]:
    """Contiguous blocks; the first ``len(mqs) % len(cids)`` consumers take one extra."""
    if client_id not in cids or not mqs:
        return []
    index, n, m = cids.index(client_id), len(cids), len(mqs)
    mod = m % n
    if m <= n:
        size = 1
    elif mod > 0 and index < mod:
        size = m // n + 1
    else:
        size = m // n
    start = index * size if mod > 0 and index < mod else index * size + mod
    return list(mqs[start : start + min(size, m - start)]) if start < m else []


def allocate_averagely_by_circle(
    group: str, client_id: str, mqs: Sequence[Q], cids: Sequence[str]
) -> list[Q]:
    """Round robin: queue ``i`` goes to consumer ``i % len(cids)``."""
    if client_id not in cids:
        return []
    index = cids.index(client_id)
    return list(mqs[index :: len(cids)])


class AllocateConsistentHash:
    """A hash ring with ``virtual_nodes`` points per consumer: a consumer joining or leaving
    moves only the queues next to its points. The ring is RocketMQ's (a point per
    ``{client id}-{i}``, a queue keyed by Java's ``MessageQueue.toString()``, the first four
    bytes of an MD5, a later point replacing an equal one), so that members of one group on
    pyrmq and on RocketMQ's Java client agree on who takes which queue."""

    def __init__(self, virtual_nodes: int = 10) -> None:
        self.virtual_nodes = virtual_nodes

    @staticmethod
    def _hash(key: str) -> int:
        return int.from_bytes(hashlib.md5(key.encode(), usedforsecurity=False).digest()[:4])

    @staticmethod
    def _key(mq: object) -> str:
        try:
            topic, broker, queue_id = mq.topic, mq.broker_name, mq.queue_id  # type: ignore[attr-defined]
        except AttributeError:
            # Not a message queue: its own text.
            return str(mq)
        return f"MessageQueue [topic={topic}, brokerName={broker}, queueId={queue_id}]"

    def __call__(
        self, group: str, client_id: str, mqs: Sequence[Q], cids: Sequence[str]
    ) -> list[Q]:
        if client_id not in cids:
            return []
        ring: dict[int, str] = {}
        for cid in cids:
            for i in range(self.virtual_nodes):
                ring[self._hash(f"{cid}-{i}")] = cid
        points = sorted(ring)
        out = []
        for mq in mqs:
            at = bisect.bisect_left(points, self._hash(self._key(mq))) % len(points)
            if ring[points[at]] == client_id:
                out.append(mq)
        return out
