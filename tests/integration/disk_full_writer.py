"""Appends to a store until the disk (or the file size limit) refuses more, then reports.

``python disk_full_writer.py fsize ROOT [FLUSH]``: writes a few messages, then limits file sizes
(RLIMIT_FSIZE, with SIGXFSZ ignored so the failing call gets EFBIG) below the segment size and
appends until a new CommitLog segment cannot be created.

``python disk_full_writer.py fill ROOT [FLUSH]``: appends until the file system holding ROOT is
full.

``python disk_full_writer.py verify ROOT [FLUSH]``: opens the store and reports every message in
it.

FLUSH is ``ASYNC_FLUSH`` (the default) or ``SYNC_FLUSH``, whose appends are written through the
file rather than the mapping and wait for the group-commit thread.

Prints one JSON object: the acknowledged messages, the errors raised, what the store reported.
"""

import json
import resource
import signal
import sys

SEGMENT = 128 * 1024
CONFIG = {
    "mapped_file_size_commit_log": SEGMENT,
    "mapped_file_size_consume_queue": 20 * 100,
    "max_hash_slot_num": 100,
    "max_index_num": 400,
}
LIMIT = 64 * 1024
TOPIC = "TopicFull"
QUEUES = 3


def body_for(i: int) -> bytes:
    return (f"message-{i}-".encode() * 200)[: 1000 + i % 1000]


def open_store(root: str, flush: str = "ASYNC_FLUSH"):
    from pyrmq.config import StoreConfig
    from pyrmq.store import MessageStore

    sync = flush == "SYNC_FLUSH"
    config = StoreConfig(**CONFIG, flush_disk_type=flush)
    return MessageStore.open(root, config, background_services=sync)


def write(root: str, limit_file_size: bool, flush: str) -> dict:
    from pyrmq import errors

    store = open_store(root, flush)
    acked = []

    def put(i: int) -> None:
        r = store.put(TOPIC, body_for(i), queue_id=i % QUEUES, keys=f"k{i}")
        acked.append(
            {
                "i": i,
                "q": i % QUEUES,
                "qo": r.queue_offset,
                "phy": r.phy_offset,
                "status": r.status.name,
            }
        )

    if limit_file_size:
        for i in range(5):
            put(i)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.RLIM_INFINITY))
    i = len(acked)
    failures = []
    max_phy = None
    while not failures and i < 100_000:
        try:
            put(i)
            i += 1
        except errors.PyrmqError as exc:
            max_phy = store.max_phy_offset
            failures.append({"type": type(exc).__name__, "message": str(exc)})
    # The same put keeps failing, and writes nothing.
    for _ in range(2):
        try:
            put(i)
        except errors.PyrmqError as exc:
            failures.append({"type": type(exc).__name__, "message": str(exc)})
        assert store.max_phy_offset == max_phy
    # Everything acknowledged is still readable here.
    readable = 0
    for a in acked:
        got = store.get(TOPIC, a["q"], a["qo"], max_count=1)
        [m] = got.messages()
        assert (m.body, m.phy_offset) == (body_for(a["i"]), a["phy"])
        assert store.look_message_by_offset(a["phy"]).body == body_for(a["i"])
        readable += 1
    report = {
        "acked": acked,
        "failures": failures,
        "max_phy_offset_at_failure": max_phy,
        "max_phy_offset": store.max_phy_offset,
        "readable": readable,
    }
    # Closing writes a checkpoint, which a full disk may refuse; the data is flushed either way.
    try:
        store.close()
        report["close_error"] = None
    except errors.PyrmqError as exc:
        report["close_error"] = type(exc).__name__
    return report


def verify(root: str, flush: str) -> dict:
    """Every message of the store, read through get()."""
    messages = []
    with open_store(root, flush) as store:
        for q in range(QUEUES):
            offset = store.min_offset(TOPIC, q)
            while True:
                got = store.get(TOPIC, q, offset)
                assert got.corrupt_offsets == []
                if got.message_count == 0:
                    break
                for m in got.messages():
                    index = int(m.body.split(b"-")[1])
                    assert m.body == body_for(index)
                    messages.append({"i": index, "q": q, "qo": m.queue_offset, "phy": m.phy_offset})
                offset = got.next_begin_offset
        return {"messages": messages, "max_phy_offset": store.max_phy_offset}


def main() -> None:
    mode, root = sys.argv[1], sys.argv[2]
    flush = sys.argv[3] if len(sys.argv) > 3 else "ASYNC_FLUSH"
    if mode == "verify":
        report = verify(root, flush)
    else:
        report = write(root, limit_file_size=mode == "fsize", flush=flush)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
