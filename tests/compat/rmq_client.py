"""Drives the official RocketMQ 4.x client (PyPI ``rocketmq==0.4.4``) in a child process.

``rocketmq==0.4.4`` is a ctypes wrapper around ``librocketmq`` (rocketmq-client-cpp 1.2.3). The
library keeps process-wide state (one client factory per client id, scheduled threads) and can
block for a minute or crash inside C++, so every client runs in its own Python process and reports
what it did as JSON lines on stdout. A hang or a crash fails one test, not the pytest process.

Run as a script::

    python tests/compat/rmq_client.py '{"command": "produce", "namesrv": "127.0.0.1:9876", ...}'
    python tests/compat/rmq_client.py @command.json

Commands (keys not listed are rejected):

* ``produce``: ``namesrv``, ``topic``, ``messages`` (list of ``{"body"|"body_b64", "tags",
  "keys", "properties", "delay_level", "sharding", "topic"}``), ``group``, ``mode`` (``sync``,
  ``oneway``, ``orderly``, ``oneway_orderly``), ``sharding`` (default selector argument of the
  orderly modes: queue = sharding % queue count), ``batch`` (one ``send_batch`` of all messages),
  ``send_timeout_ms``, ``retry_times`` (orderly), ``instance_name``, ``timeout``.
* ``push-consume``: ``namesrv``, ``topic``, ``expression``, ``group``, ``model``
  (``CLUSTERING`` or ``BROADCASTING``), ``orderly``, ``expected`` (stop after that many
  deliveries), ``linger_s`` (keep consuming that long after ``expected``), ``reconsume_later``
  (``null``, ``"*"`` or a list of keys: the first delivery of each such key answers
  RECONSUME_LATER), ``property_keys``, ``thread_count``, ``batch_max_size``, ``instance_name``,
  ``timeout``. When stdin is a pipe, it also stops at end of file there.
* ``pull-consume``: ``namesrv``, ``topic``, ``expression``, ``group``, ``offsets`` (queue id ->
  start offset, default 0), ``queue_ids``, ``max_num``, ``max_messages``, ``property_keys``,
  ``timeout``. Pulls every queue of the topic until NO_NEW_MSG.

Every output line is a JSON object with an ``event``:

* ``started``: the client started.
* ``sent``: one send result: ``index`` (``indices`` for a batch), ``status`` (``SEND_OK``, ...;
  ``null`` for oneway sends), ``msg_id`` (the UNIQ_KEY; empty for a batch), ``offset_msg_id``,
  ``queue_id``, ``queue_offset``.
* ``message``: one delivered or pulled message: ``topic``, ``tags``, ``keys``, ``body``
  (base64), ``properties``, ``msg_id``, ``queue_id``, ``queue_offset``, ``reconsume_times``,
  ``commit_log_offset``, ``store_size``, ``delay_level``, ``born_timestamp``,
  ``store_timestamp``; ``status`` (what the callback answered) for push consumers.
* ``pull``: one PULL call: ``queue_id``, ``offset``, ``status``, ``next_begin_offset``,
  ``min_offset``, ``max_offset``, ``count``.
* ``error``: ``stage``, ``error_type``, ``error``, ``namesrv``, ``topic``.
* ``done``: always the last line: ``ok``, ``exit_code``, ``elapsed_s``.

Exit codes: 0 success, 1 the client reported an error, 2 bad command or ``rocketmq`` not
importable, 3 the command ran out of time (a watchdog ends the process even while a C++ call
blocks).

What the 0.4.4 API cannot show, so the events carry ``null`` or partial values:

* A send result holds only status, msgId (UNIQ_KEY) and queue offset. ``offset_msg_id`` is
  always ``null``; ``queue_id`` is known only in the orderly modes, where this script picks it.
* Properties cannot be listed. ``properties`` holds the well-known keys below plus
  ``property_keys``, and only those that are set.
* Bodies are read as C strings: a received body ends at its first NUL byte. Sent bodies may
  contain any bytes.
* The wrapper's ``subscribe`` has no way to return RECONSUME_LATER. Its only failure path is a
  callback that raises, and it re-raises inside the ctypes callback, where ctypes prints the
  exception and leaves the return value unset: the status C++ sees is undefined. This script
  registers its own callback with ``RegisterMessageCallback``/``RegisterMessageCallbackOrderly``,
  which returns 0 (CONSUME_SUCCESS) or 1 (RECONSUME_LATER) explicitly.
* C++ 1.2.3 hands the listener a whole pull batch (up to 32 messages of one queue) at once, and
  the C wrapper answers RECONSUME_LATER for the batch if any message fails. Every message of that
  batch, including those already consumed successfully and those after the failing one (which
  the callback never saw), is sent back and comes again from ``%RETRY%<group>`` with
  ``reconsume_times`` 1. ``batch_max_size`` does not change this. Put a message that should
  fail alone in its queue.
* The wrapper's ``PullConsumer.pull`` loops forever on BROKER_TIMEOUT. This script calls ``Pull``
  itself, with bounded retries.

* A send can fail in the client alone: while one of its threads opens a connection, the others
  give up on the connection table at once (rocketmq-client-cpp issue 455), and all attempts of
  a send fail within a millisecond as "No route info". The producer reads its own log and sends
  again, after a pause, only when every attempt failed that way, and reports each ``resend``.

The C++ library logs to ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.N`` and keeps
BROADCASTING offsets in ``$HOME/.rocketmq_offsets/``, so the helpers below give each child a
private ``HOME`` and attach the end of that log to their errors. ``PYRMQ_COMPAT_PYTHON`` selects
another interpreter for the children (one that has ``rocketmq`` installed).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import platform
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()

EXIT_OK = 0
EXIT_CLIENT_ERROR = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 3

DEFAULT_TIMEOUT_S = 30.0
"""Default lifetime of a produce or pull child."""
SHUTDOWN_GRACE_S = 15.0
"""How long a child may spend in the client's shutdown once its work is done."""
KILL_GRACE_S = 10.0
"""How long the parent waits past a child's own deadline before it kills the child."""

WELL_KNOWN_PROPERTIES = (
    "UNIQ_KEY",
    "KEYS",
    "TAGS",
    "WAIT",
    "DELAY",
    "REAL_TOPIC",
    "REAL_QID",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_RECONSUME_TIMES",
    "TRAN_MSG",
    "PGROUP",
    "CLUSTER",
    "MIN_OFFSET",
    "MAX_OFFSET",
)

SEND_STATUS_NAMES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
PULL_STATUS_NAMES = ("FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL", "BROKER_TIMEOUT")

_COMMON_KEYS = {
    "command",
    "namesrv",
    "topic",
    "group",
    "timeout",
    "instance_name",
    "access_key",
    "secret_key",
}
_COMMAND_KEYS = {
    "produce": _COMMON_KEYS
    | {"messages", "mode", "sharding", "batch", "send_timeout_ms", "retry_times"},
    "push-consume": _COMMON_KEYS
    | {
        "expression",
        "model",
        "orderly",
        "expected",
        "linger_s",
        "reconsume_later",
        "property_keys",
        "thread_count",
        "batch_max_size",
    },
    "pull-consume": _COMMON_KEYS
    | {"expression", "offsets", "queue_ids", "max_num", "max_messages", "property_keys"},
}
_MESSAGE_KEYS = {
    "body",
    "body_b64",
    "tags",
    "keys",
    "properties",
    "delay_level",
    "sharding",
    "topic",
}
_SEND_MODES = ("sync", "oneway", "orderly", "oneway_orderly")
_MODELS = ("CLUSTERING", "BROADCASTING")


def client_supported_platform() -> bool:
    """Whether PyPI has a ``rocketmq==0.4.4`` wheel with ``librocketmq`` for this machine."""
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


# =============================================================================================
# Child side: runs the official client. Imports `rocketmq` lazily, and only in the child.
# =============================================================================================


class _UsageError(Exception):
    pass


class _Out:
    """Writes JSON lines to a private copy of fd 1.

    The C++ library writes to stdout itself (``cout``), which would split JSON lines, so fd 1
    is pointed at stderr and only this writer uses the original stdout.
    """

    def __init__(self) -> None:
        sys.stdout.flush()
        fd = os.dup(1)
        os.dup2(2, 1)
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()
        self.started = time.monotonic()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}, separators=(",", ":"))
        # A watchdog may fire while another thread holds the lock; never wait on it forever.
        locked = self._lock.acquire(timeout=2.0)
        try:
            self._file.write(line + "\n")
            self._file.flush()
        finally:
            if locked:
                self._lock.release()

    def finish(self, exit_code: int) -> None:
        """Writes the ``done`` line and ends the process without running C++ destructors."""
        elapsed = round(time.monotonic() - self.started, 3)
        self.emit("done", ok=exit_code == EXIT_OK, exit_code=exit_code, elapsed_s=elapsed)
        sys.stderr.flush()
        os._exit(exit_code)


class _Watchdog:
    """Ends the process with EXIT_TIMEOUT when a deadline passes, even inside a blocking C call.

    ctypes releases the GIL during foreign calls, so this timer thread runs while the main
    thread waits in librocketmq.
    """

    def __init__(self, out: _Out, context: dict[str, Any]) -> None:
        self._out = out
        self._context = context
        self._timer: threading.Timer | None = None

    def arm(self, seconds: float, what: str) -> None:
        self.cancel()
        timer = threading.Timer(seconds, self._fire, args=(seconds, what))
        timer.daemon = True
        timer.start()
        self._timer = timer

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _fire(self, seconds: float, what: str) -> None:
        self._out.emit(
            "error",
            stage="timeout",
            error_type="Timeout",
            error=f"{what} did not finish within {seconds:g}s",
            **self._context,
        )
        self._out.finish(EXIT_TIMEOUT)


def _check_keys(what: str, given: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise _UsageError(f"unknown {what} keys: {', '.join(unknown)}")


def _require(cmd: Mapping[str, Any], key: str) -> Any:
    if cmd.get(key) in (None, ""):
        raise _UsageError(f"{cmd.get('command')}: missing {key!r}")
    return cmd[key]


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _error_fields(exc: BaseException) -> dict[str, str]:
    return {"error_type": type(exc).__name__, "error": str(exc)}


def _read_message(msg: Any, property_keys: Sequence[str]) -> dict[str, Any]:
    """Turns a ``rocketmq.client.RecvMessage`` into a JSON-ready dict."""
    properties = {}
    for key in dict.fromkeys((*WELL_KNOWN_PROPERTIES, *property_keys)):
        value = msg.get_property(key)
        if value:
            properties[key] = _text(value)
    body = msg.body or b""
    return {
        "topic": msg.topic,
        "tags": _text(msg.tags),
        "keys": _text(msg.keys),
        "body": base64.b64encode(body).decode("ascii"),
        "properties": properties,
        "msg_id": msg.id,
        "queue_id": msg.queue_id,
        "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times,
        "commit_log_offset": msg.commit_log_offset,
        "store_size": msg.store_size,
        "delay_level": msg.delay_time_level,
        "born_timestamp": msg.born_timestamp,
        "store_timestamp": msg.store_timestamp,
    }


def _build_message(spec: Mapping[str, Any], topic: str) -> Any:
    from rocketmq.client import Message
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import dll

    _check_keys("message", spec, _MESSAGE_KEYS)
    msg = Message(spec.get("topic", topic))
    if "body_b64" in spec:
        body = base64.b64decode(spec["body_b64"])
    else:
        body = str(spec.get("body", "")).encode()
    # set_body goes through a C string and would cut the body at a NUL byte.
    ffi_check(dll.SetByteMessageBody(msg._handle, body, len(body)))
    if spec.get("tags") is not None:
        msg.set_tags(spec["tags"])
    keys = spec.get("keys")
    if keys is not None:
        msg.set_keys(keys if isinstance(keys, str) else " ".join(keys))
    for name, value in (spec.get("properties") or {}).items():
        msg.set_property(str(name), str(value))
    if spec.get("delay_level"):
        msg.set_delay_time_level(int(spec["delay_level"]))
    return msg


class _Selector:
    """Queue selector of the orderly modes: queue index = sharding % queue count."""

    def __init__(self, sharding: int) -> None:
        self.sharding = sharding
        self.chosen: int | None = None

    def __call__(self, queue_count: int, _msg: Any, _arg: Any) -> int:
        self.chosen = self.sharding % queue_count
        return self.chosen


def _send_result(result: Any) -> dict[str, Any]:
    status = int(result.status)
    return {
        "status": SEND_STATUS_NAMES[status] if 0 <= status < len(SEND_STATUS_NAMES) else status,
        "msg_id": result.msg_id,
        "offset_msg_id": None,
        "queue_offset": result.offset,
    }


def _newest_cpp_log(home: Path, pid: int | None = None) -> Path | None:
    """The rocketmq-cpp log under ``home`` written last (of process ``pid`` if given)."""
    pattern = f"{pid if pid is not None else '*'}_rocketmq-cpp.log*"
    logs = sorted((home / "logs" / "rocketmq-cpp").glob(pattern), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


class _OwnLog:
    """The end of this process's own rocketmq-cpp log, read since a mark.

    The library writes each line as it logs it, so a child can tell after a failed send why
    each of its attempts failed.
    """

    def __init__(self) -> None:
        self._mark: tuple[Path | None, int] = (None, 0)

    def _newest(self) -> Path | None:
        return _newest_cpp_log(Path.home(), os.getpid())

    def mark(self) -> None:
        newest = self._newest()
        self._mark = (newest, newest.stat().st_size if newest else 0)

    def since_mark(self) -> str:
        newest = self._newest()
        if newest is None:
            return ""
        start = self._mark[1] if newest == self._mark[0] else 0
        with newest.open("rb") as f:
            f.seek(start)
            return f.read().decode("utf-8", errors="replace")


_TABLE_LOCKED = re.compile(r"GetTransport of:\S+ get timed_mutex timeout")
_LOCKED_TABLE_RESENDS = 3
_LOCKED_TABLE_PAUSE_S = 0.2


def _never_left_the_client(log: str) -> bool:
    """Whether every attempt of a failed send found the client's connection table locked.

    The C++ client gives up on a send attempt at once when another of its threads is opening
    a connection (rocketmq-client-cpp issue 455); its five attempts then fail within a
    millisecond and it reports "No route info". No request was written, so sending again
    cannot duplicate a message.
    """
    # The log before each attempt's failure line, back to the previous one.
    attempts = log.split("send failed of times:")[:-1]
    return bool(attempts) and all(_TABLE_LOCKED.search(a) for a in attempts)


def _produce(cmd: Mapping[str, Any], out: _Out, watchdog: _Watchdog) -> int:
    from rocketmq.client import Producer
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import dll

    namesrv, topic = _require(cmd, "namesrv"), _require(cmd, "topic")
    messages = cmd.get("messages") or []
    mode = cmd.get("mode", "sync")
    batch = bool(cmd.get("batch", False))
    if mode not in _SEND_MODES:
        raise _UsageError(f"produce: mode must be one of {', '.join(_SEND_MODES)}")
    if batch and mode != "sync":
        raise _UsageError("produce: a batch is sent with mode 'sync'")
    if not messages:
        raise _UsageError("produce: no messages")
    context = {"namesrv": namesrv, "topic": topic}

    producer = Producer(
        cmd.get("group", "PG_COMPAT"), timeout=int(cmd.get("send_timeout_ms", 3000))
    )
    producer.set_namesrv_addr(namesrv)
    _credentials(producer, cmd)
    if cmd.get("instance_name"):
        ffi_check(dll.SetProducerInstanceName(producer._handle, cmd["instance_name"].encode()))
    try:
        producer.start()
    except Exception as exc:
        out.emit("error", stage="start", **_error_fields(exc), **context)
        return EXIT_CLIENT_ERROR
    out.emit("started", pid=os.getpid(), **context)

    built = [_build_message(spec, topic) for spec in messages]
    code = EXIT_OK
    if batch:
        try:
            result = producer.send_batch(built)
        except Exception as exc:
            out.emit(
                "error",
                stage="send",
                indices=list(range(len(built))),
                **_error_fields(exc),
                **context,
            )
            code = EXIT_CLIENT_ERROR
        else:
            out.emit(
                "sent",
                indices=list(range(len(built))),
                mode="batch",
                queue_id=None,
                **_send_result(result),
            )
    else:
        own_log = _OwnLog()
        for index, (spec, msg) in enumerate(zip(messages, built, strict=True)):
            select = _Selector(int(spec.get("sharding", cmd.get("sharding", 0))))
            resends = 0
            own_log.mark()
            while True:
                try:
                    fields = _send_one(producer, mode, msg, select, cmd)
                except Exception as exc:
                    if resends < _LOCKED_TABLE_RESENDS and _never_left_the_client(
                        own_log.since_mark()
                    ):
                        resends += 1
                        out.emit("resend", index=index, attempt=resends, **_error_fields(exc))
                        time.sleep(_LOCKED_TABLE_PAUSE_S)
                        own_log.mark()
                        continue
                    out.emit("error", stage="send", index=index, **_error_fields(exc), **context)
                    code = EXIT_CLIENT_ERROR
                break
            if code != EXIT_OK:
                break
            out.emit("sent", index=index, mode=mode, **fields)

    watchdog.arm(SHUTDOWN_GRACE_S, "producer shutdown")
    producer.shutdown()
    return code


def _send_one(
    producer: Any, mode: str, msg: Any, select: _Selector, cmd: Mapping[str, Any]
) -> dict[str, Any]:
    """One send in ``mode``; the fields of its ``sent`` event."""
    if mode == "sync":
        return {**_send_result(producer.send_sync(msg)), "queue_id": None}
    if mode == "orderly":
        result = producer.send_orderly(
            msg, 0, retry_times=int(cmd.get("retry_times", 3)), queue_selector=select
        )
        return {**_send_result(result), "queue_id": select.chosen}
    if mode == "oneway":
        producer.send_oneway(msg)
        queue_id = None
    else:
        producer.send_oneway_orderly(msg, 0, queue_selector=select)
        queue_id = select.chosen
    return {
        "status": None,
        "msg_id": None,
        "offset_msg_id": None,
        "queue_id": queue_id,
        "queue_offset": None,
    }


def _push_consume(cmd: Mapping[str, Any], out: _Out, watchdog: _Watchdog) -> int:
    from rocketmq.client import PushConsumer, RecvMessage
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import MSG_CALLBACK_FUNC, MessageModel, dll

    namesrv, topic = _require(cmd, "namesrv"), _require(cmd, "topic")
    expression = cmd.get("expression", "*")
    model = cmd.get("model", "CLUSTERING")
    if model not in _MODELS:
        raise _UsageError(f"push-consume: model must be one of {', '.join(_MODELS)}")
    orderly = bool(cmd.get("orderly", False))
    expected = cmd.get("expected")
    linger_s = float(cmd.get("linger_s", 0.0))
    timeout = float(cmd.get("timeout", DEFAULT_TIMEOUT_S))
    fail_keys = cmd.get("reconsume_later")
    property_keys = list(cmd.get("property_keys") or [])
    context = {"namesrv": namesrv, "topic": topic}

    lock = threading.Lock()
    delivered = 0
    callback_errors = 0
    failed_once: set[str] = set()
    reached = threading.Event()
    stop = threading.Event()

    def on_message(_consumer: Any, handle: Any) -> int:
        nonlocal delivered, callback_errors
        try:
            record = _read_message(RecvMessage(handle), property_keys)
            key = record["keys"] or record["msg_id"]
            later = False
            with lock:
                if fail_keys == "*" or (isinstance(fail_keys, list) and key in fail_keys):
                    later = key not in failed_once
                    failed_once.add(key)
                delivered += 1
                if expected is not None and delivered >= expected:
                    reached.set()
            record["status"] = "RECONSUME_LATER" if later else "CONSUME_SUCCESS"
            out.emit("message", **record)
        except Exception as exc:  # an exception must never cross back into C++
            with lock:
                callback_errors += 1
            out.emit("error", stage="consume", **_error_fields(exc), **context)
            return 0
        else:
            return 1 if later else 0

    consumer = PushConsumer(
        cmd.get("group", "CG_COMPAT"), orderly=orderly, message_model=getattr(MessageModel, model)
    )
    consumer.set_namesrv_addr(namesrv)
    _credentials(consumer, cmd)
    if cmd.get("thread_count"):
        consumer.set_thread_count(int(cmd["thread_count"]))
    if cmd.get("batch_max_size"):
        consumer.set_message_batch_max_size(int(cmd["batch_max_size"]))
    if cmd.get("instance_name"):
        consumer.set_instance_name(cmd["instance_name"])
    ffi_check(dll.Subscribe(consumer._handle, topic.encode(), expression.encode()))
    callback = MSG_CALLBACK_FUNC(on_message)
    register = dll.RegisterMessageCallbackOrderly if orderly else dll.RegisterMessageCallback
    ffi_check(register(consumer._handle, callback))
    try:
        consumer.start()
    except Exception as exc:
        out.emit("error", stage="start", **_error_fields(exc), **context)
        return EXIT_CLIENT_ERROR
    out.emit("started", pid=os.getpid(), **context)

    def watch_stdin() -> None:
        with contextlib.suppress(OSError, ValueError):
            while sys.stdin.buffer.read(4096):
                pass
        stop.set()

    # The parent closes the pipe to ask for a stop; a terminal or /dev/null is not watched.
    if stat.S_ISFIFO(os.fstat(0).st_mode):
        threading.Thread(target=watch_stdin, name="stdin-eof", daemon=True).start()

    deadline = time.monotonic() + timeout
    reached_at: float | None = None
    timed_out = False
    while not stop.is_set():
        now = time.monotonic()
        if reached.is_set():
            reached_at = reached_at if reached_at is not None else now
            if now - reached_at >= linger_s:
                break
        if now >= deadline:
            timed_out = True
            break
        stop.wait(0.05)

    code = EXIT_OK
    if timed_out and expected is not None and not reached.is_set():
        out.emit(
            "error",
            stage="timeout",
            error_type="Timeout",
            error=f"received {delivered} of {expected} messages within {timeout:g}s",
            **context,
        )
        code = EXIT_TIMEOUT
    watchdog.arm(SHUTDOWN_GRACE_S, "push consumer shutdown")
    consumer.shutdown()
    with lock:
        if callback_errors and code == EXIT_OK:
            code = EXIT_CLIENT_ERROR
    return code


def _pull_consume(cmd: Mapping[str, Any], out: _Out, watchdog: _Watchdog) -> int:
    import ctypes

    from rocketmq.client import PullConsumer, RecvMessage
    from rocketmq.exceptions import ffi_check
    from rocketmq.ffi import _CMessageQueue, dll

    namesrv, topic = _require(cmd, "namesrv"), _require(cmd, "topic")
    expression = str(cmd.get("expression", "*")).encode()
    offsets = {int(k): int(v) for k, v in (cmd.get("offsets") or {}).items()}
    queue_ids = cmd.get("queue_ids")
    max_num = int(cmd.get("max_num", 32))
    max_messages = int(cmd.get("max_messages", 10_000))
    property_keys = list(cmd.get("property_keys") or [])
    context = {"namesrv": namesrv, "topic": topic}
    max_timeouts_per_queue = 3

    consumer = PullConsumer(cmd.get("group", "CG_COMPAT_PULL"))
    consumer.set_namesrv_addr(namesrv)
    _credentials(consumer, cmd)
    try:
        consumer.start()
    except Exception as exc:
        out.emit("error", stage="start", **_error_fields(exc), **context)
        return EXIT_CLIENT_ERROR
    out.emit("started", pid=os.getpid(), **context)

    queues = ctypes.POINTER(_CMessageQueue)()
    size = ctypes.c_int()
    try:
        ffi_check(
            dll.FetchSubscriptionMessageQueues(
                consumer._handle, topic.encode(), ctypes.pointer(queues), ctypes.pointer(size)
            )
        )
    except Exception as exc:
        out.emit("error", stage="route", **_error_fields(exc), **context)
        return EXIT_CLIENT_ERROR
    code = EXIT_OK
    received = 0
    try:
        # The library answers OK with no queues when it cannot reach the name server.
        if size.value == 0:
            out.emit(
                "error",
                stage="route",
                error_type="NoMessageQueues",
                error=f"no message queues for topic {topic} from name server {namesrv}",
                **context,
            )
            return EXIT_CLIENT_ERROR
        mqs = sorted(
            (queues[i] for i in range(size.value)), key=lambda q: (q.brokerName, q.queueId)
        )
        for mq in mqs:
            if queue_ids is not None and mq.queueId not in queue_ids:
                continue
            offset = offsets.get(mq.queueId, 0)
            timeouts = 0
            for _ in range(max_messages + 100):
                result = dll.Pull(consumer._handle, ctypes.pointer(mq), expression, offset, max_num)
                try:
                    status = result.pullStatus
                    found = []
                    if status == 0:
                        found = [
                            _read_message(RecvMessage(result.msgFoundList[i]), property_keys)
                            for i in range(result.size)
                        ]
                    out.emit(
                        "pull",
                        broker_name=_text(mq.brokerName),
                        queue_id=mq.queueId,
                        offset=offset,
                        status=PULL_STATUS_NAMES[status] if 0 <= status < 5 else status,
                        next_begin_offset=result.nextBeginOffset,
                        min_offset=result.minOffset,
                        max_offset=result.maxOffset,
                        count=len(found),
                    )
                    next_offset = result.nextBeginOffset
                finally:
                    dll.ReleasePullResult(result)
                for record in found:
                    out.emit("message", **record)
                received += len(found)
                if received > max_messages:
                    out.emit(
                        "error",
                        stage="pull",
                        error_type="TooManyMessages",
                        error=f"more than {max_messages} messages",
                        **context,
                    )
                    return EXIT_CLIENT_ERROR
                if status == 4:  # BROKER_TIMEOUT: any failed pull, nextBeginOffset is garbage
                    timeouts += 1
                    if timeouts >= max_timeouts_per_queue:
                        out.emit(
                            "error",
                            stage="pull",
                            error_type="BrokerTimeout",
                            error=f"{timeouts} failed pulls of queue {mq.queueId} at {offset}",
                            **context,
                        )
                        code = EXIT_CLIENT_ERROR
                        break
                    continue
                if status == 1 or next_offset == offset:  # NO_NEW_MSG, or no progress
                    break
                offset = next_offset
    finally:
        dll.ReleaseSubscriptionMessageQueue(queues)
        watchdog.arm(SHUTDOWN_GRACE_S, "pull consumer shutdown")
        consumer.shutdown()
    return code


_RUNNERS = {"produce": _produce, "push-consume": _push_consume, "pull-consume": _pull_consume}


def _parse(argv: Sequence[str]) -> dict[str, Any]:
    if len(argv) != 1:
        raise _UsageError("usage: rmq_client.py '<json command>' | @command.json")
    arg = argv[0]
    cmd = json.loads(Path(arg[1:]).read_text(encoding="utf-8") if arg.startswith("@") else arg)
    if not isinstance(cmd, dict):
        raise _UsageError("the command must be a JSON object")
    if cmd.get("command") not in _RUNNERS:
        raise _UsageError(f"command must be one of {', '.join(_RUNNERS)}")
    _check_keys(cmd["command"], cmd, _COMMAND_KEYS[cmd["command"]])
    return cmd


def main(argv: Sequence[str]) -> None:
    """Runs one command in this process and ends it with one of the EXIT_* codes."""
    out = _Out()
    try:
        cmd = _parse(argv)
    except (_UsageError, ValueError, OSError) as exc:
        out.emit("error", stage="usage", **_error_fields(exc))
        out.finish(EXIT_USAGE)
    context = {"namesrv": cmd.get("namesrv"), "topic": cmd.get("topic")}
    try:
        import rocketmq.client  # noqa: F401  (loads librocketmq)
    except Exception as exc:
        out.emit("error", stage="import", **_error_fields(exc), **context)
        out.finish(EXIT_USAGE)
    watchdog = _Watchdog(out, context)
    timeout = float(cmd.get("timeout", DEFAULT_TIMEOUT_S))
    # A push consumer ends itself at `timeout`; the watchdog is the backstop for a stuck call.
    watchdog.arm(
        timeout + (SHUTDOWN_GRACE_S if cmd["command"] == "push-consume" else 0), cmd["command"]
    )
    try:
        code = _RUNNERS[cmd["command"]](cmd, out, watchdog)
    except _UsageError as exc:
        out.emit("error", stage="usage", **_error_fields(exc), **context)
        code = EXIT_USAGE
    except Exception as exc:
        out.emit("error", stage="client", **_error_fields(exc), **context)
        code = EXIT_CLIENT_ERROR
    watchdog.cancel()
    out.finish(code)


# =============================================================================================
# Parent side: what tests call.
# =============================================================================================


@dataclass
class ClientRun:
    """What one child reported."""

    command: dict[str, Any]
    returncode: int | None
    """The child's exit code; negative for a signal; ``None`` if the parent had to kill it."""
    events: list[dict[str, Any]]
    stderr: str = ""
    log_tail: str = ""
    elapsed_s: float = 0.0

    def of(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("event") == event]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return self.of("error")

    @property
    def sent(self) -> list[dict[str, Any]]:
        return self.of("sent")

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.of("message")

    @property
    def ok(self) -> bool:
        return self.returncode == EXIT_OK and not self.errors

    def describe(self) -> str:
        lines = [
            f"rocketmq client {self.command.get('command')} exited with {self.returncode} "
            f"after {self.elapsed_s:.1f}s (namesrv {self.command.get('namesrv')}, "
            f"topic {self.command.get('topic')})"
        ]
        lines += [f"  error: {json.dumps(e)}" for e in self.errors]
        if self.stderr.strip():
            lines += ["  stderr (end):", *("    " + s for s in self.stderr.splitlines()[-20:])]
        if self.log_tail.strip():
            lines += [
                "  rocketmq-cpp log (end):",
                *("    " + s for s in self.log_tail.splitlines()),
            ]
        return "\n".join(lines)


class ClientError(Exception):
    """A child failed: it exited non-zero, reported an error, or had to be killed."""

    def __init__(self, run: ClientRun, reason: str = "") -> None:
        self.run = run
        super().__init__((reason + "\n" if reason else "") + run.describe())


def _python() -> str:
    return os.environ.get("PYRMQ_COMPAT_PYTHON") or sys.executable


def _decode_events(lines: Iterable[str]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = {"event": "stdout", "text": line}
        if isinstance(event, dict) and event.get("event") == "message" and "body" in event:
            event["body"] = base64.b64decode(event["body"])
        events.append(event)
    return events


def _log_tail(home: Path, lines: int = 40) -> str:
    newest = _newest_cpp_log(home)
    if newest is None:
        return ""
    text = newest.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


class _Home:
    """The child's HOME: the given directory, or a temporary one removed afterwards."""

    def __init__(self, home: Path | None) -> None:
        self.owned = home is None
        self.path = Path(tempfile.mkdtemp(prefix="rmq-client-")) if home is None else Path(home)
        self.path.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.path), "PYTHONDONTWRITEBYTECODE": "1"}

    def write_command(self, command: Mapping[str, Any]) -> str:
        fd, name = tempfile.mkstemp(prefix="command-", suffix=".json", dir=self.path)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(command, f)
        return "@" + name

    def cleanup(self) -> None:
        if self.owned:
            shutil.rmtree(self.path, ignore_errors=True)


def run_command(command: Mapping[str, Any], *, home: Path | None = None) -> ClientRun:
    """Runs one produce or pull-consume command in a child and returns what it reported.

    Never raises for a failed client; see :func:`check`. The child is killed if it outlives its
    own ``timeout`` by :data:`KILL_GRACE_S`.
    """
    command = dict(command)
    where = _Home(home)
    timeout = float(command.get("timeout", DEFAULT_TIMEOUT_S)) + SHUTDOWN_GRACE_S + KILL_GRACE_S
    started = time.monotonic()
    try:
        try:
            done = subprocess.run(
                [_python(), str(SCRIPT), where.write_command(command)],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env=where.env(),
                timeout=timeout,
                check=False,
            )
            returncode: int | None = done.returncode
            stdout, stderr = done.stdout, done.stderr
        except subprocess.TimeoutExpired as exc:
            returncode = None
            stdout, stderr = exc.stdout or b"", exc.stderr or b""
        return ClientRun(
            command=command,
            returncode=returncode,
            events=_decode_events(stdout.decode("utf-8", errors="replace").splitlines()),
            stderr=stderr.decode("utf-8", errors="replace"),
            log_tail=_log_tail(where.path),
            elapsed_s=time.monotonic() - started,
        )
    finally:
        where.cleanup()


def check(run: ClientRun) -> ClientRun:
    """Returns ``run`` if the client succeeded, else raises :class:`ClientError`."""
    if not run.ok:
        raise ClientError(run)
    return run


def _credentials(client: Any, cmd: Mapping[str, Any]) -> None:
    """Signs the client's requests with an ACL account's keys when the command names one."""
    if cmd.get("access_key") is not None:
        client.set_session_credentials(cmd["access_key"], cmd.get("secret_key", ""), "ALIYUN")


def _message_spec(message: str | bytes | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(message, str):
        return {"body": message}
    if isinstance(message, bytes):
        return {"body_b64": base64.b64encode(message).decode("ascii")}
    spec = dict(message)
    if isinstance(spec.get("body"), bytes):
        spec["body_b64"] = base64.b64encode(spec.pop("body")).decode("ascii")
    return spec


def producer_command(
    namesrv: str,
    topic: str,
    messages: Sequence[str | bytes | Mapping[str, Any]],
    *,
    group: str = "PG_COMPAT",
    mode: str = "sync",
    sharding: int = 0,
    batch: bool = False,
    send_timeout_ms: int = 3000,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The ``produce`` command. A message is a str body, a bytes body or a dict (see module doc;
    ``body`` may be bytes there too)."""
    return {
        "command": "produce",
        "namesrv": namesrv,
        "topic": topic,
        "group": group,
        "messages": [_message_spec(m) for m in messages],
        "mode": mode,
        "sharding": sharding,
        "batch": batch,
        "send_timeout_ms": send_timeout_ms,
        "timeout": timeout,
    }


def run_producer(
    namesrv: str,
    topic: str,
    messages: Sequence[str | bytes | Mapping[str, Any]],
    *,
    home: Path | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """Sends ``messages`` with the official producer; returns one ``sent`` event per result.

    Raises :class:`ClientError` if any send fails. Options are those of
    :func:`producer_command`.
    """
    return check(run_command(producer_command(namesrv, topic, messages, **options), home=home)).sent


def pull_command(
    namesrv: str,
    topic: str,
    *,
    group: str = "CG_COMPAT_PULL",
    expression: str = "*",
    offsets: Mapping[int, int] | None = None,
    queue_ids: Sequence[int] | None = None,
    max_num: int = 32,
    max_messages: int = 10_000,
    property_keys: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The ``pull-consume`` command."""
    return {
        "command": "pull-consume",
        "namesrv": namesrv,
        "topic": topic,
        "group": group,
        "expression": expression,
        "offsets": {str(k): v for k, v in (offsets or {}).items()},
        "queue_ids": None if queue_ids is None else list(queue_ids),
        "max_num": max_num,
        "max_messages": max_messages,
        "property_keys": list(property_keys),
        "timeout": timeout,
    }


def run_pull_consumer(
    namesrv: str, topic: str, *, home: Path | None = None, **options: Any
) -> list[dict[str, Any]]:
    """Pulls every queue of ``topic`` to its end; returns the ``message`` events (``body`` as
    bytes), queue by queue in offset order. Raises :class:`ClientError` on failure."""
    return check(run_command(pull_command(namesrv, topic, **options), home=home)).messages


def push_command(
    namesrv: str,
    topic: str,
    *,
    group: str = "CG_COMPAT",
    expression: str = "*",
    model: str = "CLUSTERING",
    orderly: bool = False,
    expected: int | None = None,
    linger_s: float = 0.0,
    reconsume_later: str | Sequence[str] | None = None,
    property_keys: Sequence[str] = (),
    thread_count: int | None = None,
    batch_max_size: int | None = None,
    instance_name: str | None = None,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """The ``push-consume`` command. Consumers of one group in one test need distinct
    ``instance_name`` values: the client id is ``pid-ip@instance``."""
    command: dict[str, Any] = {
        "command": "push-consume",
        "namesrv": namesrv,
        "topic": topic,
        "group": group,
        "expression": expression,
        "model": model,
        "orderly": orderly,
        "expected": expected,
        "linger_s": linger_s,
        "reconsume_later": reconsume_later
        if reconsume_later is None or isinstance(reconsume_later, str)
        else list(reconsume_later),
        "property_keys": list(property_keys),
        "thread_count": thread_count,
        "batch_max_size": batch_max_size,
        "timeout": timeout,
    }
    if instance_name is not None:
        command["instance_name"] = instance_name
    return command


class PushConsumerHandle:
    """A push consumer running in a child until :meth:`stop`, its ``expected`` count or its
    ``timeout``. Use it as a context manager so the child always goes."""

    def __init__(self, command: Mapping[str, Any], *, home: Path | None = None) -> None:
        self.command = dict(command)
        self._where = _Home(home)
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._eof = False
        self._run: ClientRun | None = None
        self._started_at = time.monotonic()
        # Closed in stop(); a file, not a pipe, so a chatty child never blocks on stderr.
        self._stderr = tempfile.TemporaryFile(dir=self._where.path)  # noqa: SIM115
        self._proc = subprocess.Popen(
            [_python(), str(SCRIPT), self._where.write_command(self.command)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=self._where.env(),
        )
        self._reader = threading.Thread(target=self._read, name="rmq-push-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            for event in _decode_events([raw.decode("utf-8", errors="replace")]):
                with self._cond:
                    self._events.append(event)
                    self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _snapshot(self) -> ClientRun:
        with self._cond:
            events = list(self._events)
        return ClientRun(
            command=self.command,
            returncode=self._proc.poll(),
            events=events,
            log_tail=_log_tail(self._where.path),
            elapsed_s=time.monotonic() - self._started_at,
        )

    def _wait(self, predicate: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            if predicate():
                return
        reason = (
            f"push consumer ended before {what}"
            if self._eof
            else f"timed out after {timeout:g}s waiting for {what}"
        )
        raise ClientError(self._snapshot(), reason)

    def wait_started(self, timeout: float = 30.0) -> PushConsumerHandle:
        """Waits for the client's ``started`` line. Rebalancing happens later, on heartbeat."""
        self._wait(
            lambda: any(e.get("event") == "started" for e in self._events), timeout, "the start"
        )
        return self

    def messages(self) -> list[dict[str, Any]]:
        """Every delivery so far, including RECONSUME_LATER ones, in arrival order."""
        with self._cond:
            return [e for e in self._events if e.get("event") == "message"]

    def errors(self) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self._events if e.get("event") == "error"]

    def wait_for(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Waits until ``count`` deliveries arrived; returns all deliveries so far."""

        def enough() -> bool:
            return sum(1 for e in self._events if e.get("event") == "message") >= count

        self._wait(enough, timeout, f"{count} messages")
        return self.messages()

    def stop(self, timeout: float = SHUTDOWN_GRACE_S + KILL_GRACE_S) -> ClientRun:
        """Asks the child to shut the consumer down (closes its stdin), waits, and returns what
        it reported. Kills it if it takes longer than ``timeout``. Idempotent."""
        if self._run is not None:
            return self._run
        try:
            if self._proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self._proc.stdin.close()
            try:
                returncode: int | None = self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                returncode = None
            self._reader.join(5.0)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._stderr.seek(0)
            stderr = self._stderr.read().decode("utf-8", errors="replace")
            self._stderr.close()
            run = self._snapshot()
            run.returncode, run.stderr = returncode, stderr
            self._run = run
            return run
        finally:
            self._where.cleanup()

    def __enter__(self) -> PushConsumerHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_push_consumer(
    namesrv: str,
    topic: str,
    *,
    home: Path | None = None,
    wait_started: bool = True,
    **options: Any,
) -> PushConsumerHandle:
    """Starts the official push consumer in a child; options are those of
    :func:`push_command`. Returns once the client has started (unless ``wait_started`` is
    false)."""
    handle = PushConsumerHandle(push_command(namesrv, topic, **options), home=home)
    if wait_started:
        try:
            handle.wait_started()
        except BaseException:
            handle.stop()
            raise
    return handle


if __name__ == "__main__":
    main(sys.argv[1:])
