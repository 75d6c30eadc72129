"""Measure pyrmq's asyncio client against a real ``pyrmq serve`` and print a Markdown table.

    python benches/client.py            # full run (about 2 minutes)
    python benches/client.py --quick    # each bench command once, briefly, for CI
    python benches/client.py --json out.json

One ``pyrmq serve --flush async`` (name server and broker in one process, store in a temporary
directory, ephemeral ports) serves every row. Each row runs a ``pyrmq bench`` command in a child
process (``python -m pyrmq.cli.main bench ...``) and reads the ``RESULT`` JSON line it prints, so
the rows are exactly what a user gets from the command line. Bodies are 128 B.

- produce, ``send_batch`` of 32: ``bench producer -b 32``; target >= 300,000 msgs/s.
- produce, ``send`` one message per request, 64 tasks: ``bench producer -w 64``; target
  >= 20,000 msgs/s.
- produce, ``send_oneway``: reported only.
- produce, ``send_in_transaction`` (a half message and its commit), 64 tasks: reported only,
  with its rate over the ``send`` row's.
- consume: a fresh group drains, from the first offset, what the batch row stored, with
  ``--consume-batch 32``, with a listener on the consume threads and with a coroutine listener,
  each pulling RocketMQ's default 32 messages per request and then 256 (the broker's
  ``maxTransferCountOnMessageInMemory`` is raised to 256 for the whole run, which does not
  change the rows that pull 32); target >= 400,000 msgs/s (each row). One more row runs
  RocketMQ's defaults (thread listener, one message per call) for a fixed time; reported only.
- end-to-end latency at 2,000 msgs/s: ``bench latency`` (consumer and producer in separate
  processes; the consumer takes now minus the send time stamped in the body), with a thread
  listener and with a coroutine listener; target p50 <= 0.3 ms and p99 <= 1 ms (each row).
- the floor under those: ``relay_floor.py``, the same three-process shape at the same rate
  with no pyrmq in it (a producer, a relay answering each frame, a consumer; the same event
  loop and pacing, loopback TCP); reported only, and each end-to-end row's note gives its p50
  and p99 over the floor's.
- one task of sync sends, pyrmq (``bench producer -w 1``) against the official C++ client's
  ``send_sync`` on one thread (``cpp_send_child.py``, as in ``broker.py``), in the same run; the
  note gives pyrmq's msgs/s over the C++ client's.

Rates are over each command's active window (first send to last answer; first message consumed to
last). Latency columns: RT per request for producer rows, B2C (born timestamp to listener, whole-ms
timestamps, so up to 1 ms high) for consumer rows, end to end for the latency rows. CPU per
message (not for the latency rows, which idle between sends): ``pyrmq serve``'s (all threads,
``/proc/<pid>/stat``, 10 ms ticks) over the whole command, and the bench workers' own
(``cpu_us_per_msg`` of the RESULT line: every thread of the worker processes, from the first send
or message to the last). The exit code is 1 when a row could not run, not when a target is missed.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import resource
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.servers import ServerProcess, create_topic

from benches import broker as broker_bench
from benches import relay_floor
from benches import workloads as w

BODY_BYTES = 128
BIG_PULL = 256
"""Messages per pull in the tuned consume rows (the broker's cap is raised to match)."""
QUEUES = 4
BATCH_TOPIC = "BenchClientBatch"
SINGLE_TOPIC = "BenchClientSingle"
ONEWAY_TOPIC = "BenchClientOneway"
TX_TOPIC = "BenchClientTransaction"
ONE_TASK_TOPIC = "BenchClientOneTask"
LATENCY_TOPIC = "BenchClientLatency"
"""One topic per latency row, suffixed with the listener: a fresh group starts at offset 0 of
a queue whose first message the broker still holds in memory (as RocketMQ does), so a row on
the topic of the row before would consume that row's messages too."""
LATENCY_LISTENERS = ("thread", "loop")

TARGET_BATCH = 300_000
TARGET_SINGLE = 20_000
TARGET_CONSUME = 400_000
LATENCY_RATE = 2000
TARGET_E2E_P50_MS = 0.3
TARGET_E2E_P99_MS = 1.0


@dataclass(frozen=True)
class Plan:
    """Durations and counts of one run."""

    mode: str
    produce_s: float
    """Each producer row runs this long."""
    batch_concurrency: int
    single_concurrency: int
    consume_max_s: float
    """Time limit of a draining consumer row."""
    consume_default_s: float
    latency_s: float
    latency_warmup_s: float
    one_task_count: int
    run_oneway: bool
    run_one_task: bool
    """The single-task rows, pyrmq and the C++ client."""
    row_timeout_s: float
    ready_timeout_s: float

    @classmethod
    def of(cls, mode: str) -> Plan:
        if mode == "smoke":
            return cls(mode, 1.0, 8, 64, 5.0, 1.0, 1.0, 0.3, 200, False, False, 30.0, 15.0)
        return cls(mode, 10.0, 8, 64, 60.0, 5.0, 10.0, 1.0, 5000, True, True, 120.0, 30.0)


class RowFailed(Exception):
    """A row could not be measured; the message says why."""


# ---------------------------------------------------------------------------------------------
# Running a bench command
# ---------------------------------------------------------------------------------------------


def run_bench(args: list[str], timeout_s: float, broker_pid: int) -> dict[str, Any]:
    """Runs ``pyrmq bench <args>``; returns its RESULT, its report lines and CPU figures."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = [sys.executable, "-m", "pyrmq.cli.main", "bench", *args]
    usage0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = broker_bench.process_cpu_s(broker_pid)
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as e:
        raise RowFailed(f"`pyrmq bench {' '.join(args)}` did not end within {timeout_s:g} s") from e
    wall_s = time.perf_counter() - started
    cpu1 = broker_bench.process_cpu_s(broker_pid)
    usage1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    results = [
        json.loads(line.removeprefix("RESULT "))
        for line in done.stdout.splitlines()
        if line.startswith("RESULT ")
    ]
    if done.returncode != 0 or len(results) != 1:
        raise RowFailed(
            f"`pyrmq bench {' '.join(args)}` exited {done.returncode} with "
            f"{len(results)} RESULT line(s)\nstdout (end):\n{done.stdout[-2000:]}\n"
            f"stderr (end):\n{done.stderr[-2000:]}"
        )
    client_cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    return {
        "result": results[0],
        "lines": [line for line in done.stdout.splitlines() if not line.startswith("RESULT ")],
        "stderr": done.stderr,
        "wall_s": wall_s,
        "client_cpu_s": client_cpu,
        "broker_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
    }


def _ms(summary: dict[str, Any] | None, key: str) -> float | None:
    value = (summary or {}).get(key)
    return None if value is None else float(value)


def make_row(
    name: str,
    run: dict[str, Any],
    *,
    msgs: int,
    rate: float,
    mb_s: float | None,
    latency: dict[str, Any] | None,
    latency_kind: str,
    target: str | None,
    met: bool | None,
    note: str,
) -> dict[str, Any]:
    cpu = {
        "broker_cpu_us_per_msg": None
        if run["broker_cpu_s"] is None or not msgs or latency_kind == "E2E"
        else run["broker_cpu_s"] / msgs * 1e6,
        # The bench command's own figure: its workers' CPU from their first send or message
        # to their last, without interpreter start-up.
        "client_cpu_us_per_msg": run["result"].get("cpu_us_per_msg"),
    }
    return {
        "benchmark": name,
        "msgs": msgs,
        "msgs_per_s": rate,
        "mb_per_s": mb_s,
        "latency": latency_kind,
        "avg_ms": _ms(latency, "avg"),
        "p50_ms": _ms(latency, "p50"),
        "p99_ms": _ms(latency, "p99"),
        "p999_ms": _ms(latency, "p999"),
        "max_ms": _ms(latency, "max"),
        "target": target,
        "target_met": met,
        "note": note,
        "extra": {**cpu, "wall_s": run["wall_s"], "result": run["result"], "lines": run["lines"]},
    }


def failed_row(name: str, target: str | None, why: str, *, skipped: bool = False) -> dict[str, Any]:
    return {
        "benchmark": name,
        "msgs": 0,
        "msgs_per_s": None,
        "target": target,
        "target_met": None,
        "note": "",
        "extra": {},
        "skipped" if skipped else "error": why,
    }


# ---------------------------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------------------------


_CONSUMER_ROWS = itertools.count(1)


def _common(namesrv: str, topic: str) -> list[str]:
    return ["-n", namesrv, "-t", topic]


def producer_row(
    name: str,
    namesrv: str,
    pid: int,
    plan: Plan,
    extra_args: list[str],
    topic: str,
    target: int | None,
    note: str,
) -> dict[str, Any]:
    args = ["producer", *_common(namesrv, topic), "-s", str(BODY_BYTES), *extra_args]
    run = run_bench(args, plan.row_timeout_s, pid)
    res = run["result"]
    if res["send_failed"] or res["response_failed"]:
        note += f"; {res['send_failed']} send(s) failed, {res['response_failed']} refused"
    return make_row(
        name,
        run,
        msgs=res["msgs"],
        rate=res["send_tps"],
        mb_s=res["mb_per_s"],
        latency=res["rt_ms"],
        latency_kind="RT",
        target=None if target is None else f">= {target:,} msgs/s",
        met=None if target is None else res["send_tps"] >= target,
        note=f"`pyrmq bench {' '.join(args[:1] + args[5:])}`; {note}",
    )


def consumer_row(
    name: str,
    namesrv: str,
    pid: int,
    plan: Plan,
    extra_args: list[str],
    target: int | None,
    note: str,
) -> dict[str, Any]:
    # A group of its own: the command's default suffix (ms % 100) may repeat an earlier
    # row's, whose committed offsets would leave nothing to drain.
    group = f"benchmark_consumer_row{next(_CONSUMER_ROWS)}"
    args = [
        "consumer", *_common(namesrv, BATCH_TOPIC), "--from", "first", *extra_args,
        "-g", group, "--no-suffix",
    ]  # fmt: skip
    run = run_bench(args, plan.row_timeout_s + plan.consume_max_s, pid)
    res = run["result"]
    if not res["msgs"]:
        # A rate of zero would read as a slow consumer; say what the consumer logged.
        raise RowFailed(
            f"`pyrmq bench {' '.join(args)}` received nothing in {run['wall_s']:.1f} s\n"
            f"stderr (end):\n{run['stderr'][-3000:]}"
        )
    return make_row(
        name,
        run,
        msgs=res["msgs"],
        rate=res["consume_tps"],
        mb_s=res["mb_per_s"],
        latency=res["b2c_ms"],
        latency_kind="B2C",
        target=None if target is None else f">= {target:,} msgs/s",
        met=None if target is None else res["consume_tps"] >= target,
        note=f"`pyrmq bench {' '.join(args[:1] + args[5:])}`; {note}",
    )


def latency_row(namesrv: str, pid: int, plan: Plan, listener: str) -> dict[str, Any]:
    args = [
        "latency",
        *_common(namesrv, f"{LATENCY_TOPIC}_{listener}"),
        "--rate", str(LATENCY_RATE),
        "-d", str(plan.latency_s),
        "--warmup", str(plan.latency_warmup_s),
        "--listener", listener,
    ]  # fmt: skip
    run = run_bench(args, plan.row_timeout_s + plan.latency_s, pid)
    res = run["result"]
    e2e = res["e2e_ms"]
    met = (
        e2e["p50"] is not None
        and e2e["p50"] <= TARGET_E2E_P50_MS
        and e2e["p99"] is not None
        and e2e["p99"] <= TARGET_E2E_P99_MS
    )
    lost = res["sent"] - res["stamped"]
    return make_row(
        f"end to end at {LATENCY_RATE:,} msgs/s, {listener} listener",
        run,
        msgs=res["samples"],
        rate=res["consume_tps"],
        mb_s=None,
        latency=e2e,
        latency_kind="E2E",
        target=f"p50 <= {TARGET_E2E_P50_MS:g} ms, p99 <= {TARGET_E2E_P99_MS:g} ms",
        met=met,
        note=(
            f"`pyrmq bench {' '.join(args[:1] + args[5:])}`; send time (ns) stamped in the body, "
            f"taken in the listener; {res['samples']:,} samples after the warm-up; "
            f"producer RT p50 {res['rt_ms']['p50']:.3f} ms; not delivered: {lost}"
        ),
    )


FLOOR_NAME = f"end to end at {LATENCY_RATE:,} msgs/s, bare relay (floor)"


def floor_row(plan: Plan) -> dict[str, Any]:
    got = relay_floor.measure(LATENCY_RATE, plan.latency_s, plan.latency_warmup_s)
    return {
        "benchmark": FLOOR_NAME,
        "msgs": got["samples"],
        "msgs_per_s": got["msgs_per_s"],
        "latency": "E2E",
        "avg_ms": got["avg"],
        "p50_ms": got["p50"],
        "p99_ms": got["p99"],
        "p999_ms": got["p999"],
        "max_ms": got["max"],
        "target": None,
        "target_met": None,
        "note": (
            "`benches/relay_floor.py`: producer, relay and consumer processes passing stamped "
            f"128 B frames, paced as `bench latency`; {got['samples']:,} samples"
            + (
                ""
                if got["cpu_us_per_msg"] is None
                else f"; {got['cpu_us_per_msg']:.0f} us of CPU per message, three processes"
            )
        ),
        "extra": got,
    }


def compare_to_floor(rows: list[dict[str, Any]]) -> None:
    """Adds each end-to-end row's p50 and p99 over the floor's (measured in the same run)."""
    floor = next((r for r in rows if r["benchmark"] == FLOOR_NAME and "error" not in r), None)
    if floor is None:
        return
    for r in rows:
        if r is floor or r.get("latency") != "E2E" or r.get("p50_ms") is None:
            continue
        p50, p99 = r["p50_ms"] / floor["p50_ms"], r["p99_ms"] / floor["p99_ms"]
        r["note"] += f"; p50 {p50:.1f}x and p99 {p99:.1f}x the floor's"
        r["extra"]["over_floor"] = {"p50": p50, "p99": p99}


def one_task_rows(
    namesrv: str, broker: str, pid: int, plan: Plan, scratch: Path
) -> list[dict[str, Any]]:
    py = producer_row(
        "send 128 B, pyrmq asyncio client, 1 task",
        namesrv,
        pid,
        plan,
        ["-w", "1", "-q", str(plan.one_task_count)],
        ONE_TASK_TOPIC,
        None,
        "one send in flight, as the C++ row below",
    )
    bplan = broker_bench.Plan.of("full" if plan.mode == "full" else "smoke")
    try:
        cpp = broker_bench.cpp_send_sync(namesrv, pid, bplan, scratch)
    except broker_bench.RowSkipped as e:
        return [py, failed_row(broker_bench.SEND_NAME, None, str(e), skipped=True)]
    cpp_row = {
        "benchmark": broker_bench.SEND_NAME,
        "msgs": cpp["samples"],
        "msgs_per_s": cpp["msgs_per_s"],
        "mb_per_s": cpp["msgs_per_s"] * BODY_BYTES / 1e6,
        "latency": "RT",
        "avg_ms": cpp["avg_ms"],
        "p50_ms": cpp["p50_ms"],
        "p99_ms": cpp["p99_ms"],
        "p999_ms": broker_bench.percentile(sorted(s / 1e6 for s in cpp["samples_ns"]), 99.9),
        "max_ms": cpp["max_ms"],
        "target": None,
        "target_met": None,
        "note": f"`benches/cpp_send_child.py`, {cpp['note']}",
        "extra": {k: v for k, v in cpp["extra"].items()},
    }
    ratio = py["msgs_per_s"] / cpp["msgs_per_s"]
    py["note"] += (
        f"; pyrmq / C++ client: {ratio:.2f}x the msgs/s, "
        f"{py['avg_ms'] / cpp['avg_ms']:.2f}x the average RT"
    )
    py["extra"]["ratio_to_cpp"] = ratio
    return [py, cpp_row]


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def run_all(plan: Plan, scratch: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    # RocketMQ's default cap of 32 messages per pull answer, raised so that the rows with
    # --pull-batch 256 get what they ask for; rows that pull 32 are unaffected.
    conf = scratch / "broker.conf"
    conf.write_text(
        f"maxTransferCountOnMessageInMemory={BIG_PULL}\nmaxTransferBytesOnMessageInMemory=1048576\n"
    )
    server = broker_bench.start_serve(
        scratch, "", "async", plan.ready_timeout_s, "-c", str(conf), "--log-level", "WARNING"
    )
    info: dict[str, Any] = {"ready_line": server.ready_line}
    single_name = f"produce 128 B, send, {plan.single_concurrency} tasks"
    try:
        namesrv, broker = server.addresses()[:2]
        pid = server.proc.pid
        latency_topics = [f"{LATENCY_TOPIC}_{listener}" for listener in LATENCY_LISTENERS]
        topics = (BATCH_TOPIC, SINGLE_TOPIC, ONEWAY_TOPIC, TX_TOPIC, ONE_TASK_TOPIC)
        for topic in (*topics, *latency_topics):
            create_topic(broker, topic, QUEUES)
        create_topic(broker, broker_bench.SEND_TOPIC, QUEUES)

        def attempt(name: str, target: str | None, fn: Any) -> None:
            run_row(rows, failures, name, target, fn)

        d = str(plan.produce_s)
        batch_name = "produce 128 B, send_batch x32"
        attempt(
            batch_name,
            f">= {TARGET_BATCH:,} msgs/s",
            lambda: producer_row(
                batch_name, namesrv, pid, plan,
                ["-b", "32", "-w", str(plan.batch_concurrency), "-d", d],
                BATCH_TOPIC, TARGET_BATCH, f"{plan.batch_concurrency} tasks, 1 process",
            ),
        )  # fmt: skip
        attempt(
            single_name,
            f">= {TARGET_SINGLE:,} msgs/s",
            lambda: producer_row(
                single_name, namesrv, pid, plan,
                ["-w", str(plan.single_concurrency), "-d", d],
                SINGLE_TOPIC, TARGET_SINGLE, "one message per request, 1 process",
            ),
        )  # fmt: skip
        if plan.run_oneway:
            oneway_name = "produce 128 B, send_oneway, 64 tasks"
            attempt(
                oneway_name,
                None,
                lambda: producer_row(
                    oneway_name, namesrv, pid, plan, ["--oneway", "-w", "64", "-d", d],
                    ONEWAY_TOPIC, None, "RT is the write; no answer awaited",
                ),
            )  # fmt: skip
        if plan.run_oneway:
            tx_name = f"produce 128 B, send_in_transaction, {plan.single_concurrency} tasks"
            attempt(
                tx_name,
                None,
                lambda: producer_row(
                    tx_name, namesrv, pid, plan,
                    ["--transaction", "-w", str(plan.single_concurrency), "-d", d],
                    TX_TOPIC, None, "a half message, then its commit (END_TRANSACTION)",
                ),
            )  # fmt: skip
            compare_rates(rows, tx_name, single_name)
        stored = next(
            (r["msgs"] for r in rows if r["benchmark"] == batch_name and "error" not in r), 0
        )
        if stored:
            limit = ["-q", str(stored), "-d", str(plan.consume_max_s)]
            shapes = [("thread", 32), ("loop", 32), ("thread", BIG_PULL), ("loop", BIG_PULL)]
            for listener, pull in shapes:
                name = f"consume 128 B, {listener} listener, 32 per call, pull {pull}"
                attempt(
                    name,
                    f">= {TARGET_CONSUME:,} msgs/s",
                    lambda listener=listener, name=name, pull=pull: consumer_row(
                        name, namesrv, pid, plan,
                        ["--listener", listener, "--consume-batch", "32",
                         "--pull-batch", str(pull), *limit],
                        TARGET_CONSUME,
                        f"drains the {stored:,} messages of the batch row; fresh group",
                    ),
                )  # fmt: skip
            if plan.mode == "full":
                name = "consume 128 B, RocketMQ defaults (thread listener, 1 per call)"
                attempt(
                    name,
                    None,
                    lambda: consumer_row(
                        name, namesrv, pid, plan, ["-d", str(plan.consume_default_s)], None,
                        "fixed time from the first offset; 20 consume threads",
                    ),
                )  # fmt: skip
        else:
            failures.append("consume rows: the batch row stored nothing to consume")
        for listener in LATENCY_LISTENERS[:1] if plan.mode == "smoke" else LATENCY_LISTENERS:
            attempt(
                f"end to end, {listener} listener",
                None,
                lambda listener=listener: latency_row(namesrv, pid, plan, listener),
            )
        attempt(FLOOR_NAME, None, lambda: floor_row(plan))
        compare_to_floor(rows)
        if plan.run_one_task:
            attempt(
                "single task sends",
                None,
                lambda: one_task_rows(namesrv, broker, pid, plan, scratch),
            )
    finally:
        info["exit_code"] = stop_server(server, scratch / "serve.log", "pyrmq serve", failures)
    async_single = next(
        (r for r in rows if r["benchmark"] == single_name and "error" not in r), None
    )
    sync_flush_rows(plan, scratch, rows, failures, async_single)
    return rows, failures, info


def compare_rates(rows: list[dict[str, Any]], name: str, base: str) -> None:
    """Notes ``name``'s rate over ``base``'s, both measured in this run."""
    got = {r["benchmark"]: r for r in rows if "error" not in r}
    if name in got and base in got and got[base].get("msgs_per_s"):
        ratio = got[name]["msgs_per_s"] / got[base]["msgs_per_s"]
        got[name]["note"] += f"; {ratio:.2f}x the rate of `{base}`"


def run_row(
    rows: list[dict[str, Any]], failures: list[str], name: str, target: str | None, fn: Any
) -> None:
    """Adds the row (or rows) ``fn`` measures, or a failed row saying why it could not."""
    sys.stderr.write(f"  {name} ...\n")
    try:
        got = fn()
        rows.extend(got if isinstance(got, list) else [got])
    except Exception as exc:
        traceback.print_exc()
        failures.append(f"{name}: {exc}")
        rows.append(failed_row(name, target, str(exc)))


def stop_server(server: ServerProcess, log: Path, what: str, failures: list[str]) -> int:
    """Stops a bench server; a non-zero exit is a failure, shown with the end of its log."""
    code = server.stop()
    if code != 0:
        failures.append(f"{what} exited {code}")
        sys.stderr.write(log.read_text(errors="replace")[-3000:] + "\n")
    return code


def sync_flush_rows(
    plan: Plan,
    scratch: Path,
    rows: list[dict[str, Any]],
    failures: list[str],
    async_single: dict[str, Any] | None,
) -> None:
    """Single sends against a second ``pyrmq serve``, with ``--flush sync``: each answer waits
    for the group-commit fsync that covers it, so the rate shows how many sends in flight one
    fsync answers. The row with as many tasks as ``async_single`` (the ASYNC_FLUSH ``send``
    row) gives its ratio to it."""
    server = broker_bench.start_serve(
        scratch, "-sync", "sync", plan.ready_timeout_s, "--log-level", "WARNING"
    )
    try:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, SINGLE_TOPIC, QUEUES)

        def measure(name: str, tasks: int) -> dict[str, Any]:
            row = producer_row(
                name, namesrv, server.proc.pid, plan,
                ["-w", str(tasks), "-d", str(plan.produce_s)], SINGLE_TOPIC, None,
                "one message per request, 1 process; answered once fsynced",
            )  # fmt: skip
            if async_single is not None and tasks == plan.single_concurrency:
                ratio = row["msgs_per_s"] / async_single["msgs_per_s"]
                row["note"] += f"; {ratio:.2f}x the ASYNC_FLUSH row"
            return row

        smoke = plan.mode == "smoke"
        for tasks in (plan.single_concurrency,) if smoke else (8, plan.single_concurrency):
            name = f"produce 128 B, send, {tasks} tasks, SYNC_FLUSH"
            run_row(rows, failures, name, None, lambda n=name, t=tasks: measure(n, t))
    finally:
        stop_server(server, scratch / "serve-sync.log", "pyrmq serve --flush sync", failures)


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def markdown(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"build profile {machine['build_profile']}, mode {machine['mode']}; "
        "pyrmq serve --flush async on 127.0.0.1, 128 B bodies"
        + w.wake_line(machine)
        + w.idle_line(machine)
        + w.storage_line(machine),
        "",
        "| benchmark | msgs/s | MB/s | latency | p50 ms | p99 ms | p99.9 ms | target | met? |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |",
    ]
    notes = []
    for r in rows:
        status = {True: "met", False: "missed", None: "-"}[r["target_met"]]
        if "error" in r:
            status = "failed"
        elif "skipped" in r:
            status = "skipped"
        rate = r.get("msgs_per_s")
        lines.append(
            f"| {r['benchmark']} | {'-' if rate is None else f'{rate:,.0f}'} | "
            f"{_num(r.get('mb_per_s'), 2)} | {r.get('latency', '-')} | {_num(r.get('p50_ms'))} | "
            f"{_num(r.get('p99_ms'))} | {_num(r.get('p999_ms'))} | "
            f"{r['target'] or 'none (reported only)'} | {status} |"
        )
        name = r["benchmark"]
        if r.get("note"):
            notes.append(f"- {name}: {r['note']}")
        extra = r.get("extra", {})
        cpu = w.cpu_per_msg(extra, 1)
        if cpu:
            notes.append(f"- {name}: CPU per message: {cpu}")
        notes += w.outcome_notes(r)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return w.run_report(
        argv,
        description=__doc__.splitlines()[0],
        quick_help="each command once, briefly (CI)",
        label="client",
        plan_of=Plan.of,
        run_all=run_all,
        markdown=markdown,
    )


if __name__ == "__main__":
    sys.exit(main())
