"""The gRPC port of a broker that serves TLS and plain clients on it (RocketMQ's permissive mode).

gRPC's listener serves one or the other on a port, so the public port is a
:class:`~pyrmq.remoting.first_byte.FirstByteListener`: each connection is joined, byte for byte,
to one of two loopback ports of the gRPC server, its TLS one (where gRPC does the handshake) or
its plain one. The gRPC server then sees every client as a loopback peer; :meth:`SplicingFront.peer`
gives back the real one, by the loopback port the join connected from.
"""

import asyncio
import logging
import socket
from typing import cast

from pyrmq.remoting.first_byte import FirstByteListener

__all__ = ["SplicingFront"]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
PEER_KEPT_S = 30.0
"""How long a join's client is still known by its loopback port after the join ends."""
WRITE_HIGH_WATER_BYTES = 1 << 20
"""Bytes one side may hold for its partner before the partner is no longer read."""


class SplicingFront:
    """Listens on ``host:port`` and joins each connection to ``tls_port`` or ``plain_port`` on
    the loopback address."""

    def __init__(self, host: str, port: int, *, plain_port: int, tls_port: int) -> None:
        self._listener = FirstByteListener(
            host, port, self._join, tls_only=False, what="gRPC connection"
        )
        self._ports = {False: plain_port, True: tls_port}
        # Loopback port of a join -> the client's peer, as gRPC writes peers.
        self._peers: dict[int, str] = {}

    @property
    def port(self) -> int:
        return self._listener.port

    async def start(self, *, serve: bool = True) -> None:
        await self._listener.start(serve=serve)

    def serve(self) -> None:
        self._listener.serve()

    async def stop(self) -> None:
        await self._listener.stop()

    def _forget(self, local_port: int, peer: str) -> None:
        if self._peers.get(local_port) == peer:
            del self._peers[local_port]

    def peer(self, grpc_peer: str) -> str:
        """The client behind ``grpc_peer`` (``ipv4:127.0.0.1:PORT``, a join); other peers as
        they are."""
        prefix = f"ipv4:{LOOPBACK}:"
        if grpc_peer.startswith(prefix):
            port = grpc_peer[len(prefix) :]
            if port.isdigit():
                return self._peers.get(int(port), grpc_peer)
        return grpc_peer

    async def _join(self, client: socket.socket, is_tls: bool) -> None:
        loop = asyncio.get_running_loop()
        peer = _grpc_peer(client)
        ended = loop.create_future()
        outer, inner = _Half(ended), _Half(ended)
        outer.partner, inner.partner = inner, outer
        local_port = 0
        try:
            await loop.create_connection(lambda: inner, LOOPBACK, self._ports[is_tls])
            assert inner.transport is not None
            local_port = inner.transport.get_extra_info("sockname")[1]
            # Known before gRPC reads the first byte of the connection.
            self._peers[local_port] = peer
            await loop.connect_accepted_socket(lambda: outer, client)
            await ended
        except OSError as e:
            log.warning("gRPC connection peer=%s not joined: %s", peer, e)
        finally:
            if local_port:
                # Calls gRPC still serves for the client name it a little longer.
                loop.call_later(PEER_KEPT_S, self._forget, local_port, peer)
            for half in (outer, inner):
                if half.transport is not None:
                    half.transport.abort()
            client.close()


class _Half(asyncio.Protocol):
    """One side of a join: what it reads, its partner writes. A side's end of input (a
    half-close) is passed on; a side that closes closes the other once its writes are out.
    What arrives for a side before its connection is made (the gRPC server's greeting, sent as
    the loopback side connects) waits for it."""

    def __init__(self, ended: "asyncio.Future[None]") -> None:
        self._ended = ended
        self.partner: _Half | None = None
        self.transport: asyncio.Transport | None = None
        self.lost = False
        self.ended_input = False
        self._early: list[bytes] = []
        self._early_eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        if self._early:
            self.transport.writelines(self._early)
            self._early.clear()
        if self._early_eof and self.transport.can_write_eof():
            self.transport.write_eof()

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is None:
            self._early.append(data)
        elif not transport.is_closing():
            transport.write(data)

    def write_eof(self) -> None:
        transport = self.transport
        if transport is None:
            self._early_eof = True
        elif not transport.is_closing() and transport.can_write_eof():
            transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self.partner is not None:
            self.partner.write(data)

    def eof_received(self) -> bool:
        self.ended_input = True
        partner = self.partner
        if partner is not None:
            partner.write_eof()
            if partner.ended_input:
                # Both directions are over: nothing will come or go any more.
                for half in (self, partner):
                    if half.transport is not None:
                        half.transport.close()
                return False
        return True  # the other direction goes on

    def pause_writing(self) -> None:
        # The partner's data waits in this side's buffer: stop reading the partner.
        partner = self.partner
        if partner is not None and partner.transport is not None:
            partner.transport.pause_reading()

    def resume_writing(self) -> None:
        partner = self.partner
        if partner is not None and partner.transport is not None and not partner.lost:
            partner.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        partner = self.partner
        if partner is not None and partner.transport is not None:
            partner.transport.close()
        if (partner is None or partner.lost) and not self._ended.done():
            self._ended.set_result(None)


def _grpc_peer(sock: socket.socket) -> str:
    """The socket's peer as gRPC writes it: ``ipv4:1.2.3.4:5`` or ``ipv6:[::1]:5``."""
    try:
        peer = sock.getpeername()
    except OSError:
        return "unknown"
    host = peer[0]
    if ":" in host:
        return f"ipv6:[{host}]:{peer[1]}"
    return f"ipv4:{host}:{peer[1]}"
