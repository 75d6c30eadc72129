"""Queue offsets as Spark checkpoints them: ``{topic: {broker name: {queue id: offset}}}``.

Spark stores a streaming source's offsets as JSON text and compares the text: the same offsets
with keys in another order count as new data. These dicts are therefore always built in one
order (topics, then brokers, sorted; queue ids in numeric order), and each offset is the next
one to read.

>>> from pyrmq.client.message import MessageQueue
>>> table = {MessageQueue("T", "b", 10): 5, MessageQueue("T", "b", 2): 7}
>>> to_json(table)
{'T': {'b': {'2': 7, '10': 5}}}
>>> from_json(to_json(table)) == table
True
"""

from collections.abc import Mapping
from typing import Any

from pyrmq.client.message import MessageQueue
from pyrmq.errors import ConfigError

__all__ = ["Offsets", "from_json", "to_json"]

Offsets = dict[MessageQueue, int]

EARLIEST = -2
LATEST = -1
MAX_VALUE = 2**63 - 1
"""The largest offset or time (ms) the brokers take: a Java long."""


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, Any]:
    """The canonical nested dict of ``offsets``."""
    out: dict[str, Any] = {}
    for mq in sorted(offsets, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        out.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = offsets[mq]
    return out


def from_json(value: Any, *, allow: frozenset[int] = frozenset()) -> Offsets:
    """Reads the nested dict back; offsets must be non-negative, or one of ``allow`` (the
    ``EARLIEST``/``LATEST`` marks a user may give)."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"offsets must be a JSON object of topics, not {value!r}")
    out: Offsets = {}
    for topic, brokers in value.items():
        if not isinstance(brokers, Mapping):
            raise ConfigError(f"offsets of {topic!r} must be an object of broker names")
        for broker, queues in brokers.items():
            if not isinstance(queues, Mapping):
                raise ConfigError(f"offsets of {topic!r} on {broker!r} must map queue ids")
            for queue_id, offset in queues.items():
                bad = ConfigError(f"bad offset {offset!r} for queue {queue_id!r} of {topic!r}")
                if type(offset) is not int or not str(queue_id).isdigit():
                    raise bad
                if (offset < 0 and offset not in allow) or offset > MAX_VALUE:
                    raise bad
                out[MessageQueue(str(topic), str(broker), int(queue_id))] = offset
    return out
