"""SYNC_FLUSH appends of 128 B bodies from 8 threads, one queue each: puts and put_batch x32.

pyrmq's threads share fsyncs (group commit); the baseline msyncs inside each put, under its lock.
Each test starts with a page-cache warm-up (``warm_page_cache`` in conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benches import workloads as w
from benches.pytest._support import measure

pytestmark = pytest.mark.benchmark(group="store.append.sync_flush")

CALLS_PER_THREAD = 4


@pytest.fixture
def sync_store(impl: str, scratch: Path, warm_page_cache: None) -> Iterator[w.Store]:
    s = w.open_store(impl, scratch, sync_flush=True)
    yield s
    s.close()


@pytest.mark.parametrize("batch", [1, w.APPEND_BATCH], ids=["put", "put_batch32"])
def test_append_sync_flush_group_commit(
    benchmark: object, impl: str, sync_store: w.Store, batch: int
) -> None:
    threads = w.SYNC_THREADS
    ops = [w.sync_flush_op(sync_store, i, batch) for i in range(threads)]
    msgs = threads * CALLS_PER_THREAD * batch
    per_msg = w.stored_bytes(w.SYNC_BODY_BYTES, w.FILTER_TAG)

    def run_ops(op: Callable[[], tuple[int, int]]) -> None:
        for _ in range(CALLS_PER_THREAD):
            op()

    with ThreadPoolExecutor(threads) as pool:

        def call() -> None:
            for f in [pool.submit(run_ops, op) for op in ops]:
                f.result()

        measure(
            benchmark, call, impl=impl, msgs_per_call=msgs, bytes_per_call=msgs * per_msg,
            target=w.TARGET_SYNC_FLUSH, threads=threads, batch=batch,
            body_bytes=w.SYNC_BODY_BYTES, flush="SYNC_FLUSH",
        )  # fmt: skip
