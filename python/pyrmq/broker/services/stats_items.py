"""Per-topic and per-group traffic over the last minute, hour and day, as RocketMQ's
BrokerStatsManager keeps it for VIEW_BROKER_STATS_DATA (``mqadmin statsAll``, the dashboard).

Each item is a running sum of values and of the calls that added them. Snapshots of both are
taken every 10 s (the minute's window keeps 7, a minute back), every 10 minutes (the hour's)
and every hour (the day's keeps 25); a window's figures are the differences between its first
and last snapshots. Before its first snapshot an item has none: its windows start at a zero
taken one period back, as RocketMQ's do.

>>> items = StatsItems()
>>> items.add(TOPIC_PUT_NUMS, "T", 32)
>>> items.add(TOPIC_PUT_NUMS, "T", 8)
>>> items.sample(Period.SECONDS, now_ms=100_000)
>>> minute = items.windows(TOPIC_PUT_NUMS, "T")["statsMinute"]
>>> (minute.sum, minute.tps, minute.avgpt)
(40, 4.0, 20.0)
>>> items.windows(TOPIC_PUT_NUMS, "other") is None
True
"""

import collections
import dataclasses
import enum
from collections.abc import Callable

__all__ = [
    "BROKER_GET_NUMS",
    "BROKER_PUT_NUMS",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "SNDBCK_PUT_NUMS",
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "Period",
    "StatsItems",
    "Window",
    "group_key",
]

# RocketMQ's stats names: topic keys, "topic@group" keys, and the cluster's name.
TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
TOPIC_PUT_SIZE = "TOPIC_PUT_SIZE"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
GROUP_GET_SIZE = "GROUP_GET_SIZE"
SNDBCK_PUT_NUMS = "SNDBCK_PUT_NUMS"
BROKER_PUT_NUMS = "BROKER_PUT_NUMS"
BROKER_GET_NUMS = "BROKER_GET_NUMS"


class Period(enum.Enum):
    """How often a window is sampled (ms), and how many snapshots it keeps."""

    SECONDS = (10_000, 7, "statsMinute")
    MINUTES = (600_000, 7, "statsHour")
    HOURS = (3_600_000, 25, "statsDay")

    def __init__(self, every_ms: int, kept: int, field: str) -> None:
        self.every_ms = every_ms
        self.kept = kept
        self.field = field


@dataclasses.dataclass(frozen=True, slots=True)
class Window:
    """RocketMQ's BrokerStatsItem: what a window added up to, per second and per call."""

    sum: int
    tps: float
    avgpt: float

    def to_json(self) -> dict[str, object]:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}


def group_key(topic: str, group: str) -> str:
    return f"{topic}@{group}"


class _Item:
    __slots__ = ("snapshots", "times", "value")

    def __init__(self) -> None:
        self.value = 0
        self.times = 0
        # (at ms, times, value) per period.
        self.snapshots: dict[Period, collections.deque[tuple[int, int, int]]] = {
            p: collections.deque(maxlen=p.kept) for p in Period
        }

    def sample(self, period: Period, now_ms: int) -> None:
        kept = self.snapshots[period]
        if not kept:
            kept.append((now_ms - period.every_ms, 0, 0))
        kept.append((now_ms, self.times, self.value))

    def window(self, period: Period) -> Window:
        kept = self.snapshots[period]
        if not kept:
            return Window(0, 0.0, 0.0)
        (first_ms, first_times, first_value), (last_ms, last_times, last_value) = kept[0], kept[-1]
        total = last_value - first_value
        tps = total * 1000.0 / (last_ms - first_ms) if last_ms > first_ms else 0.0
        times = last_times - first_times
        return Window(total, tps, total / times if times > 0 else 0.0)


class StatsItems:
    """Every item the broker counts, by (stats name, key). Touched from the event loop only."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], _Item] = {}
        # A send's and a pull's three items, found with one lookup: these run per request.
        self._puts: dict[tuple[str, str], tuple[_Item, _Item, _Item]] = {}
        self._gets: dict[tuple[str, str, str], tuple[_Item, _Item, _Item]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def _item(self, name: str, key: str) -> _Item:
        item = self._items.get((name, key))
        if item is None:
            item = self._items[name, key] = _Item()
        return item

    def add(self, name: str, key: str, value: int, times: int = 1) -> None:
        item = self._item(name, key)
        item.value += value
        item.times += times

    def stored(self, topic: str, messages: int, nbytes: int, cluster: str) -> None:
        """One put of ``messages`` (a batch's are one call)."""
        items = self._puts.get((topic, cluster))
        if items is None:
            items = self._puts[topic, cluster] = (
                self._item(TOPIC_PUT_NUMS, topic),
                self._item(TOPIC_PUT_SIZE, topic),
                self._item(BROKER_PUT_NUMS, cluster),
            )
        _bump(items, messages, nbytes)

    def delivered(self, topic: str, group: str, messages: int, nbytes: int, cluster: str) -> None:
        """One pull or receive that returned ``messages``."""
        items = self._gets.get((topic, group, cluster))
        if items is None:
            key = group_key(topic, group)
            items = self._gets[topic, group, cluster] = (
                self._item(GROUP_GET_NUMS, key),
                self._item(GROUP_GET_SIZE, key),
                self._item(BROKER_GET_NUMS, cluster),
            )
        _bump(items, messages, nbytes)

    def sent_back(self, topic: str, group: str) -> None:
        """A consumer's message stored again in ``topic`` (its retry topic or DLQ)."""
        self.add(SNDBCK_PUT_NUMS, group_key(topic, group), 1)

    def sample(self, period: Period, *, now_ms: int) -> None:
        for item in self._items.values():
            item.sample(period, now_ms)

    def windows(self, name: str, key: str) -> dict[str, Window] | None:
        """The item's minute, hour and day (RocketMQ's BrokerStatsData fields); None for an
        item nothing was added to."""
        item = self._items.get((name, key))
        if item is None:
            return None
        return {p.field: item.window(p) for p in Period}

    def forget(self, unwanted: Callable[[str, str], bool]) -> None:
        """Drops the items ``unwanted(name, key)`` picks (those of a deleted topic)."""
        for name_key in [k for k in self._items if unwanted(*k)]:
            del self._items[name_key]
        self._puts.clear()
        self._gets.clear()


def _bump(items: tuple[_Item, _Item, _Item], messages: int, nbytes: int) -> None:
    """Counts one call: its messages, its bytes, and the broker's messages."""
    nums, size, broker = items
    nums.value += messages
    nums.times += 1
    size.value += nbytes
    size.times += 1
    broker.value += messages
    broker.times += 1
