"""CI smoke run of the benchmarks: every benchmark runs once, on small data, in well under a minute.

    python benches/smoke.py

Steps: the tests of the baseline store and of the bench tooling, ``report.py --quick`` (both
implementations, Markdown table), the pytest-benchmark suites with ``--benchmark-disable`` (each
body runs once as a test), ``broker-smoke``: ``broker.py --quick`` against a real ``pyrmq serve``
(a few seconds; it must finish within ``BROKER_SMOKE_TIMEOUT_S``), and ``client-smoke``:
``client.py --quick``, which runs ``pyrmq bench producer``, ``consumer`` and ``latency`` for about
a second each against a real ``pyrmq serve`` (about 10 s; at most ``CLIENT_SMOKE_TIMEOUT_S``),
``acl-smoke``: ``acl.py --quick``, sends to servers with and without the plain ACL,
``tls-smoke``: ``tls.py --quick``, sends over TLS and plain TCP, remoting and gRPC,
``grpc-smoke``: ``grpc_transport.py --quick``, gRPC sends and receives with each transport,
``pop-smoke``: ``pop.py --quick``, a gRPC group's pop state at 1,000 and 10,000 in flight,
``spark-sink-smoke``: ``spark_sink.py --quick``, one round of Spark sink writes, and
``spark-source-smoke``: ``spark_source.py --quick``, one round of Spark source reads.
pyrmq parameters are skipped while ``pyrmq._core`` is not built. Exits non-zero if any step fails;
a missed target is reported, not a failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 300
BROKER_SMOKE_TIMEOUT_S = 30
CLIENT_SMOKE_TIMEOUT_S = 60
SPARK_SMOKE_TIMEOUT_S = 180


def steps() -> list[tuple[str, list[str], float]]:
    """(name, command, timeout in seconds) of each step, in order."""
    py = sys.executable
    return [
        (
            "baseline and tooling tests",
            [
                py,
                "-m",
                "pytest",
                "benches/baseline",
                "benches/test_workloads.py",
                "-q",
                "-p",
                "no:cacheprovider",
            ],
            STEP_TIMEOUT_S,
        ),
        ("report --quick", [py, "benches/report.py", "--quick"], STEP_TIMEOUT_S),
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
            STEP_TIMEOUT_S,
        ),
        ("broker-smoke", [py, "benches/broker.py", "--quick"], BROKER_SMOKE_TIMEOUT_S),
        ("client-smoke", [py, "benches/client.py", "--quick"], CLIENT_SMOKE_TIMEOUT_S),
        ("acl-smoke", [py, "benches/acl.py", "--quick"], BROKER_SMOKE_TIMEOUT_S),
        ("tls-smoke", [py, "benches/tls.py", "--quick"], BROKER_SMOKE_TIMEOUT_S),
        ("grpc-smoke", [py, "benches/grpc_transport.py", "--quick"], BROKER_SMOKE_TIMEOUT_S),
        ("pop-smoke", [py, "benches/pop.py", "--quick"], BROKER_SMOKE_TIMEOUT_S),
        ("spark-sink-smoke", [py, "benches/spark_sink.py", "--quick"], SPARK_SMOKE_TIMEOUT_S),
        ("spark-source-smoke", [py, "benches/spark_source.py", "--quick"], SPARK_SMOKE_TIMEOUT_S),
    ]


def run_step(cmd: list[str], env: dict[str, str], timeout_s: float) -> int | None:
    """Runs one step in a process group of its own; returns its exit code, or None if it ran
    out of time, in which case the whole group goes (servers and clients a step started too)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


def main() -> int:
    env = dict(os.environ, PYRMQ_BENCH_MODE="smoke")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    failed = []
    started = time.perf_counter()
    for name, cmd, timeout_s in steps():
        print(f"== bench smoke: {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = run_step(cmd, env, timeout_s)
        if rc is None:
            rc = -1
            print(f"== bench smoke: {name} timed out after {timeout_s:g} s", flush=True)
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
