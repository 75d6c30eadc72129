"""The gRPC listener: RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` on the broker's loop.

Methods are registered by path, with this package's message classes doing the (de)serializing,
so the official clients' generated code is never needed here. The RPCs the official clients
never call (PullMessage, the offset RPCs, SyncLiteSubscription) are not registered and get
gRPC's UNIMPLEMENTED, as from RocketMQ's own proxy.

Calls are served by pyrmq's own HTTP/2 transport (:mod:`pyrmq.proxy.calls`), which costs the
broker a fraction of grpcio's CPU per call; ``grpcTransport=grpcio`` serves them with grpcio
instead. With a certificate (or the self-signed one of RocketMQ's TLS test mode, see
:mod:`pyrmq.remoting.tls`) the port follows the broker's TLS mode (``tls.server.mode``): TLS
only when it is enforced; TLS and plain both when permissive, told apart by the client's first
byte. grpcio cannot do that on one port, so with it a
:class:`~pyrmq.proxy.front.SplicingFront` joins each connection to one of two grpcio listeners
on the loopback address.
"""

import logging
from collections.abc import AsyncIterator, Callable
from operator import methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from pyrmq.errors import ConfigError
from pyrmq.proxy.calls import CallKind, Method, NativeGrpcServer, ServerTls
from pyrmq.proxy.front import LOOPBACK, SplicingFront
from pyrmq.proxy.namespaces import call_namespace, fold, unfold
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.service import MessagingService
from pyrmq.remoting.tls import TlsConfig, TlsMode

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["SERVICE_NAME", "GrpcServer"]

log = logging.getLogger(__name__)

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
# Room for a batch of 4 MiB messages, as RocketMQ's proxy allows (130 MiB).
MAX_RECEIVE_MESSAGE_BYTES = 130 * 1024 * 1024
GRACE_S = 1.0


def _unary(handler: Callable[..., Any]) -> Callable[..., Any]:
    """A unary handler with namespaces folded into its request and out of its answer (see
    :mod:`pyrmq.proxy.namespaces`)."""

    async def call(message: Any, context: Any) -> Any:
        if not call_namespace(context):
            return await handler(message, context)
        fold(message)
        answer = await handler(message, context)
        unfold(answer)
        return answer

    return call


def _answers(handler: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """A streaming handler with namespaces folded into what it reads and out of what it
    answers (see :mod:`pyrmq.proxy.namespaces`)."""

    async def call(request: Any, context: Any) -> AsyncIterator[Any]:
        namespaced = bool(call_namespace(context))
        if namespaced:
            request = _folded(request) if isinstance(request, AsyncIterator) else _fold(request)
        answers = handler(request, context)
        try:
            async for answer in answers:
                if namespaced:
                    unfold(answer)
                yield answer
        finally:
            # At once: a handler cleans up when it is closed (a receive releases what the
            # client never got).
            aclose = getattr(answers, "aclose", None)
            if aclose is not None:
                await aclose()

    return call


def _fold(message: Any) -> Any:
    fold(message)
    return message


async def _folded(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for message in requests:
        fold(message)
        yield message


def methods(service: MessagingService) -> dict[str, Method]:
    """The RPCs served, by name."""
    unary = CallKind.UNARY
    return {
        "QueryRoute": Method(unary, pb.QueryRouteRequest, _unary(service.query_route)),
        "Heartbeat": Method(unary, pb.HeartbeatRequest, _unary(service.heartbeat)),
        "SendMessage": Method(unary, pb.SendMessageRequest, _unary(service.send_message)),
        "QueryAssignment": Method(
            unary, pb.QueryAssignmentRequest, _unary(service.query_assignment)
        ),
        "ReceiveMessage": Method(
            CallKind.SERVER_STREAM, pb.ReceiveMessageRequest, _answers(service.receive_message)
        ),
        "AckMessage": Method(unary, pb.AckMessageRequest, _unary(service.ack_message)),
        "ForwardMessageToDeadLetterQueue": Method(
            unary,
            pb.ForwardMessageToDeadLetterQueueRequest,
            _unary(service.forward_message_to_dead_letter_queue),
        ),
        "EndTransaction": Method(unary, pb.EndTransactionRequest, _unary(service.end_transaction)),
        "Telemetry": Method(CallKind.BIDI_STREAM, pb.TelemetryCommand, _answers(service.telemetry)),
        "NotifyClientTermination": Method(
            unary, pb.NotifyClientTerminationRequest, _unary(service.notify_client_termination)
        ),
        "ChangeInvisibleDuration": Method(
            unary, pb.ChangeInvisibleDurationRequest, _unary(service.change_invisible_duration)
        ),
        "RecallMessage": Method(unary, pb.RecallMessageRequest, _unary(service.recall_message)),
    }


def _grpcio_handlers(table: dict[str, Method]) -> "dict[str, grpc.RpcMethodHandler[Any, Any]]":
    serialize = methodcaller("SerializeToString")
    register = {
        CallKind.UNARY: grpc.unary_unary_rpc_method_handler,
        CallKind.SERVER_STREAM: grpc.unary_stream_rpc_method_handler,
        CallKind.BIDI_STREAM: grpc.stream_stream_rpc_method_handler,
    }
    return {
        name: register[m.kind](
            m.handler, request_deserializer=m.request.FromString, response_serializer=serialize
        )
        for name, m in table.items()
    }


class GrpcServer:
    """Serves the gRPC protocol for one broker on ``host:port`` (0: any free port)."""

    def __init__(self, broker: "BrokerController", host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._server: grpc.aio.Server | None = None
        self._native: NativeGrpcServer | None = None
        self._front: SplicingFront | None = None
        self._serving = False
        self.service: MessagingService | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def serve(self) -> None:
        """Starts serving after ``start(serve=False)``."""
        if self._serving or self.service is None:
            return
        self._serving = True
        if self._server is not None:
            await self._server.start()
        if self._native is not None:
            self._native.serve()
        if self._front is not None:
            self._front.serve()

    async def start(self, tls: TlsConfig | None = None, *, serve: bool = True) -> None:
        """Binds, over TLS when ``tls`` enforces it; serves from now on, or from
        :meth:`serve` on.

        Raises:
            ConfigError: TLS is enforced with a key or trust file gRPC cannot use.
            OSError: The port cannot be bound.
        """
        pem = None if tls is None else tls.server_pem()
        mode = tls.server_mode if tls is not None and pem is not None else None
        native = self.broker.config.grpc_transport == "native"
        # The broker keeps it: its 4.x pops share the groups' pop state with gRPC's.
        service = self.broker.pops
        table = methods(service)
        if native:
            over = native_tls(tls, pem) if tls is not None and pem is not None else None
            self._native = NativeGrpcServer(
                self.host, self.port, SERVICE_NAME, table, MAX_RECEIVE_MESSAGE_BYTES, over
            )
            bound = int(self._native.port)
        else:
            bound = await self._grpcio_on(service, table, tls, pem)
        self.port = service.port = bound
        self.service = service
        if serve:
            await self.serve()
        log.info(
            "gRPC listening on %s (%s)%s",
            self.address,
            "pyrmq" if native else "grpcio",
            "" if mode is None else f" tls={mode}",
        )

    async def _grpcio_on(
        self,
        service: MessagingService,
        table: dict[str, Method],
        tls: TlsConfig | None,
        pem: tuple[bytes, bytes] | None,
    ) -> int:
        """Binds grpcio's server (behind a splicing front when permissive); the port."""
        address = f"{self.host}:{self.port}"
        credentials = None if tls is None or pem is None else server_credentials(tls, pem)
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ]
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, _grpcio_handlers(table)),)
        )
        self._server = server
        if tls is None or credentials is None:
            bound = server.add_insecure_port(address)
        elif tls.server_mode is TlsMode.ENFORCING:
            bound = server.add_secure_port(address, credentials)
        else:
            plain = server.add_insecure_port(f"{LOOPBACK}:0")
            secure = server.add_secure_port(f"{LOOPBACK}:0", credentials)
            if not (plain and secure):
                raise OSError("cannot listen for gRPC on the loopback address")
            front = SplicingFront(self.host, self.port, plain_port=plain, tls_port=secure)
            await front.start(serve=False)
            self._front = front
            service.peer_of = front.peer
            bound = front.port
        if bound == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        return int(bound)

    async def stop(self) -> None:
        if self._front is not None:
            await self._front.stop()
            self._front = None
        if self._native is not None:
            await self._native.stop()
            self._native = None
        if self._server is not None:
            await self._server.stop(GRACE_S)
            self._server = None


def native_tls(tls: TlsConfig, pem: tuple[bytes, bytes]) -> ServerTls:
    """pyrmq's transport's TLS, from ``tls`` and the certificate and key it gave (``pem``)."""
    auth = tls.server_need_client_auth
    if auth == "optional" and not tls.server_trust_cert_path:
        # Any certificate offered must verify, and there is nothing to verify it against.
        auth = "none"
    return ServerTls(
        *_unencrypted(tls, pem),
        client_auth=auth,
        trust=_trust(tls) if auth != "none" else None,
        plain_too=tls.server_mode is TlsMode.PERMISSIVE,
    )


def server_credentials(tls: TlsConfig, pem: tuple[bytes, bytes]) -> grpc.ServerCredentials:
    """grpcio's TLS credentials, from ``tls`` and the certificate and key it gave (``pem``)."""
    cert, key = _unencrypted(tls, pem)
    # gRPC's listener requires a client certificate or asks for none: "optional" asks none.
    ask = tls.server_need_client_auth == "require"
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=_trust(tls) if ask else None,
        require_client_auth=ask,
    )


def _unencrypted(tls: TlsConfig, pem: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    if tls.server_cert_path and tls.server_key_password:
        raise ConfigError("the gRPC port needs an unencrypted key (tls.server.keyPassword is set)")
    return pem


def _trust(tls: TlsConfig) -> bytes:
    if not tls.server_trust_cert_path:
        raise ConfigError(
            "the gRPC port requires client certificates only with tls.server.trustCertPath"
        )
    try:
        return Path(tls.server_trust_cert_path).read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read a TLS file for the gRPC port: {e}") from e
