"""Latency fault tolerance: brokers that failed or answered slowly are passed over for a while.

Latency thresholds and the pauses they earn follow RocketMQ's MQFaultStrategy; a send that
failed outright (no connection, no answer) isolates its broker for ``failure_isolation_ms``
(30 s by default) rather than Java's 10 minutes, so a restarted broker gets traffic back within
half a minute. A later success on the broker clears its pause.

>>> f = LatencyFaults()
>>> f.update("b1", latency_ms=20, now_ms=0)
>>> f.update("b2", latency_ms=0, now_ms=0, failed=True)
>>> (f.is_available("b1", now_ms=1), f.is_available("b2", now_ms=1))
(True, False)
>>> f.least_bad(["b2", "b1"], now_ms=1), f.least_bad(["b2"], now_ms=1)
('b1', 'b2')
>>> f.is_available("b2", now_ms=30_000)
True
"""

import dataclasses
import time
from collections.abc import Iterable
from typing import Final

__all__ = ["FAILURE_ISOLATION_MS", "LatencyFaults"]

# Answer latency bounds (ms) and the pause each earns (MQFaultStrategy's latencyMax and
# notAvailableDuration).
_LATENCY_MAX_MS: Final = (50, 100, 550, 1000, 2000, 3000, 15000)
_NOT_AVAILABLE_MS: Final = (0, 0, 30_000, 60_000, 120_000, 180_000, 600_000)
FAILURE_ISOLATION_MS: Final = 30_000
_FIRST_PAUSED_MS: Final = min(
    bound for bound, pause in zip(_LATENCY_MAX_MS, _NOT_AVAILABLE_MS, strict=True) if pause
)
"""The shortest latency that earns a pause: below it, an answer only clears one."""


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclasses.dataclass(slots=True)
class _Item:
    latency_ms: int
    available_from_ms: int


class LatencyFaults:
    """Per broker name: the last latency seen and until when to avoid the broker.

    Args:
        failure_isolation_ms: How long a broker is avoided after a send to it failed outright.
    """

    def __init__(self, *, failure_isolation_ms: int = FAILURE_ISOLATION_MS) -> None:
        if failure_isolation_ms < 0:
            raise ValueError(f"failure_isolation_ms must be >= 0, not {failure_isolation_ms}")
        self.failure_isolation_ms = failure_isolation_ms
        self._items: dict[str, _Item] = {}

    def update(
        self, broker: str, latency_ms: int, *, failed: bool = False, now_ms: int | None = None
    ) -> None:
        """Records a send to ``broker`` that took ``latency_ms`` (``failed``: got no answer)."""
        if not failed and latency_ms < _FIRST_PAUSED_MS:  # every send that went well
            self._items.pop(broker, None)
            return
        if failed:
            pause = self.failure_isolation_ms
        else:
            pause = 0
            for bound, duration in zip(
                reversed(_LATENCY_MAX_MS), reversed(_NOT_AVAILABLE_MS), strict=True
            ):
                if latency_ms >= bound:
                    pause = duration
                    break
        if pause == 0:
            # A quick answer: nothing to remember (and a paused broker is available again).
            self._items.pop(broker, None)
            return
        now = _now_ms() if now_ms is None else now_ms
        self._items[broker] = _Item(latency_ms, now + pause)

    def is_available(self, broker: str, *, now_ms: int | None = None) -> bool:
        item = self._items.get(broker)
        return item is None or (_now_ms() if now_ms is None else now_ms) >= item.available_from_ms

    def least_bad(self, brokers: Iterable[str], *, now_ms: int | None = None) -> str | None:
        """Of ``brokers``, an available one if any, else the one whose pause ends first; for
        when every broker a send may use is avoided."""
        now = _now_ms() if now_ms is None else now_ms
        best: str | None = None
        best_from = 0
        for broker in brokers:
            item = self._items.get(broker)
            available_from = item.available_from_ms if item is not None else now
            if available_from <= now:
                return broker
            if best is None or available_from < best_from:
                best, best_from = broker, available_from
        return best

    def remove(self, broker: str) -> None:
        self._items.pop(broker, None)

    def __len__(self) -> int:
        return len(self._items)
