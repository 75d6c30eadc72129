"""Topic routes from the name server, and the queues they give producers and consumers."""

import dataclasses
from typing import Any

from pyrmq.client.message import MessageQueue
from pyrmq.remoting.fastjson import loads_fastjson, loads_loose_json, queue_entries

__all__ = [
    "BrokerData",
    "TopicRoute",
    "loads_fastjson",
    "loads_loose_json",
    "loads_queue_table",
    "queue_table",
]

PERM_READ = 4
PERM_WRITE = 2
MASTER_ID = 0


def queue_table(table: Any) -> dict[MessageQueue, Any]:
    """A map parsed by :func:`loads_fastjson`, keyed by MessageQueue; other keys are left out."""
    return {MessageQueue(*key): value for key, value in queue_entries(table).items()}


def loads_queue_table(body: bytes | str, field: str = "offsetTable") -> dict[MessageQueue, Any]:
    """Field ``field`` of a JSON object as fastjson writes it: a map keyed by MessageQueue.

    >>> loads_queue_table(
    ...     b'{"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{"maxOffset":7}}}'
    ... )
    {MessageQueue(topic='T', broker_name='b', queue_id=1): {'maxOffset': 7}}
    """
    parsed = loads_fastjson(body)
    return queue_table(parsed.get(field) if isinstance(parsed, dict) else None)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker name: its cluster and its addresses by broker id (0 = master)."""

    cluster: str
    broker_name: str
    addrs: dict[int, str]

    @property
    def master(self) -> str | None:
        return self.addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        """The master, else the lowest-numbered slave."""
        return self.master or (self.addrs[min(self.addrs)] if self.addrs else None)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's route: which brokers hold it and with how many queues.

    >>> route = TopicRoute.parse("T", b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},'
    ...     b'"brokerName":"b","cluster":"C"}],"queueDatas":[{"brokerName":"b","perm":6,'
    ...     b'"readQueueNums":2,"writeQueueNums":2,"topicSysFlag":0}]}')
    >>> [str(q) for q in route.publish_queues()]
    ['T@b:0', 'T@b:1']
    """

    topic: str
    brokers: dict[str, BrokerData]
    queues: tuple[QueueData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def parse(cls, topic: str, body: bytes) -> "TopicRoute":
        raw = loads_loose_json(body)
        brokers = {}
        for b in raw.get("brokerDatas") or []:
            addrs = {int(k): str(v) for k, v in (b.get("brokerAddrs") or {}).items()}
            brokers[b["brokerName"]] = BrokerData(b.get("cluster", ""), b["brokerName"], addrs)
        queues = tuple(
            sorted(
                (
                    QueueData(
                        q["brokerName"],
                        int(q.get("readQueueNums", 0)),
                        int(q.get("writeQueueNums", 0)),
                        int(q.get("perm", 0)),
                        int(q.get("topicSysFlag", 0)),
                    )
                    for q in raw.get("queueDatas") or []
                ),
                key=lambda q: q.broker_name,
            )
        )
        return cls(topic, brokers, queues, raw.get("orderTopicConf") or None)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's TopicRouteData, as ``mqadmin topicRoute`` prints it.

        >>> TopicRoute.parse("T", b'{"brokerDatas":[{"brokerAddrs":{"0":"h:1"},"brokerName":"b",'
        ...     b'"cluster":"C"}],"queueDatas":[]}').to_json()["brokerDatas"]
        [{'brokerAddrs': {'0': 'h:1'}, 'brokerName': 'b', 'cluster': 'C'}]
        """
        out: dict[str, Any] = {
            "brokerDatas": [
                {
                    "brokerAddrs": {str(i): a for i, a in sorted(b.addrs.items())},
                    "brokerName": b.broker_name,
                    "cluster": b.cluster,
                }
                for b in sorted(self.brokers.values(), key=lambda b: b.broker_name)
            ],
            "queueDatas": [
                {
                    "brokerName": q.broker_name,
                    "perm": q.perm,
                    "readQueueNums": q.read_queue_nums,
                    "topicSysFlag": q.topic_sys_flag,
                    "writeQueueNums": q.write_queue_nums,
                }
                for q in self.queues
            ],
        }
        if self.order_topic_conf:
            out["orderTopicConf"] = self.order_topic_conf
        return out

    def publish_queues(self) -> list[MessageQueue]:
        """Writable queues on brokers with a master, in broker-name order."""
        if self.order_topic_conf:
            out = []
            for part in self.order_topic_conf.split(";"):
                name, _, count = part.partition(":")
                out += [MessageQueue(self.topic, name, i) for i in range(int(count or 0))]
            return out
        return [
            MessageQueue(self.topic, q.broker_name, i)
            for q in self.queues
            if q.perm & PERM_WRITE
            and (b := self.brokers.get(q.broker_name)) is not None
            and b.master is not None
            for i in range(q.write_queue_nums)
        ]

    def subscribe_queues(self) -> list[MessageQueue]:
        """Readable queues, in broker-name order."""
        return [
            MessageQueue(self.topic, q.broker_name, i)
            for q in self.queues
            if q.perm & PERM_READ
            for i in range(q.read_queue_nums)
        ]
