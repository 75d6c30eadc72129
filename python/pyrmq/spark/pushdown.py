"""Which of a batch read's filters narrow what it pulls (``pushDownPredicate``).

Spark hands a reader the filters of a query, ANDed, before it plans the partitions. Those on a
message's queue (``topic``, ``broker_name``, ``queue_id``) leave out whole queues, those on
``queue_offset`` cut each queue's range: both hold exactly for every row of what is then read,
so Spark need not test them again. Those on ``store_timestamp`` become offset bounds through
the brokers' offset-for-time lookup, which assumes store times do not go backwards in a queue;
those on ``tags`` become the tag expression the brokers filter by. Spark still tests both, the
lookup being a search and the brokers matching tag hashes.

What is kept is decided from the filters alone, before any broker is asked, so that the same
filters are always answered the same way.

>>> from pyspark.sql.datasource import EqualTo, GreaterThan, In, LessThan
>>> pushed, left = push([EqualTo(("queue_id",), 1), GreaterThan(("queue_offset",), 2),
...                      LessThan(("queue_offset",), 9), In(("tags",), ("A", "B"))])
>>> pushed.offsets, pushed.tags, left
((3, 9), ('A', 'B'), [In(attribute=('tags',), value=('A', 'B'))])
>>> from pyrmq.client.message import MessageQueue
>>> [pushed.admits(MessageQueue("T", "b", i)) for i in range(3)]
[False, True, False]
"""

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)

from pyrmq.client.message import MessageQueue

__all__ = ["Pushdown", "epoch_us", "push"]

_QUEUE_COLUMNS = {"topic": str, "broker_name": str, "queue_id": int}
_EQUALS = (EqualTo, EqualNullSafe)
_ABOVE = (GreaterThan, GreaterThanOrEqual)
_BELOW = (LessThan, LessThanOrEqual)
_ONE_VALUE = (*_EQUALS, *_ABOVE, *_BELOW)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
Bounds = tuple[int, int | None]
"""``[low, high)``; a high of None is no bound."""


@dataclasses.dataclass(frozen=True, slots=True)
class Pushdown:
    """What a read's pushed filters let through. The default lets everything through."""

    queue_filters: tuple[Filter, ...] = ()
    """Filters on the queue columns, each kept only if it holds for a queue's values."""
    offsets: Bounds = (0, None)
    """Queue offsets a row may have."""
    store_us: tuple[int | None, int | None] = (None, None)
    """Store times (epoch µs) a row may have, both ends included; None is no bound."""
    tags: tuple[str, ...] | None = None
    """The tags the read is to take (sorted), where the filters name some; None leaves the
    read's tag expression as it is."""

    def admits(self, mq: MessageQueue) -> bool:
        """Whether rows of ``mq`` may pass the queue filters."""
        values = {"topic": mq.topic, "broker_name": mq.broker_name, "queue_id": mq.queue_id}
        return all(_holds(f, values[_column(f) or ""]) is True for f in self.queue_filters)

    @property
    def empty(self) -> bool:
        """No row can pass: contradicting bounds, or no tag left."""
        low, high = self.offsets
        start, end = self.store_us
        return (
            (high is not None and high <= low)
            or (start is not None and end is not None and end < start)
            or self.tags == ()
        )

    def store_ms(self) -> tuple[int | None, int | None]:
        """The store times as the brokers' lookup takes them (ms): every matching row is at
        or after the first and before the second."""
        start, end = self.store_us
        return (
            None if start is None else start // 1000,
            None if end is None else end // 1000 + 1,
        )


def epoch_us(value: Any) -> int | None:
    """A filter's timestamp as epoch µs, exactly; None for what is not a timestamp with its
    time zone (Spark gives TIMESTAMP values in UTC; a naive one has no instant)."""
    if not isinstance(value, datetime.datetime) or value.utcoffset() is None:
        return None
    return (value - _EPOCH) // datetime.timedelta(microseconds=1)


def push(filters: Sequence[Filter], given: Iterable[str] = ()) -> tuple[Pushdown, list[Filter]]:
    """What ``filters`` (ANDed) let through in a read whose tag expression names ``given``
    (none: every tag), and those Spark must still test: the given objects themselves, as
    Spark matches them by identity."""
    queue_filters: list[Filter] = []
    low, high = 0, None
    start: int | None = None
    end: int | None = None
    tags: set[str] | None = None
    left: list[Filter] = []

    def cap(new_high: int) -> None:
        nonlocal high
        high = new_high if high is None else min(high, new_high)

    for f in filters:
        column = _column(f)
        if column in _QUEUE_COLUMNS and _fits(f, _QUEUE_COLUMNS[column]):
            queue_filters.append(f)
            continue
        if column == "queue_offset" and _fits(f, int):
            exact, bounds = _offset_bounds(f)
            if bounds is not None:
                low = max(low, bounds[0])
                if bounds[1] is not None:
                    cap(bounds[1])
            if exact:
                continue
        elif column == "store_timestamp":
            times = _time_bounds(f)
            if times is not None:
                if times[0] is not None:
                    start = times[0] if start is None else max(start, times[0])
                if times[1] is not None:
                    end = times[1] if end is None else min(end, times[1])
        elif column == "tags":
            named = _tags(f)
            if named is not None:
                tags = named if tags is None else tags & named
        left.append(f)
    if tags is not None and given:
        tags &= set(given)
    pushed = Pushdown(
        tuple(queue_filters),
        (low, high),
        (start, end),
        None if tags is None else tuple(sorted(tags)),
    )
    return pushed, left


def _column(f: Filter) -> str | None:
    """The top-level column ``f`` tests (under one ``Not``), None for a nested field."""
    inner = f.child if isinstance(f, Not) else f
    path: tuple[str, ...] = getattr(inner, "attribute", ())
    return path[0] if len(path) == 1 else None


def _value(f: Filter) -> Any:
    """The value a filter of one value compares with."""
    assert isinstance(f, _ONE_VALUE)
    return f.value


def _values(f: Filter) -> tuple[Any, ...]:
    if isinstance(f, Not):
        return _values(f.child)
    if isinstance(f, In):
        return tuple(f.value)
    return (_value(f),) if isinstance(f, _ONE_VALUE) else ()


def _fits(f: Filter, kind: type) -> bool:
    """Whether ``f`` is one of the filters handled here and compares with values of the
    column's ``kind`` (or nulls) only: anything else is left to Spark."""
    inner = f.child if isinstance(f, Not) else f
    if not isinstance(inner, (*_ONE_VALUE, In, IsNull, IsNotNull)):
        return False
    return all(v is None or type(v) is kind for v in _values(f))


def _holds(f: Filter, value: Any) -> bool | None:
    """``f`` for a row whose column is ``value`` (never null), in SQL's logic of three
    values: None is unknown, which a WHERE drops as it drops false."""
    if isinstance(f, Not):
        inner = _holds(f.child, value)
        return None if inner is None else not inner
    if isinstance(f, IsNull | IsNotNull):
        return isinstance(f, IsNotNull)
    if isinstance(f, In):
        if value in f.value:
            return True
        return None if None in f.value else False
    given = _value(f)
    if isinstance(f, EqualNullSafe):
        return bool(value == given)
    if given is None:
        return None
    if isinstance(f, EqualTo):
        return bool(value == given)
    if isinstance(f, GreaterThan):
        return bool(value > given)
    if isinstance(f, GreaterThanOrEqual):
        return bool(value >= given)
    if isinstance(f, LessThan):
        return bool(value < given)
    return bool(value <= given)


def _offset_bounds(f: Filter) -> tuple[bool, Bounds | None]:
    """Whether the offsets ``[low, high)`` are exactly what ``f`` lets through, and those
    bounds (None: ``f`` bounds nothing, as a ``Not``)."""
    if isinstance(f, Not):
        return False, None
    if isinstance(f, IsNotNull):
        return True, (0, None)
    if isinstance(f, IsNull):
        return True, (0, 0)
    if isinstance(f, In):
        # Only the span: the offsets between the listed ones are read and left to Spark.
        listed = [v for v in f.value if v is not None]
        return False, (min(listed), max(listed) + 1) if listed else (0, 0)
    value = _value(f)
    if value is None:  # unknown, or false (<=>): no row
        return True, (0, 0)
    if isinstance(f, _EQUALS):
        return True, (value, value + 1)
    if isinstance(f, GreaterThan):
        return True, (value + 1, None)
    if isinstance(f, GreaterThanOrEqual):
        return True, (value, None)
    if isinstance(f, LessThan):
        return True, (0, value)
    return True, (0, value + 1)


def _time_bounds(f: Filter) -> tuple[int | None, int | None] | None:
    """The store times (epoch µs, both ends included) a row may have under ``f``; None when
    ``f`` bounds nothing this knows."""
    if isinstance(f, In):
        listed = [epoch_us(v) for v in f.value if v is not None]
        known = [t for t in listed if t is not None]
        if not known or len(known) < len(listed):
            return None
        return min(known), max(known)
    if not isinstance(f, _ONE_VALUE):
        return None
    at = epoch_us(_value(f))
    if at is None:
        return None
    if isinstance(f, _EQUALS):
        return at, at
    return (at, None) if isinstance(f, _ABOVE) else (None, at)


def _tags(f: Filter) -> set[str] | None:
    """The tags ``f`` lets through, if a tag expression can say so: tags with no spaces
    around, no ``||`` and not ``*`` (which means every tag)."""
    if isinstance(f, In):
        named = [v for v in f.value if v is not None]
    elif isinstance(f, _EQUALS):
        named = [f.value]
    else:
        return None
    if not all(isinstance(t, str) and t and t == t.strip() and "||" not in t for t in named):
        return None
    return None if "*" in named else set(named)
