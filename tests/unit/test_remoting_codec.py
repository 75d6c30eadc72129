"""The remoting frame codec against the captured C++ client frames and malformed input."""

import doctest
import importlib
import json
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyrmq import _core
from pyrmq.errors import FrameDecodeError
from pyrmq.remoting.codec import FrameDecoder, encode
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import (
    MAX_FRAME_BYTES,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    SerializeType,
)

VECTORS = Path(__file__).parents[1] / "vectors" / "remoting"
"""Frames captured from the official C++ client (copied from the shared spec's vectors)."""


def _load(name: str) -> dict[str, Any]:
    if not VECTORS.is_dir():
        pytest.fail(f"captured vectors missing: {VECTORS} must hold the remoting .bin/.json files")
    meta: dict[str, Any] = json.loads((VECTORS / f"{name}.json").read_text())
    return meta


def _vector_names() -> list[str]:
    if not VECTORS.is_dir():
        # Parametrizing over nothing would skip; a placeholder makes the tests fail instead.
        return ["<vectors missing>"]
    return sorted(p.name.removesuffix(".json") for p in VECTORS.glob("*.json"))


def _frames(*, json_only: bool = False, good_answers: bool = False) -> list[tuple[str, str]]:
    """(vector, side) pairs that have a frame, optionally only JSON ones or known-good answers."""
    if not VECTORS.is_dir():
        return [("<vectors missing>", "request")]
    out = []
    for name in _vector_names():
        meta = _load(name)
        for side in ("request", "response"):
            rec = meta.get(side)
            if rec is None:
                continue
            if json_only and rec["serialize_type"] != SerializeType.JSON:
                continue
            if good_answers and (
                side != "response"
                or "NEGATIVE" in name
                or meta["direction"] == "broker->client"  # the C++ client's answer
            ):
                continue
            out.append((name, side))
    return out


def _side(name: str, side: str) -> tuple[dict[str, Any], bytes]:
    rec: dict[str, Any] = _load(name)[side]
    return rec, (VECTORS / rec["file"]).read_bytes()


def _java_string(value: object) -> str:
    """What a Java server's map of strings holds for a JSON value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_against_record(cmd: RemotingCommand, rec: dict[str, Any]) -> None:
    want = rec["header"]
    language = want["language"]
    if isinstance(language, int):  # a binary header records the LanguageCode byte
        language = LanguageCode(language).name
    assert cmd.code == want["code"]
    assert cmd.language == language
    assert cmd.version == want["version"]
    assert cmd.opaque == want["opaque"]
    assert cmd.flag == want["flag"]
    assert cmd.remark == want.get("remark")
    assert cmd.ext_fields == {k: _java_string(v) for k, v in (want.get("extFields") or {}).items()}
    assert all(type(v) is str for v in cmd.ext_fields.values())
    assert len(cmd.body) == rec["body_length"]
    assert cmd.serialize_type == rec["serialize_type"]


def _header_json(frame: bytes) -> dict[str, Any]:
    assert frame[4] == SerializeType.JSON
    header_len = int.from_bytes(frame[4:8], "big")
    parsed: dict[str, Any] = json.loads(frame[8 : 8 + header_len])
    return parsed


# --- the captured vectors -------------------------------------------------------------------


def test_every_vector_file_is_present() -> None:
    assert VECTORS.is_dir(), f"captured vectors missing: {VECTORS}"
    assert len(list(VECTORS.glob("*.req.bin"))) == 40
    # 034 is a oneway request from the broker: it has no answer.
    assert len(list(VECTORS.glob("*.resp.bin"))) == 39


@pytest.mark.parametrize(("name", "side"), _frames())
def test_vector_decodes_to_its_recorded_header(name: str, side: str) -> None:
    rec, frame = _side(name, side)
    assert len(frame) == rec["frame_length"]

    (cmd,) = FrameDecoder().feed(frame)

    _check_against_record(cmd, rec)


@pytest.mark.parametrize(("name", "side"), _frames())
def test_vector_decodes_the_same_fed_one_byte_at_a_time(name: str, side: str) -> None:
    rec, frame = _side(name, side)
    decoder = FrameDecoder()

    got = [cmd for i in range(len(frame)) for cmd in decoder.feed(frame[i : i + 1])]

    assert len(got) == 1
    _check_against_record(got[0], rec)
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize(("name", "side"), _frames())
def test_vector_decodes_the_same_fed_in_random_chunks(name: str, side: str) -> None:
    rec, frame = _side(name, side)
    rng = random.Random(f"{name}/{side}")
    for _ in range(5):
        decoder = FrameDecoder()
        got: list[RemotingCommand] = []
        at = 0
        while at < len(frame):
            step = rng.randint(1, 64)
            got += decoder.feed(bytearray(frame[at : at + step]))
            at += step
        assert len(got) == 1
        _check_against_record(got[0], rec)


def test_all_vectors_back_to_back_in_random_chunks_decode_in_order() -> None:
    frames = [_side(name, side) for name, side in _frames()]
    stream = b"".join(frame for _, frame in frames)
    rng = random.Random(7)
    decoder = FrameDecoder()
    got: list[RemotingCommand] = []
    at = 0
    while at < len(stream):
        step = rng.randint(1, 3000)
        got += decoder.feed(memoryview(stream)[at : at + step])
        at += step

    assert len(got) == len(frames) == 79
    for cmd, (rec, _) in zip(got, frames, strict=True):
        _check_against_record(cmd, rec)


@pytest.mark.parametrize(("name", "side"), _frames(json_only=True))
def test_json_vector_reencodes_to_the_same_command(name: str, side: str) -> None:
    _, frame = _side(name, side)
    (cmd,) = FrameDecoder().feed(frame)

    encoded = encode(cmd)
    (again,) = FrameDecoder().feed(encoded)

    assert again == cmd
    header = _header_json(encoded)
    assert list(header) == sorted(header)
    assert all(type(header[k]) is int for k in ("code", "opaque", "flag", "version"))
    assert all(type(v) is str for v in header.get("extFields", {}).values())
    assert header["serializeTypeCurrentRPC"] == "JSON"


@pytest.mark.parametrize(("name", "side"), _frames(json_only=True, good_answers=True))
def test_encoded_answer_matches_the_accepted_answer(name: str, side: str) -> None:
    rec, frame = _side(name, side)
    (cmd,) = FrameDecoder().feed(frame)

    encoded = encode(cmd)

    assert _header_json(encoded) == json.loads(rec["header_text"])
    ext = rec["header"].get("extFields") or {}
    if list(ext) == sorted(ext):
        # The stub answered in Java's own shape: byte for byte the same frame.
        assert encoded == frame


@pytest.mark.parametrize(
    "name", ["001-route-topic", "002-route-topic-not-exist", "017-query-consumer-offset"]
)
def test_java_shaped_answers_are_reproduced_byte_for_byte(name: str) -> None:
    _, frame = _side(name, "response")
    (cmd,) = FrameDecoder().feed(frame)
    rebuilt = RemotingCommand.response_to(
        RemotingCommand(code=0, opaque=cmd.opaque),
        cmd.code,
        remark=cmd.remark,
        ext_fields=cmd.ext_fields,
        body=cmd.body,
    )

    assert encode(rebuilt) == frame


def test_negative_039_answer_becomes_all_strings_when_reencoded() -> None:
    _, frame = _side("039-NEGATIVE-send-numeric-extfields", "response")
    assert _header_json(frame)["extFields"]["queueOffset"] == 1

    (cmd,) = FrameDecoder().feed(frame)
    header = _header_json(encode(cmd))

    assert cmd.ext_fields["queueId"] == "0"
    assert header["extFields"]["queueOffset"] == "1"


def test_negative_040_binary_answer_decodes_and_reencodes() -> None:
    _, frame = _side("040-NEGATIVE-route-binary-header", "response")

    (cmd,) = FrameDecoder().feed(frame)

    assert cmd.serialize_type is SerializeType.ROCKETMQ
    assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (0, "JAVA", 407, 0, 1)
    assert cmd.remark is None
    assert cmd.ext_fields == {}
    assert cmd.body.startswith(b'{"brokerDatas":[{"brokerAddrs":{0:')
    assert encode(cmd) == frame


# --- commands and encoding ------------------------------------------------------------------


def test_request_gets_fresh_opaques_and_oneway_flag() -> None:
    a = RemotingCommand.request(34)
    b = RemotingCommand.request(15, {"commitOffset": "3"}, oneway=True)

    assert b.opaque != a.opaque
    assert 0 <= a.opaque < 2**31
    assert (a.flag, b.flag) == (0, ONEWAY_FLAG)
    assert b.is_oneway
    assert not a.is_oneway
    assert (a.language, a.version, a.serialize_type) == ("JAVA", 407, SerializeType.JSON)


def test_response_copies_opaque_and_serialize_type() -> None:
    req = RemotingCommand(code=105, opaque=42, serialize_type=SerializeType.ROCKETMQ)

    resp = RemotingCommand.response_to(req, 17, remark="no route", ext_fields={"k": "v"})

    assert (resp.opaque, resp.flag, resp.remark, resp.ext_fields) == (42, 1, "no route", {"k": "v"})
    assert resp.is_response
    assert not resp.is_oneway
    (back,) = FrameDecoder().feed(encode(resp))
    assert back == resp
    assert back.serialize_type is SerializeType.ROCKETMQ


def test_encoded_answer_has_java_shape() -> None:
    req = RemotingCommand(code=10, opaque=5, language="CPP", version=63)
    resp = RemotingCommand.response_to(
        req, 0, ext_fields={"queueOffset": "1", "msgId": "7F", "MSG_REGION": "DefaultRegion"}
    )

    frame = encode(resp)

    text = frame[8:].decode()
    assert text == (
        '{"code":0,"extFields":{"MSG_REGION":"DefaultRegion","msgId":"7F","queueOffset":"1"},'
        '"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":407}'
    )
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == len(text)


def test_remark_is_kept_and_empty_ext_fields_left_out() -> None:
    frame = encode(RemotingCommand(code=22, opaque=1, flag=RESPONSE_FLAG, remark="Not found"))

    header = _header_json(frame)

    assert header["remark"] == "Not found"
    assert "extFields" not in header


def test_encode_refuses_values_the_serialize_type_cannot_hold() -> None:
    with pytest.raises(ValueError, match="code 200050"):
        encode(RemotingCommand(code=200050, serialize_type=SerializeType.ROCKETMQ))
    with pytest.raises(ValueError, match="COBOL"):
        encode(RemotingCommand(code=1, language="COBOL", serialize_type=SerializeType.ROCKETMQ))
    with pytest.raises(TypeError):
        encode(RemotingCommand(code=1, ext_fields={"queueId": 0}))  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="serialize type 7"):
        _core.encode_command(1, "JAVA", 407, 1, 0, None, {}, b"", 7)


def test_decode_frames_reports_what_it_consumed() -> None:
    one = encode(RemotingCommand(code=1, opaque=1, body=b"abc"))
    two = encode(RemotingCommand(code=2, opaque=2))

    commands, consumed = _core.decode_frames(one + two + two[:5])

    assert consumed == len(one) + len(two)
    assert [(c[0], c[3], c[7]) for c in commands] == [(1, 1, b"abc"), (2, 2, b"")]


def _waiting_thread_got_in(call: Callable[[], object], *, repeat: int, for_s: float = 0) -> bool:
    """Whether a thread waiting for the interpreter lock got it while ``call`` ran ``repeat``
    times, or for ``for_s`` seconds. With the switch interval far off, only ``call`` releasing
    the lock lets it in (and then only if the thread gets there before ``call`` takes it back)."""
    ready, go = threading.Event(), threading.Event()
    got_in: list[bool] = []

    def waiter() -> None:
        ready.set()
        go.wait()  # returns only once this thread holds the interpreter lock again
        got_in.append(True)

    thread = threading.Thread(target=waiter)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        thread.start()
        ready.wait()
        go.set()
        deadline = time.monotonic() + for_s
        done = 0
        while not got_in and (done < repeat or time.monotonic() < deadline):
            call()
            done += 1
        return bool(got_in)
    finally:
        sys.setswitchinterval(interval)
        thread.join()


def test_decoding_small_buffers_keeps_the_interpreter_lock() -> None:
    # Releasing it for a few microseconds of work would hand the event loop's thread over to
    # any consume thread waiting for the lock, stalling the loop until that one blocks.
    frames = encode(RemotingCommand(code=11, opaque=1, body=b"m" * 4096)) * 32

    assert not _waiting_thread_got_in(lambda: _core.decode_frames(frames), repeat=2000)


def test_decoding_a_large_buffer_lets_other_threads_run() -> None:
    frames = encode(RemotingCommand(code=11, opaque=1, body=b"m" * (2 << 20)))

    assert _waiting_thread_got_in(lambda: _core.decode_frames(frames), repeat=0, for_s=10)


# --- malformed input ------------------------------------------------------------------------


def _frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    word = (serialize_type << 24) | len(header)
    length = 4 + len(header) + len(body)
    return length.to_bytes(4, "big") + word.to_bytes(4, "big") + header + body


def _decode_error(data: bytes, **kwargs: int) -> str:
    with pytest.raises(FrameDecodeError) as info:
        FrameDecoder(**kwargs).feed(data)
    return str(info.value)


def test_garbage_is_rejected() -> None:
    assert "exceeds the maximum frame size" in _decode_error(b"GET / HTTP/1.1\r\n\r\n")
    assert "below 4" in _decode_error(b"\x00\x00\x00\x01abcd")
    assert "unknown serialize type 7" in _decode_error(b"\x00\x00\x00\x04\x07\x00\x00\x00")


def test_oversized_length_is_rejected_from_the_length_field_alone() -> None:
    message = _decode_error((MAX_FRAME_BYTES - 3).to_bytes(4, "big"))
    assert f"exceeds the maximum frame size of {MAX_FRAME_BYTES} bytes" in message

    assert "maximum frame size of 1024" in _decode_error(
        (1021).to_bytes(4, "big"), max_frame_bytes=1024
    )
    decoder = FrameDecoder(max_frame_bytes=1024)
    assert decoder.feed((1020).to_bytes(4, "big")) == []
    assert decoder.buffered_bytes == 4


def test_a_frame_of_exactly_the_maximum_size_is_accepted() -> None:
    header = b'{"code":1,"opaque":1}'
    frame = _frame(header, b"x" * (1024 - 8 - len(header)))
    assert len(frame) == 1024

    (cmd,) = FrameDecoder(max_frame_bytes=1024).feed(frame)

    assert len(cmd.body) == 1024 - 8 - len(header)
    assert "exceeds" in _decode_error(frame, max_frame_bytes=1023)


def test_truncated_frames_wait_for_more_bytes() -> None:
    frame = encode(RemotingCommand(code=105, opaque=3, ext_fields={"topic": "T"}, body=b"xyz"))
    decoder = FrameDecoder()

    assert decoder.feed(frame[:-1]) == []
    assert decoder.buffered_bytes == len(frame) - 1
    (cmd,) = decoder.feed(frame[-1:])
    assert cmd.body == b"xyz"


def test_header_cut_short_by_its_length_is_invalid_json() -> None:
    header = b'{"code":105,"opaque":3,"extFields":{"topic":"T"}}'
    assert "invalid JSON header" in _decode_error(_frame(header[:20]))


def test_header_length_larger_than_the_frame_is_rejected() -> None:
    bad = (10).to_bytes(4, "big") + (7).to_bytes(4, "big") + b"{}    "
    assert "header length 7 exceeds the 6 bytes" in _decode_error(bad)
    # Refused as soon as the header-length word is there, before the rest arrives.
    assert "header length" in _decode_error(bad[:8])


def test_invalid_json_headers_are_rejected() -> None:
    assert "invalid JSON header" in _decode_error(_frame(b"{not json}"))
    assert "invalid JSON header" in _decode_error(_frame(b"[1, 2]"))
    assert "missing field `code`" in _decode_error(_frame(b'{"opaque":1}'))
    assert "missing field `opaque`" in _decode_error(_frame(b'{"code":1}'))
    assert "invalid JSON header" in _decode_error(_frame(b'{"code":1,"opaque":1}\x00'))
    assert "invalid JSON header" in _decode_error(_frame(b'{"code":"x","opaque":1}'))
    assert "invalid JSON header" in _decode_error(_frame(b'{"code":1,"opaque":1,"remark":3}'))
    message = _decode_error(_frame(b'{"code":1,"opaque":1,"extFields":{"topic":[1]}}'))
    assert 'extFields member "topic"' in message


def test_invalid_binary_headers_are_rejected() -> None:
    header = (1).to_bytes(2, "big") + bytes([99]) + bytes(2 + 4 + 4 + 4 + 4)
    assert "unknown LanguageCode byte 99" in _decode_error(_frame(header, serialize_type=1))
    assert "invalid ROCKETMQ binary header" in _decode_error(_frame(b"\x00\x01", serialize_type=1))


def test_numbers_and_booleans_in_ext_fields_become_strings() -> None:
    header = (
        b'{"code":10,"opaque":1,"extFields":{"queueId":0,"sysFlag":-7,"batch":true,'
        b'"unitMode":false,"topic":"T","big":1795328702840,"gone":null},"remark":null}\n'
    )

    (cmd,) = FrameDecoder().feed(_frame(header))

    assert cmd.ext_fields == {
        "queueId": "0",
        "sysFlag": "-7",
        "batch": "true",
        "unitMode": "false",
        "topic": "T",
        "big": "1795328702840",
    }
    assert cmd.remark is None
    assert cmd.language == "JAVA"


def test_decoder_is_unusable_after_an_error() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameDecodeError):
        decoder.feed(b"\xff\xff\xff\xff")
    good = encode(RemotingCommand(code=1, opaque=1))

    with pytest.raises(FrameDecodeError, match="unusable after an earlier error"):
        decoder.feed(good)


def test_a_good_frame_before_a_bad_one_does_not_hide_the_error() -> None:
    good = encode(RemotingCommand(code=1, opaque=1))
    with pytest.raises(FrameDecodeError):
        FrameDecoder().feed(good + _frame(b"{}"))


def test_decode_frames_refuses_non_buffers() -> None:
    with pytest.raises(TypeError, match="bytes or a byte buffer"):
        _core.decode_frames("text")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "module",
    [
        "pyrmq.remoting",
        "pyrmq.remoting.protocol",
        "pyrmq.remoting.command",
        "pyrmq.remoting.codec",
        "pyrmq.remoting.headers",
    ],
)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
