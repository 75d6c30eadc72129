"""Message bodies compressed as RocketMQ producers compress them, read back by pyrmq, and
pyrmq's own compressed bodies read by the reference LZ4 and Zstandard libraries (those that
Java's lz4-java and zstd-jni implement)."""

import random
import zlib

import lz4.frame
import pytest
import zstandard

from pyrmq import _core
from pyrmq.errors import ConfigError, MessageBodyError

ZLIB, LZ4, ZSTD = 0x1, 0x101, 0x201
"""Sys flags: compressed, with RocketMQ 4.9.4's type in bits 8-10 (zlib leaves them 0)."""

BODY = b"".join(b"order %06d shipped to warehouse %d\n" % (i, i % 7) for i in range(20_000))


def _lz4_variants() -> list[bytes]:
    # Independent blocks as lz4-java writes them, linked ones, and every optional field.
    return [
        lz4.frame.compress(BODY, block_linked=False),
        lz4.frame.compress(BODY, block_linked=True, block_size=lz4.frame.BLOCKSIZE_MAX64KB),
        lz4.frame.compress(BODY, content_checksum=True, block_checksum=True, store_size=True),
    ]


def test_bodies_from_the_reference_libraries_inflate() -> None:
    assert _core.inflate_body(zlib.compress(BODY, 5), ZLIB) == BODY
    assert _core.inflate_body(zlib.compress(BODY, 5), 0x301) == BODY
    for packed in _lz4_variants():
        assert _core.inflate_body(packed, LZ4) == BODY
    for params in ({}, {"write_content_size": False}, {"write_checksum": True, "level": 19}):
        packed = zstandard.ZstdCompressor(**params).compress(BODY)
        assert _core.inflate_body(packed, ZSTD) == BODY
    streamed = zstandard.ZstdCompressor().compressobj()
    packed = streamed.compress(BODY) + streamed.flush()
    assert _core.inflate_body(packed, ZSTD) == BODY


def test_compressed_bodies_are_read_by_the_reference_libraries() -> None:
    packed, flag = _core.compress_body(BODY, "lz4", 5)
    assert (flag, lz4.frame.decompress(packed)) == (LZ4, BODY)
    packed, flag = _core.compress_body(BODY, "ZSTD", 5)
    assert flag == ZSTD
    assert zstandard.ZstdDecompressor().decompressobj().decompress(packed) == BODY
    assert len(packed) < len(BODY) // 4
    packed, flag = _core.compress_body(BODY, "zlib", 5)
    assert (flag, zlib.decompress(packed)) == (ZLIB, BODY)
    with pytest.raises(ConfigError, match="gzip"):
        _core.compress_body(BODY, "gzip", 5)


@pytest.mark.parametrize(
    ("flag", "packed"),
    [
        (ZLIB, zlib.compress(BODY)),
        (LZ4, lz4.frame.compress(BODY, block_linked=False)),
        (ZSTD, zstandard.ZstdCompressor().compress(BODY)),
    ],
    ids=["zlib", "lz4", "zstd"],
)
def test_bad_bodies_raise_message_body_error(flag: int, packed: bytes) -> None:
    with pytest.raises(MessageBodyError, match="inflates past 1000 bytes"):
        _core.inflate_body(packed, flag, 1000)
    rng = random.Random(flag)
    for cut in sorted(rng.sample(range(len(packed)), 40)):
        with pytest.raises(MessageBodyError, match="does not inflate"):
            _core.inflate_body(packed[:cut], flag)
    with pytest.raises(MessageBodyError, match="does not inflate"):
        _core.inflate_body(b"plain text, flagged compressed", flag)
    # Bits 8-10 at 4-7 name no compression RocketMQ has.
    with pytest.raises(MessageBodyError, match="type 5"):
        _core.inflate_body(packed, 0x501)
    assert issubclass(MessageBodyError, ValueError)
