"""RocketMQ's namespaces: ``namespace%name`` for topics and groups, kept through the retry and
dead-letter prefixes (``%RETRY%ns%group``), never applied to system resources.

Clients configured with a namespace name their topics and groups with it (4.x clients fold it
into the names they send; 5.x clients send it beside each name, and the broker folds it in).

>>> wrap("ns", "TopicA"), wrap("ns", "%RETRY%GID_A"), wrap("ns", "ns%TopicA")
('ns%TopicA', '%RETRY%ns%GID_A', 'ns%TopicA')
>>> split("%DLQ%ns%GID_A"), split("TopicA")
(('ns', '%DLQ%GID_A'), ('', 'TopicA'))
>>> wrap("ns", "RMQ_SYS_TRACE_TOPIC"), wrap("ns", "TBW102"), wrap("ns", "CID_RMQ_SYS_X")
('RMQ_SYS_TRACE_TOPIC', 'TBW102', 'CID_RMQ_SYS_X')
"""

from pyrmq import _core
from pyrmq.errors import MessageIllegalError, SystemTopicError

__all__ = ["SEPARATOR", "SYSTEM_TOPICS", "SYSTEM_TOPIC_PREFIX", "is_system_topic", "split", "wrap"]

SEPARATOR = "%"
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
"""RocketMQ 4.9's system topics (``TopicValidator``): in no namespace, and named by
GET_SYSTEM_TOPIC_LIST_FROM_BROKER whether a broker has created them or not."""
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
_SYSTEM_TOPICS_5 = SYSTEM_TOPICS | {"CHECKPOINT_TOPIC"}


def is_system_topic(topic: str) -> bool:
    """RocketMQ 5's ``TopicValidator.isSystemTopic``: one of :data:`SYSTEM_TOPICS`, its
    ``CHECKPOINT_TOPIC``, or a name starting with ``rmq_sys_``.

    >>> is_system_topic("RMQ_SYS_TRACE_TOPIC"), is_system_topic("rmq_sys_x"), is_system_topic("T")
    (True, True, False)
    """
    return topic in _SYSTEM_TOPICS_5 or topic.startswith(SYSTEM_TOPIC_PREFIX)


_PREFIXES = ("%RETRY%", "%DLQ%")
_SYSTEM_PREFIXES = (SYSTEM_TOPIC_PREFIX, "CID_RMQ_SYS_")


def _system(resource: str) -> bool:
    if resource in SYSTEM_TOPICS or resource.startswith(_SYSTEM_PREFIXES):
        return True
    try:
        _core.validate_topic(resource)
    except SystemTopicError:
        return True
    except MessageIllegalError:
        pass
    return False


def _prefix(resource: str) -> tuple[str, str]:
    for prefix in _PREFIXES:
        if resource.startswith(prefix):
            return prefix, resource[len(prefix) :]
    return "", resource


def wrap(namespace: str, resource: str) -> str:
    """``resource`` in ``namespace``: unchanged when either is empty, the resource is a system
    one, or it already names the namespace."""
    if not namespace or not resource or _system(resource):
        return resource
    prefix, bare = _prefix(resource)
    if bare.startswith(namespace + SEPARATOR):
        return resource
    return f"{prefix}{namespace}{SEPARATOR}{bare}"


def split(resource: str) -> tuple[str, str]:
    """(namespace, the resource without it); ``("", resource)`` for one in no namespace."""
    if not resource or _system(resource):
        return "", resource
    prefix, bare = _prefix(resource)
    namespace, sep, name = bare.partition(SEPARATOR)
    if not sep or not namespace:
        return "", resource
    return namespace, prefix + name
