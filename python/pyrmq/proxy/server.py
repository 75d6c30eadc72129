"""The gRPC listener: RocketMQ 5's ``apache.rocketmq.v2.MessagingService`` on the broker's loop.

Methods are registered by path, with this package's message classes doing the (de)serializing,
so the official clients' generated code is never needed here. The RPCs the official clients
never call (PullMessage, the offset RPCs, SyncLiteSubscription) are not registered and get
gRPC's UNIMPLEMENTED, as from RocketMQ's own proxy.
"""

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc

from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.proxy.service import MessagingService

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["SERVICE_NAME", "GrpcServer"]

log = logging.getLogger(__name__)

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
# Room for a batch of 4 MiB messages, as RocketMQ's proxy allows (130 MiB).
MAX_RECEIVE_MESSAGE_BYTES = 130 * 1024 * 1024
GRACE_S = 1.0


def _unary(handler: Callable[..., Any], request: Any) -> "grpc.RpcMethodHandler[Any, Any]":
    return grpc.unary_unary_rpc_method_handler(
        handler,
        request_deserializer=request.FromString,
        response_serializer=lambda m: m.SerializeToString(),
    )


class GrpcServer:
    """Serves the gRPC protocol for one broker on ``host:port`` (0: any free port)."""

    def __init__(self, broker: "BrokerController", host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self._server: grpc.aio.Server | None = None
        self.service: MessagingService | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ]
        )
        bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if bound == 0:
            raise OSError(f"cannot listen for gRPC on {self.host}:{self.port}")
        self.port = bound
        service = self.service = MessagingService(self.broker, bound)
        serialize = pb.ReceiveMessageResponse.SerializeToString
        handlers = {
            "QueryRoute": _unary(service.query_route, pb.QueryRouteRequest),
            "Heartbeat": _unary(service.heartbeat, pb.HeartbeatRequest),
            "SendMessage": _unary(service.send_message, pb.SendMessageRequest),
            "QueryAssignment": _unary(service.query_assignment, pb.QueryAssignmentRequest),
            "ReceiveMessage": grpc.unary_stream_rpc_method_handler(
                service.receive_message,
                request_deserializer=pb.ReceiveMessageRequest.FromString,
                response_serializer=serialize,
            ),
            "AckMessage": _unary(service.ack_message, pb.AckMessageRequest),
            "ForwardMessageToDeadLetterQueue": _unary(
                service.forward_message_to_dead_letter_queue,
                pb.ForwardMessageToDeadLetterQueueRequest,
            ),
            "EndTransaction": _unary(service.end_transaction, pb.EndTransactionRequest),
            "Telemetry": grpc.stream_stream_rpc_method_handler(
                service.telemetry,
                request_deserializer=pb.TelemetryCommand.FromString,
                response_serializer=pb.TelemetryCommand.SerializeToString,
            ),
            "NotifyClientTermination": _unary(
                service.notify_client_termination, pb.NotifyClientTerminationRequest
            ),
            "ChangeInvisibleDuration": _unary(
                service.change_invisible_duration, pb.ChangeInvisibleDurationRequest
            ),
            "RecallMessage": _unary(service.recall_message, pb.RecallMessageRequest),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        await server.start()
        self._server = server
        log.info("gRPC listening on %s", self.address)

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(GRACE_S)
            self._server = None
