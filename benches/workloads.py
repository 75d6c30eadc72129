"""Workloads shared by the pytest-benchmark suites, the asv suites and ``report.py``.

Every benchmark runs the same workload against two implementations of the same formats:
``"pyrmq"`` (the Rust store behind ``pyrmq.store.MessageStore``) and ``"baseline"`` (the
pure-Python ``benches.baseline.pystore.PyStore``). ``open_store`` hides the few API differences.

Sizes come from the mode: ``PYRMQ_BENCH_MODE=smoke`` (seconds, for CI) or ``full`` (the default).
``PYRMQ_BENCH_RECOVERY_BYTES`` overrides the size of the store used for the recovery benchmark,
``PYRMQ_BENCH_RECOVERY_TAIL_BYTES`` how much of it was written after the last flush (checkpoint),
and ``PYRMQ_BENCH_DIR`` the directory where stores are created (default: the system temp dir).

Throughput: ``msgs/s`` counts messages (or ConsumeQueue units for scans); ``MB/s`` counts the
bytes the operation moves through the store (whole stored records for appends and reads, 20 bytes
per unit for scans, commit-log bytes for recovery), with 1 MB = 10**6 bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from benches.baseline.pystore import (
    CQ_UNIT_BYTES,
    PyStore,
    encode_properties,
    record_size,
    tag_codes_for,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
IMPLEMENTATIONS = ("pyrmq", "baseline")
TOPIC = "BenchTopic"
TAGS = tuple(f"Tag{c}" for c in "ABCDEFGH")
FILTER_TAG = TAGS[0]
MiB = 1024 * 1024
SEGMENT_BYTES = 128 * MiB
CQ_SEGMENT_BYTES = 6_000_000
RECOVERY_SEGMENT_BYTES = 1024 * MiB  # the default mappedFileSizeCommitLog
RECOVERY_QUEUES = 4
RECOVERY_BODY_BYTES = 1024
RECOVERY_WRITER_CONFIG = {
    "flush_interval_commit_log_ms": 3_600_000,
    "flush_interval_consume_queue_ms": 3_600_000,
}
SYNC_THREADS = 8
SYNC_BODY_BYTES = 128
GET_BATCH = 32
APPEND_BATCH = 32


@dataclass(frozen=True)
class Target:
    """An absolute target for pyrmq, optionally with a ratio to the baseline in the same run.

    ``unit`` is ``"msgs/s"`` or ``"units/s"`` (compared with msgs/s), ``"MB/s"`` (at least) or
    ``"s"`` (at most, compared with the measured seconds).
    """

    value: float
    unit: str
    ratio: float | None = None

    def describe(self) -> str:
        op = "<=" if self.unit == "s" else ">="
        value = f"{self.value:,.0f}" if self.value >= 100 else f"{self.value:g}"
        text = f"{op} {value} {self.unit}"
        return text if self.ratio is None else f"{text}, >= {self.ratio:g}x"

    def measured(self, msgs_per_s: float, mb_per_s: float, seconds: float) -> float:
        if self.unit == "s":
            return seconds
        return mb_per_s if self.unit == "MB/s" else msgs_per_s

    def absolute_met(self, msgs_per_s: float, mb_per_s: float, seconds: float) -> bool:
        value = self.measured(msgs_per_s, mb_per_s, seconds)
        return value <= self.value if self.unit == "s" else value >= self.value

    def met(
        self, msgs_per_s: float, mb_per_s: float, seconds: float, ratio: float | None
    ) -> bool | None:
        """None when the ratio is part of the target but could not be measured."""
        if not self.absolute_met(msgs_per_s, mb_per_s, seconds):
            return False
        if self.ratio is None:
            return True
        return None if ratio is None else ratio >= self.ratio


# The targets (absolute; the 30x is the ratio to the pure-Python baseline).
TARGET_APPEND_128B_BATCH = Target(2_000_000, "msgs/s", ratio=30)
TARGET_APPEND_4KIB_BATCH = Target(1_000, "MB/s")  # 1 GB/s
TARGET_SYNC_FLUSH = Target(50_000, "msgs/s")
TARGET_SCAN = Target(100_000_000, "units/s")
TARGET_GET = Target(1_000_000, "msgs/s")
TARGET_RECOVERY = Target(2, "s")  # for a 1 GiB store


def append_target(body_size: int, batch: int) -> Target | None:
    """Targets apply to batched appends; single puts are reported without one."""
    if batch == 1:
        return None
    return {128: TARGET_APPEND_128B_BATCH, 4096: TARGET_APPEND_4KIB_BATCH}.get(body_size)


@dataclass(frozen=True)
class Sizes:
    """How much data each workload seeds and how long each measurement may run."""

    mode: str
    get_seed_msgs: int
    scan_seed_units: int
    scan_chunk_units: int
    recovery_bytes: int
    recovery_tail_bytes: int
    max_seconds: float
    max_append_bytes: int
    repeats: int
    append_rounds: int
    warmup_bytes: int
    recovery_rounds: int
    durable_writes: int


def bench_mode() -> str:
    mode = os.environ.get("PYRMQ_BENCH_MODE", "full")
    if mode not in ("smoke", "full"):
        raise ValueError(f"PYRMQ_BENCH_MODE={mode!r}: expected 'smoke' or 'full'")
    return mode


def sizes(mode: str | None = None) -> Sizes:
    mode = mode or bench_mode()
    if mode == "smoke":
        s = Sizes(
            mode="smoke", get_seed_msgs=4096, scan_seed_units=5 * 4096, scan_chunk_units=4096,
            recovery_bytes=64 * MiB, recovery_tail_bytes=32 * MiB, max_seconds=0.25,
            max_append_bytes=32 * MiB, repeats=1, append_rounds=2, warmup_bytes=64 * MiB,
            recovery_rounds=3, durable_writes=50,
        )  # fmt: skip
    else:
        s = Sizes(
            mode="full", get_seed_msgs=100_000, scan_seed_units=32 * 32_768,
            scan_chunk_units=32_768, recovery_bytes=1024 * MiB, recovery_tail_bytes=32 * MiB,
            max_seconds=2.0,
            max_append_bytes=256 * MiB, repeats=3, append_rounds=5, warmup_bytes=512 * MiB,
            recovery_rounds=3, durable_writes=2000,
        )  # fmt: skip
    for key, env in (
        ("recovery_bytes", "PYRMQ_BENCH_RECOVERY_BYTES"),
        ("recovery_tail_bytes", "PYRMQ_BENCH_RECOVERY_TAIL_BYTES"),
    ):
        if os.environ.get(env):
            s = Sizes(**{**asdict(s), key: int(os.environ[env])})
    return s


@cache
def make_body(size: int) -> bytes:
    """Deterministic, incompressible body of ``size`` bytes."""
    return random.Random(size).randbytes(size)


def stored_bytes(body_size: int, tags: str | None = None, topic: str = TOPIC) -> int:
    """Size of the stored record for one message of this workload."""
    props = encode_properties({"TAGS": tags}) if tags else b""
    return record_size(body_size, len(topic.encode()), len(props))


@cache
def pyrmq_available() -> bool:
    try:
        import pyrmq._core
        import pyrmq.store  # noqa: F401
    except ImportError:
        return False
    return True


def not_built() -> str:
    """Why pyrmq rows are skipped, naming the package that was imported: from a checkout, pytest
    puts its ``python/`` first on the path, so a ``pip install .`` elsewhere is not the one used."""
    try:
        import pyrmq
    except ImportError:
        return "pyrmq is not importable"
    return f"pyrmq._core is not built in {Path(pyrmq.__file__).parent} (maturin develop --release)"


def build_profile() -> str:
    if not pyrmq_available():
        return "not built"
    import pyrmq._core as core

    fn = getattr(core, "build_profile", None)
    return str(fn()) if callable(fn) else "unknown"


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "build_profile": build_profile(),
        "mode": bench_mode(),
        "idle": idle_policy(),
        "storage": storage_info(bench_root()),
    }


def idle_policy(sys_root: Path = Path("/sys")) -> dict[str, Any]:
    """The cpuidle governor and, under ``haltpoll``, how long an idle vCPU polls before it halts.

    Both decide what waking a sleeping thread costs, which bounds group commit with few
    appenders: a guest that halts at once (``guest_halt_poll_ns`` 0) needs an IPI per wake-up.
    Empty where the kernel exposes neither."""
    policy: dict[str, Any] = {}
    cpuidle = sys_root / "devices/system/cpu/cpuidle"
    for name in ("current_governor_ro", "current_governor"):  # the second on older kernels
        with contextlib.suppress(OSError):
            policy["governor"] = (cpuidle / name).read_text().strip()
            break
    with contextlib.suppress(OSError, ValueError):
        poll = sys_root / "module/haltpoll/parameters/guest_halt_poll_ns"
        policy["guest_halt_poll_ns"] = int(poll.read_text())
    return policy


def storage_info(
    path: Path, sys_root: Path = Path("/sys"), mounts: Path = Path("/proc/self/mounts")
) -> dict[str, Any]:
    """The file system and block device under ``path``, and how the device makes writes durable.

    ``write_cache`` is ``write back`` when the device has a volatile cache that an fsync must
    flush, and ``fua`` whether it can make one write durable by itself; both set what a
    SYNC_FLUSH round costs. Keys are left out where the kernel does not expose them."""
    info: dict[str, Any] = {}
    path = path.resolve()
    with contextlib.suppress(OSError):
        best = ""
        for line in mounts.read_text().splitlines():
            fields = line.split()
            if len(fields) < 3:
                continue
            # The kernel writes a space in a mount point as \040, and so on.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[1])
            # The last of equally long matches was mounted over the others.
            if path.is_relative_to(point) and len(point) >= len(best):
                best, info["fs"] = point, fields[2]
    try:
        dev = path.stat().st_dev
        device = (sys_root / f"dev/block/{os.major(dev)}:{os.minor(dev)}").resolve(strict=True)
    except OSError:
        return info
    if (device / "partition").exists():
        device = device.parent
    info["device"] = device.name
    queue = device / "queue"
    for key in ("write_cache", "fua", "rotational"):
        with contextlib.suppress(OSError):
            info[key] = (queue / key).read_text().strip()
    return info


def storage_line(machine: dict[str, Any]) -> str:
    """The machine line's note on where stores are written, or nothing when it is unknown."""
    st = machine.get("storage") or {}
    if "device" not in st:
        return ""
    line = f"; stores on {st['device']}" + (f" ({st['fs']})" if "fs" in st else "")
    if "write_cache" in st:
        line += f", write cache {st['write_cache']}"
    if "fua" in st:
        line += ", FUA" if st["fua"] == "1" else ", no FUA"
    return line


def idle_line(machine: dict[str, Any]) -> str:
    """The machine line's note on the idle policy, or nothing when it is unknown."""
    idle = machine.get("idle") or {}
    if "governor" not in idle:
        return ""
    line = f"; cpuidle {idle['governor']}"
    poll = idle.get("guest_halt_poll_ns")
    return line if poll is None else f"{line}, guest halt poll {poll} ns"


_ECHO = """
import os, sys
r, w, n = map(int, sys.argv[1:])
for _ in range(n):
    os.read(r, 1)
    os.write(w, b"x")
"""


def wake_round_trip_us(cpus: tuple[int, int], rounds: int = 5000) -> float:
    """Microseconds per one-byte round trip between this process and a child over two pipes,
    this process pinned to ``cpus[0]`` and the child to ``cpus[1]``.

    Each trip wakes a sleeping process twice. On a VM that halts an idle vCPU at once, a wake
    across cores costs several times one on the same core, and the client's consume threads
    and event loop pay it at every hand-over."""
    to_child_r, to_child_w = os.pipe()
    from_child_r, from_child_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", _ECHO, str(to_child_r), str(from_child_w), str(rounds + 1)],
        pass_fds=(to_child_r, from_child_w),
    )
    os.close(to_child_r)
    os.close(from_child_w)
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpus[0]})
        os.sched_setaffinity(child.pid, {cpus[1]})
        os.write(to_child_w, b"x")  # the first trip waits for the child to start
        os.read(from_child_r, 1)
        start = time.perf_counter()
        for _ in range(rounds):
            os.write(to_child_w, b"x")
            os.read(from_child_r, 1)
        return (time.perf_counter() - start) / rounds * 1e6
    finally:
        os.sched_setaffinity(0, mine)
        os.close(to_child_w)
        os.close(from_child_r)
        child.wait(timeout=10)


def wake_costs() -> dict[str, float] | None:
    """Round trips across two cores and on one (see :func:`wake_round_trip_us`); ``None`` with
    fewer than two cores to run on or no affinity calls."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        return None
    return {
        "across_cores_us": wake_round_trip_us((cores[0], cores[1])),
        "one_core_us": wake_round_trip_us((cores[1], cores[1])),
    }


def wake_line(machine: dict[str, Any]) -> str:
    """The machine line's note on wake-up costs, or nothing when they were not measured."""
    wake = machine.get("wake")
    if not wake:
        return ""
    return (
        f"; pipe round trip between processes {wake['across_cores_us']:.1f} µs across cores, "
        f"{wake['one_core_us']:.1f} µs on one"
    )


class Store(Protocol):
    impl: str

    def put(self, topic: str, body: bytes, queue_id: int = 0, tags: str | None = None) -> Any: ...

    def put_batch(
        self, topic: str, bodies: Sequence[bytes], queue_id: int = 0, tags: str | None = None
    ) -> Any: ...

    def get(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> tuple[int, int, int]:
        """Returns (buffer bytes, message count, next begin offset)."""
        ...

    def scan(self, topic: str, queue_id: int, start: int, max_units: int, tags: str | None) -> int:
        """Returns the number of matched units."""
        ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    @property
    def max_phy_offset(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class BaselineStore:
    impl = "baseline"

    def __init__(self, path: Path, *, sync_flush: bool, segment_bytes: int, cq_segment_bytes: int):
        self.store = PyStore.open(
            path, segment_size=segment_bytes, cq_segment_size=cq_segment_bytes,
            sync_flush=sync_flush,
        )  # fmt: skip

    def put(self, topic: str, body: bytes, queue_id: int = 0, tags: str | None = None) -> Any:
        return self.store.put(topic, body, queue_id, tags)

    def put_batch(
        self, topic: str, bodies: Sequence[bytes], queue_id: int = 0, tags: str | None = None
    ) -> Any:
        return self.store.put_batch(topic, bodies, queue_id, tags)

    def get(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> tuple[int, int, int]:
        r = self.store.get(topic, queue_id, queue_offset, max_count)
        return len(r.buffer), r.message_count, r.next_begin_offset

    def scan(self, topic: str, queue_id: int, start: int, max_units: int, tags: str | None) -> int:
        return len(self.store.scan(topic, queue_id, start, max_units, tag_codes_for(tags)))

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    @property
    def max_phy_offset(self) -> int:
        return self.store.max_phy_offset

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.close()


class PyrmqStore:
    impl = "pyrmq"

    def __init__(
        self,
        path: Path,
        *,
        sync_flush: bool,
        segment_bytes: int,
        cq_segment_bytes: int,
        extra_config: dict[str, Any] | None = None,
    ):
        from pyrmq.config import StoreConfig
        from pyrmq.store import MessageStore

        config = StoreConfig(
            store_path_root_dir=str(path),
            mapped_file_size_commit_log=segment_bytes,
            mapped_file_size_consume_queue=cq_segment_bytes,
            flush_disk_type="SYNC_FLUSH" if sync_flush else "ASYNC_FLUSH",
            message_index_enable=False,
            **(extra_config or {}),
        )
        self.store = MessageStore.open(str(path), config)

    def put(self, topic: str, body: bytes, queue_id: int = 0, tags: str | None = None) -> Any:
        return self.store.put(topic, body, queue_id=queue_id, tags=tags)

    def put_batch(
        self, topic: str, bodies: Sequence[bytes], queue_id: int = 0, tags: str | None = None
    ) -> Any:
        return self.store.put_batch(topic, bodies, queue_id=queue_id, tags=tags)

    def get(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int
    ) -> tuple[int, int, int]:
        r = self.store.get(topic, queue_id, queue_offset, max_count=max_count)
        return len(r.buffer), r.message_count, r.next_begin_offset

    def scan(self, topic: str, queue_id: int, start: int, max_units: int, tags: str | None) -> int:
        scan = getattr(self.store, "scan_consume_queue", None)
        if scan is None:
            raise NotImplementedError("MessageStore.scan_consume_queue is not available")
        return scan(topic, queue_id, start, max_units, tags=tags)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self.store.max_offset(topic, queue_id)

    @property
    def max_phy_offset(self) -> int:
        return self.store.max_phy_offset

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.close()


class ImplementationUnavailable(RuntimeError):
    pass


def open_store(
    impl: str,
    path: str | os.PathLike[str],
    *,
    sync_flush: bool = False,
    segment_bytes: int = SEGMENT_BYTES,
    cq_segment_bytes: int = CQ_SEGMENT_BYTES,
    pyrmq_config: dict[str, Any] | None = None,
) -> Store:
    """Open a store of either implementation; ``pyrmq_config`` adds StoreConfig fields."""
    kwargs = {
        "sync_flush": sync_flush,
        "segment_bytes": segment_bytes,
        "cq_segment_bytes": cq_segment_bytes,
    }
    if impl == "baseline":
        return BaselineStore(Path(path), **kwargs)
    if impl == "pyrmq":
        if not pyrmq_available():
            raise ImplementationUnavailable(not_built())
        return PyrmqStore(Path(path), **kwargs, extra_config=pyrmq_config)
    raise ValueError(f"unknown implementation {impl!r}; expected one of {IMPLEMENTATIONS}")


def bench_root() -> Path:
    root = Path(os.environ.get("PYRMQ_BENCH_DIR") or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def scratch_dir(label: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=f"pyrmq-bench-{label}-", dir=bench_root()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def cpu_per_msg(extra: dict[str, Any], digits: int) -> str | None:
    """ "broker 12 us, client 3 us" from a row's ``extra`` (what it has of the two), or None."""
    cpu = [
        f"{label} {extra[key]:.{digits}f} us"
        for key, label in (
            ("broker_cpu_us_per_msg", "broker"),
            ("client_cpu_us_per_msg", "client"),
        )
        if extra.get(key) is not None
    ]
    return ", ".join(cpu) or None


def outcome_notes(row: dict[str, Any]) -> list[str]:
    """A report's notes on why a row was skipped or failed: the first line of each."""
    name = row["benchmark"]
    return [
        f"- {name}: {key}: {row[key].splitlines()[0]}" for key in ("skipped", "error") if key in row
    ]


def run_report(
    argv: list[str] | None,
    *,
    description: str,
    quick_help: str,
    label: str,
    plan_of: Callable[[str], Any],
    run_all: Callable[[Any, Path], tuple[list[dict[str, Any]], list[str], dict[str, Any]]],
    markdown: Callable[[list[dict[str, Any]], dict[str, Any]], str],
) -> int:
    """The command line of a report script (``benches/broker.py``, ``benches/client.py``):
    ``--quick`` and ``--json PATH``; runs ``run_all(plan, scratch)`` in a scratch directory
    named after ``label``, prints ``markdown(rows, machine)`` and returns 1 if a row failed."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write results as JSON")
    args = parser.parse_args(argv)
    mode = "smoke" if args.quick else bench_mode()
    plan = plan_of(mode)
    if not pyrmq_available():
        sys.stdout.write(f"{not_built()}: nothing to measure.\n")
        return 0
    machine = {**machine_info(), "mode": mode, "wake": wake_costs()}
    started = time.perf_counter()
    with scratch_dir(label) as scratch:
        rows, failures, server = run_all(plan, scratch)
    elapsed = time.perf_counter() - started
    sys.stdout.write(markdown(rows, machine) + "\n")
    if args.json:
        payload = {
            "machine": machine,
            "plan": asdict(plan),
            "server": server,
            "elapsed_s": elapsed,
            "results": rows,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    for failure in failures:
        sys.stderr.write(f"FAILED {failure}\n")
    return 1 if failures else 0


def warm_page_cache(nbytes: int) -> float:
    """Write ``nbytes`` of a throwaway mmap'd file page by page, then delete it.

    A fresh process's first writes into page-cache pages the guest has not used lately cost a
    host-side fault each; the freed pages of this file are what the next appends get, as in a
    long-running broker that recycles its page cache. Returns the seconds it took.
    """
    start = time.perf_counter()
    if nbytes <= 0:
        return 0.0
    page = mmap.PAGESIZE
    with scratch_dir("warmup") as path:
        fd = os.open(path / "warmup", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, nbytes)
            with mmap.mmap(fd, nbytes) as mm:
                for off in range(0, nbytes, page):
                    mm[off] = 1
        finally:
            os.close(fd)
    return time.perf_counter() - start


def wait_dispatched(
    store: Store, topic: str, queue_id: int, count: int, timeout_s: float = 60.0
) -> None:
    """Wait until ``count`` units are visible in the ConsumeQueue (dispatch may be asynchronous)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.0005
    while store.max_offset(topic, queue_id) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{store.impl}: topic={topic} queue_id={queue_id} has "
                f"{store.max_offset(topic, queue_id)} of {count} units after {timeout_s}s"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def seed(
    store: Store,
    count: int,
    body_size: int,
    *,
    topic: str = TOPIC,
    queue_id: int = 0,
    tags: Sequence[str] = TAGS,
    batch: int = APPEND_BATCH,
) -> int:
    """Append ``count`` messages in batches, cycling the tag per batch; returns record bytes."""
    body = make_body(body_size)
    bodies = [body] * batch
    written = 0
    total = 0
    i = 0
    while written < count:
        n = min(batch, count - written)
        tag = tags[i % len(tags)] if tags else None
        store.put_batch(topic, bodies[:n], queue_id, tag)
        total += n * stored_bytes(body_size, tag, topic)
        written += n
        i += 1
    wait_dispatched(store, topic, queue_id, count)
    return total


@dataclass
class Measurement:
    """One workload on one implementation."""

    benchmark: str
    impl: str
    msgs: int
    bytes: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def msgs_per_s(self) -> float:
        return self.msgs / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["msgs_per_s"] = self.msgs_per_s
        d["mb_per_s"] = self.mb_per_s
        return d


def run_bounded(
    op: Callable[[], tuple[int, int]],
    *,
    max_ops: int,
    max_seconds: float,
    warmup_ops: int = 0,
) -> tuple[int, int, float]:
    """Call ``op`` (which returns (msgs, bytes)) until ``max_ops`` calls or ``max_seconds``."""
    for _ in range(warmup_ops):
        op()
    msgs = nbytes = ops = 0
    clock = time.perf_counter
    start = clock()
    deadline = start + max_seconds
    now = start
    while ops < max_ops:
        m, b = op()
        msgs += m
        nbytes += b
        ops += 1
        now = clock()
        if now >= deadline:
            break
    return msgs, nbytes, now - start


def best_of(runs: list[Measurement]) -> Measurement:
    """The fastest round; the others' msgs/s go into ``extra["rounds_msgs_per_s"]``."""
    best = max(runs, key=lambda m: m.msgs_per_s)
    if len(runs) > 1:
        best.extra["rounds_msgs_per_s"] = [round(m.msgs_per_s, 1) for m in runs]
    return best


def append_op(
    store: Store, body_size: int, batch: int, queue_id: int = 0
) -> Callable[[], tuple[int, int]]:
    """One put (batch == 1) or one put_batch of ``batch`` bodies, tagged like real traffic."""
    body = make_body(body_size)
    tag = FILTER_TAG
    per_msg = stored_bytes(body_size, tag)
    if batch == 1:

        def put_one() -> tuple[int, int]:
            store.put(TOPIC, body, queue_id, tag)
            return 1, per_msg

        return put_one
    bodies = [body] * batch
    per_batch = per_msg * batch

    def put_many() -> tuple[int, int]:
        store.put_batch(TOPIC, bodies, queue_id, tag)
        return batch, per_batch

    return put_many


def get_op(
    store: Store, queue_id: int = 0, batch: int = GET_BATCH
) -> Callable[[], tuple[int, int]]:
    """Pull ``batch`` messages at a time, walking the queue and wrapping at its end."""
    end = store.max_offset(TOPIC, queue_id)
    state = {"offset": 0}

    def get_batch() -> tuple[int, int]:
        nbytes, count, nxt = store.get(TOPIC, queue_id, state["offset"], batch)
        state["offset"] = 0 if nxt >= end else nxt
        return count, nbytes

    return get_batch


def scan_op(
    store: Store, chunk_units: int, tags: str | None, queue_id: int = 0
) -> Callable[[], tuple[int, int]]:
    """Scan ``chunk_units`` units per call, walking the queue; counts units examined."""
    end = store.max_offset(TOPIC, queue_id)
    chunk = min(chunk_units, end)
    state = {"offset": 0, "matched": 0}

    def scan_chunk() -> tuple[int, int]:
        start = state["offset"]
        n = min(chunk, end - start)
        state["matched"] += store.scan(TOPIC, queue_id, start, n, tags)
        nxt = start + n
        state["offset"] = 0 if nxt >= end else nxt
        return n, n * CQ_UNIT_BYTES

    scan_chunk.state = state  # type: ignore[attr-defined]
    return scan_chunk


def run_threads(
    n_threads: int,
    make_op: Callable[[int], Callable[[], tuple[int, int]]],
    *,
    max_ops_per_thread: int,
    max_seconds: float,
) -> tuple[int, int, float]:
    """Run one op loop per thread, all released together; returns totals and wall time."""
    ops = [make_op(i) for i in range(n_threads)]
    barrier = threading.Barrier(n_threads + 1)
    totals = [(0, 0)] * n_threads
    errors: list[BaseException] = []
    deadline_box: list[float] = []

    def worker(i: int) -> None:
        op = ops[i]
        msgs = nbytes = 0
        barrier.wait()
        deadline = deadline_box[0]
        try:
            for _ in range(max_ops_per_thread):
                m, b = op()
                msgs += m
                nbytes += b
                if time.perf_counter() >= deadline:
                    break
        except BaseException as exc:
            errors.append(exc)
        totals[i] = (msgs, nbytes)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n_threads)]
    for t in threads:
        t.start()
    start = time.perf_counter()
    deadline_box.append(start + max_seconds)
    barrier.wait()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return sum(m for m, _ in totals), sum(b for _, b in totals), elapsed


def sync_flush_op(store: Store, queue_id: int, batch: int = 1) -> Callable[[], tuple[int, int]]:
    """One appender thread's op: a put (``batch == 1``) or a put_batch, on its own queue."""
    return append_op(store, SYNC_BODY_BYTES, batch, queue_id)


@dataclass(frozen=True)
class DiskCeiling:
    """The most that ``threads`` appenders, each waiting for its own put to be durable, can get
    from the disk under the stores: each put needs at least one durable write after it is
    appended, so none of them finishes more than one put per write latency."""

    threads: int
    batch: int
    write_bytes: int
    #: Median seconds of one thread's durable append, by each way measured (see
    #: :func:`durable_write_latencies`).
    latencies_s: dict[str, float]
    writes: int

    @property
    def durable_write_s(self) -> float:
        return min(self.latencies_s.values())

    @property
    def msgs_per_s(self) -> float:
        return self.threads * self.batch / self.durable_write_s

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "durable_write_s": self.durable_write_s,
            "msgs_per_s": self.msgs_per_s,
        }


def durable_write_latencies(
    directory: Path, nbytes: int, *, max_writes: int, max_seconds: float
) -> tuple[dict[str, float], int]:
    """Median seconds one thread takes to append ``nbytes`` to a file and make them durable,
    with ``pwrite`` + ``fdatasync`` (``buffered``) and, where the file system takes it, with
    one ``O_DIRECT | O_DSYNC`` write of as many whole pages (``direct``); and how many writes
    each made. The file's blocks are written and synced beforehand, so that no write pays for
    allocating them, one page per write: a small write into a larger cached folio would have the
    whole folio written back."""
    page = mmap.PAGESIZE
    block = -(-nbytes // page) * page
    path = directory / "durable-write"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        zeros = bytes(page)
        for off in range(0, block * max_writes, page):
            os.pwrite(fd, zeros, off)
        os.fsync(fd)
        data = make_body(nbytes)
        buffered = _timed_writes(
            lambda i: (os.pwrite(fd, data, i * nbytes), os.fdatasync(fd)), max_writes, max_seconds
        )
        latencies = {"buffered": statistics.median(buffered)}
        with contextlib.suppress(AttributeError, OSError):
            # Not everywhere: no O_DIRECT on tmpfs, nor outside Linux; EINVAL at write time on
            # some file systems.
            latencies["direct"] = statistics.median(
                _direct_writes(path, block, max_writes, max_seconds)
            )
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return latencies, len(buffered)


def _direct_writes(path: Path, block: int, max_writes: int, max_seconds: float) -> list[float]:
    fd = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
    aligned = mmap.mmap(-1, block)  # O_DIRECT wants an aligned buffer
    try:
        aligned.write(make_body(block))
        return _timed_writes(
            lambda i: os.pwritev(fd, [aligned], i * block), max_writes, max_seconds
        )
    finally:
        aligned.close()
        os.close(fd)


def _timed_writes(
    write: Callable[[int], object], max_writes: int, max_seconds: float
) -> list[float]:
    times: list[float] = []
    deadline = time.perf_counter() + max_seconds
    for i in range(max_writes):
        start = time.perf_counter()
        write(i)
        end = time.perf_counter()
        times.append(end - start)
        if end >= deadline:
            break
    return times


def disk_ceiling(sz: Sizes, batch: int) -> DiskCeiling:
    """:class:`DiskCeiling` of the sync-flush rows, measured under :func:`bench_root`."""
    nbytes = stored_bytes(SYNC_BODY_BYTES, FILTER_TAG) * batch
    with scratch_dir("durable-write") as path:
        latencies, writes = durable_write_latencies(
            path, nbytes, max_writes=sz.durable_writes, max_seconds=sz.max_seconds
        )
    return DiskCeiling(SYNC_THREADS, batch, nbytes, latencies, writes)


def copy_tree(src: Path, dst: Path) -> None:
    """Copy a store directory (sparse where ``cp`` can), then ``sync``.

    Every page of a fresh copy is dirty, unlike a crashed store's, so without the sync a store
    that flushes during recovery would be timed writing back the whole copy.
    """
    if shutil.which("cp"):
        subprocess.run(["cp", "-a", "--sparse=always", str(src), str(dst)], check=True)
    else:
        shutil.copytree(src, dst)
    os.sync()


@dataclass(frozen=True)
class CrashedStore:
    impl: str
    path: Path
    msgs_reported: int


def make_crashed_store(
    impl: str, path: Path, total_bytes: int, tail_bytes: int, timeout_s: float = 600.0
) -> CrashedStore:
    """Fill a store from a child process and SIGKILL it while it is still appending.

    The child flushes (and so checkpoints) once, ``tail_bytes`` before ``total_bytes``.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable,
        "-m",
        "benches.workloads",
        "crash-writer",
        impl,
        str(path),
        str(total_bytes),
        str(min(tail_bytes, total_bytes // 2)),
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    timer = threading.Timer(timeout_s, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.startswith("ready"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
    finally:
        timer.cancel()
    if not line.startswith("ready"):
        raise RuntimeError(
            f"crash writer for {impl} failed (rc={proc.returncode}): {stderr.strip()}"
        )
    return CrashedStore(impl, path, int(line.split()[1]))


def open_for_recovery(impl: str, path: Path) -> Store:
    return open_store(
        impl, path, segment_bytes=RECOVERY_SEGMENT_BYTES, cq_segment_bytes=CQ_SEGMENT_BYTES
    )


def recovered_counts(store: Store) -> tuple[int, int]:
    msgs = sum(store.max_offset(TOPIC, q) for q in range(RECOVERY_QUEUES))
    return msgs, store.max_phy_offset


def _crash_writer(impl: str, path: str, total_bytes: int, tail_bytes: int) -> None:
    """Child side of ``make_crashed_store``: write, flush once ``tail_bytes`` before the end,
    finish, say ready, keep writing until killed.

    The explicit flush is the only checkpoint either store gets (pyrmq's periodic flushes are
    pushed out past the writer's life), so both recoveries re-validate the same tail.
    """
    store = open_store(
        impl, path, segment_bytes=RECOVERY_SEGMENT_BYTES, cq_segment_bytes=CQ_SEGMENT_BYTES,
        pyrmq_config=RECOVERY_WRITER_CONFIG,
    )  # fmt: skip
    body = make_body(RECOVERY_BODY_BYTES)
    bodies = [body] * APPEND_BATCH
    per_batch = APPEND_BATCH * stored_bytes(RECOVERY_BODY_BYTES, FILTER_TAG)
    flush_at = total_bytes - tail_bytes
    flushed = False
    written = msgs = i = 0
    while written < total_bytes:
        if not flushed and written >= flush_at:
            store.flush()
            flushed = True
        store.put_batch(TOPIC, bodies, i % RECOVERY_QUEUES, TAGS[i % len(TAGS)])
        written += per_batch
        msgs += APPEND_BATCH
        i += 1
    sys.stdout.write(f"ready {msgs}\n")
    sys.stdout.flush()
    for _ in range(256):
        store.put_batch(TOPIC, bodies, i % RECOVERY_QUEUES, TAGS[i % len(TAGS)])
        i += 1
    os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) == 5 and argv[0] == "crash-writer":
        _crash_writer(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return 1
    sys.stderr.write("usage: python -m benches.workloads crash-writer IMPL PATH BYTES TAIL_BYTES\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
