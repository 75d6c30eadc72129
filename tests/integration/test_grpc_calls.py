"""pyrmq's gRPC transport with handlers of the test's own, called over TCP by grpcio's client:
what handlers are given, and how each kind of call ends (answered, failed, cancelled, stopped)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.wrappers_pb2 import StringValue

from pyrmq.proxy.calls import CallContext, CallKind, Method, NativeGrpcServer

pytestmark = pytest.mark.integration

SERVICE = "test.Echo"


def _run(
    scenario: Callable[[NativeGrpcServer, grpc.aio.Channel, dict[str, Any]], Awaitable[None]],
) -> None:
    seen: dict[str, Any] = {}

    async def unary(request: StringValue, context: CallContext) -> StringValue:
        seen["metadata"] = dict(context.invocation_metadata())
        seen["peer"] = context.peer()
        seen["remaining"] = context.time_remaining()
        if request.value == "fail":
            raise ValueError("no such thing")
        return StringValue(value=request.value.upper())

    async def wait_forever(
        request: StringValue, context: CallContext
    ) -> AsyncIterator[StringValue]:
        yield StringValue(value="started")
        try:
            await asyncio.sleep(3600)
        finally:
            seen["closed"] = True
            seen.setdefault("cancelled_at", asyncio.get_running_loop().time())
        yield StringValue(value="never")

    async def echo(
        requests: AsyncIterator[StringValue], context: CallContext
    ) -> AsyncIterator[StringValue]:
        async for request in requests:
            yield StringValue(value=f"echo {request.value}")
        seen["half_closed"] = True

    async def quits(request: StringValue, context: CallContext) -> StringValue:
        raise asyncio.CancelledError

    methods = {
        "Quits": Method(CallKind.UNARY, StringValue, quits),
        "Unary": Method(CallKind.UNARY, StringValue, unary),
        "Wait": Method(CallKind.SERVER_STREAM, StringValue, wait_forever),
        "Echo": Method(CallKind.BIDI_STREAM, StringValue, echo),
    }

    async def main() -> None:
        server = NativeGrpcServer("127.0.0.1", 0, SERVICE, methods, 1 << 20)
        server.serve()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
                await scenario(server, channel, seen)
        finally:
            await server.stop()

    asyncio.run(asyncio.wait_for(main(), 30))


def _method(channel: grpc.aio.Channel, kind: str, name: str) -> Any:
    return getattr(channel, kind)(
        f"/{SERVICE}/{name}",
        request_serializer=StringValue.SerializeToString,
        response_deserializer=StringValue.FromString,
    )


def test_a_unary_handler_sees_its_metadata_peer_and_deadline() -> None:
    async def scenario(server: NativeGrpcServer, channel: Any, seen: dict[str, Any]) -> None:
        call = _method(channel, "unary_unary", "Unary")
        blob = b"\x00\xffbinary"
        metadata = (("x-mq-client-id", "c@1"), ("trace-bin", blob))
        answer = await call(StringValue(value="hi"), metadata=metadata, timeout=8)
        assert answer.value == "HI"
        assert seen["metadata"]["x-mq-client-id"] == "c@1"
        # Binary headers come decoded, as grpcio gives them.
        assert seen["metadata"]["trace-bin"] == blob
        assert seen["peer"].startswith("ipv4:127.0.0.1:")
        assert 6 < seen["remaining"] <= 8
        await call(StringValue(value="x"))
        assert seen["remaining"] is None

    _run(scenario)


def test_a_failing_handler_and_an_unknown_method_get_statuses() -> None:
    async def scenario(server: NativeGrpcServer, channel: Any, seen: dict[str, Any]) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await _method(channel, "unary_unary", "Unary")(StringValue(value="fail"))
        assert raised.value.code() == grpc.StatusCode.UNKNOWN
        assert "ValueError: no such thing" in (raised.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await _method(channel, "unary_unary", "Missing")(StringValue(value="x"))
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        # A handler that ends without an answer still ends its call, well before the deadline.
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await _method(channel, "unary_unary", "Quits")(StringValue(value="x"), timeout=20)
        assert raised.value.code() == grpc.StatusCode.CANCELLED
        # The connection serves on.
        assert (
            await _method(channel, "unary_unary", "Unary")(StringValue(value="ok"))
        ).value == "OK"

    _run(scenario)


def test_a_call_its_client_cancels_closes_its_handler_at_once() -> None:
    async def scenario(server: NativeGrpcServer, channel: Any, seen: dict[str, Any]) -> None:
        call = _method(channel, "unary_stream", "Wait")(StringValue(value="w"))
        assert (await call.read()).value == "started"
        cancelled_at = asyncio.get_running_loop().time()
        call.cancel()
        for _ in range(200):
            if "closed" in seen:
                break
            await asyncio.sleep(0.01)
        assert seen.get("closed") is True
        assert seen["cancelled_at"] - cancelled_at < 1

    _run(scenario)


def test_a_client_stream_is_answered_message_by_message_until_it_ends() -> None:
    async def scenario(server: NativeGrpcServer, channel: Any, seen: dict[str, Any]) -> None:
        call = _method(channel, "stream_stream", "Echo")()
        for word in ("a", "b"):
            await call.write(StringValue(value=word))
            assert (await call.read()).value == f"echo {word}"
        await call.done_writing()
        assert await call.read() == grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK
        assert seen["half_closed"] is True

    _run(scenario)


def test_stopping_closes_open_calls_and_their_handlers() -> None:
    async def scenario(server: NativeGrpcServer, channel: Any, seen: dict[str, Any]) -> None:
        call = _method(channel, "unary_stream", "Wait")(StringValue(value="w"))
        assert (await call.read()).value == "started"
        started = asyncio.get_running_loop().time()
        await server.stop()
        assert asyncio.get_running_loop().time() - started < 3
        assert seen.get("closed") is True
        with pytest.raises(grpc.aio.AioRpcError):
            await call.read()

    _run(scenario)


def test_binary_metadata_decodes_with_or_without_padding() -> None:
    loop = asyncio.new_event_loop()
    try:
        context = CallContext(
            [("a-bin", base64.b64encode(b"ab").decode().rstrip("=")), ("b", "plain")],
            "ipv4:127.0.0.1:1",
            None,
            loop,
        )
    finally:
        loop.close()
    assert dict(context.invocation_metadata()) == {"a-bin": b"ab", "b": "plain"}
    for bad in ("%%%", "\u00e9AAA"):
        with pytest.raises(ValueError, match="illegal base64"):
            CallContext([("x-bin", bad)], "ipv4:127.0.0.1:1", None, loop)
