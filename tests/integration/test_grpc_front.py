"""The permissive gRPC port's front: each connection joined to the plain or the TLS port by its
first byte, bytes passed both ways, a half-close passed on, and the client's own address given
back for the join's loopback peer."""

import asyncio
import os
import socket

import pytest
from tests.helpers import eventually

from pyrmq.proxy.front import SplicingFront

pytestmark = pytest.mark.integration


class _Backend:
    """A loopback server that echoes each connection's bytes in upper case, once the client has
    half-closed, then closes."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # to EOF: the client's half-close came through
        self.received.append(data)
        writer.write(data.upper())
        await writer.drain()
        writer.close()


async def _exchange(port: int, payload: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def test_connections_are_joined_by_their_first_byte() -> None:
    async def scenario() -> None:
        plain, tls = _Backend(), _Backend()
        front = SplicingFront(
            "127.0.0.1", 0, plain_port=await plain.start(), tls_port=await tls.start()
        )
        await front.start()
        try:
            big = b"x" * (3 << 20)  # more than one chunk each way
            answer = await _exchange(front.port, b"hello " + big)
            assert answer == (b"hello " + big).upper()
            assert plain.received == [b"hello " + big]
            answer = await _exchange(front.port, b"\x16\x03\x01 tls")
            assert answer == b"\x16\x03\x01 TLS"
            assert tls.received == [b"\x16\x03\x01 tls"]
            # Peers that are not joins pass unchanged.
            assert front.peer("ipv6:[::1]:5") == "ipv6:[::1]:5"
        finally:
            await front.stop()
            for backend in (plain, tls):
                assert backend.server is not None
                backend.server.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_the_servers_greeting_and_the_clients_peer_while_the_connection_lasts() -> None:
    async def scenario() -> None:
        seen: asyncio.Queue[int] = asyncio.Queue()

        async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # A gRPC server greets first, as soon as the join connects.
            writer.write(b"greeting")
            await seen.put(writer.get_extra_info("peername")[1])
            await reader.read()
            writer.close()

        backend = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = backend.sockets[0].getsockname()[1]
        front = SplicingFront("127.0.0.1", 0, plain_port=port, tls_port=port)
        await front.start()
        client = socket.create_connection(("127.0.0.1", front.port))
        try:
            client.sendall(b"\x00\x00")
            join_port = await asyncio.wait_for(seen.get(), 10)
            mine = client.getsockname()[1]
            client.settimeout(5)
            assert await asyncio.to_thread(client.recv, 100) == b"greeting"
            assert front.peer(f"ipv4:127.0.0.1:{join_port}") == f"ipv4:127.0.0.1:{mine}"
        finally:
            client.close()
            await front.stop()
            backend.close()
        # Calls gRPC still serves after the join ended name the client too.
        assert front.peer(f"ipv4:127.0.0.1:{join_port}") == f"ipv4:127.0.0.1:{mine}"

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_a_join_whose_both_directions_ended_lets_its_sockets_go() -> None:
    """Both sides half-close (a client that gives up mid-handshake, a server that answers its
    end of input with its own): the join closes rather than holding two sockets forever."""

    async def scenario() -> None:
        held: list[asyncio.StreamWriter] = []

        async def echo_then_end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            held.append(writer)  # never closed by the backend itself
            await reader.read()
            writer.write_eof()

        backend = await asyncio.start_server(echo_then_end, "127.0.0.1", 0)
        port = backend.sockets[0].getsockname()[1]
        front = SplicingFront("127.0.0.1", 0, plain_port=port, tls_port=port)
        await front.start()
        loop = asyncio.get_running_loop()
        before = len(os.listdir("/proc/self/fd"))
        try:
            for _ in range(20):
                client = socket.create_connection(("127.0.0.1", front.port))
                client.sendall(b"\x16\x03\x01")  # a ClientHello cut short
                client.shutdown(socket.SHUT_WR)
                client.settimeout(5)
                assert await loop.run_in_executor(None, client.recv, 10) == b""
                client.close()
            # The backend's 20 sockets wait in its handler; the front holds none of its 40.
            await eventually(
                lambda: len(os.listdir("/proc/self/fd")) <= before + 20 + 2, 5, "joins closed"
            )
        finally:
            await front.stop()
            backend.close()
            for writer in held:
                writer.close()
            await asyncio.sleep(0)

    asyncio.run(asyncio.wait_for(scenario(), 60))
