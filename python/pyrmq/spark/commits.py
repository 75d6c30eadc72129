"""The bookkeeping of exactly-once writes: which task attempts' halves make up a batch, kept as
messages in the commit topic, and the settling of halves from it.

A commit first checks that its oldest half is younger than its check immunity (else the broker
may give halves up while they are ended, and the batch fails whole, to be written again). It
then stores, in this order: the handles of every half it is about to commit (chunk ``i`` of
attempt ``a`` keyed ``sink:batch:a:i``), the commit record (keyed ``sink:batch``, naming the
attempts, their chunk counts and the producer group, on every broker of the commit topic), and,
once every half is ended, a "settled" mark (``sink:batch:settled``). The record is the commit
point. A later commit of the same batch (Spark replays a micro-batch whose checkpoint entry was
lost) finds the record: without the mark, the first commit was cut short, so it commits the
halves the handles name itself rather than wait for the broker to ask; either way it rolls
back its own halves.
"""

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

from pyrmq.client.admin import Admin
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.transaction import HalfMessage, TransactionProducer, TransactionState
from pyrmq.errors import BrokerError, PyrmqError
from pyrmq.spark.options import WriteOptions, admin_client
from pyrmq.spark.windowed import windowed

__all__ = [
    "CommitRecord",
    "SinkChecker",
    "SinkDataLossError",
    "Written",
    "decode_handles",
    "encode_handles",
    "find_record",
    "settle",
]

log = logging.getLogger(__name__)

# What marks an exactly-once half: the write it belongs to and the task attempt that sent it.
SINK = "SPARK_SINK"
SINK_BATCH = "SPARK_SINK_BATCH"
SINK_ATTEMPT = "SPARK_SINK_ATTEMPT"
# Handles per chunk: about 1 MiB of JSON, well under the 4 MiB message limit.
HANDLES_PER_CHUNK = 12_000
_ENDS_WINDOW = 64
# How long a lookup that found no record is trusted by the checker, and how many it keeps.
_MISS_TTL_S = 1.0
_CACHED_MAX = 10_000
# A commit wants this much of its halves' check immunity left (a tenth of it, at least 5 s).
_MARGIN_MIN_MS = 5_000
# Refusals of an end whose half is gone: pyrmq's, and Java brokers'.
_ENDED = ("already ended", "Find prepared transaction message failed")


class _NotCommitted(PyrmqError):
    """A commit stopped before its record: its halves are rolled back."""


class SinkDataLossError(PyrmqError):
    """Halves of a committed batch are gone: the broker gave them up before they were
    committed (a write or an outage longer than its check window)."""


@dataclasses.dataclass(frozen=True)
class CommitRecord:
    """The commit point of an exactly-once write: batch ``batch`` of ``sink`` is the halves of
    the task attempts ``chunks`` names (with how many chunks of handles each has), sent by
    ``producer_group``."""

    sink: str
    batch: int
    chunks: Mapping[str, int]
    producer_group: str

    @property
    def attempts(self) -> frozenset[str]:
        return frozenset(self.chunks)

    @staticmethod
    def key(sink: str, batch: int) -> str:
        return f"{sink}:{batch}"

    def encode(self) -> bytes:
        body = {
            "sink": self.sink,
            "batch": self.batch,
            "attempts": dict(sorted(self.chunks.items())),
            "group": self.producer_group,
        }
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> "CommitRecord | None":
        try:
            raw = json.loads(body)
            chunks = {str(a): int(n) for a, n in raw["attempts"].items()}
            return cls(str(raw["sink"]), int(raw["batch"]), chunks, str(raw["group"]))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def encode_handles(halves: Sequence[HalfMessage], written_ms: int) -> list[bytes]:
    """``halves`` as JSON chunks (the client compresses them on the wire)."""
    chunks = []
    for start in range(0, len(halves), HANDLES_PER_CHUNK):
        part = halves[start : start + HANDLES_PER_CHUNK]
        body = {
            "written_ms": written_ms,
            "halves": [
                [h.broker_name, h.topic, h.commit_log_offset, h.queue_offset, h.msg_id]
                for h in part
            ],
        }
        chunks.append(json.dumps(body, separators=(",", ":")).encode())
    return chunks


def decode_handles(body: bytes) -> tuple[int, list[HalfMessage]]:
    raw = json.loads(body)
    halves = [
        HalfMessage(str(b), int(clo), int(qo), str(msg_id), "", str(topic))
        for b, topic, clo, qo, msg_id in raw["halves"]
    ]
    return int(raw["written_ms"]), halves


async def _lookup(admin: Admin, topic: str, key: str) -> list[MessageExt]:
    """The commit topic's messages with ``key``, from every broker the name servers know.
    Raises when they cannot be asked: no answer is not the same as no record."""
    return await admin.query_message(topic, key, max_num=64, every_broker=True)


async def find_record(admin: Admin, topic: str, sink: str, batch: int) -> CommitRecord | None:
    """The commit record of ``batch`` of ``sink``, if one was stored."""
    for m in await _lookup(admin, topic, CommitRecord.key(sink, batch)):
        record = CommitRecord.decode(m.body)
        if record is not None and (record.sink, record.batch) == (sink, batch):
            return record
    return None


class SinkChecker:
    """Answers a broker's check of an exactly-once half from its batch's commit record. One
    lookup serves every half of a batch: records found are kept, misses for a second."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self._admin: Admin | None = None
        self._found: dict[tuple[str, int], CommitRecord] = {}
        self._missed: dict[tuple[str, int], float] = {}
        self._asking: dict[tuple[str, int], asyncio.Future[CommitRecord | None]] = {}

    async def close(self) -> None:
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

    async def record(self, sink: str, batch: int) -> CommitRecord | None:
        key = (sink, batch)
        if key in self._found:
            return self._found[key]
        if time.monotonic() - self._missed.get(key, -_MISS_TTL_S) < _MISS_TTL_S:
            return None
        asking = self._asking.get(key)
        if asking is not None:
            return await asyncio.shield(asking)
        future: asyncio.Future[CommitRecord | None] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            if self._admin is None:
                self._admin = admin_client(self.options)
            record = await find_record(self._admin, self.options.commit_topic, sink, batch)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: the sharers get it through shield
            raise
        finally:
            del self._asking[key]
        if len(self._found) + len(self._missed) > _CACHED_MAX:
            self._found.clear()
            self._missed.clear()
        if record is None:
            self._missed[key] = time.monotonic()
        else:
            self._found[key] = record
        future.set_result(record)
        return record

    async def __call__(self, half: MessageExt) -> TransactionState:
        props = half.properties
        sink, batch, attempt = props.get(SINK), props.get(SINK_BATCH), props.get(SINK_ATTEMPT)
        if sink is None or batch is None or attempt is None or not batch.isdigit():
            return TransactionState.UNKNOWN  # not the sink's: another producer of the group
        record = await self.record(sink, int(batch))
        if record is None:
            return TransactionState.UNKNOWN
        return TransactionState.COMMIT if attempt in record.attempts else TransactionState.ROLLBACK


@dataclasses.dataclass(frozen=True)
class Written:
    """One task attempt's halves, as its commit message brings them to the driver."""

    attempt: str
    written_ms: int
    halves: tuple[HalfMessage, ...]


async def _store(
    producer: TransactionProducer, topic: str, body: bytes, key: str, queues: Iterable[MessageQueue]
) -> int:
    """Stores ``body`` in each of ``queues`` (or anywhere when there are none); how many took
    it as promised. A failed broker is logged."""
    targets: list[MessageQueue | None] = [*queues] or [None]
    stored = 0
    for mq in targets:
        try:
            result = await producer.send(Message(topic, body, keys=key), queue=mq)
        except PyrmqError as e:
            log.warning("%s not stored on %s: %s", key, mq.broker_name if mq else topic, e)
            continue
        stored += result.status is SendStatus.OK
    return stored


async def _commit_queues(admin: Admin, topic: str) -> list[MessageQueue]:
    """A queue of ``topic`` on each broker that holds it, creating the topic (and waiting for
    the name servers to know it) where none does."""
    route = await admin.route(topic)
    if route is None:
        created = len(await admin.create_topic(topic, queue_nums=1))
        for _ in range(100):
            route = await admin.route(topic)
            if route is not None and len({q.broker_name for q in route.queues}) >= created:
                break
            await asyncio.sleep(0.1)
        else:
            raise _NotCommitted(f"commit topic {topic} was created but the name servers lag")
    return [
        MessageQueue(topic, q.broker_name, 0)
        for q in route.queues
        if q.perm & 2 and q.write_queue_nums > 0
    ]


async def _load_handles(
    admin: Admin, topic: str, key: str, chunks: int
) -> list[tuple[int, HalfMessage]] | None:
    """The handles stored under ``key``'s ``chunks`` chunks; None if one cannot be read."""
    out: list[tuple[int, HalfMessage]] = []
    for index in range(chunks):
        for m in await _lookup(admin, topic, f"{key}:{index}"):
            try:
                written_ms, halves = decode_handles(m.body)
            except (ValueError, KeyError, TypeError):
                continue
            out += [(written_ms, h) for h in halves]
            break
        else:
            return None
    return out


def _gone(e: BrokerError) -> bool:
    return any(text in (e.remark or "") for text in _ENDED)


async def settle(
    producer: TransactionProducer,
    options: WriteOptions,
    sink: str,
    batch: int,
    written: Sequence[Written],
    *,
    commit: bool,
) -> int:
    """Ends the halves of one write. With ``commit``: stores the handles, the record and, at
    the end, the settled mark (unless an earlier commit of the batch stored the record, whose
    halves it then commits itself if that commit did not finish); every other half is rolled
    back. Returns how many halves it ended.

    Raises:
        PyrmqError: The batch could not be committed (its halves are rolled back, and Spark
            writes it again), or a replay cannot read what the first commit stored.
        SinkDataLossError: Halves the record names were given up by the broker; the batch is
            marked settled, so that a restart goes on.
    """
    topic = options.commit_topic
    key = CommitRecord.key(sink, batch)
    settled_key = f"{key}:settled"
    immunity_ms = options.check_immunity_s * 1000
    earlier: list[tuple[int, HalfMessage]] = []
    failure: PyrmqError | None = None
    async with admin_client(options) as admin:
        record = await find_record(admin, topic, sink, batch)
        if record is None and commit:
            oldest = min((w.written_ms for w in written), default=None)
            margin_ms = max(_MARGIN_MIN_MS, immunity_ms // 10)
            if oldest is not None and _now_ms() - oldest > immunity_ms - margin_ms:
                failure = PyrmqError(
                    f"batch {batch} took {(_now_ms() - oldest) // 1000} s to write, too close "
                    f"to checkImmunitySeconds ({options.check_immunity_s}) to commit safely: "
                    "it is rolled back; raise checkImmunitySeconds"
                )
                commit = False
            else:
                try:
                    record = await _commit(producer, admin, options, sink, batch, written)
                except _NotCommitted as e:
                    failure, commit = e, False
        elif record is not None and not await _lookup(admin, topic, settled_key):
            if record.producer_group != options.producer_group:
                failure = PyrmqError(
                    f"batch {batch} was committed by producer group {record.producer_group}, "
                    f"and its commit did not finish: write with producerGroup="
                    f"{record.producer_group} to finish it"
                )
            ours = {w.attempt for w in written}
            for attempt, chunks in sorted(record.chunks.items()):
                if attempt in ours or failure is not None:
                    continue
                found = await _load_handles(admin, topic, f"{key}:{attempt}", chunks)
                if found is None:
                    failure = PyrmqError(
                        f"batch {batch} was committed, but the handles of attempt {attempt} "
                        "cannot all be read (a broker of the commit topic away?)"
                    )
                else:
                    earlier += found
            if failure is not None:
                earlier = []
        winners = record.attempts if record is not None else frozenset()
        lost: list[str] = []

        async def delivered(half: HalfMessage) -> bool:
            return bool(await admin.query_message_by_unique_key(half.topic, half.msg_id))

        async def end(half: HalfMessage, state: TransactionState, written_ms: int) -> int:
            """1 ended, 0 ended before, -1 not reached."""
            try:
                await producer.end(half, state)
            except BrokerError as e:
                if not _gone(e):
                    log.warning("%s of %s refused: %s", state.name, half.msg_id, e)
                    return -1
                # Already ended. A commit by a check is fine; a half the broker gave up is
                # lost, which only a half older than its check immunity can be.
                old = _now_ms() - written_ms >= immunity_ms
                if state is TransactionState.COMMIT and old and not await delivered(half):
                    lost.append(half.msg_id)
                return 0
            except PyrmqError as e:
                # Not reached: a later commit of the batch, or the broker's check, ends it.
                log.info("%s of %s not delivered: %s", state.name, half.msg_id, e)
                return -1
            return 1

        def states() -> Iterator[tuple[HalfMessage, TransactionState, int]]:
            for w in written:
                won = commit and w.attempt in winners
                state = TransactionState.COMMIT if won else TransactionState.ROLLBACK
                for h in w.halves:
                    yield h, state, w.written_ms
            for written_ms, h in earlier:
                yield h, TransactionState.COMMIT, written_ms

        outcomes = await windowed((end(*args) for args in states()), _ENDS_WINDOW)
    done, unreached = outcomes.count(1), outcomes.count(-1)
    if record is not None and failure is None and not unreached:
        await _store(producer, topic, b"settled", settled_key, [])
    log.info("batch %d of %s: %d halves ended, %d attempts won", batch, sink, done, len(winners))
    if unreached:
        log.warning(
            "batch %d of %s: %d halves not reached; the next commit of the batch, or the "
            "broker's check, ends them",
            batch,
            sink,
            unreached,
        )
    if lost:
        raise SinkDataLossError(
            f"{len(lost)} messages of batch {batch} were given up by the broker before they "
            f"were committed (first: {lost[0]}); the batch is marked settled"
        )
    if failure is not None:
        raise failure
    return done


async def _commit(
    producer: TransactionProducer,
    admin: Admin,
    options: WriteOptions,
    sink: str,
    batch: int,
    written: Sequence[Written],
) -> CommitRecord:
    """Stores the handles, then the record on every broker of the commit topic."""
    topic = options.commit_topic
    key = CommitRecord.key(sink, batch)
    queues = await _commit_queues(admin, topic)
    chunks: dict[str, int] = {}
    for w in written:
        parts = encode_handles(w.halves, w.written_ms)
        for index, chunk in enumerate(parts):
            if not await _store(producer, topic, chunk, f"{key}:{w.attempt}:{index}", []):
                raise _NotCommitted(f"the handles of {key} could not be stored: rolled back")
        chunks[w.attempt] = len(parts)
    record = CommitRecord(sink, batch, chunks, options.producer_group)
    stored = await _store(producer, topic, record.encode(), key, queues)
    if stored < len(queues):
        # On fewer brokers than hold the topic, a replay that cannot reach them would miss
        # the record and commit the batch twice; stored nowhere, it is no commit at all.
        raise PyrmqError(f"the commit record {key} went to {stored} of {len(queues)} brokers")
    return record


def _now_ms() -> int:
    return int(time.time() * 1000)
