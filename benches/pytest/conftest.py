"""Fixtures for the pytest-benchmark suites: implementation parameter, stores, throughput.

Run with ``pytest benches/pytest`` (add ``--benchmark-disable`` to run each body once as a test).
Each benchmark runs once per implementation; ``extra_info`` records ``msgs_per_s``,
``mb_per_s`` and the workload's target, and the session ends with a table of pyrmq/baseline
ratios and targets (``benches/report.py`` says which targets were met).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benches import workloads as w  # noqa: E402
from benches.pytest._support import ratios, require  # noqa: E402


@pytest.fixture(params=w.IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> str:
    require(request.param)
    return request.param


@pytest.fixture(scope="session")
def sizes() -> w.Sizes:
    return w.sizes()


@pytest.fixture
def warm_page_cache(sizes: w.Sizes) -> None:
    """Write and delete a throwaway file so the test's appends reuse warm page-cache pages."""
    w.warm_page_cache(sizes.warmup_bytes)


@pytest.fixture
def scratch(request: pytest.FixtureRequest) -> Iterator[Path]:
    with w.scratch_dir(request.node.name.split("[")[0]) as path:
        yield path


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["pyrmq_build_profile"] = w.build_profile()
    machine_info["pyrmq_bench_mode"] = w.bench_mode()
    machine_info["pyrmq_idle"] = w.idle_policy()
    machine_info["pyrmq_storage"] = w.storage_info(w.bench_root())


def pytest_benchmark_update_json(
    config: pytest.Config, benchmarks: list, output_json: dict
) -> None:
    output_json["pyrmq_ratios"] = ratios()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    rows = ratios()
    if not rows:
        return
    tr = terminalreporter
    tr.section("pyrmq vs baseline (msgs/s, same run)")
    tr.write_line(f"{'workload':70} {'pyrmq':>14} {'baseline':>14} {'ratio':>8}  target")
    for row in rows:
        p, b, r = row["pyrmq_msgs_per_s"], row["baseline_msgs_per_s"], row["ratio"]
        tr.write_line(
            f"{row['workload']:70} {_rate(p):>14} {_rate(b):>14} "
            f"{(f'{r:.2f}x' if r else 'n/a'):>8}  {row['target'] or '-'}"
        )


def _rate(x: object) -> str:
    return f"{x:,.0f}" if isinstance(x, float) else "n/a"
