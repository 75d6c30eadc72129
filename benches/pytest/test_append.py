"""Append through the binding: single puts and 32-message batches, ASYNC_FLUSH.

Each test starts with a page-cache warm-up (``warm_page_cache`` in conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from benches import workloads as w
from benches.pytest._support import measure

pytestmark = pytest.mark.benchmark(group="store.append")


@pytest.fixture
def store(impl: str, scratch: Path, warm_page_cache: None) -> Iterator[w.Store]:
    s = w.open_store(impl, scratch)
    yield s
    s.close()


@pytest.mark.parametrize("batch", [1, w.APPEND_BATCH], ids=["put", "put_batch32"])
@pytest.mark.parametrize("body_bytes", [128, 4096], ids=["128B", "4KiB"])
def test_append_async_flush(
    benchmark: object, impl: str, store: w.Store, body_bytes: int, batch: int
) -> None:
    op = w.append_op(store, body_bytes, batch)
    msgs, nbytes = op()
    measure(
        benchmark, op, impl=impl, msgs_per_call=msgs, bytes_per_call=nbytes,
        target=w.append_target(body_bytes, batch), body_bytes=body_bytes, batch=batch,
        flush="ASYNC_FLUSH",
    )  # fmt: skip
    assert store.max_offset(w.TOPIC, 0) >= 0
