"""Statistics as ``mqadmin`` reads them: GET_TOPIC_STATS_INFO (a topic's queues),
GET_CONSUME_STATS (a group's lag), GET_BROKER_RUNTIME_INFO (store and traffic figures),
GET_ALL_DELAY_OFFSET (delayed-message progress) and VIEW_BROKER_STATS_DATA (a topic's or a
group's traffic over the last minute, hour and day)."""

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyrmq.broker.processors.admin import message_queue_table
from pyrmq.broker.services.stats import TPS_WINDOWS_S
from pyrmq.broker.state.topics import SCHEDULE_TOPIC
from pyrmq.errors import StoreError
from pyrmq.remoting.command import VERSION, RemotingCommand
from pyrmq.remoting.headers import GetConsumeStatsRequestHeader, GetTopicStatsInfoRequestHeader
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
            table = {}
            for queue_id in broker.queue_ids(config.read_queue_nums):
                consumer_offset = max(broker.offsets.query(group, topic, queue_id) or 0, 0)
                last = 0
                if consumer_offset > 0:
                    last = broker.store.store_time(topic, queue_id, consumer_offset - 1) or 0
                table[queue_id] = {
                    "brokerOffset": broker.store.max_offset(topic, queue_id),
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": last,
                }
            body = message_queue_table(topic, broker.config.broker_name, table)
            tables.append(body[1:-1])
            tps += broker.stats.consume_tps(topic, group)
        entries = b",".join(t for t in tables if t)
        body = b'{"consumeTps":%s,"offsetTable":{%s}}' % (json.dumps(tps).encode(), entries)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, body=body)

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
