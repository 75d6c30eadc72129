"""A TCP listener that reads nothing of a connection before knowing whether it opens with a TLS
handshake: TLS and plain TCP on one port, as RocketMQ's permissive TLS mode serves them.

Each accepted socket waits, without a transport, until its first byte arrives; that byte is
peeked at (left in the socket) and the socket handed to the owner with the verdict. A client
that sends nothing within ``FIRST_BYTE_TIMEOUT_S`` is closed; when TLS is enforced a plain one
is closed at once, with a log line that says why.
"""

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from pyrmq.remoting.tls import HANDSHAKE_RECORD

__all__ = ["FIRST_BYTE_TIMEOUT_S", "FirstByteListener", "Opener", "listening_socket", "peer_text"]

log = logging.getLogger(__name__)

FIRST_BYTE_TIMEOUT_S = 120.0
"""RocketMQ's ``serverChannelMaxIdleTimeSeconds``: a connection silent this long is closed."""

Opener = Callable[[socket.socket, bool], Awaitable[None]]
"""``open(sock, is_tls)``: serves the connection; owns ``sock`` from then on. Cancelled when
the listener stops."""


class FirstByteListener:
    """Accepts on ``host:port`` and hands each connection to ``opener`` by its first byte."""

    def __init__(
        self, host: str, port: int, opener: Opener, *, tls_only: bool, what: str = "connection"
    ) -> None:
        self.host = host
        self.port = port
        self.tls_only = tls_only
        self._opener = opener
        self._what = what
        self._sock: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, *, serve: bool = True) -> None:
        """Binds (``port`` 0: any free port, then set to the bound one); accepts connections
        from now on, or from :meth:`serve` on (they wait in the backlog until then)."""
        sock = await listening_socket(self.host, self.port)
        self._sock = sock
        self.port = sock.getsockname()[1]
        if serve:
            self.serve()

    def serve(self) -> None:
        """Starts accepting connections (once)."""
        if self._sock is not None and self._accepting is None:
            loop = asyncio.get_running_loop()
            self._accepting = loop.create_task(self._accept(self._sock))

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as e:
                # Out of file descriptors, say: the listener stays, and tries again shortly.
                log.warning("accepting a %s failed: %s", self._what, e)
                await asyncio.sleep(0.1)
                continue
            task = loop.create_task(self._serve(sock))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = peer_text(sock)
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _settle, readable)
            try:
                await asyncio.wait_for(readable, FIRST_BYTE_TIMEOUT_S)
            finally:
                loop.remove_reader(sock.fileno())
            first = sock.recv(1, socket.MSG_PEEK)
        except (OSError, TimeoutError) as e:
            sock.close()
            log.debug("%s closed before its first byte: %s", self._what, e)
            return
        except BaseException:
            sock.close()
            raise
        if not first:
            sock.close()
            return
        is_tls = first[0] == HANDSHAKE_RECORD
        if not is_tls and self.tls_only:
            log.warning(
                "closing %s peer=%s: plain TCP, and this server enforces TLS", self._what, peer
            )
            sock.close()
            return
        await self._opener(sock, is_tls)

    async def stop(self) -> None:
        """Stops accepting and cancels every opener still running."""
        if self._sock is None:
            return
        waits = [*self._tasks]
        if self._accepting is not None:
            waits.append(self._accepting)
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
        self._sock.close()
        self._sock = self._accepting = None


async def listening_socket(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on ``host:port``: connections wait in its backlog
    until someone accepts them."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sock = socket.create_server((host, port), family=infos[0][0], backlog=1024)
    sock.setblocking(False)
    return sock


def peer_text(sock: socket.socket) -> str:
    """``host:port`` of the socket's peer, or ``?`` once it is gone."""
    try:
        peer = sock.getpeername()
    except OSError:
        return "?"
    return f"{peer[0]}:{peer[1]}"


def _settle(fut: "asyncio.Future[None]") -> None:
    if not fut.done():
        fut.set_result(None)
