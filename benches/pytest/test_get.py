"""Reading 32-message batches from a warm store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benches import workloads as w
from benches.pytest._support import measure, require

pytestmark = pytest.mark.benchmark(group="store.get")


@pytest.fixture(scope="module", params=[(i, b) for b in (128, 1024) for i in w.IMPLEMENTATIONS],
                ids=lambda p: f"{p[0]}-{p[1]}B")  # fmt: skip
def warm_store(request: pytest.FixtureRequest) -> Iterator[tuple[w.Store, int]]:
    impl, body_bytes = request.param
    require(impl)
    with w.scratch_dir(f"get-{impl}") as path:
        store = w.open_store(impl, path)
        try:
            w.seed(store, w.sizes().get_seed_msgs, body_bytes)
            yield store, body_bytes
        finally:
            store.close()


def test_get_batch_warm(benchmark: object, warm_store: tuple[w.Store, int]) -> None:
    store, body_bytes = warm_store
    op = w.get_op(store, batch=w.GET_BATCH)
    msgs, nbytes = op()
    assert msgs == w.GET_BATCH
    assert nbytes == w.GET_BATCH * w.stored_bytes(body_bytes, w.FILTER_TAG)
    measure(
        benchmark, op, impl=store.impl, msgs_per_call=msgs, bytes_per_call=nbytes,
        target=w.TARGET_GET, body_bytes=body_bytes, batch=w.GET_BATCH,
    )  # fmt: skip
