"""The asyncio API: :class:`Producer`, :class:`PushConsumer` and :class:`LitePullConsumer`.

Each runs in the event loop that starts it; ``async with`` starts and shuts it down.

>>> from pyrmq.client.aio import Message, MessageQueue, select_by_hash
>>> msg = Message("TopicTest", b"hello", tags="TagA", keys=["order-1"])
>>> (msg.topic, msg.tags, msg.keys, msg.body)
('TopicTest', 'TagA', 'order-1', b'hello')
>>> queues = [MessageQueue("TopicTest", "broker-a", i) for i in range(4)]
>>> select_by_hash(queues, msg, 6).queue_id  # the queue an ordered send with arg 6 uses
2

Sending, and consuming with ``async for`` (a topic subscribed without a listener; a message
counts as consumed when the loop asks for the next one):

>>> async def main(namesrv: str) -> None:  # doctest: +SKIP
...     async with Producer("PG", namesrv) as producer:
...         result = await producer.send(Message("TopicTest", b"hello", tags="TagA"))
...         print(result.status.name, result.msg_id, result.message_queue, result.queue_offset)
...     consumer = PushConsumer("CG", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
...     consumer.subscribe("TopicTest", "TagA || TagB")
...     async with consumer:
...         async for msg in consumer:
...             print(msg.id, msg.tags, msg.body)

Or with a listener, run on a thread pool (or in the loop, for a coroutine function):

>>> def on_messages(msgs, context):  # doctest: +SKIP
...     for msg in msgs:
...         print(msg.body)
...     return ConsumeStatus.CONSUME_SUCCESS
>>> consumer.subscribe("TopicTest", "*", on_messages)  # doctest: +SKIP

An orderly consumer gets each queue's messages in order, one batch at a time, and holds the
queue alone in its group; a failed batch pauses its queue and comes again first:

>>> def on_ordered(msgs, context):  # doctest: +SKIP
...     for msg in msgs:
...         print(msg.queue_id, msg.queue_offset, msg.reconsume_times, msg.body)
...     return ConsumeOrderlyStatus.SUCCESS  # or SUSPEND_CURRENT_QUEUE_A_MOMENT
>>> ordered = PushConsumer("OG", namesrv, orderly=True)  # doctest: +SKIP
>>> ordered.subscribe("OrderTopic", "*", on_ordered)  # doctest: +SKIP

The lite pull consumer polls exact queues from exact positions:

>>> async with LitePullConsumer("LG", namesrv, auto_commit=False) as lite:  # doctest: +SKIP
...     lite.assign(await lite.fetch_message_queues("TopicTest"))
...     for msg in await lite.poll(timeout_s=1.0):
...         print(msg.queue_id, msg.queue_offset, msg.body)
...     await lite.commit()

A transactional message is held back until the local transaction it goes with commits; a
``checker`` settles those whose outcome the broker did not hear:

>>> async def transfer(namesrv: str) -> None:  # doctest: +SKIP
...     def save(msg, arg):
...         return TransactionState.COMMIT if ledger.record(arg) else TransactionState.ROLLBACK
...     checker = lambda half: ledger.state_of(half.keys)
...     async with TransactionProducer("PG_TX", namesrv, checker=checker) as producer:
...         result = await producer.send_in_transaction(Message("Transfers", b"..."), save, 42)
...         print(result.state.name)

Request-reply (RocketMQ 4.6+'s RPC messages): ``request`` sends a message and waits for the
reply a consumer of it sends back with any producer:

>>> async def replier(msgs, context):  # doctest: +SKIP
...     for msg in msgs:
...         if get_reply_to_client(msg) is not None:  # a request, not a plain message
...             await producer.send(create_reply_message(msg, b"pong"))
>>> reply = await requester.request(Message("Pings", b"ping"), timeout_s=3)  # doctest: +SKIP
>>> reply.body  # doctest: +SKIP
b'pong'
"""

from pyrmq.client.allocate import (
    AllocateConsistentHash,
    allocate_averagely,
    allocate_averagely_by_circle,
)
from pyrmq.client.consume_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.instance import ClientConfig
from pyrmq.client.lite_pull import LitePullConsumer
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer, select_by_hash
from pyrmq.client.push_consumer import PushConsumer
from pyrmq.client.request import ReplyMessage, create_reply_message, get_reply_to_client
from pyrmq.client.subscription import MessageSelector
from pyrmq.client.transaction import (
    HalfMessage,
    TransactionProducer,
    TransactionSendResult,
    TransactionState,
)

__all__ = [
    "AllocateConsistentHash",
    "ClientConfig",
    "ConsumeContext",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumeStatus",
    "HalfMessage",
    "LitePullConsumer",
    "Message",
    "MessageExt",
    "MessageQueue",
    "MessageSelector",
    "Producer",
    "PushConsumer",
    "ReplyMessage",
    "SendResult",
    "SendStatus",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
    "allocate_averagely",
    "allocate_averagely_by_circle",
    "create_reply_message",
    "get_reply_to_client",
    "select_by_hash",
]
