"""What TLS costs: sends to a ``pyrmq serve`` in permissive TLS mode, over TLS and over plain
TCP on the same ports, against a ``pyrmq serve`` without TLS, in the same run.

    python benches/tls.py            # three rounds of 3,000 sends each way
    python benches/tls.py --quick    # one round of 300, for CI

Remoting rows send SEND_MESSAGE requests (128 B bodies, 4 queues) with pyrmq's
``RemotingClient``; gRPC rows send SendMessage calls with a grpc.aio channel, to pyrmq's own
transport, which tells TLS from plain by a connection's first byte as the remoting port does.
Each row gives msgs/s with one request in flight and with 16, and the rate over the server
without TLS (``tls.server.mode=disabled``: by default a server without a certificate serves TLS
with a self-signed one).
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from tests.compat.servers import ServerProcess
from tests.pki import Pki

from benches.broker import SEND_QUEUES, _body, _check_sent, start_serve
from benches.broker import send_request as remoting_send_request
from benches.grpc_transport import send_request
from pyrmq.client.admin import Admin
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.server import SERVICE_NAME
from pyrmq.remoting.client import RemotingClient

TOPIC = "BenchTls"
IN_FLIGHT = (1, 16)

Send = Callable[[int], Awaitable[None]]


async def _rate(send: Send, count: int, in_flight: int) -> float:
    """msgs/s of ``count`` sends, ``in_flight`` at a time (after one that connects)."""
    await send(0)

    async def sender(first: int) -> None:
        for i in range(first, count, in_flight):
            await send(i)

    started = time.perf_counter()
    await asyncio.gather(*(sender(k) for k in range(in_flight)))
    return count / (time.perf_counter() - started)


async def _remoting(broker: str, tls: ssl.SSLContext | None, count: int, in_flight: int) -> float:
    client = RemotingClient(tls=tls)

    async def send(i: int) -> None:
        request = remoting_send_request(TOPIC, i % SEND_QUEUES, _body(i), f"T{time.time_ns()}-{i}")
        _check_sent(await client.invoke(broker, request, timeout_s=10.0), f"send {i}")

    try:
        return await _rate(send, count, in_flight)
    finally:
        await client.close()


async def _grpc(endpoint: str, ca: bytes | None, count: int, in_flight: int) -> float:
    if ca is None:
        channel = grpc.aio.insecure_channel(endpoint)
    else:
        channel = grpc.aio.secure_channel(endpoint, grpc.ssl_channel_credentials(ca))
    call = channel.unary_unary(
        f"/{SERVICE_NAME}/SendMessage",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=pb.SendMessageResponse.FromString,
    )
    metadata = [("x-mq-client-id", f"bench-tls@{time.time_ns()}")]

    async def send(i: int) -> None:
        response = await call(send_request(TOPIC, i), metadata=metadata)
        if response.status.code != pb.OK:
            raise RuntimeError(f"send {i}: {response.status.message}")

    try:
        return await _rate(send, count, in_flight)
    finally:
        await channel.close()


async def _create(namesrv: str, tls: ssl.SSLContext | None) -> None:
    async with Admin(namesrv, tls=tls) as admin:
        await admin.create_topic(TOPIC, queue_nums=SEND_QUEUES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 300 sends")
    args = parser.parse_args(argv)
    count, rounds = (300, 1) if args.quick else (3_000, 3)
    with tempfile.TemporaryDirectory() as root:
        scratch = Path(root)
        pki = Pki(scratch)
        ca = pki.ca_file.read_bytes()
        settings = pki.properties(scratch / "tls.properties")
        servers: dict[str, ServerProcess] = {}
        try:
            disabled = scratch / "plain.conf"
            disabled.write_text("tls.server.mode=disabled\n")
            servers["plain"] = start_serve(scratch, "plain", "async", 30.0, "-c", str(disabled))
            servers["tls"] = start_serve(
                scratch, "tls", "async", 30.0, "--tls-config", str(settings)
            )
            for server in servers.values():
                asyncio.run(_create(server.addresses()[0], None))
            plain, permissive = servers["plain"], servers["tls"]
            broker, tls_broker = plain.addresses()[1], permissive.addresses()[1]
            rows: list[tuple[str, Callable[[int, int], Awaitable[float]]]] = [
                ("remoting, server without TLS", partial(_remoting, broker, None)),
                ("remoting, permissive, plain", partial(_remoting, tls_broker, None)),
                ("remoting, permissive, TLS", partial(_remoting, tls_broker, pki.client())),
                ("gRPC, server without TLS", partial(_grpc, plain.grpc_address(), None)),
                ("gRPC, permissive, plain", partial(_grpc, permissive.grpc_address(), None)),
                ("gRPC, permissive, TLS", partial(_grpc, permissive.grpc_address(), ca)),
            ]  # fmt: skip
            print("| round | row | 1 in flight | 16 in flight |")
            print("| ---: | --- | ---: | ---: |")
            for n in range(rounds):
                base: dict[tuple[str, int], float] = {}
                for name, run in rows:
                    cells = []
                    for in_flight in IN_FLIGHT:
                        asyncio.run(run(min(count, 100), in_flight))  # warm-up
                        rate = asyncio.run(run(count, in_flight))
                        protocol = name.split(",")[0]
                        reference = base.setdefault((protocol, in_flight), rate)
                        cells.append(f"{rate:,.0f} msgs/s ({rate / reference:.2f}x)")
                    print(f"| {n + 1} | {name} | {cells[0]} | {cells[1]} |", flush=True)
        finally:
            for server in servers.values():
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
