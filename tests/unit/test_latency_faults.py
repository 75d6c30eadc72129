"""LatencyFaults: MQFaultStrategy's latency bounds and pauses, failures, and recovery."""

import pytest

from pyrmq.client.fault import LatencyFaults


@pytest.mark.parametrize(
    ("latency_ms", "pause_ms"),
    [
        (0, 0),
        (549, 0),
        (550, 30_000),
        (999, 30_000),
        (1000, 60_000),
        (2000, 120_000),
        (3000, 180_000),
        (15_000, 600_000),
        (90_000, 600_000),
    ],
)
def test_a_slow_answer_pauses_its_broker_as_rocketmq_does(latency_ms: int, pause_ms: int) -> None:
    f = LatencyFaults()
    f.update("b", latency_ms, now_ms=1_000)
    assert f.is_available("b", now_ms=1_000) is (pause_ms == 0)
    assert f.is_available("b", now_ms=1_000 + pause_ms)
    if pause_ms:
        assert not f.is_available("b", now_ms=1_000 + pause_ms - 1)


def test_a_failure_isolates_and_a_quick_answer_clears_it() -> None:
    f = LatencyFaults(failure_isolation_ms=5_000)
    f.update("b", 1, failed=True, now_ms=0)
    f.update("c", 700, now_ms=0)
    assert not f.is_available("b", now_ms=4_999)
    assert f.is_available("b", now_ms=5_000)
    f.update("b", 3, now_ms=10)
    f.update("c", 30, now_ms=10)
    assert f.is_available("b", now_ms=11)
    assert f.is_available("c", now_ms=11)
    assert f.least_bad(["b", "c"], now_ms=11) in {"b", "c"}
