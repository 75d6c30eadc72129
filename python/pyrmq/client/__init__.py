"""pyrmq's RocketMQ client.

The blocking classes keep the names and signatures of the official ``rocketmq`` package's
``rocketmq.client`` module (see :mod:`pyrmq.client.blocking`), so code written for it runs by
changing its import; the official exception names are in :mod:`pyrmq.client.exceptions`:

>>> from pyrmq.client import ConsumeStatus, Message, Producer, PushConsumer
>>> msg = Message("TopicTest")
>>> msg.set_tags("TagA")
>>> msg.set_body("hello")
>>> (msg.topic, msg.tags, msg.body, ConsumeStatus.CONSUME_SUCCESS == 0)
('TopicTest', 'TagA', b'hello', True)

The asyncio API lives in :mod:`pyrmq.client.aio` (also here as ``AsyncProducer``,
``AsyncPushConsumer``, ``AsyncTransactionProducer`` and ``LitePullConsumer``).
"""

from pyrmq.client.aio import LitePullConsumer
from pyrmq.client.aio import Producer as AsyncProducer
from pyrmq.client.aio import PushConsumer as AsyncPushConsumer
from pyrmq.client.aio import TransactionProducer as AsyncTransactionProducer
from pyrmq.client.blocking import (
    MessageModel,
    MessageProperty,
    Producer,
    PullConsumer,
    PushConsumer,
    ReceivedMessage,
    RecvMessage,
    TransactionMQProducer,
    TransactionStatus,
    hashing_queue_selector,
)
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.exceptions import (
    NullPointerException,
    ProducerSendAsyncFailed,
    PushConsumerStartFailed,
)
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus

__all__ = [
    "AsyncProducer",
    "AsyncPushConsumer",
    "AsyncTransactionProducer",
    "ConsumeContext",
    "ConsumeStatus",
    "LitePullConsumer",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageProperty",
    "MessageQueue",
    "NullPointerException",
    "Producer",
    "ProducerSendAsyncFailed",
    "PullConsumer",
    "PushConsumer",
    "PushConsumerStartFailed",
    "ReceivedMessage",
    "RecvMessage",
    "SendResult",
    "SendStatus",
    "TransactionMQProducer",
    "TransactionStatus",
    "hashing_queue_selector",
]
