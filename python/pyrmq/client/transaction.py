"""Transactional messages: a half message the broker holds back until its producer commits
or rolls it back, as RocketMQ's ``TransactionMQProducer`` sends them.

:meth:`TransactionProducer.send_in_transaction` sends the half, runs the local transaction and
ends the half with its outcome. When the outcome is not known yet (UNKNOWN, or the producer
died in between), the broker asks a producer of the same group later, and that producer's
``checker`` answers from the application's own records. A half can also be ended by another
process than the one that sent it: :meth:`TransactionProducer.send_half` returns a
:class:`HalfMessage` handle, which pickles, and :meth:`TransactionProducer.end` takes one.
"""

import asyncio
import concurrent.futures
import dataclasses
import enum
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from pyrmq import _core
from pyrmq.client.consume_service import awaits
from pyrmq.client.instance import DEFAULT_TOPIC
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer
from pyrmq.errors import MessageIllegalError, PyrmqError
from pyrmq.properties import PRODUCER_GROUP, TRAN_MSG, UNIQ_KEY, holding_back
from pyrmq.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader

__all__ = [
    "HalfMessage",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
]

log = logging.getLogger(__name__)

SYSFLAG_TRANSACTION_PREPARED = 0x4
# END_TRANSACTION's commitOrRollback: RocketMQ's MessageSysFlag transaction types.
_WIRE = {0: 0x8, 1: 0xC, 2: 0x0}


class TransactionState(enum.IntEnum):
    """How a local transaction ended (the values of rocketmq-client-python's
    ``TransactionStatus``)."""

    COMMIT = 0
    """Deliver the message."""
    ROLLBACK = 1
    """Drop the message; no consumer ever sees it."""
    UNKNOWN = 2
    """Not known yet: the broker asks the group's checker later."""


Outcome: TypeAlias = TransactionState | Awaitable[TransactionState]
LocalTransaction = Callable[[Message, Any], Outcome]
"""``execute(message, arg)``: runs the local transaction once the half is stored."""
TransactionChecker = Callable[[MessageExt], Outcome]
"""``checker(half)``: how the transaction of a half sent earlier (perhaps by another process
of the group) ended, from the application's own records."""


@dataclasses.dataclass(frozen=True, slots=True)
class HalfMessage:
    """What ends a half message: where it is stored and which message it is. Plain data, so
    one process can send a half and another end it."""

    broker_name: str
    commit_log_offset: int
    queue_offset: int
    msg_id: str
    """The producer's id (``UNIQ_KEY``), which the committed message keeps."""
    offset_msg_id: str
    topic: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionSendResult:
    """A transactional send: the half's send result and the state it was ended with."""

    send_result: SendResult
    state: TransactionState
    half: HalfMessage | None
    """None when the broker did not store the half as promised (the send was rolled back)."""


async def _outcome(value: Outcome | int) -> TransactionState:
    if inspect.isawaitable(value):
        value = await value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 2:
        return TransactionState(value)  # the plain ints of rocketmq-client-python's enum
    raise TypeError(f"a transaction callback must return a TransactionState, not {value!r}")


class TransactionProducer(Producer):
    """A producer of transactional messages.

    Args:
        group: The producer group. The broker asks any live producer of this group about a
            half whose transaction it did not hear the end of, so every process of the group
            needs a ``checker`` that gives the same answers.
        namesrv_addr: Name servers, ``host:port`` separated by ``;``.
        checker: ``checker(half) -> TransactionState``. A coroutine function runs in the
            event loop; a plain function on the producer's check thread (one, as RocketMQ's
            ``checkExecutor``), so it may block. An exception, or UNKNOWN, leaves the half
            for a later check (every ``transactionCheckInterval``, up to
            ``transactionCheckMax`` times; then the broker gives it up). A half whose check is
            still running is not checked again meanwhile.
        **kwargs: As :class:`~pyrmq.client.producer.Producer`.

    At start the producer looks up the brokers (through ``TBW102``'s route, as RocketMQ's
    producers do) and sends them its heartbeat, so that a producer restarted after a crash is
    asked about the halves its predecessor left open.

    >>> async def main(namesrv: str) -> None:  # doctest: +SKIP
    ...     def checker(half: MessageExt) -> TransactionState:
    ...         saved = order_saved(half.keys)
    ...         return TransactionState.COMMIT if saved else TransactionState.ROLLBACK
    ...     async with TransactionProducer("PG_TX", namesrv, checker=checker) as producer:
    ...         result = await producer.send_in_transaction(
    ...             Message("Orders", b"...", keys="order-1"), save_order, "order-1")
    ...         print(result.state.name)
    """

    _KIND = "transaction producer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        checker: TransactionChecker,
        **kwargs: Any,
    ) -> None:
        super().__init__(group, namesrv_addr, **kwargs)
        self.checker = checker
        # Brokers this producer told of its group: a check only reaches a producer the broker
        # knows, and the periodic heartbeat may be 30 s away.
        self._introduced: set[str] = set()
        self._checks: set[asyncio.Task[None]] = set()
        self._checking: set[tuple[str, int]] = set()
        self._check_thread: concurrent.futures.ThreadPoolExecutor | None = None

    async def start(self) -> None:
        if self._instance is not None:
            return
        await super().start()
        inst = self.instance
        try:
            # Fills the instance's broker table, which its heartbeats go to from now on.
            await inst.update_route(DEFAULT_TOPIC)
            await inst.heartbeat_all()
        except PyrmqError as e:
            log.info("%s: brokers not reached at start (%s); sends introduce it", self.group, e)

    def topics(self) -> list[str]:
        # TBW102's route names every broker that takes new topics, so refreshing it every
        # 30 s keeps the heartbeats reaching brokers that join (RocketMQ's producers too).
        return list(dict.fromkeys([*super().topics(), DEFAULT_TOPIC]))

    async def shutdown(self) -> None:
        """Also waits for the checker calls running on the check thread."""
        for task in list(self._checks):
            task.cancel()
        await super().shutdown()
        self._introduced.clear()
        pool, self._check_thread = self._check_thread, None
        if pool is not None:
            await asyncio.get_running_loop().run_in_executor(None, pool.shutdown)

    # --- sending -------------------------------------------------------------------------

    async def send_half(
        self,
        msg: Message,
        *,
        queue: MessageQueue | None = None,
        timeout_s: float | None = None,
    ) -> tuple[SendResult, HalfMessage]:
        """Stores ``msg`` as a half message, which no consumer sees until :meth:`end` commits
        it. Returns the send result and the handle that ends it.

        Raises:
            MessageIllegalError: The message has a delay level or a timer (a transactional
                message cannot be delayed), or fails another client-side check.
            SendError, BrokerError, NoRouteError: As :meth:`Producer.send`.
        """
        delays = holding_back(msg.properties, time.time_ns() // 1_000_000)
        if delays:
            raise MessageIllegalError(
                f"a transactional message cannot have a delay level or timer ({', '.join(delays)})"
            )
        if queue is not None and not self._in_topic(queue, msg.topic):
            raise MessageIllegalError(f"message topic {msg.topic} is not the queue's ({queue})")
        msg.properties[TRAN_MSG] = "true"
        msg.properties[PRODUCER_GROUP] = self.group
        try:
            out = self._encode(msg)
            out = dataclasses.replace(out, sys_flag=out.sys_flag | SYSFLAG_TRANSACTION_PREPARED)
        finally:
            msg.properties.pop(TRAN_MSG, None)
            msg.properties.pop(PRODUCER_GROUP, None)
        result = await self._send_with_retries(out, timeout_s, queue)
        assert result.message_queue is not None
        _, phy_offset = _core.decode_offset_msg_id(result.offset_msg_id)
        half = HalfMessage(
            broker_name=result.message_queue.broker_name,
            commit_log_offset=phy_offset,
            queue_offset=result.offset,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            topic=out.topic,
        )
        await self._introduce(half.broker_name)
        return result, half

    async def _introduce(self, broker_name: str) -> None:
        inst = self.instance
        try:
            addr = await inst.master_addr(broker_name)
            if addr in self._introduced:
                return
            await inst.api.heartbeat(addr, inst.heartbeat_data())
        except PyrmqError as e:  # the periodic heartbeat tries again
            log.info("heartbeat to %s failed: %s", broker_name, e)
        else:
            self._introduced.add(addr)

    async def end(
        self, half: HalfMessage, state: TransactionState, *, timeout_s: float | None = None
    ) -> None:
        """Commits or rolls back ``half`` (UNKNOWN tells the broker nothing: it checks later).

        Raises:
            BrokerError: The broker refused the end: the half is unknown to it, or its
                transaction has already ended.
            PyrmqError: No answer from the half's broker; the half stays open and is checked.
        """
        if state is TransactionState.UNKNOWN:
            return
        header = self._end_header(state, half.queue_offset, half.commit_log_offset, half.msg_id)
        inst = self.instance
        addr = await inst.master_addr(half.broker_name, half.topic)
        await inst.api.end_transaction(
            addr, header, self.send_timeout_s if timeout_s is None else timeout_s
        )
        await self._introduce(half.broker_name)

    def _end_header(
        self,
        state: TransactionState,
        queue_offset: int,
        commit_log_offset: int,
        msg_id: str,
        *,
        transaction_id: str | None = None,
        from_check: bool = False,
    ) -> EndTransactionRequestHeader:
        return EndTransactionRequestHeader(
            producer_group=self.group,
            tran_state_table_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=_WIRE[state],
            msg_id=msg_id,
            from_transaction_check=from_check,
            transaction_id=transaction_id or msg_id,
        )

    async def send_in_transaction(
        self, msg: Message, execute: LocalTransaction, arg: Any = None
    ) -> TransactionSendResult:
        """Sends ``msg`` as a half, runs ``execute(msg, arg)`` (a function or a coroutine
        function), and ends the half with what it returned. A half the broker did not store
        as promised (a flush or slave timeout) is rolled back without running ``execute``,
        as RocketMQ does.

        If ``execute`` raises, the half is left for the checker and the exception propagates.
        If the end does not reach the broker, the result still says what ``execute`` decided:
        the checker settles the half later.
        """
        result, half = await self.send_half(msg)
        if result.status is not SendStatus.OK:
            state = TransactionState.ROLLBACK
        else:
            try:
                state = await _outcome(execute(msg, arg))
            except Exception:
                log.warning("local transaction of %s raised; the checker settles it", half.msg_id)
                raise
        try:
            await self.end(half, state)
        except PyrmqError as e:
            log.warning(
                "%s of %s not delivered (%s); the checker settles it", state.name, half.msg_id, e
            )
        stored = result.status is SendStatus.OK
        return TransactionSendResult(result, state, half if stored else None)

    # --- checks from brokers -------------------------------------------------------------

    async def on_transaction_check(
        self, addr: str, half: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        """Runs the checker for a half a broker asks about and answers with its state."""
        key = (addr, header.commit_log_offset)
        if key in self._checking:
            return  # the answer to the last check is still being worked out
        self._checking.add(key)
        task = asyncio.get_running_loop().create_task(self._check(addr, half, header))
        self._checks.add(task)

        def done(t: "asyncio.Task[None]") -> None:
            self._checks.discard(t)
            self._checking.discard(key)

        task.add_done_callback(done)

    async def _ask(self, half: MessageExt) -> TransactionState:
        checker = self.checker
        if awaits(checker):
            return await _outcome(self.checker(half))
        if self._check_thread is None:
            self._check_thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"pyrmq-check-{self.group}"
            )
        loop = asyncio.get_running_loop()
        return await _outcome(await loop.run_in_executor(self._check_thread, self.checker, half))

    async def _check(
        self, addr: str, half: MessageExt, header: CheckTransactionStateRequestHeader
    ) -> None:
        unique = half.properties.get(UNIQ_KEY) or header.msg_id or half.id
        try:
            state = await self._ask(half)
        except Exception as e:
            log.warning("transaction checker failed for %s (the broker asks again): %r", unique, e)
            return
        if state is TransactionState.UNKNOWN:
            return
        end = self._end_header(
            state,
            header.tran_state_table_offset,
            header.commit_log_offset,
            unique,
            transaction_id=header.transaction_id,
            from_check=True,
        )
        try:
            await self.instance.api.end_transaction(addr, end, self.send_timeout_s)
        except PyrmqError as e:
            log.info("answer to the check of %s refused or lost: %s", unique, e)
