"""An asyncio PushConsumer in a child process, for tests that SIGKILL consumers.

Run as a script::

    python tests/integration/consumer_child.py '{"namesrv": "127.0.0.1:9876", ...}'

Command keys: ``namesrv``, ``topic``, ``group``, ``out`` (the file it writes) and optionally
``expression`` (``*``), ``model`` (``CLUSTERING``), ``instance_name``, ``offsets_dir``,
``consume_from_where`` (``CONSUME_FROM_FIRST_OFFSET``), ``consume_delay_s`` (time the listener
spends on each message), ``rebalance_interval_s``, ``heartbeat_interval_s``,
``persist_interval_s`` and ``route_interval_s`` (1, 1, 0.5 and 1 s), ``timeout_s`` (120: the
child ends itself after that long).

Each line of ``out`` is one JSON object, written whole and flushed, so a parent can read the
file while the child runs and after it was killed:

* ``{"event": "started", "client_id": ...}`` once the consumer started;
* ``{"event": "queues", "queues": ["T@broker-a:0", ...]}`` whenever its assignment changes
  (``%RETRY%`` queues left out);
* ``{"event": "message", "id", "body", "topic", "tags", "queue", "offset", "reconsume_times"}``
  for each delivery, written by the listener before it returns CONSUME_SUCCESS.

The child shuts the consumer down cleanly on SIGTERM or when its stdin reaches end of file.
The parent side is :class:`ConsumerChild`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()


# --- child side ---------------------------------------------------------------------------


async def _consume(cmd: dict[str, Any]) -> None:
    from pyrmq.client.instance import ClientConfig
    from pyrmq.client.message import RETRY_PREFIX, MessageExt
    from pyrmq.client.push_consumer import ConsumeContext, PushConsumer

    out = open(cmd["out"], "a", encoding="utf-8")  # noqa: ASYNC230, SIM115 (closed below)
    lock = threading.Lock()

    def emit(event: str, **fields: Any) -> None:
        line = json.dumps({"event": event, **fields}) + "\n"
        with lock:
            out.write(line)
            out.flush()

    delay_s = float(cmd.get("consume_delay_s", 0.0))

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> None:
        for m in msgs:
            if delay_s:
                time.sleep(delay_s)
            emit(
                "message",
                id=m.id,
                body=m.body.decode(errors="replace"),
                topic=m.topic,
                tags=m.tags,
                queue=str(ctx.message_queue),
                offset=m.queue_offset,
                reconsume_times=m.reconsume_times,
            )

    config = ClientConfig(
        namesrv_addr=cmd["namesrv"],
        instance_name=cmd.get("instance_name"),
        rebalance_interval_s=float(cmd.get("rebalance_interval_s", 1.0)),
        heartbeat_broker_interval_s=float(cmd.get("heartbeat_interval_s", 1.0)),
        persist_consumer_offset_interval_s=float(cmd.get("persist_interval_s", 0.5)),
        poll_name_server_interval_s=float(cmd.get("route_interval_s", 1.0)),
    )
    consumer = PushConsumer(
        cmd["group"],
        message_model=cmd.get("model", "CLUSTERING"),
        consume_from_where=cmd.get("consume_from_where", "CONSUME_FROM_FIRST_OFFSET"),
        offsets_dir=cmd.get("offsets_dir"),
        client_config=config,
    )
    consumer.subscribe(cmd["topic"], cmd.get("expression", "*"), listener)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(sys.stdin.fileno(), lambda: stop.set() if not os.read(0, 4096) else None)
    await consumer.start()
    emit("started", client_id=consumer.instance.client_id)
    deadline = loop.time() + float(cmd.get("timeout_s", 120.0))
    last: list[str] | None = None
    try:
        while not stop.is_set() and loop.time() < deadline:
            queues = [str(q) for q in consumer.assigned_queues() if RETRY_PREFIX not in q.topic]
            if queues != last:
                emit("queues", queues=queues)
                last = queues
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.1)
    finally:
        await consumer.shutdown()
        emit("stopped")
        out.close()


def main(argv: list[str]) -> None:
    asyncio.run(_consume(json.loads(argv[0])))


# --- parent side --------------------------------------------------------------------------


class ConsumerChild:
    """A consumer child process and the lines it wrote."""

    def __init__(self, out: Path, **command: Any) -> None:
        self.out = out
        self.command = {**command, "out": str(out)}
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self._stderr = open(out.with_suffix(".stderr"), "wb")  # noqa: SIM115 (closed in wait)
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), json.dumps(self.command)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env=env,
        )

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every complete line so far (a line cut short by SIGKILL is left out)."""
        try:
            text = self.out.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        found = []
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if kind is None or event.get("event") == kind:
                found.append(event)
        return found

    def messages(self) -> list[dict[str, Any]]:
        return self.events("message")

    def queues(self) -> list[str] | None:
        """The latest reported assignment, or None before the first report."""
        reports = self.events("queues")
        return reports[-1]["queues"] if reports else None

    def wait_until(
        self, predicate: Callable[[], object], timeout_s: float = 20.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if self.proc.poll() is not None:
                raise AssertionError(f"consumer child exited ({self.proc.returncode}): {self}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not met within {timeout_s} s: {self}")
            time.sleep(0.05)

    def wait_started(self, timeout_s: float = 20.0) -> ConsumerChild:
        self.wait_until(lambda: self.events("started"), timeout_s, "start")
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no offset commit."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()

    def stop(self, timeout_s: float = 20.0) -> int | None:
        """A clean shutdown (stdin closed); SIGKILL if it takes longer than ``timeout_s``."""
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.close()
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 20.0) -> int | None:
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self._stderr.close()
        return self.proc.returncode

    def stderr(self) -> str:
        path = self.out.with_suffix(".stderr")
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def __str__(self) -> str:
        return f"consumer child {self.command.get('instance_name')} (stderr: {self.stderr()})"


if __name__ == "__main__":
    main(sys.argv[1:])
