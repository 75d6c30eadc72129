"""Appends deterministic messages to a store until it is killed, acknowledging every put.

Run as ``python crash_writer.py ROOT FLUSH_DISK_TYPE SEED [pipelined]``. Prints ``ready`` once
the store is open, then one JSON line per completed put (flushed at once):
``{"i": first index, "t": topic, "q": queue id, "qo": [queue offsets], "phy": [phy offsets],
"n": [body sizes], "end": end offset}``. ``pipelined`` keeps several puts in flight from an
event loop and acknowledges each once it is durable (see ``write_pipelined``). The crash tests
SIGKILL it at a random moment and check that every acknowledged message survived.

Each body starts with a 9-byte header (message index u32, index of the first message of its put
u32, messages in the put u8) followed by ``payload(index, size)``, so a reader can tell which put
a record belongs to and whether it is intact.
"""

import asyncio
import json
import random
import struct
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pyrmq.store import MessageStore

TOPICS = ("CrashA", "CrashB", "CrashC")
QUEUES = 4
MAX_MESSAGES = 50_000
# Puts in flight at once in pipelined mode.
PIPELINE = 16

CONFIG = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 200,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
    "flush_interval_commit_log_ms": 10,
    "flush_interval_consume_queue_ms": 20,
}


def body_for(index: int, group_first: int, group_size: int, size: int) -> bytes:
    """The body of message ``index``: header plus ``size`` deterministic bytes."""
    header = struct.pack(">IIB", index, group_first, group_size)
    return header + random.Random(index).randbytes(size)


def parse_header(body: bytes) -> tuple[int, int, int]:
    """(index, first index of its put, messages in its put) from a body."""
    index, first, count = struct.unpack(">IIB", body[:9])
    return index, first, count


def put_next(store: "MessageStore", rng: random.Random, index: int, wait: bool) -> dict:
    """Appends the put that starts at message ``index``; returns its acknowledgement line."""
    from pyrmq.store import PutStatus

    topic = rng.choice(TOPICS)
    queue_id = rng.randrange(QUEUES)
    count = 1 if rng.random() < 0.5 else rng.randint(1, 8)
    sizes = [rng.randint(1, 3000) for _ in range(count)]
    bodies = [body_for(index + k, index, count, n) for k, n in enumerate(sizes)]
    kind = rng.randrange(3)
    if count == 1 and kind == 0:
        r = store.put(topic, bodies[0], queue_id=queue_id, keys=f"idx-{index}", wait_for_flush=wait)
    elif kind == 1:
        r = store.put_batch(
            topic, bodies, queue_id=queue_id, tags=f"Tag{count}", wait_for_flush=wait
        )
    else:
        batch = b"".join(
            struct.pack(">iiiii", 22 + len(b), 0, 0, 0, len(b)) + b + b"\x00\x00" for b in bodies
        )
        r = store.put_encoded_batch(topic, batch, queue_id=queue_id, wait_for_flush=wait)
    assert r.status is PutStatus.PUT_OK, r
    return {
        "i": index,
        "t": topic,
        "q": queue_id,
        "qo": list(r.queue_offsets),
        "phy": list(r.phy_offsets),
        "n": sizes,
        "end": r.end_offset,
    }


def acknowledge(out: TextIO, line: dict) -> None:
    out.write(json.dumps(line, separators=(",", ":")) + "\n")
    out.flush()


async def write_pipelined(store: "MessageStore", rng: random.Random, out: TextIO) -> None:
    """Keeps up to ``PIPELINE`` puts in flight from one event loop, as the broker does under
    SYNC_FLUSH, and acknowledges each when the FlushWaiter reports it durable, with the
    flushed offset it saw then."""
    from pyrmq.store import FlushWaiter

    waiter = FlushWaiter(store, timeout_s=30.0)
    waiter.start()
    slots = asyncio.Semaphore(PIPELINE)
    index = 0
    while index < MAX_MESSAGES:
        await slots.acquire()
        line = put_next(store, rng, index, wait=False)

        def durable(ok: bool, line: dict = line) -> None:
            line["durable"] = ok
            line["flushed"] = store.flushed_phy_offset
            acknowledge(out, line)
            slots.release()

        waiter.when_durable(line["end"], durable)
        index += len(line["n"])
    for _ in range(PIPELINE):  # every slot back: nothing in flight
        await slots.acquire()
    waiter.stop()


def main() -> None:
    from pyrmq.config import StoreConfig
    from pyrmq.store import MessageStore

    root, flush_disk_type, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pipelined = len(sys.argv) > 4 and sys.argv[4] == "pipelined"
    rng = random.Random(seed)
    config = StoreConfig(**CONFIG, flush_disk_type=flush_disk_type)
    store = MessageStore.open(root, config, background_services=True)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    if pipelined:
        asyncio.run(write_pipelined(store, rng, out))
    else:
        index = 0
        while index < MAX_MESSAGES:
            line = put_next(store, rng, index, wait=True)
            acknowledge(out, line)
            index += len(line["n"])
    out.write("done\n")
    out.flush()
    store.close()


if __name__ == "__main__":
    main()
