"""HEART_BEAT, UNREGISTER_CLIENT and the group membership notifications they cause;
CHECK_CLIENT_CONFIG, which a consumer asks before it starts filtering by SQL92."""

import json
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.clients import Subscription, parse_heartbeat
from pyrmq.broker.processors.pull import FilterRefused, compile_filter
from pyrmq.broker.state.groups import check_group_name
from pyrmq.broker.state.topics import PERM_READ, PERM_WRITE, RETRY_PREFIX
from pyrmq.errors import MessageIllegalError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import UnregisterClientRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["ClientManageProcessor"]

log = logging.getLogger(__name__)


class ClientManageProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.HEART_BEAT, self.heartbeat)
        server.register(RequestCode.UNREGISTER_CLIENT, self.unregister)
        server.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config)

    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            data = parse_heartbeat(request.body)
        except (ValueError, TypeError, UnicodeDecodeError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad heartbeat: {e}"
            )
        consumers, producers = data.get("consumerDataSet") or [], data.get("producerDataSet") or []
        if refusal := _unfit_heartbeat(consumers, producers):
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad heartbeat: {refusal}"
            )
        client_id = str(data.get("clientID", ""))
        now_ms = int(time.time() * 1000)
        broker = self.broker
        for consumer in consumers:
            group = str(consumer.get("groupName", ""))
            if not group:
                continue
            try:
                # With the group's retryQueueNums queues, as RocketMQ (one at least: a group
                # whose retries are off still has the topic).
                queues = max(1, broker.group_config(group).retry_queue_nums)
                _, created = broker.topics.create_system(
                    RETRY_PREFIX + group, queues, PERM_READ | PERM_WRITE
                )
            except OSError as e:
                # The topic table could not be saved (a full disk): the consumer still joins
                # and reads; its retry topic comes with a later heartbeat.
                log.warning("retry topic of %s not created: %s", group, e)
                created = False
            if created:
                broker.request_registration(RETRY_PREFIX + group)
            if broker.clients.register_consumer(
                group,
                consumer,
                client_id,
                conn,
                now_ms,
                language=request.language,
                version=request.version,
            ):
                broker.notify_consumer_ids_changed(group)
        for producer in producers:
            group = str(producer.get("groupName", ""))
            if group:
                broker.clients.register_producer(
                    group,
                    client_id,
                    conn,
                    now_ms,
                    language=request.language,
                    version=request.version,
                )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext(request.ext_fields)
        for group in self.broker.clients.unregister(
            conn, header.consumer_group or "", header.producer_group or ""
        ):
            self.broker.notify_consumer_ids_changed(group)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def check_client_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """Whether pulls with a subscription would be served: Java consumers ask at start for
        each subscription that is not a tag expression, and fail to start unless it is."""
        try:
            body = json.loads(request.body or b"{}")
        except ValueError as e:
            return _bad_body(request, str(e))
        data = body.get("subscriptionData") if isinstance(body, dict) else None
        if not isinstance(body, dict) or not isinstance(data, dict | None):
            return _bad_body(request, "subscriptionData is not an object")
        if data:
            subscription = Subscription.parse(
                str(data.get("topic", "")),
                str(data.get("subString") or ""),
                str(data.get("expressionType") or ""),
            )
            try:
                compile_filter(subscription, self.broker.config.enable_property_filter)
            except FilterRefused as e:
                log.warning(
                    "client %s of %s cannot filter by %s: %s",
                    body.get("clientId"),
                    body.get("group"),
                    subscription.expression,
                    e.remark,
                )
                return RemotingCommand.response_to(request, e.code, remark=e.remark)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _unfit_heartbeat(consumers: object, producers: object) -> str | None:
    """Why a heartbeat's groups cannot be taken (None: they can): each set a list of objects,
    each consumer group a name its retry and dead-letter topics can take."""
    for name, entries in (("consumerDataSet", consumers), ("producerDataSet", producers)):
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            return f"{name} is not a list of objects"
    assert isinstance(consumers, list)
    for consumer in consumers:
        subscriptions = consumer.get("subscriptionDataSet") or []
        if not isinstance(subscriptions, list) or not all(
            isinstance(s, dict) for s in subscriptions
        ):
            return "subscriptionDataSet is not a list of objects"
        group = consumer.get("groupName")
        if group:
            try:
                check_group_name(str(group))
            except MessageIllegalError as e:
                return str(e)
    return None


def _bad_body(request: RemotingCommand, reason: str) -> RemotingCommand:
    return RemotingCommand.response_to(
        request, ResponseCode.SYSTEM_ERROR, remark=f"bad CheckClientRequestBody: {reason}"
    )


def consumer_list_body(ids: list[str]) -> bytes:
    return json.dumps({"consumerIdList": ids}, separators=(",", ":")).encode()
