"""Filter pushdown of batch reads (``pushDownPredicate``): the queue, offset, store time and tag
filters of a query narrow what the connector pulls, and the rows are those Spark's own filter
gives. What a read pulled is the broker's count of messages returned to pulls; with
``maxRecordsPerPartition=1`` the planned partitions are the offsets read, one each."""

from __future__ import annotations

import asyncio
import datetime
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
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
from tests.compat.servers import create_topic
from tests.helpers import fast_config

from pyrmq.client.admin import Admin
from pyrmq.client.message import Message, MessageQueue, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.spark.pushdown import epoch_us, push

CONF = "spark.sql.python.filterPushdown.enabled"
QUEUE = ("topic", "broker_name", "queue_id", "queue_offset")


# --- what push() keeps, against SQL's meaning of the filters ------------------------------

OPS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


def _sql(f: Filter, row: dict[str, Any]) -> bool | None:
    """``f`` on ``row`` as SQL evaluates it (None: unknown)."""
    if isinstance(f, Not):
        inner = _sql(f.child, row)
        return None if inner is None else not inner
    value = row[f.attribute[0]]
    if isinstance(f, IsNull | IsNotNull):
        return (value is None) == isinstance(f, IsNull)
    if isinstance(f, In):
        if value is None:
            return None
        if value in [v for v in f.value if v is not None]:
            return True
        return None if None in f.value else False
    if isinstance(f, EqualNullSafe):
        return value == f.value
    if value is None or f.value is None:
        return None
    return {
        EqualTo: value == f.value,
        GreaterThan: value > f.value,
        GreaterThanOrEqual: value >= f.value,
        LessThan: value < f.value,
        LessThanOrEqual: value <= f.value,
    }[type(f)]


def _filters() -> st.SearchStrategy[Filter]:
    """Filters as Spark passes them, a null among the values now and then."""
    ints = st.integers(-3, 12).map(lambda v: None if v == -3 else v)
    texts = st.sampled_from(["A", "B", "*", " A", "A || B", None])
    column = st.sampled_from(["queue_id", "queue_offset", "topic", "tags"])

    def one(name: str) -> st.SearchStrategy[Filter]:
        attr = (name,)
        value = texts if name in ("topic", "tags") else ints
        compared = st.builds(lambda op, v: op(attr, v), st.sampled_from(OPS), value)
        listed = st.lists(value, min_size=1, max_size=3).map(lambda vs: In(attr, tuple(vs)))
        nulls = st.sampled_from([IsNull(attr), IsNotNull(attr)])
        simple = st.one_of(compared, compared, listed, nulls)
        return st.one_of(simple, simple, simple.map(Not))

    return column.flatmap(one)


def check_push(filters: list[Filter], given_tags: tuple[str, ...]) -> None:
    """Over rows of every queue id and offset in a small space: no row that passes all the
    filters (and the read's own tag expression) is left out of what is read, and every row read
    passes the read's tag expression and the filters Spark is not given back."""
    pushed, left = push(filters, given_tags)
    assert all(any(f is g for g in filters) for f in left)
    handled = [f for f in filters if not any(f is g for g in left)]
    low, high = pushed.offsets
    # The tags the read's expression then names; None is every tag.
    taken = pushed.tags if pushed.tags is not None else given_tags or None
    for topic in ("A", "B"):
        for queue_id in range(4):
            for offset in range(12):
                for tag in ("A", "B", "C", None):
                    row = {"topic": topic, "queue_id": queue_id, "queue_offset": offset}
                    row["tags"] = tag
                    mq = MessageQueue(topic, "broker-a", queue_id)
                    read = (
                        not pushed.empty
                        and pushed.admits(mq)
                        and low <= offset
                        and (high is None or offset < high)
                        and (taken is None or tag in taken)
                    )
                    by_expression = not given_tags or tag in given_tags
                    if by_expression and all(_sql(f, row) is True for f in filters):
                        assert read, (row, filters)
                    if read:
                        assert by_expression, (row, pushed)
                        assert all(_sql(f, row) is True for f in handled), (row, handled)


SINGLE = [
    f
    for name, values in (("queue_id", (-1, 0, 2, None)), ("queue_offset", (-1, 0, 5, 11, None)))
    for v in values
    for f in [op((name,), v) for op in OPS] + [In((name,), (v, 3))]
] + [IsNull(("queue_id",)), IsNotNull(("queue_offset",)), In(("tags",), ("A", None))]


@pytest.mark.parametrize("f", [*SINGLE, *map(Not, SINGLE)], ids=repr)
def test_one_pushed_filter(f: Filter) -> None:
    check_push([f], ())


@given(st.lists(_filters(), max_size=4), st.sampled_from([(), ("A",), ("B", "C")]))
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_pushed_filters_keep_every_matching_row_and_drop_only_what_they_enforce(
    filters: list[Filter], given_tags: tuple[str, ...]
) -> None:
    check_push(filters, given_tags)


def test_store_times_become_whole_milliseconds_on_the_safe_side() -> None:
    utc = datetime.UTC
    at = datetime.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=utc)
    us = epoch_us(at)
    assert us == 1_714_564_800_123_456
    # The same instant in another zone; a naive datetime has none.
    assert epoch_us(at.astimezone(datetime.timezone(datetime.timedelta(hours=5, minutes=30)))) == us
    assert epoch_us(at.replace(tzinfo=None)) is None
    assert push([GreaterThan(("store_timestamp",), at)])[0].store_ms() == (us // 1000, None)
    # At or before .123456 is before .124 ms.
    assert push([LessThanOrEqual(("store_timestamp",), at)])[0].store_ms() == (None, us // 1000 + 1)
    before = datetime.datetime(1969, 12, 31, 23, 59, 59, 999_500, tzinfo=utc)
    assert push([GreaterThanOrEqual(("store_timestamp",), before)])[0].store_ms() == (-1, None)
    # Spark still tests them.
    f = EqualTo(("store_timestamp",), at)
    assert push([f])[1] == [f]


# --- through Spark, against a broker -------------------------------------------------------


@pytest.fixture(scope="module")
def pushdown(spark: Any) -> Iterator[Any]:
    """The session with Python filter pushdown on, as reads with ``pushDownPredicate`` need."""
    spark.conf.set(CONF, "true")
    yield spark
    spark.conf.unset(CONF)


def send(namesrv: str, topic: str, tags: list[str | None], first: int = 0) -> list[Any]:
    """A message ``m<i>`` for each of ``tags`` (``i`` from ``first``), round robin over the
    topic's queues; their send results."""

    async def main() -> list[Any]:
        async with Producer(f"PG_{topic}", client_config=fast_config(namesrv)) as producer:
            out = []
            for i, tag in enumerate(tags, first):
                out.append(await producer.send(Message(topic, f"m{i}".encode(), tags=tag)))
            assert all(r.status is SendStatus.OK for r in out)
            return out

    return asyncio.run(main())


def pulled(namesrv: str, broker: str) -> int:
    """How many messages the broker has returned to pulls since it started."""

    async def main() -> int:
        async with Admin(namesrv) as admin:
            return int((await admin.broker_runtime_info(broker))["msgGetTotalTodayNow"])

    return asyncio.run(main())


def load(spark: Any, namesrv: str, topics: str, push: bool = True, **options: str) -> Any:
    """A new DataFrame of ``topics``: Spark 4.3 keeps a read's plan, pushed filters and all, with
    the loaded DataFrame, so each query here loads its own."""
    reader = spark.read.format("pyrmq").option("nameServer", namesrv).option("subscribe", topics)
    reader = reader.option("pushDownPredicate", str(push).lower())
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def bodies(rows: list[Any]) -> list[int]:
    return sorted(int(r.body[1:]) for r in rows)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_queue_and_offset_filters_read_only_the_range_they_name(
    pushdown: Any, addrs: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    namesrv, broker = addrs
    topic, other = "TopicSparkPushQueue", "TopicSparkPushQueue2"
    create_topic(broker, topic, 4)
    create_topic(broker, other, 2)
    sent = send(namesrv, topic, ["T"] * 40)  # 10 a queue
    send(namesrv, other, ["T"] * 6, first=40)
    wanted = "queue_id = 1 and queue_offset >= 3 and queue_offset < 7"
    expected = sorted(
        i for i, r in enumerate(sent) if r.message_queue.queue_id == 1 and 3 <= r.queue_offset < 7
    )
    assert len(expected) == 4

    def run(df: Any) -> tuple[int, list[Any], int]:
        before = pulled(namesrv, broker)
        rows = df.collect()
        return df.rdd.getNumPartitions(), rows, pulled(namesrv, broker) - before

    one_each = {"maxRecordsPerPartition": "1"}
    parts, rows, got = run(load(pushdown, namesrv, topic, **one_each).where(wanted))
    assert bodies(rows) == expected
    assert {(r.queue_id, r.queue_offset) for r in rows} == {(1, o) for o in range(3, 7)}
    assert (parts, got) == (4, 4)  # those 4 offsets, nothing else
    # The same query without pushdown reads everything, and Spark filters.
    parts, rows, got = run(load(pushdown, namesrv, topic, push=False).where(wanted))
    assert bodies(rows) == expected
    assert (parts, got) == (4, 40)
    # Spark leaves the queue and offset filters to the scan.
    capsys.readouterr()
    load(pushdown, namesrv, topic).where(wanted).explain()
    plan = capsys.readouterr().out
    assert "BatchScan" in plan
    assert re.search(r"\bFilter\b", plan) is None, plan
    # Contradicting bounds read nothing, without an error.
    parts, rows, got = run(
        load(pushdown, namesrv, topic).where("queue_offset > 10 and queue_offset < 5")
    )
    assert (rows, got) == ([], 0)
    # Of two topics, a topic filter reads one; queue ids may be excluded.
    both = f"{topic},{other}"
    df = load(pushdown, namesrv, both).where(f"topic = '{other}' and queue_id <> 0")
    parts, rows, got = run(df)
    assert {(r.topic, r.queue_id) for r in rows} == {(other, 1)}
    assert (parts, got) == (1, 3)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_store_time_filters_read_only_the_burst_they_name(
    pushdown: Any, addrs: tuple[str, str]
) -> None:
    namesrv, broker = addrs
    topic = "TopicSparkPushTime"
    create_topic(broker, topic, 2)
    send(namesrv, topic, ["T"] * 20)
    # Clear of both bursts: a message stored in the same millisecond counts as at it.
    time.sleep(0.3)
    middle = datetime.datetime.now(datetime.UTC)
    time.sleep(0.3)
    send(namesrv, topic, ["T"] * 20, first=20)

    def run(df: Any) -> tuple[list[int], int, int]:
        before = pulled(namesrv, broker)
        rows = bodies(df.collect())
        return rows, df.rdd.getNumPartitions(), pulled(namesrv, broker) - before

    stored = F.col("store_timestamp")
    one_each = {"maxRecordsPerPartition": "1"}
    assert run(load(pushdown, namesrv, topic, **one_each).where(stored >= F.lit(middle))) == (
        list(range(20, 40)),
        20,
        20,
    )
    assert run(load(pushdown, namesrv, topic, **one_each).where(stored < F.lit(middle))) == (
        list(range(20)),
        20,
        20,
    )
    # The same instant as a SQL literal in a session zone half an hour off UTC.
    pushdown.conf.set("spark.sql.session.timeZone", "Asia/Kolkata")
    try:
        local = middle.astimezone(datetime.timezone(datetime.timedelta(hours=5, minutes=30)))
        literal = local.strftime("%Y-%m-%d %H:%M:%S.%f")
        df = load(pushdown, namesrv, topic).where(f"store_timestamp > timestamp'{literal}'")
        rows, _, got = run(df)
    finally:
        pushdown.conf.unset("spark.sql.session.timeZone")
    assert (rows, got) == (list(range(20, 40)), 20)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_tag_filters_pull_only_matching_hashes_and_return_exact_tags(
    pushdown: Any, addrs: tuple[str, str]
) -> None:
    """``Aa`` and ``BB`` have the same hash (Java's ``String.hashCode``), which is all the
    broker filters by."""
    namesrv, broker = addrs
    topic = "TopicSparkPushTags"
    create_topic(broker, topic, 2)
    tags: list[str | None] = ["Aa", "BB", "C", None] * 6
    send(namesrv, topic, tags)

    def run(where: str, push: bool = True, **options: str) -> tuple[list[int], int]:
        before = pulled(namesrv, broker)
        rows = bodies(load(pushdown, namesrv, topic, push, **options).where(where).collect())
        return rows, pulled(namesrv, broker) - before

    def having(*names: str) -> list[int]:
        return [i for i, t in enumerate(tags) if t in names]

    assert run("tags = 'Aa'") == (having("Aa"), 12)  # BB rides along, dropped by the reader
    assert run("tags in ('BB', 'C')") == (having("BB", "C"), 18)
    # Within the read's own tag expression.
    assert run("tags in ('BB', 'C')", subExpression="Aa || C") == (having("C"), 6)
    assert run("tags = 'C'", subExpression="Aa") == ([], 0)
    # A tag a tag expression cannot name is left to Spark: everything is pulled.
    assert run("tags = '*' or tags is null") == (having(None), 24)
    # Without pushdown everything is pulled.
    assert run("tags = 'Aa'", push=False) == (having("Aa"), 24)


# Predicates over a topic of 3 queues: 36 messages (12 a queue) in two bursts of 18.
ATOMS = st.one_of(
    st.builds(
        "queue_id {} {}".format,
        st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
        st.integers(-1, 3),
    ),
    st.builds(
        "queue_offset {} {}".format,
        st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "<=>"]),
        st.integers(-1, 13),
    ),
    st.lists(st.integers(0, 13), min_size=1, max_size=3).map(
        lambda v: f"queue_offset in ({', '.join(map(str, v))})"
    ),
    st.lists(st.sampled_from(["0", "2", "7", "null"]), min_size=1, max_size=2).map(
        lambda v: f"queue_id in ({', '.join(v)})"
    ),
    st.sampled_from(["T0", "T1", "Aa", "BB", "*"]).map("tags = '{}'".format),
    st.lists(st.sampled_from(["'T0'", "'Aa'", "'BB'", "null"]), min_size=1, max_size=3).map(
        lambda v: f"tags in ({', '.join(v)})"
    ),
    st.builds(
        "store_timestamp {} timestamp_millis({{middle}} + {})".format,
        st.sampled_from(["<", "<=", ">", ">=", "="]),
        st.integers(-2, 2),
    ),
    st.sampled_from(
        [
            "topic = '{topic}'",
            "topic <> '{topic}'",
            "broker_name = 'broker-a'",
            "tags is null",
            "not (queue_id in (1, null))",
            "queue_offset > 9 and queue_offset < 4",
        ]
    ),
)
PREDICATES = st.one_of(
    st.lists(ATOMS, min_size=1, max_size=3).map(" and ".join),
    st.tuples(ATOMS, ATOMS).map(lambda p: f"({p[0]}) or ({p[1]})"),
)


@pytest.fixture(scope="module")
def mixed(pushdown: Any, addrs: tuple[str, str]) -> Iterator[tuple[str, Any, int]]:
    """(topic, its rows as Spark caches a read without pushdown, the middle between its
    bursts in epoch ms)."""
    namesrv, broker = addrs
    topic = "TopicSparkPushMixed"
    create_topic(broker, topic, 3)
    cycle: list[str | None] = ["T0", "T1", "Aa", "BB", None, "T0"]
    send(namesrv, topic, cycle * 3)
    time.sleep(0.2)
    middle = int(time.time() * 1000)
    time.sleep(0.2)
    send(namesrv, topic, cycle * 3, first=18)
    everything = load(pushdown, namesrv, topic, push=False).cache()
    assert everything.count() == 36
    yield topic, everything, middle
    everything.unpersist()


def check_same_rows(
    spark: Any, addrs: tuple[str, str], mixed: tuple[str, Any, int], where: str
) -> int:
    """Checks that a pushed read gives the rows Spark's filter keeps of them all; how many
    messages it pulled."""
    namesrv, broker = addrs
    topic, everything, middle = mixed
    where = where.format(topic=topic, middle=middle)
    before = pulled(namesrv, broker)
    got = load(spark, namesrv, topic).where(where).select(*QUEUE).collect()
    count = pulled(namesrv, broker) - before
    wanted = everything.where(where).select(*QUEUE).collect()
    assert sorted(got) == sorted(wanted), where
    return count


@pytest.mark.spark
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("where", "pulls"),
    [
        ("queue_id = 1 and queue_offset >= 3 and queue_offset < 7", 4),
        # The second burst, less the tags T1 and None (BB shares Aa's hash).
        ("store_timestamp >= timestamp_millis({middle}) and tags in ('Aa', 'T0')", 12),
        ("store_timestamp < timestamp_millis({middle}) and queue_offset <=> 2", 3),
        # From the first offset named to the last, in two queues.
        ("queue_offset in (1, 5, 11) and queue_id in (0, 2) and topic = '{topic}'", 22),
        ("tags = 'BB' or queue_offset = 0", 36),  # not pushed
    ],
)
def test_pushed_reads_return_what_spark_filters(
    pushdown: Any, addrs: tuple[str, str], mixed: tuple[str, Any, int], where: str, pulls: int
) -> None:
    assert check_same_rows(pushdown, addrs, mixed, where) == pulls


@pytest.mark.spark
@pytest.mark.timeout(300)
@given(where=PREDICATES)
@settings(max_examples=6)
def test_random_pushed_reads_return_what_spark_filters(
    pushdown: Any, addrs: tuple[str, str], mixed: tuple[str, Any, int], where: str
) -> None:
    check_same_rows(pushdown, addrs, mixed, where)
