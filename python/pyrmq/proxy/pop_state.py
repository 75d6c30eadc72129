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

import json
import logging
import time
from collections.abc import Mapping
from pathlib import Path

from pyrmq.broker.state.json_file import load_json, write_atomic
from pyrmq.proxy.pop import InFlight, PopQueue

__all__ = ["PopKey", "decode", "encode", "load", "write"]

log = logging.getLogger(__name__)

VERSION = 1
PopKey = tuple[str, str, int]
"""(group, topic, queue id)."""


def encode(queues: Mapping[PopKey, PopQueue]) -> bytes:
    """The queues with messages in flight, as the file holds them."""
    now, now_ms = time.monotonic(), time.time_ns() // 1_000_000
    out = []
    for (group, topic, queue_id), queue in queues.items():
        if not queue.inflight:
            continue
        entries = [
            [
                e.offset,
                e.attempt,
                e.generation,
                now_ms + round((e.visible_at - now) * 1000),
                e.client_id,
                e.auto_renew,
                e.returned,
                e.phy_offset,
            ]
            for e in queue.inflight.values()
        ]
        out.append(
            {
                "group": group,
                "topic": topic,
                "queue": queue_id,
                "cursor": queue.cursor,
                "inflight": entries,
            }
        )
    return json.dumps({"version": VERSION, "queues": out}, separators=(",", ":")).encode()


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
    value = load_json(path)
    if value is None:
        return {}
    try:
        return decode(value, renew_grace_s=renew_grace_s)
    except (KeyError, TypeError, ValueError) as e:
        log.error("pop state %s cannot be read (%s): in-flight messages come again", path, e)
        return {}
