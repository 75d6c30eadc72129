"""Codes and constants of RocketMQ's 4.x remoting protocol, with RocketMQ's names and values.

Values follow Apache RocketMQ's ``RequestCode``, ``ResponseCode`` (with
``RemotingSysResponseCode``), ``LanguageCode`` and ``SerializeType``.

>>> RequestCode.GET_ROUTEINFO_BY_TOPIC == 105
True
>>> ResponseCode(17).name
'TOPIC_NOT_EXIST'
>>> LanguageCode["CPP"].value
1
"""

import enum
from typing import Final

__all__ = [
    "MAX_FRAME_BYTES",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "SYSFLAG_COMPRESSED",
    "SYSFLAG_COMPRESSION_TYPE",
    "LanguageCode",
    "MQVersion",
    "PullSysFlag",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
]

MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""Largest frame, length field included: Java's ``com.rocketmq.remoting.frameMaxLength``."""

RESPONSE_FLAG: Final = 1
"""``flag`` bit 0: the command is a response (Java's RPC_TYPE bit)."""

ONEWAY_FLAG: Final = 2
"""``flag`` bit 1: the request is oneway and gets no response (Java's RPC_ONEWAY bit)."""


class SerializeType(enum.IntEnum):
    """How a header is encoded: the high byte of the frame's header-length word."""

    JSON = 0
    """A JSON object; the only type the C++ client reads."""
    ROCKETMQ = 1
    """RocketMQ's binary layout (``rocketmq.serialize.type=ROCKETMQ``)."""


class LanguageCode(enum.IntEnum):
    """A sender's language: the byte in binary headers, the name in JSON headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class MQVersion(enum.IntEnum):
    """Ordinals of Java's ``MQVersion`` that change what a server does or says."""

    V3_0_7_SNAPSHOT = 28
    """From here on, clients take RESET_CONSUMER_CLIENT_OFFSET from the broker."""
    V3_1_8_SNAPSHOT = 62
    """From here on, clients take CONSUME_MESSAGE_DIRECTLY from the broker."""
    V3_1_8 = 63
    """What the C++ client 1.2.3 (the ``rocketmq`` 0.4.4 wheel) sends."""
    V3_4_9 = 121
    """From here on, servers honour ``maxReconsumeTimes`` in send and send-back headers."""
    V4_9_4 = 401
    """From here on, the name server sends standard JSON routes (quoted ``brokerAddrs`` keys)."""
    V4_9_7 = 407
    """What pyrmq puts in the commands it sends, like a Java 4.9.7 broker."""


# Java's MQVersion lists 16 versions of 3.0.0, then each version from 3.0.1 on twice, as
# V<x>_<y>_<z>_SNAPSHOT and V<x>_<y>_<z>: patches 1-15 of 3.0, 0-9 of 3.1 and 3.2, 1-9 of 3.3
# to 3.9, and 0-9 of every minor version of 4 and 5.
_V3_0_0 = (
    "SNAPSHOT", "ALPHA1", "BETA1", "BETA2", "BETA3", "BETA4", "BETA5", "BETA6_SNAPSHOT", "BETA6",
    "BETA7_SNAPSHOT", "BETA7", "BETA8_SNAPSHOT", "BETA8", "BETA9_SNAPSHOT", "BETA9", "FINAL",
)  # fmt: skip
_RELEASES = (
    [(3, 0, p) for p in range(1, 16)]
    + [(3, minor, p) for minor in (1, 2) for p in range(10)]
    + [(3, minor, p) for minor in range(3, 10) for p in range(1, 10)]
    + [(major, minor, p) for major in (4, 5) for minor in range(10) for p in range(10)]
)


def version_desc(ordinal: int) -> str:
    """The name of Java's MQVersion ``ordinal`` (the ``version`` of a command), as
    ``MQVersion.getVersionDesc`` gives it: the last one for an ordinal past the end.

    >>> version_desc(63), version_desc(407), version_desc(0), version_desc(10**6)
    ('V3_1_8', 'V4_9_7', 'V3_0_0_SNAPSHOT', 'V5_9_9')
    """
    if ordinal < len(_V3_0_0):
        return f"V3_0_0_{_V3_0_0[max(ordinal, 0)]}"
    index = min(ordinal - len(_V3_0_0), 2 * len(_RELEASES) - 1)
    major, minor, patch = _RELEASES[index // 2]
    return f"V{major}_{minor}_{patch}" + ("" if index % 2 else "_SNAPSHOT")


class RequestCode(enum.IntEnum):
    """Request codes: what a request asks for (Java's ``RequestCode``)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_BROKER_OFFSET = 13
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_TOPIC_CONFIG_LIST = 22
    GET_TOPIC_NAME_LIST = 23
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    TRIGGER_DELETE_FILES = 27
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    UPDATE_AND_CREATE_ACL_CONFIG = 50
    DELETE_ACL_CONFIG = 51
    GET_BROKER_CLUSTER_ACL_INFO = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG = 53
    GET_BROKER_CLUSTER_ACL_CONFIG = 54
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS = 223
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    QUERY_CONSUME_TIME_SPAN = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    CLEAN_EXPIRED_CONSUMEQUEUE = 306
    GET_CONSUMER_RUNNING_INFO = 307
    QUERY_CORRECTION_OFFSET = 308
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    CLONE_GROUP_OFFSET = 314
    VIEW_BROKER_STATS_DATA = 315
    CLEAN_UNUSED_TOPIC = 316
    GET_BROKER_CONSUME_STATS = 317
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    QUERY_DATA_VERSION = 322
    RESUME_CHECK_HALF_MESSAGE = 323
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    ADD_WRITE_PERM_OF_BROKER = 327
    DELETE_EXPIRED_COMMITLOG = 329
    RECALL_MESSAGE = 370
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    BATCH_ACK_MESSAGE = 200151


SYSFLAG_COMPRESSED: Final = 0x1
"""Bit of a message's ``sysFlag`` (sends, stored messages, pushed replies): its body is
compressed (Java's ``MessageSysFlag.COMPRESSED_FLAG``), as :data:`SYSFLAG_COMPRESSION_TYPE`
says."""

SYSFLAG_COMPRESSION_TYPE: Final = 0x7 << 8
"""Bits of a compressed message's ``sysFlag`` naming its compression (RocketMQ 4.9.4 on): 1
LZ4, 2 Zstandard, 3 zlib, and 0 zlib too, as older producers leave them."""


class PullSysFlag(enum.IntFlag):
    """Bits of a PULL_MESSAGE request's ``sysFlag``."""

    COMMIT_OFFSET = 0x1
    """``commitOffset`` carries the consumer's offset to store."""
    SUSPEND = 0x2
    """The broker may hold the request until a message arrives (long polling)."""
    SUBSCRIPTION = 0x4
    """``subscription`` carries the filter expression."""
    CLASS_FILTER = 0x8


class ResponseCode(enum.IntEnum):
    """Response codes: how a request ended (Java's ``ResponseCode``)."""

    SUCCESS = 0
    """The request succeeded."""
    SYSTEM_ERROR = 1
    """Generic failure; the remark says what went wrong."""
    SYSTEM_BUSY = 2
    """The server is overloaded (flow control); try again later."""
    REQUEST_CODE_NOT_SUPPORTED = 3
    """Unknown request code; remark ``" request type N not supported"``."""
    TRANSACTION_FAILED = 4
    """A transaction operation failed."""
    FLUSH_DISK_TIMEOUT = 10
    """Send: stored, but the synchronous flush did not finish in time."""
    SLAVE_NOT_AVAILABLE = 11
    """Send: stored, but no slave is available for synchronous replication."""
    FLUSH_SLAVE_TIMEOUT = 12
    """Send: stored, but replication to the slave did not finish in time."""
    MESSAGE_ILLEGAL = 13
    """Send: the message (topic, size, properties or batch) was refused."""
    SERVICE_NOT_AVAILABLE = 14
    """The broker cannot serve the request now (shutting down, slave, disk full)."""
    VERSION_NOT_SUPPORTED = 15
    """The client's version is not supported."""
    NO_PERMISSION = 16
    """The topic or broker lacks the read or write permission the request needs."""
    TOPIC_NOT_EXIST = 17
    """The topic has no route or config; producers fall back to TBW102."""
    TOPIC_EXIST_ALREADY = 18
    """The topic to create exists already."""
    PULL_NOT_FOUND = 19
    """Pull: no new message at the offset (NO_NEW_MSG)."""
    PULL_RETRY_IMMEDIATELY = 20
    """Pull: messages were examined but none matched the filter (NO_MATCHED_MSG)."""
    PULL_OFFSET_MOVED = 21
    """Pull: the offset is out of range; the client moves to ``nextBeginOffset``."""
    QUERY_NOT_FOUND = 22
    """Query: nothing found, e.g. no stored consumer offset."""
    SUBSCRIPTION_PARSE_FAILED = 23
    """Pull: the subscription expression does not parse."""
    SUBSCRIPTION_NOT_EXIST = 24
    """Pull: the broker has no subscription of the group to the topic."""
    SUBSCRIPTION_NOT_LATEST = 25
    """Pull: the subscription version is older than the broker's."""
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    """The consumer group does not exist and is not auto-created."""
    FILTER_DATA_NOT_EXIST = 27
    """Pull: the filter data of the subscription is missing (Java clients only)."""
    FILTER_DATA_NOT_LATEST = 28
    """Pull: the filter data is older than the broker's (Java clients only)."""
    INVALID_PARAMETER = 29
    """A field of the request is out of range (a 5.x code)."""
    TRANSACTION_SHOULD_COMMIT = 200
    """Transaction check: commit the half message."""
    TRANSACTION_SHOULD_ROLLBACK = 201
    """Transaction check: roll the half message back."""
    TRANSACTION_STATE_UNKNOW = 202
    """Transaction check: the state is not known yet (RocketMQ's spelling)."""
    TRANSACTION_STATE_GROUP_WRONG = 203
    """Transaction check: the producer group does not match."""
    NO_BUYER_ID = 204
    """A buyer id is missing (an Alibaba extension)."""
    NOT_IN_CURRENT_UNIT = 205
    """The request targets another unit (unit mode)."""
    CONSUMER_NOT_ONLINE = 206
    """The consumer the request targets is not connected."""
    CONSUME_MSG_TIMEOUT = 207
    """Direct consumption did not finish in time."""
    NO_MESSAGE = 208
    """No message matches the request."""
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED = 209
    """ACL: creating or updating an account failed."""
    POLLING_FULL = 209
    """Pop: too many pops wait on the broker already (5.x reuses the 4.x ACL code)."""
    DELETE_ACL_CONFIG_FAILED = 210
    """ACL: deleting an account failed."""
    POLLING_TIMEOUT = 210
    """Pop: nothing to deliver before the pop's poll time ran out (a reused 4.x code)."""
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED = 211
    """ACL: updating the global white list failed."""
    FLOW_CONTROL = 215
    """The request was refused by flow control (a 5.x code)."""
    ILLEGAL_OPERATION = 604
    """The request asks for what cannot be done, such as recalling with a bad handle."""
