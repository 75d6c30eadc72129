"""Measure the store against the pure-Python baseline in one process and print a Markdown table.

    python benches/report.py            # full run (a few minutes, 1 GiB recovery store)
    python benches/report.py --quick    # seconds-long smoke run
    python benches/report.py --json out.json --only append

Each row runs one workload on both implementations, one after the other, in this process.
Throughput is the best of the rounds (recovery: the median open() time); every loop stops at a
count or a time limit, whichever comes first. Append rows write and delete a throwaway file
before each round, so that appends reuse warm page-cache pages (see
``workloads.warm_page_cache``). The ratio is pyrmq msgs/s over baseline msgs/s. Targets are
absolute (msgs/s, MB/s or seconds), some with a ratio as well; the table says whether pyrmq met
each one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches import workloads as w


@dataclass(frozen=True)
class Spec:
    name: str
    run: Callable[[str, w.Sizes], w.Measurement]
    target: w.Target | None = None
    note: str = ""
    #: What the machine allows this row at most, measured in the same run.
    ceiling: Callable[[w.Sizes], w.DiskCeiling] | None = None


def _append_rounds(
    impl: str, sz: w.Sizes, round_fn: Callable[[], tuple[int, int, float]], extra: dict
) -> w.Measurement:
    """Run ``sz.append_rounds`` rounds, each right after a page-cache warm-up; keep the best."""
    runs = []
    for _ in range(sz.append_rounds):
        warm_s = w.warm_page_cache(sz.warmup_bytes)
        msgs, nbytes, secs = round_fn()
        runs.append(w.Measurement("", impl, msgs, nbytes, secs, {**extra, "warmup_s": warm_s}))
    return w.best_of(runs)


def _append(body_size: int, batch: int) -> Callable[[str, w.Sizes], w.Measurement]:
    def run(impl: str, sz: w.Sizes) -> w.Measurement:
        per_op_bytes = w.stored_bytes(body_size, w.FILTER_TAG) * batch
        max_ops = max(1, sz.max_append_bytes // per_op_bytes)
        with w.scratch_dir(f"append-{impl}") as path:
            store = w.open_store(impl, path)
            try:
                op = w.append_op(store, body_size, batch)
                return _append_rounds(
                    impl, sz,
                    lambda: w.run_bounded(
                        op, max_ops=max_ops, max_seconds=sz.max_seconds,
                        warmup_ops=min(200, max_ops),
                    ),
                    {},
                )  # fmt: skip
            finally:
                store.close()

    return run


def _sync_flush(batch: int) -> Callable[[str, w.Sizes], w.Measurement]:
    def run(impl: str, sz: w.Sizes) -> w.Measurement:
        per_op = w.stored_bytes(w.SYNC_BODY_BYTES, w.FILTER_TAG) * batch
        max_ops = max(1, sz.max_append_bytes // per_op // w.SYNC_THREADS)
        with w.scratch_dir(f"sync-{impl}") as path:
            store = w.open_store(impl, path, sync_flush=True)
            try:
                return _append_rounds(
                    impl, sz,
                    lambda: w.run_threads(
                        w.SYNC_THREADS, lambda i: w.sync_flush_op(store, i, batch),
                        max_ops_per_thread=max_ops, max_seconds=sz.max_seconds,
                    ),
                    {"threads": w.SYNC_THREADS},
                )  # fmt: skip
            finally:
                store.close()

    return run


def _seeded(
    label: str, count_of: Callable[[w.Sizes], int], body_size: int,
    make_op: Callable[[w.Store, w.Sizes], Callable[[], tuple[int, int]]],
) -> Callable[[str, w.Sizes], w.Measurement]:  # fmt: skip
    def run(impl: str, sz: w.Sizes) -> w.Measurement:
        count = count_of(sz)
        runs = []
        with w.scratch_dir(f"{label}-{impl}") as path:
            store = w.open_store(impl, path)
            try:
                w.seed(store, count, body_size)
                op = make_op(store, sz)
                for _ in range(sz.repeats):
                    msgs, nbytes, secs = w.run_bounded(
                        op, max_ops=10 * count, max_seconds=sz.max_seconds, warmup_ops=2
                    )
                    extra = dict(getattr(op, "state", {}))
                    runs.append(w.Measurement("", impl, msgs, nbytes, secs, extra))
            finally:
                store.close()
        return w.best_of(runs)

    return run


def _recovery(impl: str, sz: w.Sizes) -> w.Measurement:
    if impl == "pyrmq" and not w.pyrmq_available():
        raise w.ImplementationUnavailable(w.not_built())
    runs = []
    with w.scratch_dir(f"recovery-{impl}") as root:
        template = root / "crashed"
        crashed = w.make_crashed_store(impl, template, sz.recovery_bytes, sz.recovery_tail_bytes)
        for i in range(sz.recovery_rounds):
            copy = root / f"round{i}"
            w.copy_tree(template, copy)
            start = time.perf_counter()
            store = w.open_for_recovery(impl, copy)
            secs = time.perf_counter() - start
            try:
                msgs, phy = w.recovered_counts(store)
            finally:
                store.close()
            shutil.rmtree(copy, ignore_errors=True)
            if msgs < crashed.msgs_reported:
                raise RuntimeError(
                    f"{impl}: recovered {msgs} messages, the writer had acknowledged "
                    f"{crashed.msgs_reported} before it was killed"
                )
            runs.append(w.Measurement("", impl, msgs, phy, secs, {"open_s": secs}))
    # open() time varies a lot between rounds; the median, not the best, is checked against the
    # target, and every round's time is kept.
    runs.sort(key=lambda m: m.seconds)
    median = runs[(len(runs) - 1) // 2]
    median.extra["rounds_open_s"] = [round(m.seconds, 4) for m in runs]
    return median


def _mib(n: int) -> str:
    return f"{n / w.MiB:.0f} MiB" if n < 1024 * w.MiB else f"{n / (1024 * w.MiB):g} GiB"


def specs(sz: w.Sizes) -> list[Spec]:
    batch = w.APPEND_BATCH
    threads = w.SYNC_THREADS
    sync_note = (
        f"{threads} appender threads, one queue each, {w.SYNC_BODY_BYTES} B bodies; pyrmq shares "
        "fsyncs between threads (group commit), the baseline msyncs inside each put under its lock"
    )
    return [
        Spec("append 128 B, put, async flush", _append(128, 1), w.append_target(128, 1)),
        Spec(
            f"append 128 B, put_batch x{batch}, async flush",
            _append(128, batch),
            w.append_target(128, batch),
        ),
        Spec("append 4 KiB, put, async flush", _append(4096, 1), w.append_target(4096, 1)),
        Spec(
            f"append 4 KiB, put_batch x{batch}, async flush",
            _append(4096, batch),
            w.append_target(4096, batch),
        ),
        Spec(
            f"append {w.SYNC_BODY_BYTES} B, sync flush, {threads} threads x put",
            _sync_flush(1),
            w.TARGET_SYNC_FLUSH,
            sync_note,
            ceiling=lambda sz: w.disk_ceiling(sz, 1),
        ),
        Spec(
            f"append {w.SYNC_BODY_BYTES} B, sync flush, {threads} threads x put_batch x{batch}",
            _sync_flush(batch),
            w.TARGET_SYNC_FLUSH,
            ceiling=lambda sz: w.disk_ceiling(sz, batch),
        ),
        Spec(
            "ConsumeQueue scan, no filter",
            _seeded(
                "scan",
                lambda s: s.scan_seed_units,
                16,
                lambda st, s: w.scan_op(st, s.scan_chunk_units, None),
            ),
            w.TARGET_SCAN,
            "msgs/s counts ConsumeQueue units examined",
        ),
        Spec(
            f"ConsumeQueue scan, tag filter (1/{len(w.TAGS)} match)",
            _seeded(
                "scanf",
                lambda s: s.scan_seed_units,
                16,
                lambda st, s: w.scan_op(st, s.scan_chunk_units, w.FILTER_TAG),
            ),
            w.TARGET_SCAN,
        ),
        Spec(
            "get 32 x 128 B, warm",
            _seeded("get128", lambda s: s.get_seed_msgs, 128, lambda st, s: w.get_op(st)),
            w.TARGET_GET,
        ),
        Spec(
            "get 32 x 1 KiB, warm",
            _seeded("get1k", lambda s: s.get_seed_msgs, 1024, lambda st, s: w.get_op(st)),
            w.TARGET_GET,
        ),
        Spec(
            f"recovery after kill -9, {_mib(sz.recovery_bytes)} store",
            _recovery,
            w.TARGET_RECOVERY,
            "msgs/s and MB/s = recovered messages and commit-log bytes over open() time; "
            "the target is for a 1 GiB store",
        ),
    ]


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "n/a"
    if x >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}"


def run_report(sz: w.Sizes, impls: list[str], only: str | None) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    failures: list[str] = []
    for spec in specs(sz):
        if only and only.lower() not in spec.name.lower():
            continue
        target = spec.target
        row: dict = {
            "benchmark": spec.name,
            "target": target.describe() if target else None,
            "target_value": target.value if target else None,
            "target_unit": target.unit if target else None,
            "target_ratio": target.ratio if target else None,
            "note": spec.note,
        }
        if spec.ceiling:
            try:
                row["ceiling"] = spec.ceiling(sz).as_dict()
            except OSError as exc:
                failures.append(f"{spec.name} [disk ceiling]: {exc!r}")
        for impl in impls:
            try:
                m = spec.run(impl, sz)
                m.benchmark = spec.name
                row[impl] = m.as_dict()
            except (w.ImplementationUnavailable, NotImplementedError) as exc:
                row[impl] = None
                row.setdefault("skipped", {})[impl] = str(exc)
            except Exception as exc:
                row[impl] = None
                failures.append(f"{spec.name} [{impl}]: {exc!r}")
                traceback.print_exc()
            sys.stderr.write(f"  {spec.name} [{impl}] done\n")
        p, b = row.get("pyrmq"), row.get("baseline")
        row["ratio"] = p["msgs_per_s"] / b["msgs_per_s"] if p and b and b["msgs_per_s"] else None
        row["target_met"] = (
            target.met(p["msgs_per_s"], p["mb_per_s"], p["seconds"], row["ratio"])
            if target and p
            else None
        )
        rows.append(row)
    return rows, failures


def ceiling_note(c: dict[str, Any], pyrmq: dict[str, Any] | None) -> str:
    """How the disk bounds a sync-flush row, and how close pyrmq came."""
    how = {"buffered": "with pwrite + fdatasync", "direct": "with one O_DIRECT | O_DSYNC write"}
    ways = ", ".join(
        f"{v * 1e6:.0f} µs {how.get(k, k)}" for k, v in sorted(c["latencies_s"].items())
    )
    text = (
        f"one thread makes an append of {c['write_bytes']:,} B durable in {ways} (medians of up "
        f"to {c['writes']:,}), so {c['threads']} appenders that each wait for their own put "
        f"finish at most {c['threads'] * c['batch']} messages per "
        f"{c['durable_write_s'] * 1e6:.0f} µs: {_fmt_rate(c['msgs_per_s'])} msgs/s"
    )
    if pyrmq:
        text += f"; pyrmq reached {pyrmq['msgs_per_s'] / c['msgs_per_s']:.0%} of that"
    return text


def markdown(rows: list[dict], machine: dict) -> str:
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"build profile {machine['build_profile']}, mode {machine['mode']}"
        f"{w.idle_line(machine)}{w.storage_line(machine)}",
        "",
        "| benchmark | pyrmq msgs/s | pyrmq MB/s | baseline msgs/s | baseline MB/s | ratio "
        "| target | met? |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    notes = []
    for row in rows:
        p, b = row.get("pyrmq"), row.get("baseline")
        ratio = "n/a" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        if row["target"] is None:
            target, status = "none (reported only)", "-"
        else:
            target = row["target"]
            status = {True: "met", False: "missed", None: "n/a"}[row["target_met"]]
            if p and row["target_unit"] == "s":
                status += f" ({p['seconds']:.2f} s)"
            if row.get("ceiling"):
                status += f" (disk allows {_fmt_rate(row['ceiling']['msgs_per_s'])})"
        lines.append(
            f"| {row['benchmark']} | {_fmt_rate(p and p['msgs_per_s'])} | "
            f"{_fmt_rate(p and p['mb_per_s'])} | {_fmt_rate(b and b['msgs_per_s'])} | "
            f"{_fmt_rate(b and b['mb_per_s'])} | {ratio} | {target} | {status} |"
        )
        if row.get("note"):
            notes.append(f"- {row['benchmark']}: {row['note']}")
        if row.get("ceiling"):
            notes.append(f"- {row['benchmark']}: {ceiling_note(row['ceiling'], p)}")
        for impl, why in row.get("skipped", {}).items():
            if not w.pyrmq_available() and impl == "pyrmq":
                continue
            notes.append(f"- {row['benchmark']}: {impl} skipped ({why})")
        for impl in ("pyrmq", "baseline"):
            m = row.get(impl)
            if m and "open_s" in m["extra"]:
                rounds = ", ".join(f"{x:.3f}" for x in m["extra"].get("rounds_open_s", []))
                notes.append(
                    f"- {row['benchmark']}: {impl} open() took {m['extra']['open_s']:.3f} s "
                    f"(median; rounds, sorted: {rounds} s) for {m['msgs']:,} messages"
                )
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke run")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    parser.add_argument("--only", metavar="TEXT", help="run rows whose name contains TEXT")
    parser.add_argument(
        "--impl", choices=["both", *w.IMPLEMENTATIONS], default="both",
        help="implementations to run (default: both)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    mode = "smoke" if args.quick else w.bench_mode()
    sz = w.sizes(mode)
    impls = list(w.IMPLEMENTATIONS) if args.impl == "both" else [args.impl]
    machine = {**w.machine_info(), "mode": mode}
    started = time.perf_counter()
    rows, failures = run_report(sz, impls, args.only)
    elapsed = time.perf_counter() - started
    text = markdown(rows, machine)
    sys.stdout.write(text + "\n")
    if not w.pyrmq_available() and "pyrmq" in impls:
        sys.stdout.write(f"\n{w.not_built()}: only the baseline was measured.\n")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"machine": machine, "sizes": asdict(sz), "elapsed_s": elapsed, "results": rows},
                indent=2,
            )
            + "\n"
        )
    for failure in failures:
        sys.stderr.write(f"FAILED {failure}\n")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
