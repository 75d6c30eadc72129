"""Topic administration, message lookup and offset reset: UPDATE_AND_CREATE_TOPIC,
DELETE_TOPIC_IN_BROKER, GET_ALL_TOPIC_CONFIG, QUERY_MESSAGE, VIEW_MESSAGE_BY_ID,
INVOKE_BROKER_TO_RESET_OFFSET, GET_SYSTEM_TOPIC_LIST_FROM_BROKER, CLONE_GROUP_OFFSET."""

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from pyrmq import _core
from pyrmq.broker.state import topic_attributes
from pyrmq.broker.state.topics import TopicConfig
from pyrmq.errors import MessageIllegalError, PyrmqError, StoreError, SystemTopicError
from pyrmq.namespace import SYSTEM_TOPICS
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.fastjson import dumps_queue_map
from pyrmq.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    QueryConsumeQueueRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from pyrmq.remoting.protocol import LanguageCode, MQVersion, RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = [
    "AdminProcessor",
    "message_queue_table",
    "reset_offset_body",
    "reset_offset_body_for_cpp",
]

log = logging.getLogger(__name__)

# Reserved topics that producers may write, which the store's check lets through: never
# deleted, with the broker-only ones the store names (RocketMQ's TopicValidator).
_RESERVED_TOPICS = frozenset({"TBW102", "RMQ_SYS_TRACE_TOPIC", "BenchmarkTest"})

QUERY_MAX_NUM = 64
"""Most messages one QUERY_MESSAGE returns (RocketMQ's ``maxMsgsNumBatch``)."""
UNIQUE_KEY_QUERY_MAX_NUM = 32
"""What a query by the producer's message id returns at most, whatever it asked for
(RocketMQ's ``defaultQueryMaxNum``)."""
QUERY_CONSUME_QUEUE_MAX_UNITS = 10_000
"""Most ConsumeQueue units one QUERY_CONSUME_QUEUE returns."""


class AdminProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.create_topic)
        server.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        server.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topics)
        server.register(RequestCode.QUERY_MESSAGE, self.query_message)
        server.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        server.register(RequestCode.QUERY_CONSUME_QUEUE, self.query_consume_queue)
        server.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)
        server.register(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER, self.system_topics)
        server.register(RequestCode.CLONE_GROUP_OFFSET, self.clone_group_offset)

    async def all_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every topic's config with the table's data version (a slave copies them)."""
        body = json.dumps(self.broker.topics.to_json()).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def create_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext(request.ext_fields)
        topic = header.topic
        if illegal := _illegal_topic(request, topic):
            return illegal
        if topic == self.broker.config.broker_cluster_name:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"the topic[{topic}] is conflict with system reserved words.",
            )
        if self._is_system_topic(topic):
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The topic[{topic}] is conflict with system topic.",
            )
        most = self.broker.config.store.max_queue_nums_per_topic
        for name, nums in (
            ("readQueueNums", header.read_queue_nums),
            ("writeQueueNums", header.write_queue_nums),
        ):
            if not 1 <= nums <= most:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=f"{name} {nums} of topic[{topic}] is not in [1, {most}]",
                )
        existing = self.broker.topics.get(topic)
        try:
            changes = topic_attributes.parse_changes(header.attributes)
            if changes.get("+" + topic_attributes.MESSAGE_TYPE) == topic_attributes.MIXED:
                # As RocketMQ without enableMixedMessageType: a topic without the attribute
                # already takes every type here.
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.INVALID_PARAMETER,
                    remark="MIXED message type is not supported.",
                )
            attributes = topic_attributes.alter(
                {} if existing is None else existing.attributes, changes, creating=existing is None
            )
        except ValueError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        self.broker.topics.put(
            TopicConfig(
                topic,
                read_queue_nums=header.read_queue_nums,
                write_queue_nums=header.write_queue_nums,
                perm=header.perm,
                topic_sys_flag=header.topic_sys_flag or 0,
                order=header.order,
                attributes=attributes,
            )
        )
        await self.broker.register_topics(topic)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    def _is_system_topic(self, topic: str) -> bool:
        try:
            _core.validate_topic(topic)
        except SystemTopicError:
            return True
        except MessageIllegalError:
            pass
        config = self.broker.config
        return (
            topic in _RESERVED_TOPICS
            or topic.startswith("rmq_sys_")
            or topic in (config.broker_cluster_name, config.broker_name)
        )

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Removes the topic's config, the groups' offsets on it and its ConsumeQueues (the
        name servers drop it from the route at the next registration, or when asked)."""
        header = DeleteTopicRequestHeader.from_ext(request.ext_fields)
        topic, broker = header.topic, self.broker
        if illegal := _illegal_topic(request, topic):
            return illegal
        if self._is_system_topic(topic):
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"The topic[{topic}] is conflict with system topic.",
            )
        broker.topics.delete(topic)
        broker.offsets.clean_topic(topic)
        broker.pulls.access.forget_topic(topic)
        broker.stats_items.forget(lambda _, key: key == topic or key.startswith(f"{topic}@"))
        if broker.metrics is not None:
            broker.metrics.forget_topic(topic)
        broker.pops.forget_topic(topic)
        offsets = broker.offsets.encode(force=True)

        def delete() -> None:
            # Saved now, not at the next periodic save, and before the queues go: after a crash
            # between the two, the groups' old offsets on a topic created again would skip its
            # first messages, where a topic not yet deleted is only read again from the start.
            if offsets is not None:
                broker.offsets.write(offsets)
            broker.store.delete_topic(topic)

        try:
            # File work (the deletion record is synced, queue files removed): off the loop.
            await asyncio.get_running_loop().run_in_executor(None, delete)
        except (PyrmqError, OSError) as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        broker.request_registration()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_ext(request.ext_fields)
        max_num = max(1, min(header.max_num, QUERY_MAX_NUM))
        if request.ext_fields.get("_UNIQUE_KEY_QUERY") == "true":
            max_num = UNIQUE_KEY_QUERY_MAX_NUM
        store = self.broker.store
        found = store.query_message(
            header.topic,
            header.key,
            max_count=max_num,
            begin_ms=header.begin_timestamp,
            end_ms=header.end_timestamp,
        )
        if not found:
            return RemotingCommand.response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct",
            )
        body = b"".join(m.record() for m in found)
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={
                "indexLastUpdateTimestamp": str(max(m.store_timestamp_ms for m in found)),
                "indexLastUpdatePhyoffset": str(max(m.phy_offset for m in found)),
            },
            body=body,
        )

    async def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_ext(request.ext_fields)
        try:
            raw = self.broker.store.look_record(header.offset) or b""
        except StoreError as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        if not raw:
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the offset, {header.offset}",
            )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=raw)

    async def query_consume_queue(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """Units of a ConsumeQueue from ``index`` on (``mqadmin queryCq``): CommitLog offset,
        size and tag code of each, the queue's min and max offsets, and for a consumer group
        its subscription and whether it takes each unit (``eval``; RocketMQ works that out
        only for SQL filters). The body is built after the units are read: RocketMQ 4 encodes
        it before and always answers an empty one."""
        header = QueryConsumeQueueRequestHeader.from_ext(request.ext_fields)
        topic, queue_id, store = header.topic, header.queue_id, self.broker.store
        max_offset = store.max_offset(topic, queue_id)
        if max_offset == 0:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"{queue_id}@{topic} is not exist!"
            )
        body: dict[str, object] = {
            "maxQueueIndex": max_offset,
            "minQueueIndex": store.min_offset(topic, queue_id),
        }
        sub = None
        if header.consumer_group is not None:
            sub = self.broker.clients.subscription(header.consumer_group, topic)
            if sub is None:
                body["filterData"] = f"{header.consumer_group}@{topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_json()
        count = max(0, min(header.count, QUERY_CONSUME_QUEUE_MAX_UNITS))
        units = store.consume_queue_units(topic, queue_id, max(header.index, 0), count)
        remark = None
        if not units:
            remark = f"Index {header.index} of {queue_id}@{topic} is not exist!"
        body["queueData"] = [
            {
                "eval": sub is not None and (sub.tags_codes is None or tags_code in sub.tags_codes),
                "physicOffset": phy_offset,
                "physicSize": size,
                "tagsCode": tags_code,
            }
            for _, phy_offset, size, tags_code in units
        ]
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            remark=remark,
            body=json.dumps(body, separators=(",", ":")).encode(),
        )

    async def reset_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Moves a consumer group's offsets on one topic to a point in time (``mqadmin
        resetOffsetByTime``), as Java 4.9's ``Broker2Client.resetOffset`` does.

        For every queue (the topic's write queue count, as in Java) the target is the first
        queue offset stored at or after ``timestamp``, or the max offset for ``timestamp`` -1.
        Without ``isForce`` a committed offset already below the target is kept: offsets only
        move backwards. Every queue must have a committed offset and the group must have a
        live consumer, or nothing changes. Then the new offsets go to each live consumer as a
        oneway RESET_CONSUMER_CLIENT_OFFSET on its own connection, and the answer carries them.

        Two differences from Java 4.9: the broker also stores the new offsets itself (Java
        leaves the commit to the clients), so a consumer that restarts before it commits starts
        from them too; and each consumer gets the body form it parses (:func:`reset_offset_body`
        or, for C++ clients, :func:`reset_offset_body_for_cpp`), where Java picks one form for
        all by the admin tool's language. A 5.x ``queueId`` (with an optional ``offset``) limits
        the reset to that queue.
        """
        header = ResetOffsetRequestHeader.from_ext(request.ext_fields)
        broker = self.broker
        topic, group = header.topic, header.group
        log.info(
            "reset offset requested peer=%s topic=%s group=%s timestamp=%s force=%s",
            conn.peer_address,
            topic,
            group,
            header.timestamp,
            header.is_force,
        )
        config = broker.topics.get(topic)
        if config is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=(
                    f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
                ),
            )
        explicit: int | None = None
        queue_ids: Sequence[int] = broker.queue_ids(config.write_queue_nums)
        if header.queue_id is not None and header.queue_id >= 0:
            queue_ids = [header.queue_id]
            explicit = None if header.offset == -1 else header.offset
        store = broker.store
        offsets: dict[int, int] = {}
        for queue_id in queue_ids:
            committed = broker.offsets.query(group, topic, queue_id)
            if committed is None:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=(
                        f"The consumer group <{group}> not exist: no committed offset for "
                        f"topic={topic} queueId={queue_id}"
                    ),
                )
            if explicit is not None:
                low, high = store.min_offset(topic, queue_id), store.max_offset(topic, queue_id)
                if not low <= explicit <= high:
                    return RemotingCommand.response_to(
                        request,
                        ResponseCode.SYSTEM_ERROR,
                        remark=(
                            f"Target offset {explicit} not in consume queue range "
                            f"[{low}-{high}] topic={topic} queueId={queue_id}"
                        ),
                    )
                target = explicit
            elif header.timestamp == -1:
                target = store.max_offset(topic, queue_id)
            else:
                target = store.offset_for_time(topic, queue_id, header.timestamp)
            target = max(target, 0)
            offsets[queue_id] = target if header.is_force or target < committed else committed

        members = [
            (m, m.connection)
            for m in broker.clients.members(group)
            if isinstance(m.connection, Connection)
        ]
        if not members:
            return RemotingCommand.response_to(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=(
                    "Consumer not online, so can not reset offset, "
                    f"Group: {group} Topic: {topic} Timestamp: {header.timestamp}"
                ),
            )
        for member, _ in members:
            if member.version < MQVersion.V3_0_7_SNAPSHOT:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark=(
                        f"the client does not support this feature. version={member.version} "
                        f"clientId={member.client_id}"
                    ),
                )

        for queue_id, offset in offsets.items():
            broker.offsets.commit(group, topic, queue_id, offset)
        broker.pulls.access.clear_floors(group, topic)
        broker_name = broker.config.broker_name
        body = reset_offset_body(topic, broker_name, offsets)
        cpp_body = reset_offset_body_for_cpp(topic, broker_name, offsets)
        notice = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=header.timestamp, is_force=header.is_force
        ).to_ext()
        for member, connection in members:
            connection.send(
                RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                    notice,
                    cpp_body if member.language == LanguageCode.CPP.name else body,
                    oneway=True,
                )
            )
        log.info(
            "offsets reset topic=%s group=%s offsets=%s consumers=%s",
            topic,
            group,
            offsets,
            [m.client_id for m, _ in members],
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    # --- system topics, group offset clone ------------------------------------------------

    async def system_topics(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """A TopicList of RocketMQ's system topics, with this broker's own: those named after
        its cluster and itself, and its cluster's reply topic."""
        topics = SYSTEM_TOPICS | self.broker.topics.own_system_topics()
        body = json.dumps({"topicList": sorted(topics)}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def clone_group_offset(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """``destGroup`` takes ``srcGroup``'s committed offsets on ``topic`` (blank: on every
        topic ``srcGroup`` has offsets for), replacing its own. As in RocketMQ, a topic this
        broker does not hold is passed over, and so, unless ``offline``, is one that the source
        group has live consumers for none of which subscribes to it; a source with no offsets
        changes nothing; the answer is SUCCESS either way. (Java 4.9 copies only the named
        topic's offsets, so a blank topic clones nothing there.)"""
        header = CloneGroupOffsetRequestHeader.from_ext(request.ext_fields)
        broker, src, dest = self.broker, header.src_group, header.dest_group
        topics = [header.topic] if header.topic else broker.offsets.topics(src)
        cloned = []
        for topic in topics:
            if broker.topics.get(topic) is None:
                log.warning("clone group offset: no such topic topic=%s", topic)
                continue
            if (
                not header.offline
                and broker.clients.members(src)
                and broker.clients.subscription(src, topic) is None
            ):
                log.warning("clone group offset: %s does not subscribe to topic=%s", src, topic)
                continue
            if broker.offsets.clone(src, dest, topic):
                cloned.append(topic)
        log.info("offsets cloned src=%s dest=%s topics=%s", src, dest, cloned)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)


def message_queue_table(topic: str, broker_name: str, values: Mapping[int, object]) -> bytes:
    """One topic's queues on this broker as a fastjson ``Map<MessageQueue, V>``.

    >>> message_queue_table("T", "broker-a", {0: {"maxOffset": 5}})
    b'{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5}}'
    """
    return dumps_queue_map({(topic, broker_name, q): value for q, value in values.items()})


def reset_offset_body(topic: str, broker_name: str, offsets: Mapping[int, int]) -> bytes:
    """A ResetOffsetBody as Java (fastjson) writes it: ``offsetTable`` maps MessageQueue
    *objects* to offsets, which is not valid JSON. Java clients and admin tools parse it.

    >>> reset_offset_body("T", "broker-a", {0: 5})
    b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:5}}'
    """
    return b'{"offsetTable":' + message_queue_table(topic, broker_name, offsets) + b"}"


def reset_offset_body_for_cpp(topic: str, broker_name: str, offsets: Mapping[int, int]) -> bytes:
    """The form C++ clients parse (Java's ResetOffsetBodyForC): ``offsetTable`` is a list of
    MessageQueueForC objects. rocketmq-client-cpp 1.2.3 cannot parse the map form above and
    then ignores the request.

    >>> reset_offset_body_for_cpp("T", "broker-a", {0: 5})
    b'{"offsetTable":[{"brokerName":"broker-a","offset":5,"queueId":0,"topic":"T"}]}'
    """
    table = [
        {"brokerName": broker_name, "offset": offset, "queueId": queue_id, "topic": topic}
        for queue_id, offset in sorted(offsets.items())
    ]
    return json.dumps({"offsetTable": table}, separators=(",", ":")).encode()


def _illegal_topic(request: RemotingCommand, topic: str) -> RemotingCommand | None:
    """The refusal of a name that is no topic (it would name a path under the store, as
    "../config" does), or None."""
    try:
        _core.validate_topic(topic, internal=True)
    except MessageIllegalError as e:
        return RemotingCommand.response_to(
            request,
            ResponseCode.SYSTEM_ERROR,
            remark=f"The specified topic[{topic}] contains illegal characters: {e}",
        )
    return None
