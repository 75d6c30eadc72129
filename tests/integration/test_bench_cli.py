"""``pyrmq bench producer|consumer|latency`` against a real ``pyrmq serve``: each runs for a second
or two, prints report lines with RocketMQ's field names, and ends with a RESULT line that parses."""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from tests.compat.servers import serving

pytestmark = pytest.mark.integration

RUN_TIMEOUT_S = 90
NUM = r"(?:\d+(?:\.\d+)?|n/a)"
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"

PRODUCER_LINE = re.compile(
    rf"^Current Time: {TIME} \| Send TPS: \d+ \| Max RT\(ms\): {NUM} \| "
    rf"Average RT\(ms\): {NUM} \| Send Failed: \d+ \| Response Failed: \d+ \| "
    rf"p50 RT\(ms\): {NUM} \| p99 RT\(ms\): {NUM} \| p99\.9 RT\(ms\): {NUM} \| MB/s: {NUM}$"
)
PRODUCER_DONE = re.compile(r"^\[Complete\] Send Total: \d+ \| Send TPS: \d+ \| Max RT\(ms\): ")
CONSUMER_LINE = re.compile(
    rf"^Current Time: {TIME} \| Consume TPS: \d+ \| AVG\(B2C\) RT\(ms\): {NUM} \| "
    rf"AVG\(S2C\) RT\(ms\): {NUM} \| MAX\(B2C\) RT\(ms\): {NUM} \| MAX\(S2C\) RT\(ms\): {NUM} \| "
    rf"p50\(B2C\) RT\(ms\): {NUM} \| p99\(B2C\) RT\(ms\): {NUM} \| "
    rf"p99\.9\(B2C\) RT\(ms\): {NUM} \| MB/s: {NUM}$"
)
CONSUMER_DONE = re.compile(r"^\[Complete\] Consume Total: \d+ \| Consume TPS: \d+ \| AVG\(B2C\)")
LATENCY_LINE = re.compile(
    rf"^Current Time: {TIME} \| Send TPS: \d+ \| Consume TPS: \d+ \| Average RT\(ms\): {NUM} \| "
    rf"Send Failed: \d+ \| Response Failed: \d+ \| AVG\(E2E\) RT\(ms\): {NUM} \| "
    rf"p50\(E2E\) RT\(ms\): {NUM} \| p99\(E2E\) RT\(ms\): {NUM} \| "
    rf"p99\.9\(E2E\) RT\(ms\): {NUM} \| MAX\(E2E\) RT\(ms\): {NUM}$"
)


@pytest.fixture(scope="module")
def namesrv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serving(tmp_path_factory.mktemp("bench-cli"), "--flush", "async") as server:
        yield server.addresses()[0]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return subprocess.run(
        [sys.executable, "-m", "pyrmq.cli.main", "bench", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env=env,
    )


def result_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == 1, done.stdout
    assert done.stdout.splitlines()[-1] == results[0]
    parsed: dict[str, Any] = json.loads(results[0].removeprefix("RESULT "))
    return parsed


def lines_matching(done: subprocess.CompletedProcess[str], pattern: re.Pattern[str]) -> list[str]:
    return [line for line in done.stdout.splitlines() if pattern.match(line)]


def assert_ordered(summary: dict[str, float | None]) -> None:
    values = [summary[k] for k in ("p50", "p99", "p999", "max")]
    assert all(v is not None and v >= 0 for v in values), summary
    assert values == sorted(values), summary  # type: ignore[type-var]


def topic() -> str:
    return f"BenchCli{uuid.uuid4().hex[:8]}"


def test_producer_prints_rocketmq_fields_and_a_result(namesrv: str) -> None:
    done = bench(
        "producer", "-n", namesrv, "-t", topic(), "-d", "1.5", "-w", "8", "--flush-interval", "0.4"
    )
    result = result_of(done)
    assert lines_matching(done, PRODUCER_LINE), done.stdout
    assert len(lines_matching(done, PRODUCER_DONE)) == 1, done.stdout
    assert done.stdout.startswith("topic: ")
    assert result["bench"] == "producer"
    assert result["msgs"] > 0
    assert result["msgs"] == result["requests"]
    assert result["send_failed"] == result["response_failed"] == 0
    assert result["send_tps"] > 0
    assert result["mb_per_s"] == pytest.approx(result["send_tps"] * 128 / 1e6)
    assert 1.0 < result["duration_s"] < 3.0
    assert result["cpu_s"] > 0
    assert_ordered(result["rt_ms"])


def test_producer_batches_stop_at_the_count(namesrv: str) -> None:
    result = result_of(bench("producer", "-n", namesrv, "-t", topic(), "-b", "8", "-q", "404"))
    assert (result["msgs"], result["requests"], result["batch"]) == (404, 51, 8)


def test_producer_oneway_stops_at_the_count(namesrv: str) -> None:
    result = result_of(bench("producer", "-n", namesrv, "-t", topic(), "--oneway", "-q", "300"))
    assert result["msgs"] == 300
    assert result["oneway"] is True


def test_producer_transactions_are_committed_and_consumed(namesrv: str) -> None:
    t = topic()
    result = result_of(bench("producer", "-n", namesrv, "-t", t, "--transaction", "-q", "120"))
    assert (result["msgs"], result["transaction"]) == (120, True)
    assert result["send_failed"] == result["response_failed"] == 0
    # 121: the warm-up send is a plain one.
    done = bench("consumer", "-n", namesrv, "-t", t, "--from", "first", "-q", "121", "-d", "30")
    assert result_of(done)["msgs"] == 121
    refused = bench("producer", "-n", namesrv, "--transaction", "-b", "4", "-q", "10")
    assert refused.returncode != 0
    assert "--transaction sends single messages" in refused.stderr


def test_producer_in_two_processes_splits_the_count(namesrv: str) -> None:
    done = bench("producer", "-n", namesrv, "-t", topic(), "-p", "2", "-w", "4", "-q", "201")
    result = result_of(done)
    assert (result["msgs"], result["processes"]) == (201, 2)


@pytest.mark.parametrize("listener", ["thread", "loop", "iter"])
def test_consumer_drains_what_the_producer_sent(namesrv: str, listener: str) -> None:
    t = topic()
    result_of(bench("producer", "-n", namesrv, "-t", t, "-b", "16", "-q", "480"))
    done = bench(
        "consumer", "-n", namesrv, "-t", t, "--from", "first", "-q", "480", "-d", "30",
        "--listener", listener, "--consume-batch", "8", "--flush-interval", "0.3",
    )  # fmt: skip
    result = result_of(done)
    assert len(lines_matching(done, CONSUMER_DONE)) == 1, done.stdout
    # The producer's warm-up send stores one message more than it counts.
    assert result["msgs"] in (480, 481)
    assert result["listener"] == listener
    assert result["consume_tps"] > 0
    assert_ordered(result["b2c_ms"])
    assert_ordered(result["s2c_ms"])


def test_consumer_prints_lines_while_it_runs(namesrv: str) -> None:
    t = topic()
    result_of(bench("producer", "-n", namesrv, "-t", t, "-q", "50"))
    done = bench(
        "consumer", "-n", namesrv, "-t", t, "--from", "first", "-d", "2",
        "--flush-interval", "0.3",
    )  # fmt: skip
    result = result_of(done)
    assert lines_matching(done, CONSUMER_LINE), done.stdout
    assert result["msgs"] == 51


def test_consumer_stops_at_the_count_with_more_to_read(namesrv: str) -> None:
    t = topic()
    result_of(bench("producer", "-n", namesrv, "-t", t, "-b", "32", "-q", "640"))
    done = bench("consumer", "-n", namesrv, "-t", t, "--from", "first", "-q", "100", "-d", "30",
                 "--consume-batch", "8")  # fmt: skip
    assert result_of(done)["msgs"] == 100


def test_latency_measures_end_to_end(namesrv: str) -> None:
    """Run twice on one topic: the second run's new group starts at the queues' head (their
    messages are in memory), and must not count the first run's stamped messages."""
    t = topic()
    for _ in range(2):
        done = bench(
            "latency", "-n", namesrv, "-t", t, "--rate", "400", "-d", "1", "--warmup", "0.3",
            "--flush-interval", "0.4",
        )  # fmt: skip
        result = result_of(done)
        assert "Traceback" not in done.stderr, done.stderr
        assert lines_matching(done, LATENCY_LINE), done.stdout
        assert result["bench"] == "latency"
        assert result["send_failed"] == result["response_failed"] == 0
        # 1.3 s at 400 msgs/s, on a fixed schedule.
        assert 400 <= result["sent"] <= 600
        assert result["stamped"] == result["sent"]
        assert 0 < result["samples"] < result["sent"]
        assert_ordered(result["e2e_ms"])
        assert result["e2e_ms"]["max"] < 5_000


def test_oneway_batches_are_refused(namesrv: str) -> None:
    done = bench("producer", "-n", namesrv, "--oneway", "-b", "4", "-q", "10")
    assert done.returncode == 2
    assert "--oneway" in done.stderr


def test_docstring_examples() -> None:
    from pyrmq.cli.commands import bench as module

    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0


def test_an_unreachable_name_server_is_an_error_not_a_traceback() -> None:
    done = bench("producer", "-n", "127.0.0.1:1", "-q", "1", "-d", "5")
    assert done.returncode == 1
    assert "RESULT" not in done.stdout
    assert "Error: " in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("e2e", [False, True])
def test_consume_stats_of_single_messages_equal_those_of_a_batch(
    open_store: Any, monkeypatch: pytest.MonkeyPatch, e2e: bool
) -> None:
    """RocketMQ's default hands the listener one message per call, and a batch the consumer
    delivers (a list of received messages) is summed up in the extension: each path must
    count exactly what the plain Python one counts."""
    import zlib

    from pyrmq import _core
    from pyrmq.cli.commands import bench as module

    now_ns = 1_700_000_100_000_000_000
    monkeypatch.setattr(module.time, "time_ns", lambda: now_ns)
    store = open_store()
    born = now_ns // 1_000_000
    sent = [
        # Not stamped, stamped, a warm-up stamp, stamped with the B2C past 10 ms.
        (b"plain body", born - 3),
        (module._STAMP.pack(module.STAMP_MAGIC, now_ns - 2_500_000, 0) + b"x", born - 7),
        (module._STAMP.pack(module.STAMP_MAGIC, now_ns - 900_000, 1), born - 7),
        (module._STAMP.pack(module.STAMP_MAGIC, now_ns - 41_894_571_000, 0), born - 41_894),
    ]
    for body, born_ms in sent:
        store.put("BenchStats", body, born_timestamp_ms=born_ms)
    # Compressed by its producer: counted by the body the listener gets.
    inflated = b"z" * 5000
    store.put("BenchStats", zlib.compress(inflated), sys_flag=0x1, born_timestamp_ms=born - 3)
    msgs = _core.decode_received(store.get("BenchStats", 0, 0).buffer, "broker-a")
    assert len(msgs) == len(sent) + 1

    batch, plain, singles = (module.ConsumeStats(e2e=e2e) for _ in range(3))
    batch.record(msgs)
    plain.record(tuple(msgs))  # not a list: no extension call
    for m in msgs:
        singles.record([m])
    snaps = [stats.snapshot() for stats in (batch, plain, singles)]
    for snap in snaps:
        snap.pop("first_ns"), snap.pop("last_ns")
    want = snaps[0]
    assert snaps[1] == want
    assert snaps[2] == want
    assert want["counts"] == {
        "msgs": 5,
        "bytes": sum(len(b) for b, _ in sent) + len(inflated),
        "stamped": 3 if e2e else 0,
    }
    assert want["hists"]["b2c"][3000] == 2
    assert want["hists"]["b2c"][7000] == 2
    assert want["hists"]["b2c"][41_890_000] == 1
    assert sum(want["hists"]["s2c"].values()) == 5
    assert want["hists"]["e2e"] == ({2500: 1, 41_890_000: 1} if e2e else {})
    assert singles.total_msgs == 5


def test_received_times_declines_anything_but_received_messages(open_store: Any) -> None:
    """None sends the bench's listener to its Python path: for an empty list, and for a list
    that holds anything besides received messages."""
    from pyrmq import _core

    store = open_store()
    store.put("BenchStats", b"body", born_timestamp_ms=1_000)
    msgs = _core.decode_received(store.get("BenchStats", 0, 0).buffer, "broker-a")
    assert _core.received_times(msgs) == ([(1_000, 1)], [(msgs[0].store_timestamp, 1)], 4)
    assert _core.received_times([]) is None
    assert _core.received_times(["not a message"]) is None
    assert _core.received_times([*msgs, "not a message"]) is None
