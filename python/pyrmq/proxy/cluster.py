"""Which brokers hold a topic, and where each serves gRPC: routes that span a cluster.

A 5.x client asks one access point for a topic's route and then talks to each queue's broker
at the endpoints the route names. So a broker answering QueryRoute lists the queues of every
master that holds the topic, each at that broker's own gRPC address, as RocketMQ's proxy does
in its local mode. The topic's brokers come from the name servers; a peer's gRPC port from the
peer itself (GET_BROKER_CONFIG's ``grpcServerPort``), remembered per address. A peer without
one (a broker that serves no gRPC, or not pyrmq) is left out: its queues cannot be reached.
"""

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.processors.recall import Recalled
from pyrmq.broker.state.topics import TopicConfig
from pyrmq.client.route import TopicRoute
from pyrmq.config import parse_properties
from pyrmq.errors import PyrmqError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["BrokerQueues", "ClusterRoutes"]

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 3.0
# A peer is asked again where it serves gRPC after this long: it may have restarted on another
# port, or started serving gRPC.
PEER_PORT_TTL_S = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerQueues:
    """One broker's share of a topic, and where it serves gRPC."""

    broker_name: str
    host: str
    port: int
    config: TopicConfig


class ClusterRoutes:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        # Remoting address -> (gRPC port or None, when to ask again).
        self._ports: dict[str, tuple[int | None, float]] = {}

    def local(self, config: TopicConfig) -> BrokerQueues:
        broker = self.broker
        assert broker.grpc is not None
        name, host = broker.config.broker_name, broker.config.broker_ip1
        return BrokerQueues(name, host, broker.grpc.port, config)

    async def brokers(self, local: TopicConfig | None, topic: str) -> list[BrokerQueues]:
        """Every master's share of ``topic`` that serves gRPC, this broker's from its own table
        (``local``), others' as the name servers route them; this broker's alone when no name
        server answers."""
        out = [] if local is None else [self.local(local)]
        route = await self.route(topic)
        if route is None:
            return out
        me = self.broker.address
        for data in route.queues:
            brokers = route.brokers.get(data.broker_name)
            master = None if brokers is None else brokers.master
            if master is None or master == me or data.broker_name == self.broker.config.broker_name:
                continue
            port = await self._grpc_port(master)
            if port is None:
                continue
            host = master.rpartition(":")[0]
            config = TopicConfig(topic, data.read_queue_nums, data.write_queue_nums, data.perm)
            out.append(BrokerQueues(data.broker_name, host, port, config))
        return sorted(out, key=lambda b: b.broker_name)

    async def recall(self, topic: str, broker_name: str, handle: str) -> Recalled:
        """Passes a recall on to the master of ``broker_name``, as the name servers route
        ``topic``; its answer, or SERVICE_NOT_AVAILABLE when it cannot be reached."""
        route = await self.route(topic)
        brokers = None if route is None else route.brokers.get(broker_name)
        master = None if brokers is None else brokers.master
        if master is None:
            return Recalled(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"recall failed, broker {broker_name} of topic {topic} is not known",
            )
        request = RemotingCommand.request(
            RequestCode.RECALL_MESSAGE,
            {"topic": topic, "recallHandle": handle, "producerGroup": topic, "bname": broker_name},
        )
        try:
            response = await self.broker.namesrv.invoke(
                master, request, timeout_s=REQUEST_TIMEOUT_S
            )
        except PyrmqError as e:
            return Recalled(ResponseCode.SERVICE_NOT_AVAILABLE, f"recall failed: {e}")
        return Recalled(response.code, response.remark or "", response.ext_fields.get("msgId", ""))

    async def route(self, topic: str) -> TopicRoute | None:
        """``topic``'s route, from the first name server that answers; None when none does
        or the topic has none."""
        return (await self.lookup(topic))[1]

    async def lookup(self, topic: str) -> tuple[bool, TopicRoute | None]:
        """(whether a name server answered, ``topic``'s route or None when it has none)."""
        broker = self.broker
        ext = {"topic": topic, "acceptStandardJsonOnly": "true"}
        for addr in broker.config.namesrv_addrs:
            request = RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext)
            try:
                response = await broker.namesrv.invoke(addr, request, timeout_s=REQUEST_TIMEOUT_S)
            except PyrmqError as e:
                log.warning("route of %s from name server %s failed: %s", topic, addr, e)
                continue
            if response.code == ResponseCode.TOPIC_NOT_EXIST:
                return True, None
            if response.code == ResponseCode.SUCCESS and response.body:
                try:
                    return True, TopicRoute.parse(topic, response.body)
                except (ValueError, KeyError, TypeError) as e:
                    log.warning("route of %s from name server %s unreadable: %s", topic, addr, e)
        return False, None

    async def _grpc_port(self, addr: str) -> int | None:
        known = self._ports.get(addr)
        if known is not None and known[1] > time.monotonic():
            return known[0]
        port = await self._ask_grpc_port(addr)
        self._ports[addr] = (port, time.monotonic() + PEER_PORT_TTL_S)
        return port

    async def _ask_grpc_port(self, addr: str) -> int | None:
        request = RemotingCommand.request(RequestCode.GET_BROKER_CONFIG)
        try:
            response = await self.broker.namesrv.invoke(addr, request, timeout_s=REQUEST_TIMEOUT_S)
        except PyrmqError as e:
            log.warning("asking broker %s for its gRPC port failed: %s", addr, e)
            return None
        if response.code != ResponseCode.SUCCESS:
            return None
        settings = parse_properties(response.body.decode(errors="replace"))
        try:
            port = int(settings.get("grpcServerPort", "-1"))
        except ValueError:
            return None
        return port if 0 < port < 65536 else None
