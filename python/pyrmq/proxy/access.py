"""The broker's ACL check of gRPC requests (``aclEnable``): what each RPC of RocketMQ 5's
protocol needs, as RocketMQ 5.1's plain ACL reads it, checked against ``plain_acl.yml``.

A call names its account and signs in its ``authorization`` header::

    MQv2-HMAC-SHA1 Credential=<access key>, SignedHeaders=x-mq-date-time, Signature=<hex>

the signature being the HMAC-SHA1 of the ``x-mq-date-time`` header under the account's secret
key. A refused request is answered with UNAUTHORIZED (no account, an unknown one, a wrong
signature) or FORBIDDEN (a permission missing) in the response's status, and is not served;
a refused telemetry command is answered with that status on the stream.

Resources are named as the service names them: by ``Resource.name``, with the client's namespace
folded in (``namespace%name``, :mod:`pyrmq.proxy.namespaces`), as 4.x clients name them.
"""

import dataclasses
import hmac
import ipaddress
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any

from pyrmq.acl.plain import (
    AccessRequest,
    AclError,
    AclFile,
    ForbiddenError,
    NotAuthenticatedError,
    Permission,
)
from pyrmq.acl.refusals import RefusalLog, shown
from pyrmq.acl.signing import grpc_signature
from pyrmq.proxy.proto import messaging_pb2 as pb

__all__ = [
    "Caller",
    "GrpcAccess",
    "grpc_request",
    "parse_authorization",
    "peer_endpoint",
    "peer_host",
]

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
CONSUMER_TYPES = frozenset({pb.PUSH_CONSUMER, pb.SIMPLE_CONSUMER})


class BadRequestError(AclError):
    """A request the ACL cannot tell the resources of, refused with ``code``."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def parse_authorization(value: str) -> tuple[str | None, str | None]:
    """The access key and the signature an ``authorization`` header names (None for what it
    lacks). The scheme is not looked at, as RocketMQ's proxy does not look at it."""
    text = value.strip()
    scheme, _, rest = text.partition(" ")
    if "=" in scheme:
        # No scheme: the fields only.
        rest = text
    access_key = signature = None
    for item in rest.split(","):
        name, eq, field = item.strip().partition("=")
        if not eq:
            continue
        if name == "Credential":
            # ``<access key>/<anything>`` in some clients.
            access_key = field.split("/", 1)[0].strip()
        elif name == "Signature":
            signature = field.strip()
    return access_key, signature


def peer_endpoint(peer: str) -> tuple[str, str] | None:
    """(IP address, port) of a gRPC peer string (``ipv4:127.0.0.1:5000``, ``ipv6:[::1]:5000``,
    or ``ipv6:%5B::1%5D:5000`` as gRPC escapes the brackets), an IPv4-mapped IPv6 address as
    IPv4; None for a peer with no IP address."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host, _, port = urllib.parse.unquote(rest).rpartition(":")
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped), port
    return str(address), port


def peer_host(peer: str) -> str:
    """The client's IP address in a gRPC peer string; "" for a peer with no IP address."""
    endpoint = peer_endpoint(peer)
    return "" if endpoint is None else endpoint[0]


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a call, as its peer address and headers say."""

    host: str
    access_key: str | None
    signature: str | None
    date_time: str | None

    @classmethod
    def of(cls, context: Any, peer: str) -> "Caller":
        """The caller of ``context``, whose gRPC peer string is ``peer``."""
        authorization = date_time = None
        for key, value in context.invocation_metadata() or ():
            if key == AUTHORIZATION:
                authorization = _text(value)
            elif key == DATE_TIME:
                date_time = _text(value)
        access_key, signature = (
            parse_authorization(authorization) if authorization is not None else (None, None)
        )
        return cls(peer_host(peer), access_key, signature, date_time)

    def signed(self, secret_key: str) -> bool:
        """Whether the call's signature is its date-time's under ``secret_key``."""
        if not self.signature or not self.date_time:
            return False
        expected = grpc_signature(self.date_time, secret_key).encode()
        return hmac.compare_digest(expected, self.signature.lower().encode("utf-8", "replace"))


def _send(access: AccessRequest, request: pb.SendMessageRequest) -> None:
    if not request.messages:
        raise BadRequestError(pb.MESSAGE_CORRUPTED, "the request holds no message")
    topic = request.messages[0].topic.name
    if any(m.topic.name != topic for m in request.messages):
        raise BadRequestError(pb.MESSAGE_CORRUPTED, "the messages name different topics")
    access.need_topic(topic, Permission.PUB)


def _heartbeat(access: AccessRequest, request: pb.HeartbeatRequest) -> None:
    if request.client_type in CONSUMER_TYPES:
        if not request.HasField("group"):
            raise ForbiddenError("a consumer's heartbeat names no group")
        access.need_group(request.group.name, Permission.SUB)


def _group_and_topic(access: AccessRequest, request: Any) -> None:
    access.need_group(request.group.name, Permission.SUB)
    access.need_topic(request.topic.name, Permission.SUB)


def _receive(access: AccessRequest, request: pb.ReceiveMessageRequest) -> None:
    access.need_group(request.group.name, Permission.SUB)
    access.need_topic(request.message_queue.topic.name, Permission.SUB)


def _end_transaction(access: AccessRequest, request: pb.EndTransactionRequest) -> None:
    access.need_topic(request.topic.name, Permission.PUB)


def _recall(access: AccessRequest, request: pb.RecallMessageRequest) -> None:
    access.need_topic(request.topic.name, Permission.PUB)


def _termination(access: AccessRequest, request: pb.NotifyClientTerminationRequest) -> None:
    access.need_group(request.group.name, Permission.SUB)


def _route(access: AccessRequest, request: pb.QueryRouteRequest) -> None:
    access.need_topic(request.topic.name, Permission.ANY)


def _telemetry(access: AccessRequest, command: pb.TelemetryCommand) -> None:
    if not command.HasField("settings"):
        # Other commands: the account's signature only.
        return
    settings = command.settings
    kind = settings.WhichOneof("pub_sub")
    if kind == "publishing":
        for topic in settings.publishing.topics:
            access.need_topic(topic.name, Permission.PUB)
    elif kind == "subscription":
        access.need_group(settings.subscription.group.name, Permission.SUB)
        for entry in settings.subscription.subscriptions:
            access.need_topic(entry.topic.name, Permission.SUB)
    else:
        raise ForbiddenError("the settings name neither publishing nor subscription")


# What each request needs beyond a valid signature; a request not listed needs nothing more.
NEEDS: dict[type, Callable[[AccessRequest, Any], None]] = {
    pb.HeartbeatRequest: _heartbeat,
    pb.SendMessageRequest: _send,
    pb.ReceiveMessageRequest: _receive,
    pb.AckMessageRequest: _group_and_topic,
    pb.ForwardMessageToDeadLetterQueueRequest: _group_and_topic,
    pb.ChangeInvisibleDurationRequest: _group_and_topic,
    pb.QueryAssignmentRequest: _group_and_topic,
    pb.EndTransactionRequest: _end_transaction,
    pb.RecallMessageRequest: _recall,
    pb.NotifyClientTerminationRequest: _termination,
    pb.QueryRouteRequest: _route,
    pb.TelemetryCommand: _telemetry,
}


def grpc_request(caller: Caller, request: Any) -> AccessRequest:
    """What ``request``, made by ``caller``, asks of the ACL (BadRequestError, or an AclError,
    for a request whose resources cannot be told)."""
    access = AccessRequest(host=caller.host, access_key=caller.access_key, signed=caller.signed)
    needs = NEEDS.get(type(request))
    if needs is not None:
        needs(access, request)
    return access


class GrpcAccess:
    """The check the gRPC service runs on every request, and every telemetry command, before
    serving it."""

    def __init__(self) -> None:
        self._refusals = RefusalLog(log)

    def check(self, acl: AclFile, caller: Caller, request: Any) -> pb.Status | None:
        """None if ``request``, made by ``caller``, may be served, else the status to refuse
        it with."""
        try:
            acl.current().check(grpc_request(caller, request))
        except BadRequestError as e:
            code, message = e.code, str(e)
        except NotAuthenticatedError as e:
            code, message = pb.UNAUTHORIZED, str(e)
        except AclError as e:
            code, message = pb.FORBIDDEN, str(e)
        except Exception as e:
            # A request the check cannot read is refused, not served unchecked.
            code, message = pb.BAD_REQUEST, f"the request cannot be checked: {e}"
        else:
            return None
        self._refusals.refused(caller.host, f"gRPC {type(request).__name__}", message)
        return pb.Status(code=code, message=shown(message))  # type: ignore[arg-type]
