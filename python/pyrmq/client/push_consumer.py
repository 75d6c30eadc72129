"""The asyncio push consumer: a pull loop per assigned queue with long polling, a
ProcessQueue per queue with flow control, concurrent consumption with send-back of failures
or orderly consumption under broker queue locks, and rebalancing across the group's
consumers.

>>> async def main(namesrv: str) -> None:  # doctest: +SKIP
...     def on_messages(msgs, ctx):
...         for m in msgs:
...             print(m.topic, m.tags, m.body)
...         return ConsumeStatus.CONSUME_SUCCESS
...     async with PushConsumer("CG", namesrv) as consumer:
...         consumer.subscribe("TopicTest", "TagA || TagB", on_messages)
...         await asyncio.sleep(60)
"""

import asyncio
import contextlib
import functools
import logging
import random
import threading
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Literal, Self

from pyrmq import _core
from pyrmq.client.allocate import AllocateStrategy, allocate_averagely
from pyrmq.client.api import PullStatus, SendRequest
from pyrmq.client.consume_directly import ConsumeMessageDirectlyResult, consume_directly
from pyrmq.client.consume_orderly import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    OrderlyConsumeService,
)
from pyrmq.client.consume_service import (
    ConcurrentConsumeService,
    ConsumeContext,
    ConsumeStatus,
    Listener,
    wake,
)
from pyrmq.client.instance import ClientConfig, ClientInstance, ClientLifecycle
from pyrmq.client.message import RETRY_PREFIX, MessageExt, MessageQueue
from pyrmq.client.namespaced import name_in, queue_shown
from pyrmq.client.offset_store import (
    LocalFileOffsetStore,
    RemoteBrokerOffsetStore,
    default_offsets_dir,
)
from pyrmq.client.process_queue import OrderlyProcessQueue, ProcessQueue
from pyrmq.client.route import TopicRoute
from pyrmq.client.subscription import MessageSelector, Subscription, consumer_data
from pyrmq.errors import BrokerError, ClientStateError, PyrmqError
from pyrmq.eventloop import EAGER_TASKS
from pyrmq.properties import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, TRAN_MSG, encode_properties
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag

__all__ = [
    "ConsumeContext",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "MessageModel",
    "PushConsumer",
    "Subscription",
]

log = logging.getLogger(__name__)

# The producer group of the producer a client keeps for itself (RocketMQ's).
INNER_PRODUCER_GROUP: Final = "CLIENT_INNER_PRODUCER"

ConsumeFromWhere = Literal[
    "CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"
]
MessageModel = Literal["CLUSTERING", "BROADCASTING"]

PULL_DELAY_ON_ERROR_S: Final = 3.0
PULL_DELAY_ON_FLOW_CONTROL_S: Final = 0.05
SUSPEND_TIMEOUT_S: Final = 15.0
# A held pull is answered within the suspend timeout; allow it that plus a margin.
PULL_TIMEOUT_MARGIN_S: Final = 15.0
# Plain ints: IntFlag arithmetic on every pull shows in profiles.
_PULL_FLAGS: Final = int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)
_COMMIT_FLAG: Final = int(PullSysFlag.COMMIT_OFFSET)
LOCK_RETRY_S: Final = 1.0
"""An orderly consumer that could not lock every queue it was given rebalances again this
soon: the owner before it usually lets go within a listener call."""
BROKER_LOCK_LIVE_MS: Final = 60_000
"""A broker frees a lock not renewed this long (``lockMaxLiveTime``): a renewal granted
later may follow another consumer's turn."""
DROP_WAIT_S: Final = 1.0
"""How long an orderly rebalance waits for a listener call to end before it keeps the
queue until the next rebalance."""
HANDOVER_STALL_S: Final = 5.0
"""A concurrent queue given away at a rebalance is handed over once the listener calls begun
on it have finished, or once none has finished for this long."""
HANDOVER_COMMIT_S: Final = 1.0
"""While a queue is handed over, its offset is committed this often: the broker counts the
commits as this consumer still at work on the queue (``lockQueueTimeout``)."""

AnyProcessQueue = ProcessQueue | OrderlyProcessQueue


def _by_broker(mqs: Sequence[MessageQueue]) -> dict[str, list[MessageQueue]]:
    """``mqs`` grouped by broker name: one lock request per broker."""
    out: dict[str, list[MessageQueue]] = {}
    for mq in mqs:
        out.setdefault(mq.broker_name, []).append(mq)
    return out


def _timestamp_ms(value: int | str | None) -> int:
    """``consumeTimestamp``: epoch ms, or RocketMQ's ``yyyyMMddHHmmss`` local time; by default
    half an hour ago."""
    if value is None:
        return int((time.time() - 1800) * 1000)
    if isinstance(value, int):
        return value
    return int(datetime.strptime(value, "%Y%m%d%H%M%S").timestamp() * 1000)


class PushConsumer(ClientLifecycle):
    """Delivers the messages of subscribed topics to listeners, or to ``async for``.

    Clustering (default): the group's consumers share the queues and its progress lives on
    the brokers. Broadcasting: every consumer gets every message and keeps its progress in a
    local file.

    With ``orderly=True`` each queue's messages reach the listener one batch at a time, in
    queue order, and a clustering group's queues are locked at their brokers so that only one
    consumer has each (see :mod:`pyrmq.client.consume_orderly`). A failed batch is retried in
    place after ``suspend_current_queue_time_ms``, ahead of everything behind it.
    ``max_reconsume_times`` of -1 (the default) means 16 retries through the retry topic for
    a concurrent consumer and retries without end for an orderly one, as in RocketMQ's
    client.

    :meth:`shutdown` waits for the listener calls running, which then commit their messages;
    with ``await_termination_s`` (RocketMQ's ``awaitTerminationMillisWhenShutdown``) at most
    that long, after which the calls still running are left to finish unheeded and their
    messages are delivered again.
    """

    _KIND = "consumer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: MessageModel = "CLUSTERING",
        consume_from_where: ConsumeFromWhere = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp: int | str | None = None,
        allocate_strategy: AllocateStrategy[MessageQueue] = allocate_averagely,
        consume_thread_max: int = 20,
        consume_message_batch_max_size: int = 1,
        pull_batch_size: int = 32,
        pull_threshold_for_queue: int = 1000,
        pull_threshold_size_for_queue_mib: int = 100,
        consume_concurrently_max_span: int = 2000,
        max_reconsume_times: int = -1,
        orderly: bool = False,
        suspend_current_queue_time_ms: int = 1000,
        suspend_timeout_s: float = SUSPEND_TIMEOUT_S,
        pull_interval_s: float = 0.0,
        offsets_dir: str | Path | None = None,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
        await_termination_s: float | None = None,
    ) -> None:
        if message_model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError(f"unknown message model {message_model!r}")
        self.config = ClientConfig.of(client_config, namesrv_addr, instance_name)
        self.namespace = self.config.namespace
        self.group = name_in(self.namespace, group)
        self.message_model: MessageModel = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = _timestamp_ms(consume_timestamp)
        self.allocate_strategy = allocate_strategy
        self.consume_thread_max = consume_thread_max
        self.consume_message_batch_max_size = consume_message_batch_max_size
        self.pull_batch_size = pull_batch_size
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.pull_threshold_size_for_queue = pull_threshold_size_for_queue_mib << 20
        self.consume_concurrently_max_span = consume_concurrently_max_span
        self.max_reconsume_times = max_reconsume_times
        self.orderly = orderly
        self.suspend_current_queue_time_ms = suspend_current_queue_time_ms
        self.suspend_timeout_s = suspend_timeout_s
        self.pull_interval_s = pull_interval_s
        self.offsets_dir = Path(offsets_dir) if offsets_dir else None
        self.await_termination_s = await_termination_s
        self.subscriptions: dict[str, Subscription] = {}
        self._listeners: dict[str, Listener] = {}
        self._default_listener: Listener | None = None
        self._queues: dict[str, list[MessageQueue]] = {}
        self._pqs: dict[MessageQueue, AnyProcessQueue] = {}
        # Per queue, the lock each of its orderly ProcessQueues calls the listener under, as
        # RocketMQ's MessageQueueLock: a queue taken again while a dropped ProcessQueue's call
        # runs on (an offset reset does not wait for it) waits for that call.
        self._consume_locks: dict[MessageQueue, threading.Lock] = {}
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        # Queues given away whose delivered messages are still being consumed.
        self._handing_over: dict[MessageQueue, ProcessQueue] = {}
        # Per queue: the subscription a pull header was made for, and its unchanging fields.
        self._pull_headers: dict[MessageQueue, tuple[Subscription, dict[str, str]]] = {}
        self._instance: ClientInstance | None = None
        self._service: ConcurrentConsumeService | None = None
        self._orderly: OrderlyConsumeService | None = None
        self._lock_renewal: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._stopping: ClientInstance | None = None
        """The instance while :meth:`shutdown` runs: listener calls that finish then may
        still send back."""
        # Kept: on 3.11 each asyncio.get_running_loop() is a getpid() system call.
        self._loop: asyncio.AbstractEventLoop | None = None
        self.offset_store: RemoteBrokerOffsetStore | LocalFileOffsetStore
        self._rebalance_lock = asyncio.Lock()
        # None is the end-of-stream mark that shutdown() puts there.
        self._inbox: asyncio.Queue[tuple[MessageExt, ProcessQueue] | None] | None = None
        self._unacked: tuple[MessageExt, ProcessQueue] | None = None
        self._started_ms = 0

    @property
    def clustering(self) -> bool:
        return self.message_model == "CLUSTERING"

    # --- configuration -------------------------------------------------------------------

    def subscribe(
        self,
        topic: str,
        expression: str | MessageSelector = "*",
        listener: Listener | None = None,
    ) -> None:
        """Subscribes to ``topic`` with a tag expression, or a :class:`MessageSelector` (a
        SQL92 one makes :meth:`start` ask the brokers whether they filter by it).

        ``listener`` gets this topic's messages (``listener(msgs, context)``, a function run
        on the consume thread pool or a coroutine function run in the event loop). Without
        one, the messages go to the listener given to :meth:`register_listener`, or else to
        ``async for``.
        """
        topic = name_in(self.namespace, topic)
        _core.validate_topic(topic)
        if (
            self._instance is not None
            and listener is None
            and self._default_listener is None
            and self._inbox is None
        ):
            # Started with a listener for every topic: nothing reads ``async for``, and the
            # topic's messages would be passed over.
            raise ClientStateError(
                f"consumer {self.group} was started with a listener for each topic: "
                f"subscribe {topic} with one too"
            )
        self.subscriptions[topic] = Subscription.of(topic, expression)
        if listener is not None:
            self._listeners[topic] = listener
        if self._instance is not None:
            self._instance.rebalance_soon()

    def unsubscribe(self, topic: str) -> None:
        topic = name_in(self.namespace, topic)
        self.subscriptions.pop(topic, None)
        self._listeners.pop(topic, None)
        if self._instance is not None:
            self._instance.rebalance_soon()

    def register_listener(self, listener: Listener) -> None:
        """The listener for every topic that has none of its own."""
        self._default_listener = listener

    def listener_for(self, topic: str) -> Listener | None:
        """The topic's listener; None means its messages go to ``async for``."""
        if self.namespace:
            topic = name_in(self.namespace, topic)
        return self._listeners.get(topic) or self._default_listener

    def shown(self, mq: MessageQueue) -> MessageQueue:
        """``mq`` as the caller names it, without the namespace."""
        return queue_shown(self.namespace, mq)

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connects, registers with the brokers and starts consuming."""
        if self._instance is not None:
            return
        if not self.subscriptions:
            raise ClientStateError(f"consumer {self.group} has no subscription")
        if self.orderly and self._default_listener is None:
            missing = sorted(
                t
                for t in self.subscriptions
                if t not in self._listeners and not t.startswith(RETRY_PREFIX)
            )
            if missing:
                # ``async for`` runs outside the queue locks orderly consumption keeps.
                raise ClientStateError(
                    f"orderly consumer {self.group} has no listener for {', '.join(missing)}"
                )
        inst = ClientInstance.acquire(self.config, self.group, consumer=True)
        if self.clustering:
            self.subscriptions.setdefault(
                RETRY_PREFIX + self.group, Subscription.parse(RETRY_PREFIX + self.group, "*")
            )
            self.offset_store = RemoteBrokerOffsetStore(inst, self.group)
        else:
            directory = self.offsets_dir or default_offsets_dir()
            self.offset_store = LocalFileOffsetStore(directory, inst.offsets_id(), self.group)
        if self._default_listener is None and set(self._listeners) < {
            t for t in self.subscriptions if not t.startswith(RETRY_PREFIX)
        }:
            self._inbox = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        if self.orderly:
            self._orderly = OrderlyConsumeService(self, self._loop)
        else:
            self._service = ConcurrentConsumeService(self, self._loop)
        inst.consumers[self.group] = self
        self._instance = inst
        self._started_ms = time.time_ns() // 1_000_000
        inst.start()
        if self.orderly and self.clustering:
            self._lock_renewal = self._loop.create_task(self._renew_locks())
        for topic in self.subscriptions:
            try:
                await inst.update_route(topic)
            except PyrmqError as e:
                log.warning("no route for %s yet: %s", topic, e)
        try:
            await self._check_selectors(inst)
        except BaseException:
            await self.shutdown()
            raise
        await inst.heartbeat_all()
        await self.rebalance()
        inst.rebalance_soon()

    async def _check_selectors(self, inst: ClientInstance) -> None:
        """Asks a broker of each topic subscribed with a SQL92 selector whether it filters by
        it, as Java consumers do at start: a broker without ``enablePropertyFilter``, or one
        that cannot parse the expression, would refuse every pull."""
        for sub in self.subscriptions.values():
            addr = None if sub.by_tag else inst.any_broker_of(sub.topic)
            if addr is not None:
                await inst.api.check_client(addr, self.group, inst.client_id, sub.to_json())

    async def shutdown(self, waiting_thread: int | None = None) -> None:
        """Stops pulling, lets running listeners finish, commits offsets and unregisters.

        ``waiting_thread`` is the ident of a thread that blocks until this returns: when it
        is one of this consumer's listener threads (a listener shutting its own consumer
        down), its call is not waited for, which would never end, and the messages it was
        given are delivered again, as a RocketMQ consumer shut down without waiting for its
        listeners does.
        """
        inst, self._instance = self._instance, None
        if inst is None:
            return
        self._stopping = inst
        inst.consumers.pop(self.group, None)
        if self._lock_renewal is not None:
            self._lock_renewal.cancel()
        tasks = list(self._pull_tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # The message an `async for` body holds was not finished: left in its queue, it holds
        # the committed offset back and is delivered again.
        self._unacked = None
        if self._inbox is not None:
            self._inbox.put_nowait(None)  # ends `async for`
        # Listeners already running finish and move their queues' offsets; the queues are
        # marked dropped only afterwards, or those offsets would be lost and the messages
        # delivered again after a restart.
        services = [s for s in (self._service, self._orderly) if s is not None]
        waiting = asyncio.gather(*(s.shutdown(waiting_thread) for s in services))
        waiting.add_done_callback(lambda f: f.cancelled() or f.exception())  # seen if left
        try:
            await asyncio.wait_for(asyncio.shield(waiting), self.await_termination_s)
        except TimeoutError:
            log.warning(
                "%s shut down with listener calls still running after %g s: their messages "
                "are delivered again",
                self.group,
                self.await_termination_s,
            )
        handing_over, self._handing_over = self._handing_over, {}
        for pq in [*self._pqs.values(), *handing_over.values()]:
            pq.dropped = True
        mqs = [*self._pqs, *handing_over]
        if isinstance(self.offset_store, RemoteBrokerOffsetStore):
            await self.offset_store.commit_all(mqs)
        else:
            await self.offset_store.persist(mqs)
        if self.orderly and self.clustering:
            # After the commit: the next owner starts where this one stopped.
            await self._unlock_queues(inst, list(self._pqs))
        self._pull_tasks.clear()
        self._pqs.clear()
        for task in list(self._background):
            task.cancel()
        self._stopping = None
        await inst.unregister(consumer_group=self.group)
        await inst.release()

    async def __aenter__(self) -> Self:
        if self.subscriptions:
            await self.start()
        return self

    # --- async iteration -----------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[MessageExt]:
        """Yields messages of topics without a listener. A message counts as consumed when
        the loop asks for the next one, so one that was being handled when the consumer
        stopped is delivered again. The loop ends when the consumer shuts down."""
        inbox = self._inbox
        if inbox is None or self._instance is None:
            raise ClientStateError(
                f"consumer {self.group} is not started or every topic has a listener"
            )
        while True:
            if self._unacked is not None:
                self._ack(*self._unacked)
                self._unacked = None
            item = await inbox.get()
            if item is None:
                inbox.put_nowait(None)  # for any other iterator
                return
            msg, pq = item
            if pq.is_dropped():
                continue
            if pq.handing_over and not pq.gate([msg], functools.partial(inbox.put_nowait, item)):
                continue
            self._unacked = (msg, pq)
            yield msg

    def _ack(self, msg: MessageExt, pq: ProcessQueue) -> None:
        self.finish([msg], pq, msg.message_queue)

    def finish(self, msgs: Sequence[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Marks ``msgs`` consumed (from any thread): moves the queue's offset, and wakes its
        pull loop if that waits for room under flow control."""
        self.moved(pq, mq, pq.remove(msgs))

    def moved(self, pq: AnyProcessQueue, mq: MessageQueue, offset: int) -> None:
        """Records ``offset`` (unless -1) as the queue's progress, from any thread, and wakes
        its pull loop if that waits for room under flow control."""
        if offset >= 0 and not pq.dropped:
            self.offset_store.update(mq, offset)
        waiter = pq.room_waiter
        if waiter is not None and not self._flow_controlled(pq):
            pq.room_waiter = None
            waiter.get_loop().call_soon_threadsafe(wake, waiter)

    # --- ClientInstance member -----------------------------------------------------------

    def topics(self) -> list[str]:
        return list(self.subscriptions)

    def on_route(self, topic: str, route: TopicRoute) -> None:
        self._queues[topic] = route.subscribe_queues()

    def heartbeat_data(self) -> dict[str, Any]:
        return consumer_data(
            self.group,
            "CONSUME_PASSIVELY",
            self.message_model,
            self.consume_from_where,
            self.subscriptions,
        )

    async def persist_offsets(self) -> None:
        await self.offset_store.persist(list(self._pqs))

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": {
                "consumerGroup": self.group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": self.message_model,
                "consumeFromWhere": self.consume_from_where,
                "consumeThreadMax": str(self.consume_thread_max),
                "PROP_CONSUMEORDERLY": str(self.orderly).lower(),
                "PROP_CLIENT_VERSION": "pyrmq",
                "PROP_CONSUMER_START_TIMESTAMP": str(self._started_ms),
            },
            "subscriptionSet": [s.to_json() for _, s in sorted(self.subscriptions.items())],
            "mqTable": [
                {"mq": mq.to_json(), "offset": self.offset_store.read(mq), **pq.snapshot()}
                for mq, pq in sorted(self._pqs.items())
            ],
        }

    def offset_table(self, topic: str) -> dict[MessageQueue, int]:
        """GET_CONSUMER_STATUS_FROM_CLIENT: this consumer's offsets on ``topic``'s queues
        (every topic's when it is blank), as the broker names them."""
        return self.offset_store.offsets_of(topic)

    async def consume_message_directly(self, msg: MessageExt) -> ConsumeMessageDirectlyResult:
        """CONSUME_MESSAGE_DIRECTLY: the listener runs on ``msg`` outside the normal flow
        (see :mod:`pyrmq.client.consume_directly`)."""
        return await consume_directly(self, msg)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: restart the named queues from the given offsets."""
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            handed = self._handing_over.pop(mq, None)
            if handed is not None:
                handed.dropped = True  # its hand-over must not commit over the reset
            # Without waiting for a listener call on it, as RocketMQ's reset drops queues: the
            # call's result must not commit over the reset.
            await self._drop_queue(mq, persist=False, force=True)
            self.offset_store.update(mq, offset, increase_only=False)
            if isinstance(self.offset_store, RemoteBrokerOffsetStore):
                try:
                    await self.offset_store.commit_now(mq)
                except PyrmqError as e:
                    log.warning("cannot commit reset offset of %s: %s", mq, e)
            else:
                await self.offset_store.persist([mq])
        self.instance.rebalance_soon()

    # --- rebalance -----------------------------------------------------------------------

    async def rebalance(self) -> None:
        """Takes this consumer's share of every subscribed topic's queues."""
        inst = self._instance
        if inst is None:
            return
        async with self._rebalance_lock:
            for topic in list(self.subscriptions):
                queues = self._queues.get(topic)
                if queues is None:
                    try:
                        await inst.update_route(topic)
                    except PyrmqError as e:
                        log.info("no route for %s: %s", topic, e)
                    queues = self._queues.get(topic)
                    if queues is None:
                        continue
                if self.clustering:
                    cids = await self._consumer_ids(inst, topic)
                    if inst.client_id not in cids:
                        # The broker asked has not had this client's heartbeat yet (it just
                        # restarted, say): allocating now would give every queue away.
                        log.info(
                            "%s: %s is not yet among the consumers %s of %s; keeping %s",
                            self.group,
                            inst.client_id,
                            cids,
                            topic,
                            [str(q) for q in self._pqs if q.topic == topic],
                        )
                        continue
                    mine = self.allocate_strategy(
                        self.group, inst.client_id, sorted(queues), sorted(cids)
                    )
                else:
                    mine = list(queues)
                await self._update_queues(topic, set(mine))
            for mq in [q for q in self._pqs if q.topic not in self.subscriptions]:
                await self._drop_queue(mq, persist=True)

    async def _consumer_ids(self, inst: ClientInstance, topic: str) -> list[str]:
        """The group's consumer ids from one of ``topic``'s brokers, trying each in turn (a
        random one first, as RocketMQ does) so that one broker being down does not stop
        rebalancing. A list naming this client wins over one from a broker that has not had
        its heartbeat yet; [] if no broker answers."""
        route = inst.routes.get(topic)
        if route is None:
            return []
        addrs = [a for b in route.brokers.values() if (a := b.any_addr()) is not None]
        random.shuffle(addrs)
        found: list[str] = []
        for addr in addrs:
            try:
                cids = await inst.api.consumer_ids(addr, self.group)
            except PyrmqError as e:
                log.info("cannot get the consumers of %s from %s: %s", self.group, addr, e)
                continue
            if inst.client_id in cids:
                return cids
            found = found or cids
        return found

    async def _update_queues(self, topic: str, mine: set[MessageQueue]) -> None:
        for mq in [q for q in self._pqs if q.topic == topic and q not in mine]:
            await self._drop_queue(mq, persist=True)
        new = sorted(mine - self._pqs.keys())
        if any(mq in self._handing_over for mq in new):
            # Back before its hand-over ended: taken again once its last messages finish.
            new = [mq for mq in new if mq not in self._handing_over]
            self._rebalance_later(LOCK_RETRY_S)
        locked = None
        if self.orderly and self.clustering and new:
            # Taken only once locked: until then its last owner may still be consuming it.
            locked = await self.lock_queues(new)
            if len(locked) < len(new):
                log.info(
                    "%s waits for the locks of %s",
                    self.group,
                    [str(q) for q in new if q not in locked],
                )
                self._rebalance_later(LOCK_RETRY_S)
            new = [q for q in new if q in locked]
        for mq in new:
            await self._take(mq, None if locked is None else locked[mq])

    async def _take(self, mq: MessageQueue, locked_ms: int | None) -> None:
        """Starts consuming ``mq`` from its committed offset (or ``consume_from_where``)."""
        # For an orderly consumer this comes after the lock: the last owner committed before
        # it let go.
        offset = await self._start_offset(mq)
        if offset is None or self._instance is None:
            return
        pq = self._pqs[mq] = self._new_process_queue(mq, locked_ms)
        # Recorded at once: if the queue moves to another consumer before any message
        # of it is consumed, that one starts here. With nothing committed it would start
        # from its own consume_from_where (the queue's end, by default) and skip what was
        # pulled here but never consumed.
        self.offset_store.update(mq, offset, increase_only=False)
        log.info("%s takes %s from offset %d", self.group, mq, offset)
        self._pull_tasks[mq] = asyncio.get_running_loop().create_task(
            self._pull_loop(mq, pq, offset)
        )

    async def _retake(self, mq: MessageQueue, locked_ms: int) -> None:
        """``mq``'s lock came back after it was lost, or after the broker could have let it
        lapse: another consumer may have consumed the queue meanwhile. Its cached messages
        are dropped and it starts again where the group's committed offset says."""
        async with self._rebalance_lock:
            pq = self._pqs.get(mq)
            if not isinstance(pq, OrderlyProcessQueue) or pq.locked:
                return
            if not await self._stop_consuming(pq):
                return  # its run stops at the next batch; the next lock request retries
            self._pqs.pop(mq, None)
            await self._stop_pulling(mq)
            log.info("%s locked %s again; reading it from the committed offset", self.group, mq)
            self.offset_store.remove(mq)
            await self._take(mq, locked_ms)

    def _new_process_queue(self, mq: MessageQueue, locked_ms: int | None = None) -> AnyProcessQueue:
        if not self.orderly:
            return ProcessQueue()
        pq = OrderlyProcessQueue(self._consume_locks.setdefault(mq, threading.Lock()))
        if locked_ms is not None:
            pq.locked, pq.last_lock_ms = True, locked_ms
        return pq

    def _rebalance_later(self, delay_s: float) -> None:
        inst = self._instance
        if inst is not None and self._loop is not None:
            self._loop.call_later(delay_s, inst.rebalance_soon)

    async def _drop_queue(self, mq: MessageQueue, *, persist: bool, force: bool = False) -> bool:
        """Gives ``mq`` up: stops its pull loop and, with ``persist``, commits its offset.
        An orderly consumer first waits for the listener call on the queue to end, and keeps
        the queue (False) if it does not within ``DROP_WAIT_S``, unless ``force``: then the
        call runs on, and its result no longer moves the offset. Once it has committed, and
        no call runs on, it unlocks the queue at the broker for the next owner."""
        pq = self._pqs.get(mq)
        running = False
        if isinstance(pq, OrderlyProcessQueue) and not await self._stop_consuming(pq):
            if not force:
                pq.try_unlock_times += 1
                log.info("%s keeps %s: a listener call on it has not ended", self.group, mq)
                return False
            log.info("%s drops %s while a listener call on it runs on", self.group, mq)
            running = True
        self._pqs.pop(mq, None)
        self._pull_headers.pop(mq, None)
        if isinstance(pq, ProcessQueue) and persist and self.clustering:
            pq.handing_over = True
            await self._stop_pulling(mq)
            self._handing_over[mq] = pq
            self._spawn(self._hand_over(mq, pq))
            return True
        if pq is not None:
            pq.dropped = True
        await self._stop_pulling(mq)
        committed = True
        if persist and pq is not None:
            if isinstance(self.offset_store, RemoteBrokerOffsetStore):
                try:
                    await self.offset_store.commit_now(mq)
                except PyrmqError as e:
                    committed = False
                    log.warning("cannot commit offset of %s: %s", mq, e)
            else:
                await self.offset_store.persist([mq])
            if self.clustering:
                self.offset_store.remove(mq)
            log.info("%s gives up %s", self.group, mq)
        inst = self._instance
        if (
            isinstance(pq, OrderlyProcessQueue)
            and self.clustering
            and committed
            and not running
            and inst
        ):
            # Left locked when the commit failed: the broker frees it in 60 s, and the next
            # owner, reading an older offset sooner, would consume messages again.
            await self._unlock_queues(inst, [mq])
        return True

    async def _hand_over(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Gives a concurrent queue to its next owner without a message consumed twice. Calls
        already begun on the queue's messages finish; calls not begun yet are held back
        (:meth:`ProcessQueue.gate`) and left to the next owner, unless a finished message
        comes after them. Then the offset is committed and the queue unlocked, which lets
        the broker hand it over at once (see :mod:`pyrmq.broker.state.queue_access`); until
        then a commit every ``HANDOVER_COMMIT_S`` tells the broker this consumer is at work.
        Calls still running after ``HANDOVER_STALL_S`` without one finishing are left to
        the next owner too."""
        store = self.offset_store
        remote = store if isinstance(store, RemoteBrokerOffsetStore) else None
        try:
            last_pending = -1
            last_progress = sent = time.monotonic()
            if remote is not None:
                with contextlib.suppress(PyrmqError):
                    await remote.commit_now(mq)
            while self._handing_over.get(mq) is pq:
                if self._service is not None:
                    # Calls queued behind other queues' would reach the gate only in turn.
                    self._service.hold_back(pq)
                due, pending = pq.hand_over_step()
                for rerun in due:
                    rerun()
                if pending <= 0:
                    break
                now = time.monotonic()
                if pending != last_pending:
                    last_pending, last_progress = pending, now
                elif now - last_progress >= HANDOVER_STALL_S:
                    break
                if remote is not None and now - sent >= HANDOVER_COMMIT_S:
                    sent = now
                    with contextlib.suppress(PyrmqError):
                        await remote.commit_now(mq)
                await asyncio.sleep(0.01)
            if self._handing_over.get(mq) is not pq:
                # An offset reset took it over (the reset is committed), or shutdown() did.
                inst = self._instance
                if inst is not None:
                    await self._unlock_queues(inst, [mq])
                return
            pq.dropped = True
            try:
                if remote is not None:
                    await remote.commit_now(mq)
                else:
                    await store.persist([mq])
            except PyrmqError as e:
                # Left locked: the broker frees it once this consumer has been silent for
                # lockQueueTimeout, and the next owner starts at the offset committed before.
                log.warning("cannot commit offset of %s: %s", mq, e)
                return
            store.remove(mq)
            inst = self._instance
            if inst is not None:
                await self._unlock_queues(inst, [mq])
            log.info(
                "%s gives up %s%s",
                self.group,
                mq,
                f" with {pq.msg_count} message(s) left to the next owner" if pq.msg_count else "",
            )
        finally:
            if self._handing_over.get(mq) is pq:
                del self._handing_over[mq]

    async def _stop_pulling(self, mq: MessageQueue) -> None:
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _stop_consuming(self, pq: OrderlyProcessQueue) -> bool:
        """Takes ``pq``'s consume lock, waiting up to ``DROP_WAIT_S`` for a listener call to
        end, and marks the queue dropped under it; False if the call did not end."""
        pq.dropping = True
        try:
            deadline = time.monotonic() + DROP_WAIT_S
            # Polled: a thread blocked in acquire() could not be called off if this task is.
            while not pq.consume_lock.acquire(blocking=False):
                if time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(0.005)
            pq.dropped = True
            pq.consume_lock.release()
            return True
        finally:
            pq.dropping = False

    # --- queue locks (orderly, clustering) -----------------------------------------------

    async def lock_queues(self, mqs: Sequence[MessageQueue]) -> dict[MessageQueue, int]:
        """Asks each broker to lock its queues of ``mqs`` for this client; returns those it
        did, with the time (monotonic ms) of the request, and marks their ProcessQueues
        locked or not."""
        inst = self._instance
        if inst is None:
            return {}
        granted: dict[MessageQueue, int] = {}
        for broker_name, queues in _by_broker(mqs).items():
            asked_ms = time.monotonic_ns() // 1_000_000
            try:
                addr = await inst.master_addr(broker_name, queues[0].topic)
                ok = await inst.api.lock_batch_mq(addr, self.group, inst.client_id, queues)
            except PyrmqError as e:
                log.info("%s cannot lock its queues on %s: %s", self.group, broker_name, e)
                continue
            for mq in queues:
                pq = self._pqs.get(mq)
                if mq in ok:
                    granted[mq] = asked_ms
                if not isinstance(pq, OrderlyProcessQueue):
                    continue
                if mq not in ok:
                    if pq.locked:
                        pq.locked = False
                        log.warning("%s lost the lock of %s", self.group, mq)
                elif pq.locked and asked_ms - pq.last_lock_ms <= BROKER_LOCK_LIVE_MS:
                    pq.last_lock_ms = asked_ms
                else:
                    pq.locked = False
                    self._spawn(self._retake(mq, asked_ms))
        return granted

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _unlock_queues(self, inst: ClientInstance, mqs: Sequence[MessageQueue]) -> None:
        for broker_name, queues in _by_broker(mqs).items():
            try:
                # Where the queues were read and committed: with the master away, a pyrmq
                # slave lets the next owner in at once rather than after lockQueueTimeout.
                addr = await inst.offset_addr(broker_name, queues[0].topic)
                await inst.api.unlock_batch_mq(addr, self.group, inst.client_id, queues)
            except PyrmqError as e:
                log.info("%s cannot unlock its queues on %s: %s", self.group, broker_name, e)

    async def _renew_locks(self) -> None:
        """Every ``lock_interval_s``: locks every queue held again, before the broker (60 s)
        or this client (30 s) would count the locks as expired."""
        while True:
            await asyncio.sleep(self.config.lock_interval_s)
            try:
                await self.lock_queues(sorted(self._pqs))
            except Exception:
                log.exception("lock renewal of %s failed", self.group)

    async def _start_offset(self, mq: MessageQueue) -> int | None:
        """Where a newly taken queue starts: the committed offset, else what
        ``consume_from_where`` says; None when the broker cannot be asked now."""
        inst = self._instance
        if inst is None:  # shut down while rebalancing
            return None
        try:
            committed = await self.offset_store.read_from_store(mq)
            if committed is not None and committed >= 0:
                return committed
            if mq.topic.startswith(RETRY_PREFIX):
                return 0
            if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
                return 0
            addr = await inst.master_addr(mq.broker_name, mq.topic)
            if self.consume_from_where == "CONSUME_FROM_TIMESTAMP":
                return await inst.api.search_offset(addr, mq, self.consume_timestamp_ms)
            return await inst.api.max_offset(addr, mq)
        except PyrmqError as e:
            log.warning("cannot find the start offset of %s for %s: %s", mq, self.group, e)
            return None

    # --- pulling -------------------------------------------------------------------------

    def _flow_controlled(self, pq: AnyProcessQueue) -> bool:
        return (
            pq.msg_count > self.pull_threshold_for_queue
            or pq.msg_size > self.pull_threshold_size_for_queue
            # An orderly queue consumes in order anyway: RocketMQ checks no span there.
            or (not self.orderly and pq.span() > self.consume_concurrently_max_span)
        )

    async def _wait_for_room(self, pq: AnyProcessQueue) -> None:
        """Waits until finished messages bring ``pq`` under the flow-control thresholds, or
        ``PULL_DELAY_ON_FLOW_CONTROL_S`` (RocketMQ's fixed pause, here only an upper bound:
        a queue that sleeps it out while its listener catches up idles the consumer)."""
        assert self._loop is not None
        if self._service is not None:
            # Only finished messages make room: the threads need not wait to be handed them.
            self._service.hand_over()
        waiter: asyncio.Future[None] = self._loop.create_future()
        pq.room_waiter = waiter
        try:
            # Messages finished before the waiter was published would not have woken it.
            if self._flow_controlled(pq):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(PULL_DELAY_ON_FLOW_CONTROL_S):
                        await waiter
        finally:
            pq.room_waiter = None

    async def _pull_loop(self, mq: MessageQueue, pq: AnyProcessQueue, offset: int) -> None:
        broker_id = 0
        while not pq.is_dropped():
            try:
                pq, offset, broker_id = await self._pull_once(mq, pq, offset, broker_id)
            except PyrmqError as e:
                log.info("pull of %s for %s failed: %s", mq, self.group, e)
                await asyncio.sleep(PULL_DELAY_ON_ERROR_S)
            except Exception:
                # The loop must outlive any bug in a batch: the queue stays assigned, and
                # nothing else would pull it again.
                log.exception("pull of %s for %s failed", mq, self.group)
                await asyncio.sleep(PULL_DELAY_ON_ERROR_S)
            else:
                if self.pull_interval_s:
                    await asyncio.sleep(self.pull_interval_s)

    async def _pull_once(
        self, mq: MessageQueue, pq: AnyProcessQueue, offset: int, broker_id: int
    ) -> tuple[AnyProcessQueue, int, int]:
        """One pull of ``mq`` from ``offset``; returns the queue's ProcessQueue (a new one
        after OFFSET_ILLEGAL), the next offset and the broker id to pull from next."""
        if self._flow_controlled(pq):
            await self._wait_for_room(pq)
            return pq, offset, broker_id
        if isinstance(pq, OrderlyProcessQueue) and self.clustering and not pq.locked:
            # Lost at a renewal: pulled messages could not be consumed. The next renewal
            # or rebalance locks it again.
            await asyncio.sleep(PULL_DELAY_ON_ERROR_S)
            return pq, offset, broker_id
        inst = self.instance
        sub = self.subscriptions.get(mq.topic)
        addr = inst.pull_addr(mq.broker_name, broker_id)
        if sub is None or addr is None:
            await asyncio.sleep(PULL_DELAY_ON_ERROR_S)
            return pq, offset, broker_id
        sys_flag = _PULL_FLAGS
        commit = self.offset_store.read(mq) if self.clustering else None
        if commit is not None and broker_id == 0:
            sys_flag |= _COMMIT_FLAG
        ext = {
            **self._pull_header_base(mq, sub),
            "queueOffset": str(offset),
            "sysFlag": str(sys_flag),
            "commitOffset": str(commit or 0),
        }
        timeout_s = self.suspend_timeout_s + PULL_TIMEOUT_MARGIN_S
        if self.clustering:
            await inst.introduce(addr)
        try:
            result = await inst.api.pull_ext(
                addr, mq.broker_name, ext, offset, timeout_s, self.namespace
            )
        except BrokerError as e:
            log.warning("pull of %s from %s refused: %s", mq, addr, e)
            await asyncio.sleep(PULL_DELAY_ON_ERROR_S)
            return pq, offset, broker_id
        if pq.is_dropped():  # a rebalance gave the queue away during the pull
            return pq, offset, broker_id
        pq.last_pull_ms = time.monotonic_ns() // 1_000_000
        broker_id = result.suggest_which_broker_id
        if result.status is PullStatus.FOUND:
            msgs = result.messages
            if sub.tags:
                msgs = [m for m in msgs if sub.matches(m)]
            offset = result.next_begin_offset
            if msgs and isinstance(pq, OrderlyProcessQueue):
                assert self._orderly is not None
                if pq.put(msgs):
                    self._orderly.submit(pq, mq)
            elif msgs:
                assert isinstance(pq, ProcessQueue)
                pq.put(msgs)
                # Both set at start, before any pull.
                assert self._service is not None
                assert self._loop is not None
                runs = self._service.runs_where(mq.topic) if offset >= result.max_offset else None
                if runs == "loop":
                    # Caught up, so the next pull will wait at the broker: writing it first
                    # would only delay these (the broker, woken to park it, often takes this
                    # CPU for about 100 µs).
                    self._dispatch(msgs, pq, mq)
                    if not EAGER_TASKS:
                        await asyncio.sleep(0)  # the listeners' tasks begin first
                elif runs == "threads":
                    # Likewise, and a consume thread woken while the loop writes the pull
                    # would wait for the interpreter lock: the pull waits until the thread
                    # has begun instead.
                    begun = self._loop.create_future()
                    self._dispatch(msgs, pq, mq, begun)
                    await begun
                else:
                    # The next pull goes out first: with a backlog the broker answers it while
                    # the listener runs, and a consume thread woken now would wait for the
                    # interpreter lock until the loop is done writing it.
                    self._loop.call_soon(self._dispatch_backlog, msgs, pq, mq)
            elif pq.msg_count == 0:
                self.offset_store.update(mq, offset)
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %d of %s is illegal, moving to %d", offset, mq, result.next_begin_offset
            )
            offset = result.next_begin_offset
            # Messages still in flight belong to the old position: a fresh ProcessQueue
            # keeps them from moving the offset when they finish (RocketMQ drops the queue).
            pq.dropped = True
            fresh = self._pqs[mq] = self._new_process_queue(mq)
            if isinstance(pq, OrderlyProcessQueue) and isinstance(fresh, OrderlyProcessQueue):
                fresh.locked, fresh.last_lock_ms = pq.locked, pq.last_lock_ms
            pq = fresh
            self.offset_store.update(mq, offset, increase_only=False)
        else:
            offset = result.next_begin_offset
            if pq.msg_count == 0:
                self.offset_store.update(mq, offset)
        return pq, offset, broker_id

    def _pull_header_base(self, mq: MessageQueue, sub: Subscription) -> dict[str, str]:
        """The PULL_MESSAGE header fields of ``mq`` that stay the same from pull to pull."""
        cached = self._pull_headers.get(mq)
        if cached is None or cached[0] is not sub:
            header = PullMessageRequestHeader(
                consumer_group=self.group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=0,
                max_msg_nums=self.pull_batch_size,
                sys_flag=0,
                commit_offset=0,
                suspend_timeout_millis=int(self.suspend_timeout_s * 1000),
                sub_version=sub.version,
                subscription=sub.expression,
                expression_type=sub.expression_type,
            )
            cached = self._pull_headers[mq] = (sub, header.to_ext())
        return cached[1]

    def _dispatch_backlog(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self._dispatch(msgs, pq, mq, backlog=True)

    def _dispatch(
        self,
        msgs: list[MessageExt],
        pq: ProcessQueue,
        mq: MessageQueue,
        begun: "asyncio.Future[None] | None" = None,
        *,
        backlog: bool = False,
    ) -> None:
        """Hands pulled messages to their listeners or to ``async for``; ``begun`` and
        ``backlog`` as :meth:`ConcurrentConsumeService.submit` takes them."""
        if not mq.topic.startswith(RETRY_PREFIX) and self.listener_for(mq.topic) is not None:
            # The common case: one topic, one listener, no per-message routing.
            assert self._service is not None
            self._service.submit(msgs, pq, mq, begun, backlog=backlog)
            return
        inbox = self._inbox
        rest = []
        orphans = []
        for m in msgs:
            if self.listener_for(m.topic) is not None:
                rest.append(m)
            elif inbox is not None:
                inbox.put_nowait((m, pq))
            else:
                orphans.append(m)
        if orphans:
            # Retries of a topic this consumer no longer subscribes to, with nowhere to go.
            log.warning(
                "%s has no listener for %d message(s) of %s (topic %s); skipping them",
                self.group,
                len(orphans),
                mq,
                orphans[0].topic,
            )
            self.finish(orphans, pq, mq)
        if rest:
            assert self._service is not None
            self._service.submit(rest, pq, mq, begun)
        else:
            wake(begun)

    async def send_back(self, msg: MessageExt, delay_level: int) -> None:
        """CONSUMER_SEND_MSG_BACK to the master of the message's broker."""
        inst = self._instance or self._stopping or self.instance
        addr = await inst.master_addr(msg.broker_name, msg.stored.topic)
        await inst.api.send_back(
            addr,
            msg,
            self.group,
            delay_level,
            self.reconsume_limit,
            name_in(self.namespace, msg.topic),
        )

    async def send_to_dead_letters(self, msg: MessageExt, max_reconsume_times: int) -> None:
        """Sends an orderly group's message out of retries on, as Java's orderly consumer
        does: a copy to the group's retry topic through the client's inner producer, with its
        properties (its UNIQ_KEY among them), its retries counted here and the limit they
        reached, which the broker stores in the group's DLQ. The copy names the message's
        original id and topic."""
        inst = self._instance or self._stopping or self.instance
        addr = await inst.master_addr(msg.broker_name, msg.stored.topic)
        props = msg.properties
        props.setdefault(ORIGIN_MESSAGE_ID, msg.id)
        props[RETRY_TOPIC] = name_in(self.namespace, msg.topic)
        props[DELAY] = str(3 + msg.reconsume_times)
        props.pop(TRAN_MSG, None)
        request = SendRequest(
            producer_group=INNER_PRODUCER_GROUP,
            queue=MessageQueue(RETRY_PREFIX + self.group, msg.broker_name, 0),
            body=msg.body,
            properties=encode_properties(props),
            flag=msg.flag,
            reconsume_times=msg.reconsume_times,
            max_reconsume_times=max_reconsume_times,
        )
        # Stored with a caveat (a flush or a slave late) is sent, as Java's producer answers.
        await inst.api.send(addr, request, msg.id, inst.config.request_timeout_s)

    @property
    def reconsume_limit(self) -> int:
        """Retries before the dead-letter queue: ``max_reconsume_times``, where -1 (the Java
        client's default) means 16, as RocketMQ's client reads it for a concurrent consumer."""
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times

    def assigned_queues(self) -> list[MessageQueue]:
        """Queues this consumer pulls now."""
        return sorted(self.shown(mq) for mq in self._pqs)
