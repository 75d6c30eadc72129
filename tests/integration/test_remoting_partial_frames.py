"""Incomplete frames are bounded over the whole server, not only one by one: a connection
whose bytes would take the total past ``max_partial_bytes`` is closed, the others are served,
and what a closed connection held is counted out."""

import asyncio
import socket
import struct

import pytest
from tests.helpers import closed_within

from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

pytestmark = pytest.mark.integration

KIB = 1 << 10


async def scenario() -> None:
    async def quick(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    server = RemotingServer(max_partial_bytes=1024 * KIB)
    server.register(RequestCode.HEART_BEAT, quick)
    await server.start()
    loop = asyncio.get_running_loop()
    first, second = (socket.create_connection((server.host, server.port)) for _ in "ab")
    client = RemotingClient()
    try:
        for s in (first, second):
            s.setblocking(False)
        # Frames announced at 4 MiB (under the largest frame), 600 KiB of each sent.
        chunk = struct.pack(">i", 4096 * KIB) + b"\0" * (600 * KIB)
        await loop.sock_sendall(first, chunk)
        for _ in range(100):
            if server.partial_bytes == len(chunk):
                break
            await asyncio.sleep(0.01)
        assert server.partial_bytes == len(chunk)
        await loop.sock_sendall(second, chunk)
        assert await closed_within(second, 3.0)
        assert not await closed_within(first, 0.3)
        assert server.partial_bytes == len(chunk)
        request = RemotingCommand.request(RequestCode.HEART_BEAT)
        assert (await client.invoke(server.address, request, 3)).code == ResponseCode.SUCCESS
        first.close()
        for _ in range(100):
            if server.partial_bytes == 0:
                break
            await asyncio.sleep(0.01)
        assert server.partial_bytes == 0
    finally:
        await client.close()
        first.close()
        second.close()
        await server.stop()


def test_incomplete_frames_are_bounded_over_all_connections() -> None:
    asyncio.run(asyncio.wait_for(scenario(), 30))
