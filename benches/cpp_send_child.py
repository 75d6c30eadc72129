"""Child process of ``benches/broker.py``: times ``send_sync`` of the official C++ client.

    python benches/cpp_send_child.py '{"namesrv": "127.0.0.1:9876", "topic": "T", ...}'

Runs ``rocketmq==0.4.4`` (librocketmq, rocketmq-client-cpp 1.2.3), which keeps process-wide state
and may block inside C++, so it gets a process of its own. One producer, one thread: ``warmup``
sends first (route lookup, connection set-up), then up to ``count`` sends, each timed with
``time.perf_counter_ns`` around ``Producer.send_sync`` alone (the message is built before the
clock starts). The timed loop also stops after ``max_seconds``.

Prints JSON lines on stdout, each with an ``event``:

* ``started``: the producer started;
* ``loop_started``: the warm-up is over and the timed loop begins;
* ``loop_done``: ``rtt_ns`` (one per timed send, in order), ``loop_s`` (wall time of the timed
  loop, message building included), ``cpu_s``, ``voluntary_switches`` and
  ``involuntary_switches`` of this process (all threads) over the loop, ``status`` counts;
* ``error``: ``error`` (what failed);
* ``done``: always last: ``ok``, ``shutdown_s``.

Keys: ``namesrv``, ``topic``, ``group``, ``count``, ``warmup``, ``body_bytes``,
``send_timeout_ms``, ``max_seconds``, ``timeout_s``. A watchdog ends the process after
``timeout_s`` even while a C++ call blocks. librocketmq writes to stdout itself, so fd 1 is
pointed at stderr and the JSON goes to a private copy of the original stdout.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_TIMEOUT = 3


class _Out:
    def __init__(self) -> None:
        sys.stdout.flush()
        fd = os.dup(1)
        os.dup2(2, 1)
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, separators=(",", ":"))
        # The watchdog may fire while the main thread writes; never wait on the lock forever.
        locked = self._lock.acquire(timeout=2.0)
        try:
            self._file.write(line + "\n")
            self._file.flush()
        finally:
            if locked:
                self._lock.release()

    def finish(self, ok: bool, code: int, **fields: Any) -> None:
        """Writes the ``done`` line and ends the process without running C++ destructors."""
        self.emit("done", ok=ok, **fields)
        sys.stderr.flush()
        os._exit(code)


def _watchdog(out: _Out, seconds: float) -> None:
    def fire() -> None:
        out.emit("error", error=f"the child did not finish within {seconds:g} s")
        out.finish(False, EXIT_TIMEOUT)

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()


def _usage() -> tuple[float, int, int]:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_nvcsw, ru.ru_nivcsw


def run(cfg: dict[str, Any], out: _Out) -> bool:
    from rocketmq.client import Message, Producer, SendStatus

    topic = str(cfg["topic"])
    count, warmup = int(cfg.get("count", 5000)), int(cfg.get("warmup", 500))
    body = b"x" * int(cfg.get("body_bytes", 128))
    max_seconds = float(cfg.get("max_seconds", 60.0))
    timeout_ms = int(cfg.get("send_timeout_ms", 3000))

    producer = Producer(str(cfg.get("group", "PG_BENCH")), timeout=timeout_ms)
    producer.set_namesrv_addr(str(cfg["namesrv"]))
    producer.start()
    out.emit("started", pid=os.getpid())
    statuses: dict[str, int] = {}
    rtt_ns: list[int] = []

    def one() -> int:
        msg = Message(topic)
        msg.set_body(body)
        t0 = time.perf_counter_ns()
        result = producer.send_sync(msg)
        t1 = time.perf_counter_ns()
        name = result.status.name
        statuses[name] = statuses.get(name, 0) + 1
        if result.status is not SendStatus.OK:
            raise RuntimeError(f"send_sync answered {name}")
        return t1 - t0

    ok = True
    try:
        for _ in range(warmup):
            one()
        out.emit("loop_started")
        cpu0, vol0, invol0 = _usage()
        started = time.perf_counter()
        deadline = started + max_seconds
        for _ in range(count):
            rtt_ns.append(one())
            if time.perf_counter() > deadline:
                break
        loop_s = time.perf_counter() - started
        cpu1, vol1, invol1 = _usage()
        out.emit(
            "loop_done",
            rtt_ns=rtt_ns,
            loop_s=loop_s,
            cpu_s=cpu1 - cpu0,
            voluntary_switches=vol1 - vol0,
            involuntary_switches=invol1 - invol0,
            status=statuses,
        )
    except Exception as exc:
        out.emit("error", error=f"{type(exc).__name__}: {exc}", sent=len(rtt_ns), status=statuses)
        ok = False
    finally:
        shutdown_started = time.perf_counter()
        producer.shutdown()
        out.emit("shutdown", shutdown_s=time.perf_counter() - shutdown_started)
    return ok


def main(argv: list[str]) -> None:
    out = _Out()
    try:
        cfg = json.loads(argv[0])
    except (IndexError, ValueError) as exc:
        cfg = {"error": str(exc)}
    if not isinstance(cfg, dict) or not cfg.get("namesrv") or not cfg.get("topic"):
        out.emit("error", error=f"usage: cpp_send_child.py '<json with namesrv and topic>': {cfg}")
        out.finish(False, EXIT_FAILED)
    _watchdog(out, float(cfg.get("timeout_s", 120.0)))
    try:
        ok = run(cfg, out)
    except Exception as exc:
        out.emit("error", error=f"{type(exc).__name__}: {exc}")
        ok = False
    out.finish(ok, EXIT_OK if ok else EXIT_FAILED)


if __name__ == "__main__":
    main(sys.argv[1:])
