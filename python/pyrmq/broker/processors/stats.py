"""Statistics as ``mqadmin`` reads them: GET_TOPIC_STATS_INFO (a topic's queues),
GET_CONSUME_STATS (a group's lag), GET_BROKER_RUNTIME_INFO (store and traffic figures),
GET_ALL_DELAY_OFFSET (delayed-message progress), QUERY_CONSUME_TIME_SPAN (how far behind in
time a group is), GET_BROKER_CONSUME_STATS (every group's lag on the broker) and
VIEW_BROKER_STATS_DATA (a topic's or a group's traffic over the last minute, hour and day)."""

import datetime
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyrmq.broker.processors.admin import message_queue_table
from pyrmq.broker.services.stats import TPS_WINDOWS_S
from pyrmq.broker.state.topics import SCHEDULE_TOPIC
from pyrmq.errors import StoreError
from pyrmq.remoting.command import VERSION, RemotingCommand
from pyrmq.remoting.headers import (
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    GetTopicStatsInfoRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
)
from pyrmq.remoting.protocol import MQVersion, RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["StatsProcessor"]


class StatsProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        server.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        server.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        server.register(RequestCode.GET_ALL_DELAY_OFFSET, self.delay_offsets)
        server.register(RequestCode.VIEW_BROKER_STATS_DATA, self.stats_data)
        server.register(RequestCode.QUERY_CONSUME_TIME_SPAN, self.consume_time_span)
        server.register(RequestCode.GET_BROKER_CONSUME_STATS, self.broker_consume_stats)

    async def stats_data(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's BrokerStatsData of one item: ``statsName`` (TOPIC_PUT_NUMS,
        GROUP_GET_NUMS, ...) and ``statsKey`` (a topic, ``topic@group``, the cluster)."""
        name = request.ext_fields.get("statsName", "")
        key = request.ext_fields.get("statsKey", "")
        windows = self.broker.stats_items.windows(name, key)
        if windows is None:
            return RemotingCommand.response_to(
                request, ResponseCode.SYSTEM_ERROR, remark=f"The stats <{name}> <{key}> not exist"
            )
        body = {field: window.to_json() for field, window in windows.items()}
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=json.dumps(body, separators=(",", ":")).encode()
        )

    async def delay_offsets(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Each delay level's progress in SCHEDULE_TOPIC_XXXX, as RocketMQ's delayOffset.json."""
        table = {str(level): offset for level, offset in self.broker.store.delay_offsets().items()}
        body = json.dumps({"offsetTable": table}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def topic_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Each write queue's min and max offsets and the store time of its last message."""
        header = GetTopicStatsInfoRequestHeader.from_ext(request.ext_fields)
        config = self.broker.topic(header.topic)
        if config is None:
            return RemotingCommand.response_to(
                request, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{header.topic}] not exist"
            )
        store = self.broker.store
        table = {}
        for queue_id in self.broker.queue_ids(config.write_queue_nums):
            max_offset = store.max_offset(header.topic, queue_id)
            last = store.store_time(header.topic, queue_id, max_offset - 1) if max_offset else 0
            table[queue_id] = {
                "lastUpdateTimestamp": last or 0,
                "maxOffset": max_offset,
                "minOffset": store.min_offset(header.topic, queue_id),
            }
        body = message_queue_table(header.topic, self.broker.config.broker_name, table)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, body=b'{"offsetTable":' + body + b"}"
        )

    async def consume_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """A group's committed offset against each read queue's max offset: its lag."""
        header = GetConsumeStatsRequestHeader.from_ext(request.ext_fields)
        broker, group = self.broker, header.consumer_group
        topics = [header.topic] if header.topic else broker.offsets.topics(group)
        tables, tps = [], 0.0
        for topic in topics:
            config = broker.topics.get(topic)
            if config is None:
                continue
            # As RocketMQ: a live group that does not subscribe to the topic is left out.
            if broker.clients.members(group) and broker.clients.subscription(group, topic) is None:
                continue
            table = self._offset_table(group, topic, config.read_queue_nums)
            body = message_queue_table(topic, broker.config.broker_name, table)
            tables.append(body[1:-1])
            tps += broker.stats.consume_tps(topic, group)
        entries = b",".join(t for t in tables if t)
        body = b'{"consumeTps":%s,"offsetTable":{%s}}' % (json.dumps(tps).encode(), entries)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    def _offset_table(self, group: str, topic: str, queue_nums: int) -> dict[int, dict[str, int]]:
        """Each queue's OffsetWrapper: max offset, the group's committed offset (0 when none)
        and the store time of the last message it consumed (0 when none)."""
        broker = self.broker
        table = {}
        for queue_id in broker.queue_ids(queue_nums):
            consumer_offset = max(broker.offsets.query(group, topic, queue_id) or 0, 0)
            last = 0
            if consumer_offset > 0:
                last = broker.store.store_time(topic, queue_id, consumer_offset - 1) or 0
            table[queue_id] = {
                "brokerOffset": broker.store.max_offset(topic, queue_id),
                "consumerOffset": consumer_offset,
                "lastTimestamp": last,
            }
        return table

    async def runtime_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """RocketMQ's KVTable of store and traffic figures, every value a string, as
        ``mqadmin brokerStatus`` and ``clusterList`` read them."""
        broker = self.broker
        store, stats = broker.store, broker.stats
        min_phy = store.min_phy_offset
        try:
            first = (
                store.look_message_by_offset(min_phy) if store.max_phy_offset > min_phy else None
            )
        except StoreError:  # a damaged first record: its time is unknown, as with none
            first = None
        disk = store.check_disk()
        up_s = max(time.time_ns() // 1_000_000 - stats.boot_ms, 0) // 1000
        days, rest = divmod(up_s, 86_400)
        hours, rest = divmod(rest, 3_600)
        minutes, seconds = divmod(rest, 60)

        def rates(rate: Callable[[int], float]) -> str:
            return " ".join(f"{rate(w):.2f}" for w in TPS_WINDOWS_S)

        table = {
            "brokerVersionDesc": MQVersion(VERSION).name,
            "brokerVersion": str(VERSION),
            "bootTimestamp": str(stats.boot_ms),
            "startAcceptSendRequestTimeStamp": str(stats.boot_ms),
            "runtime": f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]",
            "msgPutTotalYesterdayMorning": str(stats.put_yesterday_morning),
            "msgPutTotalTodayMorning": str(stats.put_today_morning),
            "msgPutTotalTodayNow": str(stats.put_total),
            "msgGetTotalYesterdayMorning": str(stats.get_yesterday_morning),
            "msgGetTotalTodayMorning": str(stats.get_today_morning),
            "msgGetTotalTodayNow": str(stats.transferred_total),
            "putMessageTimesTotal": str(stats.put_total),
            "putMessageSizeTotal": str(stats.put_bytes_total),
            "putMessageAverageSize": str(stats.put_bytes_total / max(stats.put_total, 1)),
            "putTps": rates(stats.put_tps),
            "getTransferedTps": rates(stats.transferred_tps),
            "getFoundTps": rates(stats.found_tps),
            "getMissTps": rates(stats.miss_tps),
            "getTotalTps": rates(lambda w: stats.found_tps(w) + stats.miss_tps(w)),
            "commitLogMinOffset": str(min_phy),
            "commitLogMaxOffset": str(store.max_phy_offset),
            "commitLogDiskRatio": str(disk if disk is not None else -1),
            "earliestMessageTimeStamp": str(first.store_timestamp_ms if first else -1),
            # Dispatch happens within the put: nothing is ever waiting to be dispatched.
            "dispatchBehindBytes": "0",
        }
        # As RocketMQ: each delay level's delivered offset against its queue's max offset.
        for level, offset in store.delay_offsets().items():
            max_offset = store.max_offset(SCHEDULE_TOPIC, level - 1)
            table[f"scheduleMessageOffset_{level}"] = f"{offset},{max_offset}"
        body = json.dumps({"table": table}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    # --- consume time span, broker-wide consume stats -----------------------------------

    async def consume_time_span(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """A QueryConsumeTimeSpanBody: for each write queue of the topic the store times of its
        first and last messages (-1 when empty), of the last message the group consumed (the
        first message's when it consumed none), and ``delayTime``: how long ago the next
        message it has to consume was stored (0 when it caught up).

        Unlike Java 4.9, a group with no committed offset counts from the queue's first message
        (Java asks the store for offset -1 and reports the current time as the delay).
        """
        header = QueryConsumeTimeSpanRequestHeader.from_ext(request.ext_fields)
        broker, topic, group = self.broker, header.topic, header.group
        config = broker.topic(topic)
        if config is None:
            return RemotingCommand.response_to(
                request, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{topic}] not exist"
            )
        store = broker.store
        now_ms = time.time_ns() // 1_000_000
        spans = []
        for queue_id in broker.queue_ids(config.write_queue_nums):
            min_offset = store.min_offset(topic, queue_id)
            max_offset = store.max_offset(topic, queue_id)
            first_ms = store.earliest_store_time(topic, queue_id)
            min_ms = -1 if first_ms is None else first_ms
            last_ms = store.store_time(topic, queue_id, max_offset - 1) if max_offset else None
            max_ms = -1 if last_ms is None else last_ms
            committed = broker.offsets.query(group, topic, queue_id)
            consume_ms = min_ms
            if committed is not None and committed > 0:
                consumed = store.store_time(topic, queue_id, committed - 1)
                consume_ms = min_ms if consumed is None else consumed
            delay_ms = 0
            next_offset = max(committed or 0, min_offset)
            if next_offset < max_offset:
                next_ms = store.store_time(topic, queue_id, next_offset)
                delay_ms = 0 if next_ms is None else max(now_ms - next_ms, 0)
            spans.append(
                {
                    "consumeTimeStamp": consume_ms,
                    "consumeTimeStampStr": _java_time(consume_ms),
                    "delayTime": delay_ms,
                    "maxTimeStamp": max_ms,
                    "maxTimeStampStr": _java_time(max_ms),
                    "messageQueue": {
                        "brokerName": broker.config.broker_name,
                        "queueId": queue_id,
                        "topic": topic,
                    },
                    "minTimeStamp": min_ms,
                    "minTimeStampStr": _java_time(min_ms),
                }
            )
        body = json.dumps({"consumeTimeSpanSet": spans}, separators=(",", ":")).encode()
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

    async def broker_consume_stats(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """A ConsumeStatsList (``mqadmin brokerConsumeStats``): for every group, a ConsumeStats
        per topic it has offsets on (each write queue's OffsetWrapper and the group's rate), the
        broker's address and the lag summed over all of them. With ``isOrder``, ordered topics
        only. The groups are those with settings and those with committed offsets: Java's
        broker has created settings for the latter as they consumed."""
        header = GetConsumeStatsInBrokerHeader.from_ext(request.ext_fields)
        broker = self.broker
        groups = sorted({g.group_name for g in broker.groups.all()} | set(broker.offsets.groups()))
        entries, total_diff = [], 0
        for group in groups:
            stats = []
            for topic in broker.offsets.topics(group):
                config = broker.topics.get(topic)
                if config is None or (header.is_order and not config.order):
                    continue
                # As for GET_CONSUME_STATS: a live group that does not subscribe is left out.
                if (
                    broker.clients.members(group)
                    and broker.clients.subscription(group, topic) is None
                ):
                    continue
                table = self._offset_table(group, topic, config.write_queue_nums)
                total_diff += sum(v["brokerOffset"] - v["consumerOffset"] for v in table.values())
                tps = json.dumps(broker.stats.consume_tps(topic, group)).encode()
                offsets = message_queue_table(topic, broker.config.broker_name, table)
                stats.append(b'{"consumeTps":%s,"offsetTable":%s}' % (tps, offsets))
            entries.append(b"{%s:[%s]}" % (json.dumps(group).encode(), b",".join(stats)))
        body = b'{"brokerAddr":%s,"consumeStatsList":[%s],"totalDiff":%d}' % (
            json.dumps(broker.address).encode(),
            b",".join(entries),
            total_diff,
        )
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)


def _java_time(ms: int) -> str:
    """A time as Java's QueueTimeSpan shows it (``yyyy-MM-dd#HH:mm:ss:SSS``, local time).

    >>> _java_time(1_700_000_000_123)[10:11], _java_time(1_700_000_000_123)[-4:]
    ('#', ':123')
    """
    moment = datetime.datetime.fromtimestamp(ms / 1000)
    return moment.strftime("%Y-%m-%d#%H:%M:%S:") + f"{moment.microsecond // 1000:03d}"
