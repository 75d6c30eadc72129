"""Writing DataFrames to topics, in batches or from a streaming query.

At least once (the default), each row is sent as it comes; a task or micro-batch that Spark
runs again sends its rows again.

Exactly once, each row is sent as a transactional half message, which no consumer sees yet.
The driver's commit of a write (a batch job, or micro-batch ``N`` of a query) first stores a
commit record in ``commitTopic``, keyed by the sink and the batch and naming the task attempts
whose halves count, and then commits those halves and rolls back the rest. The record is the
commit point: a micro-batch Spark replays after a crash (its commit record is there, its own
entry in the checkpoint is not) has its new halves rolled back, and a half whose end never
reached the broker is settled by the broker's check, which any producer of the sink's group
answers from the commit record: committed if its attempt is named, rolled back if another
attempt of its batch won, unknown (asked again later) while its batch has no record. A half
no one settles within the broker's check rounds (``transactionCheckMax`` times
``transactionCheckInterval``, 15 minutes by RocketMQ's defaults) is given up, never delivered:
a query stopped in the middle of a commit must run again within that time.
"""

import asyncio
import dataclasses
import json
import logging
import os
import threading
import uuid
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage

from pyrmq import properties as prop
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig
from pyrmq.client.message import Message, MessageExt, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.client.transaction import HalfMessage, TransactionProducer, TransactionState
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.spark.options import WriteOptions

__all__ = ["CommitRecord", "RocketMQBatchWriter", "RocketMQStreamWriter", "SendSummary"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SEND_WINDOW = 64
# What marks an exactly-once half: the write it belongs to and the task attempt that sent it.
SINK = "SPARK_SINK"
SINK_BATCH = "SPARK_SINK_BATCH"
SINK_ATTEMPT = "SPARK_SINK_ATTEMPT"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
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
        CHECK_IMMUNITY,
    }
)


@dataclasses.dataclass(frozen=True)
class SendSummary(WriterCommitMessage):
    """What one task of a write sent; with exactly-once delivery, the halves it left open."""

    partition_id: int
    sent: int
    sink: str | None = None
    batch: int = 0
    attempt: str = ""
    halves: tuple[HalfMessage, ...] = ()


@dataclasses.dataclass(frozen=True)
class CommitRecord:
    """The commit point of an exactly-once write: batch ``batch`` of ``sink`` is the halves of
    the task ``attempts`` named."""

    sink: str
    batch: int
    attempts: frozenset[str]

    @staticmethod
    def key(sink: str, batch: int) -> str:
        return f"{sink}:{batch}"

    def encode(self) -> bytes:
        body = {"sink": self.sink, "batch": self.batch, "attempts": sorted(self.attempts)}
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> "CommitRecord | None":
        try:
            raw = json.loads(body)
            return cls(str(raw["sink"]), int(raw["batch"]), frozenset(map(str, raw["attempts"])))
        except (ValueError, KeyError, TypeError):
            return None


async def find_record(admin: Admin, topic: str, sink: str, batch: int) -> CommitRecord | None:
    """The commit record of ``batch`` of ``sink``, if one was stored, from every broker the
    name servers know. Raises when they cannot be asked: no answer is not the same as no
    record."""
    key = CommitRecord.key(sink, batch)
    found = await admin.query_message(topic, key, max_num=64, every_broker=True)
    for m in found:
        record = CommitRecord.decode(m.body)
        if record is not None and (record.sink, record.batch) == (sink, batch):
            return record
    return None


class SinkChecker:
    """Answers a broker's check of an exactly-once half from its batch's commit record."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    async def __call__(self, half: MessageExt) -> TransactionState:
        props = half.properties
        sink, batch, attempt = props.get(SINK), props.get(SINK_BATCH), props.get(SINK_ATTEMPT)
        if sink is None or batch is None or attempt is None or not batch.isdigit():
            return TransactionState.UNKNOWN  # not the sink's: another producer of the group
        async with Admin(self.options.name_server) as admin:
            record = await find_record(admin, self.options.commit_topic, sink, int(batch))
        if record is None:
            return TransactionState.UNKNOWN
        return TransactionState.COMMIT if attempt in record.attempts else TransactionState.ROLLBACK


def _message(row: Mapping[str, Any], options: WriteOptions) -> Message:
    topic = options.topic or row.get("topic")
    if not topic:
        raise ConfigError("a row has no topic: set the topic option or a topic column")
    body = row.get("body")
    if body is None:
        raise ConfigError("a row has no body")
    keys = row.get("keys")
    if isinstance(keys, list) and any(prop.KEY_SEPARATOR in k for k in keys):
        raise ConfigError(f"a key of {keys!r} holds a space, RocketMQ's key separator")
    user = row.get("properties") if options.include_properties else None
    reserved = sorted(set(user or ()) & RESERVED)
    if reserved:
        raise ConfigError(f"properties {', '.join(reserved)} are set by the message's columns")
    return Message(
        topic,
        bytes(body) if isinstance(body, bytearray) else body,
        tags=row.get("tags"),
        keys=keys if keys else None,
        properties=user or None,
    )


async def _windowed(coros: Iterator[Any], window: int = _SEND_WINDOW) -> list[Any]:
    """Runs the coroutines ``window`` at a time; their results in order. The first failure
    cancels the rest and raises."""
    results: dict[int, Any] = {}
    pending: dict[asyncio.Task[Any], int] = {}
    try:
        for index, coro in enumerate(coros):
            pending[asyncio.ensure_future(coro)] = index
            if len(pending) >= window:
                done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    results[pending.pop(task)] = task.result()
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                results[pending.pop(task)] = task.result()
    finally:
        for task in pending:
            task.cancel()
    return [results[i] for i in range(len(results))]


async def _send_all(rows: Iterator[Row], options: WriteOptions) -> int:
    config = ClientConfig(namesrv_addr=options.name_server)
    async with Producer(options.producer_group, client_config=config) as producer:
        sends = (producer.send(_message(row.asDict(), options)) for row in rows)
        return len(await _windowed(sends))


async def _send_halves(
    rows: Iterator[Row], options: WriteOptions, sink: str, batch: int, attempt: str
) -> list[HalfMessage]:
    config = ClientConfig(namesrv_addr=options.name_server)
    checker = SinkChecker(options)
    async with TransactionProducer(
        options.producer_group, checker=checker, client_config=config
    ) as producer:

        async def half(row: Row) -> HalfMessage:
            msg = _message(row.asDict(), options)
            msg.properties.update({SINK: sink, SINK_BATCH: str(batch), SINK_ATTEMPT: attempt})
            if options.check_immunity_s is not None:
                msg.properties[CHECK_IMMUNITY] = str(options.check_immunity_s)
            result, handle = await producer.send_half(msg)
            if result.status is not SendStatus.OK:
                # Stored, but not as safely as the broker promises: this attempt fails, and
                # its halves are rolled back once another attempt's are committed.
                raise PyrmqError(f"a half was stored with {result.status.name}")
            return handle

        return await _windowed(half(row) for row in rows)


async def _settle(
    producer: TransactionProducer,
    options: WriteOptions,
    summaries: Sequence[SendSummary],
    batch: int,
    *,
    commit: bool,
) -> None:
    """Ends the halves of one write: with ``commit``, stores its commit record (unless an
    earlier run did) and commits the halves of the attempts it names; every other half is
    rolled back."""
    sinks = {s.sink for s in summaries if s.sink is not None}
    if not sinks:
        return
    if len(sinks) > 1:
        raise PyrmqError(f"one write, several sinks: {sorted(sinks)}")
    sink = sinks.pop()
    if any(s.batch != batch for s in summaries):
        # The halves name another batch than Spark commits: their checks would be wrong.
        raise PyrmqError(f"batch {batch} was written as {sorted({s.batch for s in summaries})}")
    async with Admin(options.name_server) as admin:
        record = await find_record(admin, options.commit_topic, sink, batch)
        if record is None and commit:
            record = CommitRecord(sink, batch, frozenset(s.attempt for s in summaries))
            if await admin.route(options.commit_topic) is None:
                await admin.create_topic(options.commit_topic, queue_nums=1)
            key = CommitRecord.key(sink, batch)
            stored = await producer.send(Message(options.commit_topic, record.encode(), keys=key))
            if stored.status is not SendStatus.OK:
                raise PyrmqError(f"the commit record of batch {batch} was {stored.status.name}")
    winners = record.attempts if record is not None else frozenset()

    async def end(half: HalfMessage, state: TransactionState) -> int:
        try:
            await producer.end(half, state)
        except PyrmqError as e:
            # Already ended by a check, or not reached: the check settles it either way.
            log.info("%s of %s: %s", state.name, half.msg_id, e)
            return 0
        return 1

    ends = (
        end(h, TransactionState.COMMIT if s.attempt in winners else TransactionState.ROLLBACK)
        for s in summaries
        for h in s.halves
    )
    done = sum(await _windowed(ends))
    log.info(
        "batch %d of sink %s: %d halves ended, %d attempts won", batch, sink, done, len(winners)
    )


class _Responder:
    """A producer of the sink's group that lives as long as its process: the driver's commits
    run on it, and between them it answers the broker's checks of halves left open (by a
    task attempt that failed, or a commit cut short). Spark runs a streaming query's commits
    in one process for the whole query."""

    _running: ClassVar[dict[tuple[Any, ...], "_Responder"]] = {}
    _lock: ClassVar = threading.Lock()

    def __init__(self, options: WriteOptions) -> None:
        self.loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self.loop.run_forever, name="pyrmq-sink", daemon=True)
        thread.start()
        config = ClientConfig(namesrv_addr=options.name_server)
        self.producer = TransactionProducer(
            options.producer_group, checker=SinkChecker(options), client_config=config
        )
        self.run(self.producer.start())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    @classmethod
    def settle(
        cls, options: WriteOptions, summaries: Sequence[SendSummary], batch: int, *, commit: bool
    ) -> None:
        # Keyed by process too: a forked child has the dict but not the thread.
        key = (os.getpid(), options.name_server, options.producer_group, options.commit_topic)
        with cls._lock:
            responder = cls._running.get(key)
            if responder is None:
                responder = cls._running[key] = cls(options)
        responder.run(_settle(responder.producer, options, summaries, batch, commit=commit))


def _task() -> tuple[int, Any]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return (ctx.partitionId() if ctx is not None else 0), ctx


class _Writer:
    """What the batch and the streaming writer share: ``write`` on the executors."""

    options: WriteOptions
    sink: str | None
    """The sink of an exactly-once batch write (streaming writes take the query's id)."""

    def _write(self, rows: Iterator[Row]) -> SendSummary:
        partition, ctx = _task()
        o = self.options
        if not o.exactly_once:
            with asyncio.Runner() as runner:
                return SendSummary(partition, runner.run(_send_all(rows, o)))
        if self.sink is not None:  # a batch job
            sink, batch = self.sink, 0
        else:
            query = ctx.getLocalProperty(_QUERY_ID) if ctx is not None else None
            batch_text = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
            named = o.sink_id or query
            if batch_text is None or not named:
                raise PyrmqError("an exactly-once stream write ran outside a micro-batch")
            sink, batch = str(named), int(batch_text)
        attempt = uuid.uuid4().hex
        with asyncio.Runner() as runner:
            halves = runner.run(_send_halves(rows, o, sink, batch, attempt))
        return SendSummary(partition, len(halves), sink, batch, attempt, tuple(halves))


def _sent(messages: Sequence[WriterCommitMessage | None]) -> list[SendSummary]:
    return [m for m in messages if isinstance(m, SendSummary)]


class RocketMQBatchWriter(_Writer, DataSourceWriter):
    """Appends rows as messages: ``body`` (required), ``topic`` (unless the ``topic`` option
    is set), ``tags``, ``keys`` (a string or an array) and, with ``includeProperties``,
    ``properties``. At least once, a task Spark runs again sends its rows again; exactly
    once, a job's messages appear when it commits, and a failed job's never."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        # One sink per job: the job's tasks share it through the pickled writer.
        self.sink = f"batch-{uuid.uuid4().hex}" if options.exactly_once else None

    def write(self, iterator: Iterator[Row]) -> SendSummary:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, sent, 0, commit=True)
        log.info("sent %d messages in %d tasks", sum(s.sent for s in sent), len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, sent, 0, commit=False)
        log.warning("write aborted after %d messages were sent", sum(s.sent for s in sent))


class RocketMQStreamWriter(_Writer, DataSourceStreamWriter):
    """A streaming query's sink, with the rows of :class:`RocketMQBatchWriter`. At least
    once, a micro-batch Spark replays is sent again; exactly once, each micro-batch's
    messages appear once, when it commits (see :mod:`pyrmq.spark.sink`)."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.sink = None

    def write(self, iterator: Iterator[Row]) -> SendSummary:
        return self._write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, sent, batchId, commit=True)
        log.info("batch %d: sent %d messages", batchId, sum(s.sent for s in sent))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        sent = _sent(messages)
        if self.options.exactly_once:
            _Responder.settle(self.options, sent, batchId, commit=False)
        log.warning(
            "batch %d aborted after %d messages were sent", batchId, sum(s.sent for s in sent)
        )
