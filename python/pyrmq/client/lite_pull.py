"""The lite pull consumer: queues pulled in the background, messages handed out by ``poll``.

Modelled on RocketMQ's ``DefaultLitePullConsumer``. Queues come either from :meth:`subscribe`
(the group's consumers share a topic's queues, rebalanced through the
:class:`~pyrmq.client.instance.ClientInstance`) or from :meth:`assign` (exactly the queues
named, no rebalance). Each assigned queue has one pull task that long-polls its broker and
buffers what it finds, up to ``pull_threshold_for_queue`` messages. :meth:`LitePullConsumer.poll`
returns one buffered batch at a time, taking the queues in turn.

Offsets: the *consume offset* of a queue is the offset after the last message :meth:`poll`
handed out. A batch is done with once the application polls again (or, in ``async for``,
asks for the next message): with ``auto_commit``, what is done with is committed every
``auto_commit_interval_s``, when a queue goes to another consumer, and at shutdown, as
RocketMQ's lite pull consumer commits at the next poll; the batch the application holds is
not, so a crash while it works on it loses nothing. :meth:`LitePullConsumer.commit` commits
the consume offsets, that batch included. Clustering keeps committed
offsets on the brokers, broadcasting in a local file per client id
(``$PYRMQ_OFFSETS_DIR/<client id>/<group>/offsets.json``).
"""

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pyrmq.client.allocate import AllocateStrategy, allocate_averagely
from pyrmq.client.api import PullResult, PullStatus
from pyrmq.client.instance import ClientConfig, ClientInstance, ClientLifecycle
from pyrmq.client.message import RETRY_PREFIX, MessageExt, MessageQueue
from pyrmq.client.namespaced import name_in, queue_in, queue_shown
from pyrmq.client.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
    default_offsets_dir,
)
from pyrmq.client.process_queue import ProcessQueue
from pyrmq.client.route import TopicRoute
from pyrmq.client.subscription import MessageSelector, Subscription, consumer_data
from pyrmq.errors import ClientError, ClientStateError, ConfigError, NoRouteError, PyrmqError
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag

__all__ = ["LitePullConsumer"]

log = logging.getLogger(__name__)

MESSAGE_MODELS: Final = ("CLUSTERING", "BROADCASTING")
CONSUME_FROM: Final = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
DEFAULT_TIMESTAMP_AGO_MS: Final = 30 * 60 * 1000
"""CONSUME_FROM_TIMESTAMP without a timestamp starts half an hour back, as RocketMQ does."""
FLOW_CONTROL_RECHECK_S: Final = 0.05
"""How often a queue whose buffer is full checks again (RocketMQ: 50 ms)."""
QUICK_EMPTY_PULL_S: Final = 0.1
"""An empty answer faster than this was not held by the broker: wait this long before the
next pull of the queue."""
_PULL_FLAGS: Final = int(PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION)


class _QueueState:
    """One assigned queue: its pull task, buffered batches and offsets."""

    __slots__ = (
        "batches",
        "consume_offset",
        "done_offset",
        "epoch",
        "mq",
        "pq",
        "pull_offset",
        "space",
        "suggest_broker_id",
        "task",
    )

    def __init__(self, mq: MessageQueue) -> None:
        self.mq = mq
        self.pq = ProcessQueue()
        self.batches: collections.deque[list[MessageExt]] = collections.deque()
        self.pull_offset: int | None = None
        """Where the next pull reads; None until the start offset is known."""
        self.consume_offset = -1
        """After the last message handed out; -1 while none was."""
        self.done_offset = -1
        """After the last message the application is done with; -1 while none was."""
        self.epoch = 0
        """Raised whenever the pull task is stopped: a task of an older epoch drops its result."""
        self.space = asyncio.Event()
        self.suggest_broker_id = 0
        self.task: asyncio.Task[None] | None = None


class LitePullConsumer(ClientLifecycle):
    """Pulls queues in the background; :meth:`poll` hands out what arrived.

    Use ``async with`` or :meth:`start` / :meth:`shutdown`. Subscribe (or assign) before or
    after starting.

    >>> async def main(namesrv: str) -> None:  # doctest: +SKIP
    ...     async with LitePullConsumer("CG", namesrv) as consumer:
    ...         consumer.subscribe("TopicTest", "TagA || TagB")
    ...         for msg in await consumer.poll(timeout_s=1.0):
    ...             print(msg.queue_offset, msg.body)
    ...         async for msg in consumer:  # forever, until shutdown
    ...             print(msg.body)

    Args:
        group: The consumer group.
        namesrv_addr: Name servers, ``host:port`` separated by ``;`` (default
            ``127.0.0.1:9876``).
        message_model: ``CLUSTERING`` (the group shares the queues and its offsets live on
            the brokers) or ``BROADCASTING`` (every consumer reads every queue and keeps its
            offsets in a local file).
        consume_from_where: Where a queue with no committed offset starts:
            ``CONSUME_FROM_LAST_OFFSET`` (its max offset), ``CONSUME_FROM_FIRST_OFFSET`` (0)
            or ``CONSUME_FROM_TIMESTAMP`` (the first message stored at or after
            ``consume_timestamp_ms``, by default half an hour before start).
        consume_timestamp_ms: See ``consume_from_where``.
        allocate_strategy: How the group's consumers split a topic's queues.
        pull_batch_size: Most messages one pull (and so one poll) returns.
        auto_commit: Commit consume offsets periodically and at shutdown.
        auto_commit_interval_s: Period of the automatic commit.
        pull_threshold_for_queue: A queue stops pulling while it buffers more messages.
        poll_timeout_s: How long :meth:`poll` waits when not told.
        instance_name: Distinguishes client instances of one process (default: the pid).
        client_config: Settings of the shared client instance; ``namesrv_addr`` and
            ``instance_name``, when given as well, replace its own.
        offsets_dir: Broadcasting offsets directory (default ``$PYRMQ_OFFSETS_DIR`` or
            ``~/.rocketmq_offsets``).
    """

    broker_suspend_max_time_s: float = 20.0
    """How long the broker may hold a pull that found nothing (RocketMQ's default)."""
    consumer_timeout_when_suspend_s: float = 30.0
    """How long a held pull waits for its answer; above the suspend time."""
    pull_delay_on_error_s: float = 1.0
    """Pause of a queue's pull task after a failed pull."""

    _KIND = "lite pull consumer"

    def __init__(
        self,
        group: str,
        namesrv_addr: str | None = None,
        *,
        message_model: str = "CLUSTERING",
        consume_from_where: str = "CONSUME_FROM_LAST_OFFSET",
        consume_timestamp_ms: int | None = None,
        allocate_strategy: AllocateStrategy[MessageQueue] = allocate_averagely,
        pull_batch_size: int = 10,
        auto_commit: bool = True,
        auto_commit_interval_s: float = 5.0,
        pull_threshold_for_queue: int = 1000,
        poll_timeout_s: float = 5.0,
        instance_name: str | None = None,
        client_config: ClientConfig | None = None,
        offsets_dir: str | Path | None = None,
    ) -> None:
        problems = []
        if not group:
            problems.append("group must not be empty")
        if message_model not in MESSAGE_MODELS:
            problems.append(f"message_model {message_model!r} is not one of {MESSAGE_MODELS}")
        if consume_from_where not in CONSUME_FROM:
            problems.append(
                f"consume_from_where {consume_from_where!r} is not one of {CONSUME_FROM}"
            )
        if not 1 <= pull_batch_size <= 1024:
            problems.append(f"pull_batch_size {pull_batch_size} is not in [1, 1024]")
        if auto_commit_interval_s <= 0:
            problems.append(f"auto_commit_interval_s {auto_commit_interval_s} is not positive")
        if pull_threshold_for_queue < 1:
            problems.append(f"pull_threshold_for_queue {pull_threshold_for_queue} is below 1")
        if poll_timeout_s < 0:
            problems.append(f"poll_timeout_s {poll_timeout_s} is negative")
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)
        self.config = ClientConfig.of(client_config, namesrv_addr, instance_name)
        self.namespace = self.config.namespace
        self.group = name_in(self.namespace, group)
        self.message_model = message_model
        self.consume_from_where = consume_from_where
        self.consume_timestamp_ms = consume_timestamp_ms
        self.allocate_strategy = allocate_strategy
        self.pull_batch_size = pull_batch_size
        self.auto_commit = auto_commit
        self.auto_commit_interval_s = auto_commit_interval_s
        self.pull_threshold_for_queue = pull_threshold_for_queue
        self.poll_timeout_s = poll_timeout_s
        self.offsets_dir = Path(offsets_dir) if offsets_dir is not None else None

        self._mode: str | None = None  # "subscribe" or "assign"
        self._subscriptions: dict[str, Subscription] = {}
        self._assign_wanted: set[MessageQueue] = set()
        self._assigned: dict[MessageQueue, _QueueState] = {}
        self._paused: set[MessageQueue] = set()
        self._ready = asyncio.Event()
        self._round_robin = 0
        self._rebalance_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._instance: ClientInstance | None = None
        self._store: OffsetStore | None = None
        self._start_timestamp_ms = 0
        self._timestamp_ms = 0

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Joins the client instance, fetches routes, heartbeats and starts pulling."""
        if self._instance is not None:
            return
        inst = ClientInstance.acquire(self.config, self.group, consumer=True)
        inst.consumers[self.group] = self
        inst.start()
        self._instance = inst
        self._start_timestamp_ms = time.time_ns() // 1_000_000
        self._timestamp_ms = (
            self.consume_timestamp_ms
            if self.consume_timestamp_ms is not None
            else self._start_timestamp_ms - DEFAULT_TIMESTAMP_AGO_MS
        )
        if self.message_model == "BROADCASTING":
            directory = self.offsets_dir or default_offsets_dir()
            self._store = LocalFileOffsetStore(directory, inst.offsets_id(), self.group)
        else:
            self._store = RemoteBrokerOffsetStore(inst, self.group)
        await self._refresh_routes_and_heartbeat(inst)
        if self._mode == "assign":
            self._update_assignment(None, self._assign_wanted)
        elif self._mode == "subscribe":
            await self.rebalance()
        if self.auto_commit:
            self._auto_commit_task = asyncio.get_running_loop().create_task(
                self._auto_commit_loop(), name=f"lite-pull auto-commit {self.group}"
            )
        log.info(
            "lite pull consumer started group=%s client_id=%s model=%s",
            self.group,
            inst.client_id,
            self.message_model,
        )

    async def shutdown(self) -> None:
        """Stops pulling, commits (with ``auto_commit``, the batches done with, not the one the
        last :meth:`poll` returned; otherwise what was committed but not yet persisted),
        unregisters from the brokers. Idempotent."""
        inst, self._instance = self._instance, None
        if inst is None:
            return
        self._ready.set()  # wakes pollers: they return [] now
        inst.consumers.pop(self.group, None)
        if self._auto_commit_task is not None:
            self._auto_commit_task.cancel()
            self._background.add(self._auto_commit_task)
            self._auto_commit_task = None
        for state in self._assigned.values():
            self._stop_task(state)
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        store = self._store
        if store is not None:
            if self.auto_commit:
                self._copy_done_offsets()
            try:
                await self._persist_sync(store, list(self._assigned))
            except PyrmqError as e:
                log.warning("final offset commit of group %s failed: %s", self.group, e)
        await inst.unregister(consumer_group=self.group)
        for state in self._assigned.values():
            state.pq.dropped = True
        self._assigned.clear()
        await inst.release()
        log.info("lite pull consumer stopped group=%s client_id=%s", self.group, inst.client_id)

    @property
    def running(self) -> bool:
        return self._instance is not None

    def _offset_store(self) -> OffsetStore:
        if self._instance is None or self._store is None:
            raise ClientStateError(f"lite pull consumer {self.group} is not started")
        return self._store

    async def _refresh_routes_and_heartbeat(self, inst: ClientInstance) -> None:
        for topic in self.topics():
            try:
                await inst.update_route(topic)
            except PyrmqError as e:
                log.warning("cannot fetch the route of %s: %s", topic, e)
        await inst.heartbeat_all()

    # --- subscribing and assigning -------------------------------------------------------

    def _set_mode(self, mode: str) -> None:
        if self._mode is None:
            self._mode = mode
        elif self._mode != mode:
            raise ClientStateError("subscribe and assign are mutually exclusive")

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> None:
        """Consumes ``topic``'s messages whose tag matches ``expression`` (``*`` or tags
        joined by ``||``) or a :class:`MessageSelector` selects, sharing the topic's queues
        with the group's other consumers (clustering) or reading them all (broadcasting)."""
        if not topic:
            raise ClientError("the topic must not be empty")
        topic = name_in(self.namespace, topic)
        self._set_mode("subscribe")
        self._subscriptions[topic] = Subscription.of(topic, expression)
        inst = self._instance
        if inst is not None:
            self._spawn(self._after_subscription_change(inst))

    def unsubscribe(self, topic: str) -> None:
        """Stops consuming ``topic``: its queues are released (their offsets committed)."""
        topic = name_in(self.namespace, topic)
        if self._subscriptions.pop(topic, None) is None:
            return
        for mq in [mq for mq in self._assigned if mq.topic == topic]:
            self._drop(mq)
        inst = self._instance
        if inst is not None:
            self._spawn(self._after_subscription_change(inst))

    async def _after_subscription_change(self, inst: ClientInstance) -> None:
        await self._refresh_routes_and_heartbeat(inst)
        await self.rebalance()

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Consumes exactly ``queues`` (no rebalance); replaces an earlier assignment."""
        wanted = {queue_in(self.namespace, mq) for mq in queues}
        if not wanted:
            raise ClientError("assign needs at least one message queue")
        self._set_mode("assign")
        self._assign_wanted = wanted
        if self._instance is not None:
            self._update_assignment(None, wanted)

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer pulls now."""
        return {queue_shown(self.namespace, mq) for mq in self._assigned}

    async def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, from the name server."""
        route = await self.instance.update_route(name_in(self.namespace, topic))
        if route is None:
            raise NoRouteError(f"no route info of topic {topic}")
        return [queue_shown(self.namespace, mq) for mq in route.subscribe_queues()]

    # --- ClientInstance member -----------------------------------------------------------

    def topics(self) -> list[str]:
        topics = dict.fromkeys(self._subscriptions)
        topics.update(dict.fromkeys(sorted({mq.topic for mq in self._assign_wanted})))
        return list(topics)

    def on_route(self, topic: str, route: TopicRoute) -> None:
        # Rebalance reads routes from the instance; a change is picked up on its next run.
        pass

    def heartbeat_data(self) -> dict[str, Any]:
        return consumer_data(
            self.group,
            "CONSUME_ACTIVELY",
            self.message_model,
            self.consume_from_where,
            self._subscriptions,
        )

    async def rebalance(self) -> None:
        """Recomputes this consumer's share of each subscribed topic's queues."""
        inst = self._instance
        if inst is None or self._mode != "subscribe":
            return
        async with self._rebalance_lock:
            for topic in list(self._subscriptions):
                try:
                    await self._rebalance_topic(inst, topic)
                except PyrmqError as e:
                    log.warning("rebalance of group=%s topic=%s failed: %s", self.group, topic, e)

    async def _rebalance_topic(self, inst: ClientInstance, topic: str) -> None:
        route = inst.routes.get(topic) or await inst.update_route(topic)
        if route is None:
            log.warning("no route of topic %s: nothing to consume for %s", topic, self.group)
            return
        queues = sorted(route.subscribe_queues())
        if self.message_model == "BROADCASTING":
            mine = queues
        else:
            addr = inst.any_broker_of(topic)
            if addr is None:
                raise NoRouteError(f"no broker known for topic {topic}")
            cids = sorted(await inst.api.consumer_ids(addr, self.group))
            if not cids:
                log.info("no consumer of group %s known to %s yet", self.group, addr)
                return
            mine = self.allocate_strategy(self.group, inst.client_id, queues, cids)
        if self._instance is not inst or topic not in self._subscriptions:
            return
        dropped = self._update_assignment(topic, set(mine))
        if dropped:
            await asyncio.gather(*dropped)

    def _update_assignment(
        self, topic: str | None, wanted: set[MessageQueue]
    ) -> list[asyncio.Task[None]]:
        """Makes the queues of ``topic`` (all queues when None) exactly ``wanted``; returns the
        tasks that commit the dropped queues' offsets."""
        drops = []
        for mq in [mq for mq in self._assigned if topic is None or mq.topic == topic]:
            if mq not in wanted and (task := self._drop(mq)) is not None:
                drops.append(task)
        added = sorted(wanted - set(self._assigned))
        for mq in added:
            state = self._assigned[mq] = _QueueState(mq)
            self._start_task(state)
        if drops or added:
            log.info(
                "group=%s topic=%s assignment now %s",
                self.group,
                topic or "*",
                sorted(str(q) for q in self._assigned if topic is None or q.topic == topic),
            )
        return drops

    def _drop(self, mq: MessageQueue) -> asyncio.Task[None] | None:
        """Stops pulling ``mq`` now; returns the task that commits its offset (as RocketMQ's
        removeUnnecessaryMessageQueue does), so that the next owner resumes there."""
        state = self._assigned.pop(mq, None)
        if state is None:
            return None
        self._stop_task(state)
        state.pq.dropped = True
        state.batches.clear()
        store = self._store
        if store is None:
            return None
        if self.auto_commit and state.done_offset >= 0:
            store.update(mq, state.done_offset, increase_only=False)
        return self._spawn(self._persist_dropped(store, mq))

    async def _persist_dropped(self, store: OffsetStore, mq: MessageQueue) -> None:
        # Waits for the broker, so that the queue's next owner is likely to find the offset.
        try:
            await self._persist_sync(store, [mq])
        except PyrmqError as e:
            log.warning("cannot commit the offset of dropped %s for %s: %s", mq, self.group, e)
        finally:
            store.remove(mq)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # --- pulling -------------------------------------------------------------------------

    def _start_task(self, state: _QueueState) -> None:
        if self._instance is None or state.mq in self._paused or state.task is not None:
            return
        state.epoch += 1
        state.task = self._spawn(self._pull_loop(state, state.epoch))

    def _stop_task(self, state: _QueueState) -> None:
        state.epoch += 1
        task, state.task = state.task, None
        if task is not None:
            task.cancel()

    def _reposition(self, state: _QueueState, offset: int) -> None:
        """Drops what was buffered and pulls again from ``offset``."""
        self._stop_task(state)
        state.pq.dropped = True
        state.pq = ProcessQueue()
        state.batches.clear()
        state.pull_offset = offset
        state.consume_offset = state.done_offset = offset
        # Without auto-commit only commit() moves what the group has stored.
        if self.auto_commit and self._store is not None:
            self._store.update(state.mq, offset, increase_only=False)
        self._start_task(state)

    async def _pull_loop(self, state: _QueueState, epoch: int) -> None:
        mq = state.mq
        failures = 0
        while state.epoch == epoch:
            if state.pq.msg_count >= self.pull_threshold_for_queue:
                state.space.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FLOW_CONTROL_RECHECK_S * 20):
                        await state.space.wait()
                continue
            try:
                if state.pull_offset is None:
                    offset = await self._start_offset(mq)
                    if state.epoch != epoch:
                        return
                    state.pull_offset = offset
                    if state.consume_offset < 0:
                        # As the push consumer records its start: a queue that moves to another
                        # consumer before anything of it was polled resumes here, not at that
                        # consumer's own start (the end, by default), which would skip what
                        # arrived meanwhile.
                        state.consume_offset = state.done_offset = offset
                    log.info("group=%s starts %s at offset %d", self.group, mq, offset)
                started = time.monotonic()
                result = await self._pull_once(state, state.pull_offset)
            except PyrmqError as e:
                failures += 1
                (log.warning if failures == 1 else log.debug)(
                    "pull of %s for group %s failed (%d in a row): %s", mq, self.group, failures, e
                )
                await asyncio.sleep(self.pull_delay_on_error_s)
                continue
            except Exception:
                log.exception("pull of %s for group %s failed", mq, self.group)
                await asyncio.sleep(self.pull_delay_on_error_s)
                continue
            failures = 0
            if state.epoch != epoch:
                return
            self._take_result(state, result)
            if (
                result.status is PullStatus.NO_NEW_MSG
                and time.monotonic() - started < QUICK_EMPTY_PULL_S
            ):
                # The broker did not hold the pull (long polling off, or it refused the queue
                # for now): pause briefly instead of asking again at once, in a tight loop.
                await asyncio.sleep(QUICK_EMPTY_PULL_S)

    def _subscription(self, topic: str) -> Subscription:
        sub = self._subscriptions.get(topic)
        return sub if sub is not None else Subscription.everything(topic)

    async def _pull_once(self, state: _QueueState, offset: int) -> PullResult:
        inst = self.instance
        mq = state.mq
        sub = self._subscription(mq.topic)
        addr = inst.pull_addr(mq.broker_name, state.suggest_broker_id)
        if addr is None:
            addr = await inst.master_addr(mq.broker_name, mq.topic)
        header = PullMessageRequestHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=self.pull_batch_size,
            sys_flag=_PULL_FLAGS,
            commit_offset=0,
            suspend_timeout_millis=int(self.broker_suspend_max_time_s * 1000),
            sub_version=0,
            subscription=sub.expression,
            expression_type=sub.expression_type,
        )
        return await inst.api.pull(
            addr, mq.broker_name, header, self.consumer_timeout_when_suspend_s, self.namespace
        )

    def _take_result(self, state: _QueueState, result: PullResult) -> None:
        if result.status is PullStatus.FOUND:
            sub = self._subscription(state.mq.topic)
            msgs = [m for m in result.messages if sub.matches(m)]
            if msgs:
                state.pq.put(msgs)
                state.batches.append(msgs)
                self._ready.set()
        elif result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning(
                "offset %s of %s is illegal for group %s, moving to %d (min %d, max %d)",
                state.pull_offset,
                state.mq,
                self.group,
                result.next_begin_offset,
                result.min_offset,
                result.max_offset,
            )
        state.pull_offset = result.next_begin_offset
        state.suggest_broker_id = result.suggest_which_broker_id

    async def _start_offset(self, mq: MessageQueue) -> int:
        """Where a newly assigned queue starts: its committed offset, else what
        ``consume_from_where`` says."""
        committed = await self._offset_store().read_from_store(mq)
        if committed is not None and committed >= 0:
            return committed
        retry = mq.topic.startswith(RETRY_PREFIX)
        if self.consume_from_where == "CONSUME_FROM_FIRST_OFFSET":
            return 0
        addr = await self.instance.master_addr(mq.broker_name, mq.topic)
        if self.consume_from_where == "CONSUME_FROM_LAST_OFFSET":
            return 0 if retry else await self.instance.api.max_offset(addr, mq)
        if retry:
            return await self.instance.api.max_offset(addr, mq)
        return await self.instance.api.search_offset(addr, mq, self._timestamp_ms)

    # --- polling -------------------------------------------------------------------------

    async def poll(self, timeout_s: float | None = None) -> list[MessageExt]:
        """The next batch of pulled messages (all from one queue, in queue order), waiting up
        to ``timeout_s`` (default ``poll_timeout_s``) for one; [] if none came or the
        consumer shut down meanwhile. Paused queues' messages are held back.

        Polling again says the batches handed out before are done with: with ``auto_commit``
        the next commit covers them, and this batch once the application polls again.
        """
        self._offset_store()  # raises when not started
        timeout = self.poll_timeout_s if timeout_s is None else timeout_s
        if timeout < 0:
            raise ValueError(f"poll timeout must not be negative: {timeout}")
        for state in self._assigned.values():
            state.done_offset = state.consume_offset
        taken = await self._take(timeout)
        if taken is None:
            return []
        state, pq, msgs = taken
        self._mark_consumed(state, pq, msgs)
        return msgs

    async def __aiter__(self) -> AsyncIterator[MessageExt]:
        """Yields messages as :meth:`poll` returns them, until shutdown.

        A message counts as consumed once the loop asks for the next one, so auto-commit never
        covers a message the loop body has not finished: the one at which the loop stops (a
        ``break``, an exception, shutdown) is delivered again.
        """
        while self._instance is not None:
            taken = await self._take(self.poll_timeout_s)
            if taken is None:
                continue
            state, pq, msgs = taken
            finished = 0
            try:
                for msg in msgs:
                    yield msg
                    finished += 1
            finally:
                self._mark_consumed(state, pq, msgs[:finished])
                state.done_offset = state.consume_offset
                rest = msgs[finished:]
                if rest and state.pq is pq and self._assigned.get(state.mq) is state:
                    state.batches.appendleft(rest)
                    self._ready.set()

    async def _take(
        self, timeout_s: float
    ) -> tuple[_QueueState, ProcessQueue, list[MessageExt]] | None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._instance is not None:
            self._ready.clear()
            found = self._next_batch()
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._ready.wait()
        return None

    def _next_batch(self) -> tuple[_QueueState, ProcessQueue, list[MessageExt]] | None:
        states = list(self._assigned.values())
        n = len(states)
        for i in range(n):
            state = states[(self._round_robin + i) % n]
            if state.batches and state.mq not in self._paused:
                self._round_robin = (self._round_robin + i + 1) % n
                msgs = state.batches.popleft()
                if state.batches:
                    self._ready.set()
                return state, state.pq, msgs
        return None

    def _mark_consumed(self, state: _QueueState, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if not msgs or state.pq is not pq or self._assigned.get(state.mq) is not state:
            return  # repositioned or dropped meanwhile
        offset = pq.remove(msgs)
        if offset >= 0:
            state.consume_offset = offset
        state.space.set()

    # --- pause, resume, seek -------------------------------------------------------------

    def pause(self, queues: Iterable[MessageQueue]) -> None:
        """Stops pulling ``queues`` and holds back what they buffered, until :meth:`resume`."""
        for mq in self._queues_in(queues):
            self._paused.add(mq)
            state = self._assigned.get(mq)
            if state is not None:
                self._stop_task(state)

    def resume(self, queues: Iterable[MessageQueue]) -> None:
        """Undoes :meth:`pause`."""
        for mq in self._queues_in(queues):
            self._paused.discard(mq)
            state = self._assigned.get(mq)
            if state is not None:
                self._start_task(state)
                if state.batches:
                    self._ready.set()

    def _queues_in(self, queues: Iterable[MessageQueue]) -> list[MessageQueue]:
        return [queue_in(self.namespace, mq) for mq in queues]

    async def _offset_range(self, mq: MessageQueue) -> tuple[int, int]:
        inst = self.instance
        addr = await inst.master_addr(mq.broker_name, mq.topic)
        low, high = await asyncio.gather(
            inst.api.min_offset(addr, mq), inst.api.max_offset(addr, mq)
        )
        return low, high

    def _assigned_state(self, mq: MessageQueue) -> _QueueState:
        state = self._assigned.get(mq)
        if state is None:
            hint = ", maybe rebalancing" if self._mode == "subscribe" else ""
            raise ClientError(f"message queue {mq} is not assigned to this consumer{hint}")
        return state

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        """Makes the next messages of ``mq`` start at ``offset``, which must lie within the
        queue's [min offset, max offset]; drops what was buffered. The consume offset moves
        there too, so the next commit stores ``offset``."""
        mq = queue_in(self.namespace, mq)
        self._assigned_state(mq)
        low, high = await self._offset_range(mq)
        if not low <= offset <= high:
            raise ClientError(
                f"seek offset {offset} of {mq} is outside [{low}, {high}] (min, max offset)"
            )
        self._reposition(self._assigned_state(mq), offset)

    async def seek_to_begin(self, mq: MessageQueue) -> None:
        """Seeks to the queue's min offset."""
        mq = queue_in(self.namespace, mq)
        self._assigned_state(mq)
        low, _ = await self._offset_range(mq)
        self._reposition(self._assigned_state(mq), low)

    async def seek_to_end(self, mq: MessageQueue) -> None:
        """Seeks to the queue's max offset: only messages stored from now on come."""
        mq = queue_in(self.namespace, mq)
        self._assigned_state(mq)
        _, high = await self._offset_range(mq)
        self._reposition(self._assigned_state(mq), high)

    async def offset_for_timestamp(
        self,
        mq: MessageQueue,
        timestamp_ms: int,
        *,
        boundary: Literal["lower", "upper"] = "lower",
    ) -> int:
        """The offset of the queue's first message stored at or after ``timestamp_ms`` (the
        max offset if there is none); with ``boundary="upper"``, of its last message stored
        at or before it (the min offset if there is none)."""
        mq = queue_in(self.namespace, mq)
        inst = self.instance
        addr = await inst.master_addr(mq.broker_name, mq.topic)
        return await inst.api.search_offset(addr, mq, timestamp_ms, boundary)

    # --- offsets -------------------------------------------------------------------------

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's committed offset of ``mq`` (this client's, then the broker's or the
        local file's); None if there is none."""
        mq = queue_in(self.namespace, mq)
        store = self._offset_store()
        offset = store.read(mq)
        if offset is None:
            offset = await store.read_from_store(mq)
        return offset

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commits and waits until stored: the consume offsets of the assigned queues, or
        ``offsets`` (queue -> the offset of the next message to consume).

        Raises:
            PyrmqError: A broker refused or could not be reached; nothing is retried.
        """
        store = self._offset_store()
        if offsets is None:
            offsets = {
                mq: s.consume_offset for mq, s in self._assigned.items() if s.consume_offset >= 0
            }
        else:
            offsets = {queue_in(self.namespace, mq): offset for mq, offset in offsets.items()}
        for mq, offset in offsets.items():
            store.update(mq, offset, increase_only=False)
            if (state := self._assigned.get(mq)) is not None:
                # What the application commits it is done with: auto-commit goes on from there.
                state.done_offset = offset
        await self._persist_sync(store, list(offsets))

    @staticmethod
    async def _persist_sync(store: OffsetStore, mqs: list[MessageQueue]) -> None:
        if isinstance(store, RemoteBrokerOffsetStore):
            await asyncio.gather(*(store.commit_now(mq) for mq in mqs))
        else:
            await store.persist(mqs)

    def _copy_done_offsets(self) -> None:
        store = self._store
        if store is None:
            return
        for mq, state in self._assigned.items():
            if state.done_offset >= 0:
                store.update(mq, state.done_offset, increase_only=False)

    async def persist_offsets(self) -> None:
        """Sends the offsets this client holds to where the group keeps them (oneway to the
        brokers); with ``auto_commit``, after taking those of the batches done with."""
        store = self._store
        if store is None or self._instance is None:
            return
        if self.auto_commit:
            self._copy_done_offsets()
        await store.persist(list(self._assigned))

    async def _auto_commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self.auto_commit_interval_s)
            try:
                await self.persist_offsets()
            except PyrmqError as e:
                log.warning("auto-commit of group %s failed: %s", self.group, e)
            except Exception:
                log.exception("auto-commit of group %s failed", self.group)

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        """A broker's RESET_CONSUMER_CLIENT_OFFSET: moves the named queues and commits."""
        store = self._offset_store()
        moved = []
        for mq, offset in offsets.items():
            if mq.topic != topic:
                continue
            store.update(mq, offset, increase_only=False)
            moved.append(mq)
            state = self._assigned.get(mq)
            if state is not None:
                self._reposition(state, offset)
        await store.persist(moved)

    def offset_table(self, topic: str) -> dict[MessageQueue, int]:
        """GET_CONSUMER_STATUS_FROM_CLIENT: the offsets on ``topic`` (every topic when blank)."""
        return self._offset_store().offsets_of(topic)

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": {
                "consumerGroup": self.group,
                "messageModel": self.message_model,
                "consumeFromWhere": self.consume_from_where,
                "consumeType": "CONSUME_ACTIVELY",
                "pullBatchSize": str(self.pull_batch_size),
                "autoCommit": str(self.auto_commit).lower(),
                "PROP_CONSUMER_START_TIMESTAMP": str(self._start_timestamp_ms),
            },
            "subscriptionSet": [s.to_json() for s in self._subscriptions.values()],
            "mqTable": {},
            "statusTable": {},
        }
