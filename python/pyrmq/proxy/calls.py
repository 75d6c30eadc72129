"""The gRPC calls pyrmq's own HTTP/2 transport (:class:`pyrmq._core.GrpcTransport`, in Rust on a
thread of its own) hands to the broker's loop.

The transport reads and frames each call and queues its events behind one eventfd; here they
become tasks running the same handlers grpcio would run, with a context offering what those
read of theirs (metadata, peer, time remaining), and their answers go back to the transport.
One wake-up of the loop serves the events queued since the last (up to a few thousand).

A streamed answer is handed to the transport before the client has read it, so a handler may
be over while its answer is still on its way. Such a call stays known here until the
transport says its status went out or that the client left first; in the second case the
callbacks given to :meth:`CallContext.on_cancelled` run (a receive releases the messages its
client never got).
"""

import asyncio
import base64
import binascii
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from google.protobuf.message import DecodeError

from pyrmq._core import GrpcTransport

__all__ = ["CallContext", "CallKind", "Method", "NativeGrpcServer", "ServerTls"]

log = logging.getLogger(__name__)

# The first item of each event tuple (pyrmq-py's grpc.rs).
_START, _MESSAGE, _HALF_CLOSE, _CANCEL, _DONE = 0, 1, 2, 3, 4
# gRPC status codes.
_OK, _CANCELLED, _UNKNOWN, _UNIMPLEMENTED, _INTERNAL = 0, 1, 2, 12, 13


class CallKind(Enum):
    UNARY = "unary"
    SERVER_STREAM = "server_stream"
    BIDI_STREAM = "bidi_stream"


@dataclass(frozen=True)
class Method:
    """One RPC: how its messages flow, its request's class, and the handler, called as grpcio
    calls it (a coroutine for a unary RPC, an async iterator of answers otherwise)."""

    kind: CallKind
    request: Any
    handler: Callable[..., Any]


class CallContext:
    """What a handler reads of its call, as grpc.aio's servicer context offers it."""

    __slots__ = ("_deadline", "_loop", "_metadata", "_peer", "cancel_callbacks")

    def __init__(
        self,
        metadata: list[tuple[str, str]],
        peer: str,
        timeout_s: float | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Raises ValueError for a binary header that is not base64."""
        self._metadata = tuple(
            (k, _binary(k, v)) if k.endswith("-bin") else (k, v) for k, v in metadata
        )
        self._peer = peer
        self._loop = loop
        self._deadline = None if timeout_s is None else loop.time() + timeout_s
        self.cancel_callbacks: list[Callable[[], None]] = []

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        """Seconds until the client's deadline; None without one."""
        if self._deadline is None:
            return None
        return max(self._deadline - self._loop.time(), 0.0)

    def on_cancelled(self, callback: Callable[[], None]) -> None:
        """Runs ``callback`` if the client leaves before the call's answer has gone out,
        even once the handler is over."""
        self.cancel_callbacks.append(callback)


def _binary(key: str, value: str) -> bytes:
    # gRPC's binary headers are base64, with or without padding.
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Error parsing {key!r} metadata: illegal base64 encoding") from None


@dataclass
class _Call:
    task: "asyncio.Task[None]"
    context: CallContext
    streamed: bool
    # Messages of a client stream as they come; None once the client sends no more.
    inbox: "asyncio.Queue[bytes | None] | None"


@dataclass(frozen=True)
class ServerTls:
    """TLS for :class:`NativeGrpcServer`, in PEM. ``client_auth``: none, optional or require
    (those two need ``trust``); ``plain_too``: plain clients are served on the port as well."""

    cert_chain: bytes
    key: bytes
    client_auth: str = "none"
    trust: bytes | None = None
    plain_too: bool = False


class NativeGrpcServer:
    """Listens on ``host:port`` from construction (0: any free port), over ``tls`` if given,
    and runs the calls of ``service``'s ``methods`` on the running loop once :meth:`serve` is
    called.

    Raises:
        ConfigError: ``tls`` cannot be used.
        OSError: The address cannot be bound.
    """

    def __init__(
        self,
        host: str,
        port: int,
        service: str,
        methods: Mapping[str, Method],
        max_message_bytes: int,
        tls: ServerTls | None = None,
    ) -> None:
        self._methods = dict(methods)
        self._transport = GrpcTransport(
            host,
            port,
            service=service,
            client_streaming={n for n, m in methods.items() if m.kind is CallKind.BIDI_STREAM},
            max_message_bytes=max_message_bytes,
            tls_cert=None if tls is None else tls.cert_chain,
            tls_key=None if tls is None else tls.key,
            tls_client_auth="none" if tls is None else tls.client_auth,
            tls_trust=None if tls is None else tls.trust,
            tls_plain_too=False if tls is None else tls.plain_too,
        )
        self.port = self._transport.port
        self._calls: dict[int, _Call] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def serve(self) -> None:
        """Starts taking calls on the running loop (those that came before wait until now)."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._transport.fileno(), self._drain)
            self._drain()

    async def stop(self) -> None:
        """Closes the listener and its connections (their calls get a second to finish), and
        cancels the calls still running."""
        if self._loop is not None:
            self._loop.remove_reader(self._transport.fileno())
        await asyncio.to_thread(self._transport.close)
        calls, self._calls = self._calls, {}
        for call in calls.values():
            call.task.cancel()
        if calls:
            await asyncio.gather(*(c.task for c in calls.values()), return_exceptions=True)

    def _drain(self) -> None:
        calls = self._calls
        for event in self._transport.take_events():
            kind, call_id = event[0], event[1]
            try:
                if kind == _START:
                    self._start(call_id, *event[2:])
                elif kind == _CANCEL:
                    call = calls.pop(call_id, None)
                    if call is not None:
                        self._cancelled(call)
                elif kind == _DONE:
                    calls.pop(call_id, None)
                else:
                    call = calls.get(call_id)
                    if call is not None and call.inbox is not None:
                        call.inbox.put_nowait(event[2] if kind == _MESSAGE else None)
            except Exception as e:
                # One call's trouble must not lose the other events of the batch.
                log.exception("gRPC call %d: event %d failed", call_id, kind)
                self._transport.finish(call_id, _INTERNAL, str(e))

    def _cancelled(self, call: _Call) -> None:
        if not call.task.done():
            call.task.cancel()
        for callback in call.context.cancel_callbacks:
            try:
                callback()
            except Exception:
                log.exception("a gRPC call's cancel callback failed")

    def _start(
        self,
        call_id: int,
        name: str,
        metadata: list[tuple[str, str]],
        peer: str,
        timeout_s: float | None,
        request: bytes | None,
    ) -> None:
        method = self._methods.get(name)
        if method is None:
            self._transport.finish(call_id, _UNIMPLEMENTED, f"Method not found: {name}")
            return
        assert self._loop is not None
        try:
            context = CallContext(metadata, peer, timeout_s, self._loop)
        except ValueError as e:
            # The client's fault, answered as grpcio answers it.
            self._transport.finish(call_id, _INTERNAL, str(e))
            return
        inbox: asyncio.Queue[bytes | None] | None = None
        run: Awaitable[None]
        if method.kind is CallKind.UNARY:
            run = self._unary(call_id, method, request or b"", context)
        elif method.kind is CallKind.SERVER_STREAM:
            run = self._streamed(call_id, method, request or b"", context)
        else:
            inbox = asyncio.Queue()
            requests = _inbound(self._transport, call_id, inbox, method.request)
            run = self._answer(call_id, method.handler(requests, context))
        task = self._loop.create_task(run)
        streamed = method.kind is not CallKind.UNARY
        self._calls[call_id] = _Call(task, context, streamed, inbox)
        task.add_done_callback(lambda _t: self._ended(call_id, task))

    def _ended(self, call_id: int, task: "asyncio.Task[None]") -> None:
        call = self._calls.get(call_id)
        if call is None or call.task is not task:
            return
        # A handler that ended without an answer (it cancelled itself, say) still ends its
        # call; a call answered already is left as it is.
        self._transport.finish(
            call_id, _CANCELLED, "the call ended without an answer", notify=call.streamed
        )
        # A streamed call is forgotten once its status has gone out (or its client left).
        if not call.streamed:
            del self._calls[call_id]

    def _parsed(self, call_id: int, method: Method, request: bytes) -> Any:
        try:
            return method.request.FromString(request)
        except DecodeError as e:
            streamed = method.kind is not CallKind.UNARY
            message = f"cannot parse the request: {e}"
            self._transport.finish(call_id, _INTERNAL, message, notify=streamed)
            return None

    async def _unary(
        self, call_id: int, method: Method, request: bytes, context: CallContext
    ) -> None:
        message = self._parsed(call_id, method, request)
        if message is None:
            return
        try:
            answer = await method.handler(message, context)
        except Exception as e:
            self._failed(call_id, e)
            return
        self._transport.reply(call_id, answer.SerializeToString())

    async def _streamed(
        self, call_id: int, method: Method, request: bytes, context: CallContext
    ) -> None:
        message = self._parsed(call_id, method, request)
        if message is not None:
            await self._answer(call_id, method.handler(message, context))

    async def _answer(self, call_id: int, answers: AsyncIterator[Any]) -> None:
        """Streams a handler's answers. Those it gives in one turn of the loop are written
        together at the end of the turn: a receive's messages leave in one write."""
        assert self._loop is not None
        outbox = _Outbox(call_id, self._transport)
        try:
            async for answer in answers:
                if outbox.gone:
                    return
                if not outbox.messages:
                    self._loop.call_soon(outbox.flush)
                outbox.messages.append(answer.SerializeToString())
        except Exception as e:
            outbox.flush()
            self._failed(call_id, e, notify=True)
            return
        finally:
            # At once, cancelled or not: a handler cleans up when it is closed (a receive
            # releases what its client never got).
            aclose = getattr(answers, "aclose", None)
            if aclose is not None:
                await aclose()
        outbox.flush()
        self._transport.finish(call_id, _OK, "", notify=True)

    def _failed(self, call_id: int, e: Exception, *, notify: bool = False) -> None:
        log.exception("gRPC call %d failed", call_id, exc_info=e)
        message = f"Unexpected {type(e).__name__}: {e}"
        self._transport.finish(call_id, _UNKNOWN, message, notify=notify)


class _Outbox:
    """Answers of one call not yet handed to the transport."""

    __slots__ = ("call_id", "gone", "messages", "transport")

    def __init__(self, call_id: int, transport: GrpcTransport) -> None:
        self.call_id = call_id
        self.transport = transport
        self.messages: list[bytes] = []
        self.gone = False

    def flush(self) -> None:
        if self.messages and not self.gone:
            self.gone = not self.transport.send(self.call_id, self.messages)
        self.messages = []


async def _inbound(
    transport: GrpcTransport, call_id: int, inbox: "asyncio.Queue[bytes | None]", request: Any
) -> AsyncIterator[Any]:
    while (message := await inbox.get()) is not None:
        # Taken: the transport may read the client's stream further.
        transport.consumed(call_id)
        yield request.FromString(message)
