"""ConsumeQueue scan from Python, with and without a tag filter (1 tag in 8 matches)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benches import workloads as w
from benches.pytest._support import measure, require

pytestmark = pytest.mark.benchmark(group="store.consume_queue")


@pytest.fixture(scope="module", params=w.IMPLEMENTATIONS)
def scan_store(request: pytest.FixtureRequest) -> Iterator[w.Store]:
    require(request.param)
    sz = w.sizes()
    with w.scratch_dir(f"scan-{request.param}") as path:
        store = w.open_store(request.param, path)
        try:
            w.seed(store, sz.scan_seed_units, 16)
            yield store
        finally:
            store.close()


@pytest.mark.parametrize("tags", [None, w.FILTER_TAG], ids=["all", "tag_filter"])
def test_consume_queue_scan(
    benchmark: object, scan_store: w.Store, sizes: w.Sizes, tags: str | None
) -> None:
    if scan_store.impl == "pyrmq" and not hasattr(scan_store.store, "scan_consume_queue"):  # type: ignore[attr-defined]
        pytest.skip("MessageStore.scan_consume_queue is not available")
    total = scan_store.max_offset(w.TOPIC, 0)
    chunk = min(sizes.scan_chunk_units, total)
    op = w.scan_op(scan_store, chunk, tags)
    op()
    matched = op.state["matched"]  # type: ignore[attr-defined]
    expected = chunk if tags is None else chunk // len(w.TAGS)
    assert matched == expected
    measure(
        benchmark, op, impl=scan_store.impl, msgs_per_call=chunk,
        bytes_per_call=chunk * w.CQ_UNIT_BYTES, target=w.TARGET_SCAN, chunk_units=chunk,
        tag_filter=tags or "*",
    )  # fmt: skip
