"""Random and mutated frames into FrameDecoder: it returns commands or raises FrameDecodeError,
nothing else; and encode/decode round-trips any command."""

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from pyrmq.errors import FrameDecodeError
from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import LanguageCode, SerializeType

VECTORS = Path(__file__).parents[1] / "vectors" / "remoting"
SEEDS = sorted(p.read_bytes() for p in VECTORS.glob("*.bin"))
assert SEEDS, f"captured vectors missing: {VECTORS}"

# Small enough that random length fields hit the limit as well as whole frames.
MAX_FRAME_BYTES = 4096

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(max_size=20)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    binary = draw(st.booleans())
    remark = draw(st.none() | text)
    if binary and remark == "":
        remark = None  # an empty remark has the binary length of none
    return RemotingCommand(
        code=draw(int16 if binary else int32),
        opaque=draw(int32),
        flag=draw(int32),
        language=draw(st.sampled_from([c.name for c in LanguageCode])),
        version=draw(int16 if binary else int32),
        remark=remark,
        ext_fields=draw(st.dictionaries(text, text, max_size=5)),
        body=draw(st.binary(max_size=64)),
        serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON,
    )


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(SEEDS) | commands().map(encode)))
    for _ in range(draw(st.integers(1, 4))):
        if not frame:
            break
        at = draw(st.integers(0, len(frame) - 1))
        match draw(st.sampled_from(["flip", "truncate", "insert", "delete"])):
            case "flip":
                frame[at] ^= draw(st.integers(1, 255))
            case "truncate":
                del frame[at:]
            case "insert":
                frame[at:at] = draw(st.binary(min_size=1, max_size=8))
            case _:
                del frame[at : at + draw(st.integers(1, 16))]
    return bytes(frame)


def feed_all(data: bytes, cuts: list[int]) -> list[RemotingCommand] | FrameDecodeError:
    decoder = FrameDecoder(MAX_FRAME_BYTES)
    out: list[RemotingCommand] = []
    at = 0
    try:
        for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
            out += decoder.feed(data[at:cut])
            at = max(at, cut)
    except FrameDecodeError as e:
        return e
    return out


@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=6))
@example(b"\x00\x00\x00\x04\x00\x00\x00\x00", [])
@example(b"\x00\x00\x00\x0c\x01\x00\x00\x08" + bytes(8), [3])
def test_random_bytes_decode_or_raise_frame_decode_error(data: bytes, cuts: list[int]) -> None:
    result = feed_all(data, cuts)
    if isinstance(result, FrameDecodeError):
        assert str(result)


@given(mutated(), st.lists(st.integers(0, 4096), max_size=4))
def test_mutated_frames_decode_or_raise_frame_decode_error(data: bytes, cuts: list[int]) -> None:
    result = feed_all(data, cuts)
    if isinstance(result, FrameDecodeError):
        assert str(result)
    else:
        assert all(type(v) is str for cmd in result for v in cmd.ext_fields.values())


@given(commands())
def test_encode_then_decode_round_trips(cmd: RemotingCommand) -> None:
    (back,) = FrameDecoder().feed(encode(cmd))

    assert back == cmd


@given(st.lists(commands(), min_size=1, max_size=5), st.lists(st.integers(0, 2000), max_size=8))
def test_chunking_does_not_change_what_is_decoded(
    cmds: list[RemotingCommand], cuts: list[int]
) -> None:
    stream = b"".join(encode(c) for c in cmds)

    assert feed_all(stream, cuts) == cmds
