"""Idle connections are closed, as RocketMQ closes channels idle for
``serverChannelMaxIdleTimeSeconds``: one silent from the start, one that stopped halfway
through a frame (and the memory its partial frame held), but not one that keeps talking, nor
one whose request is still being served."""

import asyncio
import socket
import struct
import time

import pytest
from tests.helpers import closed_within

from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

pytestmark = pytest.mark.integration

IDLE_S = 0.6


async def scenario() -> None:
    async def slow(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(IDLE_S * 4)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def quick(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    server = RemotingServer(max_idle_s=IDLE_S)
    server.register(RequestCode.PULL_MESSAGE, slow)
    server.register(RequestCode.HEART_BEAT, quick)
    await server.start()
    loop = asyncio.get_running_loop()
    sockets = []
    try:
        silent, halfway = (socket.create_connection((server.host, server.port)) for _ in "ab")
        sockets += [silent, halfway]
        for s in sockets:
            s.setblocking(False)
        # A frame announced at 1 MiB, of which 64 KiB came.
        await loop.sock_sendall(halfway, struct.pack(">i", 1 << 20) + b"\0" * (64 << 10))

        talking = RemotingClient()
        waiting = RemotingClient()
        held = asyncio.ensure_future(
            waiting.invoke(server.address, RemotingCommand.request(RequestCode.PULL_MESSAGE), 10)
        )
        started = time.monotonic()
        while time.monotonic() - started < IDLE_S * 3:
            answer = await talking.invoke(
                server.address, RemotingCommand.request(RequestCode.HEART_BEAT), 3
            )
            assert answer.code == ResponseCode.SUCCESS
            await asyncio.sleep(IDLE_S / 6)
        assert await closed_within(silent, 0.1)
        assert await closed_within(halfway, 0.1)
        # Served in full though nothing crossed its connection for four idle periods.
        assert (await held).code == ResponseCode.SUCCESS
        assert len(server.connections) == 2
        # Once the held request is answered, its connection can go idle too, as can the one
        # that stopped talking.
        deadline = time.monotonic() + IDLE_S * 4
        while server.connections:
            assert time.monotonic() < deadline, "idle clients' connections stayed"
            await asyncio.sleep(0.05)
        await talking.close()
        await waiting.close()
    finally:
        for s in sockets:
            s.close()
        await server.stop()


def test_idle_connections_are_closed_and_busy_ones_kept() -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_server_told_not_to_close_idle_connections_keeps_them() -> None:
    async def run() -> None:
        server = RemotingServer(max_idle_s=0)
        await server.start()
        sock = socket.create_connection((server.host, server.port))
        sock.setblocking(False)
        try:
            assert not await closed_within(sock, 1.0)
        finally:
            sock.close()
            await server.stop()

    asyncio.run(asyncio.wait_for(run(), 10))
