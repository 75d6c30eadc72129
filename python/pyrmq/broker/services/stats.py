"""What the broker has stored and served since it started, and how fast: the figures behind
GET_BROKER_RUNTIME_INFO (RocketMQ's StoreStatsService and BrokerStats).

>>> stats = BrokerStats(now_s=100.0)
>>> stats.stored(32, 7_000)
>>> stats.pulled(found=8)
>>> stats.pulled(found=0)
>>> stats.sample(now_s=101.0)
>>> stats.put_tps(10), stats.transferred_tps(10)
(32.0, 8.0)
>>> (stats.put_total, stats.put_bytes_total, stats.get_found_total, stats.get_miss_total)
(32, 7000, 1, 1)
"""

import collections
import dataclasses
import datetime
import time

__all__ = ["TPS_WINDOWS_S", "BrokerStats"]

TPS_WINDOWS_S = (10, 60, 600)
"""The windows RocketMQ reports each rate over, in seconds."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Sample:
    at_s: float
    put: int
    transferred: int
    found: int
    miss: int


class BrokerStats:
    """Running totals, sampled once a second (:meth:`sample`) for rates over up to 600 s.

    Totals count messages: ``put`` those stored by sends (a batch counts each message),
    ``transferred`` those returned by pulls. ``found`` and ``miss`` count pulls that did
    and did not return messages. Only the broker's event loop touches this object.
    """

    def __init__(self, *, now_s: float | None = None) -> None:
        self.boot_ms = time.time_ns() // 1_000_000
        self.put_total = 0
        self.put_bytes_total = 0
        self.transferred_total = 0
        self.get_found_total = 0
        self.get_miss_total = 0
        # Totals at the last two local midnights, as RocketMQ's BrokerStats keeps them.
        self.put_today_morning = self.put_yesterday_morning = 0
        self.get_today_morning = self.get_yesterday_morning = 0
        self._day = datetime.date.today()
        start = time.monotonic() if now_s is None else now_s
        self._samples: collections.deque[_Sample] = collections.deque(
            [_Sample(start, 0, 0, 0, 0)], maxlen=max(TPS_WINDOWS_S) + 1
        )

    def stored(self, messages: int, nbytes: int) -> None:
        self.put_total += messages
        self.put_bytes_total += nbytes

    def pulled(self, *, found: int) -> None:
        """One pull answered with ``found`` messages (0: nothing to return)."""
        if found:
            self.get_found_total += 1
            self.transferred_total += found
        else:
            self.get_miss_total += 1

    def sample(self, *, now_s: float | None = None, today: datetime.date | None = None) -> None:
        now = time.monotonic() if now_s is None else now_s
        self._samples.append(
            _Sample(
                now,
                self.put_total,
                self.transferred_total,
                self.get_found_total,
                self.get_miss_total,
            )
        )
        today = today or datetime.date.today()
        if today != self._day:
            self._day = today
            self.put_yesterday_morning = self.put_today_morning
            self.put_today_morning = self.put_total
            self.get_yesterday_morning = self.get_today_morning
            self.get_today_morning = self.transferred_total

    def _rate(self, window_s: int, field: str) -> float:
        last = self._samples[-1]
        first = last
        for sample in reversed(self._samples):
            if last.at_s - sample.at_s > window_s:
                break
            first = sample
        elapsed = last.at_s - first.at_s
        if elapsed <= 0:
            return 0.0
        return float(getattr(last, field) - getattr(first, field)) / elapsed

    def put_tps(self, window_s: int) -> float:
        return self._rate(window_s, "put")

    def transferred_tps(self, window_s: int) -> float:
        return self._rate(window_s, "transferred")

    def found_tps(self, window_s: int) -> float:
        return self._rate(window_s, "found")

    def miss_tps(self, window_s: int) -> float:
        return self._rate(window_s, "miss")
