"""``pyrmq bench producer|consumer|latency``: load generators for a running name server and broker.

They follow RocketMQ's benchmark tools (``producer.sh``, ``batchproducer.sh`` and ``consumer.sh``,
the ``Producer``, ``BatchProducer`` and ``Consumer`` classes of ``rocketmq-example``): the same
option letters where they exist, the same groups, and report lines with the same field names::

    Current Time: 2026-11-22 09:15:56,123 | Send TPS: 20113 | Max RT(ms): 4.012 | ...
    Current Time: 2026-11-22 09:15:56,123 | Consume TPS: 401234 | AVG(B2C) RT(ms): ...

Differences from RocketMQ's tools, on purpose:

* A line every ``--flush-interval`` seconds (1 s) over that interval alone, not every 10 s over a
  sliding 10 s window; RT figures are floats in ms (sub-ms RTs are the interesting ones here), and
  every line adds p50, p99 and p99.9 and MB/s (bodies, 1 MB = 10^6 bytes).
* ``-w`` counts asyncio tasks (producer) or consume threads (consumer), in each of ``-p``
  processes. TPS counts messages, so a batch of 32 counts 32; RT is per request.
* At the end, a ``[Complete]`` summary and one ``RESULT {json}`` line for scripts. Rates in the
  summary are over the active window: first send to last answer (producer), first message
  consumed to last (consumer).

``Send Failed`` counts requests that got no answer (connection, timeout, no route); ``Response
Failed`` counts requests a broker refused (a :class:`~pyrmq.errors.BrokerError`, also as the cause
of a :class:`~pyrmq.errors.SendError`), as RocketMQ counts ``MQBrokerException``. B2C is now minus
the message's born timestamp, S2C now minus its store timestamp; both timestamps are whole ms, so
B2C and S2C read up to 1 ms high.

``pyrmq bench latency`` runs a consumer process, then a producer process that sends at a fixed
rate; every body starts with the producer's ``time.time_ns()`` at the send, so the consumer
measures end-to-end latency with µs resolution (born timestamps are whole ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import cProfile
import dataclasses
import json
import logging
import math
import multiprocessing
import os
import queue
import random
import signal
import string
import struct
import sys
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import click

from pyrmq._core import received_times
from pyrmq.eventloop import loop_factory

if TYPE_CHECKING:
    from pyrmq.client.aio import MessageExt, Producer, PushConsumer

__all__ = ["bench", "percentile_ms"]

log = logging.getLogger(__name__)

DEFAULT_TOPIC: Final = "BenchmarkTest"
"""The topic RocketMQ's benchmark tools default to."""
LATENCY_TOPIC: Final = "BenchmarkLatency"
PRODUCER_GROUP: Final = "benchmark_producer"
TRANSACTION_PRODUCER_GROUP: Final = "benchmark_transaction_producer"
BATCH_PRODUCER_GROUP: Final = "benchmark_batch_producer"
CONSUMER_GROUP: Final = "benchmark_consumer"
LATENCY_GROUP: Final = "benchmark_latency"

ERROR_BACKOFF_S: Final = 0.5
"""A sender that failed waits this long before its next send (RocketMQ's tool waits 3 s)."""
WARN_EVERY_S: Final = 5.0
"""Send failures are logged at most this often per kind."""
POLL_S: Final = 0.05
"""How often a worker checks its stop conditions."""
ONEWAY_YIELD_EVERY: Final = 32
"""A oneway send waits for the broker only when the socket buffer is full, so a sender yields to
the loop this often."""
ASSIGN_TIMEOUT_S: Final = 30.0
"""How long a consumer waits for the topic's route and its first queues."""
PARK_S: Final = 0.3
"""After its queues are assigned, the latency consumer waits this long for its pulls to park."""
DRAIN_S: Final = 5.0
"""After the producers end, how long ``latency`` waits for the consumer to catch up."""
JOIN_S: Final = 30.0
"""How long a worker process may take to stop once told to."""

STAMP_MAGIC: Final = b"PYRMQLAT"
_STAMP = struct.Struct(">8sQB")
"""Latency body prefix: magic, ``time.time_ns()`` at the send, 1 for a warm-up message."""
STAMP_BYTES: Final = _STAMP.size

Role = Literal["producer", "consumer"]
Emit = Callable[[dict[str, Any]], None]


class StopFlag(Protocol):
    def is_set(self) -> bool: ...
    def set(self) -> None: ...


# --- statistics ------------------------------------------------------------------------------
# Latencies go into histograms of whole microseconds ({µs: count}): cheap to update, exact to
# 1 µs below 10 ms and to four significant digits above, so that the seconds-old messages of a
# long drain do not make a key per batch; small enough to send from worker processes to the
# parent every interval.

Hist = dict[int, int]


def bucket_us(us: int) -> int:
    """The histogram key of ``us``: itself below 10 ms, else cut to four significant digits.

    >>> bucket_us(9_999), bucket_us(41_894_571), bucket_us(-3)
    (9999, 41890000, -3)
    """
    if us < 10_000:
        return us
    step = int(10 ** (len(str(us)) - 4))
    return us - us % step


def merge_hist(into: Hist, other: Hist) -> None:
    for k, n in other.items():
        into[k] = into.get(k, 0) + n


def percentile_ms(hist: Hist, p: float) -> float:
    """Nearest-rank percentile of a µs histogram, in ms (the bucket's middle).

    >>> h = {100: 99, 900: 1}
    >>> percentile_ms(h, 50), percentile_ms(h, 99), percentile_ms(h, 99.9)
    (0.1005, 0.1005, 0.9005)
    """
    total = sum(hist.values())
    if not total:
        return math.nan
    rank = max(1, math.ceil(p / 100 * total))
    seen = 0
    for k in sorted(hist):
        seen += hist[k]
        if seen >= rank:
            return (k + 0.5) / 1000
    raise AssertionError("unreachable")


def summarize_hist(hist: Hist) -> dict[str, float]:
    """avg, p50, p99, p99.9 and max of a µs histogram, in ms; NaN when empty."""
    total = sum(hist.values())
    if not total:
        return {k: math.nan for k in ("avg", "p50", "p99", "p999", "max")}
    return {
        "avg": sum((k + 0.5) * n for k, n in hist.items()) / total / 1000,
        "p50": percentile_ms(hist, 50),
        "p99": percentile_ms(hist, 99),
        "p999": percentile_ms(hist, 99.9),
        "max": (max(hist) + 0.5) / 1000,
    }


class SendStats:
    """What the senders of one process did since the last snapshot; used in the loop only."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.msgs = 0
        self.requests = 0
        self.bytes = 0
        self.send_failed = 0
        self.response_failed = 0
        self.rt: Hist = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def snapshot(self) -> dict[str, Any]:
        snap = {
            "counts": {
                "msgs": self.msgs,
                "requests": self.requests,
                "bytes": self.bytes,
                "send_failed": self.send_failed,
                "response_failed": self.response_failed,
            },
            "hists": {"rt": self.rt},
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
        }
        self.reset()
        return snap


def e2e_bucket(body: bytes, now_ns: int, since_ns: int = 0) -> tuple[bool, int | None]:
    """Whether ``body`` carries a send stamp of this run (taken at ``since_ns`` or later), and
    the histogram key of its end-to-end latency (None without one or for a warm-up message).

    A new group may start at offset 0 of a queue (RocketMQ's rule while the queue's head is in
    memory), so an earlier run's stamped messages on the same topic are not counted.

    >>> e2e_bucket(_STAMP.pack(STAMP_MAGIC, 1_000_000, 0), 3_500_000)
    (True, 2500)
    >>> e2e_bucket(_STAMP.pack(STAMP_MAGIC, 1_000_000, 1), 3_500_000), e2e_bucket(b"x", 0)
    ((True, None), (False, None))
    >>> e2e_bucket(_STAMP.pack(STAMP_MAGIC, 1_000_000, 0), 3_500_000, since_ns=2_000_000)
    (False, None)
    """
    if body[:8] != STAMP_MAGIC:
        return False, None
    _, sent_ns, warmup = _STAMP.unpack_from(body)
    if sent_ns < since_ns:
        return False, None
    return True, None if warmup else bucket_us((now_ns - sent_ns) // 1000)


class ConsumeStats:
    """What the listeners of one process saw since the last snapshot; thread-safe."""

    def __init__(self, *, e2e: bool, limit: int | None = None, since_ns: int = 0) -> None:
        self._lock = threading.Lock()
        self._e2e = e2e
        self._since_ns = since_ns
        """Stamps taken before this are an earlier run's."""
        self.limit = limit
        """Messages past this many are not counted (``-q``)."""
        self._claimed = 0
        self.total_msgs = 0
        """Messages since the start (not reset by snapshots)."""
        self.reached = threading.Event()
        """Set once ``limit`` messages are counted."""
        self._reset()

    def _reset(self) -> None:
        self.msgs = 0
        self.bytes = 0
        self.stamped = 0
        self.b2c: Hist = {}
        self.s2c: Hist = {}
        self.e2e: Hist = {}
        self.first_ns: int | None = None
        self.last_ns: int | None = None

    def record(self, msgs: Sequence[MessageExt]) -> None:
        """Counts a batch and its B2C/S2C (and end-to-end) latencies, all at one ``now``.

        Born and store timestamps are whole ms and a batch holds few distinct ones, so each
        distinct value is turned into a µs bucket once, with its count; for a batch as the
        consumer delivers it, one call into the extension gathers them.
        """
        if self.limit is not None:
            msgs = self._claim(msgs, self.limit)
        if len(msgs) == 1:
            self._record_one(msgs[0])
            return
        if not msgs:
            return
        now_ns = time.time_ns()
        now_us = now_ns // 1000
        mono = time.monotonic_ns()
        times = received_times(msgs) if isinstance(msgs, list) else None
        if times is not None:
            borns, stores, size = times
        else:
            born_ms = [m.born_timestamp for m in msgs]
            store_ms = [m.store_timestamp for m in msgs]
            borns = [(ms, born_ms.count(ms)) for ms in set(born_ms)]
            stores = [(ms, store_ms.count(ms)) for ms in set(store_ms)]
            size = sum([len(m.body) for m in msgs])
        e2e: list[int] = []
        stamped = 0
        if self._e2e:
            for m in msgs:
                is_stamped, key = e2e_bucket(m.body, now_ns, self._since_ns)
                stamped += is_stamped
                if key is not None:
                    e2e.append(key)
        with self._lock:
            b2c, s2c = self.b2c, self.s2c
            for ms, n in borns:
                k = bucket_us(now_us - ms * 1000)
                b2c[k] = b2c.get(k, 0) + n
            for ms, n in stores:
                k = bucket_us(now_us - ms * 1000)
                s2c[k] = s2c.get(k, 0) + n
            if e2e:
                hist = self.e2e
                for k in e2e:
                    hist[k] = hist.get(k, 0) + 1
            self._count(len(msgs), size, stamped, mono)

    def _claim(self, msgs: Sequence[MessageExt], limit: int) -> Sequence[MessageExt]:
        """The part of ``msgs`` still under ``limit``; listeners on many threads race here."""
        with self._lock:
            take = min(len(msgs), max(0, limit - self._claimed))
            self._claimed += take
            if take and self._claimed == limit:
                self.reached.set()
        return msgs if take == len(msgs) else msgs[:take]

    def _record_one(self, m: MessageExt) -> None:
        """:meth:`record` of one message (RocketMQ's default batch), without the lists and sets
        that pay off only for many."""
        now_ns = time.time_ns()
        now_us = now_ns // 1000
        mono = time.monotonic_ns()
        body = m.body
        b2c_key = bucket_us(now_us - m.born_timestamp * 1000)
        s2c_key = bucket_us(now_us - m.store_timestamp * 1000)
        stamped, e2e_key = e2e_bucket(body, now_ns, self._since_ns) if self._e2e else (False, None)
        with self._lock:
            b2c, s2c = self.b2c, self.s2c
            b2c[b2c_key] = b2c.get(b2c_key, 0) + 1
            s2c[s2c_key] = s2c.get(s2c_key, 0) + 1
            if e2e_key is not None:
                self.e2e[e2e_key] = self.e2e.get(e2e_key, 0) + 1
            self._count(1, len(body), stamped, mono)

    def _count(self, msgs: int, size: int, stamped: int, mono: int) -> None:
        """Adds what one call recorded to the counters; holding ``_lock``."""
        self.stamped += stamped
        self.msgs += msgs
        self.total_msgs += msgs
        self.bytes += size
        if self.first_ns is None:
            self.first_ns = mono
        self.last_ns = mono

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            snap = {
                "counts": {"msgs": self.msgs, "bytes": self.bytes, "stamped": self.stamped},
                "hists": {"b2c": self.b2c, "s2c": self.s2c, "e2e": self.e2e},
                "first_ns": self.first_ns,
                "last_ns": self.last_ns,
            }
            self._reset()
        return snap


class Window:
    """Snapshots of any number of workers merged, per role."""

    def __init__(self) -> None:
        self.counts: dict[Role, dict[str, int]] = {"producer": {}, "consumer": {}}
        self.hists: dict[Role, dict[str, Hist]] = {"producer": {}, "consumer": {}}
        self.first_ns: dict[Role, int] = {}
        self.last_ns: dict[Role, int] = {}
        self.seen: set[Role] = set()

    def add(self, snap: dict[str, Any]) -> None:
        role: Role = snap["role"]
        self.seen.add(role)
        counts = self.counts[role]
        for k, n in snap["counts"].items():
            counts[k] = counts.get(k, 0) + n
        hists = self.hists[role]
        for name, h in snap["hists"].items():
            merge_hist(hists.setdefault(name, {}), h)
        if snap["first_ns"] is not None:
            first = self.first_ns.get(role)
            self.first_ns[role] = (
                snap["first_ns"] if first is None else min(first, snap["first_ns"])
            )
        if snap["last_ns"] is not None:
            self.last_ns[role] = max(self.last_ns.get(role, 0), snap["last_ns"])

    def count(self, role: Role, name: str) -> int:
        return self.counts[role].get(name, 0)

    def hist(self, role: Role, name: str) -> Hist:
        return self.hists[role].get(name, {})

    def active_s(self, role: Role) -> float:
        """First event to last, in seconds (0 if fewer than two events)."""
        first, last = self.first_ns.get(role), self.last_ns.get(role)
        if first is None or last is None:
            return 0.0
        return (last - first) / 1e9


# --- report lines ------------------------------------------------------------------------------


def _now_human() -> str:
    """RocketMQ's ``timeMillisToHumanString2``: ``yyyy-MM-dd HH:mm:ss,SSS``."""
    now = time.time()
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now * 1000) % 1000:03d}"
    )


def _f(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def _pcts(prefix: str, hist: Hist) -> str:
    s = summarize_hist(hist)
    return (
        f"p50{prefix} RT(ms): {_f(s['p50'])} | p99{prefix} RT(ms): {_f(s['p99'])} | "
        f"p99.9{prefix} RT(ms): {_f(s['p999'])}"
    )


def producer_line(w: Window, elapsed_s: float, *, done: bool = False) -> str:
    """The producer's report line, RocketMQ's fields first."""
    rt = summarize_hist(w.hist("producer", "rt"))
    msgs = w.count("producer", "msgs")
    rate_s = w.active_s("producer") if done else elapsed_s
    tps = msgs / rate_s if rate_s > 0 else 0.0
    mb_s = w.count("producer", "bytes") / rate_s / 1e6 if rate_s > 0 else 0.0
    head = (
        f"[Complete] Send Total: {msgs + w.count('producer', 'send_failed')}"
        if done
        else f"Current Time: {_now_human()}"
    )
    return (
        f"{head} | Send TPS: {tps:.0f} | Max RT(ms): {_f(rt['max'])} | "
        f"Average RT(ms): {_f(rt['avg'])} | Send Failed: {w.count('producer', 'send_failed')} | "
        f"Response Failed: {w.count('producer', 'response_failed')} | "
        f"{_pcts('', w.hist('producer', 'rt'))} | MB/s: {mb_s:.2f}"
    )


def consumer_line(w: Window, elapsed_s: float, *, done: bool = False) -> str:
    """The consumer's report line, RocketMQ's fields first; percentiles are of B2C."""
    b2c = summarize_hist(w.hist("consumer", "b2c"))
    s2c = summarize_hist(w.hist("consumer", "s2c"))
    msgs = w.count("consumer", "msgs")
    rate_s = w.active_s("consumer") if done else elapsed_s
    tps = msgs / rate_s if rate_s > 0 else 0.0
    mb_s = w.count("consumer", "bytes") / rate_s / 1e6 if rate_s > 0 else 0.0
    head = f"[Complete] Consume Total: {msgs}" if done else f"Current Time: {_now_human()}"
    return (
        f"{head} | Consume TPS: {tps:.0f} | AVG(B2C) RT(ms): {_f(b2c['avg'])} | "
        f"AVG(S2C) RT(ms): {_f(s2c['avg'])} | MAX(B2C) RT(ms): {_f(b2c['max'])} | "
        f"MAX(S2C) RT(ms): {_f(s2c['max'])} | {_pcts('(B2C)', w.hist('consumer', 'b2c'))} | "
        f"MB/s: {mb_s:.2f}"
    )


def latency_line(w: Window, elapsed_s: float, *, done: bool = False) -> str:
    """Send and consume rates, and end-to-end latency (send to listener) percentiles."""
    e2e = summarize_hist(w.hist("consumer", "e2e"))
    rt = summarize_hist(w.hist("producer", "rt"))
    sent, got = w.count("producer", "msgs"), w.count("consumer", "msgs")
    send_s = w.active_s("producer") if done else elapsed_s
    consume_s = w.active_s("consumer") if done else elapsed_s
    send_tps = sent / send_s if send_s > 0 else 0.0
    consume_tps = got / consume_s if consume_s > 0 else 0.0
    head = (
        f"[Complete] Send Total: {sent} | Consume Total: {got}"
        if done
        else (f"Current Time: {_now_human()}")
    )
    return (
        f"{head} | Send TPS: {send_tps:.0f} | Consume TPS: {consume_tps:.0f} | "
        f"Average RT(ms): {_f(rt['avg'])} | Send Failed: {w.count('producer', 'send_failed')} | "
        f"Response Failed: {w.count('producer', 'response_failed')} | "
        f"AVG(E2E) RT(ms): {_f(e2e['avg'])} | {_pcts('(E2E)', w.hist('consumer', 'e2e'))} | "
        f"MAX(E2E) RT(ms): {_f(e2e['max'])}"
    )


def _clean(result: dict[str, Any]) -> dict[str, Any]:
    """NaN becomes None, so the RESULT line is strict JSON.

    >>> _clean({"rt_ms": {"p50": math.nan, "p99": 1.5}, "msgs": 0})
    {'rt_ms': {'p50': None, 'p99': 1.5}, 'msgs': 0}
    """
    out: dict[str, Any] = {}
    for k, v in result.items():
        if isinstance(v, float) and math.isnan(v):
            v = None
        elif isinstance(v, dict):
            v = _clean(v)
        out[k] = v
    return out


def producer_result(w: Window, config: dict[str, Any]) -> dict[str, Any]:
    active = w.active_s("producer")
    msgs, requests = w.count("producer", "msgs"), w.count("producer", "requests")
    return _clean(
        {
            "bench": "producer",
            **config,
            "duration_s": round(active, 6),
            "msgs": msgs,
            "requests": requests,
            "send_tps": msgs / active if active > 0 else 0.0,
            "requests_per_s": requests / active if active > 0 else 0.0,
            "mb_per_s": w.count("producer", "bytes") / active / 1e6 if active > 0 else 0.0,
            "send_failed": w.count("producer", "send_failed"),
            "response_failed": w.count("producer", "response_failed"),
            "rt_ms": summarize_hist(w.hist("producer", "rt")),
            **_cpu(w, "producer", msgs),
        }
    )


def _cpu(w: Window, role: Role, msgs: int) -> dict[str, float | None]:
    """CPU seconds of the workers (all their threads) from their start (after the warm-up
    send) to their end, and per message in µs."""
    cpu_s = w.count(role, "cpu_us") / 1e6
    return {"cpu_s": cpu_s, "cpu_us_per_msg": cpu_s / msgs * 1e6 if msgs else None}


def consumer_result(w: Window, config: dict[str, Any]) -> dict[str, Any]:
    active = w.active_s("consumer")
    msgs = w.count("consumer", "msgs")
    return _clean(
        {
            "bench": "consumer",
            **config,
            "duration_s": round(active, 6),
            "msgs": msgs,
            "consume_tps": msgs / active if active > 0 else 0.0,
            "mb_per_s": w.count("consumer", "bytes") / active / 1e6 if active > 0 else 0.0,
            "b2c_ms": summarize_hist(w.hist("consumer", "b2c")),
            "s2c_ms": summarize_hist(w.hist("consumer", "s2c")),
            **_cpu(w, "consumer", msgs),
        }
    )


def latency_result(w: Window, config: dict[str, Any]) -> dict[str, Any]:
    send_s, consume_s = w.active_s("producer"), w.active_s("consumer")
    sent, got = w.count("producer", "msgs"), w.count("consumer", "msgs")
    e2e = w.hist("consumer", "e2e")
    return _clean(
        {
            "bench": "latency",
            **config,
            "sent": sent,
            "consumed": got,
            "stamped": w.count("consumer", "stamped"),
            "samples": sum(e2e.values()),
            "send_tps": sent / send_s if send_s > 0 else 0.0,
            "consume_tps": got / consume_s if consume_s > 0 else 0.0,
            "send_failed": w.count("producer", "send_failed"),
            "response_failed": w.count("producer", "response_failed"),
            "e2e_ms": summarize_hist(e2e),
            "rt_ms": summarize_hist(w.hist("producer", "rt")),
            "b2c_ms": summarize_hist(w.hist("consumer", "b2c")),
        }
    )


class Reporter:
    """Merges worker snapshots; prints a line whenever the leading worker (the lowest live
    worker id) reports, over everything that arrived since the previous line."""

    def __init__(
        self,
        workers: Iterable[int],
        line: Callable[[Window, float], str],
        echo: Callable[[str], None] = click.echo,
    ) -> None:
        self.live = set(workers)
        self.line = line
        self.echo = echo
        self.pending = Window()
        self.total = Window()
        self.ready: set[int] = set()
        self.errors: list[str] = []

    def feed(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        worker = message["worker"]
        if kind == "ready":
            self.ready.add(worker)
        elif kind == "error":
            self.errors.append(f"worker {worker}: {message['error']}")
            self.live.discard(worker)
        elif kind == "snapshot":
            leader = min(self.live) if self.live else worker
            self.pending.add(message)
            self.total.add(message)
            if message["final"]:
                self.live.discard(worker)
            if worker == leader and message["elapsed_s"] > 0 and not message["final"]:
                self.echo(self.line(self.pending, message["elapsed_s"]))
                self.pending = Window()


# --- workers ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerPlan:
    namesrv: str
    topic: str
    group: str
    body_bytes: int
    concurrency: int
    batch: int
    oneway: bool
    duration_s: float | None
    count: int | None
    interval_s: float
    transaction: bool = False
    """send_in_transaction: a half message, committed once the (empty) local transaction ran."""
    rate: float | None = None
    """Messages per second across the process (``latency``); None sends as fast as it can."""
    stamp: bool = False
    """Bodies start with the send time (``latency``)."""
    warmup_s: float = 0.0
    """Stamped messages sent in the first seconds are marked warm-up."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerPlan:
    namesrv: str
    topic: str
    group: str
    expression: str
    concurrency: int
    consume_batch: int
    pull_batch: int
    listener: Literal["thread", "loop", "iter"]
    from_where: Literal["first", "last"]
    duration_s: float | None
    count: int | None
    interval_s: float
    e2e: bool = False


def _body(size: int) -> bytes:
    """Random alphanumeric bytes, as RocketMQ's tool fills its bodies."""
    alphabet = string.ascii_letters + string.digits
    return "".join(random.choices(alphabet, k=size)).encode()


def pace(
    loop: asyncio.AbstractEventLoop,
    tick: Callable[[], object],
    interval_ns: int,
    stopped: threading.Event,
    count: int | None = None,
) -> None:
    """On a thread: calls ``tick`` in ``loop`` at ``start + i * interval_ns`` for i = 1, 2, ...
    (``count`` times, or until ``stopped``), late calls at once, so the schedule stays open
    loop whatever the loop is doing."""
    start = time.monotonic_ns()
    i = 0
    while not stopped.is_set() and (count is None or i < count):
        i += 1
        wait_ns = start + i * interval_ns - time.monotonic_ns()
        if wait_ns > 0:
            time.sleep(wait_ns / 1e9)
        if stopped.is_set():
            return
        try:
            loop.call_soon_threadsafe(tick)
        except RuntimeError:  # the loop closed while this thread slept
            return


def _classify(exc: BaseException) -> str:
    """``response_failed`` for a broker's refusal (also as a SendError's cause), else
    ``send_failed``."""
    from pyrmq.errors import BrokerError

    if isinstance(exc, BrokerError) or isinstance(exc.__cause__, BrokerError):
        return "response_failed"
    return "send_failed"


class _Ticker:
    """Stop conditions and the snapshot every interval, for one worker."""

    def __init__(
        self,
        worker: int,
        role: Role,
        emit: Emit,
        stop: StopFlag,
        interval_s: float,
        duration_s: float | None,
    ) -> None:
        self.worker = worker
        self.role = role
        self.emit = emit
        self.stop = stop
        self.interval_s = interval_s
        self.duration_s = duration_s
        self.started = self.last_emit = time.monotonic()
        self.deadline: float | None = None
        self.restart()

    def restart(self) -> None:
        """Starts the clock (and the duration) now."""
        self.started = self.last_emit = time.monotonic()
        self.last_cpu = time.process_time()
        self.deadline = self.started + self.duration_s if self.duration_s else None

    def expired(self) -> bool:
        return self.stop.is_set() or (
            self.deadline is not None and time.monotonic() >= self.deadline
        )

    def send(self, snap: dict[str, Any], *, final: bool) -> None:
        """Emits ``snap`` with the time and the CPU time (this process, all threads) since the
        previous one."""
        now, cpu = time.monotonic(), time.process_time()
        snap["counts"]["cpu_us"] = int((cpu - self.last_cpu) * 1e6)
        self.emit(
            {
                "type": "snapshot",
                "worker": self.worker,
                "role": self.role,
                "final": final,
                "elapsed_s": now - self.last_emit,
                **snap,
            }
        )
        self.last_emit, self.last_cpu = now, cpu

    def due(self) -> bool:
        return time.monotonic() - self.last_emit >= self.interval_s


async def run_producer(plan: ProducerPlan, worker: int, emit: Emit, stop: StopFlag) -> None:
    """Sends until the duration, the count or ``stop``; emits a snapshot every interval."""
    from pyrmq.client.aio import Message, Producer, TransactionProducer, TransactionState
    from pyrmq.errors import PyrmqError

    def commit(*_: Any) -> TransactionState:
        return TransactionState.COMMIT

    stats = SendStats()
    if plan.transaction:
        transactions = TransactionProducer(
            plan.group, plan.namesrv, checker=commit, compress_over=sys.maxsize
        )
        producer: Producer = transactions
    else:
        producer = Producer(plan.group, plan.namesrv, compress_over=sys.maxsize)
    await producer.start()
    body = _body(plan.body_bytes)
    topic, batch, count = plan.topic, plan.batch, plan.count
    issued = 0
    finished = False
    rate = plan.rate
    interval_ns = int(1e9 / rate) if rate else 0
    slots = asyncio.Semaphore(plan.concurrency)
    paced: set[asyncio.Task[None]] = set()
    ticker = _Ticker(worker, "producer", emit, stop, plan.interval_s, plan.duration_s)
    warmup_until = time.monotonic() + plan.warmup_s
    warned: dict[str, float] = {}

    def make_body() -> bytes:
        if not plan.stamp:
            return body
        warm = 1 if time.monotonic() < warmup_until else 0
        return _STAMP.pack(STAMP_MAGIC, time.time_ns(), warm) + body[STAMP_BYTES:]

    def account(t0: int, n: int, exc: BaseException | None) -> None:
        t1 = time.perf_counter_ns()
        if exc is None:
            stats.msgs += n
            stats.requests += 1
            stats.bytes += n * plan.body_bytes
            k = (t1 - t0) // 1000
            stats.rt[k] = stats.rt.get(k, 0) + 1
        else:
            kind = _classify(exc)
            if kind == "response_failed":
                stats.response_failed += 1
            else:
                stats.send_failed += 1
            if time.monotonic() - warned.get(kind, -math.inf) >= WARN_EVERY_S:
                warned[kind] = time.monotonic()
                log.warning("%s to %s: %s", kind.replace("_", " "), topic, exc)
        mono = time.monotonic_ns()
        if stats.first_ns is None:
            stats.first_ns = mono - (t1 - t0)
        stats.last_ns = mono

    async def send_one(n: int) -> bool:
        """One request of ``n`` messages; False after a failure (and its back-off)."""
        if batch > 1:
            msgs = [Message(topic, body) for _ in range(n)]
            t0 = time.perf_counter_ns()
            try:
                await producer.send_batch(msgs)
            except PyrmqError as e:
                account(t0, n, e)
                return False
        else:
            msg = Message(topic, make_body())
            t0 = time.perf_counter_ns()
            try:
                if plan.oneway:
                    await producer.send_oneway(msg)
                elif plan.transaction:
                    await transactions.send_in_transaction(msg, commit)
                else:
                    await producer.send(msg)
            except PyrmqError as e:
                account(t0, 1, e)
                return False
        account(t0, n, None)
        return True

    def take() -> int:
        """Claims the next request's messages; 0 when the count is used up."""
        nonlocal issued
        n = batch if count is None else min(batch, count - issued)
        if n <= 0:
            return 0
        issued += n
        return n

    async def sender() -> None:
        sent = 0
        while not finished:
            n = take()
            if not n:
                return
            if not await send_one(n):
                await asyncio.sleep(ERROR_BACKOFF_S)
            if plan.oneway:
                sent += 1
                if sent % ONEWAY_YIELD_EVERY == 0:
                    await asyncio.sleep(0)

    async def paced_send() -> None:
        try:
            await send_one(1)
        finally:
            slots.release()

    async def pacer() -> None:
        """Open loop: message i is due at start + i / rate, whatever the answers do.

        A thread keeps the time: under uvloop an ``asyncio.sleep`` below a millisecond returns
        at once, so an in-loop pacer would spin and steal the CPU it is measuring.
        """
        loop = asyncio.get_running_loop()
        due = asyncio.Event()
        due_count = 0
        issued = 0
        stopped = threading.Event()

        def tick() -> None:
            nonlocal due_count
            due_count += 1
            due.set()

        thread = threading.Thread(
            target=pace, args=(loop, tick, interval_ns, stopped), name="bench-pacer", daemon=True
        )
        thread.start()
        try:
            while not finished:
                await due.wait()
                due.clear()
                while issued < due_count and not finished:
                    if not take():
                        return
                    await slots.acquire()
                    task = loop.create_task(paced_send())
                    paced.add(task)
                    task.add_done_callback(paced.discard)
                    issued += 1
        finally:
            stopped.set()

    try:
        await _warm_up(producer, topic, body)
        ticker.restart()
        warmup_until = ticker.started + plan.warmup_s
        if rate:
            tasks = [asyncio.get_running_loop().create_task(pacer())]
        else:
            tasks = [
                asyncio.get_running_loop().create_task(sender()) for _ in range(plan.concurrency)
            ]
        while True:
            await asyncio.sleep(POLL_S)
            if ticker.expired() or all(t.done() for t in tasks):
                break
            if ticker.due():
                ticker.send(stats.snapshot(), final=False)
        finished = True
        # In-flight requests finish (each within the send timeout) and are counted.
        await asyncio.gather(*tasks, *paced, return_exceptions=True)
        for t in tasks:
            failure = None if t.cancelled() else t.exception()
            if failure is not None:
                raise failure
        ticker.send(stats.snapshot(), final=True)
    finally:
        await producer.shutdown()


async def _warm_up(producer: Producer, topic: str, body: bytes) -> None:
    """One send (which creates the topic if the broker auto-creates topics), then waits for the
    topic's own route: until the name server has it, every send looks it up again, and many
    senders starting at once would queue on that lookup (uncounted here)."""
    from pyrmq.client.aio import Message

    await producer.send(Message(topic, body))
    deadline = time.monotonic() + ASSIGN_TIMEOUT_S
    while await producer.instance.update_route(topic) is None:
        if time.monotonic() > deadline:
            raise click.ClickException(f"no route for {topic} within {ASSIGN_TIMEOUT_S:g} s")
        await asyncio.sleep(0.1)
    await producer.fetch_publish_queues(topic)


async def _ensure_topic(namesrv: str, topic: str) -> None:
    """Creates ``topic`` (one unstamped message through TBW102) unless it has a route, so that a
    consumer started before any producer finds queues at once."""
    from pyrmq.client.aio import Message, Producer

    async with Producer(f"{LATENCY_GROUP}_probe", namesrv) as producer:
        if await producer.instance.update_route(topic) is None:
            await producer.send(Message(topic, b"pyrmq bench: creates the topic"))


async def _await_assignment(consumer: PushConsumer, topic: str, timeout_s: float | None) -> None:
    """Waits until the consumer holds queues of ``topic``. A topic created after the consumer
    started would otherwise wait for the next route refresh (30 s) and rebalance (20 s)."""
    from pyrmq.errors import PyrmqError

    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while not any(q.topic == topic for q in consumer.assigned_queues()):
        if deadline is not None and time.monotonic() > deadline:
            raise click.ClickException(
                f"no queue of {topic} assigned to {consumer.group} within {timeout_s:g} s"
            )
        with contextlib.suppress(PyrmqError):
            if await consumer.instance.update_route(topic) is not None:
                await consumer.rebalance()
        await asyncio.sleep(0.2 if deadline is not None else 1.0)


async def run_consumer(plan: ConsumerPlan, worker: int, emit: Emit, stop: StopFlag) -> None:
    """Consumes until the duration, the count or ``stop``; emits a snapshot every interval."""
    from pyrmq.client.aio import ConsumeContext, ConsumeStatus, PushConsumer

    stats = ConsumeStats(e2e=plan.e2e, limit=plan.count, since_ns=time.time_ns())
    consumer = PushConsumer(
        plan.group,
        plan.namesrv,
        consume_from_where=(
            "CONSUME_FROM_FIRST_OFFSET"
            if plan.from_where == "first"
            else "CONSUME_FROM_LAST_OFFSET"
        ),
        consume_thread_max=plan.concurrency,
        consume_message_batch_max_size=plan.consume_batch,
        pull_batch_size=plan.pull_batch,
    )

    def on_thread(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        stats.record(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async def on_loop(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        stats.record(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async def iterate() -> None:
        async for m in consumer:
            stats.record((m,))

    if plan.listener == "thread":
        consumer.subscribe(plan.topic, plan.expression, on_thread)
    elif plan.listener == "loop":
        consumer.subscribe(plan.topic, plan.expression, on_loop)
    else:
        consumer.subscribe(plan.topic, plan.expression)
    if plan.e2e:
        await _ensure_topic(plan.namesrv, plan.topic)
    ticker = _Ticker(worker, "consumer", emit, stop, plan.interval_s, plan.duration_s)
    await consumer.start()
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    try:
        if plan.listener == "iter":
            tasks.append(loop.create_task(iterate()))
        if plan.e2e:
            # The producers start once this consumer is ready: its pulls must be parked.
            await _await_assignment(consumer, plan.topic, ASSIGN_TIMEOUT_S)
            await asyncio.sleep(PARK_S)
        else:
            tasks.append(loop.create_task(_await_assignment(consumer, plan.topic, None)))
        emit({"type": "ready", "worker": worker})
        ticker.restart()
        while True:
            await asyncio.sleep(POLL_S)
            if ticker.expired() or stats.reached.is_set():
                break
            if ticker.due():
                ticker.send(stats.snapshot(), final=False)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await consumer.shutdown()
    ticker.send(stats.snapshot(), final=True)


# --- running workers ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSpec:
    worker: int
    plan: ProducerPlan | ConsumerPlan


class WorkerStuckError(Exception):
    """A worker did not end in time after it was told to stop (or its duration ran out)."""


async def _run_worker(spec: WorkerSpec, emit: Emit, stop: StopFlag) -> None:
    """Runs the worker; if it has not ended ``JOIN_S`` after ``stop`` was set or its duration
    ran out (plus the time a start may take), prints where it waits and cancels it."""
    plan = spec.plan
    if isinstance(plan, ProducerPlan):
        work = run_producer(plan, spec.worker, emit, stop)
    else:
        work = run_consumer(plan, spec.worker, emit, stop)
    task = asyncio.get_running_loop().create_task(work)
    started = time.monotonic()
    limit = started + plan.duration_s + ASSIGN_TIMEOUT_S + JOIN_S if plan.duration_s else None
    stop_seen: float | None = None
    while not task.done():
        await asyncio.wait({task}, timeout=POLL_S)
        now = time.monotonic()
        if stop_seen is None and stop.is_set():
            stop_seen = now
        late = (stop_seen is not None and now - stop_seen > JOIN_S) or (
            limit is not None and now > limit
        )
        if late and not task.done():
            task.print_stack(file=sys.stderr)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise WorkerStuckError(f"bench worker {spec.worker} did not stop; stack above")
    await task


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: the loop the workers run on."""
    return "uvloop" if "uvloop" in getattr(loop_factory(), "__module__", "") else "asyncio"


def _run(main: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main)


def _worker_process(spec: WorkerSpec, out: Any, stop: Any) -> None:
    """Entry point of a worker process: runs the worker, sends what it reports to ``out``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop

    def emit(message: dict[str, Any]) -> None:
        out.put(message)

    try:
        _run(_run_worker(spec, emit, stop))
    except Exception as e:
        from pyrmq.errors import PyrmqError

        if not isinstance(e, PyrmqError):
            log.exception("bench worker %d failed", spec.worker)
        out.put({"type": "error", "worker": spec.worker, "error": f"{type(e).__name__}: {e}"})
    finally:
        out.put({"type": "exit", "worker": spec.worker})


def run_in_process(spec: WorkerSpec, reporter: Reporter, profile_path: str | None = None) -> None:
    """Runs one worker in this process; Ctrl-C or SIGTERM stops it cleanly."""
    stop = threading.Event()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await _run_worker(spec, reporter.feed, stop)

    from pyrmq.errors import PyrmqError

    profiler = cProfile.Profile() if profile_path else None
    if profiler is not None:
        profiler.enable()
    try:
        _run(main())
    except (PyrmqError, WorkerStuckError) as e:
        raise click.ClickException(f"{type(e).__name__}: {e}") from e
    finally:
        if profiler is not None and profile_path:
            profiler.disable()
            profiler.dump_stats(profile_path)


def run_processes(
    first: Sequence[WorkerSpec],
    then: Sequence[WorkerSpec],
    reporter: Reporter,
    should_stop: Callable[[Reporter, float | None], bool] = lambda r, t: False,
) -> None:
    """Runs each spec in a process of its own (spawned: no inherited loop or threads).

    ``then`` starts once every worker of ``first`` said it is ready. The parent stops them all
    when ``should_stop(reporter, when_producers_ended)`` says so, or on Ctrl-C / SIGTERM.
    """
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    procs: dict[int, Any] = {}
    exited: set[int] = set()
    interrupted = threading.Event()

    def start(specs: Sequence[WorkerSpec]) -> None:
        for spec in specs:
            p = ctx.Process(target=_worker_process, args=(spec, out, stop), daemon=True)
            p.start()
            procs[spec.worker] = p

    def on_signal(signum: int, frame: Any) -> None:
        interrupted.set()
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    producers_ended: float | None = None
    producer_ids = {s.worker for s in [*first, *then] if isinstance(s.plan, ProducerPlan)}
    pending_then = list(then)
    try:
        start(first)
        stop_deadline: float | None = None
        while len(exited) < len(procs) or pending_then:
            try:
                message = out.get(timeout=0.1)
            except queue.Empty:
                message = None
            if message is not None:
                if message["type"] == "exit":
                    exited.add(message["worker"])
                else:
                    reporter.feed(message)
            if pending_then and {s.worker for s in first} <= reporter.ready:
                start(pending_then)
                pending_then = []
            if reporter.errors:
                stop.set()
                pending_then = []
            if (
                producers_ended is None
                and producer_ids
                and producer_ids <= ({w for w in procs} - reporter.live)
            ):
                producers_ended = time.monotonic()
            if not stop.is_set() and should_stop(reporter, producers_ended):
                stop.set()
            if stop.is_set():
                pending_then = []
                if stop_deadline is None:
                    stop_deadline = time.monotonic() + JOIN_S
                elif time.monotonic() > stop_deadline:
                    break
            for w, p in procs.items():
                if w not in exited and not p.is_alive() and p.exitcode not in (None, 0):
                    # Died without saying so (killed): do not wait for its exit message.
                    exited.add(w)
                    if w in reporter.live:
                        reporter.live.discard(w)
                        reporter.errors.append(f"worker {w} exited with code {p.exitcode}")
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        stop.set()
        for p in procs.values():
            p.join(JOIN_S)
            if p.is_alive():
                p.kill()
                p.join()
    if interrupted.is_set():
        click.echo("interrupted", err=True)


def _split(total: int | None, parts: int) -> list[int | None]:
    """RocketMQ's split of a message count over senders: equal shares, the rest to the first.

    >>> _split(10, 3), _split(None, 2)
    ([4, 3, 3], [None, None])
    """
    if total is None:
        return [None] * parts
    shares: list[int | None] = [total // parts] * parts
    shares[0] = total // parts + total % parts
    return shares


def _finish(reporter: Reporter, summary: str, result: dict[str, Any]) -> None:
    click.echo(summary)
    click.echo("RESULT " + json.dumps(result, separators=(",", ":"), sort_keys=True))
    if reporter.errors:
        raise click.ClickException("; ".join(reporter.errors))


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


# --- commands -----------------------------------------------------------------------------------

_LISTENERS = click.Choice(["thread", "loop", "iter"])
_LISTENER_HELP = (
    "thread: a function on the consume threads; loop: a coroutine in the event loop; "
    "iter: `async for`."
)


def _common(f: Callable[..., Any]) -> Callable[..., Any]:
    """-n, -d, --flush-interval and -p, shared by every bench command."""
    options = [
        click.option(
            "-n", "--namesrv", default="127.0.0.1:9876", show_default=True, help="Name servers."
        ),
        click.option(
            "-d", "--duration", type=click.FloatRange(min=0, min_open=True), help="Seconds to run."
        ),
        click.option(
            "--flush-interval",
            type=click.FloatRange(min=0.05),
            default=1.0,
            show_default=True,
            help="Seconds between report lines.",
        ),
        click.option(
            "-p",
            "--processes",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            help="Worker processes, each with its own client; 1 runs in this process.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


_listener_option = click.option(
    "--listener", type=_LISTENERS, default="thread", show_default=True, help=_LISTENER_HELP
)
_profile_option = click.option(
    "--profile", type=click.Path(dir_okay=False), help="cProfile the run (-p 1) here."
)


@click.group("bench")
def bench() -> None:
    """Load generators in the spirit of RocketMQ's producer.sh and consumer.sh."""


@bench.command("producer")
@_common
@click.option("-t", "--topic", default=DEFAULT_TOPIC, show_default=True, help="Topic.")
@click.option(
    "-s", "--size", type=click.IntRange(min=1), default=128, show_default=True, help="Body bytes."
)
@click.option(
    "-w",
    "--concurrency",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Sender tasks per process, each with one request in flight.",
)
@click.option(
    "-b",
    "--batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Messages per request (send_batch when above 1).",
)
@click.option("--oneway", is_flag=True, help="send_oneway: no answer awaited; RT is the write.")
@click.option(
    "--transaction",
    is_flag=True,
    help="send_in_transaction: a half message, then its commit; RT covers both.",
)
@click.option("-q", "--count", type=click.IntRange(min=1), help="Messages to send in all.")
@click.option(
    "-g",
    "--group",
    help=f"Producer group [{PRODUCER_GROUP}; with -b: {BATCH_PRODUCER_GROUP}; with "
    f"--transaction: {TRANSACTION_PRODUCER_GROUP}].",
)
@_profile_option
def producer_cmd(
    namesrv: str,
    duration: float | None,
    flush_interval: float,
    processes: int,
    topic: str,
    size: int,
    concurrency: int,
    batch: int,
    oneway: bool,
    transaction: bool,
    count: int | None,
    group: str | None,
    profile: str | None,
) -> None:
    """Send as fast as -w senders can, until -d seconds or -q messages (or Ctrl-C)."""
    if oneway and batch > 1:
        raise click.UsageError("--oneway sends single messages: drop --batch")
    if transaction and (oneway or batch > 1):
        raise click.UsageError("--transaction sends single messages with answers")
    if profile and processes > 1:
        raise click.UsageError("--profile needs -p 1")
    _setup_logging()
    config = {
        "topic": topic,
        "body_bytes": size,
        "batch": batch,
        "oneway": oneway,
        "transaction": transaction,
        "concurrency": concurrency,
        "processes": processes,
        "loop": loop_name(),
    }
    click.echo(
        f"topic: {topic} threadCount: {concurrency} processes: {processes} messageSize: {size} "
        f"batchSize: {batch} oneway: {oneway} messageQuantity: {count or 0} "
        f"duration: {duration or 0:g} loop: {config['loop']} namesrv: {namesrv}"
    )
    plan = ProducerPlan(
        namesrv=namesrv,
        topic=topic,
        group=group
        or (
            BATCH_PRODUCER_GROUP
            if batch > 1
            else TRANSACTION_PRODUCER_GROUP
            if transaction
            else PRODUCER_GROUP
        ),
        body_bytes=size,
        concurrency=concurrency,
        batch=batch,
        oneway=oneway,
        transaction=transaction,
        duration_s=duration,
        count=count,
        interval_s=flush_interval,
    )
    specs = [
        WorkerSpec(i, dataclasses.replace(plan, count=share))
        for i, share in enumerate(_split(count, processes))
        if share is None or share > 0
    ]
    reporter = Reporter([s.worker for s in specs], producer_line)
    if len(specs) == 1 and processes == 1:
        run_in_process(specs[0], reporter, profile)
    else:
        run_processes(specs, [], reporter)
    total = reporter.total
    _finish(reporter, producer_line(total, 0, done=True), producer_result(total, config))


@bench.command("consumer")
@_common
@click.option("-t", "--topic", default=DEFAULT_TOPIC, show_default=True, help="Topic.")
@click.option(
    "-g", "--group", default=CONSUMER_GROUP, show_default=True, help="Consumer group (--suffix)."
)
@click.option(
    "--suffix/--no-suffix",
    default=True,
    show_default=True,
    help="Append _<ms % 100> to the group, as RocketMQ's tool does.",
)
@click.option("-e", "--expression", default="*", show_default=True, help="Tag expression.")
@click.option(
    "-w",
    "--concurrency",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Consume threads (and coroutines) per process.",
)
@click.option(
    "--consume-batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="consume_message_batch_max_size: messages per listener call.",
)
@click.option(
    "--pull-batch",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="pull_batch_size: messages per pull.",
)
@_listener_option
@click.option(
    "--from",
    "from_where",
    type=click.Choice(["last", "first"]),
    default="last",
    show_default=True,
    help="Where the group starts on a queue it has no offset for.",
)
@click.option(
    "-q",
    "--count",
    type=click.IntRange(min=1),
    help="Stop after this many messages (with -p > 1, once the processes have that many).",
)
@_profile_option
def consumer_cmd(
    namesrv: str,
    duration: float | None,
    flush_interval: float,
    processes: int,
    topic: str,
    group: str,
    suffix: bool,
    expression: str,
    concurrency: int,
    consume_batch: int,
    pull_batch: int,
    listener: Literal["thread", "loop", "iter"],
    from_where: Literal["first", "last"],
    count: int | None,
    profile: str | None,
) -> None:
    """Consume with a push consumer until -d seconds or -q messages (or Ctrl-C)."""
    if profile and processes > 1:
        raise click.UsageError("--profile needs -p 1")
    _setup_logging()
    if suffix:
        group = f"{group}_{int(time.time() * 1000) % 100}"
    config = {
        "topic": topic,
        "group": group,
        "concurrency": concurrency,
        "processes": processes,
        "consume_batch": consume_batch,
        "pull_batch": pull_batch,
        "listener": listener,
        "loop": loop_name(),
    }
    click.echo(
        f"topic: {topic}, threadCount {concurrency}, processes: {processes}, group: {group}, "
        f"expression: {expression}, consumeBatch: {consume_batch}, pullBatch: {pull_batch}, "
        f"listener: {listener}, from: {from_where}, loop: {config['loop']}, namesrv: {namesrv}"
    )
    plan = ConsumerPlan(
        namesrv=namesrv,
        topic=topic,
        group=group,
        expression=expression,
        concurrency=concurrency,
        consume_batch=consume_batch,
        pull_batch=pull_batch,
        listener=listener,
        from_where=from_where,
        duration_s=duration,
        # Several processes share the group's queues: the parent counts for them.
        count=count if processes == 1 else None,
        interval_s=flush_interval,
    )
    specs = [WorkerSpec(i, plan) for i in range(processes)]
    reporter = Reporter([s.worker for s in specs], consumer_line)
    if processes == 1:
        run_in_process(specs[0], reporter, profile)
    else:

        def enough(r: Reporter, _: float | None) -> bool:
            return count is not None and r.total.count("consumer", "msgs") >= count

        run_processes(specs, [], reporter, enough)
    total = reporter.total
    _finish(reporter, consumer_line(total, 0, done=True), consumer_result(total, config))


@bench.command("latency")
@_common
@click.option("-t", "--topic", default=LATENCY_TOPIC, show_default=True, help="Topic.")
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=2000,
    show_default=True,
    help="Messages per second, over all producer processes.",
)
@click.option(
    "-s",
    "--size",
    type=click.IntRange(min=STAMP_BYTES),
    default=128,
    show_default=True,
    help="Body bytes.",
)
@click.option(
    "-w",
    "--concurrency",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Most sends in flight per producer process.",
)
@click.option(
    "--warmup",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds of sends left out of the E2E figures (before -d).",
)
@_listener_option
@click.option("--consume-batch", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--consumer-threads", type=click.IntRange(min=1), default=20, show_default=True)
def latency_cmd(
    namesrv: str,
    duration: float | None,
    flush_interval: float,
    processes: int,
    topic: str,
    rate: float,
    size: int,
    concurrency: int,
    warmup: float,
    listener: Literal["thread", "loop", "iter"],
    consume_batch: int,
    consumer_threads: int,
) -> None:
    """End-to-end latency at a fixed rate: a consumer process, then -p producer processes.

    Each body starts with the producer's ``time.time_ns()`` taken just before the send; the
    consumer's listener takes now minus that stamp. Sends follow a fixed schedule (open loop), so
    a slow answer does not hold back the next send. Runs --warmup plus -d (10) seconds.
    """
    _setup_logging()
    run_s = (duration or 10.0) + warmup
    group = f"{LATENCY_GROUP}_{os.getpid()}_{int(time.time() * 1000) % 1000}"
    config = {
        "topic": topic,
        "rate": rate,
        "body_bytes": size,
        "processes": processes,
        "warmup_s": warmup,
        "listener": listener,
        "loop": loop_name(),
    }
    click.echo(
        f"topic: {topic} rate: {rate:g}/s processes: {processes} messageSize: {size} "
        f"duration: {run_s - warmup:g} s after {warmup:g} s warm-up listener: {listener} "
        f"loop: {config['loop']} namesrv: {namesrv}"
    )
    consumer = ConsumerPlan(
        namesrv=namesrv,
        topic=topic,
        group=group,
        expression="*",
        concurrency=consumer_threads,
        consume_batch=consume_batch,
        pull_batch=32,
        listener=listener,
        from_where="last",
        duration_s=None,
        count=None,
        interval_s=flush_interval,
        e2e=True,
    )
    producer = ProducerPlan(
        namesrv=namesrv,
        topic=topic,
        group=PRODUCER_GROUP,
        body_bytes=size,
        concurrency=concurrency,
        batch=1,
        oneway=False,
        duration_s=run_s,
        count=None,
        interval_s=flush_interval,
        rate=rate / processes,
        stamp=True,
        warmup_s=warmup,
    )
    producers = [WorkerSpec(1 + i, producer) for i in range(processes)]
    reporter = Reporter([0, *(p.worker for p in producers)], latency_line)

    def drained(r: Reporter, producers_ended: float | None) -> bool:
        if producers_ended is None:
            return False
        caught_up = r.total.count("consumer", "stamped") >= r.total.count("producer", "msgs")
        return caught_up or time.monotonic() - producers_ended > DRAIN_S

    run_processes([WorkerSpec(0, consumer)], producers, reporter, drained)
    total = reporter.total
    _finish(reporter, latency_line(total, 0, done=True), latency_result(total, config))
