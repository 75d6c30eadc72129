"""ClientInstance: what the producers and consumers of one client id share.

One instance per (event loop, client id) holds the connections, the topic routes and the
broker addresses, and runs the periodic work: route refresh from the name servers (30 s),
heartbeats to every broker (1 s after start, then every 30 s), rebalance (20 s, and at once
when a broker says the group changed) and offset persistence (5 s). It answers the requests
brokers send to clients and takes the replies they push to its producers' requests.
"""

import asyncio
import contextlib
import dataclasses
import itertools
import json
import logging
import os
import random
import re
import socket
import ssl
import weakref
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, ClassVar, Protocol, Self

from pyrmq import _core
from pyrmq.acl.signing import Credentials
from pyrmq.client.api import ClientAPI
from pyrmq.client.message import MessageQueue
from pyrmq.client.request import ReplyMessage, RequestTable
from pyrmq.client.route import TopicRoute, loads_queue_table
from pyrmq.errors import ClientStateError, ConfigError, HeaderError, NoRouteError, PyrmqError
from pyrmq.properties import PRODUCER_GROUP
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.client import RemotingClient, ServerRequestHandler
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.fastjson import dumps_queue_map
from pyrmq.remoting.headers import (
    CheckTransactionStateRequestHeader,
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerStatusRequestHeader,
)
from pyrmq.remoting.protocol import RequestCode, ResponseCode

__all__ = ["ClientConfig", "ClientInstance", "ClientLifecycle", "ConsumerMember", "ProducerMember"]

log = logging.getLogger(__name__)

DEFAULT_TOPIC = "TBW102"
FIRST_HEARTBEAT_S = 1.0
"""The first heartbeat round comes this long after start, not a whole interval (RocketMQ's
MQClientInstance): a broker finds a requester for its replies only by its heartbeats."""


@dataclasses.dataclass(slots=True)
class ClientConfig:
    """Settings shared by the producers and consumers of one client instance."""

    namesrv_addr: str = "127.0.0.1:9876"
    """Name servers, ``host:port`` separated by ``;``."""
    instance_name: str | None = None
    """Distinguishes client instances of one process; by default the process id."""
    client_ip: str | None = None
    poll_name_server_interval_s: float = 30.0
    heartbeat_broker_interval_s: float = 30.0
    persist_consumer_offset_interval_s: float = 5.0
    rebalance_interval_s: float = 20.0
    lock_interval_s: float = 20.0
    """How often an orderly consumer renews its queue locks (RocketMQ's ``lockInterval``)."""
    request_timeout_s: float = 3.0
    credentials: Credentials | None = None
    """An ACL account's keys: every request to name servers and brokers is signed with them."""
    tls: ssl.SSLContext | None = None
    """Connections to name servers and brokers are TLS with this context
    (:func:`pyrmq.remoting.tls.client_context` makes one)."""
    namespace: str = ""
    """RocketMQ's namespace (Java's ``setNamespace``): producers and consumers name their
    topics and groups ``namespace%name`` to the brokers, and show them without it."""

    def __post_init__(self) -> None:
        try:
            split_addresses(self.namesrv_addr)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if self.namespace:
            try:
                _core.validate_topic(self.namespace)
            except PyrmqError as e:
                raise ConfigError(f"namespace {self.namespace!r}: {e}") from None
            if "%" in self.namespace:
                raise ConfigError(f"namespace {self.namespace!r} must not contain '%'")

    @classmethod
    def of(
        cls, config: "ClientConfig | None", namesrv_addr: str | None, instance_name: str | None
    ) -> "ClientConfig":
        """A client's settings: ``config`` (or the defaults) with the name servers and
        instance name its constructor was given beside it.

        >>> c = ClientConfig.of(ClientConfig(namespace="ns"), "10.0.0.1:9876", None)
        >>> c.namesrv_addr, c.namespace, c.instance_name
        ('10.0.0.1:9876', 'ns', None)
        """
        base = config or cls()
        if namesrv_addr is None and instance_name is None:
            return base
        return dataclasses.replace(
            base,
            namesrv_addr=base.namesrv_addr if namesrv_addr is None else namesrv_addr,
            instance_name=base.instance_name if instance_name is None else instance_name,
        )

    @property
    def namesrv_list(self) -> list[str]:
        return split_addresses(self.namesrv_addr)

    def client_id(self) -> str:
        ip = self.client_ip or _local_ip()
        return f"{ip}@{self.instance_name or os.getpid()}"

    def offsets_id(self) -> str:
        """Where a broadcasting consumer keeps its offsets: the client id without the
        process id, which Java's client gives clustering consumers only, so that a restarted
        process finds them (``<ip>@DEFAULT`` unless an instance name is set)."""
        ip = self.client_ip or _local_ip()
        return f"{ip}@{self.instance_name or 'DEFAULT'}"


def _local_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # picks the interface; sends nothing
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


GROUP_MAX_LENGTH = 255
_GROUP_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")
# Groups RocketMQ's clients keep for themselves.
_DEFAULT_GROUPS = {False: "DEFAULT_PRODUCER", True: "DEFAULT_CONSUMER"}


def check_group(group: str, *, consumer: bool) -> None:
    """Raises ConfigError for a group name RocketMQ's clients refuse to start with: blank, over
    255 characters, outside ``[%|a-zA-Z0-9_-]``, or their default group's name.

    >>> check_group("GID_orders", consumer=True)
    >>> check_group("DEFAULT_PRODUCER", consumer=False)
    Traceback (most recent call last):
    pyrmq.errors.ConfigError: the producer group cannot be DEFAULT_PRODUCER: name another one
    """
    kind = "consumer" if consumer else "producer"
    if not group.strip():
        raise ConfigError(f"the {kind} group name is blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise ConfigError(f"the group {group[:40]!r}... is over {GROUP_MAX_LENGTH} characters")
    if not _GROUP_NAME.fullmatch(group):
        raise ConfigError(
            f"the group {group!r} contains illegal characters, allowing only [%|a-zA-Z0-9_-]"
        )
    if group == _DEFAULT_GROUPS[consumer]:
        raise ConfigError(f"the {kind} group cannot be {group}: name another one")


class ProducerMember(Protocol):
    group: str

    def topics(self) -> list[str]: ...
    def on_route(self, topic: str, route: TopicRoute) -> None: ...


class ConsumerMember(Protocol):
    group: str

    def topics(self) -> list[str]: ...
    def on_route(self, topic: str, route: TopicRoute) -> None: ...
    def heartbeat_data(self) -> dict[str, Any]: ...
    async def rebalance(self) -> None: ...
    async def persist_offsets(self) -> None: ...
    def running_info(self) -> dict[str, Any]: ...
    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None: ...
    def offset_table(self, topic: str) -> dict[MessageQueue, int]: ...


_INSTANCES: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, ClientInstance]]" = (
    weakref.WeakKeyDictionary()
)


class ClientInstance:
    """Shared state and background work of one client id in one event loop."""

    def __init__(self, config: ClientConfig, client_id: str) -> None:
        self.config = config
        self.client_id = client_id
        self.remoting = RemotingClient(
            connect_timeout_s=config.request_timeout_s,
            credentials=config.credentials,
            tls=config.tls,
        )
        self.api = ClientAPI(self.remoting)
        self.routes: dict[str, TopicRoute] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self.producers: dict[str, ProducerMember] = {}
        self.consumers: dict[str, ConsumerMember] = {}
        # The name server routes are asked of while it answers, as RocketMQ's client keeps
        # to one: two that disagree for a while (one just restarted) do not make the routes
        # flap. A random first one spreads clients over them.
        self._namesrv_at = random.randrange(max(1, len(config.namesrv_list)))
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_now = asyncio.Event()
        self._route_fetches: dict[str, asyncio.Future[TopicRoute | None]] = {}
        self._started = False
        self._unchecked: set[str] = set()
        self.requests = RequestTable()
        """The producers' requests waiting for replies (:meth:`Producer.request`)."""
        # Brokers whose last heartbeat from here named producers: they push replies here.
        self._producers_known_at: set[str] = set()
        # Per broker address, the connection the last heartbeat went over, and a heartbeat
        # under way on a new one (see introduce).
        self._beaten_over: dict[str, object] = {}
        self._introducing: dict[str, asyncio.Future[None]] = {}
        handlers: dict[int, ServerRequestHandler] = {
            RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_ids_changed,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
            RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
            RequestCode.CHECK_TRANSACTION_STATE: self._on_check_transaction,
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: self._on_reply,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self._on_consume_directly,
            RequestCode.GET_CONSUMER_STATUS_FROM_CLIENT: self._on_consumer_status,
        }
        self.remoting.server_request_handlers.update(handlers)

    # --- registry ------------------------------------------------------------------------

    @classmethod
    def acquire(cls, config: ClientConfig, group: str, *, consumer: bool) -> "ClientInstance":
        """The loop's instance for ``config``'s client id; a fresh id if ``group`` is taken
        there already (two consumers of one group in one process need two instances).
        Raises ConfigError for a group name RocketMQ's clients refuse at start."""
        check_group(group, consumer=consumer)
        in_loop = _INSTANCES.setdefault(asyncio.get_running_loop(), {})
        base = config.client_id()
        for n in itertools.count():
            client_id = base if n == 0 else f"{base}#{n}"
            inst = in_loop.get(client_id)
            if inst is None:
                inst = in_loop[client_id] = cls(config, client_id)
                return inst
            if inst.config.namesrv_list != config.namesrv_list:
                continue
            taken = inst.consumers if consumer else inst.producers
            if group not in taken:
                return inst
        raise AssertionError("unreachable")

    def offsets_id(self) -> str:
        """Where a broadcasting consumer of this instance keeps its offsets: the config's
        :meth:`ClientConfig.offsets_id`, with this instance's ``#n`` when it is a process's
        second (third, ...) consumer of one group, so that each has a file of its own."""
        base = self.config.client_id()
        return self.config.offsets_id() + self.client_id[len(base) :]

    async def release(self) -> None:
        """Stops the instance once no producer or consumer uses it."""
        if self.producers or self.consumers:
            return
        in_loop = _INSTANCES.get(asyncio.get_running_loop(), {})
        if in_loop.get(self.client_id) is self:
            del in_loop[self.client_id]
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        self._started = False
        self._producers_known_at.clear()
        self._beaten_over.clear()
        await self.remoting.close()

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        c = self.config
        self._tasks = [
            self._every(c.poll_name_server_interval_s, self.refresh_routes, "route refresh"),
            self._every(
                c.heartbeat_broker_interval_s,
                self.heartbeat_all,
                "heartbeat",
                first_s=min(FIRST_HEARTBEAT_S, c.heartbeat_broker_interval_s),
            ),
            self._every(c.persist_consumer_offset_interval_s, self._persist_all, "offsets"),
            asyncio.get_running_loop().create_task(self._rebalance_loop()),
        ]

    def _every(
        self,
        interval_s: float,
        job: Callable[[], Coroutine[Any, Any, None]],
        what: str,
        *,
        first_s: float | None = None,
    ) -> asyncio.Task[None]:
        """Runs ``job`` every ``interval_s``, the first time ``first_s`` (default
        ``interval_s``) after now."""

        async def loop() -> None:
            delay_s = interval_s if first_s is None else first_s
            while True:
                await asyncio.sleep(delay_s)
                delay_s = interval_s
                try:
                    await job()
                except PyrmqError as e:
                    log.warning("%s failed: %s", what, e)
                except Exception:
                    log.exception("%s failed", what)

        return asyncio.get_running_loop().create_task(loop())

    # --- routes --------------------------------------------------------------------------

    async def fetch_route(self, topic: str) -> TopicRoute | None:
        """Asks the name server in use for the topic's route; the next ones, in turn, when it
        does not answer (and keeps to the first that does)."""
        addrs = self.config.namesrv_list
        if not addrs:
            raise NoRouteError("no name server address configured")
        start = self._namesrv_at
        last: Exception | None = None
        for i in range(len(addrs)):
            at = (start + i) % len(addrs)
            try:
                route = await self.api.get_route(addrs[at], topic, self.config.request_timeout_s)
            except PyrmqError as e:
                last = e
                continue
            self._namesrv_at = at
            return route
        raise NoRouteError(f"no name server answered for topic {topic}: {last}") from last

    async def update_route(self, topic: str) -> TopicRoute | None:
        """Fetches the topic's route and hands it to the producers and consumers of the topic.

        Callers arriving while a fetch of the topic is in flight share its answer: a burst of
        first sends to a topic makes one request, not one each.
        """
        pending = self._route_fetches.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[TopicRoute | None] = asyncio.get_running_loop().create_future()
        self._route_fetches[topic] = fut
        try:
            route = await self.fetch_route(topic)
        except BaseException as e:
            if not isinstance(e, PyrmqError):  # cancelled: the sharers get a plain failure
                e = NoRouteError(f"the route fetch of {topic} was cancelled")
            fut.set_exception(e)
            fut.exception()  # retrieved here; sharers get it through shield
            raise
        finally:
            del self._route_fetches[topic]
        if route is not None:
            for name, data in route.brokers.items():
                self.broker_addrs[name] = dict(data.addrs)
            self.routes[topic] = route
            for member in [*self.producers.values(), *self.consumers.values()]:
                if topic in member.topics():
                    member.on_route(topic, route)
        fut.set_result(route)
        return route

    async def refresh_routes(self) -> None:
        topics = {
            t for m in [*self.producers.values(), *self.consumers.values()] for t in m.topics()
        }
        for topic in sorted(topics):
            try:
                await self.update_route(topic)
            except PyrmqError as e:
                log.warning("route refresh of %s failed: %s", topic, e)

    async def master_addr(self, broker_name: str, topic: str | None = None) -> str:
        """The master address of ``broker_name``, refreshing ``topic``'s route if unknown."""
        addr = self.broker_addrs.get(broker_name, {}).get(0)
        if addr is None and topic is not None:
            await self.update_route(topic)
            addr = self.broker_addrs.get(broker_name, {}).get(0)
        if addr is None:
            raise NoRouteError(f"no master address known for broker {broker_name}")
        return addr

    async def offset_addr(self, broker_name: str, topic: str | None = None) -> str:
        """Where ``broker_name``'s consumer offsets are read and committed: its master, else
        (the master away) its lowest-numbered slave, as RocketMQ's clients fall back."""
        addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            if topic is not None:
                await self.update_route(topic)
            addrs = self.broker_addrs.get(broker_name)
        if not addrs:
            raise NoRouteError(f"no address known for broker {broker_name}")
        return addrs.get(0) or addrs[min(addrs)]

    def pull_addr(self, broker_name: str, broker_id: int) -> str | None:
        addrs = self.broker_addrs.get(broker_name) or {}
        return addrs.get(broker_id) or addrs.get(0) or (addrs[min(addrs)] if addrs else None)

    def any_broker_of(self, topic: str) -> str | None:
        route = self.routes.get(topic)
        if route is None:
            return None
        for data in route.brokers.values():
            addr = data.any_addr()
            if addr is not None:
                return addr
        return None

    # --- heartbeats ----------------------------------------------------------------------

    def heartbeat_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"clientID": self.client_id}
        if self.producers:
            data["producerDataSet"] = [{"groupName": g} for g in sorted(self.producers)]
        if self.consumers:
            data["consumerDataSet"] = [
                c.heartbeat_data() for _, c in sorted(self.consumers.items())
            ]
        return data

    async def unregister(
        self, *, producer_group: str | None = None, consumer_group: str | None = None
    ) -> None:
        """UNREGISTER_CLIENT for one group on every broker its heartbeats go to: every known
        address for a consumer group, the masters for a producer group. Failures are logged,
        not raised: the broker drops the client when its heartbeats stop anyway."""
        targets = [
            addr
            for addrs in list(self.broker_addrs.values())
            for broker_id, addr in addrs.items()
            if consumer_group is not None or broker_id == 0
        ]
        results = await asyncio.gather(
            *(
                self.api.unregister_client(
                    addr,
                    self.client_id,
                    producer_group=producer_group,
                    consumer_group=consumer_group,
                )
                for addr in targets
            ),
            return_exceptions=True,
        )
        for addr, result in zip(targets, results, strict=True):
            if isinstance(result, PyrmqError):
                log.debug("unregister from %s failed: %s", addr, result)
            elif isinstance(result, BaseException):
                raise result
        if producer_group is not None and not self.producers:
            self._producers_known_at.clear()

    async def heartbeat_all(self) -> None:
        """Sends a heartbeat to every known broker (producer-only clients: masters only)."""
        if not self.producers and not self.consumers:
            return
        await self._heartbeat(
            [
                addr
                for addrs in list(self.broker_addrs.values())
                for broker_id, addr in addrs.items()
                if self.consumers or broker_id == 0
            ]
        )

    async def introduce_producers(self, broker_names: Iterable[str]) -> None:
        """Heartbeats the masters of ``broker_names`` that have not taken a heartbeat naming
        this instance's producers: a request's reply reaches this client only through a broker
        that knows it as a producer."""
        if not self.producers:
            return
        masters = {self.broker_addrs.get(name, {}).get(0) for name in broker_names}
        await self._heartbeat(
            [a for a in masters if a is not None and a not in self._producers_known_at]
        )

    async def introduce(self, addr: str) -> None:
        """Heartbeats ``addr`` if the connection to it (a new one, say, after the broker
        restarted) has carried no heartbeat yet, as a consumer must before it pulls: until
        then the broker does not count it among its group, so it neither holds its pulls to
        the queue access lock nor tells the others of it, and two consumers could read one
        queue. Concurrent callers share one heartbeat; a failed one is logged, and the pull
        goes ahead (the next pull tries again)."""
        connection = self.remoting.connection_of(addr)
        if connection is not None and self._beaten_over.get(addr) is connection:
            return
        pending = self._introducing.get(addr)
        if pending is None:
            pending = asyncio.ensure_future(self._heartbeat([addr]))
            self._introducing[addr] = pending
            pending.add_done_callback(lambda _: self._introducing.pop(addr, None))
        await asyncio.shield(pending)

    async def _heartbeat(self, targets: list[str]) -> None:
        data = self.heartbeat_data()
        names_producers = "producerDataSet" in data

        async def beat(addr: str) -> None:
            # Noted as each answers: a heartbeat cut short (a request's deadline) keeps those.
            await self.api.heartbeat(addr, data)
            if names_producers:
                self._producers_known_at.add(addr)
            if self.consumers:
                self._beaten_over[addr] = self.remoting.connection_of(addr)

        results = await asyncio.gather(*(beat(a) for a in targets), return_exceptions=True)
        for addr, result in zip(targets, results, strict=True):
            if isinstance(result, PyrmqError):
                self._producers_known_at.discard(addr)
                log.info("heartbeat to %s failed: %s", addr, result)
            elif isinstance(result, BaseException):
                raise result

    # --- consumers -----------------------------------------------------------------------

    def rebalance_soon(self) -> None:
        self._rebalance_now.set()

    async def _rebalance_loop(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a cancel that
            # arrives as the event is set (cpython gh-86296), and release() then waits forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.rebalance_interval_s):
                    await self._rebalance_now.wait()
            self._rebalance_now.clear()
            for consumer in list(self.consumers.values()):
                try:
                    await consumer.rebalance()
                except PyrmqError as e:
                    log.warning("rebalance of %s failed: %s", consumer.group, e)
                except Exception:
                    log.exception("rebalance of %s failed", consumer.group)

    async def _persist_all(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    # --- requests from brokers -----------------------------------------------------------

    async def _on_ids_changed(self, request: RemotingCommand, _addr: str) -> RemotingCommand | None:
        log.info("group %s changed, rebalancing", request.ext_fields.get("consumerGroup", "?"))
        self.rebalance_soon()
        return None

    async def _on_running_info(self, request: RemotingCommand, _addr: str) -> RemotingCommand:
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if consumer is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer Group <{group}> not exist in this consumer",
            )
        body = json.dumps(consumer.running_info(), separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def _on_reset_offset(
        self, request: RemotingCommand, _addr: str
    ) -> RemotingCommand | None:
        ext = request.ext_fields
        group, topic = ext.get("group", ""), ext.get("topic", "")
        consumer = self.consumers.get(group)
        if consumer is not None:
            offsets = parse_offset_table(request.body)
            log.info("resetting offsets of %s on %s: %s", group, topic, offsets)
            await consumer.reset_offsets(topic, offsets)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def _on_consume_directly(self, request: RemotingCommand, addr: str) -> RemotingCommand:
        """An admin tool, through a broker, has this client's push consumer of the group run
        its listener on one stored message, the request's body; answers what it returned, a
        ConsumeMessageDirectlyResult."""
        try:
            header = ConsumeMessageDirectlyResultRequestHeader.from_ext(request.ext_fields)
        except HeaderError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        group = header.consumer_group
        consumer = self.consumers.get(group)
        consume = getattr(consumer, "consume_message_directly", None)
        if consume is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer Group <{group}> not exist in this consumer",
            )
        try:
            namespace = getattr(consumer, "namespace", "") or None
            msgs = _core.decode_received(request.body, header.broker_name or "", namespace)
        except (PyrmqError, ValueError) as e:
            msgs, error = [], str(e)
        else:
            error = f"{len(msgs)} messages in the body"
        if len(msgs) != 1:
            log.warning("unreadable message to consume directly from %s: %s", addr, error)
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"cannot decode the message: {error}"
            )
        try:
            result = await consume(msgs[0])
        except LookupError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        body = json.dumps(result.to_json(), separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def _on_consumer_status(self, request: RemotingCommand, _addr: str) -> RemotingCommand:
        """A broker gathers the group's offsets on a topic (``mqadmin getConsumerStatus``):
        answers this client's, a GetConsumerStatusBody; an empty table for a group it does not
        consume for, as RocketMQ's client does."""
        try:
            header = GetConsumerStatusRequestHeader.from_ext(request.ext_fields)
        except HeaderError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        consumer = self.consumers.get(header.group)
        offsets = {} if consumer is None else consumer.offset_table(header.topic)
        body = b'{"consumerTable":{},"messageQueueTable":' + dumps_queue_table(offsets) + b"}"
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def _on_reply(self, request: RemotingCommand, addr: str) -> RemotingCommand:
        """A broker pushes the reply to one of this client's requests; the request waiting on
        its correlation id gets it. As RocketMQ's client, a reply no request waits for any
        more is taken (and logged) all the same."""
        try:
            reply = ReplyMessage.from_push(request.ext_fields, request.body)
        except (PyrmqError, ValueError) as e:
            log.warning("unreadable reply pushed by %s: %s", addr, e)
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"process reply message fail: {e}"
            )
        if not self.requests.complete(reply):
            log.warning(
                "reply from %s matches no waiting request correlation_id=%s replier=%s",
                addr,
                reply.correlation_id,
                reply.born_host,
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def _on_check_transaction(self, request: RemotingCommand, addr: str) -> None:
        """A broker asks how the transaction of a half it holds ended; the producer of the
        half's group answers with END_TRANSACTION (RocketMQ's check-back)."""
        try:
            header = CheckTransactionStateRequestHeader.from_ext(request.ext_fields)
            [half] = _core.decode_received(request.body, header.broker_name or "")
        except (PyrmqError, ValueError) as e:
            log.warning("unreadable transaction check from %s: %s", addr, e)
            return
        group = half.properties.get(PRODUCER_GROUP, "")
        producer = self.producers.get(group)
        namespace = getattr(producer, "namespace", "")
        if namespace:
            # The checker sees the half's topic as its producer named it.
            [half] = _core.decode_received(request.body, header.broker_name or "", namespace)
        check = getattr(producer, "on_transaction_check", None)
        if check is None:
            # Checks come every round for each open half: say so once per group.
            if group not in self._unchecked:
                self._unchecked.add(group)
                log.warning(
                    "transaction checks from %s for group %r, which this client does not "
                    "produce for with a checker, are left unanswered",
                    addr,
                    group,
                )
            return
        await check(addr, half, header)


class ClientLifecycle:
    """``async with`` and the :attr:`instance` property for a producer or consumer that holds
    a :class:`ClientInstance` while it runs."""

    _KIND: ClassVar[str]
    """What the class is called in errors: "producer", "consumer", ..."""
    group: str
    _instance: ClientInstance | None

    async def start(self) -> None:
        raise NotImplementedError

    async def shutdown(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    @property
    def instance(self) -> ClientInstance:
        if self._instance is None:
            raise ClientStateError(f"{self._KIND} {self.group} is not started")
        return self._instance


def parse_offset_table(body: bytes) -> dict[MessageQueue, int]:
    """ResetOffsetBody's ``offsetTable``, whose keys are JSON objects (fastjson's map form);
    empty when the body cannot be read.

    >>> parse_offset_table(b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:7}}')
    {MessageQueue(topic='T', broker_name='b', queue_id=1): 7}
    """
    try:
        table = loads_queue_table(body)
    except ValueError:
        return {}
    return {mq: offset for mq, offset in table.items() if type(offset) is int}


def dumps_queue_table(values: dict[MessageQueue, int]) -> bytes:
    """A ``Map<MessageQueue, Long>`` as fastjson writes it, keys as JSON objects (not valid
    JSON; :func:`pyrmq.client.route.loads_queue_table` reads it back).

    >>> dumps_queue_table({MessageQueue("T", "b", 1): 7})
    b'{{"brokerName":"b","queueId":1,"topic":"T"}:7}'
    """
    return dumps_queue_map({(mq.topic, mq.broker_name, mq.queue_id): v for mq, v in values.items()})
