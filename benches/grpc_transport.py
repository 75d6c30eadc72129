"""What serving the gRPC port costs: pyrmq's own HTTP/2 transport against grpcio, each serving a
``pyrmq serve`` of its own, in the same run.

    python benches/grpc_transport.py            # three rounds of 3,000 sends
    python benches/grpc_transport.py --quick    # one round of 300, for CI

Send rows make SendMessage calls (128 B bodies) with a grpc.aio channel, one in flight and 16;
the receive row then takes those messages back with ReceiveMessage, 32 per call. Each row gives
msgs/s and the broker's CPU per message (user and system time of its process over the row), and
pyrmq's transport over grpcio. The client is grpcio too, in a process of its own on the same
machine, so the rates are bounded by it as well as by the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc
from google.protobuf.duration_pb2 import Duration
from tests.compat.servers import ServerProcess, create_topic

from benches.broker import SEND_QUEUES, _body, process_cpu_s, start_serve
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.server import SERVICE_NAME

TOPIC, GROUP = "BenchGrpc", "GID_BENCH_GRPC"
IN_FLIGHT = (1, 16)
TRANSPORTS = ("grpcio", "native")
METADATA = (("x-mq-client-id", f"bench-grpc@{os.getpid()}"),)


def send_request(topic: str, i: int) -> pb.SendMessageRequest:
    """SendMessage of the ``i``-th 128 B message of a run, its id unique to this process."""
    message = pb.Message(
        topic=pb.Resource(name=topic),
        body=_body(i),
        system_properties=pb.SystemProperties(
            message_id=f"01{os.getpid():08X}{time.time_ns():016X}{i:08X}",
            message_type=pb.NORMAL,
        ),
    )
    return pb.SendMessageRequest(messages=[message])


async def _sends(endpoint: str, first: int, count: int, in_flight: int) -> None:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        call = channel.unary_unary(
            f"/{SERVICE_NAME}/SendMessage",
            request_serializer=pb.SendMessageRequest.SerializeToString,
            response_deserializer=pb.SendMessageResponse.FromString,
        )

        async def sender(k: int) -> None:
            for i in range(first + k, first + count, in_flight):
                answer = await call(send_request(TOPIC, i), metadata=METADATA)
                if answer.status.code != pb.OK:
                    raise RuntimeError(f"send {i}: {answer.status.message}")

        await asyncio.gather(*(sender(k) for k in range(in_flight)))


async def _receives(endpoint: str, count: int) -> None:
    async with grpc.aio.insecure_channel(endpoint) as channel:
        call = channel.unary_stream(
            f"/{SERVICE_NAME}/ReceiveMessage",
            request_serializer=pb.ReceiveMessageRequest.SerializeToString,
            response_deserializer=pb.ReceiveMessageResponse.FromString,
        )
        request = pb.ReceiveMessageRequest(
            group=pb.Resource(name=GROUP),
            message_queue=pb.MessageQueue(topic=pb.Resource(name=TOPIC), id=-1),
            filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
            batch_size=32,
            long_polling_timeout=Duration(seconds=1),
        )
        request.invisible_duration.FromSeconds(300)
        got = 0
        deadline = time.monotonic() + 120
        while got < count and time.monotonic() < deadline:
            async for frame in call(request, metadata=METADATA):
                got += frame.WhichOneof("content") == "message"
        if got < count:
            raise RuntimeError(f"received {got} of {count}")


def _row(server: ServerProcess, count: int, run: object) -> tuple[float, float]:
    """(msgs/s, broker CPU µs per message) of ``count`` messages handled by ``run``."""
    pid = server.proc.pid
    cpu = process_cpu_s(pid)
    started = time.perf_counter()
    asyncio.run(run)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    after = process_cpu_s(pid)
    if cpu is None or after is None:
        raise RuntimeError(f"the broker's CPU time cannot be read (pid {pid})")
    return count / elapsed, (after - cpu) / count * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 300 sends")
    args = parser.parse_args(argv)
    count, rounds = (300, 1) if args.quick else (3_000, 3)
    with tempfile.TemporaryDirectory() as root:
        scratch = Path(root)
        servers: dict[str, ServerProcess] = {}
        try:
            for transport in TRANSPORTS:
                conf = scratch / f"{transport}.conf"
                # Plain TCP only: a permissive grpcio port is a splicing front.
                conf.write_text(f"grpcTransport={transport}\ntls.server.mode=disabled\n")
                server = start_serve(scratch, transport, "async", 30.0, "-c", str(conf))
                servers[transport] = server
                create_topic(server.addresses()[1], TOPIC, SEND_QUEUES)
                asyncio.run(_sends(server.grpc_address(), 0, 100, 4))  # warm-up
                asyncio.run(_receives(server.grpc_address(), 100))
            print("| round | row | grpcio | pyrmq | pyrmq / grpcio |")
            print("| ---: | --- | ---: | ---: | ---: |")
            sent = 100
            for n in range(rounds):
                rows: dict[str, dict[str, tuple[float, float]]] = {}
                for in_flight in IN_FLIGHT:
                    name = f"SendMessage, {in_flight} in flight"
                    for transport, server in servers.items():
                        sends = _sends(server.grpc_address(), sent, count, in_flight)
                        rows.setdefault(name, {})[transport] = _row(server, count, sends)
                    sent += count
                for transport, server in servers.items():
                    receives = _receives(server.grpc_address(), count * len(IN_FLIGHT))
                    rows.setdefault("ReceiveMessage, 32 a call", {})[transport] = _row(
                        server, count * len(IN_FLIGHT), receives
                    )
                for name, by in rows.items():
                    (old_rate, old_cpu), (new_rate, new_cpu) = by["grpcio"], by["native"]
                    print(
                        f"| {n + 1} | {name} "
                        f"| {old_rate:,.0f} msgs/s, {old_cpu:,.0f} µs CPU "
                        f"| {new_rate:,.0f} msgs/s, {new_cpu:,.0f} µs CPU "
                        f"| {new_rate / old_rate:.2f}x rate, {new_cpu / old_cpu:.2f}x CPU |",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
