"""The asyncio remoting client against a bare TCP server that answers only some requests."""

import asyncio

import pytest

from pyrmq.remoting.client import RemotingClient, RemotingTimeoutError
from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import MAX_FRAME_BYTES

pytestmark = pytest.mark.integration


async def _timeout_then_answer() -> None:
    done = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(MAX_FRAME_BYTES)
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                if request.code == 2:  # answered; code 1 never is
                    writer.write(encode(RemotingCommand.response_to(request, 0, remark="ok")))
        writer.close()
        await writer.wait_closed()
        done.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = RemotingClient()
    try:
        slow = RemotingCommand.request(1)
        with pytest.raises(RemotingTimeoutError, match=f"opaque={slow.opaque}"):
            await client.invoke(addr, slow, timeout_s=0.1)
        answer = await client.invoke(addr, RemotingCommand.request(2), timeout_s=2)
        assert answer.remark == "ok"
        (channel,) = client._channels.values()
        assert channel.pending == {}
    finally:
        await client.close()
        await asyncio.wait_for(done.wait(), 5)
        server.close()
        await server.wait_closed()


def test_a_request_without_answer_times_out_and_the_connection_keeps_working() -> None:
    asyncio.run(_timeout_then_answer())
