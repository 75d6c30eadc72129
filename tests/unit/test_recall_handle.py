"""Recall handles read and written as RocketMQ's RecallMessageHandle reads and writes them."""

import base64

import pytest

from pyrmq.recall_handle import RecallHandle, RecallHandleError


def test_a_handle_is_url_safe_base64_of_its_five_fields() -> None:
    handle = RecallHandle("Topic?", "broker-a", 1_767_225_600_000, ">>>?")
    text = handle.encode()
    assert "+" not in text
    assert "/" not in text
    assert base64.urlsafe_b64decode(text) == b"v1 Topic? broker-a 1767225600000 >>>?"
    assert RecallHandle.decode(text) == handle
    # Java's decoder takes a handle without its padding, and so does this one.
    assert RecallHandle.decode(text.rstrip("=")) == handle


def test_fields_past_the_fifth_are_ignored_and_a_bad_timestamp_reads_as_minus_one() -> None:
    raw = base64.urlsafe_b64encode(b"v1 T b 5_000 ID extra").decode()
    assert RecallHandle.decode(raw) == RecallHandle("T", "b", -1, "ID")
    big = base64.urlsafe_b64encode(f"v1 T b {2**63} ID".encode()).decode()
    assert RecallHandle.decode(big).timestamp_ms == -1


@pytest.mark.parametrize(
    "text",
    [
        "",
        base64.urlsafe_b64encode(b"v1 a b c").decode(),
        base64.urlsafe_b64encode(b"v2 a b c d").decode(),
        "v1 a b c d",
        base64.b64encode(b"v1 a b c \xff\xfe").decode(),
        "é",
        # Java's split drops a trailing empty field: no message id.
        base64.urlsafe_b64encode(b"v1 T b 5 ").decode(),
        # The standard alphabet is not Java's URL one.
        base64.b64encode(b"v1 T b 5 ?>?>").decode(),
    ],
)
def test_what_is_not_a_handle_is_refused(text: str) -> None:
    with pytest.raises(RecallHandleError, match="recall handle is invalid"):
        RecallHandle.decode(text)
