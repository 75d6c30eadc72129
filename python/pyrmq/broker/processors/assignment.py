"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE: the rebalance RocketMQ 5's Java push consumer
leaves to a broker when it is built with ``clientRebalance=false``, and the mode (pull or pop)
in which each group reads each topic (``mqadmin setConsumeMode``).

A consumer asks any broker of its topic which queues are its own. The broker takes the topic's
readable queues on every broker, as the name servers route them, and shares them among the
group's members it knows from their heartbeats, by the consumer's strategy (``AVG`` or
``AVG_BY_CIRCLE``, the two RocketMQ's broker has). In pop mode a member pops a whole broker (a
queue id of -1) when ``popShareQueueNum`` is not positive or leaves no one out, and otherwise
its own share and the shares of the next ``popShareQueueNum`` members, as RocketMQ's
``allocate4Pop``. An answer without assignments tells the consumer to keep what it has.
"""

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyrmq.broker.state.request_modes import MODES, RequestMode
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

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.QUERY_ASSIGNMENT, self.query_assignment)
        server.register(RequestCode.SET_MESSAGE_REQUEST_MODE, self.set_mode)

    async def query_assignment(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            body = _object(request.body)
            topic, group = str(body["topic"]), str(body["consumerGroup"])
            client_id = str(body.get("clientId") or "")
            strategy_name = str(body.get("strategyName") or "")
            model = str(body.get("messageModel") or "CLUSTERING")
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
        if mqs is None or model == "BROADCASTING":
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
        """The topic's readable queues on every broker the name servers route it to; this
        broker's alone when no name server answers; None for a topic no one has."""
        broker = self.broker
        route = await broker.pops.cluster.route(topic)
        shares: list[tuple[str, int, int]] = []
        if route is not None:
            shares = [(q.broker_name, q.read_queue_nums, q.perm) for q in route.queues]
        else:
            local = broker.topics.get(topic)
            if local is None:
                return None
            shares = [(broker.config.broker_name, local.read_queue_nums, local.perm)]
        return sorted(
            (topic, name, queue_id)
            for name, read_nums, perm in shares
            if perm & PERM_READ
            for queue_id in broker.queue_ids(read_nums)
        )

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
    mode = RequestMode(str(value.get("mode") or "PULL"), int(value.get("popShareQueueNum") or 0))
    if mode.mode not in MODES:
        raise ValueError(f"mode {mode.mode!r} is not PULL or POP")
    return str(value["topic"]), str(value["consumerGroup"]), mode


def _object(body: bytes) -> dict[str, Any]:
    value = json.loads(body or b"null")
    if not isinstance(value, dict):
        raise ValueError("the body is not a JSON object")  # noqa: TRY004 (the caller's error)
    return value
