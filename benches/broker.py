"""Measure a real ``pyrmq serve`` process over TCP and print a Markdown table.

    python benches/broker.py            # full run (about 10 s)
    python benches/broker.py --quick    # a few seconds, for CI
    python benches/broker.py --json out.json

One ``pyrmq serve`` (name server and broker in one process, ASYNC_FLUSH, store in a temporary
directory, ephemeral ports) serves every row:

- ``send_sync``, official C++ client: ``rocketmq==0.4.4`` in a child process
  (``benches/cpp_send_child.py``), one producer, one thread, 128 B bodies, 4 queues. After a
  warm-up, each ``send_sync`` call is timed with ``time.perf_counter_ns``; the row gives its
  average, p50, p99 and max round trip, and msgs/s over the timed loop. Target: average <= 0.3 ms.
- ``send``, pyrmq's own asyncio ``RemotingClient``: the same sends, one in flight, from this
  process. Reported only: it tells the broker's share from the C++ client's.
- consume: the ``send`` row's messages read back one at a time, one request in flight, from
  this process. PULL_MESSAGE of one message (no commit, no suspend) is the baseline of the same
  run for POP_MESSAGE of one message followed by its ACK_MESSAGE (two round trips, as a pop
  consumer makes them); the pop row's note gives its time per message as a ratio of the pull's.
  Reported only.
- long-poll wake-up: client A parks a PULL_MESSAGE with the suspend flag (sysFlag 2|4,
  suspendTimeoutMillis 15000) at the queue's max offset; after ``PARK_S`` client B (a second
  ``RemotingClient``, so a second connection) sends one message to that queue. Two rows: from
  B's send answer arriving (the message is stored) to A's SUCCESS answer arriving, and from just
  before B's request is written to A's answer. Target (first row): p99 <= 1 ms, and no pull left
  to the broker's periodic re-check (every 5 s), which answers a pull whose arrival event was
  missed: a wake-up slower than ``SLOW_WAKE_S`` counts as one. Both answers are timestamped when
  the awaiting coroutine resumes, so the bench client's own event-loop turns are included; a pull
  answer handled in the same loop turn as the send answer can come out slightly negative.

Every loop stops at a count or a time limit, whichever comes first. Broker CPU per message is
the ``pyrmq serve`` process's user+system time (``/proc/<pid>/stat``, all threads, 10 ms ticks)
over the timed loop, divided by the messages; the C++ client's comes from ``getrusage`` in the
child. Percentiles are nearest-rank. The exit code is 1 when a row failed to run, not when a
target is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import math
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.rmq_client import client_supported_platform
from tests.compat.servers import ServerProcess, create_topic

from benches import workloads as w

CHILD = Path(__file__).resolve().with_name("cpp_send_child.py")

BODY_BYTES = 128
SEND_TOPIC = "BenchSendSync"
SEND_QUEUES = 4
REF_TOPIC = "BenchSendPy"
WAKE_TOPIC = "BenchLongPoll"
SUSPEND_MS = 15_000
PARK_S = 0.005
"""How long client A's pull gets to be parked before client B sends."""
RECHECK_S = 5.0
"""The broker's periodic held-pull check (long polling on)."""
SLOW_WAKE_S = 0.5
"""A wake-up at least this slow is taken for the periodic re-check, not the arrival event."""
WAKE_WAIT_S = RECHECK_S + 1.0
"""How long the bench waits for a held pull's answer after the send before it gives up."""

TARGET_SEND_AVG_MS = 0.3
TARGET_WAKE_P99_MS = 1.0

SEND_NAME = f"send_sync {BODY_BYTES} B, official C++ client (rocketmq 0.4.4), 1 thread"
SEND_TARGET = f"avg <= {TARGET_SEND_AVG_MS:g} ms"
REF_NAME = f"send {BODY_BYTES} B, pyrmq asyncio RemotingClient, 1 in flight"
PULL_NAME = f"consume {BODY_BYTES} B: pull 1, pyrmq asyncio RemotingClient, 1 in flight"
POP_NAME = f"consume {BODY_BYTES} B: pop 1 + ack, pyrmq asyncio RemotingClient, 1 in flight"
POP_GROUP = "CG_BENCH_POP"
WAKE_NAMES = (
    "long-poll wake-up: send answered -> held pull answered",
    "long-poll wake-up: send written -> held pull answered",
)
WAKE_TARGET = f"p99 <= {TARGET_WAKE_P99_MS:g} ms, none left to the {RECHECK_S:g} s re-check"

CPP_FIELDS = {"AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x"}
"""Extension fields the C++ client adds to every request (see tests/integration)."""


@dataclass(frozen=True)
class Plan:
    """Counts and time limits of one run; every loop stops at whichever comes first."""

    mode: str
    send_count: int
    send_warmup: int
    send_max_s: float
    """Time limit of each timed send loop."""
    child_timeout_s: float
    """Lifetime of the C++ client child: start, route lookup, warm-up, timed loop, shutdown."""
    wake_count: int
    wake_warmup: int
    wake_max_s: float
    ready_timeout_s: float
    """How long ``pyrmq serve`` may take to print its ready line."""

    @classmethod
    def of(cls, mode: str) -> Plan:
        if mode == "smoke":
            return cls(mode, 500, 100, 5.0, 15.0, 50, 5, 5.0, 15.0)
        return cls(mode, 5000, 500, 60.0, 120.0, 300, 10, 60.0, 30.0)


class RowFailed(Exception):
    """A row could not be measured; the message says why."""


class RowSkipped(Exception):
    """A row cannot run here (no C++ client for this platform, say)."""


# ---------------------------------------------------------------------------------------------
# Statistics and rows
# ---------------------------------------------------------------------------------------------


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        raise ValueError("no values")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summarize_ns(samples_ns: list[int]) -> dict[str, float]:
    if not samples_ns:
        return {}
    ms = sorted(s / 1e6 for s in samples_ns)
    return {
        "avg_ms": sum(ms) / len(ms),
        "min_ms": ms[0],
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "max_ms": ms[-1],
    }


def row(
    name: str,
    samples_ns: list[int],
    *,
    target: str | None,
    met: bool | None,
    msgs_per_s: float | None = None,
    note: str = "",
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "benchmark": name,
        "samples": len(samples_ns),
        **summarize_ns(samples_ns),
        "msgs_per_s": msgs_per_s,
        "target": target,
        "target_met": met,
        "note": note,
        "extra": extra or {},
        "samples_ns": samples_ns,
    }


def failed_row(name: str, target: str | None, why: str, *, skipped: bool = False) -> dict[str, Any]:
    return {
        "benchmark": name,
        "samples": 0,
        "msgs_per_s": None,
        "target": target,
        "target_met": None,
        "note": "",
        "extra": {},
        "samples_ns": [],
        "skipped" if skipped else "error": why,
    }


def process_cpu_s(pid: int) -> float | None:
    """User+system seconds of a process, all threads (Linux); None where /proc is missing."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def per_msg_us(cpu_before: float | None, cpu_after: float | None, msgs: int) -> float | None:
    if cpu_before is None or cpu_after is None or msgs <= 0:
        return None
    return (cpu_after - cpu_before) / msgs * 1e6


# ---------------------------------------------------------------------------------------------
# Row 1: send_sync with the official C++ client, in a child process
# ---------------------------------------------------------------------------------------------


def _child_python() -> str:
    return os.environ.get("PYRMQ_COMPAT_PYTHON") or sys.executable


def _log_tail(home: Path, lines: int = 20) -> str:
    logs = sorted((home / "logs" / "rocketmq-cpp").glob("*rocketmq-cpp.log*"))
    if not logs:
        return ""
    text = logs[-1].read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def cpp_send_sync(namesrv: str, broker_pid: int, plan: Plan, scratch: Path) -> dict[str, Any]:
    if not client_supported_platform():
        raise RowSkipped("rocketmq==0.4.4 ships librocketmq for x86_64 Linux only")
    if "PYRMQ_COMPAT_PYTHON" not in os.environ and importlib.util.find_spec("rocketmq") is None:
        raise RowSkipped("rocketmq==0.4.4 is not installed (pip install -e '.[dev]')")
    home = Path(tempfile.mkdtemp(prefix="cpp-home-", dir=scratch))
    timeout_s = plan.child_timeout_s
    cfg = {
        "namesrv": namesrv,
        "topic": SEND_TOPIC,
        "group": "PG_BENCH",
        "count": plan.send_count,
        "warmup": plan.send_warmup,
        "body_bytes": BODY_BYTES,
        "send_timeout_ms": 3000,
        "max_seconds": plan.send_max_s,
        "timeout_s": timeout_s,
    }
    env = {**os.environ, "HOME": str(home), "PYTHONDONTWRITEBYTECODE": "1"}
    with open(home / "child.stderr", "wb") as stderr:
        proc = subprocess.Popen(
            [_child_python(), str(CHILD), json.dumps(cfg)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            lines.put(raw.decode("utf-8", errors="replace"))
        lines.put(None)

    reader = threading.Thread(target=read, name="cpp-child-reader", daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s + 10.0
    events: list[dict[str, Any]] = []
    cpu_before = cpu_after = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RowFailed(f"the C++ client child did not finish within {timeout_s + 10:g} s")
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                break
            try:
                event = json.loads(line)
            except ValueError:
                continue
            events.append(event)
            if event.get("event") == "loop_started":
                cpu_before = process_cpu_s(broker_pid)
            elif event.get("event") == "loop_done":
                cpu_after = process_cpu_s(broker_pid)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    errors = [e["error"] for e in events if e.get("event") == "error"]
    done = [e for e in events if e.get("event") == "loop_done"]
    if errors or not done or proc.returncode != 0:
        stderr_tail = (home / "child.stderr").read_text(errors="replace")[-2000:]
        raise RowFailed(
            f"C++ client child exited {proc.returncode}: {'; '.join(errors) or 'no result'}\n"
            f"stderr (end):\n{stderr_tail}\nrocketmq-cpp log (end):\n{_log_tail(home)}"
        )
    result = done[0]
    rtt = [int(x) for x in result["rtt_ns"]]
    n = len(rtt)
    avg_ms = sum(rtt) / n / 1e6
    shutdown = [e for e in events if e.get("event") == "shutdown"]
    extra = {
        "warmup": plan.send_warmup,
        "loop_s": result["loop_s"],
        "broker_cpu_us_per_msg": per_msg_us(cpu_before, cpu_after, n),
        "client_cpu_us_per_msg": result["cpu_s"] / n * 1e6,
        "client_voluntary_switches_per_msg": result["voluntary_switches"] / n,
        "client_involuntary_switches_per_msg": result["involuntary_switches"] / n,
        "status": result["status"],
        "client_shutdown_s": shutdown[0]["shutdown_s"] if shutdown else None,
    }
    return row(
        SEND_NAME,
        rtt,
        target=SEND_TARGET,
        met=avg_ms <= TARGET_SEND_AVG_MS,
        msgs_per_s=n / result["loop_s"],
        note=(
            f"{plan.send_warmup} warm-up sends first; {SEND_QUEUES} queues, round robin; "
            "msgs/s = timed sends over the timed loop's wall time"
        ),
        extra=extra,
    )


# ---------------------------------------------------------------------------------------------
# Rows 2-4: pyrmq's own asyncio RemotingClient
# ---------------------------------------------------------------------------------------------


def _request(code: int, ext: dict[str, Any], body: bytes = b"") -> Any:
    """A request shaped as the C++ client sends it (as tests/integration/test_broker.py does)."""
    from pyrmq.remoting.command import RemotingCommand

    fields = {**CPP_FIELDS, **{k: str(v) for k, v in ext.items()}}
    request = RemotingCommand.request(code, fields, body)
    request.language = "CPP"
    request.version = 63
    return request


def send_request(topic: str, queue_id: int, body: bytes, uniq_key: str) -> Any:
    from pyrmq.remoting.protocol import RequestCode

    return _request(
        RequestCode.SEND_MESSAGE,
        {
            "producerGroup": "PG_BENCH",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": 4,
            "queueId": queue_id,
            "sysFlag": 0,
            "bornTimestamp": int(time.time() * 1000),
            "flag": 0,
            "properties": f"UNIQ_KEY\x01{uniq_key}\x02WAIT\x01true\x02",
            "reconsumeTimes": "0",
            "unitMode": "0",
            "batch": "0",
        },
        body,
    )


def pull_request(topic: str, queue_id: int, offset: int, suspend_ms: int) -> Any:
    from pyrmq.remoting.protocol import RequestCode

    return _request(
        RequestCode.PULL_MESSAGE,
        {
            "consumerGroup": "CG_BENCH",
            "topic": topic,
            "queueId": queue_id,
            "queueOffset": str(offset),
            "maxMsgNums": 32,
            "sysFlag": 4 | (2 if suspend_ms else 0),
            "commitOffset": "0",
            "subVersion": "0",
            "suspendTimeoutMillis": str(suspend_ms),
            "subscription": "*",
        },
    )


def _body(i: int) -> bytes:
    return f"bench-{i:08d}-".encode().ljust(BODY_BYTES, b"x")


def _check_sent(response: Any, what: str) -> int:
    from pyrmq.remoting.protocol import ResponseCode

    if response.code != ResponseCode.SUCCESS:
        raise RowFailed(f"{what}: send answered code {response.code}: {response.remark}")
    return int(response.ext_fields["queueOffset"])


async def py_send(broker: str, broker_pid: int, plan: Plan) -> dict[str, Any]:
    from pyrmq.remoting.client import RemotingClient

    client = RemotingClient()
    rtt: list[int] = []
    try:
        for i in range(plan.send_warmup):
            request = send_request(REF_TOPIC, i % SEND_QUEUES, _body(i), f"W{i}")
            _check_sent(await client.invoke(broker, request, timeout_s=5.0), "warm-up")
        cpu0, usage0 = process_cpu_s(broker_pid), resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        deadline = started + plan.send_max_s
        for i in range(plan.send_count):
            request = send_request(REF_TOPIC, i % SEND_QUEUES, _body(i), f"U{i}")
            t0 = time.perf_counter_ns()
            response = await client.invoke(broker, request, timeout_s=5.0)
            rtt.append(time.perf_counter_ns() - t0)
            _check_sent(response, f"send {i}")
            if time.perf_counter() > deadline:
                break
        loop_s = time.perf_counter() - started
        cpu1, usage1 = process_cpu_s(broker_pid), resource.getrusage(resource.RUSAGE_SELF)
    finally:
        await client.close()
    n = len(rtt)
    client_cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
    return row(
        REF_NAME,
        rtt,
        target=None,
        met=None,
        msgs_per_s=n / loop_s,
        note="reference for the row above: the same broker work, a Python client",
        extra={
            "warmup": plan.send_warmup,
            "loop_s": loop_s,
            "broker_cpu_us_per_msg": per_msg_us(cpu0, cpu1, n),
            "client_cpu_us_per_msg": client_cpu / n * 1e6,
        },
    )


def pop_request(topic: str) -> Any:
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.headers import PopMessageRequestHeader
    from pyrmq.remoting.protocol import RequestCode

    header = PopMessageRequestHeader(
        consumer_group=POP_GROUP,
        topic=topic,
        queue_id=-1,
        max_msg_nums=1,
        invisible_time=60_000,
        poll_time=0,
        born_time=time.time_ns() // 1_000_000,
        init_mode=0,
    )
    return RemotingCommand.request(RequestCode.POP_MESSAGE, header.to_ext())


def ack_request(topic: str, response: Any) -> Any:
    """The ACK_MESSAGE of the one message a pop answered, with the handle a Java client makes."""
    from pyrmq import _core
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.headers import AckMessageRequestHeader, PopMessageResponseHeader
    from pyrmq.remoting.protocol import RequestCode, ResponseCode

    if response.code != ResponseCode.SUCCESS:
        raise RowFailed(f"pop answered code {response.code}: {response.remark}")
    header = PopMessageResponseHeader.from_ext(response.ext_fields)
    (message,) = _core.decode_messages(response.body)
    queue_id, offset = message.queue_id, message.queue_offset
    extra = (
        f"{offset} {header.pop_time} {header.invisible_time} {header.revive_qid} 0 "
        f"broker-a {queue_id} {offset}"
    )
    ack = AckMessageRequestHeader(
        consumer_group=POP_GROUP, topic=topic, queue_id=queue_id, extra_info=extra, offset=offset
    )
    return RemotingCommand.request(RequestCode.ACK_MESSAGE, ack.to_ext())


async def py_consume(broker: str, broker_pid: int, plan: Plan) -> tuple[dict[str, Any], ...]:
    """Reads the ``send`` row's messages back: pulls of one, then pops of one with their acks."""
    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.protocol import ResponseCode

    client = RemotingClient()
    count = plan.send_count
    rows = []
    try:
        for name, pops in ((PULL_NAME, False), (POP_NAME, True)):
            rtt: list[int] = []
            cpu0 = process_cpu_s(broker_pid)
            started = time.perf_counter()
            deadline = started + plan.send_max_s
            for i in range(count):
                t0 = time.perf_counter_ns()
                if pops:
                    popped = await client.invoke(broker, pop_request(REF_TOPIC), timeout_s=5.0)
                    answer = await client.invoke(
                        broker, ack_request(REF_TOPIC, popped), timeout_s=5.0
                    )
                else:
                    request = pull_request(REF_TOPIC, i % SEND_QUEUES, i // SEND_QUEUES, 0)
                    request.ext_fields["maxMsgNums"] = "1"
                    answer = await client.invoke(broker, request, timeout_s=5.0)
                rtt.append(time.perf_counter_ns() - t0)
                if answer.code != ResponseCode.SUCCESS:
                    raise RowFailed(f"{name} {i}: code {answer.code}: {answer.remark}")
                if time.perf_counter() > deadline:
                    break
            loop_s = time.perf_counter() - started
            cpu1 = process_cpu_s(broker_pid)
            extra = {"loop_s": loop_s, "broker_cpu_us_per_msg": per_msg_us(cpu0, cpu1, len(rtt))}
            rows.append(
                row(name, rtt, target=None, met=None, msgs_per_s=len(rtt) / loop_s, extra=extra)
            )
    finally:
        await client.close()
    pull, pop = rows
    if pull.get("avg_ms") and pop.get("avg_ms"):
        pop["note"] = f"{pop['avg_ms'] / pull['avg_ms']:.2f}x the pull row's time per message"
    return tuple(rows)


async def _timed(awaitable: Any) -> tuple[Any, int]:
    """Awaits ``awaitable``; returns its result and when this coroutine resumed with it."""
    result = await awaitable
    return result, time.perf_counter_ns()


async def long_poll(
    broker: str, broker_pid: int, plan: Plan
) -> tuple[dict[str, Any], dict[str, Any]]:
    from pyrmq import _core
    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.protocol import ResponseCode

    holder, sender = RemotingClient(), RemotingClient()
    from_stored: list[int] = []
    from_write: list[int] = []
    held: asyncio.Task[tuple[Any, int]] | None = None
    try:
        first = await sender.invoke(broker, send_request(WAKE_TOPIC, 0, _body(0), "LP0"), 5.0)
        offset = _check_sent(first, "first long-poll message") + 1
        cpu0 = process_cpu_s(broker_pid)
        started = time.perf_counter()
        deadline = started + plan.wake_max_s
        for i in range(plan.wake_warmup + plan.wake_count):
            held = asyncio.create_task(
                _timed(
                    holder.invoke(
                        broker,
                        pull_request(WAKE_TOPIC, 0, offset, SUSPEND_MS),
                        timeout_s=SUSPEND_MS / 1000 + 5.0,
                    )
                )
            )
            await asyncio.sleep(PARK_S)
            if held.done():
                response, _ = held.result()
                raise RowFailed(
                    f"iteration {i}: the pull at offset {offset} was answered before the send "
                    f"(code {response.code}, {response.remark})"
                )
            body = _body(i + 1)
            request = send_request(WAKE_TOPIC, 0, body, f"LP{i + 1}")
            t_write = time.perf_counter_ns()
            sent = await sender.invoke(broker, request, timeout_s=5.0)
            t_stored = time.perf_counter_ns()
            stored_at = _check_sent(sent, f"iteration {i}")
            if stored_at != offset:
                raise RowFailed(f"iteration {i}: stored at offset {stored_at}, held at {offset}")
            try:
                response, t_woken = await asyncio.wait_for(held, WAKE_WAIT_S)
            except TimeoutError:
                raise RowFailed(
                    f"iteration {i}: the held pull was not answered within {WAKE_WAIT_S:g} s "
                    "of the send"
                ) from None
            if response.code != ResponseCode.SUCCESS:
                raise RowFailed(
                    f"iteration {i}: held pull answered code {response.code}: {response.remark}"
                )
            got = _core.decode_messages(response.body)
            if [m.body for m in got] != [body] or response.ext_fields.get("nextBeginOffset") != str(
                offset + 1
            ):
                raise RowFailed(f"iteration {i}: the woken pull did not return the message sent")
            offset += 1
            if i >= plan.wake_warmup:
                from_stored.append(t_woken - t_stored)
                from_write.append(t_woken - t_write)
            if time.perf_counter() > deadline:
                break
        loop_s = time.perf_counter() - started
        cpu1 = process_cpu_s(broker_pid)
    finally:
        if held is not None and not held.done():
            held.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await held
        await holder.close()
        await sender.close()
    n = len(from_stored)
    slow = sum(1 for s in from_stored if s >= SLOW_WAKE_S * 1e9)
    stats = summarize_ns(from_stored)
    extra = {
        "warmup": plan.wake_warmup,
        "park_s": PARK_S,
        "suspend_ms": SUSPEND_MS,
        "slow_wakeups": slow,
        "slow_wake_s": SLOW_WAKE_S,
        "loop_s": loop_s,
        "broker_cpu_us_per_round": per_msg_us(cpu0, cpu1, n + plan.wake_warmup),
    }
    stored_row = row(
        WAKE_NAMES[0],
        from_stored,
        target=WAKE_TARGET,
        met=stats["p99_ms"] <= TARGET_WAKE_P99_MS and slow == 0,
        note=(
            f"pull parked (sysFlag 2|4, suspend {SUSPEND_MS} ms) at the max offset {PARK_S * 1e3:g}"
            f" ms before a second connection sends 1 message; {plan.wake_warmup} warm-up rounds; "
            f"wake-ups >= {SLOW_WAKE_S:g} s (taken for re-check answers): {slow}"
        ),
        extra=extra,
    )
    write_row = row(
        WAKE_NAMES[1],
        from_write,
        target=None,
        met=None,
        note="the same rounds, timed from just before the send request is written",
        extra=extra,
    )
    return stored_row, write_row


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------


def start_serve(
    scratch: Path, name: str, flush: str, ready_timeout_s: float, *extra: str
) -> ServerProcess:
    """``pyrmq serve --flush FLUSH`` on ephemeral ports, its store and log under ``scratch``
    (``store{name}``, ``serve{name}.log``)."""
    return ServerProcess(
        [
            "serve",
            *extra,
            "--store", str(scratch / f"store{name}"),
            "--namesrv-port", "0",
            "--broker-port", "0",
            "--grpc-port", "0",
            "--flush", flush,
        ],
        scratch / f"serve{name}.log",
        ready_timeout_s=ready_timeout_s,
    )  # fmt: skip


def run_all(plan: Plan, scratch: Path) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    failures: list[str] = []
    server = start_serve(scratch, "", "async", plan.ready_timeout_s)
    server_info: dict[str, Any] = {"ready_line": server.ready_line}
    try:
        namesrv, broker = server.addresses()[:2]
        pid = server.proc.pid
        create_topic(broker, SEND_TOPIC, SEND_QUEUES)
        create_topic(broker, REF_TOPIC, SEND_QUEUES)
        create_topic(broker, WAKE_TOPIC, 1)

        def attempt(names: tuple[str, ...], target: str | None, fn: Any) -> None:
            try:
                got = fn()
                rows.extend(got if isinstance(got, tuple) else (got,))
            except RowSkipped as exc:
                rows.extend(failed_row(n, target, str(exc), skipped=True) for n in names)
            except Exception as exc:
                traceback.print_exc()
                failures.append(f"{names[0]}: {exc}")
                rows.extend(failed_row(n, target, str(exc)) for n in names)
            sys.stderr.write(f"  {names[0]} done\n")

        attempt((SEND_NAME,), SEND_TARGET, lambda: cpp_send_sync(namesrv, pid, plan, scratch))
        attempt((REF_NAME,), None, lambda: asyncio.run(py_send(broker, pid, plan)))
        attempt((PULL_NAME, POP_NAME), None, lambda: asyncio.run(py_consume(broker, pid, plan)))
        attempt(WAKE_NAMES, WAKE_TARGET, lambda: asyncio.run(long_poll(broker, pid, plan)))
    finally:
        code = server.stop()
        server_info["exit_code"] = code
        if code != 0:
            failures.append(f"pyrmq serve exited {code} (the end of its log is above)")
            with contextlib.suppress(OSError):
                sys.stderr.write((scratch / "serve.log").read_text()[-3000:] + "\n")
    return rows, failures, server_info


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def markdown(rows: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    lines = [
        f"Machine: {machine['cpu']}, {machine['cores']} cores, Python {machine['python']}, "
        f"build profile {machine['build_profile']}, mode {machine['mode']}; "
        "pyrmq serve on 127.0.0.1, ASYNC_FLUSH" + w.wake_line(machine) + w.idle_line(machine),
        "",
        "| benchmark | samples | avg ms | p50 ms | p99 ms | max ms | msgs/s | target | met? |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    notes = []
    for r in rows:
        if r["target"] is None:
            target, status = "none (reported only)", "-"
        else:
            target = r["target"]
            status = {True: "met", False: "missed", None: "n/a"}[r["target_met"]]
        if "error" in r:
            status = "failed"
        rate = r.get("msgs_per_s")
        lines.append(
            f"| {r['benchmark']} | {r['samples']:,} | {_ms(r.get('avg_ms'))} | "
            f"{_ms(r.get('p50_ms'))} | {_ms(r.get('p99_ms'))} | {_ms(r.get('max_ms'))} | "
            f"{'-' if rate is None else f'{rate:,.0f}'} | {target} | {status} |"
        )
        name = r["benchmark"]
        if r.get("note"):
            notes.append(f"- {name}: {r['note']}")
        extra = r.get("extra", {})
        cpu = w.cpu_per_msg(extra, 0)
        if cpu:
            line = f"- {name}: CPU per message: {cpu}"
            if extra.get("client_voluntary_switches_per_msg") is not None:
                line += (
                    f"; client context switches per message: "
                    f"{extra['client_voluntary_switches_per_msg']:.1f} voluntary, "
                    f"{extra['client_involuntary_switches_per_msg']:.1f} involuntary"
                )
            notes.append(line)
        if extra.get("broker_cpu_us_per_round") is not None and name == WAKE_NAMES[0]:
            notes.append(
                f"- {name}: broker CPU per round (one send, one held pull): "
                f"{extra['broker_cpu_us_per_round']:.0f} us"
            )
        notes += w.outcome_notes(r)
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return w.run_report(
        argv,
        description=__doc__.splitlines()[0],
        quick_help="a few seconds, for CI",
        label="broker",
        plan_of=Plan.of,
        run_all=run_all,
        markdown=markdown,
    )


if __name__ == "__main__":
    sys.exit(main())
