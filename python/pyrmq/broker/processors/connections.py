"""Who is connected, for admin tools (``mqadmin consumerConnection``, ``producerConnection``,
``topicRoute``'s consumers): GET_CONSUMER_CONNECTION_LIST, GET_PRODUCER_CONNECTION_LIST and
QUERY_TOPIC_CONSUME_BY_WHO."""

import json
from typing import TYPE_CHECKING, Any

from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["ConnectionsProcessor"]


def _connection(client_id: str, conn: object, language: str, version: int) -> dict[str, Any]:
    """RocketMQ's Connection, as fastjson writes it (fields in name order)."""
    addr = conn.peer_address if isinstance(conn, Connection) else ""
    return {"clientAddr": addr, "clientId": client_id, "language": language, "version": version}


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class ConnectionsProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections)
        server.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections)
        server.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.topic_consumed_by)

    async def consumer_connections(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """The group's online consumers and, from the latest heartbeat, how the group
        consumes (RocketMQ's ConsumerConnection)."""
        group = request.ext_fields.get("consumerGroup", "")
        members = sorted(self.broker.clients.members(group), key=lambda m: m.client_id)
        if not members:
            return RemotingCommand.response_to(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=f"the consumer group[{group}] not online",
            )
        latest = max(members, key=lambda m: m.last_update_ms)
        subscriptions: dict[str, Any] = {}
        for member in members:
            for topic, sub in member.subscriptions.items():
                subscriptions.setdefault(topic, sub.to_json())
        for topic, sub in latest.subscriptions.items():
            subscriptions[topic] = sub.to_json()
        body = {
            "connectionSet": [
                _connection(m.client_id, m.connection, m.language, m.version) for m in members
            ],
            "consumeFromWhere": latest.consume_from_where,
            "consumeType": latest.consume_type,
            "messageModel": latest.message_model,
            "subscriptionTable": dict(sorted(subscriptions.items())),
        }
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=_json(body))

    async def producer_connections(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        group = request.ext_fields.get("producerGroup", "")
        producers = self.broker.clients.producers.get(group)
        if not producers:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"the producer group[{group}] not exist",
            )
        connections = [
            _connection(client_id, p.connection, p.language, p.version)
            for client_id, p in sorted(producers.items())
        ]
        body = _json({"connectionSet": connections})
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def topic_consumed_by(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """The groups whose online consumers subscribe to the topic, and those with offsets
        committed on it."""
        topic = request.ext_fields.get("topic", "")
        groups = set(self.broker.offsets.groups_on(topic))
        for group, members in self.broker.clients.consumers.items():
            if any(topic in m.subscriptions for m in members.values()):
                groups.add(group)
        body = _json({"groupList": sorted(groups)})
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)
