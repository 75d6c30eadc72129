"""RemotingCommand: one request or response of the remoting protocol."""

import dataclasses
import itertools
from typing import Final, Self

from pyrmq.remoting.protocol import ONEWAY_FLAG, RESPONSE_FLAG, MQVersion, SerializeType

__all__ = ["RemotingCommand"]

VERSION: Final = int(MQVersion.V4_9_7)
"""The version pyrmq puts in what it sends: answers look like a Java 4.9.7 broker's."""

_OPAQUES = itertools.count()
"""Request ids of this process; kept non-negative, like the C++ client's."""

_OPAQUE_MASK: Final = 0x7FFF_FFFF


@dataclasses.dataclass(slots=True, repr=False)
class RemotingCommand:
    """A request or a response: code, flag, opaque, remark, ext fields and body.

    ``ext_fields`` is the command's custom header, every value a string (see
    :mod:`pyrmq.remoting.headers` for typed views). ``serialize_type`` is how the header was
    received, and how it will be sent.

    >>> req = RemotingCommand.request(105, {"topic": "TopicTest"})
    >>> resp = RemotingCommand.response_to(req, 17, remark="no route")
    >>> (resp.opaque == req.opaque, resp.is_response, req.is_response)
    (True, True, False)
    """

    code: int
    """The request code in a request, the response code in a response."""
    opaque: int = 0
    """The request id; a response copies its request's."""
    flag: int = 0
    """Bit field: ``RESPONSE_FLAG`` (1), ``ONEWAY_FLAG`` (2)."""
    language: str = "JAVA"
    """The sender's LanguageCode name."""
    version: int = VERSION
    """The sender's MQVersion ordinal."""
    remark: str | None = None
    """Free text, usually an error message."""
    ext_fields: dict[str, str] = dataclasses.field(default_factory=dict)
    """The custom header: field name to string value."""
    body: bytes = b""
    """The body; its meaning depends on the code."""
    serialize_type: SerializeType = SerializeType.JSON
    """How the header is encoded on the wire."""

    @property
    def is_response(self) -> bool:
        """Whether ``flag`` marks a response."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """Whether ``flag`` marks a oneway request, which gets no response."""
        return bool(self.flag & ONEWAY_FLAG)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        oneway: bool = False,
    ) -> Self:
        """A new request with a fresh opaque from this process's counter.

        >>> RemotingCommand.request(34, oneway=True).is_oneway
        True
        """
        return cls(
            code=code,
            opaque=next(_OPAQUES) & _OPAQUE_MASK,
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
        )

    @classmethod
    def response_to(
        cls,
        request: "RemotingCommand",
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> Self:
        """The response to ``request``: its opaque, the response flag and its serialize type.

        >>> req = RemotingCommand(code=14, opaque=7)
        >>> resp = RemotingCommand.response_to(req, 0, ext_fields={"offset": "3"})
        >>> resp  # doctest: +NORMALIZE_WHITESPACE
        RemotingCommand(code=0, opaque=7, flag=1, remark=None, ext_fields={'offset': '3'},
                        body=<0 bytes>)
        """
        return cls(
            code=code,
            opaque=request.opaque,
            flag=RESPONSE_FLAG,
            remark=remark,
            ext_fields=dict(ext_fields) if ext_fields else {},
            body=body,
            serialize_type=request.serialize_type,
        )

    def __repr__(self) -> str:
        # Bodies can be megabytes: show their size only.
        return (
            f"RemotingCommand(code={self.code}, opaque={self.opaque}, flag={self.flag}, "
            f"remark={self.remark!r}, ext_fields={self.ext_fields!r}, "
            f"body=<{len(self.body)} bytes>)"
        )
