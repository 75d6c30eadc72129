"""Asyncio remoting client: one connection per address, requests matched to answers by opaque.

Many requests may be in flight on one connection; each waits for its own answer with its own
timeout. Requests the server sends to the client (NOTIFY_CONSUMER_IDS_CHANGED and the like) go to
handlers registered by request code.

Writes are corked for one loop turn after a read that answered two requests or more: the tasks
those answers wake run in that turn and often send at once (each pull loop's next pull, each
sender's next send), so their requests leave in one system call instead of one each. A read
that answered one request leaves writes alone, so a lone request-answer-request chain pays no
extra wait.
"""

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import cast

from pyrmq.acl.signing import Credentials, sign
from pyrmq.errors import FrameDecodeError, RemotingError
from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import MAX_FRAME_BYTES, ResponseCode

__all__ = ["RemotingClient", "RemotingTimeoutError"]

log = logging.getLogger(__name__)

ServerRequestHandler = Callable[[RemotingCommand, str], Awaitable[RemotingCommand | None]]
"""``handler(request, address)``: a request a server sent on the connection to ``address``."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No answer arrived within the request's timeout."""


class _Channel(asyncio.Protocol):
    def __init__(self, client: "RemotingClient", address: str) -> None:
        self._client = client
        self.address = address
        self._decoder = FrameDecoder(MAX_FRAME_BYTES)
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.closed = asyncio.Event()
        # Cleared while the transport's buffer is above its high-water mark.
        self.writable = asyncio.Event()
        self.writable.set()
        # Frames held back while corked; None when writes go straight to the transport.
        self._corked: list[bytes] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)
        # Kept: on 3.11 each asyncio.get_running_loop() is a getpid() system call.
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        try:
            commands = self._decoder.feed(data)
        except FrameDecodeError as e:
            log.warning("closing connection to %s: %s", self.address, e)
            self.close()
            return
        woken = 0
        for cmd in commands:
            if cmd.is_response:
                fut = self.pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                    woken += 1
            else:
                self.loop.create_task(self._serve(cmd))
        if woken > 1 and self._corked is None:
            # Scheduled after the wake-ups set_result just queued, so it runs once they have.
            self._corked = []
            self.loop.call_soon(self._uncork)

    def write(self, frame: bytes) -> None:
        """Writes one frame now, or at the end of this loop turn while corked."""
        corked = self._corked
        if corked is not None:
            corked.append(frame)
        else:
            assert self.transport is not None
            self.transport.write(frame)

    def _uncork(self) -> None:
        frames, self._corked = self._corked, None
        if frames and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(frames)

    async def _serve(self, request: RemotingCommand) -> None:
        # Answered as a Java client answers, so that a broker asking something this client does
        # not do learns it at once instead of waiting out its timeout.
        handler = self._client.server_request_handlers.get(request.code)
        if handler is None:
            log.debug("server request code=%s from %s not supported", request.code, self.address)
            response: RemotingCommand | None = RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f" request type {request.code} not supported",
            )
        else:
            try:
                response = await handler(request, self.address)
            except Exception as e:
                log.exception("server request code=%s from %s failed", request.code, self.address)
                response = RemotingCommand.response_to(
                    request, ResponseCode.SYSTEM_ERROR, remark=f"{type(e).__name__}: {e}"
                )
        if response is not None and not request.is_oneway and self.transport is not None:
            self.write(encode(response))

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.writable.set()  # writers waiting to drain go on, and fail on the closed channel
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(RemotingError(f"connection to {self.address} closed"))
        self.pending.clear()
        self.closed.set()
        self._client._forget(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _expire(
    fut: "asyncio.Future[RemotingCommand]", address: str, request: RemotingCommand, timeout_s: float
) -> None:
    if not fut.done():
        fut.set_exception(
            RemotingTimeoutError(
                f"no answer from {address} to code={request.code} opaque={request.opaque} "
                f"within {round(timeout_s, 3):g} s"
            )
        )


class RemotingClient:
    """Sends requests to any number of servers over one connection each."""

    def __init__(
        self,
        *,
        connect_timeout_s: float = 3.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.credentials = credentials
        """Every request is signed with these, for brokers that check ACLs."""
        self.tls = tls
        """Connections are TLS with this context (within ``connect_timeout_s``, handshake
        included)."""
        self.server_request_handlers: dict[int, ServerRequestHandler] = {}
        self._channels: dict[str, _Channel] = {}
        self._connecting: dict[str, asyncio.Future[_Channel]] = {}

    def _connected(self, address: str) -> _Channel | None:
        """The open connection to ``address``, if there is one."""
        channel = self._channels.get(address)
        if (
            channel is not None
            and channel.transport is not None
            and not channel.transport.is_closing()
        ):
            return channel
        return None

    def connection_of(self, address: str) -> object | None:
        """The open connection to ``address`` as an opaque token (None without one): a
        caller that did something over a connection can tell whether the one open now is a
        later one."""
        return self._connected(address)

    async def _channel(self, address: str) -> _Channel:
        channel = self._connected(address)
        if channel is not None:
            return channel
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[_Channel] = loop.create_future()
        self._connecting[address] = fut
        try:
            host, _, port = address.rpartition(":")
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for drops a connection that
            # completes as its timeout or a cancel arrives, leaving the socket open.
            async with asyncio.timeout(self.connect_timeout_s):
                _, opened = await loop.create_connection(
                    lambda: _Channel(self, address),
                    host,
                    int(port),
                    ssl=self.tls,
                    server_hostname=host if self.tls is not None else None,
                )
        except (OSError, TimeoutError, ValueError) as e:
            # ValueError: an address that is not host:port (no port, a port not a number).
            err = RemotingError(f"cannot connect to {address}: {e}")
            fut.set_exception(err)
            fut.exception()  # consumed here; waiters get it through shield
            raise err from e
        except BaseException:
            # Cancelled mid-connect: the other tasks waiting for this connection must fail
            # (and may retry), not wait forever.
            fut.set_exception(RemotingError(f"connecting to {address} was cancelled"))
            fut.exception()
            raise
        finally:
            self._connecting.pop(address, None)
        self._channels[address] = opened
        fut.set_result(opened)
        return opened

    def _forget(self, channel: _Channel) -> None:
        if self._channels.get(channel.address) is channel:
            del self._channels[channel.address]

    async def invoke(
        self, address: str, request: RemotingCommand, timeout_s: float = 3.0
    ) -> RemotingCommand:
        """Sends ``request`` and returns its answer."""
        # Connected already, as nearly always: no coroutine to open one.
        channel = self._connected(address) or await self._channel(address)
        assert channel.transport is not None
        loop = channel.loop
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        channel.pending[request.opaque] = fut
        # A bare timer: asyncio.wait_for costs an extra task per request.
        timer = loop.call_later(timeout_s, _expire, fut, address, request, timeout_s)
        if self.credentials is not None:
            sign(request, self.credentials)
        try:
            channel.write(encode(request))
            return await fut
        finally:
            timer.cancel()
            channel.pending.pop(request.opaque, None)

    async def invoke_oneway(self, address: str, request: RemotingCommand) -> None:
        """Sends ``request`` (which should carry the oneway flag) without waiting for an
        answer; waits only while the connection's send buffer is over its high-water mark, so
        a fast sender cannot queue without bound."""
        channel = await self._channel(address)
        assert channel.transport is not None
        if self.credentials is not None:
            sign(request, self.credentials)
        channel.write(encode(request))
        if not channel.writable.is_set():
            await channel.writable.wait()

    async def send_raw(self, address: str, data: bytes) -> None:
        """Writes bytes as they are (tests of malformed input)."""
        channel = await self._channel(address)
        assert channel.transport is not None
        channel.transport.write(data)

    async def close(self) -> None:
        channels = list(self._channels.values())
        for channel in channels:
            channel.close()
        for channel in channels:
            await channel.closed.wait()
