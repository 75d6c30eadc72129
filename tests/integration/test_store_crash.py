"""Real crashes: a writer process is killed with SIGKILL at a random moment, then the store is
reopened and every acknowledged message must be there, byte for byte."""

import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from pyrmq.config import StoreConfig
from pyrmq.store import GetMessageStatus, MessageStore

pytestmark = [pytest.mark.integration, pytest.mark.crash]

WRITER = Path(__file__).with_name("crash_writer.py")
_spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
assert _spec is not None
assert _spec.loader is not None
writer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(writer)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def run_and_kill(
    root: Path, flush_disk_type: str, seed: int, wait_until, *, mode: str = "serial"
) -> list[dict]:
    """Starts the writer, kills it at a moment chosen by ``seed``; returns its acknowledgements."""
    rng = random.Random(seed)
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(root), flush_disk_type, str(seed), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    lines: list[bytes] = []

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        wait_until(lambda: lines or proc.poll() is not None, 30, "the writer to start")
        assert lines, proc.stderr.read() if proc.stderr else ""
        assert lines[0] == b"ready\n"
        if rng.random() < 0.5:
            acks = rng.choice([0, 1, 2, rng.randint(3, 60), rng.randint(60, 400)])
            wait_until(lambda: len(lines) > acks or proc.poll() is not None, 60, f"{acks} acks")
        else:
            time.sleep(rng.uniform(0, 0.3))  # the kill moment itself is what is random
        assert proc.poll() is None, f"writer exited early: {proc.stderr.read()!r}"
        proc.send_signal(signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        reader.join(30)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == -signal.SIGKILL
    acked = []
    for line in lines[1:]:
        if line.endswith(b"\n") and line != b"done\n":
            acked.append(json.loads(line))
    return acked


def check_recovered(root: Path, acked: list[dict], record_decoder, *, in_flight: int = 1) -> None:
    """Reopens the store: every acknowledged message is there, intact, and besides them at most
    the ``in_flight`` puts that followed the last acknowledged one, each whole."""
    config = StoreConfig(**writer.CONFIG)
    with MessageStore.open(root, config, background_services=False) as store:
        # Every acknowledged message, by queue offset and by CommitLog offset.
        per_queue: dict[tuple[str, int], list[int]] = defaultdict(list)
        for ack in acked:
            count = len(ack["n"])
            assert len(ack["qo"]) == len(ack["phy"]) == count
            assert ack["qo"] == list(range(ack["qo"][0], ack["qo"][0] + count))
            for k in range(count):
                want = writer.body_for(ack["i"] + k, ack["i"], count, ack["n"][k])
                got = store.get(ack["t"], ack["q"], ack["qo"][k], max_count=1)
                assert got.status is GetMessageStatus.FOUND, (ack, k, got)
                assert got.queue_offsets == [ack["qo"][k]]
                assert got.phy_offsets == [ack["phy"][k]]
                rec = record_decoder(got.buffer)
                assert rec["body"] == want
                assert (rec["topic"], rec["queue_id"]) == (ack["t"], ack["q"])
                looked = store.look_message_by_offset(ack["phy"][k])
                assert looked is not None
                assert looked.body == want
                per_queue[(ack["t"], ack["q"])].append(ack["qo"][k])

        # Acknowledged queue offsets are 0..n-1 in every queue.
        for key, offsets in per_queue.items():
            assert offsets == list(range(len(offsets))), key

        # Everything the store holds is intact, contiguous, and whole puts only.
        present: dict[int, int] = {}
        groups: dict[int, int] = {}
        for topic, queue_id in store.queue_ids():
            assert topic in writer.TOPICS
            assert 0 <= queue_id < writer.QUEUES
            assert store.min_offset(topic, queue_id) == 0
            offset, end = 0, store.max_offset(topic, queue_id)
            assert end >= len(per_queue.get((topic, queue_id), []))
            while offset < end:
                got = store.get(topic, queue_id, offset)
                assert got.status is GetMessageStatus.FOUND, (topic, queue_id, offset, got)
                assert got.corrupt_offsets == []
                assert got.queue_offsets == list(range(offset, offset + got.message_count))
                for view in got.views():
                    rec = record_decoder(view)
                    index, first, count = writer.parse_header(rec["body"])
                    size = len(rec["body"]) - 9
                    assert rec["body"] == writer.body_for(index, first, count, size)
                    assert index not in present, f"message {index} stored twice"
                    present[index] = rec["phy_offset"]
                    groups[first] = count
                offset = got.next_begin_offset
            # A queue whose first put was cut short by the kill exists but holds nothing.
            caught_up = store.get(topic, queue_id, end).status
            if end == 0:
                assert caught_up is GetMessageStatus.NO_MESSAGE_IN_QUEUE
            else:
                assert caught_up is GetMessageStatus.OFFSET_OVERFLOW_ONE

        acked_indexes = {a["i"] + k for a in acked for k in range(len(a["n"]))}
        assert acked_indexes <= present.keys()
        for first, count in groups.items():
            assert set(range(first, first + count)) <= present.keys(), f"put {first} is partial"
        # One writer acknowledging in order: only puts after the last acknowledged one, at most
        # as many as it keeps in flight, can be present without an acknowledgement (they
        # completed, or were in flight, when the kill came).
        next_first = max(acked_indexes) + 1 if acked_indexes else 0
        extra = present.keys() - acked_indexes
        first, unacknowledged = next_first, 0
        while first in extra:
            first += groups[first]
            unacknowledged += 1
        assert extra == set(range(next_first, first))
        assert unacknowledged <= in_flight

        # The store takes writes again, at its recovered end.
        end = store.max_phy_offset
        if acked:
            last = acked[-1]
            assert end >= last["phy"][-1] + 9 + last["n"][-1]
        r = store.put("CrashA", b"after", queue_id=0)
        segment = writer.CONFIG["mapped_file_size_commit_log"]
        next_segment = (end // segment + 1) * segment
        # A put that does not fit before the segment's end, with room for the 8-byte blank
        # record that closes it, starts the next segment instead.
        fits = end + r.wrote_bytes + 8 <= next_segment
        assert r.phy_offset == (end if fits else next_segment)


def seeds(quick: range, slow: range) -> list:
    """``quick`` seeds, then ``slow`` ones marked slow (they still run by default)."""
    return [*quick, *(pytest.param(s, marks=pytest.mark.slow) for s in slow)]


@pytest.mark.parametrize("seed", seeds(range(20), range(20, 50)))
def test_sync_flush_survives_kill_9(tmp_path, record_decoder, wait_until, seed):
    root = tmp_path / "store"
    acked = run_and_kill(root, "SYNC_FLUSH", seed, wait_until)
    check_recovered(root, acked, record_decoder)


@pytest.mark.parametrize("seed", seeds(range(10), range(10, 25)))
def test_sync_flush_pipelined_from_an_event_loop_survives_kill_9(
    tmp_path, record_decoder, wait_until, seed
):
    """Puts that do not wait for their flush (several in flight, as the broker appends under
    SYNC_FLUSH) are acknowledged only once the flushed offset covers them."""
    root = tmp_path / "store"
    acked = run_and_kill(root, "SYNC_FLUSH", 2000 + seed, wait_until, mode="pipelined")
    for ack in acked:
        assert ack["durable"] is True, ack
        assert ack["flushed"] >= ack["end"], ack
    check_recovered(root, acked, record_decoder, in_flight=writer.PIPELINE)


@pytest.mark.parametrize("seed", seeds(range(10), range(10, 25)))
def test_async_flush_survives_kill_9(tmp_path, record_decoder, wait_until, seed):
    root = tmp_path / "store"
    acked = run_and_kill(root, "ASYNC_FLUSH", 1000 + seed, wait_until)
    check_recovered(root, acked, record_decoder)
