"""Asyncio remoting server: frames in, one task per request, answers out of order.

Each request runs as its own task, so a pull parked for long polling never delays a heartbeat or a
lock on the same connection. Handlers registered with :meth:`RemotingServer.register_inline`
(sends and pulls, the hot path) run at once in ``data_received`` instead: no task, no trip
through the loop's ready queue; one that must wait returns an awaitable, and only that gets a
task. Answers carry the request's opaque and serialize type. The server can also send requests
to a connected client (NOTIFY_CONSUMER_IDS_CHANGED, GET_CONSUMER_RUNNING_INFO) and match their
answers by opaque.

Failures stay with their connection: a malformed frame closes that connection only, an unknown
code gets REQUEST_CODE_NOT_SUPPORTED, a handler that raises gets SYSTEM_ERROR. Nothing else is
disturbed. A client that does not read its answers stops being read: once a connection's unsent
answers pass ``WRITE_HIGH_WATER_BYTES``, its requests wait until they drain. A connection that
neither sends nor is sent anything for ``max_idle_s`` (RocketMQ's
``serverChannelMaxIdleTimeSeconds``, 120 s), with no request of its own being served, is closed:
so is one that stopped halfway through a frame, and the memory its partial frame holds goes back.

With a TLS context the server accepts connections itself and looks at each one's first byte
before the transport is made (:mod:`pyrmq.remoting.first_byte`): a TLS handshake gets a TLS
transport, anything else a plain one, or, when TLS is enforced, a closed connection.
"""

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Protocol, cast

from pyrmq.errors import FrameDecodeError, HeaderError, RemotingError
from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.first_byte import FirstByteListener, listening_socket, peer_text
from pyrmq.remoting.protocol import MAX_FRAME_BYTES, ResponseCode
from pyrmq.remoting.tls import looks_like_tls

__all__ = ["AccessCheck", "Connection", "Handler", "InlineHandler", "RemotingServer"]

log = logging.getLogger(__name__)

_opaques = itertools.count(1 << 30)

WRITE_HIGH_WATER_BYTES = 4 << 20
"""Unsent answer bytes above which a connection's requests are no longer read."""

HANDSHAKE_TIMEOUT_S = 10.0

MAX_IDLE_S = 120.0
"""RocketMQ's ``serverChannelMaxIdleTimeSeconds``."""

MAX_PARTIAL_BYTES = 1 << 30
"""Bytes of frames not yet complete that a server holds over all its connections; a
connection whose bytes would take it past this is closed (each frame is bounded by the
largest frame, the sum by this)."""


class Handler(Protocol):
    """Answers one request; returns None for requests that get no answer."""

    def __call__(
        self, conn: "Connection", request: RemotingCommand
    ) -> Awaitable[RemotingCommand | None]: ...


class InlineHandler(Protocol):
    """Answers one request at once (a command, or None for no answer), or returns an awaitable
    of that answer when it has to wait (a send under SYNC_FLUSH, say). Must not block."""

    def __call__(
        self, conn: "Connection", request: RemotingCommand
    ) -> "RemotingCommand | Awaitable[RemotingCommand | None] | None": ...


AccessCheck = Callable[["Connection", RemotingCommand], RemotingCommand | None]
"""``check(conn, request)``: None if the request may be served, else the answer refusing it."""

RpcObserver = Callable[[int, int, int, bool], None]
"""``observe(request_code, response_code, elapsed_ns, long_polling)``: a request answered."""


class Connection(asyncio.Protocol):
    """One client connection: frame decoding, request dispatch, outbound requests."""

    def __init__(self, server: "RemotingServer") -> None:
        self._server = server
        self._decoder = FrameDecoder(server.max_frame_bytes)
        # What this connection counts in the server's ``partial_bytes``.
        self._partial = 0
        self._transport: asyncio.Transport | None = None
        # Looked up once: on 3.11 every asyncio.get_running_loop() is a getpid() system call.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.peer: tuple[str, int] = ("0.0.0.0", 0)
        self.peer_address = "0.0.0.0:0"
        """``host:port`` of the peer (every stored message names its sender's)."""
        self.closed = asyncio.Event()
        self._writing_paused = False
        # Requests decoded but not yet served while answers wait to drain.
        self._backlog: list[RemotingCommand] = []
        # With an RPC observer: [arrival ns, request code, held for long polling] by opaque,
        # until the answer goes out.
        self._timing: dict[int, list[Any]] | None = None if server.rpc_observer is None else {}
        # Bumped by every read and write; the idle sweep compares it with what it last saw.
        self._activity = 0
        self._seen_activity = -1
        self._idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self._transport = cast(asyncio.Transport, transport)
        self._transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if peer:
            host = peer[0]
            # C++ clients read 4-byte hosts only: report IPv4-mapped peers as plain IPv4.
            if host.startswith("::ffff:"):
                host = host[7:]
            self.peer = (host, int(peer[1]))
            self.peer_address = f"{host}:{self.peer[1]}"
        self._server.connections.add(self)
        log.debug("connection opened peer=%s", self.peer_address)

    def data_received(self, data: bytes) -> None:
        self._activity += 1
        decoder = self._decoder
        try:
            commands = decoder.feed(data)
        except FrameDecodeError as e:
            self._count_partial(0)
            tls = looks_like_tls(data)
            hint = " (a TLS handshake: this server has no TLS certificate)" if tls else ""
            log.warning("closing connection peer=%s: %s%s", self.peer_address, e, hint)
            # The requests before the malformed frame are served, as by RocketMQ's broker;
            # their answers go out only if written before the connection closes.
            self._dispatch(list(e.decoded))
            self.close()
            return
        partial = decoder.buffered_bytes
        if partial != self._partial and self._count_partial(partial):
            log.warning(
                "closing connection peer=%s: its %d bytes of an incomplete frame would take "
                "the server past %d bytes of incomplete frames",
                self.peer_address,
                partial,
                self._server.max_partial_bytes,
            )
            self._count_partial(0)
            self.close()
            return
        if self._backlog:
            self._backlog.extend(commands)
        else:
            self._dispatch(commands)

    def _dispatch(self, commands: list[RemotingCommand]) -> None:
        inline = self._server.inline_handlers
        check = self._server.access_check
        timing = self._timing
        for i, cmd in enumerate(commands):
            if self._writing_paused:
                self._backlog = commands[i:]
                return
            if cmd.is_response:
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                continue
            if timing is not None and not cmd.is_oneway:
                timing[cmd.opaque] = [time.monotonic_ns(), cmd.code, False]
            if check is not None:
                refused = check(self, cmd)
                if refused is not None:
                    if not cmd.is_oneway:
                        self.send(refused)
                    continue
            handler = inline.get(cmd.code)
            if handler is not None:
                self._serve_inline(handler, cmd)
            else:
                self._spawn(self._serve(cmd))

    def pause_writing(self) -> None:
        # The client reads its answers slower than it sends requests: stop reading them.
        self._writing_paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        backlog, self._backlog = self._backlog, []
        self._dispatch(backlog)
        transport = self._transport
        if not self._writing_paused and transport is not None and not transport.is_closing():
            transport.resume_reading()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        loop = self._loop
        assert loop is not None
        task = loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _count_partial(self, partial: int) -> bool:
        """Counts ``partial`` bytes of an incomplete frame for this connection; True if that
        grew the server's total past its bound."""
        server = self._server
        grew = partial > self._partial
        server.partial_bytes += partial - self._partial
        self._partial = partial
        return grew and server.partial_bytes > server.max_partial_bytes

    def connection_lost(self, exc: Exception | None) -> None:
        self._count_partial(0)
        self._server.connections.discard(self)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(RemotingError(f"connection to {self.peer_address} closed"))
        self._pending.clear()
        self.closed.set()
        for callback in self._server.on_disconnect:
            try:
                callback(self)
            except Exception:
                log.exception("disconnect callback failed peer=%s", self.peer_address)
        log.debug("connection closed peer=%s", self.peer_address)

    async def _serve(self, request: RemotingCommand) -> None:
        handler = self._server.handlers.get(request.code)
        try:
            if handler is None:
                response: RemotingCommand | None = RemotingCommand.response_to(
                    request,
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f" request type {request.code} not supported",
                )
            else:
                response = await handler(self, request)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            response = self._failed(request, e)
        if response is not None and not request.is_oneway:
            self.send(response)

    def _serve_inline(self, handler: InlineHandler, request: RemotingCommand) -> None:
        try:
            result = handler(self, request)
        except Exception as e:
            response: RemotingCommand | None = self._failed(request, e)
        else:
            if result is not None and not isinstance(result, RemotingCommand):
                if asyncio.isfuture(result):
                    # A future needs no task: answer from its done callback.
                    result.add_done_callback(functools.partial(self._answer_done, request))
                else:
                    self._spawn(self._finish(request, result))
                return
            response = result
        if response is not None and not request.is_oneway:
            self.send(response)

    async def _finish(
        self, request: RemotingCommand, pending: Awaitable[RemotingCommand | None]
    ) -> None:
        try:
            response = await pending
        except asyncio.CancelledError:
            raise
        except Exception as e:
            response = self._failed(request, e)
        if response is not None and not request.is_oneway:
            self.send(response)

    def _answer_done(
        self, request: RemotingCommand, done: "asyncio.Future[RemotingCommand | None]"
    ) -> None:
        if done.cancelled():
            return
        e = done.exception()
        response = done.result() if e is None else self._failed(request, cast(Exception, e))
        if response is not None and not request.is_oneway:
            self.send(response)

    def _failed(self, request: RemotingCommand, e: Exception) -> RemotingCommand:
        """SYSTEM_ERROR for a handler that raised (logged, unless the request was malformed)."""
        if isinstance(e, HeaderError):
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        log.exception(
            "request failed code=%s opaque=%s peer=%s", request.code, request.opaque, self.peer
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}"
        )

    def held(self, request: RemotingCommand) -> None:
        """Marks ``request`` as held for long polling, as the RPC observer reports it."""
        if self._timing is not None and (entry := self._timing.get(request.opaque)) is not None:
            entry[2] = True

    def send(self, cmd: RemotingCommand) -> None:
        """Writes one frame; dropped silently if the connection is gone."""
        if self._timing is not None and cmd.is_response:
            self._observe(cmd)
        if self._transport is None or self._transport.is_closing():
            return
        self._activity += 1
        try:
            frame = encode(cmd)
        except ValueError as e:
            if not cmd.is_response:
                raise
            # An answer too large for a frame (a header past 16 MiB): the client still gets
            # one, and the connection, with its other requests in flight, stays up.
            log.error("answer to opaque=%s cannot be sent: %s", cmd.opaque, e)
            frame = encode(
                RemotingCommand.response_to(
                    cmd, ResponseCode.SYSTEM_ERROR, remark=f"the answer cannot be sent: {e}"
                )
            )
        self._transport.write(frame)

    def _observe(self, response: RemotingCommand) -> None:
        observe = self._server.rpc_observer
        entry = None if self._timing is None else self._timing.pop(response.opaque, None)
        if entry is not None and observe is not None:
            started, code, held = entry
            observe(code, response.code, time.monotonic_ns() - started, held)

    async def request(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Sends a request to the client and waits for its answer; fails at once on a
        connection already closing, whose writes would be dropped."""
        if self._transport is None or self._transport.is_closing():
            raise RemotingError(f"connection to {self.peer_address} closed")
        cmd.opaque = next(_opaques)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[cmd.opaque] = fut
        self.send(cmd)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(cmd.opaque, None)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def idle_for(self, now: float) -> float:
        """How long (s) the connection has neither read nor written, as of the sweeps that
        asked; 0 while one of its requests is being served (a held pull among them)."""
        if self._activity != self._seen_activity or self._tasks:
            self._seen_activity = self._activity
            self._idle_since = now
        return now - self._idle_since


class RemotingServer:
    """Listens on one address and routes requests to handlers by request code."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        tls: ssl.SSLContext | None = None,
        tls_only: bool = False,
        max_idle_s: float = MAX_IDLE_S,
        max_partial_bytes: int = MAX_PARTIAL_BYTES,
    ) -> None:
        """``tls``: accept TLS connections with this context, and plain ones too unless
        ``tls_only``; ``max_idle_s``: close connections idle this long (0: never);
        ``max_partial_bytes``: see :data:`MAX_PARTIAL_BYTES`."""
        self.host = host
        self.port = port
        self.max_frame_bytes = max_frame_bytes
        self.tls = tls
        self.tls_only = tls_only
        self.handlers: dict[int, Handler] = {}
        self.inline_handlers: dict[int, InlineHandler] = {}
        self.connections: set[Connection] = set()
        self.on_disconnect: list[Callable[[Connection], None]] = []
        self.access_check: AccessCheck | None = None
        """Runs before every request is served; a refusal it returns is the answer."""
        self.rpc_observer: RpcObserver | None = None
        """Told of every answered request; set before the server starts."""
        self.max_idle_s = max_idle_s
        self.max_partial_bytes = max_partial_bytes
        self.partial_bytes = 0
        """Bytes of incomplete frames held over all connections."""
        self._server: asyncio.Server | None = None
        self._listener: FirstByteListener | None = None
        self._sweeper: asyncio.Task[None] | None = None

    def register(self, code: int, handler: Handler) -> None:
        self.inline_handlers.pop(int(code), None)
        self.handlers[int(code)] = handler

    def register_inline(self, code: int, handler: InlineHandler) -> None:
        """Like :meth:`register`, for a handler run at once in the event loop's I/O callback
        (see :class:`InlineHandler`): for the requests whose latency matters."""
        self.handlers.pop(int(code), None)
        self.inline_handlers[int(code)] = handler

    async def start(self, *, serve: bool = True) -> None:
        """Binds; serves from now on, or from :meth:`serve` on (a broker binds first, to learn
        its port, and serves once its store is open)."""
        loop = asyncio.get_running_loop()
        if self.tls is None:
            # Listening from now on: until it serves, connections wait rather than fail.
            sock = await listening_socket(self.host, self.port)
            self._server = await loop.create_server(
                lambda: Connection(self), sock=sock, start_serving=serve
            )
            self.port = self._server.sockets[0].getsockname()[1]
        else:
            listener = FirstByteListener(self.host, self.port, self._open, tls_only=self.tls_only)
            await listener.start(serve=serve)
            self._listener = listener
            self.port = listener.port
        tls = "" if self.tls is None else " tls=" + ("enforcing" if self.tls_only else "permissive")
        log.info("remoting server listening address=%s:%s%s", self.host, self.port, tls)
        if self.max_idle_s > 0:
            self._sweeper = loop.create_task(self._close_idle())

    async def _close_idle(self) -> None:
        period = min(10.0, self.max_idle_s / 4)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self.connections):
                idle = conn.idle_for(now)
                if idle >= self.max_idle_s:
                    log.info("closing connection peer=%s: idle for %.0f s", conn.peer_address, idle)
                    conn.close()

    async def _open(self, sock: socket.socket, is_tls: bool) -> None:
        loop = asyncio.get_running_loop()
        peer = peer_text(sock)  # gone once a failed handshake closed the socket
        try:
            await loop.connect_accepted_socket(
                lambda: Connection(self),
                sock,
                ssl=self.tls if is_tls else None,
                ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if is_tls else None,
            )
        except (OSError, TimeoutError) as e:
            # ssl.SSLError is an OSError: a client that does not trust us, a bad certificate.
            log.warning("closing connection peer=%s: TLS handshake failed: %s", peer, e)
            sock.close()

    async def serve(self) -> None:
        """Starts serving after ``start(serve=False)``."""
        if self._server is not None:
            await self._server.start_serving()
        if self._listener is not None:
            self._listener.serve()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                conn.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
            for conn in list(self.connections):
                conn.close()
