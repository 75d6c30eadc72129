"""Consumer group settings: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, GET_ALL_SUBSCRIPTIONGROUP_CONFIG
and DELETE_SUBSCRIPTIONGROUP, as ``mqadmin updateSubGroup`` and ``deleteSubGroup`` send them."""

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

from pyrmq.broker.state.groups import check_group_name
from pyrmq.errors import MessageIllegalError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["GroupProcessor"]

log = logging.getLogger(__name__)


class GroupProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update)
        server.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.get_all)
        server.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete)

    async def update(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            value = _group_json(request.body)
            config = self.broker.groups.put(value)
        except (ValueError, MessageIllegalError) as e:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"bad subscription group: {e}"
            )
        log.info(
            "group settings changed group=%s orderly=%s retryMaxTimes=%d by %s",
            config.group_name,
            config.consume_message_orderly,
            config.retry_max_times,
            conn.peer_address,
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def get_all(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        body = json.dumps(self.broker.groups.to_json()).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def delete(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Deletes the group's settings and, with ``cleanOffset`` (``mqadmin deleteSubGroup
        -r``), its offsets and what it has in flight."""
        group = request.ext_fields.get("groupName", "")
        if not group:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="the groupName field is missing"
            )
        broker = self.broker
        if broker.groups.delete(group):
            log.info("group settings deleted group=%s by %s", group, conn.peer_address)
        if broker.metrics is not None:
            broker.metrics.forget_group(group)
        if request.ext_fields.get("cleanOffset", "").strip().lower() == "true":
            broker.offsets.clean_group(group)
            broker.pulls.access.forget_group(group)
            broker.pops.forget_group(group)
            log.info("offsets deleted group=%s by %s", group, conn.peer_address)
            offsets = broker.offsets.encode(force=True)
            if offsets is not None:
                # Now, not at the next periodic save: a restart must not bring them back.
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        None, broker.offsets.write, offsets
                    )
                except OSError as e:
                    return RemotingCommand.response_to(
                        request, ResponseCode.SYSTEM_ERROR, remark=f"offsets not saved: {e}"
                    )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def _group_json(body: bytes) -> dict[str, Any]:
    """The group settings a request carries; raises ValueError (or MessageIllegalError for a
    group name that cannot name its retry and dead-letter topics)."""
    value = json.loads(body or b"null")
    if not isinstance(value, dict):
        raise ValueError("the body is not a JSON object")  # noqa: TRY004 (the caller's error)
    group = value.get("groupName")
    if not isinstance(group, str) or not group:
        raise ValueError("groupName is missing")
    check_group_name(group)
    return value
