"""The ``pyrmq`` Spark data source: RocketMQ topics as DataFrames, read in batches or as a
stream, and DataFrames written to topics.

A read plans one Spark partition per queue, ``[start, end)`` in queue offsets, and an executor
pulls exactly that range. A streaming read keeps its progress only in Spark's checkpoint (the
offsets of each micro-batch), as Spark's Kafka source does, so a query restarted from its
checkpoint re-reads a failed batch's exact range and nothing twice.
"""

import dataclasses
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from pyrmq.client.api import PullResult
from pyrmq.client.message import MessageQueue
from pyrmq.client.subscription import Subscription
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.spark import offsets
from pyrmq.spark.broker import Brokers
from pyrmq.spark.options import ReadOptions, WriteOptions
from pyrmq.spark.pulls import RangePuller
from pyrmq.spark.pushdown import Pushdown, push
from pyrmq.spark.rows import SCHEMA, record_batch
from pyrmq.spark.sink import COLUMN_TYPES, RocketMQBatchWriter, RocketMQStreamWriter

__all__ = [
    "SCHEMA",
    "DataLossError",
    "QueueRange",
    "RocketMQDataSource",
]

log = logging.getLogger(__name__)

PULLS_AHEAD = 4
"""Pulls in flight per range without a tag filter."""
# An Arrow batch a read returns: 256 rows read 15% slower than 1,024 and 8,192 (alike).
BATCH_ROWS = 2048
BATCH_BYTES = 8 << 20
INITIAL: dict[str, Any] = {"startingOffsets": "initial"}
"""A new stream's start, as the options say it. Spark asks a source for its initial offsets
again when it replays a first batch that did not commit; resolved to numbers there, "latest"
(and a time or an offset past a queue's end, which resolve to it) would name later offsets
than the batch first read. Kept symbolic, the first batch's end is resolved once, when it is
planned, and its start again each time it is read, never past that end: a queue that started
at its end reads nothing in it, the others read the same range."""
AT_LATEST: dict[str, Any] = {"startingOffsets": "latest"}
"""The initial offsets of streams started with ``startingOffsets=latest`` by earlier versions:
their first batch reads nothing."""


class DataLossError(PyrmqError):
    """Messages a read was to return are gone (retention, a deleted queue) and the read sets
    ``failOnDataLoss`` (the default)."""


class QueueRange(InputPartition):
    """One Spark partition: offsets ``[start, end)`` of one queue."""

    def __init__(self, mq: MessageQueue, start: int, end: int) -> None:
        super().__init__((mq.topic, mq.broker_name, mq.queue_id, start, end))
        self.mq = mq
        self.start = start
        self.end = end


def split_ranges(
    ranges: Sequence[QueueRange], min_partitions: int | None, max_records: int | None
) -> list[QueueRange]:
    """``ranges`` cut into more Spark partitions: none longer than ``max_records`` offsets,
    and, when there are fewer than ``min_partitions``, each cut in proportion to its length
    (as Spark's Kafka source does), so that big queues are read by several tasks. Shares are
    rounded up: at least ``min_partitions`` whenever the ranges hold that many offsets.

    >>> q = [MessageQueue("T", "b", i) for i in range(2)]
    >>> r = [QueueRange(q[0], 0, 100), QueueRange(q[1], 10, 20)]
    >>> [(p.mq.queue_id, p.start, p.end) for p in split_ranges(r, None, 40)]
    [(0, 0, 33), (0, 33, 66), (0, 66, 100), (1, 10, 20)]
    >>> [(p.mq.queue_id, p.start, p.end) for p in split_ranges(r, 4, None)]
    [(0, 0, 25), (0, 25, 50), (0, 50, 75), (0, 75, 100), (1, 10, 20)]
    >>> even = [QueueRange(m, 0, 5) for m in q + [MessageQueue("T", "b", 2)]]
    >>> len(split_ranges(even, 4, None)), len(split_ranges(even, 10, None))
    (6, 12)
    """
    parts = [1 if max_records is None else -(-(r.end - r.start) // max_records) for r in ranges]
    total = sum(r.end - r.start for r in ranges)
    if min_partitions is not None and sum(parts) < min_partitions and total:
        share = [-(-(r.end - r.start) * min_partitions // total) for r in ranges]
        parts = [max(p, s, 1) for p, s in zip(parts, share, strict=True)]
    out = []
    for r, n in zip(ranges, parts, strict=True):
        n = max(1, min(n, r.end - r.start))
        length = r.end - r.start
        cuts = [r.start + length * i // n for i in range(n + 1)]
        out += [QueueRange(r.mq, a, b) for a, b in itertools.pairwise(cuts)]
    return out


def _lost(options: ReadOptions, what: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(f"{what} (set failOnDataLoss=false to skip them)")
    log.warning("%s; skipping them", what)


def read_range(options: ReadOptions, part: QueueRange) -> Iterator[pa.RecordBatch]:
    """The rows of ``part``: every message of its range that matches the tag expression, in
    Arrow batches."""
    mq = part.mq
    sub = Subscription.parse(mq.topic, options.subscription)
    with _brokers(options) as brokers:
        addr = brokers.addr(mq)

        def pull(offset: int, count: int) -> Awaitable[PullResult]:
            return brokers.pull(addr, mq, offset, count, sub)

        puller = RangePuller(
            pull,
            mq,
            part.start,
            part.end,
            batch=options.pull_batch_size,
            depth=1 if sub.tags else PULLS_AHEAD,
            lost=lambda what: _lost(options, what),
        )
        try:
            while (messages := brokers.run(puller.next(BATCH_ROWS, BATCH_BYTES))) is not None:
                rows = messages if not sub.tags else list(filter(sub.matches, messages))
                if rows:
                    yield record_batch(mq, rows, options.include_properties)
        finally:
            brokers.run(puller.close())


def _brokers(options: ReadOptions) -> Brokers:
    return Brokers(
        options.name_server,
        options.pull_timeout_s,
        options.credentials,
        options.consumer_group or options.consumer_group_prefix,
        options.tls,
        options.fetch_offset_retries,
        options.fetch_offset_retry_interval_s,
    )


def _queues(brokers: Brokers, options: ReadOptions) -> list[MessageQueue]:
    """The queues a read takes now: the subscribed topics' (each must exist), those of the
    topics matching the pattern, or the assigned ones (each must exist)."""
    if options.topic_pattern is None:
        queues = brokers.queues(options.topics)
        if options.assigned is not None:
            _named(options.assigned, queues, "assign")
            queues = [mq for mq in queues if mq in options.assigned]
        return queues
    out = []
    for topic in sorted(filter(options.selects, brokers.topics())):
        try:
            out += brokers.queues([topic])
        except ConfigError:  # deleted since it was listed
            continue
    return out


def _named(named: Iterable[MessageQueue], queues: Sequence[MessageQueue], what: str) -> None:
    unknown = set(named) - set(queues)
    if unknown:
        raise ConfigError(f"{what} names queues not read: {sorted(map(str, unknown))}")


def _resolve(
    brokers: Brokers,
    queues: Sequence[MessageQueue],
    position: Any,
    missing: str,
    every: Sequence[MessageQueue] | None = None,
) -> dict[MessageQueue, int]:
    """Offsets of ``queues`` for ``earliest``/``latest``/offsets JSON (a queue the JSON does not
    name takes ``missing``); the JSON may name only queues of ``every`` (default ``queues``)."""
    named: Mapping[MessageQueue, int] = position if isinstance(position, dict) else {}
    _named(named, queues if every is None else every, "offsets")
    out = {}
    for mq in queues:
        wanted = named.get(mq, position if isinstance(position, str) else missing)
        if wanted in ("earliest", offsets.EARLIEST):
            out[mq] = brokers.min_offset(mq)
        elif wanted in ("latest", offsets.LATEST):
            out[mq] = brokers.max_offset(mq)
        else:
            out[mq] = int(wanted)
    return out


def _times(
    queues: Sequence[MessageQueue],
    every: int | None,
    named: Mapping[MessageQueue, int] | None,
    known: Sequence[MessageQueue] | None = None,
) -> Mapping[MessageQueue, int]:
    """Times (epoch ms) by queue: ``every`` for all of them, else those ``named`` (which must
    be of ``known``, default ``queues``)."""
    if every is not None:
        return dict.fromkeys(queues, every)
    _named(named or {}, queues if known is None else known, "timestamps")
    return {mq: ms for mq, ms in (named or {}).items() if mq in queues}


def _starts(
    brokers: Brokers,
    queues: Sequence[MessageQueue],
    options: ReadOptions,
    missing: str,
    every: Sequence[MessageQueue] | None = None,
) -> dict[MessageQueue, int]:
    """Where a read begins: a queue given a start time begins at its first message stored at
    or after it; the others as ``startingOffsets`` says. The options may name any queue of
    ``every`` (default ``queues``)."""
    out = _resolve(brokers, queues, options.starting, missing, every)
    times = _times(queues, options.starting_timestamp_ms, options.starting_by_timestamp, every)
    for mq, ms in times.items():
        found, end = brokers.offset_for_time(mq, ms), brokers.max_offset(mq)
        if found >= end and options.timestamp_strategy == "error":
            raise ConfigError(
                f"no message of {mq} was stored at or after {ms} "
                "(startingOffsetsByTimestampStrategy=latest starts such queues at their end)"
            )
        out[mq] = min(found, end)
    return out


def _ends(
    brokers: Brokers,
    queues: Sequence[MessageQueue],
    options: ReadOptions,
    every: Sequence[MessageQueue] | None = None,
) -> dict[MessageQueue, int]:
    """Where a batch read stops (exclusive): before a queue's first message stored at or after
    its end time (its end when there is none), else as ``endingOffsets`` says."""
    out = _resolve(brokers, queues, options.ending, "latest", every)
    times = _times(queues, options.ending_timestamp_ms, options.ending_by_timestamp, every)
    for mq, ms in times.items():
        out[mq] = brokers.offset_for_time(mq, ms)
    return out


def _narrow(
    brokers: Brokers, mq: MessageQueue, pushed: Pushdown, start: int, end: int
) -> tuple[int, int]:
    """``[start, end)`` of ``mq`` cut to the pushed offsets and store times."""
    low, high = pushed.offsets
    start, end = max(start, low), end if high is None else min(end, high)
    first_ms, after_ms = pushed.store_ms()
    # Looked up only while something is left: each lookup is a request to the broker.
    if start < end and first_ms is not None:
        start = max(start, brokers.offset_for_time(mq, first_ms))
    if start < end and after_ms is not None:
        end = min(end, brokers.offset_for_time(mq, after_ms))
    return start, end


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed = Pushdown()

    def partitions(self) -> Sequence[InputPartition]:
        o, pushed = self.options, self.pushed
        with _brokers(o) as brokers:
            every = _queues(brokers, o)
            # Filters that no row passes (offset > 9 AND offset < 5) read nothing.
            queues = [] if pushed.empty else [mq for mq in every if pushed.admits(mq)]
            starts = _starts(brokers, queues, o, "earliest", every)
            ends = _ends(brokers, queues, o, every)
            backwards = [
                f"{mq} from {starts[mq]} to {ends[mq]}" for mq in queues if ends[mq] < starts[mq]
            ]
            if backwards:
                # As Spark's Kafka source: an end before its start is an ending time before the
                # starting one, or a start past the queue's end (its messages gone or never
                # there).
                _lost(o, f"ranges end before they start: {', '.join(backwards)}")
            ranges = []
            for mq in queues:
                start, end = _narrow(brokers, mq, pushed, starts[mq], ends[mq])
                if start < end:
                    ranges.append(QueueRange(mq, start, end))
        return split_ranges(ranges, o.min_partitions, o.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class RocketMQPushdownReader(RocketMQBatchReader):
    """A batch reader that Spark hands the query's filters (``pushDownPredicate``). Only a
    reader of this class has ``pushFilters``: Spark refuses to plan one that has it unless
    ``spark.sql.python.filterPushdown.enabled`` is set. Spark 4.3 keeps the read planned here
    with the loaded DataFrame, for later queries of it without filters to push too: one
    DataFrame per query."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        # Runs before partitions() in the planning worker, and this reader is then pickled
        # for read(): what is set here is what both see.
        given = Subscription.parse("T", self.options.subscription).tags
        self.pushed, left = push(filters, given)
        if self.pushed.tags:
            # Exact as well: read_range drops messages whose tag only shares a hash.
            subscription = " || ".join(self.pushed.tags)
            self.options = dataclasses.replace(self.options, subscription=subscription)
        return left


def _read(options: ReadOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    # With no partition planned, Spark still runs one task, on an InputPartition of None.
    if not isinstance(partition, QueueRange):
        return iter(())
    return read_range(options, partition)


def _share(backlog: dict[MessageQueue, int], budget: int, turn: int = 0) -> dict[MessageQueue, int]:
    """``budget`` offsets spread over the queues: one for each queue with a backlog first, so
    that none starves behind a busy one, then the rest in proportion to what remains of the
    backlogs (largest remainders first). Never more than ``budget``, nor than a queue's
    backlog. When the budget cannot give every such queue one, ``turn`` (any number that
    changes from batch to batch) picks which queues go first.

    >>> qs = [MessageQueue("T", "b", i) for i in range(3)]
    >>> sorted(_share(dict(zip(qs, [301, 101, 0])), 202).values())
    [0, 51, 151]
    >>> sorted(_share(dict(zip(qs, [1000, 2, 2])), 3).values())
    [1, 1, 1]
    >>> [sum(_share(dict(zip(qs, [5, 5, 5])), 2, turn).values()) for turn in range(3)]
    [2, 2, 2]
    """
    total = sum(backlog.values())
    if total <= budget:
        return dict(backlog)
    waiting = sorted(mq for mq, n in backlog.items() if n > 0)
    share = dict.fromkeys(backlog, 0)
    if budget < len(waiting):
        first = turn % len(waiting)
        for mq in (waiting[first:] + waiting[:first])[:budget]:
            share[mq] = 1
        return share
    for mq in waiting:
        share[mq] = 1
    rest, left = total - len(waiting), budget - len(waiting)
    if rest == 0 or left == 0:
        return share
    for mq in waiting:
        share[mq] += (backlog[mq] - 1) * left // rest
    extra = budget - sum(share.values())
    by_remainder = sorted(waiting, key=lambda mq: (-((backlog[mq] - 1) * left % rest), mq))
    for mq in by_remainder[:extra]:
        share[mq] += 1
    return share


class RocketMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.group = options.consumer_group or (
            f"{options.consumer_group_prefix}-{uuid.uuid4().hex[:16]}"
        )
        """The consumer group whose offsets show the query's progress."""
        self._target: dict[MessageQueue, int] | None = None
        self._away: set[str] = set()
        # When the last micro-batch was let go (minOffsetsPerTrigger); none yet, so the first
        # one goes at once, as in Spark's Kafka source.
        self._triggered = -float("inf")

    def _brokers(self) -> Brokers:
        return _brokers(self.options)

    def _latest(
        self, brokers: Brokers, known: Iterable[MessageQueue] = ()
    ) -> dict[MessageQueue, int]:
        """The end of every queue read now, of the topics the read names or matches and of
        those it has ``known``; a deleted topic has none."""
        o = self.options
        topics = set(o.topics) | {mq.topic for mq in known}
        if o.topic_pattern is not None:
            topics.update(filter(o.selects, brokers.topics()))
        out: dict[MessageQueue, int] = {}
        for topic in sorted(topics):
            try:
                queues = brokers.queues([topic])
            except ConfigError:  # deleted
                continue
            if o.assigned is not None:
                queues = [mq for mq in queues if mq in o.assigned]
            out.update((mq, brokers.max_offset(mq)) for mq in queues)
        return out

    def initialOffset(self) -> dict[str, Any]:
        return INITIAL

    def _first(self, brokers: Brokers, ends: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
        """Where the first batch, which ends at ``ends``, begins in each of its queues."""
        o = self.options
        start = _starts(brokers, _queues(brokers, o), o, "latest")
        out = {}
        for mq, end in ends.items():
            at = start.get(mq, end)
            if at > end:
                # Left past it, the next batch would take the queue for one made again and
                # read it from its first offset.
                if isinstance(o.starting, dict) and o.starting.get(mq, -1) > end:
                    log.warning("%s starts at its end %d, not at %d past it", mq, end, at)
                at = end
            out[mq] = at
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark has no limit of both kinds for Python sources: a minimum is kept by
        # latestOffset whatever the limit.
        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        with self._brokers() as brokers:
            self._target = self._latest(brokers)

    def _wait(self, backlog: int) -> bool:
        """Whether the next micro-batch waits for ``minOffsetsPerTrigger`` (never longer than
        ``maxTriggerDelay`` after the last one, nor under ``availableNow``, which would
        otherwise stop with data unread)."""
        least = self.options.min_offsets_per_trigger
        if least is None or self._target is not None:
            return False
        now = time.monotonic()
        if backlog < least and now - self._triggered < self.options.max_trigger_delay_s:
            return True
        self._triggered = now
        return False

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = start in (INITIAL, AT_LATEST)
        begun = {} if first else offsets.from_json(start)
        with self._brokers() as brokers:
            latest = self._target if self._target is not None else self._latest(brokers, begun)
            read = {mq.topic for mq in latest}
            if first:
                missing = set(self.options.topics) - read
                if missing:
                    raise ConfigError(f"topic {min(missing)} does not exist")
                if self.options.assigned is not None:
                    _named(self.options.assigned, list(latest), "assign")
                if start == AT_LATEST:
                    return offsets.to_json(latest)
                begun = self._first(brokers, latest)
            # A topic without a route is deleted, or its brokers are away (a restart): its
            # offsets stay, and a topic made again is read past them, or from its start
            # (below) once its offsets are behind them.
            away = {mq.topic for mq in begun} - read
            for topic in sorted(away - self._away):
                log.warning("topic %s has no route: it is read again once it has", topic)
            self._away = away
            # A queue that appeared since the last batch starts at its first offset.
            for mq in latest.keys() - begun.keys():
                begun[mq] = min(brokers.min_offset(mq), latest[mq])
            for mq in latest.keys() & begun.keys():
                if latest[mq] < begun[mq]:
                    # Recreated (or emptied): what was past its new end is gone.
                    _lost(self.options, f"offsets [{latest[mq]}, {begun[mq]}) of {mq} are gone")
                    begun[mq] = min(brokers.min_offset(mq), latest[mq])
        ends = dict(begun)
        backlog = {mq: max(0, latest[mq] - begun[mq]) for mq in latest}
        if self._wait(sum(backlog.values())):
            return start
        if isinstance(limit, ReadMaxRows):
            backlog = _share(backlog, limit.max_rows, sum(begun.values()))
        for mq, n in backlog.items():
            ends[mq] = begun[mq] + n
        return offsets.to_json(ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        with self._brokers() as brokers:
            return offsets.to_json(self._latest(brokers))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if start == AT_LATEST:
            return []
        ends = offsets.from_json(end)
        if start == INITIAL:
            with self._brokers() as brokers:
                begun = self._first(brokers, ends)
        else:
            begun = offsets.from_json(start)
        # Queues new since the last batch are read from their first offset, and so are those
        # made again behind where the last batch ended (latestOffset reported the loss).
        restart = [mq for mq, stop in ends.items() if mq not in begun or stop < begun[mq]]
        if restart:
            with self._brokers() as brokers:
                for mq in restart:
                    begun[mq] = min(brokers.min_offset(mq), ends[mq])
        ranges = [QueueRange(mq, begun[mq], stop) for mq, stop in ends.items() if begun[mq] < stop]
        o = self.options
        return split_ranges(ranges, o.min_partitions, o.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Shows the query's progress as its consumer group's offsets, for monitoring only:
        the query's own progress lives in Spark's checkpoint. Spark may skip a commit (the
        last batch's often), and a failure here is only logged."""
        if end in (INITIAL, AT_LATEST):
            return
        try:
            with self._brokers() as brokers:
                for mq, offset in offsets.from_json(end).items():
                    brokers.commit_offset(self.group, mq, offset)
        except (PyrmqError, OSError, TimeoutError) as e:
            log.warning("progress of %s not shown to the brokers: %s", self.group, e)


class RocketMQDataSource(DataSource):
    """``spark.read.format("pyrmq")``, ``readStream`` and ``write``; see :mod:`pyrmq.spark`."""

    @classmethod
    def name(cls) -> str:
        return "pyrmq"

    def schema(self) -> StructType:
        # Spark asks for it when a read, batch or stream, is loaded: options that fit neither
        # fail there, rather than once a stream runs (where PySpark buries the error).
        try:
            ReadOptions.parse(self.options, "stream")
        except ConfigError:
            ReadOptions.parse(self.options, "batch")
        return SCHEMA

    def _check(self, schema: StructType) -> None:
        if schema != SCHEMA:
            raise ConfigError("the pyrmq source has a fixed schema: do not give one")

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check(schema)
        options = ReadOptions.parse(self.options, "batch")
        if options.push_down_predicate:
            return RocketMQPushdownReader(options)
        return RocketMQBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check(schema)
        return RocketMQStreamReader(ReadOptions.parse(self.options, "stream"))

    def _write_options(self, schema: StructType, overwrite: bool) -> WriteOptions:
        if overwrite:
            raise ConfigError("a topic cannot be overwritten: write with mode('append')")
        options = WriteOptions.parse(self.options)
        types = {f.name: f.dataType for f in schema.fields}
        if "body" not in types:
            raise ConfigError("rows written to pyrmq need a body column")
        if options.topic is None and "topic" not in types:
            raise ConfigError("set the topic option or give the rows a topic column")
        for name, allowed in COLUMN_TYPES.items():
            if name in types and types[name] not in allowed:
                raise ConfigError(
                    f"column {name} is {types[name].simpleString()}; pyrmq takes "
                    + " or ".join(dict.fromkeys(t.simpleString() for t in allowed))
                )
        if options.exactly_once and types.keys() & {"delay_ms", "deliver_time"}:
            raise ConfigError("delayed messages cannot be written exactly once")
        return dataclasses.replace(options, queue_column="queue_id" in types)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return RocketMQBatchWriter(self._write_options(schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return RocketMQStreamWriter(self._write_options(schema, overwrite))
