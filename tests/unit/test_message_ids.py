"""Producer message ids (``UNIQ_KEY``): RocketMQ's layout, one process-wide 16-bit counter."""

import os
import struct
import time

import pytest

from pyrmq import _core
from pyrmq.client.message import Message, new_message_id, new_message_ids
from pyrmq.client.producer import Producer
from pyrmq.properties import UNIQ_KEY


def counter(msg_id: str) -> int:
    return int(msg_id[-4:], 16)


def test_ids_are_the_head_in_upper_hex_then_consecutive_counter_values() -> None:
    head = bytes(range(0xF0, 0xFE))
    ids = _core.message_ids(head, 5)
    assert [bytes.fromhex(i)[:14] for i in ids] == [head] * 5
    assert all(i == i.upper() and len(i) == 32 for i in ids)
    first = counter(ids[0])
    assert [counter(i) for i in ids] == [(first + n) & 0xFFFF for n in range(5)]
    # The next call goes on from there.
    assert counter(_core.message_ids(head, 1)[0]) == (first + 5) & 0xFFFF
    assert _core.message_ids(head, 0) == []


def test_the_counter_wraps_at_16_bits() -> None:
    ids = _core.message_ids(b"\x00" * 14, 0x10002)
    first = counter(ids[0])
    assert [counter(i) for i in ids] == [(first + n) & 0xFFFF for n in range(0x10002)]
    assert ids[0] == ids[0x10000]


def test_producer_ids_carry_this_process_and_the_time_in_the_month() -> None:
    before_ms = time.time_ns() // 1_000_000
    a, b = new_message_ids(2)
    c = new_message_id()
    assert a[:20] == b[:20] == c[:20]  # IP, PID and the instance's random part
    assert [counter(b), counter(c)] == [(counter(a) + 1) & 0xFFFF, (counter(a) + 2) & 0xFFFF]
    # Bytes 10..14: ms since the start of the month, read once per call.
    (since_month,) = struct.unpack(">I", bytes.fromhex(a)[10:14])
    t = time.localtime(before_ms / 1000)
    month_ms = int(time.mktime((t.tm_year, t.tm_mon, 1, 0, 0, 0, 0, 0, -1)) * 1000)
    assert 0 <= since_month - (before_ms - month_ms) < 5_000


def test_a_batch_keeps_the_ids_it_has_and_gives_the_others_fresh_ones() -> None:
    msgs = [Message("TopicIds", b"a"), Message("TopicIds", b"b"), Message("TopicIds", b"c")]
    msgs[1].properties[UNIQ_KEY] = "MINE"
    out = Producer("PG_IDS")._encode_batch(msgs)
    ids = out.msg_id.split(",")
    assert ids == [m.properties[UNIQ_KEY] for m in msgs]
    assert ids[1] == "MINE"
    assert counter(ids[2]) == (counter(ids[0]) + 1) & 0xFFFF


def test_a_forked_child_makes_ids_of_its_own() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one id to the parent, then out without cleanup
        os.write(write, new_message_id().encode())
        os._exit(0)
    os.close(write)
    try:
        child = os.read(read, 64).decode()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    mine = new_message_id()
    assert len(child) == 32
    assert bytes.fromhex(child)[4:6] == struct.pack(">H", pid & 0xFFFF)
    assert child[8:20] != mine[8:20]  # its PID and random instance part


def test_a_count_no_batch_can_hold_is_a_value_error() -> None:
    for count in (2**40, 2**63):
        with pytest.raises(ValueError, match="count must be at most"):
            _core.message_ids(b"\x01\x02", count)
