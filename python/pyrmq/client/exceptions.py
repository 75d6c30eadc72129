"""The official ``rocketmq`` package's exception names (``rocketmq.exceptions``), for code
written against it: ``from rocketmq.exceptions import X`` becomes
``from pyrmq.client.exceptions import X``.

The blocking API (:mod:`pyrmq.client.blocking`) raises these where the official client raises
them: a failed ``send_sync`` raises :class:`ProducerSendSyncFailed`, a consumer that cannot
start raises :class:`PushConsumerStartFailed`, and so on. Each derives from
:class:`~pyrmq.errors.ClientError`, so ``except PyrmqError`` still catches it, and its
``__cause__`` is the pyrmq error that says what happened (a
:class:`~pyrmq.errors.SendError`, :class:`~pyrmq.errors.BrokerError`,
:class:`~pyrmq.errors.MessageTooLargeError`, ...).

>>> from pyrmq.errors import PyrmqError, SendError
>>> try:
...     raise ProducerSendSyncFailed("no broker took the message") from SendError("timeout")
... except RocketMQException as e:
...     (isinstance(e, PyrmqError), type(e.__cause__).__name__)
(True, 'SendError')
"""

from pyrmq.errors import ClientError

__all__ = [
    "ConsumerException",
    "MallocFailed",
    "NullPointerException",
    "ProducerException",
    "ProducerSendAsyncFailed",
    "ProducerSendOnewayFailed",
    "ProducerSendOrderlyFailed",
    "ProducerSendSyncFailed",
    "ProducerStartFailed",
    "PullConsumerFetchMQFailed",
    "PullConsumerFetchMessageFailed",
    "PullConsumerStartFailed",
    "PushConsumerStartFailed",
    "RocketMQException",
]


class RocketMQException(ClientError):
    """Base of the official client's exceptions."""


class NullPointerException(RocketMQException):
    """Never raised by pyrmq (the official client raises it when the C++ library fails to
    create an object); kept so that code catching it imports."""


class MallocFailed(RocketMQException):
    """Never raised by pyrmq; kept so that code catching it imports."""


class ProducerException(RocketMQException):
    """A producer failed."""


class ProducerStartFailed(ProducerException):
    """``Producer.start`` failed."""


class ProducerSendSyncFailed(ProducerException):
    """``send_sync`` or ``send_batch`` failed: invalid message, no route, or no broker took
    it."""


class ProducerSendOnewayFailed(ProducerException):
    """``send_oneway`` or ``send_oneway_orderly`` could not write the request."""


class ProducerSendOrderlyFailed(ProducerException):
    """``send_orderly`` failed on the selected queue after every retry."""


class ProducerSendAsyncFailed(ProducerException):
    """Passed to ``send_async``'s exception callback.

    Attributes:
        error: The broker's response code, or -1 when the failure was not a broker's answer.
        file: Always ``""`` (the official client names the C++ source file).
        line: Always 0.
        type: The name of the pyrmq error class (also the ``__cause__``).
    """

    def __init__(self, msg: str, error: int, file: str, line: int, type: str) -> None:
        super().__init__(msg)
        self.error = error
        self.file = file
        self.line = line
        self.type = type


class ConsumerException(RocketMQException):
    """A consumer failed."""


class PushConsumerStartFailed(ConsumerException):
    """``PushConsumer.start`` failed (for example, no subscription)."""


class PullConsumerStartFailed(ConsumerException):
    """``PullConsumer.start`` failed."""


class PullConsumerFetchMessageFailed(ConsumerException):
    """``PullConsumer.pull`` failed."""


class PullConsumerFetchMQFailed(PullConsumerFetchMessageFailed):
    """``PullConsumer.pull`` could not find the topic's queues.

    The official client registers both classes for the same status code, so the class it
    actually raises there is :class:`PullConsumerFetchMessageFailed`; deriving from it keeps
    ``except`` clauses written for either name working.
    """
