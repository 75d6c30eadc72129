"""The send and pull headers read their fields in straight-line code first: for any ext fields,
that gives what the checked field-by-field parse gives, or the same HeaderError."""

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from pyrmq.errors import HeaderError
from pyrmq.remoting import headers as h

INT32 = st.integers(-(2**31), 2**31 - 1).map(str)
INT64 = st.integers(-(2**63), 2**63 - 1).map(str)
# What Java's parseInt refuses but int() takes, out-of-range values, and plain junk.
EDGES = [str(2**31), str(-(2**31) - 1), str(2**63), str(-(2**63) - 1)]
BAD_NUMBERS = st.sampled_from(["1_000", " 5", "5 ", "٣", "", "-", "+", "x", "1e3", *EDGES])
FLAGS = st.sampled_from(["true", "TRUE", "false", "1", "0", "yes", ""])
TEXTS = st.text(max_size=8)


def _fields(draw: st.DrawFn, spec: dict[str, st.SearchStrategy[str]]) -> dict[str, str]:
    """Mostly well-formed fields; now and then one missing, or a number that is not one."""
    out = {}
    for key, good in spec.items():
        roll = draw(st.integers(0, 19))
        if roll == 0:
            continue
        out[key] = draw(BAD_NUMBERS if roll <= 2 and good not in (TEXTS, FLAGS) else good)
    return out


SEND_SPEC = {
    "producerGroup": TEXTS,
    "topic": TEXTS,
    "defaultTopic": TEXTS,
    "defaultTopicQueueNums": INT32,
    "queueId": INT32,
    "sysFlag": INT32,
    "bornTimestamp": INT64,
    "flag": INT32,
    "properties": TEXTS,
    "reconsumeTimes": INT32,
    "unitMode": FLAGS,
    "maxReconsumeTimes": INT32,
    "batch": FLAGS,
    "brokerName": TEXTS,
}
PULL_SPEC = {
    "consumerGroup": TEXTS,
    "topic": TEXTS,
    "queueId": INT32,
    "queueOffset": INT64,
    "maxMsgNums": INT32,
    "sysFlag": INT32,
    "commitOffset": INT64,
    "suspendTimeoutMillis": INT64,
    "subVersion": INT64,
    "subscription": TEXTS,
    "expressionType": TEXTS,
    "maxMsgBytes": INT32,
}
SEND_OK = {
    "producerGroup": "PG",
    "topic": "T",
    "defaultTopic": "TBW102",
    "defaultTopicQueueNums": "4",
    "queueId": "1",
    "sysFlag": "0",
    "bornTimestamp": "1700000000000",
    "flag": "0",
}
PULL_OK = {
    "consumerGroup": "G",
    "topic": "T",
    "queueId": "0",
    "queueOffset": "9",
    "maxMsgNums": "32",
    "sysFlag": "3",
    "commitOffset": "0",
    "suspendTimeoutMillis": "15000",
    "subVersion": "1",
}


@st.composite
def send_fields(draw: st.DrawFn) -> dict[str, str]:
    return _fields(draw, SEND_SPEC)


@st.composite
def pull_fields(draw: st.DrawFn) -> dict[str, str]:
    return _fields(draw, PULL_SPEC)


def _same(fast: Callable[[], Any], checked: Callable[[], Any]) -> None:
    try:
        expected = checked()
    except HeaderError as e:
        refused = str(e)
    else:
        assert fast() == expected
        return
    with pytest.raises(HeaderError) as got:
        fast()
    assert str(got.value) == refused


def _agrees(cls: Any, ext: dict[str, str]) -> None:
    """``cls.from_ext`` against the checked parse of the same long-named fields."""
    _same(lambda: cls.from_ext(ext), lambda: cls._parse(h._Fields(cls.__name__, ext)))


@given(send_fields())
@example(SEND_OK)
@example({**SEND_OK, "batch": "1", "maxReconsumeTimes": "16", "reconsumeTimes": "+2"})
@example({**SEND_OK, "queueId": "2147483648"})
def test_send_header_v1(ext: dict[str, str]) -> None:
    _agrees(h.SendMessageRequestHeader, ext)


@given(send_fields())
@example(SEND_OK)
@example({**SEND_OK, "bornTimestamp": str(2**63)})
def test_send_header_v2(ext: dict[str, str]) -> None:
    letters = {h._SEND_V2_LETTERS[k]: v for k, v in ext.items()}
    name = h.SendMessageRequestHeader.__name__
    _same(
        lambda: h.SendMessageRequestHeader.from_ext_v2(letters),
        lambda: h.SendMessageRequestHeader._parse(
            h._Fields(name, letters, h._SEND_V2_LETTERS), broker_name=True
        ),
    )


@given(pull_fields())
@example(PULL_OK)
@example({**PULL_OK, "maxMsgBytes": "1_0"})
@example({**PULL_OK, "queueOffset": "-9223372036854775809"})
def test_pull_header(ext: dict[str, str]) -> None:
    _agrees(h.PullMessageRequestHeader, ext)


def test_the_valid_examples_parse() -> None:
    """The examples above are accepted, so the properties compare values, not only errors."""
    assert h.SendMessageRequestHeader.from_ext(SEND_OK).born_timestamp == 1_700_000_000_000
    assert h.PullMessageRequestHeader.from_ext(PULL_OK).max_msg_nums == 32
