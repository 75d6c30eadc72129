"""CI smoke run of the benchmarks: every benchmark runs once, on small data, in well under a minute.

    python benches/smoke.py

Steps: the baseline store's own tests, ``report.py --quick`` (both implementations, Markdown table),
and the pytest-benchmark suites with ``--benchmark-disable`` (each body runs once as a test).
pyrmq parameters are skipped while ``pyrmq._core`` is not built. Exits non-zero if any step fails.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 300


def steps() -> list[tuple[str, list[str]]]:
    py = sys.executable
    return [
        (
            "baseline tests",
            [py, "-m", "pytest", "benches/baseline", "-q", "-p", "no:cacheprovider"],
        ),
        ("report --quick", [py, "benches/report.py", "--quick"]),
        (
            "pytest-benchmark suites, once each",
            [
                py,
                "-m",
                "pytest",
                "benches/pytest",
                "--benchmark-disable",
                "-q",
                "-p",
                "no:cacheprovider",
            ],
        ),
    ]


def main() -> int:
    env = dict(os.environ, PYRMQ_BENCH_MODE="smoke")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    failed = []
    started = time.perf_counter()
    for name, cmd in steps():
        print(f"== bench smoke: {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        try:
            rc = subprocess.run(
                cmd, cwd=ROOT, env=env, timeout=STEP_TIMEOUT_S, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            rc = -1
            print(f"== bench smoke: {name} timed out after {STEP_TIMEOUT_S} s", flush=True)
        print(f"== bench smoke: {name}: rc={rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(name)
    total = time.perf_counter() - started
    if failed:
        print(f"== bench smoke FAILED ({', '.join(failed)}) in {total:.1f} s", flush=True)
        return 1
    print(f"== bench smoke passed in {total:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
