"""Helpers shared by the benchmark modules and their conftest (one module, so one state)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from benches import workloads as w

RESULTS: dict[str, dict[str, float]] = {}
TARGETS: dict[str, str] = {}


def require(impl: str) -> None:
    """Skip a pyrmq parameter until the extension is built."""
    if impl == "pyrmq" and not w.pyrmq_available():
        pytest.skip(w.not_built())


def _workload_id(benchmark: Any) -> str:
    tokens = [t for t in (benchmark.param or "").split("-") if t not in w.IMPLEMENTATIONS]
    tail = f"[{'-'.join(tokens)}]" if tokens else ""
    return f"{benchmark.group}:{benchmark.name.split('[')[0]}{tail}"


def measure(
    benchmark: Any,
    op: Callable[[], object],
    *,
    impl: str,
    msgs_per_call: int,
    bytes_per_call: int,
    target: w.Target | None = None,
    **extra: object,
) -> None:
    """Benchmark ``op`` and record msgs/s and MB/s (one timed call when benchmarks are disabled)."""
    if benchmark.disabled:
        start = time.perf_counter()
        benchmark(op)
        seconds = time.perf_counter() - start
    else:
        benchmark(op)
        seconds = benchmark.stats.stats.mean
    record(
        benchmark, impl=impl, msgs=msgs_per_call, nbytes=bytes_per_call, seconds=seconds,
        target=target, **extra,
    )  # fmt: skip


def record(
    benchmark: Any,
    *,
    impl: str,
    msgs: int,
    nbytes: int,
    seconds: float,
    target: w.Target | None = None,
    **extra: object,
) -> None:
    """Record throughput; with a target, also the target and (for pyrmq) whether the absolute
    part of it was met (a ratio part needs the baseline's row, see the session summary)."""
    msgs_per_s = msgs / seconds if seconds > 0 else 0.0
    mb_per_s = nbytes / seconds / 1e6 if seconds > 0 else 0.0
    benchmark.extra_info.update(
        impl=impl, msgs_per_s=round(msgs_per_s, 1), mb_per_s=round(mb_per_s, 3),
        msgs_per_call=msgs, bytes_per_call=nbytes, mode=w.bench_mode(), **extra,
    )  # fmt: skip
    if target is not None:
        benchmark.extra_info["target"] = target.describe()
        if impl == "pyrmq":
            met = target.absolute_met(msgs_per_s, mb_per_s, seconds)
            benchmark.extra_info["absolute_target_met"] = met
    if not benchmark.disabled:
        workload = _workload_id(benchmark)
        RESULTS.setdefault(workload, {})[impl] = msgs_per_s
        if target is not None:
            TARGETS[workload] = target.describe()


def ratios() -> list[dict[str, object]]:
    rows = []
    for workload, by_impl in sorted(RESULTS.items()):
        p, b = by_impl.get("pyrmq"), by_impl.get("baseline")
        rows.append(
            {"workload": workload, "pyrmq_msgs_per_s": p, "baseline_msgs_per_s": b,
             "ratio": p / b if p and b else None, "target": TARGETS.get(workload)}
        )  # fmt: skip
    return rows
