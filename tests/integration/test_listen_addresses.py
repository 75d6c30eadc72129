"""Where servers listen and what they advertise: a name server on the address ``--host`` names,
and a broker that listens on ``bindAddress`` while clients and stored messages know it by
``brokerIP1`` (a broker behind NAT, whose advertised address is not its own)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from tests.compat.servers import ServerProcess
from tests.helpers import remoting_call, send_raw

from pyrmq import _core
from pyrmq.client.admin import Admin
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

# An address of no interface here, as a NAT's public address is not the broker host's.
ADVERTISED = "10.255.255.1"


def refused(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((host, port)) != 0


def test_a_name_server_listens_on_the_host_it_is_given(tmp_path: Path) -> None:
    namesrv = ServerProcess(["namesrv", "--port", "0", "--host", "127.0.0.2"], tmp_path / "n.log")
    try:
        [addr] = namesrv.addresses()
        host, port = addr.rsplit(":", 1)
        assert host == "127.0.0.2"
        answer = remoting_call(addr, RequestCode.GET_BROKER_CLUSTER_INFO, {})
        assert answer.code == ResponseCode.SUCCESS
        assert refused("127.0.0.1", int(port))
    finally:
        assert namesrv.stop() == 0


def test_a_broker_listens_on_bind_address_and_is_known_by_broker_ip1(tmp_path: Path) -> None:
    namesrv = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerIP1={ADVERTISED}\nbindAddress=127.0.0.1\nhaListenPort=0\n")
    try:
        [ns] = namesrv.addresses()
        broker = ServerProcess(
            ["broker", "-n", ns, "-c", str(conf), "--store", str(tmp_path / "store"),
             "--port", "0"],
            tmp_path / "broker.log",
        )  # fmt: skip
        try:
            [advertised] = broker.addresses()
            host, port = advertised.rsplit(":", 1)
            assert host == ADVERTISED
            local = f"127.0.0.1:{port}"
            sent = send_raw(local, "TopicNat", b"behind NAT")
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            # Stored messages name the advertised address, as their ids do.
            stored_host, _ = _core.decode_offset_msg_id(sent.ext_fields["msgId"])
            assert stored_host == advertised

            async def registered() -> dict[int, str]:
                async with Admin(ns) as admin:
                    [entry] = await admin.clusters()
                    return entry.addrs

            assert asyncio.run(registered()) == {0: advertised}
            assert f"ha={ADVERTISED}:" in broker.log_path.read_text()
        finally:
            assert broker.stop() == 0
    finally:
        assert namesrv.stop() == 0
