"""Long polling: pulls that found nothing wait until a message arrives or time runs out.

The waiting itself is in the store (Rust, ``pyrmq_store::hold``): a held pull is registered with
its queue, offset and tag codes, and dispatch, under the lock that publishes new messages, moves
the pulls a message matches to a ready list and makes an eventfd readable. This service watches
that fd with ``loop.add_reader``, takes every ready pull in one call, and answers each by
running it again, inline (a pull answer never waits). A timer answers a pull whose suspend time
ran out, and a periodic check (5 s; 1 s in short-polling mode) asks the store to wake any pull
whose queue moved past it.

The broker also calls :meth:`PullHoldService.answer_ready` right after each append in the event
loop, so the pulls a send woke are answered before that send's own response is written, without
a round through the eventfd and the loop's poll. On a busy host this matters: writing the send
response wakes the producer, which may take the CPU from the broker before it gets to the pull.

A message stored while a pull is being parked still wakes it (apache/rocketmq#7358): the store
reads the queue's max offset under its table lock after registering the pull.
"""

import asyncio
import dataclasses
import itertools
import logging
from collections.abc import Callable

from pyrmq.store import MessageStore

__all__ = ["HeldPull", "PullHoldService"]

log = logging.getLogger(__name__)

WAKE_ARRIVAL, WAKE_AT_PARK, WAKE_CHECK = 0, 1, 2


@dataclasses.dataclass(eq=False, slots=True)
class HeldPull:
    topic: str
    queue_id: int
    queue_offset: int
    # The subscription expression ("*" or "TagA || TagB").
    expression: str
    deadline: float
    # Runs the pull again (never suspending) and sends its answer; called in the event loop.
    answer: Callable[[], None]
    timer: asyncio.TimerHandle | None = None


class PullHoldService:
    def __init__(self, store: MessageStore, *, check_interval_s: float) -> None:
        self.store = store
        self.check_interval_s = check_interval_s
        self._pulls: dict[int, HeldPull] = {}
        self._ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._checker: asyncio.Task[None] | None = None
        self.woken_by_arrival = 0
        self.woken_by_check = 0
        self.timed_out = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.store.held_pulls_fd(), self._on_ready)
        self._checker = self._loop.create_task(self._check_periodically())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.store.held_pulls_fd())
        if self._checker is not None:
            self._checker.cancel()
        for pull_id, pull in list(self._pulls.items()):
            if pull.timer is not None:
                pull.timer.cancel()
            self.store.cancel_held_pull(pull_id, pull.topic, pull.queue_id)
        self._pulls.clear()

    def hold(self, pull: HeldPull) -> int:
        """Holds ``pull`` until a message for it arrives or its deadline; returns its id."""
        assert self._loop is not None, "the hold service is not started"
        pull_id = next(self._ids)
        self._pulls[pull_id] = pull
        pull.timer = self._loop.call_at(pull.deadline, self._expire, pull_id)
        self.store.hold_pull(pull_id, pull.topic, pull.queue_id, pull.queue_offset, pull.expression)
        return pull_id

    def cancel(self, pull_id: int) -> bool:
        """Drops a held pull without answering it; whether it was still held."""
        pull = self._pulls.pop(pull_id, None)
        if pull is None:
            return False
        if pull.timer is not None:
            pull.timer.cancel()
        self.store.cancel_held_pull(pull_id, pull.topic, pull.queue_id)
        return True

    def held_count(self) -> int:
        return len(self._pulls)

    def answer_ready(self) -> None:
        """Answers every pull the store has marked ready (after an append in this loop)."""
        if self._pulls:
            self._on_ready()

    def _on_ready(self) -> None:
        for pull_id, reason in self.store.drain_ready_pulls():
            pull = self._pulls.pop(pull_id, None)
            if pull is None:
                continue
            if reason == WAKE_CHECK:
                self.woken_by_check += 1
            else:
                self.woken_by_arrival += 1
            self._answer(pull)

    def _answer(self, pull: HeldPull) -> None:
        if pull.timer is not None:
            pull.timer.cancel()
        try:
            pull.answer()
        except Exception:
            log.exception("answering a held pull of %s:%d failed", pull.topic, pull.queue_id)

    def _expire(self, pull_id: int) -> None:
        # Only a pull still held in the store times out; a woken one is answered by _on_ready.
        pull = self._pulls.get(pull_id)
        if pull is not None and self.store.cancel_held_pull(pull_id, pull.topic, pull.queue_id):
            del self._pulls[pull_id]
            self.timed_out += 1
            self._answer(pull)

    async def _check_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_s)
            try:
                self.store.check_held_pulls()
            except Exception:
                log.exception("held-pull check failed")
