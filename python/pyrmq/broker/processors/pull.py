"""PULL_MESSAGE: read a batch from a queue, or hold the request until messages arrive."""

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.clients import TAG, ConsumerInfo, Subscription
from pyrmq.broker.services.hold import HeldPull
from pyrmq.broker.state.groups import GroupConfig
from pyrmq.broker.state.queue_access import Access, AccessKey, QueueAccessTable
from pyrmq.broker.state.topics import PERM_READ
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag, RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.sql_filter import SqlFilter, SqlFilterError, parse_cached
from pyrmq.store import GetMessageStatus, GetResult

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["PullProcessor"]

log = logging.getLogger(__name__)

# Plain ints: ``int & IntFlag`` runs enum.Flag.__and__, in Python, on every pull.
FLAG_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
FLAG_SUSPEND = int(PullSysFlag.SUSPEND)
FLAG_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
# Parsed subscriptions by (topic, expression): a consumer sends its expression with every pull.
_SUBSCRIPTIONS_CACHED = 4096


# GetMessageStatus -> the pull answer's code, as RocketMQ's PullMessageProcessor maps it.
class FilterRefused(Exception):
    """A subscription's expression this broker cannot filter by, with RocketMQ's answer."""

    def __init__(self, code: ResponseCode, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def compile_filter(subscription: Subscription, property_filter: bool) -> SqlFilter | None:
    """The SQL92 filter of ``subscription``, None for a tag expression. Raises
    :class:`FilterRefused` for another type, for SQL92 without ``enablePropertyFilter``
    (read as tags, it would match nothing and the consumer would skip every message), and
    for an expression that does not parse."""
    kind = subscription.expression_type
    if kind == TAG:
        return None
    if kind != SQL92 or not property_filter:
        raise FilterRefused(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by {kind}",
        )
    try:
        return parse_cached(subscription.expression)
    except SqlFilterError as e:
        raise FilterRefused(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"parse the consumer's subscription[{subscription.expression}] failed: {e}",
        ) from e


_NOT_FOUND = {
    GetMessageStatus.OFFSET_FOUND_NULL,
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
}
SQL92 = "SQL92"
_RETRY = {GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE}
_MOVED = {GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_TOO_SMALL}
_EMPTY = {GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE}

CLUSTERING = "CLUSTERING"
PUSH = "CONSUME_PASSIVELY"
# How often pulls waiting for a queue look again whether its owner has fallen idle.
ACCESS_RECHECK_S = 0.5
REFUSED_REMARK = "mq is locked by other client."
MOVED_REMARK = "lock a queue success, update pull offset."
# RocketMQ's MixAll.MASTER_ID, as an answer's field.
MASTER_ID = "0"
# A group without settings of its own has RocketMQ's: brokerId 0, whichBrokerWhenConsumeSlowly 1.
_DEFAULT_GROUP = GroupConfig("")


class PullProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        self._subscriptions: dict[tuple[str, str, str | None], Subscription] = {}
        self.access = QueueAccessTable(broker.config.lock_queue_timeout_ms, self._displaced)
        # Parked pulls of queue owners by hold id, to be let go on release.
        self._parked: dict[AccessKey, dict[int, _AccessWait]] = {}
        # Pulls refused the queue, waiting for it.
        self._waits: dict[AccessKey, list[_AccessWait]] = {}
        self._recheck_timer: asyncio.TimerHandle | None = None
        # Queues whose offset moved while pulls waited for them, to be checked again.
        self._recheck_soon: set[AccessKey] = set()

    def install(self, server: RemotingServer) -> None:
        # Never waits: run at once when the request arrives (no task per pull).
        server.register_inline(RequestCode.PULL_MESSAGE, self.pull)

    def pull(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._pull(conn, request)

    def _subscription(
        self, topic: str, expression: str, expression_type: str | None
    ) -> Subscription:
        key = (topic, expression, expression_type)
        found = self._subscriptions.get(key)
        if found is None:
            if len(self._subscriptions) >= _SUBSCRIPTIONS_CACHED:
                self._subscriptions.clear()
            found = Subscription.parse(topic, expression, expression_type)
            self._subscriptions[key] = found
        return found

    def _pull(
        self,
        conn: Connection,
        request: RemotingCommand,
        *,
        header: PullMessageRequestHeader | None = None,
        park_until: float | None = None,
    ) -> RemotingCommand | None:
        """Answers a pull, or parks it (None) until ``park_until`` at most; never waits, so
        a parked pull is answered inline when it wakes. Its first pass (``header`` None)
        parses the header and may park until the request's suspend time runs out; a woken
        pull is checked again, and parks only with a ``park_until``."""
        first = header is None
        if header is None:
            header = PullMessageRequestHeader.from_ext(request.ext_fields)
            if header.sys_flag & FLAG_SUSPEND:
                timeout_ms = (
                    header.suspend_timeout_millis
                    if self.broker.config.long_polling_enable
                    else self.broker.config.short_polling_time_ms
                )
                park_until = time.monotonic() + max(timeout_ms, 0) / 1000
        broker = self.broker
        if not broker.config.broker_permission & PERM_READ:
            return RemotingCommand.response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"the broker[{broker.config.broker_ip1}] pulling message is forbidden",
            )
        # Only groups an operator set can be refused: no settings built for the others on
        # every pull.
        settings = broker.groups.get(header.consumer_group)
        if settings is not None and not settings.consume_enable:
            return RemotingCommand.response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"subscription group no permission, {header.consumer_group}",
            )
        config = broker.topic(header.topic, header.queue_id)
        if config is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{header.topic}] not exist, apply first please!",
            )
        if not config.perm & PERM_READ:
            return RemotingCommand.response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{header.topic}] pulling is forbidden",
            )
        if not 0 <= header.queue_id < config.read_queue_nums:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] "
                f"consumer:[{conn.peer_address}]",
            )
        if header.sys_flag & FLAG_SUBSCRIPTION:
            subscription = self._subscription(
                header.topic, header.subscription or "*", header.expression_type
            )
        else:
            clients = broker.clients
            if settings is not None and not settings.consume_broadcast_enable:
                member = clients.consumer_on(header.consumer_group, conn) or next(
                    iter(clients.members(header.consumer_group)), None
                )
                broadcasting = member is not None and member.message_model == "BROADCASTING"
            else:
                broadcasting = False
            if broadcasting:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.NO_PERMISSION,
                    remark=f"the consumer group[{header.consumer_group}] can not consume by "
                    "broadcast way",
                )
            found = clients.subscription(header.consumer_group, header.topic)
            if found is None:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    remark=f"the consumer's subscription not exist, group: {header.consumer_group}",
                )
            if found.version < header.sub_version:
                # Subscribed anew: the heartbeat with the new expression is still on its way.
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    remark="the consumer's subscription not latest",
                )
            subscription = found
        try:
            sql = compile_filter(subscription, broker.config.enable_property_filter)
        except FilterRefused as e:
            return RemotingCommand.response_to(request, e.code, remark=e.remark)

        client_id = self._controlled(conn, header.consumer_group)
        if client_id is not None:
            key = (header.consumer_group, header.topic, header.queue_id)
            now_ms = time.monotonic_ns() // 1_000_000
            access = self.access.access(key, client_id, now_ms, self._committed, self._lock_holder)
            if access is not Access.OWNER:
                committed = broker.offsets.query(*key)
                if access is Access.ACQUIRED and committed is not None:
                    # Not past the queue's end: an owner moved back there (the offset was
                    # out of range) must commit what it consumes from there.
                    floor = min(committed, broker.store.max_offset(header.topic, header.queue_id))
                    self.access.set_floor(key, client_id, floor)
                if first:
                    self._commit_piggybacked(header, client_id)
                if access is Access.REFUSED:
                    if park_until is not None and park_until > time.monotonic():
                        self._wait_for_access(key, conn, request, header, client_id, park_until)
                        return None
                    return self._not_found(request, header, header.queue_offset, REFUSED_REMARK)
                if committed is not None and committed > header.queue_offset:
                    # It read the offset before the last owner's final commit.
                    self.access.answered(key, client_id, None, now_ms)
                    log.info(
                        "%s takes %s:%d of %s at the committed offset %d instead of %d",
                        client_id,
                        header.topic,
                        header.queue_id,
                        header.consumer_group,
                        committed,
                        header.queue_offset,
                    )
                    return self._not_found(request, header, committed, MOVED_REMARK)
                log.info(
                    "%s takes %s:%d of %s at offset %d",
                    client_id,
                    header.topic,
                    header.queue_id,
                    header.consumer_group,
                    header.queue_offset,
                )
            elif first:
                self._commit_piggybacked(header, client_id)
        elif first:
            self._commit_piggybacked(header, None)

        got = broker.store.get(
            header.topic,
            header.queue_id,
            header.queue_offset,
            max_count=max(1, header.max_msg_nums),
            tags=subscription.expression if subscription.tags_codes else None,
        )
        # The store already computes RocketMQ's next offset for every outcome.
        status = got.status
        body = b""
        matched = got.message_count
        # The offset after the last message answered, for the access lock.
        delivered: int | None = None
        if status is GetMessageStatus.FOUND and sql is not None:
            kept = []
            for view, message in zip(got.views(), got.messages(), strict=True):
                if sql.matches(message.properties):
                    kept.append(view)
                    delivered = message.queue_offset + 1
            matched = len(kept)
            body = b"".join(kept)
            if not kept:
                # RocketMQ's NO_MATCHED_MESSAGE: pull again from past what was read.
                status = GetMessageStatus.NO_MATCHED_MESSAGE
        if status is GetMessageStatus.FOUND:
            code = ResponseCode.SUCCESS
            if sql is None:
                body = got.buffer
                if client_id is not None:
                    # Past messages a tag filter skipped the owner has not consumed anything.
                    delivered = (
                        got.queue_offsets[-1] + 1
                        if subscription.tags_codes
                        else got.next_begin_offset
                    )
        elif status in _RETRY:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in _MOVED:
            code = ResponseCode.PULL_OFFSET_MOVED
        elif status in _EMPTY:
            if header.queue_offset != 0:
                code = ResponseCode.PULL_OFFSET_MOVED
            else:
                code = ResponseCode.PULL_NOT_FOUND
        else:
            assert status in _NOT_FOUND
            code = ResponseCode.PULL_NOT_FOUND
        broker.stats.pulled(
            found=matched if code == ResponseCode.SUCCESS else 0,
            topic=header.topic,
            group=header.consumer_group,
        )
        next_begin = got.next_begin_offset
        # The moment a slave answers a pull below its start; None: at once.
        answer_at: float | None = None
        if code == ResponseCode.PULL_OFFSET_MOVED and broker.config.is_slave:
            # A slave never moves consumers' offsets (RocketMQ's offsetCheckInSlave=false):
            # behind its master, it has not got there yet; the pull waits there, as for a
            # message not yet arrived, rather than coming back at once.
            code = ResponseCode.PULL_NOT_FOUND
            next_begin = header.queue_offset
            if status is GetMessageStatus.OFFSET_TOO_SMALL:
                # Gone here (the slave started later than it): no arrival brings it back, so
                # not held; answered once the pull's suspend time is over.
                answer_at = park_until
        if code == ResponseCode.SUCCESS:
            broker.stats_items.delivered(
                header.topic,
                header.consumer_group,
                matched,
                len(body),
                broker.config.broker_cluster_name,
            )
        if (metrics := broker.metrics) is not None:
            if code == ResponseCode.SUCCESS:
                metrics.delivered(header.topic, header.consumer_group, matched, len(body))
            metrics.pulled(header.consumer_group, header.topic, header.queue_id, next_begin)

        if (
            code == ResponseCode.PULL_NOT_FOUND
            and answer_at is None
            and park_until is not None
            and park_until > time.monotonic()
        ):
            self._hold(conn, request, header, subscription, park_until, client_id)
            return None

        if client_id is not None:
            key = (header.consumer_group, header.topic, header.queue_id)
            self.access.answered(key, client_id, delivered, time.monotonic_ns() // 1_000_000)
            if code == ResponseCode.PULL_OFFSET_MOVED:
                # The owner moves to where this answer says, and commits from there.
                self.access.set_floor(key, client_id, -1)
        remark = status.name if code != ResponseCode.SUCCESS else None
        response = RemotingCommand.response_to(
            request,
            code,
            remark=remark,
            ext_fields={
                "suggestWhichBrokerId": self._suggested_broker(header.consumer_group, got),
                "nextBeginOffset": str(next_begin),
                "minOffset": str(got.min_offset),
                "maxOffset": str(got.max_offset),
            },
            body=body,
        )
        if answer_at is not None and answer_at > time.monotonic():
            self.broker.loop.call_later(answer_at - time.monotonic(), conn.send, response)
            return None
        return response

    def _hold(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        subscription: Subscription,
        deadline: float,
        client_id: str | None,
    ) -> None:
        key = (header.consumer_group, header.topic, header.queue_id)
        conn.held(request)

        def answer() -> None:
            if client_id is not None:
                parked = self._parked.get(key)
                if parked is not None:
                    parked.pop(pull_id, None)
                    if not parked:
                        del self._parked[key]
            response = self._pull(conn, request, header=header)
            if response is None:
                return
            if (
                subscription.expression_type != TAG
                and response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                and deadline > time.monotonic()
            ):
                # What arrived does not match the SQL92 filter: hold on past it, as RocketMQ
                # keeps such a pull parked, instead of sending the consumer round again.
                later = dataclasses.replace(
                    header, queue_offset=int(response.ext_fields["nextBeginOffset"])
                )
                self._hold(conn, request, later, subscription, deadline, client_id)
                return
            conn.send(response)

        pull_id = self.broker.hold.hold(
            HeldPull(
                topic=header.topic,
                queue_id=header.queue_id,
                queue_offset=header.queue_offset,
                # Any arrival may match a SQL92 filter: the pull then runs it.
                expression=subscription.expression if subscription.expression_type == TAG else "*",
                deadline=deadline,
                answer=answer,
            )
        )
        if client_id is not None:
            self._parked.setdefault(key, {})[pull_id] = _AccessWait(
                conn, request, header, client_id, deadline
            )
            self.access.held(key, client_id, int(deadline * 1000))

    # --- the queue access lock of clustering push groups ----------------------------------

    def _controlled(self, conn: Connection, group: str) -> str | None:
        """The client id of a pull the access lock applies to: a clustering push consumer
        of ``group`` that has sent its heartbeat over ``conn``. A connection without a
        heartbeat into a group that has such members is held to the lock as a client of its
        own: a consumer that reconnected, or one dropped as expired, pulls before its next
        heartbeat, and must not read a queue that changed hands meanwhile."""
        if not self.broker.config.mq_access_control_enable:
            return None
        clients = self.broker.clients
        info = clients.consumer_on(group, conn)
        if info is None:
            if any(_locked_out(m) for m in clients.members(group)):
                return f"{conn.peer_address} without a heartbeat"
            return None
        if _locked_out(info):
            return info.client_id
        return None

    def _suggested_broker(self, group: str, got: GetResult | None) -> str:
        """The broker id a pull's answer tells the consumer to pull from next, by this broker's
        slaveReadEnable (a slave's too). On, a consumer reading data the page cache has likely
        dropped goes to its group's whichBrokerWhenConsumeSlowly, leaving the master's cache
        to consumers that keep up, and any other to the group's brokerId; off, to the master.
        A client without that broker in its route pulls from the master."""
        config = self.broker.config
        if not config.slave_read_enable:
            return MASTER_ID
        settings = self.broker.groups.get(group) or _DEFAULT_GROUP
        if got is not None and got.in_disk:
            return str(settings.which_broker_when_consume_slowly)
        return str(settings.broker_id)

    def _committed(self, key: AccessKey) -> int | None:
        return self.broker.offsets.query(*key)

    def _lock_holder(self, key: AccessKey) -> str | None:
        group, topic, queue_id = key
        broker_name = self.broker.config.broker_name
        return self.broker.queue_locks.holder((group, topic, broker_name, queue_id))

    def _displaced(self, key: AccessKey, client_id: str) -> None:
        """``client_id`` lost ``key`` to another client: its parked pulls of it are answered
        empty, as one woken later would read the new owner's messages."""
        parked = self._parked.get(key)
        if parked is None:
            return
        for pull_id, wait in [(i, w) for i, w in parked.items() if w.client_id == client_id]:
            del parked[pull_id]
            if self.broker.hold.cancel(pull_id):
                self._answer_refused(wait)
        if not parked:
            del self._parked[key]

    def _commit_piggybacked(self, header: PullMessageRequestHeader, client_id: str | None) -> None:
        """Stores the offset a pull commits. Only on a pull's first pass: by the time a held
        pull wakes, its offset is old, and storing it again would move back an offset
        committed meanwhile."""
        if (
            header.sys_flag & FLAG_COMMIT_OFFSET
            and header.commit_offset is not None
            and header.commit_offset >= 0
            # As RocketMQ: a slave takes offsets by UPDATE_CONSUMER_OFFSET only.
            and not self.broker.config.is_slave
        ):
            self.commit(
                (header.consumer_group, header.topic, header.queue_id),
                header.commit_offset,
                client_id,
            )

    def commit(self, key: AccessKey, offset: int, client_id: str | None) -> None:
        """Commits the offset ``client_id`` (None: a client outside the access lock) sends.
        One from a client that does not own the queue may only move it forward, and the
        owner's may not go below the offset committed when it took the queue: either read
        its offset before the last owner's final commit, and would undo it. Pulls waiting
        for the queue are checked again, as the owner may now be caught up."""
        offsets = self.broker.offsets
        if client_id is not None:
            floor = self.access.floor(key, client_id)
            if floor is None:
                committed = offsets.query(*key)
                if committed is not None and committed >= offset:
                    return
            elif offset < floor:
                return
        offsets.commit(*key, offset)
        if key in self._waits:
            # Not now: a pull's own commit comes before its read, and a waiting pull let in
            # here would take the queue from under it.
            self._recheck_soon.add(key)
            if len(self._recheck_soon) == 1:
                self.broker.loop.call_soon(self._recheck_committed)

    def commit_from(self, conn: Connection, key: AccessKey, offset: int) -> None:
        """UPDATE_CONSUMER_OFFSET: a commit from the queue's owner counts as its access
        (it is still consuming what it was delivered), and one from another client of a
        group under the access lock only moves the offset forward."""
        client_id = self._controlled(conn, key[0])
        if client_id is not None:
            self.access.touch(key, client_id, time.monotonic_ns() // 1_000_000)
        self.commit(key, offset, client_id)

    def release(self, keys: list[AccessKey], client_id: str) -> None:
        """``client_id`` gives up ``keys`` (it committed what it consumed and unlocked them,
        or it left the group): its parked pulls of them are answered empty, as a woken one
        would take the queue again, and pulls waiting for them are checked again."""
        released = self.access.release(keys, client_id)
        for key in keys:
            self._displaced(key, client_id)
            waits = self._waits.get(key)
            if waits:
                for wait in [w for w in waits if w.client_id == client_id]:
                    waits.remove(wait)
                    if wait.timer is not None:
                        wait.timer.cancel()
                    self._answer_refused(wait)
                if not waits:
                    del self._waits[key]
        for key in released:
            if key in self._waits:
                self.recheck(key)

    def client_left(self, group: str, client_id: str) -> None:
        """``client_id`` left ``group``: its queues are free, and every pull of it still
        parked is answered empty, since run again it would no longer be its own."""
        keys = {*self.access.keys_of(group, client_id)}
        for table in (self._parked, self._waits):
            keys.update(k for k in table if k[0] == group)
        self.release(sorted(keys), client_id)

    def _wait_for_access(
        self,
        key: AccessKey,
        conn: Connection,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        client_id: str,
        deadline: float,
    ) -> None:
        """Parks a refused pull until the queue is free or ``deadline``: refused at once,
        a long-polling consumer would ask again at once, over and over."""
        loop = self.broker.loop
        wait = _AccessWait(conn, request, header, client_id, deadline)
        wait.timer = loop.call_at(deadline, self._access_expired, key, wait)
        self._waits.setdefault(key, []).append(wait)
        if self._recheck_timer is None:
            self._recheck_timer = loop.call_later(ACCESS_RECHECK_S, self._recheck_all)

    def _access_expired(self, key: AccessKey, wait: "_AccessWait") -> None:
        waits = self._waits.get(key)
        if waits is None or wait not in waits:
            return
        waits.remove(wait)
        if not waits:
            del self._waits[key]
        self._answer_refused(wait)

    def _answer_refused(self, wait: "_AccessWait") -> None:
        if not wait.conn.closed.is_set():
            wait.conn.send(
                self._not_found(wait.request, wait.header, wait.header.queue_offset, REFUSED_REMARK)
            )

    def _recheck_committed(self) -> None:
        keys, self._recheck_soon = self._recheck_soon, set()
        for key in keys:
            self.recheck(key)

    def recheck(self, key: AccessKey) -> None:
        """Runs the pulls waiting for ``key`` again; those still refused wait on."""
        for wait in self._waits.pop(key, []):
            if wait.timer is not None:
                wait.timer.cancel()
            if wait.conn.closed.is_set():
                continue
            try:
                response = self._pull(
                    wait.conn, wait.request, header=wait.header, park_until=wait.deadline
                )
            except Exception:
                log.exception("a pull waiting for %s failed", key)
                self._answer_refused(wait)
                continue
            if response is not None:
                wait.conn.send(response)

    def _recheck_all(self) -> None:
        """Every ACCESS_RECHECK_S while pulls wait: an owner may have fallen idle."""
        self._recheck_timer = None
        for key in list(self._waits):
            self.recheck(key)
        if self._waits and self._recheck_timer is None:
            self._recheck_timer = self.broker.loop.call_later(ACCESS_RECHECK_S, self._recheck_all)

    def waiting_count(self) -> int:
        return sum(len(w) for w in self._waits.values())

    def _not_found(
        self,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        next_offset: int,
        remark: str,
    ) -> RemotingCommand:
        store = self.broker.store
        return RemotingCommand.response_to(
            request,
            ResponseCode.PULL_NOT_FOUND,
            remark=remark,
            ext_fields={
                "suggestWhichBrokerId": self._suggested_broker(header.consumer_group, None),
                "nextBeginOffset": str(next_offset),
                "minOffset": str(store.min_offset(header.topic, header.queue_id)),
                "maxOffset": str(store.max_offset(header.topic, header.queue_id)),
            },
        )


def _locked_out(info: ConsumerInfo) -> bool:
    """Whether the access lock applies to ``info``'s pulls: a clustering push consumer's."""
    return info.message_model == CLUSTERING and info.consume_type == PUSH


@dataclasses.dataclass(eq=False, slots=True)
class _AccessWait:
    conn: Connection
    request: RemotingCommand
    header: PullMessageRequestHeader
    client_id: str
    deadline: float
    timer: asyncio.TimerHandle | None = None
