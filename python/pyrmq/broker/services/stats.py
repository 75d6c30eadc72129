"""What the broker has stored and served since it started, and how fast: the figures behind
GET_BROKER_RUNTIME_INFO (RocketMQ's StoreStatsService and BrokerStats).

>>> stats = BrokerStats(now_s=100.0)
>>> stats.stored(32, 7_000)
>>> stats.delivered(2, 300)
>>> stats.delivered(3, 450)
>>> stats.pulled(found=8)
>>> stats.pulled(found=0)
>>> stats.sample(now_s=101.0)
>>> stats.put_tps(10), stats.transferred_tps(10)
(35.0, 8.0)
>>> (stats.put_total, stats.put_bytes_total, stats.get_found_total, stats.get_miss_total)
(35, 7450, 1, 1)
"""

import collections
import dataclasses
import datetime
import time

__all__ = ["TPS_WINDOWS_S", "BrokerStats"]

TPS_WINDOWS_S = (10, 60, 600)
"""The windows RocketMQ reports each rate over, in seconds."""

GROUP_TPS_WINDOW_S = 60
"""The window of a group's consume rate (RocketMQ's per-minute group statistics)."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Sample:
    at_s: float
    put: int
    transferred: int
    found: int
    miss: int


class BrokerStats:
    """Running totals, sampled once a second (:meth:`sample`) for rates over up to 600 s.

    Totals count messages: ``put`` those stored by sends (a batch counts each message) and by
    the store's delivery of delayed messages, ``transferred`` those returned by pulls.
    ``found`` and ``miss`` count pulls that did and did not return messages; each group's
    pulled messages give its consume rate. Only the broker's event loop touches this object.
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
        self._delivered = (0, 0)
        # Messages each (topic, group) pulled, and their samples over the last minute.
        self._group_got: dict[tuple[str, str], int] = {}
        self._group_samples: dict[tuple[str, str], collections.deque[tuple[float, int]]] = {}
        start = time.monotonic() if now_s is None else now_s
        self._samples: collections.deque[_Sample] = collections.deque(
            [_Sample(start, 0, 0, 0, 0)], maxlen=max(TPS_WINDOWS_S) + 1
        )

    def stored(self, messages: int, nbytes: int) -> None:
        self.put_total += messages
        self.put_bytes_total += nbytes

    def delivered(self, messages_total: int, bytes_total: int) -> None:
        """The store's running totals of delayed messages delivered to their real topics
        (``MessageStore.delayed_deliveries``): what they grew by since the last call counts
        as stored."""
        messages, nbytes = self._delivered
        self.stored(messages_total - messages, bytes_total - nbytes)
        self._delivered = (messages_total, bytes_total)

    def pulled(self, *, found: int, topic: str = "", group: str = "") -> None:
        """One pull answered with ``found`` messages (0: nothing to return), for ``group``
        from ``topic`` when they are known."""
        if found:
            self.get_found_total += 1
            self.transferred_total += found
            if group:
                key = (topic, group)
                self._group_got[key] = self._group_got.get(key, 0) + found
        else:
            self.get_miss_total += 1

    def sample(self, *, now_s: float | None = None, today: datetime.date | None = None) -> None:
        now = time.monotonic() if now_s is None else now_s
        self._sample_groups(self._samples[-1].at_s, now)
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

    def _sample_groups(self, previous: float, now: float) -> None:
        idle = []
        for key, total in self._group_got.items():
            samples = self._group_samples.get(key)
            if samples is None:
                samples = self._group_samples[key] = collections.deque(
                    # Its first pulls came after the previous sample.
                    [(previous, 0)],
                    maxlen=GROUP_TPS_WINDOW_S + 1,
                )
            samples.append((now, total))
            if len(samples) == samples.maxlen and samples[0][1] == total:
                idle.append(key)
        # A group idle for a whole window has no rate left to report: forget it.
        for key in idle:
            del self._group_got[key], self._group_samples[key]

    def consume_tps(self, topic: str, group: str) -> float:
        """Messages a second ``group`` pulled from ``topic`` over the last minute."""
        samples = self._group_samples.get((topic, group))
        if not samples:
            return 0.0
        (first_s, first), (last_s, last) = samples[0], samples[-1]
        return (last - first) / (last_s - first_s) if last_s > first_s else 0.0

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
