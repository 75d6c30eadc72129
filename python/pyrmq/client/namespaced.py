"""A client's namespace at the edge of its API (RocketMQ's ``ClientConfig.namespace``).

Producers and consumers keep every topic, group and queue as the brokers know it,
``namespace%name``, and convert only what crosses their API: names and queues a caller passes
in are put in the namespace, queues handed back are shown without it, as RocketMQ's Java
client does. Received messages are shown without it by :func:`pyrmq._core.decode_received`.

A cluster's reply topic, ``{cluster}_REPLY_TOPIC``, is never put in a namespace.

>>> topic_in("ns", "Orders"), topic_in("ns", "DefaultCluster_REPLY_TOPIC")
('ns%Orders', 'DefaultCluster_REPLY_TOPIC')
"""

from pyrmq import namespace as _namespace
from pyrmq.client.message import MessageQueue
from pyrmq.properties import REPLY_TOPIC_SUFFIX

__all__ = ["name_in", "queue_in", "queue_shown", "topic_in"]


def name_in(namespace: str, name: str) -> str:
    """``name`` (a topic or group) as the brokers know it."""
    return _namespace.wrap(namespace, name) if namespace else name


def topic_in(namespace: str, topic: str) -> str:
    """``topic`` as the brokers know it. A reply topic stays as it is: the broker names it
    for its cluster, and the requester's replies go there whatever its namespace."""
    if topic.endswith(REPLY_TOPIC_SUFFIX):
        return topic
    return name_in(namespace, topic)


def queue_in(namespace: str, mq: MessageQueue) -> MessageQueue:
    """``mq`` as the brokers know it."""
    topic = topic_in(namespace, mq.topic)
    return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)


def queue_shown(namespace: str, mq: MessageQueue) -> MessageQueue:
    """``mq`` as the caller named it, without ``namespace``."""
    if not namespace:
        return mq
    found, topic = _namespace.split(mq.topic)
    if found != namespace:
        return mq
    return MessageQueue(topic, mq.broker_name, mq.queue_id)
