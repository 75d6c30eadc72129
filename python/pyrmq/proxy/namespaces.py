"""Namespaces over gRPC: a 5.x client configured with one sends it as ``x-mq-namespace`` and
beside every name (``Resource.resource_namespace``); the broker works with the folded names
(``namespace%name``, :mod:`pyrmq.namespace`), as RocketMQ's proxy does and as 4.x clients send
them. Requests are folded before the service sees them and answers unfolded before the client
does, so the service itself never deals with namespaces. Calls without the header pass as they
are.
"""

from typing import Any

from google.protobuf.message import Message

from pyrmq import namespace
from pyrmq.proxy.proto import messaging_pb2 as pb

__all__ = ["HEADER", "call_namespace", "fold", "unfold"]

HEADER = "x-mq-namespace"
_RESOURCE = pb.Resource.DESCRIPTOR


def call_namespace(context: Any) -> str:
    """The namespace a call's client is configured with ("" for none)."""
    for key, value in context.invocation_metadata() or ():
        if key == HEADER:
            return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return ""


def fold(message: Message) -> None:
    """Folds each resource's namespace into its name, in place."""
    _walk(message, _fold_one)


def unfold(message: Message) -> None:
    """Splits each resource's namespace out of its name, in place."""
    _walk(message, _unfold_one)


def _fold_one(resource: Any) -> None:
    if resource.resource_namespace:
        resource.name = namespace.wrap(resource.resource_namespace, resource.name)


def _unfold_one(resource: Any) -> None:
    ns, name = namespace.split(resource.name)
    if ns:
        resource.resource_namespace, resource.name = ns, name


def _walk(message: Message, visit: Any) -> None:
    for field, value in message.ListFields():
        kind = field.message_type
        if kind is None or kind.GetOptions().map_entry:
            continue
        items = value if field.is_repeated else (value,)
        for item in items:
            if kind is _RESOURCE:
                visit(item)
            else:
                _walk(item, visit)
