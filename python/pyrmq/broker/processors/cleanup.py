"""ConsumeQueues an operator has the broker drop: CLEAN_EXPIRED_CONSUMEQUEUE (``mqadmin
cleanExpiredCQ``), those whose every unit points before the CommitLog's first offset, and
CLEAN_UNUSED_TOPIC (``mqadmin cleanUnusedTopic``), those of topics no longer configured.

Both answer SUCCESS with no remark, as RocketMQ's broker does. The store removes a topic's
ConsumeQueues together (:meth:`MessageStore.delete_topic`), not one queue alone: an expired
queue of a topic whose other queues still hold messages stays, and the broker logs it.
"""

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from pyrmq.broker.services.transactions import HALF_TOPIC, OP_TOPIC
from pyrmq.broker.state.topics import LMQ_PREFIX, RECALL_TOPIC, SCHEDULE_TOPIC
from pyrmq.errors import PyrmqError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.store import MessageStore

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["CleanupProcessor", "expired_topics", "unused_topics"]

log = logging.getLogger(__name__)

# Queues whose offsets the broker's services keep track of themselves: the delay levels' (as
# RocketMQ keeps them), the recalls', and the transaction halves' and ops' (a queue started
# again at offset 0 would meet halves the transaction service still holds by offset).
_SERVICE_TOPICS = frozenset({SCHEDULE_TOPIC, RECALL_TOPIC, HALF_TOPIC, OP_TOPIC})


def _queue_expired(store: MessageStore, topic: str, queue_id: int, min_phy: int) -> bool | None:
    """Whether every unit of the queue points before CommitLog offset ``min_phy``; None for a
    queue that never held one (RocketMQ leaves those)."""
    end = store.max_offset(topic, queue_id)
    if end <= 0:
        return None
    last = store.consume_queue_units(topic, queue_id, end - 1, 1)
    if not last:
        # Retention moved the queue's start past its last unit.
        return store.min_offset(topic, queue_id) >= end
    return last[0][1] < min_phy


def expired_topics(store: MessageStore) -> list[str]:
    """The topics whose ConsumeQueues all point before the CommitLog's first offset (queues
    that never held a unit aside); the topics that also have a live queue are logged."""
    min_phy = store.min_phy_offset
    queues: dict[str, list[bool | None]] = {}
    for topic, queue_id in store.queue_ids():
        if topic not in _SERVICE_TOPICS:
            queues.setdefault(topic, []).append(_queue_expired(store, topic, queue_id, min_phy))
    out = []
    for topic, states in sorted(queues.items()):
        if True not in states:
            continue
        if False in states:
            log.warning(
                "clean expired consume queue: topic=%s has %d expired queues among live ones, "
                "kept (the store removes a topic's queues only together)",
                topic,
                states.count(True),
            )
            continue
        out.append(topic)
    return out


def unused_topics(store: MessageStore, configured: Collection[str]) -> list[str]:
    """The topics with ConsumeQueues that are not in ``configured``, the broker's topic
    table (the services' queues and LMQ ones aside)."""
    stored = {topic for topic, _ in store.queue_ids()}
    return sorted(
        t
        for t in stored
        if t not in configured and t not in _SERVICE_TOPICS and not t.startswith(LMQ_PREFIX)
    )


class CleanupProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE, self.clean_expired)
        server.register(RequestCode.CLEAN_UNUSED_TOPIC, self.clean_unused)

    async def clean_expired(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Deletes the ConsumeQueues of every topic whose queues retention has left pointing
        at nothing (:func:`expired_topics`)."""
        store = self.broker.store
        return await self._delete(conn, request, "expired", lambda: expired_topics(store))

    async def clean_unused(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Deletes the ConsumeQueues of every topic not in the topic table
        (:func:`unused_topics`)."""
        broker = self.broker
        configured = {c.topic_name for c in broker.topics.all()}
        return await self._delete(
            conn, request, "unused", lambda: unused_topics(broker.store, configured)
        )

    async def _delete(
        self,
        conn: Connection,
        request: RemotingCommand,
        kind: str,
        find: Callable[[], list[str]],
    ) -> RemotingCommand:
        store = self.broker.store
        log.warning("clean %s consume queues: start, asked by %s", kind, conn.peer_address)

        def clean() -> list[str]:
            topics = find()
            for topic in topics:
                store.delete_topic(topic)
            return topics

        try:
            # Queue files are scanned and removed: off the loop, as a topic's deletion.
            topics = await asyncio.get_running_loop().run_in_executor(None, clean)
        except (PyrmqError, OSError) as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        log.warning("clean %s consume queues: end, topics=%s", kind, topics)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)
