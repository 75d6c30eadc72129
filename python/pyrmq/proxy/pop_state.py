"""What gRPC groups have in flight, kept across broker restarts (``config/popState.json``).

RocketMQ keeps a pop consumer's checkpoints and acks in its revive topic, so a restarted broker
neither redelivers what was acked nor forgets what is invisible. pyrmq writes each queue that
has messages in flight (cursor, and per message its attempts, handle generation, when it comes
visible, and its client) every few seconds while anything changed and at a clean stop. After a
restart the handles clients hold still work, acked messages above the group's offset stay done,
and invisible ones come back when they were due to, with their attempts counted. After a crash,
what changed in the last few seconds is lost the safe way: a message acked since the last write
is delivered once more.

Times are written as wall-clock milliseconds and read back onto the monotonic clock.
"""

import asyncio
import functools
import json
import logging
import time
from collections.abc import Generator, Mapping
from pathlib import Path

from pyrmq.broker.state.json_file import load_json, write_atomic
from pyrmq.errors import ConfigError
from pyrmq.proxy.pop import CHUNK_BITS, InFlight, PopQueue

__all__ = ["Encoder", "PopKey", "decode", "encode", "load", "write"]

log = logging.getLogger(__name__)

VERSION = 1
PopKey = tuple[str, str, int]
"""(group, topic, queue id)."""


def encode(queues: Mapping[PopKey, PopQueue]) -> bytes:
    """The queues with messages in flight, as the file holds them (the queues' changes stay
    for the broker's :class:`Encoder` to take)."""
    return Encoder(take_changes=False).encode(queues)


class Encoder:
    """Encodes the state again and again, each time only the chunks of offsets that changed
    since the last time (:meth:`PopQueue.take_changed`): a group may hold a million messages
    in flight, and this runs on the broker's loop."""

    def __init__(self, *, take_changes: bool = True) -> None:
        # Per queue: the queue object encoded, and its chunks' encoded entries.
        self._queues: dict[PopKey, tuple[PopQueue, dict[int, str]]] = {}
        # False: each encode is whole, and leaves the queues' changes alone.
        self._take = take_changes

    def encode(self, queues: Mapping[PopKey, PopQueue]) -> bytes:
        """The state now."""
        steps = self._steps(queues)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                state: bytes = done.value
                return state

    async def encode_in_slices(
        self, queues: Mapping[PopKey, PopQueue], entries_per_slice: int = 4096
    ) -> bytes:
        """The state, letting the loop run between slices of about ``entries_per_slice``
        entries encoded. Queues may change meanwhile: each chunk is as it was when encoded,
        and each queue's cursor as it was before its chunks were, so a message delivered
        meanwhile is read again after a restart rather than skipped."""
        steps = self._steps(queues)
        done = 0
        try:
            while True:
                try:
                    done += next(steps)
                except StopIteration as stop:
                    state: bytes = stop.value
                    return state
                if done >= entries_per_slice:
                    done = 0
                    await asyncio.sleep(0)
        finally:
            # Cancelled (the broker stopping): forgets what it took, before the last save.
            steps.close()

    def _steps(self, queues: Mapping[PopKey, PopQueue]) -> Generator[int, None, bytes]:
        """Yields the number of entries each chunk encoded took; returns the state. Stopped
        before the end, it forgets every chunk it kept: the changes it took from the queues
        and did not encode are lost to it, so the next encode is whole."""
        finished = False
        try:
            state = yield from self._encode(queues)
            finished = True
            return state
        finally:
            if not finished:
                self._queues.clear()

    def _encode(self, queues: Mapping[PopKey, PopQueue]) -> Generator[int, None, bytes]:
        if not self._take:
            self._queues.clear()
        # A chunk encoded before keeps the wall-clock times it was given then.
        now, now_ms = time.monotonic(), time.time_ns() // 1_000_000
        cached = self._queues
        for key in cached.keys() - queues.keys():
            del cached[key]
        items = []
        for key, queue in list(queues.items()):
            known = cached.get(key)
            cursor = queue.cursor
            changed = queue.take_changed() if self._take else set()
            if known is None or known[0] is not queue:
                chunks: dict[int, str] = {}
                cached[key] = (queue, chunks)
                changed = {offset >> CHUNK_BITS for offset in queue.inflight}
            else:
                chunks = known[1]
            for chunk in changed:
                entries = queue.in_chunk(chunk)
                if entries:
                    chunks[chunk] = _dumps([_entry(e, now, now_ms) for e in entries])[1:-1]
                else:
                    chunks.pop(chunk, None)
                yield len(entries)
            if not chunks:
                continue
            group, topic, queue_id = key
            head = {"group": group, "topic": topic, "queue": queue_id, "cursor": cursor}
            inflight = ",".join(chunks[c] for c in sorted(chunks))
            items.append(f'{_dumps(head)[:-1]},"inflight":[{inflight}]}}')
        return f'{{"version":{VERSION},"queues":[{",".join(items)}]}}'.encode()


def _entry(e: InFlight, now: float, now_ms: int) -> list[object]:
    return [
        e.offset,
        e.attempt,
        e.generation,
        now_ms + round((e.visible_at - now) * 1000),
        e.client_id,
        e.auto_renew,
        e.returned,
        e.phy_offset,
    ]


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def write(path: Path, data: bytes) -> None:
    """Replaces the file (atomically, keeping the last one as a backup)."""
    write_atomic(path, data)


def decode(value: object, *, renew_grace_s: float) -> dict[PopKey, PopQueue]:
    """The queues a file held. A message its client kept invisible while connected (a push
    consumer's) is held ``renew_grace_s`` more at most: its client must reconnect to ack it.

    Raises:
        ValueError: Not a state this version wrote.
    """
    if not isinstance(value, dict) or value.get("version") != VERSION:
        raise ValueError("not a pop state of version 1")
    now, now_ms = time.monotonic(), time.time_ns() // 1_000_000
    queues: dict[PopKey, PopQueue] = {}
    for item in value["queues"]:
        queue = PopQueue(int(item["cursor"]))
        for (
            offset,
            attempt,
            generation,
            visible_ms,
            client_id,
            auto_renew,
            returned,
            phy_offset,
        ) in sorted(item["inflight"]):
            if int(offset) >= queue.cursor:
                # Delivered while the state was being encoded: read again from the cursor.
                continue
            visible_at = now + (int(visible_ms) - now_ms) / 1000
            if auto_renew:
                visible_at = min(visible_at, now + renew_grace_s)
            queue.add(
                InFlight(
                    int(offset),
                    int(attempt),
                    int(generation),
                    visible_at,
                    str(client_id),
                    False,
                    bool(returned),
                    int(phy_offset),
                )
            )
        queues[(str(item["group"]), str(item["topic"]), int(item["queue"]))] = queue
    return queues


def load(path: Path, *, renew_grace_s: float) -> dict[PopKey, PopQueue]:
    """The queues of the file at ``path`` (or of its backup); none when there is no file or it
    cannot be read, which is logged."""
    try:
        return load_json(path, functools.partial(decode, renew_grace_s=renew_grace_s)) or {}
    except ConfigError as e:
        log.error("pop state not restored: %s; in-flight messages come again", e)
        return {}
