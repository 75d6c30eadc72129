"""The pyrmq exception hierarchy.

Every exception pyrmq raises derives from :class:`PyrmqError`. The Rust extension imports these
classes by name, so this module is the single definition and never imports ``pyrmq._core``.

Expected outcomes of store calls (offset too small, no matched message, flush timeout) are status
values, not exceptions. :class:`StoreError` means a broken invariant or an I/O failure, and
:class:`MessageIllegalError` means the input was refused before anything was written.
:class:`RemotingError` covers the wire: a malformed frame or a custom header that lacks a field.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "BrokerError",
    "ClientError",
    "ClientStateError",
    "ConfigError",
    "CorruptRecordError",
    "DiskFullError",
    "FrameDecodeError",
    "HeaderError",
    "InvalidQueueIdError",
    "InvalidTopicError",
    "MessageBodyError",
    "MessageIllegalError",
    "MessageTooLargeError",
    "NoRouteError",
    "PartialFailureError",
    "PropertiesTooLargeError",
    "PyrmqError",
    "RemotingError",
    "ReplicationError",
    "RequestTimeoutError",
    "SendError",
    "StoreClosedError",
    "StoreError",
    "StoreIOError",
    "StoreReadOnlyError",
    "SystemTopicError",
]


class PyrmqError(Exception):
    """Base class of every exception raised by pyrmq."""


class ConfigError(PyrmqError, ValueError):
    """A configuration value is missing, malformed or inconsistent with another one.

    Attributes:
        problems: One line per problem found; a config loader reports all of them at once.
    """

    def __init__(self, *args: object, problems: Iterable[str] = ()) -> None:
        super().__init__(*args)
        self.problems: tuple[str, ...] = tuple(problems)


class StoreError(PyrmqError):
    """The store hit a broken invariant or an I/O failure."""


class StoreClosedError(StoreError):
    """The store was used after it was closed."""


class CorruptRecordError(StoreError):
    """A commit-log record failed its magic, size or CRC check.

    Attributes:
        phy_offset: CommitLog byte position of the bad record, when known.
        path: Segment file that holds the bad record, when known.
    """

    def __init__(
        self, *args: object, phy_offset: int | None = None, path: str | None = None
    ) -> None:
        super().__init__(*args)
        self.phy_offset = phy_offset
        self.path = path


class DiskFullError(StoreError):
    """Disk usage is above the warning level: writes are refused, reads are still served."""


class StoreIOError(StoreError):
    """A read, write, mmap or fsync on a store file failed."""


class StoreReadOnlyError(StoreError):
    """A put reached a slave's store, which only replication from its master writes."""


class ReplicationError(StoreError):
    """Bytes from a master do not continue this slave's CommitLog (a gap, a torn or
    garbled group), or a master cannot send from the offset a slave asked for; nothing was
    written."""


class MessageIllegalError(PyrmqError, ValueError):
    """A message was refused because of its content; nothing was written."""


class InvalidTopicError(MessageIllegalError):
    """The topic name is empty, too long or uses characters RocketMQ does not allow."""


class MessageTooLargeError(MessageIllegalError):
    """The encoded message is larger than the configured maximum message size."""


class PropertiesTooLargeError(MessageIllegalError):
    """The encoded properties do not fit the 2-byte length field of a record."""


class InvalidQueueIdError(MessageIllegalError):
    """The queue id is negative, not below the per-topic queue limit, or beyond 32 bits."""


class SystemTopicError(MessageIllegalError):
    """A user write targeted a topic only the broker writes (RocketMQ's not-allowed-send set)."""


class MessageBodyError(PyrmqError, ValueError):
    """A received message's body cannot be read as its sys flag says: it does not inflate,
    names a compression RocketMQ does not have, or inflates past the reader's limit."""


class RemotingError(PyrmqError):
    """A remoting (TCP wire protocol) failure."""


class FrameDecodeError(RemotingError):
    """A received frame is malformed; the stream has lost its framing and must be closed.

    ``decoded``: the commands of the whole frames received before the malformed one."""

    decoded: "Sequence[Any]" = ()


class HeaderError(RemotingError):
    """A command's custom header (its ext fields) lacks a required field or has a bad value."""


class ClientError(PyrmqError):
    """A failure in the client (:mod:`pyrmq.client`): no route, a broker's refusal, bad state."""


class ClientStateError(ClientError):
    """The producer or consumer is not started, or already shut down."""


class NoRouteError(ClientError):
    """No name server knows a route for the topic (or none could be reached)."""


class BrokerError(ClientError):
    """A broker answered a request with an error code.

    Attributes:
        code: The response code (a :class:`pyrmq.remoting.protocol.ResponseCode` value).
        remark: The broker's remark, usually the reason.
        broker_addr: ``ip:port`` of the broker that answered.
    """

    def __init__(self, code: int, remark: str | None, broker_addr: str) -> None:
        super().__init__(code, remark, broker_addr)
        self.code = code
        self.remark = remark
        self.broker_addr = broker_addr

    def __str__(self) -> str:
        return f"broker {self.broker_addr} answered code {self.code}: {self.remark or ''}".rstrip()


class PartialFailureError(ClientError):
    """A request sent to several brokers or name servers failed on some of them (or on all):
    each was tried, whatever the others answered.

    Attributes:
        succeeded: The targets (``ip:port``) that did what was asked, in the order asked.
        failed: Each target that did not, in the order asked, with its failure.
        result: What the call returns, from the targets that succeeded alone (for a change,
            usually their addresses; for a read, their answers).
    """

    def __init__(
        self,
        succeeded: Iterable[str],
        failed: Mapping[str, BaseException],
        result: object = None,
    ) -> None:
        self.succeeded: tuple[str, ...] = tuple(succeeded)
        self.failed: dict[str, BaseException] = dict(failed)
        self.result = result
        super().__init__(self.succeeded, self.failed, result)

    def __str__(self) -> str:
        reasons = "; ".join(f"{target}: {e}" for target, e in self.failed.items())
        return f"failed on {reasons}; succeeded on {', '.join(self.succeeded) or 'none'}"


class SendError(ClientError):
    """A send failed on every broker tried; ``__cause__`` is the last failure."""


class RequestTimeoutError(ClientError, TimeoutError):
    """A request (``Producer.request``) got no reply within its timeout, which bounds the
    route lookup and the send as well as the wait (RocketMQ's RequestTimeoutException); the
    message says whether the request was sent. ``__cause__`` is the send's failure when the
    time ran out while sending."""
