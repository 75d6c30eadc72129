"""SYNC_FLUSH appends: 8 threads sharing group commits (baseline: one thread, msync per put)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benches import workloads as w
from benches.pytest._support import measure

pytestmark = pytest.mark.benchmark(group="store.append.sync_flush")

PUTS_PER_THREAD = 4


@pytest.fixture
def sync_store(impl: str, scratch: Path) -> Iterator[w.Store]:
    s = w.open_store(impl, scratch, sync_flush=True)
    yield s
    s.close()


def test_append_sync_flush_group_commit(benchmark: object, impl: str, sync_store: w.Store) -> None:
    per_msg = w.stored_bytes(w.SYNC_BODY_BYTES, w.FILTER_TAG)
    msgs = w.SYNC_THREADS * PUTS_PER_THREAD
    if impl == "pyrmq":
        threads = w.SYNC_THREADS
        ops = [w.sync_flush_op(sync_store, i) for i in range(threads)]

        def run_ops(op: object) -> None:
            for _ in range(PUTS_PER_THREAD):
                op()  # type: ignore[operator]

        with ThreadPoolExecutor(threads) as pool:

            def call() -> None:
                for f in [pool.submit(run_ops, op) for op in ops]:
                    f.result()

            measure(
                benchmark, call, impl=impl, msgs_per_call=msgs, bytes_per_call=msgs * per_msg,
                threads=threads, body_bytes=w.SYNC_BODY_BYTES, flush="SYNC_FLUSH",
            )  # fmt: skip
    else:
        op = w.sync_flush_op(sync_store, 0)

        def call() -> None:
            for _ in range(msgs):
                op()

        measure(
            benchmark, call, impl=impl, msgs_per_call=msgs, bytes_per_call=msgs * per_msg,
            threads=1, body_bytes=w.SYNC_BODY_BYTES, flush="SYNC_FLUSH",
        )  # fmt: skip
