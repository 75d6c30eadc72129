"""Requests a server sends to a client on the client's own connection: answered by the handler
registered for the code, and otherwise answered at once, as Java's client answers them."""

import asyncio

import pytest

from pyrmq.eventloop import loop_factory
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

pytestmark = pytest.mark.integration


async def _scenario() -> None:
    connected: asyncio.Queue[Connection] = asyncio.Queue()

    async def on_heartbeat(conn: Connection, request: RemotingCommand) -> RemotingCommand:
        connected.put_nowait(conn)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def on_check(request: RemotingCommand, address: str) -> RemotingCommand:
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, remark=address)

    async def on_reset(request: RemotingCommand, address: str) -> RemotingCommand:
        raise ValueError("no such group")

    server = RemotingServer()
    server.register(RequestCode.HEART_BEAT, on_heartbeat)
    await server.start()
    client = RemotingClient(connect_timeout_s=3)
    client.server_request_handlers[RequestCode.GET_CONSUMER_RUNNING_INFO] = on_check
    client.server_request_handlers[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] = on_reset
    try:
        await client.invoke(server.address, RemotingCommand.request(RequestCode.HEART_BEAT))
        conn = await connected.get()

        handled = await conn.request(
            RemotingCommand.request(RequestCode.GET_CONSUMER_RUNNING_INFO), 3
        )
        assert (handled.code, handled.remark) == (ResponseCode.SUCCESS, server.address)

        # Well inside the request's timeout: the answer is immediate, not a timeout.
        unknown = await asyncio.wait_for(
            conn.request(RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY), 30), 3
        )
        assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert f"request type {RequestCode.CONSUME_MESSAGE_DIRECTLY} not supported" in (
            unknown.remark or ""
        )

        failed = await asyncio.wait_for(
            conn.request(RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET), 30), 3
        )
        assert failed.code == ResponseCode.SYSTEM_ERROR
        assert failed.remark == "ValueError: no such group"
    finally:
        await client.close()
        await server.stop()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_server_requests_are_always_answered(loop: str) -> None:
    factory = loop_factory() if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(asyncio.wait_for(_scenario(), 30))
