"""RECALL_MESSAGE: a producer takes back a timer message before it falls due (RocketMQ 5.3's
RecallMessage), with the handle the message's send returned.

Only a broker with ``recallMessageEnable`` (off by default, as in RocketMQ) recalls, and only
messages of its own whose due time is still ahead. The store keeps a marker and drops the
message when the schedule meets it (:mod:`pyrmq_store`'s recall); a recall of a message that is
already gone, or was never sent, succeeds and drops nothing, as RocketMQ's does.
"""

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.state.topics import SCHEDULE_TOPIC
from pyrmq.errors import MessageIllegalError, StoreError
from pyrmq.properties import TIMER_DELIVER_MS, UNIQ_KEY
from pyrmq.recall_handle import RecallHandle, RecallHandleError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import MessageStore, PutResult

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["RecallProcessor", "Recalled", "recall_handle"]

log = logging.getLogger(__name__)

_UNAVAILABLE = "recall failed, broker service not available"
# Ids longer than this are cut in log lines.
_LOGGED_ID_CHARS = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Recalled:
    """How a recall ended: a response code, its remark, and the recalled message's id."""

    code: int
    remark: str = ""
    message_id: str = ""


def recall_handle(
    store: MessageStore, broker_name: str, topic: str, result: PutResult
) -> str | None:
    """The handle a send answer carries for a message the store parked with a timer (RocketMQ
    gives one to single sends of timer messages, and none to retry topics'), else None. It
    names the due time the store fixed in the parked record, which a recall must match."""
    parked = store.look_message_by_offset(result.phy_offset)
    if parked is None or parked.topic != SCHEDULE_TOPIC:
        return None
    due, uniq = parked.property(TIMER_DELIVER_MS), parked.property(UNIQ_KEY)
    if due is None or not uniq:
        return None
    return RecallHandle(topic, broker_name, int(due), uniq).encode()


class RecallProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.RECALL_MESSAGE, self.serve)

    async def serve(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        topic, handle = fields.get("topic"), fields.get("recallHandle")
        if topic is None or handle is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark="the request names no topic or no recallHandle",
            )
        group, peer = fields.get("producerGroup", ""), conn.peer_address
        outcome = await self.recall(topic, handle, producer_group=group, born_host=peer)
        if outcome.code != ResponseCode.SUCCESS:
            return RemotingCommand.response_to(request, outcome.code, remark=outcome.remark)
        return RemotingCommand.response_to(
            request, outcome.code, ext_fields={"msgId": outcome.message_id}
        )

    async def recall(
        self, topic: str, handle_text: str, *, producer_group: str, born_host: str
    ) -> Recalled:
        """Recalls the message ``handle_text`` names, with RocketMQ's checks and answers."""
        broker = self.broker
        config = broker.config
        if not config.recall_message_enable:
            return Recalled(ResponseCode.NO_PERMISSION, "recall failed, operation is forbidden")
        if config.is_slave:
            return Recalled(ResponseCode.SLAVE_NOT_AVAILABLE, _UNAVAILABLE)
        if broker.topics.get(topic) is None:
            return Recalled(
                ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist"
            )
        try:
            handle = RecallHandle.decode(handle_text)
        except RecallHandleError as e:
            return Recalled(ResponseCode.ILLEGAL_OPERATION, str(e))
        if handle.topic != topic:
            return Recalled(ResponseCode.ILLEGAL_OPERATION, "recall failed, topic not match")
        if handle.broker_name != config.broker_name:
            return Recalled(ResponseCode.ILLEGAL_OPERATION, _UNAVAILABLE)
        left_ms = handle.timestamp_ms - time.time_ns() // 1_000_000
        if not 0 < left_ms < config.timer_max_delay_s * 1000:
            return Recalled(ResponseCode.ILLEGAL_OPERATION, "recall failed, timestamp invalid")
        store = broker.store
        try:
            await broker.put(
                lambda: store.recall(
                    topic,
                    handle.message_id,
                    handle.timestamp_ms,
                    producer_group=producer_group or None,
                    born_host=born_host,
                    wait_for_flush=False,
                )
            )
        except (MessageIllegalError, StoreError) as e:
            shown = handle.message_id[:_LOGGED_ID_CHARS]
            log.warning("recall of %s in %s failed: %s", shown, topic, e)
            return Recalled(ResponseCode.SYSTEM_ERROR, "recall failed, execute error")
        log.info("recalled timer message %s of %s", handle.message_id[:_LOGGED_ID_CHARS], topic)
        return Recalled(ResponseCode.SUCCESS, message_id=handle.message_id)
