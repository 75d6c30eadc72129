"""What operators ask of a cluster, as RocketMQ's ``mqadmin`` asks it: the brokers of each
cluster (``clusterList``), each queue's offsets (``topicStatus``), a consumer group's lag
(``consumerProgress``), a broker's runtime figures (``brokerStatus``), topics created or
deleted on every broker of a cluster (``updateTopic``, ``deleteTopic``), and messages found
by key, by the producer's message id or by offset message id (``queryMsgByKey``,
``queryMsgByUniqueKey``, ``queryMsgById``).

Example (against a running ``pyrmq serve``)::

    async with Admin("127.0.0.1:9876") as admin:
        for mq, progress in (await admin.consumer_progress("my-group")).items():
            print(mq, progress.lag)
"""

import dataclasses
import json
import ssl
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from pyrmq import _core
from pyrmq._core import MessageExt
from pyrmq.acl.signing import Credentials
from pyrmq.client.api import LANGUAGE
from pyrmq.client.consume_directly import ConsumeMessageDirectlyResult
from pyrmq.client.message import MessageQueue
from pyrmq.client.route import (
    TopicRoute,
    loads_fastjson,
    loads_loose_json,
    loads_queue_table,
    queue_table,
)
from pyrmq.config import parse_properties
from pyrmq.errors import BrokerError, ConfigError, NoRouteError, PyrmqError
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumerStatusRequestHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode

__all__ = [
    "Admin",
    "ClusterBroker",
    "ConsumeQueueUnit",
    "ConsumeQueueView",
    "ConsumeStats",
    "ConsumerProgress",
    "TopicOffset",
]

MASTER_ID = 0


@dataclasses.dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue of a topic: the offsets it holds and when its last message was stored."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int
    """Store time (ms) of the queue's last message; 0 when it is empty."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerProgress:
    """A consumer group on one queue: the broker's max offset against the group's."""

    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    """Store time (ms) of the last message the group consumed; 0 when unknown."""

    @property
    def lag(self) -> int:
        """Messages stored in the queue that the group has not consumed."""
        return max(self.broker_offset - self.consumer_offset, 0)


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeStats:
    """A consumer group's progress on every queue, and how fast it consumes."""

    queues: dict[MessageQueue, ConsumerProgress]
    consume_tps: float
    """Messages a second the group pulled over the last minute, from every broker."""

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.queues.values())


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeQueueUnit:
    """One unit of a ConsumeQueue: where its message lies in the CommitLog."""

    queue_offset: int
    phy_offset: int
    size: int
    tags_code: int
    """The hash of the message's tag (for SCHEDULE_TOPIC_XXXX: when it falls due)."""
    taken: bool
    """Whether the group asked about takes the message (False when none was)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeQueueView:
    """Units of one ConsumeQueue, as ``mqadmin queryCq`` shows them."""

    min_offset: int
    max_offset: int
    units: list[ConsumeQueueUnit]
    subscription: str | None
    """The expression the group subscribed with; None when no group was asked about or it
    has no live consumer of the topic."""


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterBroker:
    """One broker name of a cluster and its addresses by broker id (0 = master)."""

    cluster: str
    broker_name: str
    addrs: dict[int, str]


class Admin:
    """Asks the name servers where brokers are and the brokers for their statistics."""

    def __init__(
        self,
        namesrv_addr: str = "127.0.0.1:9876",
        *,
        timeout_s: float = 3.0,
        credentials: Credentials | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        try:
            self.namesrv_addrs = split_addresses(namesrv_addr)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not self.namesrv_addrs:
            raise ConfigError("no name server address given")
        self.timeout_s = timeout_s
        self._remoting = RemotingClient(credentials=credentials, tls=tls)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._remoting.close()

    async def _call(
        self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        request = RemotingCommand.request(code, ext, body)
        request.language = LANGUAGE
        return await self._remoting.invoke(addr, request, self.timeout_s)

    async def _ask_namesrv(
        self, code: int, ext: dict[str, str] | None = None
    ) -> tuple[str, RemotingCommand]:
        """The first name server's answer that comes, and its address."""
        last: Exception | None = None
        for addr in self.namesrv_addrs:
            try:
                return addr, await self._call(addr, code, ext)
            except PyrmqError as e:
                last = e
        raise NoRouteError(f"no name server answered: {last}") from last

    @staticmethod
    def _check(addr: str, response: RemotingCommand) -> RemotingCommand:
        if response.code != ResponseCode.SUCCESS:
            raise BrokerError(response.code, response.remark, addr)
        return response

    async def clusters(self) -> list[ClusterBroker]:
        """Every broker name the name servers know, by cluster then name."""
        addr, response = await self._ask_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO)
        self._check(addr, response)
        raw = loads_loose_json(response.body) if response.body else {}
        brokers = []
        for name, data in (raw.get("brokerAddrTable") or {}).items():
            addrs = {int(k): str(v) for k, v in (data.get("brokerAddrs") or {}).items()}
            brokers.append(ClusterBroker(str(data.get("cluster", "")), name, addrs))
        return sorted(brokers, key=lambda b: (b.cluster, b.broker_name))

    async def _masters(self, cluster: str | None = None) -> list[str]:
        brokers = [b for b in await self.clusters() if cluster is None or b.cluster == cluster]
        if cluster is not None and not brokers:
            raise NoRouteError(f"no broker in cluster {cluster}")
        return [b.addrs[MASTER_ID] for b in brokers if MASTER_ID in b.addrs]

    async def _readers(self) -> list[str]:
        """Each broker's master, or its lowest-numbered slave while the master is away."""
        return [b.addrs[min(b.addrs)] for b in await self.clusters() if b.addrs]

    async def create_topic(
        self,
        topic: str,
        *,
        queue_nums: int = 8,
        perm: int = 6,
        order: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Creates or updates ``topic`` on ``broker_addr``, or on every master of ``cluster``
        (default: of every cluster); returns the brokers' addresses. ``perm``: 2 write, 4 read."""
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic="TBW102",
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            order=order,
        ).to_ext()
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        for addr in addrs:
            self._check(addr, await self._call(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header))
        return addrs

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Deletes ``topic`` from every master of ``cluster`` (default: of every cluster), its
        messages and the groups' offsets on it included, then from the name servers' routes;
        returns the brokers' addresses."""
        addrs = await self._masters(cluster)
        header = DeleteTopicRequestHeader(topic=topic).to_ext()
        for addr in addrs:
            self._check(addr, await self._call(addr, RequestCode.DELETE_TOPIC_IN_BROKER, header))
        in_namesrv = DeleteTopicRequestHeader(topic=topic, cluster_name=cluster).to_ext()
        for addr in self.namesrv_addrs:
            self._check(
                addr, await self._call(addr, RequestCode.DELETE_TOPIC_IN_NAMESRV, in_namesrv)
            )
        return addrs

    async def update_group(
        self,
        group: str,
        *,
        orderly: bool = False,
        retry_max_times: int = 16,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Sets consumer group ``group``'s settings (``mqadmin updateSubGroup``) on
        ``broker_addr``, or on every master of ``cluster`` (default: of every cluster);
        returns the brokers' addresses. ``orderly``: its RocketMQ 5 clients consume FIFO
        messages in order; ``retry_max_times``: redeliveries before its DLQ."""
        body = json.dumps(
            {
                "groupName": group,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "consumeMessageOrderly": orderly,
                "retryQueueNums": 1,
                "retryMaxTimes": retry_max_times,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
        ).encode()
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        for addr in addrs:
            response = await self._call(
                addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body
            )
            self._check(addr, response)
        return addrs

    async def groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every consumer group's settings on one broker, by name, in RocketMQ's JSON form."""
        response = await self._call(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        self._check(broker_addr, response)
        table = loads_loose_json(response.body).get("subscriptionGroupTable") or {}
        return {str(name): dict(value) for name, value in table.items()}

    async def delete_group(self, group: str, *, cluster: str | None = None) -> list[str]:
        """Deletes group ``group``'s settings from every master of ``cluster`` (default: of
        every cluster); returns the brokers' addresses."""
        addrs = await self._masters(cluster)
        for addr in addrs:
            response = await self._call(
                addr, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": group}
            )
            self._check(addr, response)
        return addrs

    async def _route(self, topic: str) -> TopicRoute:
        route = await self.route(topic)
        if route is None:
            raise NoRouteError(f"no broker holds topic {topic}")
        return route

    async def route(self, topic: str) -> TopicRoute | None:
        """``topic``'s route, or None when no broker holds it; NoRouteError when no name
        server answers."""
        addr, response = await self._ask_namesrv(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic, "acceptStandardJsonOnly": "true"}
        )
        if response.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        self._check(addr, response)
        return TopicRoute.parse(topic, response.body)

    async def topic_status(self, topic: str) -> dict[MessageQueue, TopicOffset]:
        """Every queue of ``topic`` on every broker that holds it; NoRouteError if none does."""
        route = await self._route(topic)
        header = GetTopicStatsInfoRequestHeader(topic=topic).to_ext()
        out: dict[MessageQueue, TopicOffset] = {}
        for data in route.brokers.values():
            # A master away: its slave has the queues (as mqadmin reads them).
            addr = data.any_addr()
            if addr is None:
                continue
            answer = self._check(
                addr, await self._call(addr, RequestCode.GET_TOPIC_STATS_INFO, header)
            )
            table = loads_queue_table(answer.body)
            for mq, v in table.items():
                out[mq] = TopicOffset(
                    int(v.get("minOffset", 0)),
                    int(v.get("maxOffset", 0)),
                    int(v.get("lastUpdateTimestamp", 0)),
                )
        return dict(sorted(out.items()))

    async def consumer_progress(
        self, group: str, topic: str | None = None
    ) -> dict[MessageQueue, ConsumerProgress]:
        """The group's progress on ``topic``, or on every topic it has committed offsets for,
        from every master broker (or its slave while the master is away)."""
        return (await self.consume_stats(group, topic)).queues

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """:meth:`consumer_progress` with the group's consume rate (``mqadmin
        consumerProgress``)."""
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic).to_ext()
        out: dict[MessageQueue, ConsumerProgress] = {}
        tps = 0.0
        for addr in await self._readers():
            answer = self._check(
                addr, await self._call(addr, RequestCode.GET_CONSUME_STATS, header)
            )
            parsed = loads_fastjson(answer.body)
            tps += float(parsed.get("consumeTps") or 0.0)
            for mq, v in queue_table(parsed.get("offsetTable")).items():
                out[mq] = ConsumerProgress(
                    int(v.get("brokerOffset", 0)),
                    int(v.get("consumerOffset", 0)),
                    int(v.get("lastTimestamp", 0)),
                )
        return ConsumeStats(dict(sorted(out.items())), tps)

    async def delay_offsets(self, addr: str) -> dict[int, int]:
        """Each delay level's progress on the broker at ``addr``: the next queue offset of
        SCHEDULE_TOPIC_XXXX it will deliver."""
        answer = self._check(addr, await self._call(addr, RequestCode.GET_ALL_DELAY_OFFSET))
        table = loads_loose_json(answer.body).get("offsetTable") or {}
        return {int(level): int(offset) for level, offset in table.items()}

    async def broker_runtime_info(self, addr: str) -> dict[str, str]:
        """The broker's runtime KVTable (``mqadmin brokerStatus``): store offsets, message
        totals and rates, disk use."""
        answer = self._check(addr, await self._call(addr, RequestCode.GET_BROKER_RUNTIME_INFO))
        table = json.loads(answer.body).get("table") or {}
        return {str(k): str(v) for k, v in table.items()}

    async def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_num: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
        every_broker: bool = False,
    ) -> list[MessageExt]:
        """Messages of ``topic`` with ``key`` among their keys, stored from ``begin_ms`` to
        ``end_ms`` (default: now), from every broker that holds the topic, oldest first.
        Each broker returns at most ``max_num`` (64 at most). With ``every_broker``, every
        broker the name servers know is asked, whether the topic's route names it or not (a
        route lags behind its brokers: after a name server restart, or a topic just made);
        NoRouteError if they know none."""
        found = await self._query(
            topic, key, max_num, begin_ms, end_ms, unique=False, every_broker=every_broker
        )
        # The brokers' index finds keys by hash: a colliding key is no match.
        return [m for m in found if key in m.keys.split(" ")]

    async def query_message_by_unique_key(self, topic: str, uniq_key: str) -> list[MessageExt]:
        """Messages of ``topic`` whose producer's id (``UNIQ_KEY``) is ``uniq_key``, oldest
        first: one, or more when the producer sent it again after a failed attempt."""
        found = await self._query(topic, uniq_key, 32, 0, None, unique=True)
        return [m for m in found if m.get_property("UNIQ_KEY") == uniq_key]

    async def _query(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int,
        end_ms: int | None,
        *,
        unique: bool,
        every_broker: bool = False,
    ) -> list[MessageExt]:
        if every_broker:
            brokers = [
                (b.broker_name, b.addrs[min(b.addrs)]) for b in await self.clusters() if b.addrs
            ]
            if not brokers:
                raise NoRouteError("the name servers know no broker")
        else:
            route = await self._route(topic)
            brokers = [(n, a) for n, d in route.brokers.items() if (a := d.any_addr()) is not None]
        end = time.time_ns() // 1_000_000 if end_ms is None else end_ms
        ext = QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms, end_timestamp=end
        ).to_ext()
        if unique:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        found: list[MessageExt] = []
        for name, addr in brokers:
            response = await self._call(addr, RequestCode.QUERY_MESSAGE, ext)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            self._check(addr, response)
            found.extend(_core.decode_received(response.body, name))
        return sorted(found, key=lambda m: (m.store_timestamp, m.broker_name, m.commit_log_offset))

    async def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message an offset message id names, from the broker that stored it (``mqadmin
        queryMsgById``). ValueError if it is no offset message id; BrokerError if the
        broker has no message there."""
        addr, offset = _core.decode_offset_msg_id(offset_msg_id)
        response = self._check(
            addr,
            await self._call(
                addr,
                RequestCode.VIEW_MESSAGE_BY_ID,
                ViewMessageRequestHeader(offset=offset).to_ext(),
            ),
        )
        names = [b.broker_name for b in await self.clusters() if addr in b.addrs.values()]
        [message] = _core.decode_received(response.body, names[0] if names else "")
        return message

    async def broker_config(self, addr: str) -> dict[str, str]:
        """Every setting of the broker at ``addr`` under its RocketMQ key (``mqadmin
        getBrokerConfig``)."""
        answer = self._check(addr, await self._call(addr, RequestCode.GET_BROKER_CONFIG))
        return parse_properties(answer.body.decode("utf-8", "replace"), source=addr)

    async def update_broker_config(self, addr: str, settings: Mapping[str, object]) -> None:
        """Changes settings of the broker at ``addr`` while it runs (``mqadmin
        updateBrokerConfig``): all of them, or none and a BrokerError that says why. A pyrmq
        broker changes its retention settings (``fileReservedTime``, ``deleteWhen``, the disk
        ratios) and its per-request switches (``recallMessageEnable``, ``slaveReadEnable``,
        ``storeReplyMessageEnable``) this way and refuses the others, which take effect only at
        a start."""
        body = "".join(f"{key}={_setting(value)}\n" for key, value in settings.items())
        response = await self._call(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body.encode())
        self._check(addr, response)

    async def delete_expired_commit_log(self, addr: str) -> str:
        """Has the broker at ``addr`` delete its CommitLog segments older than its
        ``fileReservedTime`` now, whatever the hour (``mqadmin deleteExpiredCommitLog``);
        returns what it answered."""
        response = await self._call(addr, RequestCode.DELETE_EXPIRED_COMMITLOG)
        return self._check(addr, response).remark or ""

    async def query_consume_queue(
        self,
        addr: str,
        topic: str,
        queue_id: int,
        index: int = 0,
        count: int = 10,
        *,
        group: str | None = None,
    ) -> ConsumeQueueView:
        """``count`` units of a ConsumeQueue of the broker at ``addr`` from queue offset
        ``index`` on (``mqadmin queryCq``), and with ``group``, whether its subscription takes
        each. BrokerError if the broker holds no message of that queue."""
        header = QueryConsumeQueueRequestHeader(
            topic=topic, queue_id=queue_id, index=index, count=count, consumer_group=group
        ).to_ext()
        answer = self._check(addr, await self._call(addr, RequestCode.QUERY_CONSUME_QUEUE, header))
        body = json.loads(answer.body)
        units = [
            ConsumeQueueUnit(
                index + i,
                int(u["physicOffset"]),
                int(u["physicSize"]),
                int(u["tagsCode"]),
                bool(u.get("eval", False)),
            )
            for i, u in enumerate(body.get("queueData") or [])
        ]
        sub = body.get("subscriptionData")
        return ConsumeQueueView(
            int(body.get("minQueueIndex", 0)),
            int(body.get("maxQueueIndex", 0)),
            units,
            str(sub["subString"]) if sub else None,
        )

    # --- requests the broker forwards to consumers -----------------------------------------

    async def consume_message_directly(
        self, group: str, client_id: str, offset_msg_id: str
    ) -> ConsumeMessageDirectlyResult:
        """Has the online consumer ``client_id`` of ``group`` run its listener on the message
        ``offset_msg_id`` names, outside its normal flow: nothing is committed or sent back
        (``mqadmin queryMsgById -g GROUP -d CLIENT_ID``). Returns what the listener did.

        ValueError if ``offset_msg_id`` is no offset message id; BrokerError if the consumer
        is not online (SYSTEM_ERROR), did not answer within the broker's 5 s
        (CONSUME_MSG_TIMEOUT), refused (its code and remark), or the broker holds no message
        there."""
        addr, _ = _core.decode_offset_msg_id(offset_msg_id)
        header = ConsumeMessageDirectlyResultRequestHeader(
            consumer_group=group, client_id=client_id, msg_id=offset_msg_id
        ).to_ext()
        request = RemotingCommand.request(RequestCode.CONSUME_MESSAGE_DIRECTLY, header)
        request.language = LANGUAGE
        # As mqadmin: three times the usual wait, the listener's time included.
        response = await self._remoting.invoke(addr, request, self.timeout_s * 3)
        self._check(addr, response)
        try:
            data = json.loads(response.body)
        except ValueError as e:
            raise BrokerError(
                ResponseCode.SYSTEM_ERROR, f"unreadable answer of consumer {client_id}: {e}", addr
            ) from None
        if not isinstance(data, dict):
            raise BrokerError(
                ResponseCode.SYSTEM_ERROR, f"unreadable answer of consumer {client_id}", addr
            )
        return ConsumeMessageDirectlyResult.from_json(data)

    async def consumer_status(
        self, group: str, topic: str, client_id: str | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """Each online consumer of ``group``'s offsets on ``topic``'s queues, by client id, as
        the consumers hold them (``mqadmin getConsumerStatus``); only ``client_id``'s when it
        is given. A broker of the topic asks the consumers, leaving out any that does not
        answer within 5 s. NoRouteError if no broker holds the topic; BrokerError if the
        group (or ``client_id``) has no consumer online."""
        route = await self._route(topic)
        addrs = [a for d in route.brokers.values() if (a := d.any_addr()) is not None]
        if not addrs:
            raise NoRouteError(f"no broker of topic {topic} has an address")
        addr = addrs[0]
        header = GetConsumerStatusRequestHeader(
            topic=topic, group=group, client_addr=client_id or None
        ).to_ext()
        request = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, header)
        request.language = LANGUAGE
        # The broker waits up to 5 s for the consumers (all at once).
        response = await self._remoting.invoke(addr, request, self.timeout_s * 3)
        self._check(addr, response)
        table = loads_fastjson(response.body).get("consumerTable") or {}
        out: dict[str, dict[MessageQueue, int]] = {}
        for cid, offsets in sorted(table.items()):
            out[str(cid)] = {
                mq: int(v) for mq, v in sorted(queue_table(offsets).items()) if type(v) is int
            }
        return out


def _setting(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
