"""What the plain ACL costs a broker: sends to a ``pyrmq serve`` that checks every request
against ``plain_acl.yml`` (``--acl``) and to one that does not, in the same run.

    python benches/acl.py            # three rounds of 5,000 sends each way
    python benches/acl.py --quick    # one round of 500, for CI

Both servers get the same signed SEND_MESSAGE requests (128 B bodies, 4 queues) from pyrmq's
``RemotingClient``, with one request in flight and with 16; rounds alternate between them. A
row gives msgs/s and the server's CPU per message (user+system of the ``pyrmq serve``
process), and the ACL server's figures over the plain one's, round by round.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.compat.servers import ServerProcess

from benches.broker import (
    SEND_QUEUES,
    _body,
    _check_sent,
    per_msg_us,
    process_cpu_s,
    send_request,
    start_serve,
)
from pyrmq.acl.signing import Credentials
from pyrmq.client.admin import Admin
from pyrmq.remoting.client import RemotingClient

TOPIC = "BenchAcl"
ACCOUNT = Credentials("benchuser", "bench-secret")
ADMIN = Credentials("benchadmin", "bench-admin-secret")
# The sender holds its topic by name, as a producer account does: its sends are looked up.
PLAIN = f"""
accounts:
  - accessKey: benchuser
    secretKey: bench-secret
    topicPerms: [OtherTopic=SUB, {TOPIC}=PUB]
  - accessKey: benchadmin
    secretKey: bench-admin-secret
    admin: true
"""
IN_FLIGHT = (1, 16)


async def _sends(broker: str, pid: int, count: int, in_flight: int) -> tuple[float, float | None]:
    """``count`` signed sends, ``in_flight`` at a time: (msgs/s, server CPU µs per message)."""
    client = RemotingClient(credentials=ACCOUNT)
    sent = 0

    async def sender(first: int) -> None:
        nonlocal sent
        for i in range(first, count, in_flight):
            request = send_request(TOPIC, i % SEND_QUEUES, _body(i), f"A{time.time_ns()}-{i}")
            _check_sent(await client.invoke(broker, request, timeout_s=10.0), f"send {i}")
            sent += 1

    try:
        await sender(count)  # connects; sends nothing
        cpu0, started = process_cpu_s(pid), time.perf_counter()
        await asyncio.gather(*(sender(k) for k in range(in_flight)))
        took, cpu1 = time.perf_counter() - started, process_cpu_s(pid)
    finally:
        await client.close()
    return sent / took, per_msg_us(cpu0, cpu1, sent)


async def _create(namesrv: str) -> None:
    async with Admin(namesrv, credentials=ADMIN) as admin:
        await admin.create_topic(TOPIC, queue_nums=SEND_QUEUES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of 500 sends")
    args = parser.parse_args(argv)
    count, rounds = (500, 1) if args.quick else (5_000, 3)
    with tempfile.TemporaryDirectory() as root:
        scratch = Path(root)
        (scratch / "plain_acl.yml").write_text(PLAIN)
        servers: dict[str, ServerProcess] = {}
        try:
            servers["plain"] = start_serve(scratch, "plain", "async", 30.0)
            servers["acl"] = start_serve(
                scratch, "acl", "async", 30.0, "--acl", str(scratch / "plain_acl.yml")
            )
            for server in servers.values():
                asyncio.run(_create(server.addresses()[0]))
            print("| round | in flight | plain | with ACL | ACL / plain |")
            print("| ---: | ---: | ---: | ---: | ---: |")
            for n in range(rounds):
                for in_flight in IN_FLIGHT:
                    got = {}
                    for name, server in servers.items():
                        broker, pid = server.addresses()[1], server.proc.pid
                        asyncio.run(_sends(broker, pid, min(count, 200), in_flight))  # warm-up
                        got[name] = asyncio.run(_sends(broker, pid, count, in_flight))
                    cells = [
                        f"{rate:,.0f} msgs/s, {cpu or 0:.1f} µs CPU/msg"
                        for rate, cpu in got.values()
                    ]
                    (rate_p, cpu_p), (rate_a, cpu_a) = got["plain"], got["acl"]
                    cpu_ratio = f", CPU {cpu_a / cpu_p:.2f}x" if cpu_a and cpu_p else ""
                    print(
                        f"| {n + 1} | {in_flight} | {cells[0]} | {cells[1]} "
                        f"| {rate_a / rate_p:.2f}x{cpu_ratio} |",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
