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


async def _each_request_keeps_its_own_deadline() -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(MAX_FRAME_BYTES)
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                if request.code == 2:
                    writer.write(encode(RemotingCommand.response_to(request, 0, remark="ok")))
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    addr = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    client = RemotingClient()
    loop = asyncio.get_running_loop()

    async def timed(request: RemotingCommand, timeout_s: float) -> tuple[float, object]:
        start = loop.time()
        try:
            # The bound only keeps a broken client from hanging the test.
            outcome: object = await asyncio.wait_for(
                client.invoke(addr, request, timeout_s=timeout_s), timeout_s + 2
            )
        except RemotingTimeoutError as e:
            outcome = e
        return loop.time() - start, outcome

    try:
        # A later request with an earlier deadline, and answered ones in between.
        # A float's noise (0.2000001) is not shown in the timeout's message.
        timeouts = [1.2, 0.2000001, 1.5, 0.4]
        unanswered = [RemotingCommand.request(1) for _ in timeouts]
        answered = [RemotingCommand.request(2) for _ in range(3)]
        results = await asyncio.gather(
            timed(unanswered[0], timeouts[0]),
            timed(answered[0], 0.3),
            timed(unanswered[1], timeouts[1]),
            timed(unanswered[2], timeouts[2]),
            timed(answered[1], 5),
            timed(unanswered[3], timeouts[3]),
            timed(answered[2], 0.1),
        )
        failed = [results[i] for i in (0, 2, 3, 5)]
        for (took, outcome), request, timeout_s in zip(failed, unanswered, timeouts, strict=True):
            assert isinstance(outcome, RemotingTimeoutError)
            assert f"opaque={request.opaque} within {timeout_s:g} s" in str(outcome)
            assert timeout_s - 0.01 <= took < timeout_s + 0.5
        for _, outcome in (results[i] for i in (1, 4, 6)):
            assert isinstance(outcome, RemotingCommand)
            assert outcome.remark == "ok"
        (channel,) = client._channels.values()
        assert channel.pending == {}
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


def test_concurrent_requests_time_out_each_at_its_own_deadline() -> None:
    asyncio.run(_each_request_keeps_its_own_deadline())
