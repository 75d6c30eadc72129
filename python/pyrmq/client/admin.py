"""What operators ask of a cluster, as RocketMQ's ``mqadmin`` asks it: the brokers of each
cluster (``clusterList``), each queue's offsets (``topicStatus``), a consumer group's lag
(``consumerProgress``), a broker's runtime figures (``brokerStatus``), topics created or
deleted on every broker of a cluster (``updateTopic``, ``deleteTopic``), and messages found
by key, by the producer's message id or by offset message id (``queryMsgByKey``,
``queryMsgByUniqueKey``, ``queryMsgById``), the topic list, offsets cloned from one group to
another (``cloneGroupOffset``), every group's lag on a broker (``brokerConsumeStats``), the name
servers' settings and KV config, brokers' write permission (``wipeWritePerm``), and the
accounts of brokers' plain ACL (``updateAclConfig``, ``deleteAclConfig``,
``updateGlobalWhiteAddr``, ``clusterAclConfigVersion``, ``getAclConfig``), and what the
message tools read: brokers' user topics and groups (``exportMetadata``), a topic's clusters
and permission (``topicClusterList``, ``updateTopicPerm``), queue offsets and pulls by broker
name (``printMsg``, ``queryMsgByOffset``).

Example (against a running ``pyrmq serve``)::

    async with Admin("127.0.0.1:9876") as admin:
        for mq, progress in (await admin.consumer_progress("my-group")).items():
            print(mq, progress.lag)
"""

import asyncio
import contextlib
import dataclasses
import json
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from pyrmq import _core
from pyrmq._core import MessageExt
from pyrmq.acl.signing import Credentials
from pyrmq.client.acl_info import AclConfig, BrokerAclVersion
from pyrmq.client.api import LANGUAGE, ClientAPI, PullResult
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
from pyrmq.errors import (
    BrokerError,
    ClientError,
    ConfigError,
    NoRouteError,
    PartialFailureError,
    PyrmqError,
)
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import (
    BrokerWritePermRequestHeader,
    CloneGroupOffsetRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    CreateAccessConfigRequestHeader,
    CreateTopicRequestHeader,
    DeleteAccessConfigRequestHeader,
    DeleteTopicRequestHeader,
    GetBrokerAclConfigResponseHeader,
    GetConsumerStatusRequestHeader,
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetMaxOffsetRequestHeader,
    GetTopicStatsInfoRequestHeader,
    KvConfigRequestHeader,
    PullMessageRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    QueryCorrectionOffsetHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ResumeCheckHalfMessageRequestHeader,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    UpdateGlobalWhiteAddrsConfigRequestHeader,
    ViewMessageRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode

__all__ = [
    "Admin",
    "BrokerConsumeStats",
    "ClientConnection",
    "ClusterBroker",
    "ConsumeQueueUnit",
    "ConsumeQueueView",
    "ConsumeStats",
    "ConsumerConnection",
    "ConsumerProgress",
    "GroupConsumeStats",
    "QueueTimeSpan",
    "StatsWindow",
    "TopicOffset",
    "TopicTraffic",
]

T = TypeVar("T")
R = TypeVar("R")

MASTER_ID = 0
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
"""The group mqadmin's message tools pull as."""
SYSTEM_GROUPS = frozenset(
    {
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        TOOLS_CONSUMER_GROUP,
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
    }
)
"""RocketMQ's own group names, which an export of the user's groups leaves out."""


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


@dataclasses.dataclass(frozen=True, slots=True)
class ClientConnection:
    """A client connected to a broker, as its heartbeats name it."""

    client_id: str
    client_addr: str
    """The address the broker sees the client's connection come from."""
    language: str
    version: int
    """RocketMQ's version ordinal the client sends (``MQVersion``)."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "ClientConnection":
        return cls(
            str(raw.get("clientId", "")),
            str(raw.get("clientAddr", "")),
            str(raw.get("language", "")),
            int(raw.get("version") or 0),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """A consumer group's online clients and how the group consumes (``mqadmin
    consumerConnection``)."""

    connections: list[ClientConnection]
    subscriptions: dict[str, tuple[str, str]]
    """Topic to (expression type, expression): ``("TAG", "A || B")``, ``("SQL92", "a > 1")``."""
    consume_type: str
    message_model: str
    consume_from_where: str


@dataclasses.dataclass(frozen=True, slots=True)
class StatsWindow:
    """What a broker counted for one item over a window (RocketMQ's BrokerStatsItem)."""

    sum: int
    tps: float
    avgpt: float
    """The sum per call that added to it (messages per put, for TOPIC_PUT_NUMS)."""

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> "StatsWindow":
        raw = raw or {}
        return cls(int(raw.get("sum", 0)), float(raw.get("tps", 0)), float(raw.get("avgpt", 0)))


@dataclasses.dataclass(frozen=True, slots=True)
class TopicTraffic:
    """A topic's messages in and each consuming group's messages out, from every master of
    the topic (``mqadmin statsAll``): rates over the last minute, counts over the last 24 h
    (or the hour, or the minute, while the broker has not sampled longer)."""

    in_tps: float
    in_24h: int
    groups: dict[str, tuple[float, int, int]]
    """Group to (out TPS, messages out in 24 h, lag)."""


def _recent_sum(windows: Mapping[str, StatsWindow]) -> int:
    """mqadmin's 24-hour count: the day's sum, else the hour's, else the minute's."""
    for field in ("statsDay", "statsHour", "statsMinute"):
        if windows[field].sum:
            return windows[field].sum
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class QueueTimeSpan:
    """How far behind in time a consumer group is on one queue (RocketMQ's QueueTimeSpan);
    each time is ms since the epoch, -1 when the queue holds no message."""

    message_queue: MessageQueue
    min_timestamp: int
    """Store time of the queue's first message."""
    max_timestamp: int
    """Store time of its last message."""
    consume_timestamp: int
    """Store time of the last message the group consumed (of the first, when none)."""
    delay_ms: int
    """How long ago the next message the group has to consume was stored; 0 when none is
    left."""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupConsumeStats(ConsumeStats):
    """One consumer group on one topic of a broker: each queue's progress and its rate."""

    group: str


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerConsumeStats:
    """Every consumer group's progress on one broker (RocketMQ's ConsumeStatsList)."""

    broker_addr: str
    groups: list[GroupConsumeStats]
    """One entry per group and topic, in the broker's order."""
    total_diff: int
    """The broker's max offsets less the groups' offsets, summed over every queue."""


class Admin:
    """Asks the name servers where brokers are and the brokers for their statistics.

    A method that asks several brokers or name servers asks them all at once and each one
    whatever the others answer. When some fail it raises
    :class:`~pyrmq.errors.PartialFailureError` once all are done: ``succeeded`` names those
    that did what was asked, ``failed`` the others and why, and ``result`` is what the method
    returns, from those that succeeded alone (the addresses changed, or the answers read).
    Asked of one broker or name server alone, a method raises that one's failure itself.
    """

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
        self._client_api = ClientAPI(self._remoting)
        self._reader_addrs: dict[str, str] | None = None

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

    async def _checked(
        self, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        """The answer of ``addr`` to a request; BrokerError unless it is a success."""
        return self._check(addr, await self._call(addr, code, ext, body))

    def _asking(
        self, code: int, ext: dict[str, str] | None = None, body: bytes = b""
    ) -> Callable[[str], Awaitable[RemotingCommand]]:
        """:meth:`_checked` of one request, for :meth:`_each` to send to each target."""
        return lambda addr: self._checked(addr, code, ext, body)

    async def _each(
        self,
        targets: Sequence[str],
        ask: Callable[[str], Awaitable[T]],
        shape: Callable[[dict[str, T]], R],
    ) -> R:
        """``shape`` of ``ask(target)``'s answers by target, in the order given, every target
        asked at once: one that fails does not keep the others from being asked. See
        :func:`_settled` for what a failure raises."""
        answers, failed = await _gathered(targets, ask)
        return _settled(shape(answers), answers, failed)

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

    async def masters(self, cluster: str | None = None) -> list[str]:
        """The masters' addresses, of ``cluster`` (default: of every cluster); NoRouteError
        if ``cluster`` has no broker."""
        return await self._masters(cluster)

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
        attributes: str | None = None,
    ) -> list[str]:
        """Creates or updates ``topic`` on ``broker_addr``, or on every master of ``cluster``
        (default: of every cluster); returns the brokers' addresses. ``perm``: 2 write, 4 read.
        ``attributes`` changes RocketMQ 5's topic attributes (``+message.type=FIFO``, ``-key``).
        Each broker is asked whatever the others answer: PartialFailureError names those that
        failed (its ``result``: the addresses of those that did it), as for every change made
        on several brokers or name servers; one broker asked raises its own failure."""
        header = CreateTopicRequestHeader(
            topic=topic,
            default_topic="TBW102",
            read_queue_nums=queue_nums,
            write_queue_nums=queue_nums,
            perm=perm,
            order=order,
            attributes=attributes,
        ).to_ext()
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        return await self._each(
            addrs, self._asking(RequestCode.UPDATE_AND_CREATE_TOPIC, header), _targets
        )

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Deletes ``topic`` from every master of ``cluster`` (default: of every cluster), its
        messages and the groups' offsets on it included, then from the name servers' routes
        unless every broker failed; returns the brokers' addresses. PartialFailureError
        names the brokers and name servers that failed; its ``succeeded`` lists both kinds,
        its ``result`` the brokers alone."""
        addrs = await self._masters(cluster)
        header = DeleteTopicRequestHeader(topic=topic).to_ext()
        brokers, failed = await _gathered(
            addrs, self._asking(RequestCode.DELETE_TOPIC_IN_BROKER, header)
        )
        if failed and not brokers:
            # Still on every broker: its route stays, as they would register it again.
            return _settled([], [], failed)
        in_namesrv = DeleteTopicRequestHeader(topic=topic, cluster_name=cluster).to_ext()
        namesrvs, namesrv_failed = await _gathered(
            self.namesrv_addrs, self._asking(RequestCode.DELETE_TOPIC_IN_NAMESRV, in_namesrv)
        )
        return _settled(list(brokers), [*brokers, *namesrvs], failed | namesrv_failed)

    async def update_group(
        self,
        group: str,
        *,
        orderly: bool = False,
        retry_max_times: int = 16,
        retry_queue_nums: int = 1,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Sets consumer group ``group``'s settings (``mqadmin updateSubGroup``) on
        ``broker_addr``, or on every master of ``cluster`` (default: of every cluster);
        returns the brokers' addresses. ``orderly``: its RocketMQ 5 clients consume FIFO
        messages in order; ``retry_max_times``: redeliveries before its DLQ;
        ``retry_queue_nums``: the queues of its retry topic when the broker makes it, over
        which its retries are spread (0: no retries, a message handed back is dropped)."""
        body = json.dumps(
            {
                "groupName": group,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "consumeMessageOrderly": orderly,
                "retryQueueNums": retry_queue_nums,
                "retryMaxTimes": retry_max_times,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
        ).encode()
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        return await self._each(
            addrs,
            self._asking(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body),
            _targets,
        )

    async def set_consume_mode(
        self,
        topic: str,
        group: str,
        mode: str,
        *,
        pop_share_queue_num: int = 0,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Sets how ``group`` reads ``topic`` when its consumers leave the rebalance to the
        brokers (``mqadmin setConsumeMode``): ``PULL`` or ``POP``, and in pop how many other
        members' queues each member also pops, on ``broker_addr`` or every master of
        ``cluster`` (default: of every cluster); returns the brokers' addresses."""
        body = json.dumps(
            {
                "topic": topic,
                "consumerGroup": group,
                "mode": mode,
                "popShareQueueNum": pop_share_queue_num,
            }
        ).encode()
        addrs = [broker_addr] if broker_addr else await self._masters(cluster)
        return await self._each(
            addrs, self._asking(RequestCode.SET_MESSAGE_REQUEST_MODE, body=body), _targets
        )

    async def groups(self, broker_addr: str) -> dict[str, dict[str, Any]]:
        """Every consumer group's settings on one broker, by name, in RocketMQ's JSON form."""
        response = await self._call(broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        self._check(broker_addr, response)
        table = loads_loose_json(response.body).get("subscriptionGroupTable") or {}
        return {str(name): dict(value) for name, value in table.items()}

    async def delete_group(
        self, group: str, *, cluster: str | None = None, remove_offsets: bool = False
    ) -> list[str]:
        """Deletes group ``group``'s settings (and with ``remove_offsets`` its offsets) from
        every master of ``cluster`` (default: of every cluster); returns the brokers'
        addresses."""
        ext = {"groupName": group, "cleanOffset": "true" if remove_offsets else "false"}
        addrs = await self._masters(cluster)
        return await self._each(
            addrs, self._asking(RequestCode.DELETE_SUBSCRIPTIONGROUP, ext), _targets
        )

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
        """Every queue of ``topic`` on every broker that holds it; NoRouteError if none does.
        PartialFailureError, its ``result`` the queues of the brokers that answered, when
        some did not."""
        route = await self._route(topic)
        header = GetTopicStatsInfoRequestHeader(topic=topic).to_ext()

        async def offsets(addr: str) -> dict[MessageQueue, TopicOffset]:
            answer = await self._checked(addr, RequestCode.GET_TOPIC_STATS_INFO, header)
            return {
                mq: TopicOffset(
                    int(v.get("minOffset", 0)),
                    int(v.get("maxOffset", 0)),
                    int(v.get("lastUpdateTimestamp", 0)),
                )
                for mq, v in loads_queue_table(answer.body).items()
            }

        # A master away: its slave has the queues (as mqadmin reads them).
        addrs = [a for d in route.brokers.values() if (a := d.any_addr()) is not None]
        return await self._each(addrs, offsets, _merged)

    async def consumer_progress(
        self, group: str, topic: str | None = None
    ) -> dict[MessageQueue, ConsumerProgress]:
        """The group's progress on ``topic``, or on every topic it has committed offsets for,
        from every master broker (or its slave while the master is away)."""
        return (await self.consume_stats(group, topic)).queues

    async def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        """:meth:`consumer_progress` with the group's consume rate (``mqadmin
        consumerProgress``). PartialFailureError, its ``result`` the stats of the brokers
        that answered, when some did not."""
        header = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic).to_ext()

        async def stats(addr: str) -> ConsumeStats:
            answer = await self._checked(addr, RequestCode.GET_CONSUME_STATS, header)
            parsed = loads_fastjson(answer.body)
            return ConsumeStats(
                _progress(parsed.get("offsetTable")), float(parsed.get("consumeTps") or 0.0)
            )

        def summed(found: dict[str, ConsumeStats]) -> ConsumeStats:
            queues = _merged({addr: s.queues for addr, s in found.items()})
            return ConsumeStats(queues, sum(s.consume_tps for s in found.values()))

        return await self._each(await self._readers(), stats, summed)

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
        NoRouteError if they know none. PartialFailureError, its ``result`` what the brokers
        that answered found, when some did not answer."""
        return await self._query(
            topic,
            key,
            max_num,
            begin_ms,
            end_ms,
            # The brokers' index finds keys by hash: a colliding key is no match.
            lambda m: key in m.keys.split(" "),
            unique=False,
            every_broker=every_broker,
        )

    async def query_message_by_unique_key(self, topic: str, uniq_key: str) -> list[MessageExt]:
        """Messages of ``topic`` whose producer's id (``UNIQ_KEY``) is ``uniq_key``, oldest
        first: one, or more when the producer sent it again after a failed attempt.
        PartialFailureError as :meth:`query_message`."""
        return await self._query(
            topic,
            uniq_key,
            32,
            0,
            None,
            lambda m: m.get_property("UNIQ_KEY") == uniq_key,
            unique=True,
        )

    async def _query(
        self,
        topic: str,
        key: str,
        max_num: int,
        begin_ms: int,
        end_ms: int | None,
        keep: Callable[[MessageExt], bool],
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
        names = {addr: name for name, addr in brokers}

        async def queried(addr: str) -> list[MessageExt]:
            response = await self._call(addr, RequestCode.QUERY_MESSAGE, ext)
            if response.code == ResponseCode.QUERY_NOT_FOUND:
                return []
            return _core.decode_received(self._check(addr, response).body, names[addr])

        answers, failed = await _gathered(list(names), queried)
        found = sorted(
            (m for part in answers.values() for m in part if keep(m)),
            key=lambda m: (m.store_timestamp, m.broker_name, m.commit_log_offset),
        )
        return _settled(found, answers, failed)

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

    async def _brokers(self, broker_addr: str | None, cluster: str | None) -> list[str]:
        """``broker_addr`` alone, or every broker (masters and slaves) of ``cluster`` (default:
        of every cluster), as mqadmin's ``-b`` and ``-c``."""
        if broker_addr:
            return [broker_addr]
        brokers = [b for b in await self.clusters() if cluster is None or b.cluster == cluster]
        if cluster is not None and not brokers:
            raise NoRouteError(f"no broker in cluster {cluster}")
        return [addr for b in brokers for _, addr in sorted(b.addrs.items())]

    async def clean_expired_consume_queue(
        self, broker_addr: str | None = None, *, cluster: str | None = None
    ) -> list[str]:
        """Has the broker at ``broker_addr``, or each of ``cluster`` (default: of every
        cluster), delete the ConsumeQueues whose every message retention has removed from its
        CommitLog (``mqadmin cleanExpiredCQ``); returns the brokers' addresses. A pyrmq broker
        deletes a topic's queues only together: an expired queue of a topic with a live one
        stays."""
        addrs = await self._brokers(broker_addr, cluster)
        return await self._each(
            addrs, self._asking(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE), _targets
        )

    async def clean_unused_topic(
        self, broker_addr: str | None = None, *, cluster: str | None = None
    ) -> list[str]:
        """Has the broker at ``broker_addr``, or each of ``cluster`` (default: of every
        cluster), delete the ConsumeQueues of topics no longer in its topic table (``mqadmin
        cleanUnusedTopic``); returns the brokers' addresses."""
        addrs = await self._brokers(broker_addr, cluster)
        return await self._each(addrs, self._asking(RequestCode.CLEAN_UNUSED_TOPIC), _targets)

    async def resume_check_half_message(self, topic: str, msg_id: str) -> str:
        """Has the broker check the transaction of a half message it gave up again, as if it
        had never been checked (RocketMQ's resumeCheckHalfMessage): its producer's checker
        then commits or rolls it back. ``msg_id`` is an offset message id, or the producer's
        message id of a message of ``topic`` (``TRANS_CHECK_MAX_TIME_TOPIC``, where a half
        given up is kept). Returns the broker's address. ClientError if no such message is
        found; BrokerError if the broker refuses, e.g. for a transaction that has ended."""
        addr: str | None = None
        offset_msg_id = msg_id
        with contextlib.suppress(ValueError):
            addr, _ = _core.decode_offset_msg_id(msg_id)
        # A producer's message id decodes too, to an address no broker has.
        known = {a for b in await self.clusters() for a in b.addrs.values()}
        if addr not in known:
            try:
                found = await self.query_message_by_unique_key(topic, msg_id)
            except NoRouteError as e:
                raise ClientError(f"no message {msg_id} in topic {topic}: {e}") from e
            if not found:
                raise ClientError(f"no message {msg_id} in topic {topic}")
            offset_msg_id = found[-1].offset_msg_id
            addr = found[-1].store_host
        header = ResumeCheckHalfMessageRequestHeader(msg_id=offset_msg_id).to_ext()
        self._check(addr, await self._call(addr, RequestCode.RESUME_CHECK_HALF_MESSAGE, header))
        return addr

    async def query_correction_offset(
        self, broker_addr: str, topic: str, group: str, filter_groups: Sequence[str] = ()
    ) -> dict[int, int]:
        """Per queue of ``topic`` on the broker at ``broker_addr``, the lowest offset committed
        by any group but ``filter_groups`` (offsets below the queue's first message left
        out), or 2**63-1 where ``group``'s own offset is lower than that (RocketMQ's
        queryCorrectionOffset)."""
        header = QueryCorrectionOffsetHeader(
            topic=topic, compare_group=group, filter_groups=",".join(filter_groups) or None
        ).to_ext()
        answer = self._check(
            broker_addr,
            await self._call(broker_addr, RequestCode.QUERY_CORRECTION_OFFSET, header),
        )
        table = loads_loose_json(answer.body or b"{}").get("correctionOffsets") or {}
        return {int(q): int(o) for q, o in sorted(table.items(), key=lambda e: int(e[0]))}

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

    async def _topic_masters(self, topic: str) -> list[str]:
        route = await self._route(topic)
        return [a for a in (b.master for b in route.brokers.values()) if a is not None]

    async def consumer_connection(self, group: str) -> ConsumerConnection:
        """The group's online consumers, from every master broker (``mqadmin
        consumerConnection``); BrokerError CONSUMER_NOT_ONLINE when none is online.
        PartialFailureError, its ``result`` what the brokers that answered know (None if none
        knows the group online), when some did not answer."""

        async def listed(addr: str) -> tuple[dict[str, Any] | None, BrokerError | None]:
            """The broker's answer, or (a group offline there) its refusal."""
            answer = await self._call(
                addr, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}
            )
            if answer.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return None, BrokerError(answer.code, answer.remark, addr)
            return dict(loads_loose_json(self._check(addr, answer).body)), None

        answers, failed = await _gathered(await self._masters(), listed)
        bodies = [body for body, _ in answers.values() if body is not None]
        if not bodies:
            if failed:
                raise PartialFailureError(answers, failed)
            refusals = [refusal for _, refusal in answers.values() if refusal is not None]
            raise refusals[0] if refusals else NoRouteError("no master broker is registered")
        first = bodies[0]
        connections: dict[str, ClientConnection] = {}
        for body in bodies:
            for raw in body.get("connectionSet") or []:
                conn = ClientConnection.parse(raw)
                connections.setdefault(conn.client_id, conn)
        subscriptions = {
            str(topic): (str(sub.get("expressionType") or "TAG"), str(sub.get("subString", "")))
            for topic, sub in (first.get("subscriptionTable") or {}).items()
        }
        found = ConsumerConnection(
            sorted(connections.values(), key=lambda c: c.client_id),
            dict(sorted(subscriptions.items())),
            str(first.get("consumeType", "")),
            str(first.get("messageModel", "")),
            str(first.get("consumeFromWhere", "")),
        )
        return _settled(found, answers, failed)

    async def producer_connection(self, group: str, topic: str) -> list[ClientConnection]:
        """The producers of ``group`` connected to the brokers of ``topic`` (``mqadmin
        producerConnection``); BrokerError when none knows the group. PartialFailureError, its
        ``result`` the producers the brokers that answered know, when some did not answer."""

        async def listed(addr: str) -> tuple[list[ClientConnection], BrokerError | None]:
            """The broker's answer, or (a group it does not know) its refusal."""
            answer = await self._call(
                addr, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}
            )
            if answer.code != ResponseCode.SUCCESS:
                return [], BrokerError(answer.code, answer.remark, addr)
            raws = loads_loose_json(answer.body).get("connectionSet") or []
            return [ClientConnection.parse(raw) for raw in raws], None

        answers, failed = await _gathered(await self._topic_masters(topic), listed)
        connections: dict[str, ClientConnection] = {}
        refusals = [refusal for _, refusal in answers.values() if refusal is not None]
        for listing, _ in answers.values():
            for conn in listing:
                connections.setdefault(conn.client_id, conn)
        if not connections and refusals and not failed:
            raise refusals[0]
        return _settled(sorted(connections.values(), key=lambda c: c.client_id), answers, failed)

    async def topic_consumed_by(self, topic: str) -> list[str]:
        """The groups that consume ``topic``: those with consumers of it online or offsets
        committed on it, on any of its brokers. PartialFailureError, its ``result`` the groups
        the brokers that answered know, when some did not."""

        async def groups(addr: str) -> set[str]:
            ext = {"topic": topic}
            answer = await self._checked(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, ext)
            return {str(g) for g in loads_loose_json(answer.body).get("groupList") or []}

        return await self._each(
            await self._topic_masters(topic),
            groups,
            lambda found: sorted(set().union(*found.values())),
        )

    async def reset_offset_by_time(
        self, topic: str, group: str, timestamp_ms: int, *, force: bool = True
    ) -> dict[MessageQueue, int]:
        """Moves ``group``'s offsets on ``topic`` to the first message stored at or after
        ``timestamp_ms`` (-1: the end of each queue), on every broker of the topic, and
        returns the new offsets (``mqadmin resetOffsetByTime``). Without ``force`` an offset
        only moves back. Where the group has consumers online the broker moves them too; where
        it has none, the offsets are committed one queue at a time, as ``mqadmin`` does.
        PartialFailureError, its ``result`` the new offsets on the brokers that moved them,
        when some did not."""
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp_ms, is_force=force
        ).to_ext()

        async def reset(addr: str) -> dict[MessageQueue, int]:
            answer = await self._call(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
            if answer.code == ResponseCode.CONSUMER_NOT_ONLINE:
                return await self._reset_offline(addr, topic, group, timestamp_ms, force)
            table = loads_queue_table(self._check(addr, answer).body)
            return {mq: int(offset) for mq, offset in table.items()}

        return await self._each(await self._topic_masters(topic), reset, _merged)

    async def _reset_offline(
        self, addr: str, topic: str, group: str, timestamp_ms: int, force: bool
    ) -> dict[MessageQueue, int]:
        """:meth:`reset_offset_by_time` on a broker where ``group`` has no consumer online:
        each queue the group committed an offset for, or else every queue from its start."""
        stats = GetConsumeStatsRequestHeader(consumer_group=group, topic=topic).to_ext()
        answer = self._check(addr, await self._call(addr, RequestCode.GET_CONSUME_STATS, stats))
        committed = {
            mq: int(v.get("consumerOffset", 0))
            for mq, v in queue_table(loads_fastjson(answer.body).get("offsetTable")).items()
            if mq.topic == topic
        }
        if not committed:
            info = GetTopicStatsInfoRequestHeader(topic=topic).to_ext()
            answer = self._check(
                addr, await self._call(addr, RequestCode.GET_TOPIC_STATS_INFO, info)
            )
            committed = {
                mq: int(v.get("minOffset", 0)) for mq, v in loads_queue_table(answer.body).items()
            }
        out: dict[MessageQueue, int] = {}
        for mq, offset in sorted(committed.items()):
            if timestamp_ms == -1:
                code = RequestCode.GET_MAX_OFFSET
                ext = GetMaxOffsetRequestHeader(topic=topic, queue_id=mq.queue_id).to_ext()
            else:
                code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
                ext = SearchOffsetRequestHeader(
                    topic=topic, queue_id=mq.queue_id, timestamp=timestamp_ms
                ).to_ext()
            found = self._check(addr, await self._call(addr, code, ext))
            target = int(found.ext_fields.get("offset", "0"))
            if force or target <= offset:
                update = UpdateConsumerOffsetRequestHeader(
                    consumer_group=group, topic=topic, queue_id=mq.queue_id, commit_offset=target
                ).to_ext()
                self._check(
                    addr, await self._call(addr, RequestCode.UPDATE_CONSUMER_OFFSET, update)
                )
                offset = target
            out[mq] = offset
        return out

    async def broker_stats(self, addr: str, name: str, key: str) -> dict[str, StatsWindow]:
        """One of the broker's traffic counters (``name`` TOPIC_PUT_NUMS with a topic,
        GROUP_GET_NUMS with ``topic@group``, ...) over its last minute, hour and day, keyed
        ``statsMinute``, ``statsHour`` and ``statsDay``; BrokerError when it counted none."""
        answer = self._check(
            addr,
            await self._call(
                addr, RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key}
            ),
        )
        body = loads_loose_json(answer.body)
        return {f: StatsWindow.parse(body.get(f)) for f in ("statsMinute", "statsHour", "statsDay")}

    async def topic_traffic(self, topic: str) -> TopicTraffic:
        """``topic``'s traffic in and out (``mqadmin statsAll``); a counter a broker has not
        started (nothing sent or consumed there) counts as 0."""
        masters = await self._topic_masters(topic)

        async def counted(name: str, key: str) -> tuple[float, int]:
            tps, total = 0.0, 0
            for addr in masters:
                try:
                    windows = await self.broker_stats(addr, name, key)
                except BrokerError:
                    continue
                tps += windows["statsMinute"].tps
                total += _recent_sum(windows)
            return tps, total

        in_tps, in_24h = await counted("TOPIC_PUT_NUMS", topic)
        groups: dict[str, tuple[float, int, int]] = {}
        for group in await self.topic_consumed_by(topic):
            out_tps, out_24h = await counted("GROUP_GET_NUMS", f"{topic}@{group}")
            lag = (await self.consume_stats(group, topic)).lag
            groups[group] = (out_tps, out_24h, lag)
        return TopicTraffic(in_tps, in_24h, groups)

    # --- consume time span, topic lists, offset clone, name-server settings, KV config,
    # --- write permission, broker-wide consume stats

    async def query_consume_time_span(self, topic: str, group: str) -> list[QueueTimeSpan]:
        """For each queue of ``topic`` on every broker that holds it: the store times of its
        first and last messages, of the last one ``group`` consumed, and how long ago the
        next one it has to consume was stored (RocketMQ's ``queryConsumeTimeSpan``).
        NoRouteError if no broker holds the topic; PartialFailureError, its ``result`` the
        queues of the brokers that answered, when some did not."""
        route = await self._route(topic)
        header = QueryConsumeTimeSpanRequestHeader(topic=topic, group=group).to_ext()

        async def spans(addr: str) -> list[QueueTimeSpan]:
            answer = await self._checked(addr, RequestCode.QUERY_CONSUME_TIME_SPAN, header)
            return [_time_span(s) for s in json.loads(answer.body).get("consumeTimeSpanSet") or []]

        addrs = [a for d in route.brokers.values() if (a := d.any_addr()) is not None]
        return await self._each(
            addrs,
            spans,
            lambda found: sorted(
                (s for part in found.values() for s in part), key=lambda s: s.message_queue
            ),
        )

    async def topic_list(self) -> list[str]:
        """Every topic in the name servers' routes (``mqadmin topicList``), retry and DLQ
        topics included."""
        addr, response = await self._ask_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        self._check(addr, response)
        return sorted(str(t) for t in json.loads(response.body).get("topicList") or [])

    async def system_topics(self) -> list[str]:
        """The names no topic may take: RocketMQ's system topics, from a broker, with the
        cluster and broker names, from the name servers (``getSystemTopicList``)."""
        addr, response = await self._ask_namesrv(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS)
        body = json.loads(self._check(addr, response).body or b"{}")
        names = {str(t) for t in body.get("topicList") or []}
        broker = body.get("brokerAddr")
        if names and broker:
            answer = self._check(
                broker, await self._call(broker, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
            )
            names |= {str(t) for t in json.loads(answer.body).get("topicList") or []}
        return sorted(names)

    async def clone_group_offset(
        self, src_group: str, dest_group: str, topic: str, *, offline: bool = False
    ) -> dict[MessageQueue, int]:
        """Gives ``dest_group`` ``src_group``'s committed offsets on ``topic`` on every master
        that holds it (CLONE_GROUP_OFFSET); returns the offsets ``dest_group`` now has.
        NoRouteError if no broker holds the topic; ClientError if the source group has no
        offsets on it, or if a broker passed it over because the source group has live
        consumers, none subscribing to ``topic`` (``offline`` clones anyway). The brokers
        answer success in both cases, as RocketMQ's do: the outcome is read back.
        PartialFailureError, its ``result`` the offsets cloned, when some brokers did not
        clone them."""
        route = await self._route(topic)
        header = CloneGroupOffsetRequestHeader(
            src_group=src_group, dest_group=dest_group, topic=topic, offline=offline
        ).to_ext()
        names = {d.master: name for name, d in sorted(route.brokers.items()) if d.master}

        async def clone(addr: str) -> dict[MessageQueue, int]:
            await self._checked(addr, RequestCode.CLONE_GROUP_OFFSET, header)
            answer = await self._checked(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
            table = loads_loose_json(answer.body).get("offsetTable") or {}
            src = table.get(f"{topic}@{src_group}")
            if src is None:
                return {}
            if table.get(f"{topic}@{dest_group}") != src:
                raise ClientError(
                    f"{addr} did not clone the offsets of {src_group} on {topic}: the group has "
                    f"live consumers and none subscribes to the topic (clone offline to do it "
                    f"anyway)"
                )
            return {MessageQueue(topic, names[addr], int(q)): int(o) for q, o in src.items()}

        cloned = await self._each(list(names), clone, _merged)
        if not cloned:
            raise ClientError(f"group {src_group} has no committed offsets on topic {topic}")
        return cloned

    async def namesrv_config(self, addrs: list[str] | None = None) -> dict[str, dict[str, str]]:
        """Every setting of each name server (default: each this admin knows), by address,
        under RocketMQ's keys (``mqadmin getNamesrvConfig``). PartialFailureError, its
        ``result`` the settings of those that answered, when some did not."""

        async def settings(addr: str) -> dict[str, str]:
            answer = await self._checked(addr, RequestCode.GET_NAMESRV_CONFIG)
            return parse_properties(answer.body.decode("utf-8", "replace"), source=addr)

        return await self._each(addrs or self.namesrv_addrs, settings, dict)

    async def update_namesrv_config(
        self, settings: Mapping[str, object], addrs: list[str] | None = None
    ) -> list[str]:
        """Changes settings of each name server (default: each this admin knows) while it
        runs (``mqadmin updateNamesrvConfig``): all of them, or none and a BrokerError that
        says why. A pyrmq name server changes ``orderMessageEnable``,
        ``scanNotActiveBrokerInterval`` and ``brokerChannelExpiredTime`` (until it restarts)
        and refuses the others; returns the name servers' addresses."""
        body = "".join(f"{key}={_setting(value)}\n" for key, value in settings.items()).encode()
        return await self._each(
            addrs or self.namesrv_addrs,
            self._asking(RequestCode.UPDATE_NAMESRV_CONFIG, body=body),
            _targets,
        )

    async def put_kv_config(self, namespace: str, key: str, value: str) -> list[str]:
        """Sets a KV config value on every name server (``mqadmin updateKvConfig``); returns
        their addresses."""
        ext = KvConfigRequestHeader(namespace=namespace, key=key, value=value).to_ext()
        return await self._each(
            self.namesrv_addrs, self._asking(RequestCode.PUT_KV_CONFIG, ext), _targets
        )

    async def kv_config(self, namespace: str, key: str) -> str | None:
        """A KV config value, from the first name server that answers; None when unset."""
        ext = KvConfigRequestHeader(namespace=namespace, key=key).to_ext()
        addr, response = await self._ask_namesrv(RequestCode.GET_KV_CONFIG, ext)
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return None
        return self._check(addr, response).ext_fields.get("value")

    async def delete_kv_config(self, namespace: str, key: str) -> list[str]:
        """Removes a KV config value from every name server (``mqadmin deleteKvConfig``); a
        value never set is no error, as in RocketMQ. Returns the name servers' addresses."""
        ext = KvConfigRequestHeader(namespace=namespace, key=key).to_ext()
        return await self._each(
            self.namesrv_addrs, self._asking(RequestCode.DELETE_KV_CONFIG, ext), _targets
        )

    async def wipe_write_perm(self, broker_name: str) -> dict[str, int]:
        """Takes the write permission of every topic on ``broker_name`` out of each name
        server's routes (``mqadmin wipeWritePerm``), so that producers send elsewhere while
        the broker drains; returns how many topics changed, by name server. The broker's next
        registration with changed topics gives it back, as in RocketMQ."""
        return await self._write_perm(
            broker_name, RequestCode.WIPE_WRITE_PERM_OF_BROKER, "wipeTopicCount"
        )

    async def add_write_perm(self, broker_name: str) -> dict[str, int]:
        """Gives back the write permission :meth:`wipe_write_perm` took (``mqadmin
        addWritePerm``); returns how many topics changed, by name server."""
        return await self._write_perm(
            broker_name, RequestCode.ADD_WRITE_PERM_OF_BROKER, "addTopicCount"
        )

    async def _write_perm(self, broker_name: str, code: int, field: str) -> dict[str, int]:
        ext = BrokerWritePermRequestHeader(broker_name=broker_name).to_ext()

        async def count(addr: str) -> int:
            answer = await self._checked(addr, code, ext)
            return int(answer.ext_fields.get(field, "0"))

        return await self._each(self.namesrv_addrs, count, dict)

    async def broker_consume_stats(
        self, addr: str, *, order_only: bool = False, timeout_s: float | None = None
    ) -> BrokerConsumeStats:
        """Every consumer group's progress on the broker at ``addr`` (``mqadmin
        brokerConsumeStats``); ``order_only``: on its ordered topics only."""
        header = GetConsumeStatsInBrokerHeader(is_order=order_only).to_ext()
        request = RemotingCommand.request(RequestCode.GET_BROKER_CONSUME_STATS, header)
        request.language = LANGUAGE
        response = await self._remoting.invoke(addr, request, timeout_s or self.timeout_s)
        parsed = loads_fastjson(self._check(addr, response).body)
        groups: list[GroupConsumeStats] = []
        for entry in parsed.get("consumeStatsList") or []:
            for group, per_topic in entry.items():
                for stats in per_topic or []:
                    queues = dict(sorted(_progress(stats.get("offsetTable")).items()))
                    tps = float(stats.get("consumeTps") or 0.0)
                    groups.append(GroupConsumeStats(queues=queues, consume_tps=tps, group=group))
        return BrokerConsumeStats(
            str(parsed.get("brokerAddr") or addr), groups, int(parsed.get("totalDiff") or 0)
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
        self, group: str, topic: str, client_id: str | Sequence[str] | None = None
    ) -> dict[str, dict[MessageQueue, int]]:
        """Each online consumer of ``group``'s offsets on ``topic``'s queues, by client id, as
        the consumers hold them (``mqadmin getConsumerStatus``); only those of ``client_id``
        when it is given: one client id, several as a list, or a comma-separated string. A
        broker of the topic asks the consumers, leaving out any that does not answer within
        5 s. NoRouteError if no broker holds the topic; BrokerError if the group (or one of
        the client ids) has no consumer online."""
        route = await self._route(topic)
        addrs = [a for d in route.brokers.values() if (a := d.any_addr()) is not None]
        if not addrs:
            raise NoRouteError(f"no broker of topic {topic} has an address")
        addr = addrs[0]
        ids = client_id.split(",") if isinstance(client_id, str) else list(client_id or [])
        # The request names one client or every one: several are asked one by one.
        only: list[str | None] = [*dict.fromkeys(i.strip() for i in ids if i.strip())]
        out: dict[str, dict[MessageQueue, int]] = {}
        for cid in only or [None]:
            out.update(await self._consumer_status(addr, group, topic, cid))
        return dict(sorted(out.items()))

    async def _consumer_status(
        self, addr: str, group: str, topic: str, client_id: str | None
    ) -> dict[str, dict[MessageQueue, int]]:
        header = GetConsumerStatusRequestHeader(
            topic=topic, group=group, client_addr=client_id
        ).to_ext()
        request = RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_GET_CONSUMER_STATUS, header)
        request.language = LANGUAGE
        # The broker waits up to 5 s for the consumers (all at once).
        response = await self._remoting.invoke(addr, request, self.timeout_s * 3)
        self._check(addr, response)
        table = loads_fastjson(response.body).get("consumerTable") or {}
        out: dict[str, dict[MessageQueue, int]] = {}
        for cid, offsets in table.items():
            out[str(cid)] = {
                mq: int(v) for mq, v in sorted(queue_table(offsets).items()) if type(v) is int
            }
        return out

    async def _acl_brokers(
        self, cluster: str | None, broker_addr: str | None, *, slaves: bool
    ) -> list[str]:
        """``broker_addr``, or each master of ``cluster`` (default: of every cluster) and,
        with ``slaves``, its slaves: mqadmin's ACL commands change slaves' files too."""
        if broker_addr:
            return [broker_addr]
        brokers = [b for b in await self.clusters() if cluster is None or b.cluster == cluster]
        if cluster is not None and not brokers:
            raise NoRouteError(f"no broker in cluster {cluster}")
        return [
            addr
            for b in brokers
            for bid, addr in sorted(b.addrs.items())
            if slaves or bid == MASTER_ID
        ]

    async def update_acl_config(
        self,
        access_key: str,
        secret_key: str,
        *,
        white_remote_address: str | None = None,
        default_topic_perm: str | None = None,
        default_group_perm: str | None = None,
        topic_perms: Sequence[str] | None = None,
        group_perms: Sequence[str] | None = None,
        admin: bool = False,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Creates or updates the ACL account ``access_key`` (``mqadmin updateAclConfig``) on
        ``broker_addr``, or on every broker of ``cluster``, slaves included (default: of every
        cluster); returns the brokers' addresses. Permissions are spelled as in
        ``plain_acl.yml``: ``PUB|SUB``, ``topic_perms=["TopicA=PUB", "TopicB=DENY"]``. A field
        left None keeps what the account had; ``admin`` is always set. A broker refuses keys
        of six characters or fewer and permissions it cannot read (BrokerError with
        UPDATE_AND_CREATE_ACL_CONFIG_FAILED)."""
        header = CreateAccessConfigRequestHeader(
            access_key=access_key,
            secret_key=secret_key,
            white_remote_address=white_remote_address,
            admin=admin,
            default_topic_perm=default_topic_perm,
            default_group_perm=default_group_perm,
            topic_perms=None if topic_perms is None else ",".join(topic_perms),
            group_perms=None if group_perms is None else ",".join(group_perms),
        ).to_ext()
        addrs = await self._acl_brokers(cluster, broker_addr, slaves=True)
        return await self._each(
            addrs, self._asking(RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, header), _targets
        )

    async def delete_acl_config(
        self, access_key: str, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[str]:
        """Deletes the ACL account ``access_key`` (``mqadmin deleteAclConfig``) from
        ``broker_addr``, or from every broker of ``cluster``, slaves included (default: of
        every cluster); returns the brokers' addresses."""
        header = DeleteAccessConfigRequestHeader(access_key=access_key).to_ext()
        addrs = await self._acl_brokers(cluster, broker_addr, slaves=True)
        return await self._each(
            addrs, self._asking(RequestCode.DELETE_ACL_CONFIG, header), _targets
        )

    async def update_global_white_addrs(
        self,
        patterns: Sequence[str],
        *,
        acl_file_path: str | None = None,
        cluster: str | None = None,
        broker_addr: str | None = None,
    ) -> list[str]:
        """Replaces the global white list (``mqadmin updateGlobalWhiteAddr``) of the ACL file
        ``acl_file_path`` (default: the broker's) on ``broker_addr``, or on every broker of
        ``cluster``, slaves included (default: of every cluster); returns the brokers'
        addresses. Hosts it matches need no account."""
        header = UpdateGlobalWhiteAddrsConfigRequestHeader(
            global_white_addrs=",".join(patterns), acl_file_full_path=acl_file_path
        ).to_ext()
        addrs = await self._acl_brokers(cluster, broker_addr, slaves=True)
        return await self._each(
            addrs, self._asking(RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, header), _targets
        )

    async def acl_versions(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> list[BrokerAclVersion]:
        """The data version of the ACL file of ``broker_addr``, or of each master of
        ``cluster`` (default: of every cluster): ``mqadmin clusterAclConfigVersion``. Each
        master is asked whatever the others answer: PartialFailureError names those that
        failed, its ``result`` the versions of those that answered, as for every read of
        several brokers or name servers; one broker asked raises its own failure."""

        async def version(addr: str) -> BrokerAclVersion:
            response = await self._checked(addr, RequestCode.GET_BROKER_CLUSTER_ACL_INFO)
            return BrokerAclVersion.parse(
                GetBrokerAclConfigResponseHeader.from_ext(response.ext_fields)
            )

        addrs = await self._acl_brokers(cluster, broker_addr, slaves=False)
        return await self._each(addrs, version, lambda found: list(found.values()))

    async def acl_config(
        self, *, cluster: str | None = None, broker_addr: str | None = None
    ) -> dict[str, AclConfig]:
        """The ACL accounts, secrets included, and global white list of ``broker_addr``, or of
        each master of ``cluster`` (default: of every cluster), by broker address: ``mqadmin
        getAclConfig``. PartialFailureError, its ``result`` the configs of the masters that
        answered, when some did not."""

        async def config(addr: str) -> AclConfig:
            response = await self._checked(addr, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG)
            return AclConfig.parse(json.loads(response.body) if response.body else {})

        addrs = await self._acl_brokers(cluster, broker_addr, slaves=False)
        return await self._each(addrs, config, dict)

    # --- what the message tools read: topic configs, queues and their messages ------------

    async def topic_clusters(self, topic: str) -> list[str]:
        """The clusters of the brokers that hold ``topic`` (``mqadmin topicClusterList``);
        NoRouteError if none does."""
        held = set((await self._route(topic)).brokers)
        return sorted({b.cluster for b in await self.clusters() if b.broker_name in held})

    async def topic_configs(
        self, addr: str, *, system: bool = True, special: bool = True
    ) -> dict[str, dict[str, Any]]:
        """Every topic's config on the broker at ``addr``, by name, in RocketMQ's JSON form;
        without ``system`` the broker's system topics are left out, without ``special`` the
        retry and DLQ topics (mqadmin's ``getUserTopicConfig``)."""
        answer = self._check(addr, await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG))
        table = loads_loose_json(answer.body).get("topicConfigTable") or {}
        left_out: set[str] = set()
        if not system:
            names = self._check(
                addr, await self._call(addr, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER)
            )
            left_out = {str(t) for t in json.loads(names.body).get("topicList") or []}
        return {
            str(name): dict(value)
            for name, value in sorted(table.items())
            if name not in left_out and (special or not str(name).startswith(("%RETRY%", "%DLQ%")))
        }

    async def user_groups(self, addr: str) -> dict[str, dict[str, Any]]:
        """:meth:`groups` without RocketMQ's own (``CID_RMQ_SYS_*``, ``TOOLS_CONSUMER`` and
        the like), as mqadmin's ``getUserSubscriptionGroup``."""
        return {
            name: value
            for name, value in (await self.groups(addr)).items()
            if name not in SYSTEM_GROUPS and not name.startswith("CID_RMQ_SYS_")
        }

    async def update_topic_perm(
        self,
        topic: str,
        perm: int,
        *,
        broker_addr: str | None = None,
        cluster: str | None = None,
    ) -> dict[str, int]:
        """Sets ``topic``'s permission (2 write, 4 read, 6 both) on ``broker_addr``, or on
        the masters of ``cluster`` that hold it (default: every master that does), keeping
        its queues and flags (``mqadmin updateTopicPerm``). Returns each broker's permission
        before; a broker that had ``perm`` already is not asked. ClientError if
        ``broker_addr`` does not hold the topic; NoRouteError if no master of ``cluster``
        does."""
        if broker_addr:
            addrs = [broker_addr]
        elif cluster:
            addrs = await self._masters(cluster)
        else:
            addrs = await self._topic_masters(topic)

        async def changed(addr: str) -> int | None:
            return await self._set_topic_perm(addr, topic, perm, held=bool(broker_addr))

        before = await self._each(
            addrs, changed, lambda olds: {a: p for a, p in olds.items() if p is not None}
        )
        if not before:
            raise NoRouteError(f"no master of cluster {cluster} holds topic {topic}")
        return before

    async def _set_topic_perm(self, addr: str, topic: str, perm: int, *, held: bool) -> int | None:
        """:meth:`update_topic_perm` on one broker: the topic's permission before, or None
        when the broker does not hold it (ClientError when it should: ``held``)."""
        config = (await self.topic_configs(addr)).get(topic)
        if config is None:
            if held:
                raise ClientError(f"broker {addr} holds no topic {topic}")
            return None
        old = int(config.get("perm", 6))
        if old != perm:
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic="TBW102",
                read_queue_nums=int(config.get("readQueueNums", 0)),
                write_queue_nums=int(config.get("writeQueueNums", 0)),
                perm=perm,
                topic_sys_flag=int(config.get("topicSysFlag", 0)),
                order=bool(config.get("order", False)),
            ).to_ext()
            await self._checked(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header)
        return old

    async def read_queues(self, topic: str) -> list[MessageQueue]:
        """``topic``'s readable queues, in broker-name order; NoRouteError if no broker holds
        it."""
        return sorted((await self._route(topic)).subscribe_queues())

    async def _reader_of(self, broker_name: str) -> str:
        """The address to read a broker's queues from: its master, or its lowest-numbered
        slave while the master is away."""
        if self._reader_addrs is None:
            self._reader_addrs = {
                b.broker_name: b.addrs[min(b.addrs)] for b in await self.clusters() if b.addrs
            }
        addr = self._reader_addrs.get(broker_name)
        if addr is None:
            raise NoRouteError(f"no broker named {broker_name}")
        return addr

    async def min_offset(self, mq: MessageQueue) -> int:
        """The queue's first offset still held."""
        return await self._client_api.min_offset(await self._reader_of(mq.broker_name), mq)

    async def max_offset(self, mq: MessageQueue) -> int:
        """The offset the queue's next message will take."""
        return await self._client_api.max_offset(await self._reader_of(mq.broker_name), mq)

    async def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the queue's first message stored at or after ``timestamp_ms``."""
        addr = await self._reader_of(mq.broker_name)
        return await self._client_api.search_offset(addr, mq, timestamp_ms)

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        max_nums: int = 32,
        *,
        expression: str = "*",
        group: str = TOOLS_CONSUMER_GROUP,
    ) -> PullResult:
        """Up to ``max_nums`` messages of the queue from ``offset`` on that match the tag
        ``expression``, as ``group`` (nothing is committed); the broker answers at once."""
        addr = await self._reader_of(mq.broker_name)
        header = PullMessageRequestHeader.immediate(
            group, mq.topic, mq.queue_id, offset, max_nums, expression
        )
        return await self._client_api.pull(addr, mq.broker_name, header, self.timeout_s)


def _progress(table: object) -> dict[MessageQueue, ConsumerProgress]:
    """A ConsumeStats' ``offsetTable``, parsed by :func:`loads_fastjson`."""
    return {
        mq: ConsumerProgress(
            int(v.get("brokerOffset", 0)),
            int(v.get("consumerOffset", 0)),
            int(v.get("lastTimestamp", 0)),
        )
        for mq, v in queue_table(table).items()
    }


def _setting(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


async def _gathered(
    targets: Sequence[str], ask: Callable[[str], Awaitable[T]]
) -> tuple[dict[str, T], dict[str, PyrmqError]]:
    """``ask(target)`` for every target at once: the answers and the failures, each by target
    in the order given."""
    unique = list(dict.fromkeys(targets))
    outcomes = await asyncio.gather(*(ask(t) for t in unique), return_exceptions=True)
    answers: dict[str, T] = {}
    failed: dict[str, PyrmqError] = {}
    for target, outcome in zip(unique, outcomes, strict=True):
        if isinstance(outcome, PyrmqError):
            failed[target] = outcome
        elif isinstance(outcome, BaseException):
            raise outcome  # a bug or a cancel, not the target's failure
        else:
            answers[target] = outcome
    return answers, failed


def _settled(result: R, succeeded: Iterable[str], failed: Mapping[str, PyrmqError]) -> R:
    """``result`` when nothing failed. A lone target's failure is raised as it is, as a call
    to one broker raises it; else PartialFailureError carries ``result``, made of what the
    targets that succeeded answered."""
    done = list(succeeded)
    if failed and not done and len(failed) == 1:
        raise next(iter(failed.values()))
    if failed:
        raise PartialFailureError(done, failed, result)
    return result


def _targets(answers: Mapping[str, object]) -> list[str]:
    return list(answers)


def _merged(parts: Mapping[str, Mapping[MessageQueue, T]]) -> dict[MessageQueue, T]:
    """Per-broker tables of queues as one, in queue order."""
    return dict(sorted(item for part in parts.values() for item in part.items()))


def _time_span(raw: Mapping[str, Any]) -> QueueTimeSpan:
    """One of a QUERY_CONSUME_TIME_SPAN answer's ``consumeTimeSpanSet``."""
    mq = raw["messageQueue"]
    return QueueTimeSpan(
        MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"])),
        int(raw.get("minTimeStamp", -1)),
        int(raw.get("maxTimeStamp", -1)),
        int(raw.get("consumeTimeStamp", -1)),
        int(raw.get("delayTime", 0)),
    )
