"""TLS on real servers (``--tls-config tls.properties``): a permissive broker serves TLS and the
official 4.x client's plain TCP on one port; an enforcing one refuses plain TCP and serves the
official 5.x client over TLS on its gRPC port; a name server and a broker that require client
certificates, the broker presenting its own."""

from __future__ import annotations

import base64
import platform
import ssl
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from tests import helpers
from tests.helpers import fast_config
from tests.pki import Pki

from pyrmq.client.admin import Admin
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.message import Message, MessageExt, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.errors import PyrmqError
from pyrmq.remoting.tls import client_context

from .rmq_client import check, producer_command, pull_command, run_command
from .servers import ServerProcess, serving

pytestmark = [
    pytest.mark.compat,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not (sys.platform == "linux" and platform.machine() == "x86_64"),
        reason="the rocketmq 0.4.4 wheel ships librocketmq for x86_64 Linux only",
    ),
]

TOPIC = "TopicTls"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


def _text(b64: str) -> str:
    return base64.b64decode(b64).decode()


async def _send_and_consume(namesrv: str, tls: ssl.SSLContext, group: str, n: int) -> None:
    """``n`` messages sent and consumed over ``tls``, with a retry on the way."""
    got: list[bytes] = []
    retried: list[bytes] = []
    lock = threading.Lock()

    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        with lock:
            if msgs[0].body == b"tls-1" and not retried:
                retried.append(msgs[0].body)
                return ConsumeStatus.RECONSUME_LATER
            got.extend(m.body for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    config = fast_config(namesrv, tls=tls)
    async with Producer(f"PG_{group}", client_config=config) as producer:
        for i in range(n):
            result = await producer.send(Message(TOPIC, f"tls-{i}".encode()))
            assert result.status is SendStatus.OK
    consumer = PushConsumer(
        group,
        client_config=fast_config(namesrv, tls=tls),
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    consumer.subscribe(TOPIC, "*", listener)
    async with consumer:
        await helpers.eventually(lambda: len(got) >= n, 40, f"{n} deliveries over TLS")
    assert sorted(got) == sorted(f"tls-{i}".encode() for i in range(n))
    assert retried == [b"tls-1"]


def test_a_permissive_broker_serves_tls_and_plain_clients_on_one_port(
    tmp_path: Path, pki: Pki, rmq5: Any
) -> None:
    tls_file = pki.properties(tmp_path / "tls.properties")
    with serving(tmp_path, "--tls-config", str(tls_file)) as server:
        namesrv = server.addresses()[0]

        async def scenario() -> None:
            async with Admin(namesrv, tls=pki.client()) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)
            await _send_and_consume(namesrv, pki.client(), "CG_TLS_PERMISSIVE", 6)
            # A client that trusts another CA does not connect.
            stranger = client_context(ca_file=_other_ca(tmp_path))
            with pytest.raises(PyrmqError, match="CERTIFICATE_VERIFY_FAILED"):
                async with Producer(
                    "PG_STRANGER", client_config=fast_config(namesrv, tls=stranger)
                ) as p:
                    await p.send(Message(TOPIC, b"never"))

        helpers.run(scenario, 120)

        # The official 4.x client, which has no TLS, sends and pulls on the same port.
        sent = check(run_command(producer_command(namesrv, TOPIC, ["plain-0", "plain-1"])))
        assert [e["status"] for e in sent.sent] == ["SEND_OK", "SEND_OK"]
        pulled = check(run_command(pull_command(namesrv, TOPIC, group="CG_TLS_PLAIN_PULL")))
        bodies = {m["body"].decode() for m in pulled.messages}
        assert bodies == {f"tls-{i}" for i in range(6)} | {"plain-0", "plain-1"}

        # The admin command, over TLS and without.
        listed = helpers.pyrmq_admin(
            "--tls", "--tls-ca", str(pki.ca_file), "cluster-list", "-n", namesrv
        )
        assert listed.returncode == 0, listed.stderr
        assert "broker-a" in listed.stdout
        plain = helpers.pyrmq_admin("cluster-list", "-n", namesrv)
        assert plain.returncode == 0, plain.stderr
        assert "broker-a" in plain.stdout

        # The gRPC port too: the official 5.x client with TLS and without.
        endpoint = server.grpc_address()
        roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(pki.ca_file)}
        for tls, body in ((True, "Z3JwYy10bHM="), (False, "Z3JwYy1wbGFpbg==")):
            spec = {"endpoint": endpoint, "tls": tls, "topic": TOPIC, "messages": [{"body": body}]}
            ids = rmq5("produce", spec, env=roots)
            assert all(isinstance(i, str) for i in ids), ids
        got = rmq5(
            "simple",
            {
                "endpoint": endpoint,
                "tls": True,
                "topic": TOPIC,
                "group": "CG_TLS_GRPC_PERMISSIVE",
                "count": 10,
                "timeout_s": 40,
            },
            env=roots,
        )
        bodies = {_text(m["body"]) for m in got["messages"]}
        assert bodies == {"grpc-tls", "grpc-plain", "plain-0", "plain-1"} | {
            f"tls-{i}" for i in range(6)
        }


def _other_ca(root: Path) -> Path:
    path = root / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


def test_an_enforcing_broker_refuses_plain_tcp_and_serves_grpc_over_tls(
    tmp_path: Path, pki: Pki, rmq5: Any
) -> None:
    tls_file = pki.properties(tmp_path / "tls.properties", tls_server_mode="enforcing")
    with serving(tmp_path, "--tls-config", str(tls_file)) as server:
        namesrv = server.addresses()[0]

        async def scenario() -> None:
            async with Admin(namesrv, tls=pki.client()) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)
            await _send_and_consume(namesrv, pki.client(), "CG_TLS_ENFORCING", 4)
            with pytest.raises(PyrmqError, match="closed"):
                async with Admin(namesrv) as admin:
                    await admin.clusters()

        helpers.run(scenario, 120)

        # The official 4.x client cannot even learn the route: its send hangs until stopped.
        refused = run_command(
            producer_command(namesrv, TOPIC, ["plain"], send_timeout_ms=2000, timeout=8)
        )
        assert not refused.ok
        assert not any(e.get("status") == "SEND_OK" for e in refused.sent)
        log = server.log_path.read_text()
        assert "plain TCP, and this server enforces TLS" in log

        # The official 5.x client over TLS, trusting the test CA through gRPC's roots file.
        endpoint = server.grpc_address()
        roots = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(pki.ca_file)}
        ids = rmq5(
            "produce",
            {
                "endpoint": endpoint,
                "tls": True,
                "topic": TOPIC,
                "messages": [{"body": "Z3JwYy0w"}, {"body": "Z3JwYy0x"}],
            },
            env=roots,
        )
        assert all(isinstance(i, str) for i in ids), ids
        got = rmq5(
            "simple",
            {
                "endpoint": endpoint,
                "tls": True,
                "topic": TOPIC,
                "group": "CG_TLS_GRPC",
                "count": 6,
                "timeout_s": 40,
            },
            env=roots,
        )
        bodies = sorted(_text(m["body"]) for m in got["messages"])
        assert bodies == sorted(["grpc-0", "grpc-1", *(f"tls-{i}" for i in range(4))])


@pytest.fixture
def name_server(tmp_path: Path, pki: Pki) -> Iterator[ServerProcess]:
    tls_file = pki.properties(
        tmp_path / "namesrv-tls.properties",
        tls_server_mode="enforcing",
        tls_server_need_client_auth="require",
        tls_server_trustCertPath=str(pki.ca_file),
    )
    server = ServerProcess(
        ["namesrv", "--port", "0", "--tls-config", str(tls_file)], tmp_path / "namesrv.log"
    )
    try:
        yield server
    finally:
        assert server.stop() == 0, (tmp_path / "namesrv.log").read_text()[-3000:]


def test_servers_that_require_client_certificates(
    tmp_path: Path, pki: Pki, name_server: ServerProcess
) -> None:
    namesrv = name_server.addresses()[0]
    # The broker's file: its listener as the name server's, and its own client certificate.
    broker_tls = pki.properties(
        tmp_path / "broker-tls.properties",
        tls_server_mode="enforcing",
        tls_server_need_client_auth="require",
        tls_server_trustCertPath=str(pki.ca_file),
        tls_enable="true",
        tls_client_authServer="true",
        tls_client_trustCertPath=str(pki.ca_file),
        tls_client_certPath=str(pki.client_cert),
        tls_client_keyPath=str(pki.client_key),
    )
    broker = ServerProcess(
        [
            "broker",
            "-n",
            namesrv,
            "--store",
            str(tmp_path / "store"),
            "--port",
            "0",
            "--tls-config",
            str(broker_tls),
        ],
        tmp_path / "broker.log",
    )
    try:

        async def scenario() -> None:
            async with Admin(namesrv, tls=pki.client(with_cert=True)) as admin:
                # Registered over TLS with its client certificate, before the ready line.
                assert [b.broker_name for b in await admin.clusters()] == ["broker-a"]
                await admin.create_topic(TOPIC, queue_nums=1)
            await _send_and_consume(namesrv, pki.client(with_cert=True), "CG_TLS_MUTUAL", 3)
            # Without a client certificate the handshake fails.
            with pytest.raises(PyrmqError):
                async with Admin(namesrv, tls=pki.client()) as admin:
                    await admin.clusters()

        helpers.run(scenario, 120)
    finally:
        assert broker.stop() == 0, (tmp_path / "broker.log").read_text()[-3000:]


def _split(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


def test_a_server_given_no_certificate_serves_tls_with_one_it_signed_itself(
    tmp_path: Path, rmq5: Any
) -> None:
    from cryptography import x509

    with serving(tmp_path) as server:
        namesrv, broker = server.addresses()[:2]
        endpoint = server.grpc_address()
        # Every port hands out the process's one certificate, signed by itself, naming the
        # loopback address the clients here connect to.
        pems = {ssl.get_server_certificate(_split(a)) for a in (namesrv, broker, endpoint)}
        assert len(pems) == 1
        [pem] = pems
        cert = x509.load_pem_x509_certificate(pem.encode())
        assert cert.issuer == cert.subject
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "127.0.0.1" in {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}

        async def scenario() -> None:
            # As RocketMQ's clients do by default: TLS, checking no certificate.
            trusting = client_context(verify=False)
            async with Admin(namesrv, tls=trusting) as admin:
                await admin.create_topic(TOPIC, queue_nums=2)
            await _send_and_consume(namesrv, trusting, "CG_TLS_TEST_MODE", 3)
            # A client that checks certificates refuses this one.
            with pytest.raises(PyrmqError, match="CERTIFICATE_VERIFY_FAILED"):
                async with Admin(namesrv, tls=client_context()) as admin:
                    await admin.clusters()

        helpers.run(scenario, 120)

        # The official 5.x client over TLS, trusting the certificate it was shown.
        roots = tmp_path / "served.pem"
        roots.write_text(pem)
        env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(roots)}
        spec = {"endpoint": endpoint, "tls": True, "topic": TOPIC}
        ids = rmq5("produce", {**spec, "messages": [{"body": "Z3JwYy10bHM="}]}, env=env)
        assert all(isinstance(i, str) for i in ids), ids
        got = rmq5(
            "simple",
            {**spec, "group": "CG_TLS_TEST_MODE_GRPC", "count": 4, "timeout_s": 40},
            env=env,
        )
        bodies = {_text(m["body"]) for m in got["messages"]}
        assert bodies == {"grpc-tls", "tls-0", "tls-1", "tls-2"}


def test_without_the_test_mode_a_server_given_no_certificate_serves_plain_tcp_only(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "tls.properties"
    settings.write_text("tls.test.mode.enable=false\n")
    with serving(tmp_path, "--tls-config", str(settings)) as server:
        for address in (*server.addresses()[:2], server.grpc_address()):
            with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
                ssl.get_server_certificate(_split(address), timeout=10)

        async def scenario() -> None:
            async with Admin(server.addresses()[0]) as admin:
                assert await admin.clusters()

        helpers.run(scenario, 60)
