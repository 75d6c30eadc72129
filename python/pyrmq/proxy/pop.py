"""What a gRPC consumer group has received and not yet acknowledged, per queue.

RocketMQ 5 consumes by "pop": a receive hands out messages and makes them invisible to the rest
of the group for a while; an ack ends a message, a nack (ChangeInvisibleDuration) sets when it
comes back, and a message whose invisibility runs out is delivered again with its attempt
counted. pyrmq keeps that state per (group, topic, queue) and redelivers in place, without
RocketMQ's revive topic; :mod:`pyrmq.proxy.pop_state` keeps it across restarts. The group's
consumer offset, shared with 4.x consumers, moves once every message below it is acked (or was
filtered out), so even a broker that lost that state redelivers what was in flight, never skips
it.

Each delivery gets a receipt handle naming the queue, the offset and a generation. A handle
from an earlier delivery or an earlier nack names a generation that is no longer current, and
is refused.
"""

import dataclasses
import itertools
import time
from collections.abc import Iterator

__all__ = ["InFlight", "PopQueue", "Receipt", "new_generations"]

HANDLE_PREFIX = "p1"


def new_generations(after: int = 0) -> Iterator[int]:
    """Generation numbers for handles: from the clock, so that they grow from one broker run
    to the next, and past ``after`` (the largest a restored state holds)."""
    return itertools.count(max(time.time_ns() // 1000, after + 1))


@dataclasses.dataclass(frozen=True, slots=True)
class Receipt:
    queue_id: int
    offset: int
    generation: int

    def encode(self) -> str:
        return f"{HANDLE_PREFIX}.{self.queue_id}.{self.offset}.{self.generation}"

    @classmethod
    def parse(cls, handle: str) -> "Receipt | None":
        parts = handle.split(".")
        if len(parts) != 4 or parts[0] != HANDLE_PREFIX:
            return None
        try:
            queue_id, offset, generation = (int(p) for p in parts[1:])
        except ValueError:
            return None
        if queue_id < 0 or offset < 0:
            return None
        return cls(queue_id, offset, generation)


@dataclasses.dataclass(slots=True)
class InFlight:
    """A delivered message that is not acked yet."""

    offset: int
    # Deliveries so far by this broker run (1 after the first); the message's stored reconsume
    # times come on top.
    attempt: int
    generation: int
    # time.monotonic() at which the message may be delivered again; for an auto-renewed one,
    # the end of the longest time a client may hold it.
    visible_at: float
    client_id: str
    # Kept invisible while its client is connected (push consumers), until visible_at at most.
    auto_renew: bool
    # Given back unconsumed (its client shut down, or never got it): the next delivery does
    # not count as another attempt.
    returned: bool = False
    # Where the message lies in the CommitLog: a queue offset read again that holds another
    # message (its topic was deleted and made again) is not this one. -1: not known.
    phy_offset: int = -1


class PopQueue:
    """One queue of one topic as one group consumes it.

    Every offset in ``[committed, cursor)`` that is not in flight is done: acked, forwarded to
    the DLQ, or read past because it did not match the filter.
    """

    __slots__ = ("cursor", "inflight")

    def __init__(self, start: int) -> None:
        self.cursor = start
        # Offsets are added in increasing order (the cursor only moves forward) and a
        # redelivery updates its entry in place, so the first key is the smallest.
        self.inflight: dict[int, InFlight] = {}

    @property
    def committed(self) -> int:
        """The group's consumer offset: every message below it is done."""
        for offset in self.inflight:
            return offset
        return self.cursor

    def delivered(
        self,
        offset: int,
        generation: int,
        visible_at: float,
        client_id: str,
        *,
        auto_renew: bool,
        phy_offset: int = -1,
    ) -> InFlight:
        """Records a first delivery of ``offset``, read at the cursor."""
        entry = InFlight(
            offset, 1, generation, visible_at, client_id, auto_renew, phy_offset=phy_offset
        )
        self.inflight[offset] = entry
        return entry

    def moved_cursor(self, offset: int) -> None:
        """The next read starts at ``offset``; what was read past without a delivery is done."""
        self.cursor = max(self.cursor, offset)

    def due(self, now: float, alive: set[str]) -> list[InFlight]:
        """In-flight messages that may be delivered again, oldest first. An auto-renewed message
        is due once its client is gone (not in ``alive``) or has held it too long."""
        return [
            entry
            for entry in self.inflight.values()
            if entry.visible_at <= now or (entry.auto_renew and entry.client_id not in alive)
        ]

    def next_visible_at(self, after: float) -> float | None:
        """When the earliest in-flight message still invisible at ``after`` becomes visible."""
        times = [e.visible_at for e in self.inflight.values() if e.visible_at > after]
        return min(times) if times else None

    def batch_visible_at(self) -> float | None:
        """When every in-flight message has become visible: an orderly group's batch comes
        back whole."""
        times = [e.visible_at for e in self.inflight.values()]
        return max(times) if times else None

    @staticmethod
    def redelivered(
        entry: InFlight,
        generation: int,
        visible_at: float,
        client_id: str,
        *,
        auto_renew: bool,
    ) -> None:
        if not entry.returned:
            entry.attempt += 1
        entry.returned = False
        entry.generation = generation
        entry.visible_at = visible_at
        entry.client_id = client_id
        entry.auto_renew = auto_renew

    def current(self, receipt: Receipt, now: float) -> InFlight | None:
        """The in-flight message ``receipt`` names, if the handle is still its latest and has
        not run out."""
        entry = self.inflight.get(receipt.offset)
        if entry is None or entry.generation != receipt.generation or entry.visible_at <= now:
            return None
        return entry

    def finish(self, offset: int) -> None:
        """Acked or forwarded to the DLQ: the message is done."""
        self.inflight.pop(offset, None)

    def release(self, client_id: str, visible_at: float, *, returned: bool = False) -> int:
        """Makes the auto-renewed messages of a departed client visible again by
        ``visible_at``; returns how many. Others keep the invisibility their receive asked
        for: any client may still ack them with their handles. ``returned``: the client
        shut down and gave them back, so their next delivery is no new attempt (a client
        that crashed may have crashed on one of them: that delivery counts)."""
        count = 0
        for entry in self.inflight.values():
            if entry.auto_renew and entry.client_id == client_id:
                entry.auto_renew = False
                entry.visible_at = min(entry.visible_at, visible_at)
                entry.returned = entry.returned or returned
                count += 1
        return count
