"""Drives the official RocketMQ 5 Python client (``rocketmq-python-client``) for tests/compat.

Run by ``.venv-rmq5/bin/python`` (``make rmq5-client``), never imported by the suite: that
client's package is also called ``rocketmq``, as the 4.x client's is. One scenario per run:
``python rmq5_client.py SCENARIO JSON``; it prints one JSON line with what happened. Every
scenario takes ``endpoint``, optionally ``access_key``/``secret_key`` (an ACL account),
``namespace``,
``tls`` (connect over TLS, trusting the roots in $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH) and
``client_log`` (report what the client logged at WARNING and above, beside the result).
"""

import base64
import json
import logging
import sys
import threading
import time
from typing import Any

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType


def _config(spec: dict[str, Any]) -> ClientConfiguration:
    """``access_key``/``secret_key``: the ACL account the client signs its calls as;
    ``namespace``: the namespace its topics and groups are in."""
    credentials = Credentials(spec.get("access_key", ""), spec.get("secret_key", ""))
    return ClientConfiguration(
        spec["endpoint"], credentials, namespace=spec.get("namespace", ""), request_timeout=3
    )


class _LogTap(logging.Handler):
    """Keeps what the client logs at WARNING and above: it logs, rather than raises, what
    the broker answers its route queries, heartbeats and settings with."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _seen(message: Any) -> dict[str, Any]:
    return {
        "body": base64.b64encode(message.body).decode(),
        "topic": message.topic,
        "tag": message.tag,
        "keys": sorted(message.keys or ()),
        "properties": dict(message.properties or {}),
        "message_id": message.message_id,
        "attempt": message.delivery_attempt,
        "group": message.message_group,
        "corrupted": message.corrupted,
        "delivery_timestamp": message.delivery_timestamp,
        "received_ms": int(time.time() * 1000),
    }


def produce(spec: dict[str, Any]) -> Any:
    producer = Producer(_config(spec), (spec["topic"],), tls_enable=spec.get("tls", False))
    producer.startup()
    ids = []
    try:
        for item in spec["messages"]:
            message = Message()
            message.topic = spec["topic"]
            message.body = base64.b64decode(item["body"])
            if item.get("tag"):
                message.tag = item["tag"]
            if item.get("key"):
                # The client's setter takes one key.
                message.keys = item["key"]
            if item.get("group"):
                message.message_group = item["group"]
            if item.get("delay_ms"):
                # Epoch milliseconds, as the client's own docs and tests pass it.
                message.delivery_timestamp = int(time.time() * 1000) + item["delay_ms"]
            for name, value in item.get("properties", {}).items():
                message.add_property(name, value)
            try:
                ids.append(producer.send(message).message_id)
            except Exception as e:
                ids.append({"error": f"{type(e).__name__}: {e}"})
    finally:
        producer.shutdown()
    return ids


def recall(spec: dict[str, Any]) -> Any:
    """Sends ``messages`` (each with ``delay_ms``), then recalls those marked ``recall`` with
    the handles their receipts carried, and tries each handle of ``bad_handles`` too. Reports
    each send's id and handle, what each recall returned, and the errors raised."""
    producer = Producer(_config(spec), (spec["topic"],), tls_enable=spec.get("tls", False))
    producer.startup()
    sent, recalled, errors = [], [], []
    try:
        receipts = []
        for item in spec["messages"]:
            message = Message()
            message.topic = spec["topic"]
            message.body = base64.b64decode(item["body"])
            if item.get("delay_ms"):
                message.delivery_timestamp = int(time.time() * 1000) + item["delay_ms"]
            receipt = producer.send(message)
            receipts.append((item, receipt))
            sent.append({"message_id": receipt.message_id, "handle": receipt.recall_handle})
        for item, receipt in receipts:
            if item.get("recall"):
                recalled.append(producer.recall_message(spec["topic"], receipt.recall_handle))
        for handle in spec.get("bad_handles", ()):
            try:
                producer.recall_message(spec["topic"], handle)
                errors.append(None)
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
    finally:
        producer.shutdown()
    return {"sent": sent, "recalled": recalled, "errors": errors}


def simple(spec: dict[str, Any]) -> Any:
    """Receives until ``count`` messages came or ``timeout_s`` passed; acks each if ``ack``.
    With ``catch``, a receive or ack that raises ends the run, reported under ``errors``.
    With ``hold_s``, the consumer stays online that long after its last receive."""
    kind = FilterType.SQL if spec.get("sql") else FilterType.TAG
    consumer = SimpleConsumer(
        _config(spec),
        spec["group"],
        {spec["topic"]: FilterExpression(spec.get("expression", "*"), kind)},
        await_duration=spec.get("await_s", 2),
        tls_enable=spec.get("tls", False),
    )
    consumer.startup()
    got: list[dict[str, Any]] = []
    errors: list[str] = []
    empty = 0
    deadline = time.monotonic() + spec["timeout_s"]
    try:
        while len(got) < spec["count"] and time.monotonic() < deadline:
            try:
                batch = consumer.receive(spec.get("batch", 16), spec.get("invisible_s", 15))
                if not batch:
                    empty += 1
                for message in batch:
                    got.append(_seen(message))
                    if spec.get("ack", True):
                        consumer.ack(message)
            except Exception as e:
                if not spec.get("catch"):
                    raise
                errors.append(f"{type(e).__name__}: {e}")
                break
        time.sleep(spec.get("hold_s", 0))
    finally:
        consumer.shutdown()
    out: dict[str, Any] = {"messages": got, "empty_receives": empty}
    if spec.get("catch"):
        out["errors"] = errors
    return out


def redeliver(spec: dict[str, Any]) -> Any:
    """Receives one message, shortens its invisibility to 1 s, receives it again, and acks
    with each handle it was given."""
    consumer = SimpleConsumer(
        _config(spec), spec["group"], {spec["topic"]: FilterExpression()}, await_duration=2
    )
    consumer.startup()
    out: dict[str, Any] = {}
    try:
        [first] = consumer.receive(1, 30)
        out["first"] = _seen(first)
        consumer.change_invisible_duration(first, 1)
        started = time.monotonic()
        again: list[Any] = []
        while not again and time.monotonic() - started < 10:
            again = consumer.receive(1, 30)
        out["again_after_s"] = time.monotonic() - started
        [second] = again
        out["second"] = _seen(second)
        consumer.ack(second)
        out["second_ack"] = "ok"
        try:
            consumer.ack(first)
            out["first_ack"] = "ok"
        except Exception as e:
            out["first_ack"] = f"{type(e).__name__}: {e}"
        try:
            consumer.ack(second)
            out["second_ack_again"] = "ok"
        except Exception as e:
            out["second_ack_again"] = f"{type(e).__name__}: {e}"
        out["after"] = [_seen(m) for m in consumer.receive(16, 30)]
    finally:
        consumer.shutdown()
    return out


class _Listener(MessageListener):
    """Logs every call; a body listed in ``fail`` fails its first that many calls (counted
    here: a FIFO consumer retries locally without counting deliveries)."""

    def __init__(self, fail: dict[str, int]) -> None:
        self.fail = fail
        self.calls: dict[str, int] = {}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.busy: set[str] = set()

    def consume(self, message: Any) -> ConsumeResult:
        seen = _seen(message)
        seen["at"] = time.monotonic()
        body = message.body.decode(errors="replace")
        group = message.message_group or ""
        with self.lock:
            self.log.append(seen)
            calls = self.calls[body] = self.calls.get(body, 0) + 1
            # Two calls of one message group at once would break its order.
            seen["overlap"] = bool(group) and group in self.busy
            self.busy.add(group)
        try:
            time.sleep(0.002)
            return (
                ConsumeResult.FAILURE if calls <= self.fail.get(body, 0) else ConsumeResult.SUCCESS
            )
        finally:
            with self.lock:
                self.busy.discard(group)


def push(spec: dict[str, Any]) -> Any:
    """Consumes until ``count`` deliveries were seen or ``timeout_s`` passed; a body listed in
    ``fail`` fails its first that many deliveries."""
    listener = _Listener(spec.get("fail", {}))
    consumer = PushConsumer(
        _config(spec),
        spec["group"],
        listener,
        {spec["topic"]: FilterExpression(spec.get("expression", "*"))},
    )
    consumer.startup()
    print("started", flush=True)
    deadline = time.monotonic() + spec["timeout_s"]
    try:
        while time.monotonic() < deadline:
            with listener.lock:
                if len(listener.log) >= spec["count"]:
                    break
            time.sleep(0.05)
        # Acks leave after the listener returns: let the last ones out before stopping.
        time.sleep(spec.get("linger_s", 0.5))
    finally:
        consumer.shutdown()
    with listener.lock:
        return listener.log


class _Checker(TransactionChecker):
    """Answers the broker's checks: commit for bodies listed, rollback for the others."""

    def __init__(self, commit: set[str]) -> None:
        self.commit = commit
        self.checked: list[str] = []
        self.lock = threading.Lock()

    def check(self, message: Any) -> Any:
        body = message.body.decode()
        with self.lock:
            self.checked.append(body)
        if body in self.commit:
            return TransactionResolution.COMMIT
        return TransactionResolution.ROLLBACK


def transactions(spec: dict[str, Any]) -> Any:
    """Sends ``commit``, ``rollback`` and ``unresolved`` bodies as transaction messages: the
    first committed, the second rolled back, the last left for the broker's check, which the
    checker answers with a commit. Waits ``check_wait_s`` for checks."""
    checker = _Checker(set(spec["unresolved"]))
    producer = Producer(_config(spec), (spec["topic"],), checker)
    producer.startup()
    out: dict[str, Any] = {"ends": []}
    try:
        for kind in ("commit", "rollback", "unresolved"):
            for body in spec[kind]:
                transaction = producer.begin_transaction()
                message = Message()
                message.topic = spec["topic"]
                message.body = body.encode()
                producer.send(message, transaction)
                # commit() and rollback() raise unless the broker answers OK.
                if kind == "commit":
                    transaction.commit()
                    out["ends"].append(kind)
                elif kind == "rollback":
                    transaction.rollback()
                    out["ends"].append(kind)
        deadline = time.monotonic() + spec["check_wait_s"]
        while time.monotonic() < deadline:
            with checker.lock:
                if len(set(checker.checked)) >= len(spec["unresolved"]):
                    break
            time.sleep(0.1)
        time.sleep(1.0)  # the checker's EndTransaction leaves after it returns
    finally:
        producer.shutdown()
    with checker.lock:
        out["checked"] = list(checker.checked)
    return out


SCENARIOS = {
    "produce": produce,
    "recall": recall,
    "simple": simple,
    "redeliver": redeliver,
    "push": push,
    "transactions": transactions,
}

if __name__ == "__main__":
    spec = json.loads(sys.argv[2])
    tap = _LogTap()
    if spec.get("client_log"):
        # The report becomes {"result": ..., "client_log": [...]}.
        logging.getLogger("rocketmq-python-client").addHandler(tap)
    result = SCENARIOS[sys.argv[1]](spec)
    if spec.get("client_log"):
        result = {"result": result, "client_log": tap.lines}
    print(json.dumps(result), flush=True)
