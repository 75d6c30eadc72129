"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE: the rebalance RocketMQ 5's Java push consumer
leaves to a broker when it is built with ``clientRebalance=false``, and the mode (pull or pop)
in which each group reads each topic (``mqadmin setConsumeMode``).

A consumer asks any broker of its topic which queues are its own. The broker takes the topic's
readable queues on every broker, as the name servers route them (kept, and refreshed in the
background every 30 s, as RocketMQ's TopicRouteInfoManager keeps them: a name server that stops
answering leaves the last route in use), and shares them among the group's members it knows
from their heartbeats, by the consumer's strategy (``AVG`` or
``AVG_BY_CIRCLE``, the two RocketMQ's broker has). In pop mode a member pops a whole broker (a
queue id of -1) when ``popShareQueueNum`` is not positive or leaves no one out, and otherwise
its own share and the shares of the next ``popShareQueueNum`` members, as RocketMQ's
``allocate4Pop``. An answer without assignments tells the consumer to keep what it has.
"""

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyrmq.broker.state.request_modes import MODES, RequestMode, share_num
from pyrmq.broker.state.topics import PERM_READ, RETRY_PREFIX
from pyrmq.client.allocate import AllocateStrategy, allocate_averagely, allocate_averagely_by_circle
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["AssignmentProcessor", "allocate_for_pop"]

log = logging.getLogger(__name__)

Queue = tuple[str, str, int]
"""(topic, broker name, queue id): sorted as Java sorts MessageQueues."""

# How long a topic's route serves before it is fetched again (RocketMQ's
# loadBalancePollNameServerInterval), and how many topics' routes are kept.
ROUTE_TTL_S = 30.0
MAX_ROUTES = 4096
# messageModel as a number: Java's MessageModel ordinals.
_MODELS = {"0": "BROADCASTING", "1": "CLUSTERING"}

STRATEGIES: dict[str, AllocateStrategy[Any]] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
}


def allocate_for_pop(
    strategy: AllocateStrategy[Queue],
    group: str,
    client_id: str,
    mqs: Sequence[Queue],
    cids: Sequence[str],
    share: int,
) -> list[Queue]:
    """RocketMQ's ``allocate4Pop``: the queues a pop consumer pops.

    >>> mqs = [("T", "b", i) for i in range(4)]
    >>> allocate_for_pop(allocate_averagely, "G", "c1", mqs, ["c1", "c2"], -1)
    [('T', 'b', -1)]
    >>> allocate_for_pop(allocate_averagely, "G", "c1", mqs, ["c1", "c2", "c3"], 1)
    [('T', 'b', 0), ('T', 'b', 1), ('T', 'b', 2)]
    """
    if share <= 0 or share >= len(cids) - 1:
        # Every member pops every queue of each broker.
        return sorted({(topic, broker, -1) for topic, broker, _ in mqs})
    if len(cids) > len(mqs):
        # Every member gets one queue, some the same.
        return [mqs[cids.index(client_id) % len(mqs)]] if client_id in cids else []
    out = list(strategy(group, client_id, mqs, cids))
    if client_id in cids:
        index = cids.index(client_id)
        for step in range(1, share + 1):
            out += strategy(group, cids[(index + step) % len(cids)], mqs, cids)
    return out


class AssignmentProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        # Topic -> (its readable queues on every broker, when they were fetched).
        self._routes: dict[str, tuple[list[Queue], float]] = {}
        self._refreshing: dict[str, asyncio.Task[list[Queue] | None]] = {}

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_ASSIGNMENT, self.query_assignment)
        server.register(RequestCode.SET_MESSAGE_REQUEST_MODE, self.set_mode)
        server.register(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, self.get_all_modes)

    async def query_assignment(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = _object(request.body)
            topic, group = str(body["topic"]), str(body["consumerGroup"])
            client_id = str(body.get("clientId") or "")
            strategy_name = str(body.get("strategyName") or "")
            model = str(body.get("messageModel", "CLUSTERING"))
            model = _MODELS.get(model, model)
        except (ValueError, KeyError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad QUERY_ASSIGNMENT body: {e}"
            )
        mode = self._mode(topic, group)
        assigned = await self._assign(topic, group, client_id, strategy_name, model, mode)
        answer: dict[str, Any] = {}
        if assigned is not None:
            answer["messageQueueAssignments"] = [
                {
                    "messageQueue": {"brokerName": b, "queueId": q, "topic": t},
                    "mode": mode.mode,
                }
                for t, b, q in dict.fromkeys(assigned)
            ]
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=json.dumps(answer).encode()
        )

    def _mode(self, topic: str, group: str) -> RequestMode:
        mode = self.broker.request_modes.get(topic, group)
        if mode is not None:
            return mode
        config = self.broker.config
        if topic.startswith(RETRY_PREFIX) or config.default_message_request_mode != "POP":
            # A retry topic is always pulled.
            return RequestMode("PULL")
        return RequestMode("POP", config.default_pop_share_queue_num)

    async def _assign(
        self,
        topic: str,
        group: str,
        client_id: str,
        strategy_name: str,
        model: str,
        mode: RequestMode,
    ) -> list[Queue] | None:
        """The queues of ``client_id``; None when the broker cannot tell (the consumer then
        keeps its queues), as RocketMQ's ``doLoadBalance``."""
        mqs = await self._readable_queues(topic)
        if not mqs or not client_id.strip():
            # As RocketMQ's strategies refuse them: the consumer keeps its queues (a topic
            # made write-only for a while, say).
            return None
        if model == "BROADCASTING":
            return mqs
        if model != "CLUSTERING":
            return None
        if not self.broker.config.server_load_balancer_enable:
            return mqs
        cids = sorted({c.client_id for c in self.broker.clients.members(group)})
        strategy = STRATEGIES.get(strategy_name)
        if not cids or strategy is None:
            if strategy is None:
                log.warning(
                    "QUERY_ASSIGNMENT of %s asks for unknown strategy %r", group, strategy_name
                )
            return None
        if mode.mode == "POP":
            return allocate_for_pop(strategy, group, client_id, mqs, cids, mode.pop_share_queue_num)
        return list(strategy(group, client_id, mqs, cids))

    async def _readable_queues(self, topic: str) -> list[Queue] | None:
        """The topic's readable queues on every broker the name servers route it to, as last
        fetched; None for a topic they do not route, or while none has answered yet."""
        cached = self._routes.get(topic)
        if cached is None:
            return await self._refresh(topic)
        if time.monotonic() - cached[1] > ROUTE_TTL_S and topic not in self._refreshing:
            task = self.broker.loop.create_task(self._refresh(topic))
            self._refreshing[topic] = task
            task.add_done_callback(lambda _: self._refreshing.pop(topic, None))
        return cached[0]

    async def _refresh(self, topic: str) -> list[Queue] | None:
        answered, route = await self.broker.pops.cluster.lookup(topic)
        if not answered:
            cached = self._routes.get(topic)
            return None if cached is None else cached[0]
        if route is None:
            self._routes.pop(topic, None)
            return None
        queues = sorted(
            (topic, q.broker_name, queue_id)
            for q in route.queues
            if q.perm & PERM_READ
            for queue_id in self.broker.queue_ids(q.read_queue_nums)
        )
        if len(self._routes) >= MAX_ROUTES and topic not in self._routes:
            self._routes.clear()
        self._routes[topic] = (queues, time.monotonic())
        return queues

    async def get_all_modes(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """GET_ALL_MESSAGE_REQUEST_MODE: the whole table, for a slave to copy."""
        body = json.dumps(self.broker.request_modes.to_json()).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def set_mode(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            topic, group, mode = _mode_body(request.body)
        except (ValueError, KeyError, TypeError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad SET_MESSAGE_REQUEST_MODE body: {e}"
            )
        if topic.startswith(RETRY_PREFIX):
            return RemotingCommand.response_to(
                request, ResponseCode.NO_PERMISSION, remark="retry topic is not allowed to set mode"
            )
        if self.broker.topics.get(topic) is None:
            return RemotingCommand.response_to(
                request, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist"
            )
        try:
            self.broker.request_modes.set(topic, group, mode)
        except OSError as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"saving the mode failed: {e}"
            )
        log.info(
            "group %s reads %s by %s (popShareQueueNum %d), set by %s",
            group,
            topic,
            mode.mode,
            mode.pop_share_queue_num,
            conn.peer_address,
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _mode_body(body: bytes) -> tuple[str, str, RequestMode]:
    """(topic, group, mode) of a SET_MESSAGE_REQUEST_MODE body."""
    value = _object(body)
    mode = RequestMode(str(value.get("mode") or "PULL"), share_num(value.get("popShareQueueNum")))
    if mode.mode not in MODES:
        raise ValueError(f"mode {mode.mode!r} is not PULL or POP")
    return str(value["topic"]), str(value["consumerGroup"]), mode


def _object(body: bytes) -> dict[str, Any]:
    value = json.loads(body or b"null")
    if not isinstance(value, dict):
        raise ValueError("the body is not a JSON object")  # noqa: TRY004 (the caller's error)
    return value
