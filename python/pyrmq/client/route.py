"""Topic routes from the name server, and the queues they give producers and consumers."""

import dataclasses
import json
import re
from typing import Any

from pyrmq.client.message import MessageQueue

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

# A bare integer used as an object key: `{0:"a"}` or `,12:"b"` (fastjson's map keys).
_BARE_INT_KEY = re.compile(r'([{,])\s*(-?\d+)\s*:(?=\s*["{\[0-9tfn-])')
# A flat JSON object used as a map key: fastjson writes Map<MessageQueue, V> this way.
_OBJECT_KEY = re.compile(r"(\{[^{}]*\})(?=\s*:)")


def loads_loose_json(data: bytes | str) -> Any:
    """Parses JSON that may use bare integer object keys, as Java name servers send to old
    clients.

    >>> loads_loose_json('{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10921"}}')
    {'brokerAddrs': {'0': '127.0.0.1:10911', '1': '127.0.0.1:10921'}}
    """
    text = data.decode() if isinstance(data, bytes) else data
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(_BARE_INT_KEY.sub(r'\1"\2":', text))


def loads_fastjson(body: bytes | str) -> Any:
    """Parses JSON as fastjson writes ``Map<MessageQueue, V>``, with objects as map keys
    (not valid JSON): such a key comes back as its JSON text, for :func:`queue_table`."""
    raw = body.decode() if isinstance(body, bytes) else body
    return json.loads(_OBJECT_KEY.sub(lambda m: json.dumps(m.group(1)), raw))


def queue_table(table: Any) -> dict[MessageQueue, Any]:
    """A map parsed by :func:`loads_fastjson`, keyed by MessageQueue; other keys are left out."""
    out: dict[MessageQueue, Any] = {}
    if not isinstance(table, dict):
        return out
    for key, value in table.items():
        try:
            mq = json.loads(key)
            queue = MessageQueue(str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))
        except (ValueError, KeyError, TypeError):
            continue  # not a MessageQueue: left out
        out[queue] = value
    return out


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
