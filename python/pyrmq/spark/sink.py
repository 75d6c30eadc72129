"""Writing DataFrames to topics, in batches or from a streaming query.

At least once (the default), rows are sent in batches as they come (or one by one to the
queues they name, in order); a task or micro-batch that Spark runs again sends its rows
again.

Exactly once, each row is sent as a transactional half message, which no consumer sees yet,
marked with its write (the query's id, which Spark keeps in the checkpoint, and the batch) and
its task attempt. The driver's commit stores which attempts make up the batch (see
:mod:`pyrmq.spark.commits`), then commits their halves and rolls back the rest. A micro-batch
Spark replays after a crash finds its batch committed: it rolls back its own halves and
commits any half the first commit had not reached. A half whose end is lost otherwise (a task
attempt that failed, a broker away) is settled by the broker's check, which any producer of
the sink's group answers from the records, once the half's ``checkImmunitySeconds`` (an hour
by default) have passed. A batch written too slowly for that immunity is rolled back whole at
its commit, which fails, and Spark writes it again.
"""

import asyncio
import dataclasses
import functools
import logging
import os
import threading
import time
import uuid
from collections.abc import Coroutine, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    TimestampType,
)

from pyrmq import properties as prop
from pyrmq.client.message import Message, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.transaction import HalfMessage, TransactionProducer
from pyrmq.errors import BrokerError, ConfigError, PyrmqError
from pyrmq.remoting.protocol import ResponseCode
from pyrmq.spark.batching import batches
from pyrmq.spark.commits import (
    SINK,
    SINK_ATTEMPT,
    SINK_BATCH,
    SinkChecker,
    Written,
    settle,
)
from pyrmq.spark.options import WriteOptions, client_config
from pyrmq.spark.placement import SendMany, send_in_order
from pyrmq.spark.windowed import windowed

__all__ = ["RocketMQBatchWriter", "RocketMQStreamWriter", "SendSummary", "rows_of"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SEND_WINDOW = 64
_BATCH_WINDOW = 8
# Local properties Spark gives the tasks of a micro-batch.
_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"
# Hidden from written properties: set from the columns, or the broker's bookkeeping.
RESERVED = frozenset(
    {
        prop.KEYS,
        prop.TAGS,
        prop.UNIQ_KEY,
        prop.WAIT,
        prop.DELAY,
        prop.MIN_OFFSET,
        prop.MAX_OFFSET,
        prop.TRAN_MSG,
        prop.PRODUCER_GROUP,
        "REAL_TOPIC",
        "REAL_QID",
        SINK,
        SINK_BATCH,
        SINK_ATTEMPT,
        prop.CHECK_IMMUNITY,
        prop.TIMER_DELIVER_MS,
        prop.TIMER_DELAY_MS,
        prop.TIMER_DELAY_SEC,
    }
)


@dataclasses.dataclass(frozen=True)
class SendSummary(WriterCommitMessage):
    """What one task of a write sent; with exactly-once delivery, the halves it left open."""

    partition_id: int
    sent: int
    sink: str | None = None
    batch: int = 0
    written: Written | None = None


_TEXT = StringType()
COLUMN_TYPES: dict[str, tuple[DataType, ...]] = {
    "body": (BinaryType(), _TEXT),
    "topic": (_TEXT,),
    "tags": (_TEXT,),
    "keys": (_TEXT, ArrayType(_TEXT), ArrayType(_TEXT, False)),
    "properties": (MapType(_TEXT, _TEXT), MapType(_TEXT, _TEXT, False)),
    "queue_id": (IntegerType(), LongType()),
    "broker_name": (_TEXT,),
    "sharding_key": (_TEXT,),
    "delay_ms": (IntegerType(), LongType()),
    "deliver_time": (TimestampType(),),
}
"""The columns a write reads, and the types it takes for each; any other column is left
unconverted."""


def rows_of(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    """The rows of Spark's Arrow batches as ``Row.asDict`` gives them (maps as dicts), only
    the columns in ``COLUMN_TYPES``. Converting a batch a column at a time costs a fraction of
    Spark's conversion to rows, one converter call per value.

    >>> batch = pa.record_batch(
    ...     {"body": [b"a", None], "properties": pa.array([[("k", "v")], None],
    ...      pa.map_(pa.string(), pa.string())), "other": [1, 2]})
    >>> list(rows_of([batch]))
    [{'body': b'a', 'properties': {'k': 'v'}}, {'body': None, 'properties': None}]
    """
    for batch in batches:
        names = [name for name in batch.schema.names if name in COLUMN_TYPES]
        columns = [_values(batch.column(name)) for name in names]
        for values in zip(*columns, strict=True):
            yield dict(zip(names, values, strict=True))


def _values(column: pa.Array) -> list[Any]:
    if pa.types.is_timestamp(column.type) and column.type.tz is None:
        # Spark's timestamps count from the epoch in UTC; a naive datetime would be read in
        # the local time zone.
        column = column.cast(pa.timestamp(column.type.unit, "UTC"))
    values: list[Any] = column.to_pylist()
    if pa.types.is_map(column.type):
        return [None if pairs is None else dict(pairs) for pairs in values]
    return values


def _message(row: Mapping[str, Any], options: WriteOptions) -> Message:
    topic = options.topic or row.get("topic")
    if not topic:
        raise ConfigError("a row has no topic: set the topic option or a topic column")
    body = row.get("body")
    if body is None:
        raise ConfigError("a row has no body")
    keys = row.get("keys")
    if isinstance(keys, list):
        if any(k is None for k in keys):
            raise ConfigError(f"column keys holds a null: {keys!r}")
        if any(prop.KEY_SEPARATOR in k for k in keys):
            raise ConfigError(f"a key of {keys!r} holds a space, RocketMQ's key separator")
    user = row.get("properties") if options.include_properties else None
    if user and any(v is None for v in user.values()):
        nulls = ", ".join(sorted(str(k) for k, v in user.items() if v is None))
        raise ConfigError(f"column properties holds a null for {nulls}")
    if user and not RESERVED.isdisjoint(user):
        reserved = ", ".join(sorted(RESERVED.intersection(user)))
        raise ConfigError(f"properties {reserved} are set by the message's columns")
    msg = Message(
        topic,
        bytes(body) if isinstance(body, bytearray) else body,
        tags=row.get("tags"),
        keys=keys if keys else None,
        properties=user or None,
    )
    delay_ms, deliver_time = row.get("delay_ms"), row.get("deliver_time")
    if deliver_time is not None:
        msg.properties[prop.TIMER_DELIVER_MS] = str(int(deliver_time.timestamp() * 1000))
    elif delay_ms is not None:
        msg.properties[prop.TIMER_DELAY_MS] = str(delay_ms)
    return msg


async def _send_rows(
    rows: Iterator[dict[str, Any]],
    options: WriteOptions,
    producer: Producer,
    send: SendMany[T],
    *,
    batched: bool,
) -> list[T]:
    """Every row sent: to the queues they name in order, or side by side. ``send`` gets the
    messages of one batch (``batched``, see :mod:`pyrmq.spark.batching`) or one message."""
    if options.in_order:
        make = functools.partial(_message, options=options)
        single_over = producer.compress_over if batched else None
        return await send_in_order(
            rows, make, options, producer.fetch_publish_queues, send, single_over
        )
    messages = (_message(row, options) for row in rows)
    if batched:
        sends = (send(b, None) for b in batches(messages, producer.compress_over))
        window = _BATCH_WINDOW
    else:
        sends = (send([m], None) for m in messages)
        window = _SEND_WINDOW
    return [result for results in await windowed(sends, window) for result in results]


async def _send_all(rows: Iterator[dict[str, Any]], options: WriteOptions) -> int:
    config = client_config(options)
    async with Producer(options.producer_group, client_config=config) as producer:
        refused = False

        async def send(batch: list[Message], mq: MessageQueue | None) -> list[SendResult]:
            nonlocal refused
            if len(batch) > 1 and not refused:
                try:
                    return [await producer.send_batch(batch, queue=mq)] * len(batch)
                except BrokerError as e:
                    # A broker with a lower maxMessageSize refuses the whole batch (and
                    # stores none of it): this write sends one by one from here on.
                    if e.code != ResponseCode.MESSAGE_ILLEGAL:
                        raise
                    log.warning("a batch was refused (%s): sending rows one by one", e.remark)
                    refused = True
            return [await producer.send(msg, queue=mq) for msg in batch]

        return len(await _send_rows(rows, options, producer, send, batched=True))


async def _send_halves(
    rows: Iterator[dict[str, Any]], options: WriteOptions, sink: str, batch: int, attempt: str
) -> list[HalfMessage]:
    config = client_config(options)
    checker = SinkChecker(options)
    marks = {
        SINK: sink,
        SINK_BATCH: str(batch),
        SINK_ATTEMPT: attempt,
        prop.CHECK_IMMUNITY: str(options.check_immunity_s),
    }
    try:
        async with TransactionProducer(
            options.producer_group, checker=checker, client_config=config
        ) as producer:

            async def send(msgs: list[Message], mq: MessageQueue | None) -> list[HalfMessage]:
                (msg,) = msgs
                msg.properties.update(marks)
                result, handle = await producer.send_half(msg, queue=mq)
                if result.status is not SendStatus.OK:
                    # Stored, but not as safely as the broker promises: this attempt fails,
                    # and its halves are rolled back once another attempt's are committed.
                    raise PyrmqError(f"a half was stored with {result.status.name}")
                return [handle]

            return await _send_rows(rows, options, producer, send, batched=False)
    finally:
        await checker.close()


class _Responder:
    """A producer of the sink's group that lives as long as its process: the driver's commits
    run on it, and between them it answers the broker's checks of halves left open (by a
    task attempt that failed, or a broker that was away). Spark runs a streaming query's
    commits in one process for the whole query."""

    _running: ClassVar[dict[tuple[Any, ...], "_Responder"]] = {}
    _lock: ClassVar = threading.Lock()

    def __init__(self, options: WriteOptions) -> None:
        config = client_config(options)
        self.checker = SinkChecker(options)
        self.producer = TransactionProducer(
            options.producer_group, checker=self.checker, client_config=config
        )
        self.loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self.loop.run_forever, name="pyrmq-sink", daemon=True)
        thread.start()
        try:
            self.run(self.producer.start())
        except BaseException:
            self.loop.call_soon_threadsafe(self.loop.stop)
            raise

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    @classmethod
    def settle(
        cls,
        options: WriteOptions,
        messages: Sequence[WriterCommitMessage | None],
        batch: int,
        *,
        commit: bool,
    ) -> None:
        summaries = [m for m in messages if isinstance(m, SendSummary) and m.sink is not None]
        sinks = {s.sink for s in summaries}
        if not sinks:
            return
        if len(sinks) > 1:
            raise PyrmqError(f"one write, several sinks: {sorted(map(str, sinks))}")
        if any(s.batch != batch for s in summaries):
            # The halves name another batch than Spark commits: their checks would be wrong.
            raise PyrmqError(f"batch {batch} was written as {sorted({s.batch for s in summaries})}")
        written = [s.written for s in summaries if s.written is not None]
        # Keyed by process too: a forked child has the dict but not the thread.
        key = (os.getpid(), options.name_server, options.producer_group, options.commit_topic)
        with cls._lock:
            responder = cls._running.get(key)
            if responder is None:
                responder = cls._running[key] = cls(options)
        sink = str(sinks.pop())
        responder.run(settle(responder.producer, options, sink, batch, written, commit=commit))


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId() if ctx is not None else 0), ctx


class _Writer:
    """What the batch and the streaming writer share: ``write`` on the executors."""

    options: WriteOptions
    sink: str | None
    """The sink of an exactly-once batch write (streaming writes take the query's id)."""

    def _write(self, batches: Iterator[pa.RecordBatch]) -> SendSummary:
        partition, ctx = _task()
        rows = rows_of(batches)
        o = self.options
        if not o.exactly_once:
            with asyncio.Runner() as runner:
                return SendSummary(partition, runner.run(_send_all(rows, o)))
        if self.sink is not None:  # a batch job
            sink, batch = self.sink, 0
        else:
            query = ctx.getLocalProperty(_QUERY_ID) if ctx is not None else None
            batch_text = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
            if batch_text is None or not query:
                raise PyrmqError("an exactly-once stream write ran outside a micro-batch")
            sink, batch = f"query-{query}", int(batch_text)
        attempt = uuid.uuid4().hex
        written_ms = int(time.time() * 1000)
        with asyncio.Runner() as runner:
            halves = runner.run(_send_halves(rows, o, sink, batch, attempt))
        written = Written(attempt, written_ms, tuple(halves))
        return SendSummary(partition, len(halves), sink, batch, written)


def _sent(messages: Sequence[WriterCommitMessage | None]) -> list[SendSummary]:
    return [m for m in messages if isinstance(m, SendSummary)]


class RocketMQBatchWriter(_Writer, DataSourceArrowWriter):
    """Appends rows as messages: ``body`` (required), ``topic`` (unless the ``topic`` option
    is set), ``tags``, ``keys`` (a string or an array) and, with ``includeProperties``,
    ``properties``. At least once, a task Spark runs again sends its rows again; exactly
    once, a job's messages appear when it commits, and a failed job's never."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        # One sink per job: the job's tasks share it through the pickled writer.
        self.sink = f"batch-{uuid.uuid4().hex}" if options.exactly_once else None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendSummary:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, messages, 0, commit=True)
        log.info("sent %d messages in %d tasks", sum(s.sent for s in sent), len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, messages, 0, commit=False)
        log.warning("write aborted after %d messages were sent", sum(s.sent for s in sent))


class RocketMQStreamWriter(_Writer, DataSourceStreamArrowWriter):
    """A streaming query's sink, with the rows of :class:`RocketMQBatchWriter`. At least
    once, a micro-batch Spark replays is sent again; exactly once, each micro-batch's
    messages appear once, when it commits (see :mod:`pyrmq.spark.sink`)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.sink = None

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SendSummary:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, messages, batchId, commit=True)
        log.info("batch %d: sent %d messages", batchId, sum(s.sent for s in sent))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, messages, batchId, commit=False)
        log.warning(
            "batch %d aborted after %d messages were sent", batchId, sum(s.sent for s in sent)
        )
