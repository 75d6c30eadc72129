"""The remoting server's TLS modes on one port, under both event loops: TLS and plain TCP told
apart by the first byte, plain TCP refused when TLS is enforced, failed handshakes and silent
connections that never disturb the listener."""

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import trustme

from pyrmq.errors import RemotingError
from pyrmq.eventloop import loop_factory
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.remoting.tls import client_context

pytestmark = pytest.mark.integration

CA = trustme.CA()
SERVER_CERT = CA.issue_cert("127.0.0.1")


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    SERVER_CERT.configure_cert(context)
    return context


def _trusting() -> ssl.SSLContext:
    context = ssl.create_default_context()
    CA.configure_trust(context)
    return context


async def _echo_peer(conn: Connection, request: RemotingCommand) -> RemotingCommand:
    return RemotingCommand.response_to(request, ResponseCode.SUCCESS, remark=conn.peer_address)


async def _served(tls: ssl.SSLContext | None, tls_only: bool = False) -> RemotingServer:
    server = RemotingServer(tls=tls, tls_only=tls_only)
    server.register(RequestCode.HEART_BEAT, _echo_peer)
    await server.start()
    return server


async def _ask(server: RemotingServer, tls: ssl.SSLContext | None) -> RemotingCommand:
    client = RemotingClient(tls=tls, connect_timeout_s=3)
    try:
        return await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT))
    finally:
        await client.close()


@pytest.fixture(params=["uvloop", "asyncio"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    factory = loop_factory() if request.param == "uvloop" else asyncio.new_event_loop

    def runner(coro: Coroutine[Any, Any, None]) -> None:
        with asyncio.Runner(loop_factory=factory) as r:
            r.run(asyncio.wait_for(coro, 30))

    return runner


def test_permissive_serves_tls_and_plain_on_one_port(run: Callable[..., None]) -> None:
    async def scenario() -> None:
        server = await _served(_server_context())
        try:
            for tls in (None, _trusting(), client_context(verify=False)):
                answer = await _ask(server, tls)
                assert answer.code == ResponseCode.SUCCESS
                # The peer is the client's own address, TLS or not.
                assert answer.remark.startswith("127.0.0.1:")
            with pytest.raises(RemotingError, match="CERTIFICATE_VERIFY_FAILED"):
                await _ask(server, client_context())  # the system's roots do not know the CA
            assert (await _ask(server, None)).code == ResponseCode.SUCCESS
        finally:
            await server.stop()

    run(scenario())


def test_enforcing_closes_plain_connections(
    run: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        server = await _served(_server_context(), tls_only=True)
        try:
            with (
                caplog.at_level(logging.WARNING, "pyrmq.remoting"),
                pytest.raises(RemotingError, match="closed"),
            ):
                await _ask(server, None)
            assert "plain TCP, and this server enforces TLS" in caplog.text
            assert (await _ask(server, _trusting())).code == ResponseCode.SUCCESS
        finally:
            await server.stop()

    run(scenario())


def test_a_tls_client_of_a_plain_server_is_told_why(
    run: Callable[..., None], caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        server = await _served(None)
        try:
            with (
                caplog.at_level(logging.WARNING, "pyrmq.remoting"),
                pytest.raises(RemotingError, match="cannot connect"),
            ):
                await _ask(server, _trusting())
            assert "a TLS handshake: this server has no TLS certificate" in caplog.text
            assert (await _ask(server, None)).code == ResponseCode.SUCCESS
        finally:
            await server.stop()

    run(scenario())


def test_bad_handshakes_and_silent_connections_leave_the_listener_up(
    run: Callable[..., None],
) -> None:
    async def scenario() -> None:
        server = await _served(_server_context())
        loop = asyncio.get_running_loop()
        silent = socket.create_connection(("127.0.0.1", server.port))
        garbage = socket.create_connection(("127.0.0.1", server.port))
        try:
            # A handshake record that is not one: the server drops that connection only.
            garbage.sendall(b"\x16\x03\x01\x00\x05hello")
            garbage.settimeout(5)
            assert await loop.run_in_executor(None, garbage.recv, 100) == b""
            assert (await _ask(server, _trusting())).code == ResponseCode.SUCCESS
            assert (await _ask(server, None)).code == ResponseCode.SUCCESS
            # The silent connection waits for its first byte; stopping closes it promptly.
            await asyncio.wait_for(server.stop(), 5)
            silent.settimeout(5)
            assert await loop.run_in_executor(None, silent.recv, 100) == b""
        finally:
            silent.close()
            garbage.close()
            await server.stop()

    run(scenario())
