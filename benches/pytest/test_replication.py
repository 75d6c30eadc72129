"""Replication at the store: a master's log read with ``read_replica`` and written into a fresh
slave's store with ``append_replica`` (checks, write, dispatch), as the HA services do without
the socket between them. pyrmq only: the baseline has no replication."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benches import workloads as w
from benches.pytest._support import measure, require

pytestmark = pytest.mark.benchmark(group="store.replicate")

# RocketMQ's haTransferBatchSize.
FRAME_BYTES = 32 * 1024
BATCH = 32


@pytest.fixture(scope="module", params=[128, 1024], ids=lambda b: f"pyrmq-{b}B")
def master(request: pytest.FixtureRequest) -> Iterator[tuple[object, Path, int, int]]:
    require("pyrmq")
    from pyrmq.store import MessageStore

    body_bytes = request.param
    count = max(BATCH, w.sizes().get_seed_msgs // BATCH * BATCH)
    with w.scratch_dir("replicate") as root:
        store = MessageStore.open(
            root / "master",
            {"mapped_file_size_commit_log": w.SEGMENT_BYTES, "max_hash_slot_num": 100_000,
             "max_index_num": 400_000},
        )  # fmt: skip
        try:
            body = w.make_body(body_bytes)
            for _ in range(count // BATCH):
                store.put_batch(w.TOPIC, [body] * BATCH, tags="TagA")
            yield store, root, count, store.max_phy_offset
        finally:
            store.close()


def test_replicate_log(benchmark: object, master: tuple[object, Path, int, int]) -> None:
    from pyrmq.store import MessageStore

    store, root, count, end = master
    rounds = iter(range(1_000_000))

    def op() -> int:
        slave = MessageStore.open(
            root / f"slave-{next(rounds)}",
            {"mapped_file_size_commit_log": w.SEGMENT_BYTES, "broker_role": "SLAVE",
             "max_hash_slot_num": 100_000, "max_index_num": 400_000},
            background_services=False,
        )  # fmt: skip
        try:
            pos = 0
            while (chunk := store.read_replica(pos, FRAME_BYTES)) is not None:  # type: ignore[attr-defined]
                pos = slave.append_replica(pos, chunk[0])
            return slave.max_offset(w.TOPIC, 0)
        finally:
            slave.close()

    assert op() == count
    measure(
        benchmark, op, impl="pyrmq", msgs_per_call=count, bytes_per_call=end,
        frame_bytes=FRAME_BYTES,
    )  # fmt: skip
