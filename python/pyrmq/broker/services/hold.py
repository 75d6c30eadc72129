"""Long polling: pulls that found nothing wait here until a message arrives or time runs out.

Held pulls are keyed by (topic, queue id). The store's arrival events (drained from its eventfd
in one call per wakeup) wake the pulls of a queue whose new messages pass their tag filter, and
each woken pull is answered by running it again. A timer answers a pull whose suspend time ran
out, and a periodic check (5 s; 1 s in short-polling mode) compares each queue's max offset with
its held pulls in case an event was missed.

A message stored while a pull is being parked must still wake it (apache/rocketmq#7358): the
pull re-checks the queue's max offset right after parking and answers at once if it moved.
"""

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from pyrmq.store import MessageStore

__all__ = ["HeldPull", "PullHoldService"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False, slots=True)
class HeldPull:
    topic: str
    queue_id: int
    queue_offset: int
    tags_codes: tuple[int, ...] | None
    deadline: float
    # Runs the pull again (never suspending) and sends its answer.
    answer: Callable[[], Coroutine[Any, Any, None]]
    timer: asyncio.TimerHandle | None = None
    done: bool = False


class PullHoldService:
    def __init__(self, store: MessageStore, *, check_interval_s: float) -> None:
        self.store = store
        self.check_interval_s = check_interval_s
        self._held: dict[tuple[str, int], list[HeldPull]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.woken_by_arrival = 0
        self.woken_by_check = 0
        self.timed_out = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.store.wakeup_fd(), self._on_arrivals)
        self._checker = self._loop.create_task(self._check_periodically())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.store.wakeup_fd())
        if self._checker is not None:
            self._checker.cancel()
        for pulls in self._held.values():
            for p in pulls:
                if p.timer is not None:
                    p.timer.cancel()
        self._held.clear()

    def hold(self, pull: HeldPull) -> None:
        assert self._loop is not None, "the hold service is not started"
        key = (pull.topic, pull.queue_id)
        self._held.setdefault(key, []).append(pull)
        pull.timer = self._loop.call_at(pull.deadline, self._expire, pull)
        # Close the race with an arrival dispatched before this pull was parked.
        if self.store.max_offset(pull.topic, pull.queue_id) > pull.queue_offset:
            self._wake(key, lambda p: True, by_arrival=True)

    def held_count(self) -> int:
        return sum(len(v) for v in self._held.values())

    def _on_arrivals(self) -> None:
        for topic, queue_id, max_offset, tags in self.store.drain_arrivals():
            codes = set(tags) if tags is not None else None

            def matches(
                p: HeldPull, max_offset: int = max_offset, codes: set[int] | None = codes
            ) -> bool:
                if max_offset <= p.queue_offset:
                    return False
                return p.tags_codes is None or codes is None or not codes.isdisjoint(p.tags_codes)

            self._wake((topic, queue_id), matches, by_arrival=True)

    def _wake(
        self, key: tuple[str, int], predicate: Callable[[HeldPull], bool], *, by_arrival: bool
    ) -> None:
        pulls = self._held.get(key)
        if not pulls:
            return
        keep = []
        for p in pulls:
            if p.done or not predicate(p):
                if not p.done:
                    keep.append(p)
                continue
            if by_arrival:
                self.woken_by_arrival += 1
            else:
                self.woken_by_check += 1
            self._answer(p)
        if keep:
            self._held[key] = keep
        else:
            del self._held[key]

    def _answer(self, p: HeldPull) -> None:
        if p.done:
            return
        p.done = True
        if p.timer is not None:
            p.timer.cancel()
        assert self._loop is not None
        task = self._loop.create_task(p.answer())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _expire(self, p: HeldPull) -> None:
        if p.done:
            return
        self.timed_out += 1
        pulls = self._held.get((p.topic, p.queue_id))
        if pulls is not None and p in pulls:
            pulls.remove(p)
            if not pulls:
                del self._held[(p.topic, p.queue_id)]
        self._answer(p)

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                for key in list(self._held):
                    max_offset = self.store.max_offset(*key)

                    def moved(p: HeldPull, max_offset: int = max_offset) -> bool:
                        return max_offset > p.queue_offset

                    self._wake(key, moved, by_arrival=False)
            except Exception:
                log.exception("held-pull check failed")


def monotonic_deadline(timeout_ms: int) -> float:
    return time.monotonic() + timeout_ms / 1000
