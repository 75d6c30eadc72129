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

import collections
import dataclasses
import itertools
import math
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet

from sortedcontainers import SortedList

__all__ = ["InFlight", "PopQueue", "Receipt", "new_generations"]

HANDLE_PREFIX = "p1"
# Keys a due scan takes from the time index at once.
_SLICE = 64
# Offsets are grouped in chunks of 2**CHUNK_BITS for saving: only changed chunks are encoded.
CHUNK_BITS = 10


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
    the DLQ, or read past because it did not match the filter. A receive, an ack and a nack
    cost O(log n) in the messages in flight, not O(n): a group may hold a million.
    """

    __slots__ = ("_by_time", "_changed", "_order", "_renewing", "cursor", "inflight")

    def __init__(self, start: int) -> None:
        self.cursor = start
        # Read it; change it through the methods, which keep the indexes below.
        self.inflight: dict[int, InFlight] = {}
        # The offsets in flight in increasing order, with finished ones dropped lazily from
        # the front: a dict's first key is no good, as reaching it skips every slot deleted
        # before it.
        self._order: collections.deque[int] = collections.deque()
        # (visible_at, offset) of every message in flight.
        self._by_time: SortedList = SortedList()
        # Client id -> offsets it keeps invisible while connected (auto-renewed).
        self._renewing: dict[str, set[int]] = {}
        # Chunks (offset >> CHUNK_BITS) changed since take_changed.
        self._changed: set[int] = set()

    @property
    def committed(self) -> int:
        """The group's consumer offset: every message below it is done."""
        order, inflight = self._order, self.inflight
        while order and order[0] not in inflight:
            order.popleft()
        return order[0] if order else self.cursor

    def add(self, entry: InFlight) -> None:
        """Takes up ``entry``; offsets come in increasing order."""
        if entry.offset in self.inflight:
            # Only from a damaged state file: the last one stands.
            self.finish(entry.offset)
        self.inflight[entry.offset] = entry
        self._changed.add(entry.offset >> CHUNK_BITS)
        self._order.append(entry.offset)
        self._by_time.add((entry.visible_at, entry.offset))
        if entry.auto_renew:
            self._renewing.setdefault(entry.client_id, set()).add(entry.offset)

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
        self.add(entry)
        return entry

    def moved_cursor(self, offset: int) -> None:
        """The next read starts at ``offset``; what was read past without a delivery is done."""
        self.cursor = max(self.cursor, offset)

    def reset(self, cursor: int) -> None:
        """Forgets what is in flight and reads from ``cursor``: the topic was made again."""
        self._changed.update(offset >> CHUNK_BITS for offset in self.inflight)
        self.inflight.clear()
        self._order.clear()
        self._by_time.clear()
        self._renewing.clear()
        self.cursor = cursor

    def due(self, now: float, alive: AbstractSet[str]) -> Iterator[InFlight]:
        """In-flight messages that may be delivered again: auto-renewed ones whose client is
        gone (not in ``alive``) first, then the others by when they came due (an auto-renewed
        one when its client has held it too long). Each comes once; the caller may deliver it
        again or finish it before taking the next."""
        inflight = self.inflight
        seen: set[int] = set()
        for client_id in [c for c in self._renewing if c not in alive]:
            for offset in list(self._renewing.get(client_id, ())):
                entry = inflight.get(offset)
                # Delivered again to another departed client ahead in this pass: taken.
                if offset in seen:
                    continue
                if entry is not None and entry.auto_renew and entry.client_id == client_id:
                    seen.add(offset)
                    yield entry
        # In slices, as each one taken may move in the list.
        after: tuple[float, int] | None = None
        while True:
            keys = list(
                itertools.islice(
                    self._by_time.irange(after, (now, math.inf), inclusive=(False, True)), _SLICE
                )
            )
            if not keys:
                return
            for visible_at, offset in keys:
                entry = inflight.get(offset)
                if entry is not None and entry.visible_at == visible_at and offset not in seen:
                    seen.add(offset)
                    yield entry
            after = keys[-1]

    def next_visible_at(self, after: float) -> float | None:
        """When the earliest in-flight message still invisible at ``after`` becomes visible."""
        at = self._by_time.bisect_right((after, math.inf))
        return self._by_time[at][0] if at < len(self._by_time) else None

    def batch_visible_at(self) -> float | None:
        """When every in-flight message has become visible: an orderly group's batch comes
        back whole."""
        return self._by_time[-1][0] if self._by_time else None

    def redelivered(
        self,
        entry: InFlight,
        generation: int,
        visible_at: float,
        client_id: str,
        *,
        auto_renew: bool,
        count: bool = True,
    ) -> None:
        """``entry`` delivered again, to ``client_id``. ``count=False``: the same delivery
        sent again, which is no new attempt."""
        if count:
            if not entry.returned:
                entry.attempt += 1
            entry.returned = False
        entry.generation = generation
        self._move(entry, visible_at, client_id, auto_renew)

    def hidden(self, entry: InFlight, generation: int, visible_at: float) -> None:
        """``entry`` nacked: it comes back at ``visible_at``, under a new handle."""
        entry.generation = generation
        self._move(entry, visible_at, entry.client_id, False)

    def given_back(self, entry: InFlight, now: float) -> None:
        """``entry`` never reached its client: visible again now, and its next delivery is
        no new attempt."""
        entry.returned = True
        self._move(entry, now, entry.client_id, False)

    def current(self, receipt: Receipt, now: float) -> InFlight | None:
        """The in-flight message ``receipt`` names, if the handle is still its latest and has
        not run out."""
        entry = self.inflight.get(receipt.offset)
        if entry is None or entry.generation != receipt.generation or entry.visible_at <= now:
            return None
        return entry

    def latest(self, receipt: Receipt) -> InFlight | None:
        """The in-flight message ``receipt`` names, if the handle is still its latest, run out
        or not: one not delivered again since may still be acked (as RocketMQ takes an ack
        until its revive service has put the message back)."""
        entry = self.inflight.get(receipt.offset)
        if entry is None or entry.generation != receipt.generation:
            return None
        return entry

    def finish(self, offset: int) -> None:
        """Acked or forwarded to the DLQ: the message is done."""
        entry = self.inflight.pop(offset, None)
        if entry is None:
            return
        self._changed.add(offset >> CHUNK_BITS)
        self._by_time.remove((entry.visible_at, offset))
        if entry.auto_renew:
            self._unrenew(entry)

    def release(self, client_id: str, visible_at: float, *, returned: bool = False) -> int:
        """Makes the auto-renewed messages of a departed client visible again by
        ``visible_at``; returns how many. Others keep the invisibility their receive asked
        for: any client may still ack them with their handles. ``returned``: the client
        shut down and gave them back, so their next delivery is no new attempt (a client
        that crashed may have crashed on one of them: that delivery counts)."""
        offsets = self._renewing.pop(client_id, set())
        for offset in offsets:
            entry = self.inflight[offset]
            entry.returned = entry.returned or returned
            entry.auto_renew = False
            self._move(entry, min(entry.visible_at, visible_at), client_id, False)
        return len(offsets)

    def take_changed(self) -> set[int]:
        """The chunks whose entries changed since the last call."""
        changed, self._changed = self._changed, set()
        return changed

    def in_chunk(self, chunk: int) -> list[InFlight]:
        """The entries of a chunk, by offset."""
        first = chunk << CHUNK_BITS
        get = self.inflight.get
        entries = (get(offset) for offset in range(first, first + (1 << CHUNK_BITS)))
        return [e for e in entries if e is not None]

    def _move(self, entry: InFlight, visible_at: float, client_id: str, auto_renew: bool) -> None:
        self._changed.add(entry.offset >> CHUNK_BITS)
        if entry.auto_renew:
            self._unrenew(entry)
        if visible_at != entry.visible_at:
            self._by_time.remove((entry.visible_at, entry.offset))
            self._by_time.add((visible_at, entry.offset))
            entry.visible_at = visible_at
        entry.client_id = client_id
        entry.auto_renew = auto_renew
        if auto_renew:
            self._renewing.setdefault(client_id, set()).add(entry.offset)

    def _unrenew(self, entry: InFlight) -> None:
        held = self._renewing.get(entry.client_id)
        if held is not None:
            held.discard(entry.offset)
            if not held:
                del self._renewing[entry.client_id]
