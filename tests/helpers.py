"""Helpers shared by the tests in ``integration/`` and ``compat/``: run a scenario with a
deadline, poll for a condition, client intervals short enough for tests, ``pyrmq admin``, a
client's batch body, and a queue's messages or a group's offset read on a fresh connection.

Test modules import it as ``tests.helpers`` (pytest's importlib mode makes ``tests`` importable
from the root of the checkout, as it does ``tests.compat.servers``).
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pyrmq.client.api import ClientAPI, PullResult
from pyrmq.client.instance import ClientConfig
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader, RegisterBrokerRequestHeader
from pyrmq.remoting.protocol import RequestCode

__all__ = [
    "child_env",
    "client_batch",
    "committed_offset",
    "consumer_heartbeat",
    "eventually",
    "fast_config",
    "pull_head",
    "pyrmq_admin",
    "readable",
    "remoting_call",
    "run",
    "run_python",
    "send_raw",
]


def run(scenario: Callable[[], Awaitable[None]], timeout_s: float = 60.0) -> None:
    """Runs the coroutine function ``scenario`` in a new event loop; fails after ``timeout_s``."""
    asyncio.run(asyncio.wait_for(scenario(), timeout_s))


def readable(fd: int, timeout_s: float) -> bool:
    """Whether ``fd`` becomes readable within ``timeout_s`` (0: is it now)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(int(timeout_s * 1000)))


async def eventually(
    predicate: Callable[[], object],
    timeout_s: float = 5.0,
    what: str = "condition",
    *,
    interval_s: float = 0.01,
) -> None:
    """Polls ``predicate`` every ``interval_s`` until it holds; fails after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"{what} not met within {timeout_s} s")
        await asyncio.sleep(interval_s)


async def closed_within(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the server closes ``sock`` within ``timeout_s`` (EOF or a reset)."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 1), 0.05)
        except TimeoutError:
            continue
        except ConnectionError:
            return True
        if not data:
            return True
    return False


def fast_config(namesrv: str, **overrides: Any) -> ClientConfig:
    """Client intervals short enough for tests: rebalance, heartbeat and route refresh every
    second, offsets persisted twice a second."""
    settings: dict[str, Any] = {
        "namesrv_addr": namesrv,
        "rebalance_interval_s": 1.0,
        "heartbeat_broker_interval_s": 1.0,
        "persist_consumer_offset_interval_s": 0.5,
        "poll_name_server_interval_s": 1.0,
    }
    return ClientConfig(**{**settings, **overrides})


def pyrmq_admin(*args: str) -> subprocess.CompletedProcess[str]:
    """``pyrmq admin ARGS`` in a child process; its output, whatever its exit status."""
    return subprocess.run(
        [sys.executable, "-m", "pyrmq.cli.main", "admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def client_batch(items: list[tuple[int, bytes, dict[str, str]]]) -> bytes:
    """RocketMQ's client batch body: per message totalSize | magic | bodyCRC | flag | bodyLen |
    body | propertiesLen (i16) | properties, big-endian."""
    out = bytearray()
    for flag, body, props in items:
        encoded = "\x02".join(f"{k}\x01{v}" for k, v in props.items()).encode()
        total = 20 + len(body) + 2 + len(encoded)
        out += struct.pack(">iiiii", total, 0, 0, flag, len(body))
        out += body
        out += struct.pack(">h", len(encoded)) + encoded
    return bytes(out)


def child_env() -> dict[str, str]:
    """The environment for a child Python that imports what this one does."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))


def run_python(*args: str, timeout_s: float = 120) -> Any:
    """Runs ``python *args`` to completion and returns the JSON report it printed; fails with
    the end of its stderr if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        env=child_env(),
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


def consumer_heartbeat(client_id: str, group: str, topic: str) -> bytes:
    """A C++-shaped HeartbeatData with one clustering push consumer group subscribed to
    ``topic``."""
    data = {
        "clientID": client_id,
        "consumerDataSet": [
            {
                "consumeFromWhere": 0,
                "consumeType": 1,
                "groupName": group,
                "messageModel": 1,
                "subscriptionDataSet": [
                    {"codeSet": [], "subString": "*", "subVersion": "1", "tagsSet": [],
                     "topic": topic},
                ],
            }
        ],
    }  # fmt: skip
    return json.dumps(data).encode() + b"\n"


async def committed_offset(broker: str, group: str, mq: MessageQueue) -> int | None:
    """QUERY_CONSUMER_OFFSET, from a fresh connection."""
    remoting = RemotingClient()
    try:
        return await ClientAPI(remoting).query_consumer_offset(broker, group, mq)
    finally:
        await remoting.close()


async def pull_head(broker: str, broker_name: str, topic: str, queue_id: int) -> PullResult:
    """The first 32 messages of a queue, pulled from a fresh connection without holding."""
    remoting = RemotingClient()
    try:
        header = PullMessageRequestHeader.immediate("CG_TEST_INSPECT", topic, queue_id, 0)
        return await ClientAPI(remoting).pull(broker, broker_name, header, 5.0)
    finally:
        await remoting.close()


def remoting_call(addr: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
    """One request on a fresh connection, and its answer."""

    async def call() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(addr, RemotingCommand.request(code, ext, body), 5.0)
        finally:
            await client.close()

    return asyncio.run(call())


def send_raw(
    broker: str,
    topic: str,
    body: bytes,
    *,
    sys_flag: int = 0,
    properties: str = "",
    queue_id: int = 0,
    producer_group: str = "PG",
) -> RemotingCommand:
    """SEND_MESSAGE as a 4.x client sends it, with any sys flag and encoded properties
    (``name\\x01value\\x02``...)."""
    ext = send_fields(
        topic,
        sys_flag=sys_flag,
        properties=properties,
        queue_id=queue_id,
        producer_group=producer_group,
    )
    return remoting_call(broker, RequestCode.SEND_MESSAGE, ext, body)


def send_fields(
    topic: str,
    *,
    sys_flag: int = 0,
    properties: str = "",
    queue_id: int = 0,
    producer_group: str = "PG",
) -> dict[str, str]:
    """The ext fields of a SEND_MESSAGE as a 4.x client fills them."""
    return {
        "producerGroup": producer_group,
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id),
        "sysFlag": str(sys_flag),
        "bornTimestamp": "0",
        "flag": "0",
        "properties": properties,
        "reconsumeTimes": "0",
        "unitMode": "false",
    }


def register_broker_request(
    broker_name: str, broker_addr: str, topics: dict[str, int], *, counter: int = 1
) -> RemotingCommand:
    """REGISTER_BROKER for a master of cluster "C" serving ``topics`` (name -> queue count,
    read and write) at data version ``counter``."""
    host, _, port = broker_addr.rpartition(":")
    header = RegisterBrokerRequestHeader(
        broker_name=broker_name,
        broker_addr=broker_addr,
        cluster_name="C",
        ha_server_addr=f"{host}:{int(port) + 1}",
        broker_id=0,
    )
    table = {t: {"readQueueNums": n, "writeQueueNums": n, "perm": 6} for t, n in topics.items()}
    body = {
        "topicConfigSerializeWrapper": {
            "dataVersion": {"counter": counter},
            "topicConfigTable": table,
        }
    }
    return RemotingCommand.request(
        RequestCode.REGISTER_BROKER, header.to_ext(), json.dumps(body).encode()
    )
