"""RocketMQ's JSON bodies as Java's fastjson writes them: a ``Map<MessageQueue, V>`` has JSON
objects as keys, and some maps have bare integers as keys. Neither is valid JSON, so the
standard parser needs the keys quoted first, and a writer must produce them as Java clients
and admin tools parse them.

>>> table = dumps_queue_map({("T", "broker-a", 0): {"maxOffset": 5}})
>>> table
b'{{"brokerName":"broker-a","queueId":0,"topic":"T"}:{"maxOffset":5}}'
>>> queue_entries(loads_fastjson(table))
{('T', 'broker-a', 0): {'maxOffset': 5}}
"""

import json
import re
from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["QueueKey", "dumps_queue_map", "loads_fastjson", "loads_loose_json", "queue_entries"]

QueueKey: TypeAlias = tuple[str, str, int]
"""A MessageQueue as (topic, broker name, queue id)."""

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
    """Parses JSON with objects as map keys: such a key comes back as its JSON text, for
    :func:`queue_entries`."""
    raw = body.decode() if isinstance(body, bytes) else body
    return json.loads(_OBJECT_KEY.sub(lambda m: json.dumps(m.group(1)), raw))


def queue_entries(table: Any) -> dict[QueueKey, Any]:
    """A map parsed by :func:`loads_fastjson`, keyed by MessageQueue; keys that are not one
    are left out."""
    out: dict[QueueKey, Any] = {}
    if not isinstance(table, dict):
        return out
    for key, value in table.items():
        try:
            mq = json.loads(key)
            queue = (str(mq["topic"]), str(mq["brokerName"]), int(mq["queueId"]))
        except (ValueError, KeyError, TypeError):
            continue
        out[queue] = value
    return out


def dumps_queue_map(values: Mapping[QueueKey, object]) -> bytes:
    """A ``Map<MessageQueue, V>`` as fastjson writes it: each key a JSON object with its
    fields in name order, the entries in queue order."""
    entries = ",".join(
        f'{{"brokerName":{json.dumps(broker_name)},"queueId":{queue_id},'
        f'"topic":{json.dumps(topic)}}}:{json.dumps(value, separators=(",", ":"))}'
        for (topic, broker_name, queue_id), value in sorted(values.items())
    )
    return f"{{{entries}}}".encode()
