"""Open time of a store whose writer was killed with SIGKILL mid-append.

The store size is PYRMQ_BENCH_RECOVERY_BYTES (default 64 MiB in smoke mode, 1 GiB in full mode).
Each round opens a fresh copy of the same crashed store; the median open time is recorded.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benches import workloads as w
from benches.pytest._support import record, require

pytestmark = pytest.mark.benchmark(group="store.recovery")


@pytest.fixture(scope="module", params=w.IMPLEMENTATIONS)
def crashed(request: pytest.FixtureRequest) -> Iterator[w.CrashedStore]:
    require(request.param)
    sz = w.sizes()
    with w.scratch_dir(f"recovery-{request.param}") as root:
        yield w.make_crashed_store(
            request.param, root / "crashed", sz.recovery_bytes, sz.recovery_tail_bytes
        )


def test_recovery_after_sigkill(benchmark: object, crashed: w.CrashedStore, sizes: w.Sizes) -> None:
    opened: list[tuple[w.Store, Path]] = []
    timings: list[float] = []
    counts: list[tuple[int, int]] = []
    serial = iter(range(1_000_000))

    def release() -> None:
        while opened:
            store, path = opened.pop()
            counts.append(w.recovered_counts(store))
            store.close()
            shutil.rmtree(path, ignore_errors=True)

    def setup() -> tuple[tuple[Path], dict[str, object]]:
        release()
        copy = crashed.path.parent / f"round{next(serial)}"
        w.copy_tree(crashed.path, copy)
        return (copy,), {}

    def open_crashed(path: Path) -> None:
        start = time.perf_counter()
        opened.append((w.open_for_recovery(crashed.impl, path), path))
        timings.append(time.perf_counter() - start)

    try:
        benchmark.pedantic(open_crashed, setup=setup, rounds=sizes.recovery_rounds)  # type: ignore[attr-defined]
    finally:
        release()
    msgs, phy = counts[-1]
    assert msgs >= crashed.msgs_reported
    seconds = statistics.median(timings)  # open() time varies between rounds; as report.py
    record(
        benchmark, impl=crashed.impl, msgs=msgs, nbytes=phy, seconds=seconds,
        target=w.TARGET_RECOVERY, open_s=round(seconds, 4), store_bytes=phy,
        recovered_msgs=msgs,
    )  # fmt: skip
