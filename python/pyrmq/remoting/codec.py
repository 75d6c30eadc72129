"""Frame encoding and decoding of the remoting protocol; pure, no I/O.

The work is done in Rust (``pyrmq._core.decode_frames`` / ``encode_command``), one call for all
the whole frames in a buffer. Every integer is big-endian.

Frame (``L + 4`` bytes):

======  ===========  =====================================================================
offset  size         field
======  ===========  =====================================================================
0       4            ``L`` (uint32): bytes after this field, ``4 + H + body``; at least 4.
                     ``L + 4`` must not exceed ``max_frame_bytes`` (16 MiB by default);
                     this is checked on these 4 bytes alone, before the frame is buffered.
4       4            high byte: serialize type (0 JSON, 1 ROCKETMQ); low 24 bits: ``H``,
                     the header length, at most ``L - 4``.
8       H            the header, encoded as the serialize type says
8 + H   L - 4 - H    the body; may be empty
======  ===========  =====================================================================

JSON header (type 0): an object with ``code``, ``language`` (a name), ``version``, ``opaque``,
``flag``, optional ``remark`` and optional ``extFields``. Received ext field values may be
strings, numbers or booleans and become strings; whitespace (the C++ client's ``\\n``) may
follow the object. Sent headers are compact with sorted keys, every ext field a JSON string,
``remark`` left out when None and ``extFields`` when empty, as a Java 4.9.7 broker sends them.

ROCKETMQ binary header (type 1):

======  ====  ==================================================================
offset  size  field
======  ====  ==================================================================
0       2     code (int16)
2       1     language (LanguageCode byte)
3       2     version (int16)
5       4     opaque (int32)
9       4     flag (int32)
13      4     remark length ``R`` (int32); 0 = None
17      R     remark (UTF-8)
17 + R  4     ext fields length ``E`` (int32); 0 = none
21 + R  E     entries: key length (int16), key, value length (int32), value
======  ====  ==================================================================

A malformed frame raises :class:`~pyrmq.errors.FrameDecodeError`. The stream has then lost its
framing, so the decoder refuses further input: close the connection.

>>> from pyrmq.remoting.command import RemotingCommand
>>> frame = encode(RemotingCommand(code=105, opaque=1, ext_fields={"topic": "T"}))
>>> decoder = FrameDecoder()
>>> decoder.feed(frame[:10]), decoder.feed(frame[10:])[0].ext_fields
([], {'topic': 'T'})
"""

from typing import Any, Final

from pyrmq import _core
from pyrmq.errors import FrameDecodeError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import MAX_FRAME_BYTES, SerializeType

__all__ = ["FrameDecoder", "encode"]

_LENGTH_FIELD_BYTES = 4
_PREFIX_BYTES = 8

_SERIALIZE: Final = {t.value: t for t in SerializeType}
"""Serialize types by their byte (0 = JSON, 1 = ROCKETMQ)."""


def encode(cmd: RemotingCommand) -> bytes:
    """The whole frame of ``cmd``, header encoded as ``cmd.serialize_type`` says.

    Raises ValueError when a value does not fit that serialize type (e.g. a code above 32767
    in a binary header), TypeError when an ext field value is not a string.
    """
    return _core.encode_command(
        cmd.code,
        cmd.language,
        cmd.version,
        cmd.opaque,
        cmd.flag,
        cmd.remark,
        cmd.ext_fields,
        cmd.body,
        cmd.serialize_type,
    )


class FrameDecoder:
    """Turns a byte stream into commands, buffering partial frames between calls.

    One decoder per connection. After it raised :class:`~pyrmq.errors.FrameDecodeError` it
    raises again on every call: the connection must be closed.
    """

    __slots__ = ("_buf", "_failed", "_max_frame_bytes", "_need")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        # Buffered bytes needed before the Rust decoder can make progress.
        self._need = _LENGTH_FIELD_BYTES
        self._failed: str | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of an incomplete frame held for the next :meth:`feed`."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Adds ``data`` and returns the commands of every frame it completed, in order."""
        if self._failed is not None:
            raise FrameDecodeError(f"decoder unusable after an earlier error: {self._failed}")
        if self._buf:
            self._buf += data
            if len(self._buf) < self._need:
                return []
            source: bytes | bytearray | memoryview = self._buf
        else:
            # Nothing buffered: decode the caller's bytes in place and keep only the tail.
            source = data
        try:
            tuples, consumed = _core.decode_frames(source, self._max_frame_bytes)
        except FrameDecodeError as e:
            self._failed = str(e)
            # As Netty's decoder hands on each frame before it reads the next: the whole
            # frames before the malformed one are still the peer's requests.
            e.decoded = self._commands(_whole_frames_before_error(source, self._max_frame_bytes))
            self._buf.clear()
            raise
        if source is self._buf:
            del self._buf[:consumed]
        else:
            self._buf += memoryview(data)[consumed:]
        self._need = _bytes_needed(self._buf)
        return self._commands(tuples)

    @staticmethod
    def _commands(tuples: list[Any]) -> list[RemotingCommand]:
        # Positional, and the serialize type by index: less than half the cost of keywords
        # and an enum call, paid once per frame.
        return [
            RemotingCommand(
                code, opaque, flag, language, version, remark, ext_fields, body, _SERIALIZE[st]
            )
            for (code, language, version, opaque, flag, remark, ext_fields, body, st) in tuples
        ]


def _whole_frames_before_error(source: Any, max_frame_bytes: int) -> list[Any]:
    """The decoded frames of ``source`` up to its first malformed or incomplete one."""
    view = memoryview(source)
    out: list[Any] = []
    at = 0
    while len(view) - at >= _LENGTH_FIELD_BYTES:
        end = at + _LENGTH_FIELD_BYTES + int.from_bytes(view[at : at + 4], "big")
        if end > len(view):
            break
        try:
            tuples, _ = _core.decode_frames(view[at:end], max_frame_bytes)
        except FrameDecodeError:
            break
        out += tuples
        at = end
    return out


def _bytes_needed(buf: bytearray) -> int:
    """How many buffered bytes the next decode needs: the length field, the header-length word
    (checked as soon as it is there), then the whole frame."""
    if len(buf) < _LENGTH_FIELD_BYTES:
        return _LENGTH_FIELD_BYTES
    if len(buf) < _PREFIX_BYTES:
        return _PREFIX_BYTES
    return _LENGTH_FIELD_BYTES + int.from_bytes(buf[:_LENGTH_FIELD_BYTES], "big")
