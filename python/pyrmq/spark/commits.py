"""The bookkeeping of exactly-once writes: which task attempts' halves make up a batch, kept as
messages in the commit topic, and the settling of halves from it.

A commit stores, in this order: the handles of every half it is about to commit (in chunks
keyed ``sink:batch:attempt``), the commit record (keyed ``sink:batch``, on every broker of
the commit topic), and, once every half is ended, a "settled" mark (``sink:batch:settled``).
The record is the commit point. A later commit of the same batch (Spark replays a micro-batch
whose checkpoint entry was lost) finds the record: without the mark, the first commit was cut
short, so it commits the halves the handles name itself rather than wait for the broker to
ask; either way it rolls back its own halves.
"""

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence

from pyrmq.client.admin import Admin
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendStatus
from pyrmq.client.transaction import HalfMessage, TransactionProducer, TransactionState
from pyrmq.errors import BrokerError, PyrmqError
from pyrmq.spark.options import WriteOptions
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
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Handles per chunk: about 1 MiB of JSON, well under the 4 MiB message limit.
HANDLES_PER_CHUNK = 12_000
_ENDS_WINDOW = 64
# How long a lookup that found no record is trusted by the checker.
_MISS_TTL_S = 1.0


class SinkDataLossError(PyrmqError):
    """Halves of a committed batch are gone: the broker gave them up before they were
    committed (a write or an outage longer than its check window)."""


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
                self._admin = Admin(self.options.name_server)
            record = await find_record(self._admin, self.options.commit_topic, sink, batch)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: the sharers get it through shield
            raise
        finally:
            del self._asking[key]
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
    it as promised. A failed broker is logged: the others may do."""
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
    """A queue of ``topic`` on each broker that holds it (creating it where there is none)."""
    route = await admin.route(topic)
    if route is None:
        await admin.create_topic(topic, queue_nums=1)
        return []
    return [
        MessageQueue(topic, q.broker_name, 0)
        for q in route.queues
        if q.perm & 2 and q.write_queue_nums > 0
    ]


async def _load_handles(admin: Admin, topic: str, key: str) -> list[tuple[int, HalfMessage]]:
    out: list[tuple[int, HalfMessage]] = []
    seen: set[bytes] = set()
    for m in await _lookup(admin, topic, key):
        if m.body in seen:
            continue
        seen.add(m.body)
        try:
            written_ms, halves = decode_handles(m.body)
        except (ValueError, KeyError, TypeError):
            continue
        out += [(written_ms, h) for h in halves]
    return out


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
    back. Returns how many halves it ended."""
    topic = options.commit_topic
    earlier: list[tuple[int, HalfMessage]] = []
    async with Admin(options.name_server) as admin:
        record = await find_record(admin, topic, sink, batch)
        settled_key = f"{CommitRecord.key(sink, batch)}:settled"
        if record is None and commit:
            queues = await _commit_queues(admin, topic)
            for w in written:
                key = f"{CommitRecord.key(sink, batch)}:{w.attempt}"
                for chunk in encode_handles(w.halves, w.written_ms):
                    if not await _store(producer, topic, chunk, key, queues[:1]):
                        raise PyrmqError(f"the handles of batch {batch} could not be stored")
            record = CommitRecord(sink, batch, frozenset(w.attempt for w in written))
            if not await _store(
                producer, topic, record.encode(), CommitRecord.key(sink, batch), queues
            ):
                raise PyrmqError(f"the commit record of batch {batch} could not be stored")
        elif record is not None and not await _lookup(admin, topic, settled_key):
            ours = {w.attempt for w in written}
            for attempt in sorted(record.attempts - ours):
                key = f"{CommitRecord.key(sink, batch)}:{attempt}"
                found = await _load_handles(admin, topic, key)
                if not found:
                    raise PyrmqError(
                        f"batch {batch} was committed, but the handles of attempt {attempt} "
                        "cannot be read (a broker of the commit topic away?)"
                    )
                earlier += found
    winners = record.attempts if record is not None else frozenset()
    immunity_ms = options.check_immunity_s * 1000
    now_ms = int(time.time() * 1000)

    async def end(half: HalfMessage, state: TransactionState, written_ms: int) -> int:
        """1 ended, 0 ended before, -1 not reached."""
        try:
            await producer.end(half, state)
        except BrokerError as e:
            # Already ended. A commit by a check is fine; a half the broker gave up is lost,
            # which only a half older than its check immunity can be.
            if state is TransactionState.COMMIT and now_ms - written_ms >= immunity_ms:
                async with Admin(options.name_server) as admin:
                    delivered = await admin.query_message_by_unique_key(half.topic, half.msg_id)
                if not delivered:
                    raise SinkDataLossError(
                        f"message {half.msg_id} of batch {batch} was given up by the broker "
                        f"before it was committed: {e}"
                    ) from e
            return 0
        except PyrmqError as e:
            # Not reached: a later commit of the batch, or the broker's check, settles it.
            log.info("%s of %s not delivered: %s", state.name, half.msg_id, e)
            return -1
        return 1

    def states() -> Iterator[tuple[HalfMessage, TransactionState, int]]:
        for w in written:
            won = w.attempt in winners
            for h in w.halves:
                yield h, TransactionState.COMMIT if won else TransactionState.ROLLBACK, w.written_ms
        for written_ms, h in earlier:
            yield h, TransactionState.COMMIT, written_ms

    outcomes = await windowed((end(*args) for args in states()), _ENDS_WINDOW)
    done, unreached = outcomes.count(1), outcomes.count(-1)
    if record is not None and commit and not unreached:
        await _store(producer, topic, b"settled", settled_key, [])
    if unreached:
        log.warning(
            "batch %d of %s: %d halves not reached; the next commit of the batch, or the "
            "broker's check, ends them",
            batch,
            sink,
            unreached,
        )
    log.info(
        "batch %d of sink %s: %d halves ended, %d attempts won", batch, sink, done, len(winners)
    )
    return done
