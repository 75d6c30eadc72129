"""A broker with RocketMQ's plain ACL (``pyrmq serve --acl plain_acl.yml``) against the official
4.x client (``rocketmq==0.4.4``, which signs every request) and pyrmq's own clients: who may
send, pull, consume and administer, and a file edited under a running broker."""

from __future__ import annotations

import asyncio
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests import helpers
from tests.helpers import fast_config

from pyrmq.acl import Credentials
from pyrmq.client.admin import Admin
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.message import Message, MessageExt, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import BrokerError, PyrmqError
from pyrmq.remoting.protocol import ResponseCode

from .rmq_client import ClientRun, producer_command, pull_command, run_command
from .servers import ServerProcess, serving

pytestmark = [
    pytest.mark.compat,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]

TOPIC = "TopicAcl"
OTHER = "TopicAclOther"
GROUP = "GID_ACL"
PRODUCER = Credentials("producer1", "producer-secret")
CONSUMER = Credentials("consumer1", "consumer-secret")
ADMIN = Credentials("adminuser", "admin-secret")

PLAIN = f"""
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=SUB]
    groupPerms: [{GROUP}=SUB]
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    return path


@pytest.fixture
def server(tmp_path: Path, acl_file: Path) -> Iterator[ServerProcess]:
    with serving(tmp_path, "--acl", str(acl_file)) as s:
        namesrv = s.addresses()[0]

        async def create() -> None:
            async with Admin(namesrv, credentials=ADMIN) as admin:
                for topic in (TOPIC, OTHER):
                    await admin.create_topic(topic, queue_nums=2)

        helpers.run(create, 30)
        yield s


def _as(credentials: Credentials | None, command: dict[str, Any]) -> dict[str, Any]:
    if credentials is not None:
        command = {
            **command,
            "access_key": credentials.access_key,
            "secret_key": credentials.secret_key,
        }
    return command


def _produce(namesrv: str, credentials: Credentials | None, topic: str, n: int) -> ClientRun:
    bodies = [f"{topic}-{i}" for i in range(n)]
    command = producer_command(namesrv, topic, bodies, send_timeout_ms=2000, timeout=60)
    return run_command(_as(credentials, command))


def _pull(namesrv: str, credentials: Credentials | None, topic: str) -> ClientRun:
    return run_command(_as(credentials, pull_command(namesrv, topic, group=GROUP, timeout=60)))


def _refusal(run: ClientRun) -> str:
    """What the client said when its requests were refused."""
    return " ".join(str(e.get("error")) for e in run.errors)


def test_the_official_client_sends_and_pulls_only_as_its_account_allows(
    server: ServerProcess, tmp_path: Path
) -> None:
    namesrv = server.addresses()[0]
    sent = _produce(namesrv, PRODUCER, TOPIC, 5)
    assert sent.ok, sent.describe()
    assert [e["status"] for e in sent.sent] == ["SEND_OK"] * 5

    # Refused: no credentials, a wrong secret, an unknown account, a topic not granted.
    for who, topic, reason in [
        (None, TOPIC, "No accessKey is configured"),
        (Credentials("producer1", "not-the-secret"), TOPIC, "Check signature failed"),
        (Credentials("stranger1", "whatever-secret"), TOPIC, "No acl config for stranger1"),
        (PRODUCER, OTHER, f"No PUB permission for topic {OTHER}"),
        (CONSUMER, TOPIC, f"No PUB permission for topic {TOPIC}"),
    ]:
        refused = _produce(namesrv, who, topic, 1)
        assert not refused.ok, (who, topic)
        assert refused.sent == [] or all(e["status"] != "SEND_OK" for e in refused.sent)
        # The C++ client reports a refused send as "No route info"; the broker logs why.
        assert "No route info" in _refusal(refused), refused.describe()
        assert reason in (tmp_path / "serve.log").read_text(), reason

    # The producer may not read what it sent; the consumer reads all of it, once.
    not_allowed = _pull(namesrv, PRODUCER, TOPIC)
    assert not_allowed.messages == []
    assert not not_allowed.ok, not_allowed.describe()
    assert f"No SUB permission for topic {TOPIC}" in (tmp_path / "serve.log").read_text()
    pulled = _pull(namesrv, CONSUMER, TOPIC)
    assert pulled.ok, pulled.describe()
    expected = [f"{TOPIC}-{i}".encode() for i in range(5)]
    assert sorted(m["body"] for m in pulled.messages) == sorted(expected)


def grant(acl_file: Path) -> None:
    """Gives the producer account PUB on the other topic too."""
    granted = f"topicPerms: [{TOPIC}=PUB, {OTHER}=PUB]"
    acl_file.write_text(PLAIN.replace(f"topicPerms: [{TOPIC}=PUB]", granted, 1))
    stamp = time.time_ns() + 10**9
    os.utime(acl_file, ns=(stamp, stamp))


def test_pyrmq_clients_sign_and_a_changed_file_applies_without_a_restart(
    server: ServerProcess, acl_file: Path
) -> None:
    namesrv = server.addresses()[0]
    got: list[MessageExt] = []
    lock = threading.Lock()

    retried: list[MessageExt] = []

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        with lock:
            if msgs[0].body == b"m3" and not retried:
                # Sent back to the group's retry topic, which the account may use as the group.
                retried.append(msgs[0])
                return ConsumeStatus.RECONSUME_LATER
            got.extend(msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    async def scenario() -> None:
        async with Producer(
            "PG_ACL", client_config=fast_config(namesrv, credentials=PRODUCER)
        ) as producer:
            for i in range(10):
                result = await producer.send(Message(TOPIC, f"m{i}".encode()))
                assert result.status is SendStatus.OK
            with pytest.raises(PyrmqError, match=f"No PUB permission for topic {OTHER}"):
                await producer.send(Message(OTHER, b"x"))

        consumer = PushConsumer(
            GROUP,
            client_config=fast_config(namesrv, credentials=CONSUMER),
            consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        )
        consumer.subscribe(TOPIC, "*", listener)
        async with consumer:
            await helpers.eventually(lambda: len(got) >= 10, 30, "10 deliveries")
            await asyncio.sleep(1.0)
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(10))
        assert [m.reconsume_times for m in got if m.body == b"m3"] == [1]

        # The consumer account's offsets reached the broker (UPDATE_CONSUMER_OFFSET allowed).
        async with Admin(namesrv, credentials=ADMIN) as admin:
            stats = await admin.consume_stats(GROUP, TOPIC)
            assert stats.lag == 0

        # Admin requests need an admin account.
        async with Admin(namesrv, credentials=PRODUCER) as admin:
            with pytest.raises(BrokerError, match="not an admin") as refused:
                await admin.create_topic("TopicNotAllowed", queue_nums=1)
            assert refused.value.code == ResponseCode.NO_PERMISSION

        # Granted PUB on the other topic in the file: the running broker takes it up.
        grant(acl_file)
        async with Producer(
            "PG_ACL2", client_config=fast_config(namesrv, credentials=PRODUCER)
        ) as producer:
            deadline = time.monotonic() + 10
            while True:
                try:
                    result = await producer.send(Message(OTHER, b"now allowed"))
                    break
                except PyrmqError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
            assert result.status is SendStatus.OK

    helpers.run(scenario, 120)


def test_the_admin_command_signs_with_the_account_it_is_given(server: ServerProcess) -> None:
    namesrv = server.addresses()[0]

    def admin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pyrmq", "admin", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
            check=False,
        )

    create = ["update-topic", "-n", namesrv, "-t", "TopicByCli", "-r", "2"]
    unsigned = admin(*create)
    assert unsigned.returncode != 0
    assert "No accessKey is configured" in unsigned.stderr
    not_admin = admin("--access-key", "producer1", "--secret-key", "producer-secret", *create)
    assert not_admin.returncode != 0
    assert "not an admin" in not_admin.stderr
    keys = {"PYRMQ_ACCESS_KEY": "adminuser", "PYRMQ_SECRET_KEY": "admin-secret"}
    created = admin(*create, env=keys)
    assert created.returncode == 0, created.stderr
    status = admin("topic-status", "-n", namesrv, "-t", "TopicByCli", env=keys)
    assert status.returncode == 0, status.stderr
    # Two queues, as created.
    assert [line.split()[:2] for line in status.stdout.splitlines()[1:]] == [
        ["broker-a", "0"],
        ["broker-a", "1"],
    ]
    half = admin("--access-key", "adminuser", "topic-status", "-n", namesrv, "-t", TOPIC)
    assert half.returncode == 2
    assert "go together" in half.stderr
