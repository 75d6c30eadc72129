"""PULL_MESSAGE: read a batch from a queue, or hold the request until messages arrive."""

import dataclasses
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.clients import TAG, Subscription
from pyrmq.broker.services.hold import HeldPull
from pyrmq.broker.state.topics import PERM_READ
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.protocol import PullSysFlag, RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.sql_filter import SqlFilter, SqlFilterError, parse_cached
from pyrmq.store import GetMessageStatus

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["PullProcessor"]

log = logging.getLogger(__name__)

# Plain ints: ``int & IntFlag`` runs enum.Flag.__and__, in Python, on every pull.
FLAG_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
FLAG_SUSPEND = int(PullSysFlag.SUSPEND)
FLAG_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
# Parsed subscriptions by (topic, expression): a consumer sends its expression with every pull.
_SUBSCRIPTIONS_CACHED = 4096

# GetMessageStatus -> the pull answer's code, as RocketMQ's PullMessageProcessor maps it.
_NOT_FOUND = {
    GetMessageStatus.OFFSET_FOUND_NULL,
    GetMessageStatus.OFFSET_OVERFLOW_ONE,
}
SQL92 = "SQL92"
_RETRY = {GetMessageStatus.MESSAGE_WAS_REMOVING, GetMessageStatus.NO_MATCHED_MESSAGE}
_MOVED = {GetMessageStatus.OFFSET_OVERFLOW_BADLY, GetMessageStatus.OFFSET_TOO_SMALL}
_EMPTY = {GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE}


class PullProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        self._subscriptions: dict[tuple[str, str, str | None], Subscription] = {}

    def install(self, server: RemotingServer) -> None:
        # Never waits: run at once when the request arrives (no task per pull).
        server.register_inline(RequestCode.PULL_MESSAGE, self.pull)

    def pull(self, conn: Connection, request: RemotingCommand) -> RemotingCommand | None:
        return self._pull(conn, request, allow_suspend=True)

    def _subscription(
        self, topic: str, expression: str, expression_type: str | None
    ) -> Subscription:
        key = (topic, expression, expression_type)
        found = self._subscriptions.get(key)
        if found is None:
            if len(self._subscriptions) >= _SUBSCRIPTIONS_CACHED:
                self._subscriptions.clear()
            found = Subscription.parse(topic, expression, expression_type)
            self._subscriptions[key] = found
        return found

    def _pull(
        self,
        conn: Connection,
        request: RemotingCommand,
        *,
        allow_suspend: bool,
        header: PullMessageRequestHeader | None = None,
    ) -> RemotingCommand | None:
        """Answers a pull; never waits, so a woken held pull is answered inline (with the
        header parsed on its first pass: the rest is checked again)."""
        if header is None:
            header = PullMessageRequestHeader.from_ext(request.ext_fields)
        broker = self.broker
        config = broker.topics.get(header.topic)
        if config is None:
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{header.topic}] not exist, apply first please!",
            )
        if not config.perm & PERM_READ:
            return RemotingCommand.response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{header.topic}] pulling is forbidden",
            )
        if not 0 <= header.queue_id < max(config.read_queue_nums, config.write_queue_nums):
            return RemotingCommand.response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"queueId[{header.queue_id}] is illegal, topic:[{header.topic}] "
                f"topicConfig.readQueueNums:[{config.read_queue_nums}] "
                f"consumer:[{conn.peer_address}]",
            )
        if header.sys_flag & FLAG_SUBSCRIPTION:
            subscription = self._subscription(
                header.topic, header.subscription or "*", header.expression_type
            )
        else:
            found = broker.clients.subscription(header.consumer_group, header.topic)
            if found is None:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    remark=f"the consumer's subscription not exist, group: {header.consumer_group}",
                )
            subscription = found
        sql: SqlFilter | None = None
        if subscription.expression_type != TAG:
            if subscription.expression_type != SQL92 or not broker.config.enable_property_filter:
                # As RocketMQ with enablePropertyFilter off: read as tags, a SQL92 expression
                # would match nothing, and the consumer would skip every message.
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SYSTEM_ERROR,
                    remark="The broker does not support consumer to filter message by "
                    f"{subscription.expression_type}",
                )
            try:
                sql = parse_cached(subscription.expression)
            except SqlFilterError as e:
                return RemotingCommand.response_to(
                    request,
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    remark=f"parse the consumer's subscription[{subscription.expression}] "
                    f"failed: {e}",
                )

        got = broker.store.get(
            header.topic,
            header.queue_id,
            header.queue_offset,
            max_count=max(1, header.max_msg_nums),
            tags=subscription.expression if subscription.tags_codes else None,
        )
        # The store already computes RocketMQ's next offset for every outcome.
        status = got.status
        body = b""
        matched = got.message_count
        if status is GetMessageStatus.FOUND and sql is not None:
            kept = [
                view
                for view, message in zip(got.views(), got.messages(), strict=True)
                if sql.matches(message.properties)
            ]
            matched = len(kept)
            body = b"".join(kept)
            if not kept:
                # RocketMQ's NO_MATCHED_MESSAGE: pull again from past what was read.
                status = GetMessageStatus.NO_MATCHED_MESSAGE
        if status is GetMessageStatus.FOUND:
            code = ResponseCode.SUCCESS
            if sql is None:
                body = got.buffer
        elif status in _RETRY:
            code = ResponseCode.PULL_RETRY_IMMEDIATELY
        elif status in _MOVED:
            code = ResponseCode.PULL_OFFSET_MOVED
        elif status in _EMPTY:
            if header.queue_offset != 0:
                code = ResponseCode.PULL_OFFSET_MOVED
            else:
                code = ResponseCode.PULL_NOT_FOUND
        else:
            assert status in _NOT_FOUND
            code = ResponseCode.PULL_NOT_FOUND
        broker.stats.pulled(
            found=matched if code == ResponseCode.SUCCESS else 0,
            topic=header.topic,
            group=header.consumer_group,
        )

        # Only on the first pass: a held pull's commit offset is old by the time it wakes,
        # and storing it again would move back an offset committed meanwhile.
        if (
            allow_suspend
            and header.sys_flag & FLAG_COMMIT_OFFSET
            and header.commit_offset is not None
            and header.commit_offset >= 0
        ):
            broker.offsets.commit(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )

        if code == ResponseCode.PULL_NOT_FOUND and allow_suspend and header.sys_flag & FLAG_SUSPEND:
            timeout_ms = (
                header.suspend_timeout_millis
                if broker.config.long_polling_enable
                else broker.config.short_polling_time_ms
            )
            self._hold(conn, request, header, subscription, timeout_ms)
            return None

        remark = status.name if code != ResponseCode.SUCCESS else None
        return RemotingCommand.response_to(
            request,
            code,
            remark=remark,
            ext_fields={
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(got.next_begin_offset),
                "minOffset": str(got.min_offset),
                "maxOffset": str(got.max_offset),
            },
            body=body,
        )

    def _hold(
        self,
        conn: Connection,
        request: RemotingCommand,
        header: PullMessageRequestHeader,
        subscription: Subscription,
        timeout_ms: int,
    ) -> None:
        deadline = time.monotonic() + max(timeout_ms, 0) / 1000

        def answer() -> None:
            response = self._pull(conn, request, allow_suspend=False, header=header)
            if response is None:
                return
            left_ms = int((deadline - time.monotonic()) * 1000)
            if (
                subscription.expression_type != TAG
                and response.code == ResponseCode.PULL_RETRY_IMMEDIATELY
                and left_ms > 0
            ):
                # What arrived does not match the SQL92 filter: hold on past it, as RocketMQ
                # keeps such a pull parked, instead of sending the consumer round again.
                later = dataclasses.replace(
                    header, queue_offset=int(response.ext_fields["nextBeginOffset"])
                )
                self._hold(conn, request, later, subscription, left_ms)
                return
            conn.send(response)

        self.broker.hold.hold(
            HeldPull(
                topic=header.topic,
                queue_id=header.queue_id,
                queue_offset=header.queue_offset,
                # Any arrival may match a SQL92 filter: the pull then runs it.
                expression=subscription.expression if subscription.expression_type == TAG else "*",
                deadline=deadline,
                answer=answer,
            )
        )
