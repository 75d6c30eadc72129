"""Transaction messages: half messages held back until their producer commits or rolls back.

As RocketMQ does it: a half message is stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` with its real
topic and queue in properties, where no consumer reads it. A commit stores it again under its
real topic; a rollback drops it. Either way an op record naming the half's queue offset goes to
``RMQ_SYS_TRANS_OP_HALF_TOPIC``, so a restarted broker knows which halves are still open (it
reads both topics at start). A half left open longer than ``transactionTimeOut`` is checked:
the broker asks a live producer of its group, every ``transactionCheckInterval``, up to
``transactionCheckMax`` times, and then gives it up: it goes to ``TRANS_CHECK_MAX_TIME_TOPIC``,
where no consumer reads it but an operator finds it, and may have it checked again from there
(RESUME_CHECK_HALF_MESSAGE). A round counts whether or not a producer
of the group was there to ask, as in RocketMQ, so a half whose producer is gone for good does
not stay open for ever.

A start reads both topics only from a checkpoint (``config/transactions.json``, written after
each check round and at stop): every half below its half offset has ended, and every op record
of a later half lies at or past its op offset, since an op follows its half and ops are
appended in order. An old checkpoint is still true, only further back. It also keeps how
many checks each open half has had.

Open halves are kept in order of when each is next due, so a round touches only the due ones,
oldest first. A round runs on the broker's event loop: it yields between short slices, so sends
and pulls are served while it runs, and it stops after a bounded amount of work; the halves it
did not reach are the oldest due, and go first next round.

Producers of RocketMQ 5's gRPC protocol are asked over their telemetry stream, 4.x producers
of the half's producer group with CHECK_TRANSACTION_STATE on their connection, the half as its
body under its real topic and queue (as RocketMQ restores them); either answers with an end.
"""

import asyncio
import dataclasses
import logging
import struct
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sortedcontainers import SortedList

from pyrmq.broker.records import reconsume_times_at, sys_flag_of
from pyrmq.broker.state.json_file import load_json, store_json
from pyrmq.errors import ConfigError, MessageIllegalError
from pyrmq.properties import (
    CHECK_IMMUNITY,
    PRODUCER_GROUP,
    TRAN_MSG,
    UNIQ_KEY,
    encode_properties,
    holding_back,
)
from pyrmq.store import GetMessageStatus, MessageStore, PutResult, StoredMessage

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["HALF_TOPIC", "OP_TOPIC", "HalfMessage", "TransactionError", "TransactionService"]

log = logging.getLogger(__name__)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
GIVEN_UP_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
# RocketMQ's op record tag for an ended half.
OP_TAG = "d"
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
# A round yields to the event loop after this much work: about what a send or pull waits
# behind the checks at most (one half costs some 10-30 us).
SLICE_S = 0.01
# A round stops after this share of the check interval's length of work (at least
# MIN_ROUND_S), then waits the interval: checks take at most about a fifth of the loop even
# with a backlog, which still drains at a pace that does not shrink as the interval grows.
ROUND_SHARE = 0.25
MIN_ROUND_S = 0.05


class TransactionError(Exception):
    """An end of transaction the broker cannot carry out: unknown or already ended."""


@dataclasses.dataclass(slots=True)
class HalfMessage:
    queue_offset: int
    phy_offset: int
    topic: str
    producer_group: str
    # Epoch ms from which the half is checked, and when it was checked last.
    check_from_ms: int
    checks: int = 0
    checked_ms: int = 0
    # When it is next checked: its key, with its queue offset, in the service's due order.
    due_ms: int = 0
    # The op topic's end when it was stored (or an earlier offset): its op comes after.
    op_from: int = 0


Asker = Callable[[StoredMessage, str], Awaitable[bool]]


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """Halves below ``half_offset`` have ended; ops of later ones lie from ``op_offset``.
    ``checks``: how many times each open half (by queue offset) has been checked, so that a
    restart does not give every half ``transactionCheckMax`` checks anew (RocketMQ keeps the
    count in the half, stored again at each check). ``given_up``: the queue offsets of the
    halves given up after their last check, which a late end still commits or rolls back.

    >>> Checkpoint.from_json(Checkpoint(3, 7, {4: 2}, frozenset({1})).to_json())
    Checkpoint(half_offset=3, op_offset=7, checks={4: 2}, given_up=frozenset({1}))
    >>> Checkpoint.from_json({"halfOffset": 3, "opOffset": 7, "checks": {"x": 1, "5": -1}})
    Checkpoint(half_offset=3, op_offset=7, checks={}, given_up=frozenset())
    """

    half_offset: int = 0
    op_offset: int = 0
    checks: dict[int, int] = dataclasses.field(default_factory=dict)
    given_up: frozenset[int] = frozenset()

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"halfOffset": self.half_offset, "opOffset": self.op_offset}
        if self.checks:
            out["checks"] = {str(k): v for k, v in self.checks.items()}
        if self.given_up:
            out["givenUp"] = sorted(self.given_up)
        return out

    @classmethod
    def from_json(cls, value: object) -> "Checkpoint":
        if not isinstance(value, dict):
            return cls()
        half, op = value.get("halfOffset"), value.get("opOffset")
        if type(half) is not int or type(op) is not int or half < 0 or op < 0:
            return cls()
        checks = value.get("checks")
        counted = {
            int(k): v
            for k, v in (checks.items() if isinstance(checks, dict) else ())
            if isinstance(k, str) and k.isdigit() and type(v) is int and v > 0
        }
        given_up = value.get("givenUp")
        kept = frozenset(
            o for o in (given_up if isinstance(given_up, list) else ()) if type(o) is int and o >= 0
        )
        return cls(half, op, counted, kept)


class TransactionService:
    def __init__(self, broker: "BrokerController", checkpoint: Path | None = None) -> None:
        self.broker = broker
        self.checkpoint_path = checkpoint
        self._checkpoint_lock = threading.Lock()
        self.open: dict[int, HalfMessage] = {}
        self.given_up: set[int] = set()
        """Queue offsets of halves given up, which a late end still ends, as RocketMQ's
        does (it finds a half by its offset whatever became of it)."""
        # (due_ms, queue_offset) of every open half, soonest first; ties in the order sent.
        self._due: SortedList = SortedList()
        # Asks a live producer to resolve a half (``stored``, transaction id); True if asked.
        self.askers: list[Asker] = []

    @property
    def _settings(self) -> tuple[int, int, int]:
        c = self.broker.config
        return c.transaction_timeout_ms, c.transaction_check_interval_ms, c.transaction_check_max

    def load(self) -> None:
        """Finds the halves still open: every half past the checkpoint not named by an op
        record past it."""
        store = self.broker.store
        start = self._read_checkpoint()
        ended = {int(body) for body in _bodies(store, OP_TOPIC, start.op_offset) if body.isdigit()}
        timeout_ms = self._settings[0]
        for stored in _messages(store, HALF_TOPIC, start.half_offset):
            if stored.queue_offset not in ended:
                self._track(stored, timeout_ms, start.op_offset)
        for queue_offset, checks in start.checks.items():
            half = self.open.get(queue_offset)
            if half is not None:
                half.checks = checks
        self.given_up = set(start.given_up)
        if self.open:
            log.info(
                "transactions: %d half messages still open (read from half %d, op %d)",
                len(self.open),
                start.half_offset,
                start.op_offset,
            )

    def _read_checkpoint(self) -> Checkpoint:
        if self.checkpoint_path is None:
            return Checkpoint()
        try:
            found = Checkpoint.from_json(load_json(self.checkpoint_path))
        except ConfigError as e:
            log.error("transactions: %s; reading every stored half", e)
            return Checkpoint()
        store = self.broker.store
        # Past the topics' ends, it belongs to files no longer here: read them whole.
        if found.half_offset > store.max_offset(HALF_TOPIC, 0) or found.op_offset > (
            store.max_offset(OP_TOPIC, 0)
        ):
            log.warning("transactions: checkpoint %s is past the stored halves", found)
            return Checkpoint()
        return found

    def checkpoint(self) -> Checkpoint:
        """Where the next start may begin reading: the oldest open half, or the ends."""
        store = self.broker.store
        # Those whose record retention took can no longer be ended.
        first = store.min_offset(HALF_TOPIC, 0)
        self.given_up = {o for o in self.given_up if o >= first}
        given_up = frozenset(self.given_up)
        if self.open:
            oldest = self.open[min(self.open)]
            checks = {h.queue_offset: h.checks for h in self.open.values() if h.checks}
            return Checkpoint(oldest.queue_offset, oldest.op_from, checks, given_up)
        return Checkpoint(
            store.max_offset(HALF_TOPIC, 0), store.max_offset(OP_TOPIC, 0), given_up=given_up
        )

    async def save_checkpoint(self) -> None:
        """Writes :meth:`checkpoint`, taken on the loop, from a worker thread. The CommitLog
        is flushed first: the checkpoint counts halves ended by appends that, under
        ASYNC_FLUSH (or before a SYNC_FLUSH end is answered), may not be on disk yet, and a
        checkpoint past a half whose end a power loss took would leave it unchecked."""
        if self.checkpoint_path is not None:
            value = self.checkpoint().to_json()
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._write_checkpoint, self.checkpoint_path, value)

    def _write_checkpoint(self, path: Path, value: dict[str, object]) -> None:
        # A stop's last save may start while a round's is still writing the same file.
        with self._checkpoint_lock:
            self.broker.store.flush()
            store_json(path, value)

    def _track(self, stored: StoredMessage, timeout_ms: int, op_from: int) -> None:
        self._open(
            stored.queue_offset,
            stored.phy_offset,
            stored.store_timestamp_ms,
            stored.property(REAL_TOPIC) or "",
            stored.property(PRODUCER_GROUP) or "",
            stored.property(CHECK_IMMUNITY),
            timeout_ms,
            op_from,
        )

    def _open(
        self,
        queue_offset: int,
        phy_offset: int,
        store_timestamp_ms: int,
        topic: str,
        producer_group: str,
        immunity: str | None,
        timeout_ms: int,
        op_from: int,
    ) -> None:
        wait_ms = timeout_ms
        if immunity is not None and immunity.strip().isdigit():
            wait_ms = max(timeout_ms, int(immunity) * 1000)
        old = self.open.get(queue_offset)
        if old is not None:
            self._forget(old)
        check_from_ms = store_timestamp_ms + wait_ms
        self.open[queue_offset] = HalfMessage(
            queue_offset=queue_offset,
            phy_offset=phy_offset,
            topic=topic,
            producer_group=producer_group,
            check_from_ms=check_from_ms,
            due_ms=check_from_ms,
            op_from=op_from,
        )
        self._due.add((check_from_ms, queue_offset))

    def _due_again(self, half: HalfMessage, due_ms: int) -> None:
        self._due.discard((half.due_ms, half.queue_offset))
        half.due_ms = due_ms
        self._due.add((due_ms, half.queue_offset))

    def _forget(self, half: HalfMessage) -> None:
        """Drops an ended (or vanished) half from the open ones and from the due order."""
        del self.open[half.queue_offset]
        self._due.discard((half.due_ms, half.queue_offset))

    def prepare(
        self,
        topic: str,
        queue_id: int,
        body: bytes,
        properties: dict[str, str],
        producer_group: str,
        *,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str | None = None,
    ) -> PutResult:
        """Stores a half message (appended now; durable as :meth:`BrokerController.put_now`
        describes) and tracks it. Raises :class:`MessageIllegalError` for a delayed one (a
        level of 0 or a timer already due delays nothing): the store would hold it back
        under the schedule or timer topic rather than as a half."""
        delays = holding_back(properties, time.time_ns() // 1_000_000)
        if delays:
            raise MessageIllegalError(
                f"a transactional message cannot have a delay level or timer ({', '.join(delays)})"
            )
        props = dict(properties)
        props[REAL_TOPIC] = topic
        props[REAL_QID] = str(queue_id)
        props[TRAN_MSG] = "true"
        props[PRODUCER_GROUP] = producer_group
        return self._put_half(body, props, flag, sys_flag, born_timestamp_ms, born_host)

    def _put_half(
        self,
        body: bytes,
        props: dict[str, str],
        flag: int,
        sys_flag: int,
        born_timestamp_ms: int | None,
        born_host: str | None,
        reconsume_times: int = 0,
    ) -> PutResult:
        """Appends a half (``props`` naming its real topic and group) and tracks it."""
        broker = self.broker
        broker.topics.create_system(HALF_TOPIC, 1, 6)
        op_from = broker.store.max_offset(OP_TOPIC, 0)
        result = broker.put_now(
            lambda: broker.store.put(
                HALF_TOPIC,
                body,
                queue_id=0,
                properties=props,
                flag=flag,
                sys_flag=sys_flag & ~SYSFLAG_TRANSACTION_MASK,
                born_timestamp_ms=born_timestamp_ms,
                born_host=born_host,
                reconsume_times=reconsume_times,
                internal=True,
                wait_for_flush=False,
            )
        )
        # Tracked from what was put: no read of the record back.
        self._open(
            result.queue_offset,
            result.phy_offset,
            result.store_timestamp_ms,
            props.get(REAL_TOPIC, ""),
            props.get(PRODUCER_GROUP, ""),
            props.get(CHECK_IMMUNITY),
            self._settings[0],
            op_from,
        )
        return result

    def end(
        self,
        phy_offset: int,
        *,
        commit: bool,
        message_id: str | None = None,
        producer_group: str | None = None,
    ) -> PutResult:
        """Commits or rolls back the half at ``phy_offset``; returns the op record's put (and
        the commit's, appended before it). Raises :class:`TransactionError` for a half that
        is unknown, already ended, not the message ``message_id`` names, or another
        ``producer_group``'s."""
        broker = self.broker
        stored = broker.store.look_message_by_offset(phy_offset)
        if stored is None or stored.topic != HALF_TOPIC:
            raise TransactionError(f"no half message at offset {phy_offset}")
        half = self.open.get(stored.queue_offset)
        late = half is None and stored.queue_offset in self.given_up
        if half is None and not late:
            raise TransactionError(f"the transaction of {stored.msg_id} has already ended")
        if message_id is not None and stored.property(UNIQ_KEY) not in (None, message_id):
            raise TransactionError(f"the half message at {phy_offset} is not {message_id}")
        if producer_group is not None and stored.property(PRODUCER_GROUP) != producer_group:
            raise TransactionError(
                f"The producer group wrong: the half message at {phy_offset} is "
                f"{stored.property(PRODUCER_GROUP)!r}'s, not {producer_group!r}'s"
            )
        if commit:
            props = dict(stored.properties)
            topic = props.pop(REAL_TOPIC, "")
            queue_id = int(props.pop(REAL_QID, "0") or 0)
            # No longer a half, as RocketMQ's commit says: a Java consumer sending it back to
            # its retry topic copies its properties, and its producer would store a half.
            props.pop(TRAN_MSG, None)
            broker.put_now(
                lambda: broker.store.put(
                    topic,
                    stored.body,
                    queue_id=queue_id,
                    properties=props,
                    flag=stored.flag,
                    sys_flag=(stored.sys_flag & ~SYSFLAG_TRANSACTION_MASK)
                    | SYSFLAG_TRANSACTION_COMMIT,
                    born_timestamp_ms=stored.born_timestamp_ms,
                    born_host=stored.born_host,
                    reconsume_times=stored.reconsume_times,
                    # As RocketMQ's commit: where the half is.
                    prepared_transaction_offset=phy_offset,
                    internal=True,
                    wait_for_flush=False,
                )
            )
        result = self._op(stored.queue_offset)
        if half is not None:
            self._forget(half)
        self.given_up.discard(stored.queue_offset)
        if (metrics := broker.metrics) is not None:
            metrics.ended(stored.property(REAL_TOPIC) or stored.topic, commit=commit)
        log.info(
            "transaction %s of %s %s%s",
            stored.property(UNIQ_KEY) or stored.msg_id,
            stored.property(REAL_TOPIC),
            "committed" if commit else "rolled back",
            " after it was given up" if late else "",
        )
        return result

    def resume(self, stored: StoredMessage) -> PutResult | None:
        """Has the half ``stored`` checked again from a count of none (RocketMQ's
        resumeCheckHalfMessage). A half given up (its copy in ``TRANS_CHECK_MAX_TIME_TOPIC``)
        is stored again as a new half, with ``TRANSACTION_CHECK_TIMES`` 0, and its producer
        is asked once ``transactionTimeOut`` has passed; returns that put. A half still open
        only has its count cleared (None). Raises :class:`TransactionError` for any other
        message, an ended half included: its end may have been a commit."""
        if stored.topic == HALF_TOPIC:
            half = self.open.get(stored.queue_offset)
            if half is None or half.phy_offset != stored.phy_offset:
                raise TransactionError(
                    f"the transaction of {stored.msg_id} has already ended (a half given up "
                    f"is resumed from its copy in {GIVEN_UP_TOPIC})"
                )
            half.checks = 0
            return None
        if stored.topic != GIVEN_UP_TOPIC:
            raise TransactionError(
                f"{stored.msg_id} is a message of {stored.topic}, not a half message"
            )
        props = dict(stored.properties)
        props[CHECK_TIMES] = "0"
        result = self._put_half(
            stored.body,
            props,
            stored.flag,
            stored.sys_flag,
            stored.born_timestamp_ms,
            stored.born_host,
            stored.reconsume_times,
        )
        log.info(
            "transaction %s of %s resumed: checked again as the half at offset %d",
            stored.property(UNIQ_KEY) or stored.msg_id,
            props.get(REAL_TOPIC),
            result.queue_offset,
        )
        return result

    def _op(self, queue_offset: int) -> PutResult:
        broker = self.broker
        broker.topics.create_system(OP_TOPIC, 1, 6)
        return broker.put_now(
            lambda: broker.store.put(
                OP_TOPIC,
                str(queue_offset).encode(),
                queue_id=0,
                tags=OP_TAG,
                internal=True,
                wait_for_flush=False,
            )
        )

    async def check(self, now_ms: int | None = None, *, budget_s: float | None = None) -> int:
        """One round of checks over the halves due by ``now_ms``, oldest due first; returns how
        many producers were asked. The round stops after ``budget_s`` of work (by default a
        share of the check interval; at least one half is checked); the halves it did not reach
        stay due, ahead of every half it checked."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        _, interval_ms, max_checks = self._settings
        if budget_s is None:
            budget_s = max(MIN_ROUND_S, interval_ms / 1000 * ROUND_SHARE)
        store = self.broker.store
        due = self._due
        asked = 0
        worked = 0.0
        slice_from = time.perf_counter()
        while due:
            due_ms, queue_offset = due[0]
            # A half checked now is due after now_ms: the round ends.
            if due_ms > now_ms:
                break
            # Each step ends the half or moves it back, so the loop always advances.
            half = self.open[queue_offset]
            try:
                stored = store.look_message_by_offset(half.phy_offset)
                if stored is None:
                    # Gone to retention.
                    self._forget(half)
                elif half.checks >= max_checks:
                    self._give_up(stored, half)
                else:
                    half.checks += 1
                    half.checked_ms = now_ms
                    self._due_again(half, now_ms + interval_ms)
                    for ask in self.askers:
                        if await ask(stored, stored.msg_id):
                            asked += 1
                            break
                    else:
                        log.info(
                            "no producer of %s to check transaction %s with (check %d of %d)",
                            half.producer_group,
                            stored.property(UNIQ_KEY) or stored.msg_id,
                            half.checks,
                            max_checks,
                        )
            except Exception:
                # A half that cannot be read or given up now (a full disk, a corrupt record)
                # is tried again an interval later; the halves behind it are not held up.
                log.exception("transaction check of the half at %d failed", half.phy_offset)
                if self.open.get(queue_offset) is half and half.due_ms <= now_ms:
                    self._due_again(half, now_ms + interval_ms)
            spent = time.perf_counter() - slice_from
            if worked + spent >= budget_s:
                break
            if spent >= SLICE_S:
                worked += spent
                await asyncio.sleep(0)
                slice_from = time.perf_counter()
        return asked

    def _give_up(self, stored: StoredMessage, half: HalfMessage) -> None:
        broker = self.broker
        broker.topics.create_system(GIVEN_UP_TOPIC, 1)
        # The copy counts the checks it had, as RocketMQ's does.
        props = {**stored.properties, CHECK_TIMES: str(half.checks)}
        put = broker.put_now(
            lambda: broker.store.put(
                GIVEN_UP_TOPIC,
                stored.body,
                queue_id=0,
                properties=props,
                flag=stored.flag,
                sys_flag=stored.sys_flag,
                born_timestamp_ms=stored.born_timestamp_ms,
                born_host=stored.born_host,
                internal=True,
                wait_for_flush=False,
            )
        )
        self._op(half.queue_offset)
        self._forget(half)
        self.given_up.add(half.queue_offset)
        log.warning(
            "transaction %s of %s given up after %d checks: kept in %s at offset %d",
            stored.property(UNIQ_KEY) or stored.msg_id,
            half.topic,
            half.checks,
            GIVEN_UP_TOPIC,
            put.queue_offset,
        )


def as_real_topic(
    record: bytes, topic: str, queue_id: int, properties: dict[str, str] | None = None
) -> bytes:
    """A stored half record rewritten under its real topic and queue id (and with
    ``properties``, when given): RocketMQ's stored layout, with the topic and the properties
    after the body and the total size first."""
    # Past the reconsume times and the prepared transaction offset: the body's length.
    at = reconsume_times_at(sys_flag_of(record)) + 4 + 8
    body_len = struct.unpack_from(">i", record, at)[0]
    topic_at = at + 4 + body_len
    old_len = record[topic_at]
    encoded = topic.encode()
    out = bytearray(record[:topic_at])
    out.append(len(encoded))
    out += encoded
    props_at = topic_at + 1 + old_len
    if properties is None:
        out += record[props_at:]
    else:
        old_props = struct.unpack_from(">H", record, props_at)[0]
        encoded = encode_properties(properties).encode()
        out += struct.pack(">H", len(encoded))
        out += encoded
        out += record[props_at + 2 + old_props :]
    struct.pack_into(">i", out, 0, len(out))
    struct.pack_into(">i", out, 12, queue_id)
    return bytes(out)


def _messages(store: MessageStore, topic: str, start: int = 0) -> list[StoredMessage]:
    out: list[StoredMessage] = []
    offset = max(start, store.min_offset(topic, 0))
    while True:
        result = store.get(topic, 0, offset, max_count=256)
        if result.status is not GetMessageStatus.FOUND:
            if result.next_begin_offset > offset:
                offset = result.next_begin_offset
                continue
            return out
        out += result.messages()
        offset = result.next_begin_offset


def _bodies(store: MessageStore, topic: str, start: int = 0) -> list[str]:
    return [m.body.decode(errors="replace") for m in _messages(store, topic, start)]
