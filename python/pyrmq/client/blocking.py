"""The blocking API, with the names and signatures of the official ``rocketmq`` package's
``rocketmq.client`` module (0.4.4, and the additions of rocketmq-client-python 2.x): code
written for it runs with ``from pyrmq.client import ...``.

The work happens on the event loop of :mod:`pyrmq.client.runtime`. Push consumer callbacks run
on each consumer's thread pool and ``send_async`` callbacks on a thread of their producer, so
both may call blocking methods. Timeouts are in milliseconds, as in the official client.

What matches the official client, beyond names and signatures:

* A :class:`RecvMessage` has the official types: ``topic`` and ``id`` are str; ``tags``,
  ``keys``, ``body`` and property values are bytes, ``b""`` when unset.
* Failures raise the official exception classes of :mod:`pyrmq.client.exceptions`
  (``ProducerSendSyncFailed``, ...), with the pyrmq error as ``__cause__``.
* A push callback's message is consumed unless the callback raises or returns
  ``ConsumeStatus.RECONSUME_LATER``; the message then comes back through the group's retry
  topic with ``reconsume_times`` one higher. Anything else it returns counts as success, as
  0.4.4 ignores it (``True`` too, although it equals ``RECONSUME_LATER``'s 1).
* Each send of a :class:`Message` sends a copy: sent twice, it is two messages with ids of
  their own, and the object keeps no id.
* A queue selector gets the message as a :class:`SentMessage` and, for an int ``arg``, the
  address of a C int holding it, as the official client hands them over (its selectors read
  ``ctypes.cast(arg, POINTER(c_int))[0]``). The default, :func:`hashing_queue_selector`,
  is given ``arg`` itself.

>>> from pyrmq.client import Message, Producer
>>> producer = Producer("PG", timeout=5000)
>>> producer.set_namesrv_addr("127.0.0.1:9876")
>>> msg = Message("TopicTest")
>>> msg.set_keys("order-1")
>>> msg.set_tags("TagA")
>>> msg.set_body("hello")
>>> producer.start()  # doctest: +SKIP
>>> ret = producer.send_sync(msg)  # doctest: +SKIP
>>> print(ret.status, ret.msg_id, ret.offset)  # doctest: +SKIP
0 C0A8010A2F1E... 0
>>> producer.shutdown()  # doctest: +SKIP
"""

import concurrent.futures
import ctypes
import enum
import logging
import ssl
import threading
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, ClassVar, Final, NoReturn, Self, TypeVar

from pyrmq import _core
from pyrmq.acl.signing import Credentials
from pyrmq.client import exceptions, runtime
from pyrmq.client.api import PullResult, PullStatus
from pyrmq.client.consume_service import ConsumeContext, ConsumeStatus
from pyrmq.client.exceptions import RocketMQException
from pyrmq.client.instance import ClientConfig, ClientInstance
from pyrmq.client.message import Message, MessageExt, MessageQueue, SendResult, SendStatus
from pyrmq.client.producer import Producer as AsyncProducer
from pyrmq.client.producer import select_by_hash
from pyrmq.client.push_consumer import PushConsumer as AsyncPushConsumer
from pyrmq.client.route import TopicRoute
from pyrmq.client.subscription import consumer_data
from pyrmq.client.transaction import TransactionProducer as AsyncTransactionProducer
from pyrmq.client.transaction import TransactionState
from pyrmq.errors import BrokerError, ClientError, MessageIllegalError, PyrmqError, SendError
from pyrmq.properties import UNIQ_KEY
from pyrmq.remoting.headers import PullMessageRequestHeader

__all__ = [
    "ConsumeStatus",
    "Message",
    "MessageModel",
    "MessageProperty",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "ReceivedMessage",
    "RecvMessage",
    "SendResult",
    "SendStatus",
    "SentMessage",
    "TransactionMQProducer",
    "TransactionStatus",
    "hashing_queue_selector",
]

log = logging.getLogger(__name__)


class _CallbackThread(threading.local):
    pool: concurrent.futures.ThreadPoolExecutor | None = None
    """The producer callback pool whose callback this thread runs, if any."""


_callback_thread = _CallbackThread()

T = TypeVar("T")

DEFAULT_NAMESRV: Final = "127.0.0.1:9876"
DEFAULT_SEND_TIMEOUT_MS: Final = 3000
DEFAULT_COMPRESS_LEVEL: Final = 5
DEFAULT_MAX_MESSAGE_SIZE: Final = 128 * 1024
"""The official client's default (its C++ library's ``maxMessageSize``)."""
DEFAULT_RETRY_TIMES: Final = 2
NAMESRV_DOMAIN_TIMEOUT_S: Final = 5.0


class MessageModel(enum.IntEnum):
    """How a push consumer group shares messages (the official values)."""

    BROADCASTING = 0
    """Every consumer of the group gets every message."""
    CLUSTERING = 1
    """The group's consumers share the queues; each message goes to one of them."""


TransactionStatus = TransactionState
"""rocketmq-client-python 2.x's transaction states: COMMIT, ROLLBACK, UNKNOWN."""


class MessageProperty(enum.Enum):
    """Names of RocketMQ's system properties (the official ``rocketmq.consts``), accepted by
    :meth:`RecvMessage.get_property`."""

    TRACE_SWITCH = "TRACE_ON"
    MSG_REGION = "MSG_REGION"
    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT_STORE_MSG_OK = "WAIT"
    DELAY_TIME_LEVEL = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QUEUE_ID = "REAL_QID"
    TRANSACTION_PREPARED = "TRAN_MSG"
    PRODUCER_GROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    BUYER_ID = "BUYER_ID"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    TRANSFER_FLAG = "TRANSFER_FLAG"
    CORRECTION_FLAG = "CORRECTION_FLAG"
    MQ2_FLAG = "MQ2_FLAG"
    RECONSUME_TIME = "RECONSUME_TIME"
    UNIQ_CLIENT_MESSAGE_ID_KEYIDX = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIMESTAMP = "CONSUME_START_TIME"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class _MessageView:
    """What the official client's message objects share: bytes for text, ``b""`` if unset."""

    __slots__ = ()
    message: Message | MessageExt

    @property
    def topic(self) -> str:
        """The topic it was sent to (for a redelivery, the original topic)."""
        return self.message.topic

    @property
    def tags(self) -> bytes:
        return (self.message.tags or "").encode()

    @property
    def body(self) -> bytes:
        return self.message.body

    def _property(self, name: str) -> str | None:
        raise NotImplementedError

    def get_property(self, prop: str | bytes | MessageProperty) -> bytes:
        """A property's value, ``b""`` when the message does not have it."""
        if isinstance(prop, MessageProperty):
            prop = prop.value
        return (self._property(_text(prop)) or "").encode()

    def __getitem__(self, key: str | bytes | MessageProperty) -> bytes:
        return self.get_property(key)

    def __str__(self) -> str:
        return self.body.decode("utf-8")

    def __bytes__(self) -> bytes:
        return self.body


class RecvMessage(_MessageView):
    """A received message as the official client shows it.

    ``topic`` and ``id`` are str; ``tags``, ``keys``, ``body`` and :meth:`get_property`
    values are bytes (``b""`` when unset), as the official client reads them from C strings.
    Unlike it, bodies may contain NUL bytes. :attr:`message` is the full
    :class:`~pyrmq.client.message.MessageExt` (str tags, every property, the queue).

    >>> import tempfile
    >>> from pyrmq.config import StoreConfig
    >>> from pyrmq.store import MessageStore
    >>> config = StoreConfig(mapped_file_size_commit_log=1 << 20)
    >>> with tempfile.TemporaryDirectory() as root, MessageStore.open(root, config) as store:
    ...     _ = store.put("T", b"hi", tags="TagA", keys=["k1", "k2"], properties={"p": "v"})
    ...     msg = RecvMessage(MessageExt.from_stored(store.get("T", 0, 0).messages()[0], "b"))
    ...     print(msg.topic, msg.tags, msg.keys, msg.body, msg["p"], msg["missing"], str(msg))
    ...     print(msg.get_property(MessageProperty.TAGS), msg.queue_offset, msg.reconsume_times)
    T b'TagA' b'k1 k2' b'hi' b'v' b'' hi
    b'TagA' 0 0
    """

    __slots__ = ("message",)

    def __init__(self, message: MessageExt) -> None:
        self.message: MessageExt = message

    @property
    def keys(self) -> bytes:
        """The keys, separated by spaces."""
        return self.message.keys.encode()

    @property
    def id(self) -> str:
        """The producer's message id (``UNIQ_KEY``)."""
        return self.message.id

    @property
    def delay_time_level(self) -> int:
        return self.message.delay_time_level

    @property
    def queue_id(self) -> int:
        return self.message.queue_id

    @property
    def reconsume_times(self) -> int:
        """How often it was delivered before: 0 on the first delivery."""
        return self.message.reconsume_times

    @property
    def store_size(self) -> int:
        return self.message.store_size

    @property
    def born_timestamp(self) -> int:
        """Epoch ms when the producer created it."""
        return self.message.born_timestamp

    @property
    def store_timestamp(self) -> int:
        """Epoch ms when the broker stored it."""
        return self.message.store_timestamp

    @property
    def queue_offset(self) -> int:
        return self.message.queue_offset

    @property
    def commit_log_offset(self) -> int:
        return self.message.commit_log_offset

    @property
    def prepared_transaction_offset(self) -> int:
        return self.message.prepared_transaction_offset

    def _property(self, name: str) -> str | None:
        return self.message.get_property(name)

    def __repr__(self) -> str:
        return f"<RecvMessage topic={self.topic!r} id={self.id!r} body={self.body!r}>"


ReceivedMessage = RecvMessage
"""rocketmq-client-python 2.x's name for :class:`RecvMessage`."""

QueueSelector = Callable[[int, Any, Any], int]
"""``(number of queues, message, arg) -> queue index``: the official client's selector."""


def hashing_queue_selector(mq_size: int, msg: Any, arg: Any) -> int:
    """The official default selector: ``arg % mq_size`` for an int ``arg``, taken as the C
    int the official client passes it as (a larger one wraps to 32 bits). A str is hashed as
    Java's ``String.hashCode`` (as Java producers' SelectMessageQueueByHash does).

    >>> hashing_queue_selector(4, None, 6), hashing_queue_selector(4, None, "order-1")
    (2, 2)
    >>> hashing_queue_selector(6, None, 20231129001)  # wrapped to -1243707479
    1
    """
    if isinstance(arg, str):
        return abs(_core.java_string_hash(arg)) % mq_size
    return ctypes.c_int(int(arg)).value % mq_size


def fetch_namesrv_addr(domain: str, timeout_s: float = NAMESRV_DOMAIN_TIMEOUT_S) -> str:
    """Reads the name server list from an HTTP address server, as the official client's
    ``set_namesrv_domain`` does: the body of a GET on ``domain`` is ``host:port;host:port``.

    Raises:
        ClientError: The server could not be reached, or answered with an error or nothing.
    """
    url = domain if "://" in domain else f"http://{domain}"
    if not url.startswith(("http://", "https://")):
        raise ClientError(f"name server domain {domain} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            addr = response.read(64 * 1024).decode().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ClientError(f"cannot read the name server list from {url}: {e}") from e
    if not addr:
        raise ClientError(f"the address server {url} returned no name server")
    return str(addr)


def _raise_as(cls: type[RocketMQException], e: PyrmqError) -> NoReturn:
    if isinstance(e, RocketMQException):
        raise e
    raise cls(str(e)) from e


def _run(coro: Coroutine[Any, Any, T], cls: type[RocketMQException]) -> T:
    """Runs ``coro`` on the runtime loop; a pyrmq error comes out as ``cls``."""
    try:
        return runtime.run(coro)
    except PyrmqError as e:
        _raise_as(cls, e)


class _Client:
    """Settings shared by the producer and the consumers; they apply at ``start()``."""

    def __init__(self, group_id: str | bytes) -> None:
        self._group = _text(group_id)
        self._namesrv: str | None = None
        self._namesrv_domain: str | None = None
        self._instance_name: str | None = None
        self._credentials: Credentials | None = None
        self._tls: ssl.SSLContext | None = None

    @property
    def group(self) -> str:
        return self._group

    def set_namesrv_addr(self, addr: str | bytes) -> None:
        """Name servers as ``host:port``, several separated by ``;``."""
        self._namesrv = _text(addr)

    def set_name_server_address(self, addr: str | bytes) -> None:
        """rocketmq-client-python 2.x's name for :meth:`set_namesrv_addr`."""
        self.set_namesrv_addr(addr)

    def set_namesrv_domain(self, domain: str | bytes) -> None:
        """An HTTP address server: ``start()`` GETs this URL (``http://`` is added when
        missing) and uses the answer, ``host:port`` separated by ``;``, as the name servers.
        An address given to :meth:`set_namesrv_addr` wins over it."""
        self._namesrv_domain = _text(domain)

    def set_name_server_domain(self, domain: str | bytes) -> None:
        """rocketmq-client-python 2.x's name for :meth:`set_namesrv_domain`."""
        self.set_namesrv_domain(domain)

    def set_session_credentials(
        self, access_key: str | bytes, access_secret: str | bytes, channel: str | bytes
    ) -> None:
        """Signs every request with an ACL account's keys (brokers with ``aclEnable``); the
        channel, which names Aliyun's service, is not used."""
        self._credentials = Credentials(_text(access_key), _text(access_secret))

    def set_tls(self, context: ssl.SSLContext | None) -> None:
        """Connects to name servers and brokers over TLS with ``context``
        (:func:`pyrmq.remoting.tls.client_context` makes one); None: plain TCP. pyrmq's own:
        the official package has no TLS."""
        self._tls = context

    def set_instance_name(self, name: str | bytes) -> None:
        """Distinguishes client instances of one process (default: the process id)."""
        self._instance_name = _text(name)

    def set_message_trace(self, message_trace: bool) -> None:
        """Accepted and ignored: pyrmq does not write message traces."""
        if message_trace:
            log.warning("message trace requested for %s: not supported, ignored", self._group)

    def start(self) -> None:
        raise NotImplementedError

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    def _config(self) -> ClientConfig:
        """The client settings; fetches the name server list when only a domain is set.

        Raises:
            ClientError: The address server could not be read.
        """
        addr = self._namesrv
        if addr is None and self._namesrv_domain is not None:
            addr = fetch_namesrv_addr(self._namesrv_domain)
        return ClientConfig(
            namesrv_addr=addr or DEFAULT_NAMESRV,
            instance_name=self._instance_name,
            credentials=self._credentials,
            tls=self._tls,
        )


class Producer(_Client):
    """A blocking producer.

    Args:
        group_id: The producer group.
        timeout: Send timeout in ms (default 3000), retries included.
        compress_level: zlib level for bodies of 4 KiB or more (default 5).
        max_message_size: Largest body accepted, in bytes (default 128 KiB, as the official client).
        orderly: rocketmq-client-python 2.x's flag for a producer that sends with
            :meth:`send_orderly_with_sharding_key`; every pyrmq producer can, so it changes
            nothing. 2.x code passes it second (``Producer(gid, True)``), where 0.4.4 has
            ``timeout``: a bool there is taken as this flag.

    Use it as a context manager, or call :meth:`start` and :meth:`shutdown`.
    """

    def __init__(
        self,
        group_id: str | bytes,
        timeout: int | None = None,
        compress_level: int | None = None,
        max_message_size: int | None = None,
        *,
        orderly: bool = False,
    ) -> None:
        super().__init__(group_id)
        if isinstance(timeout, bool):
            orderly, timeout = timeout, None
        self.orderly = orderly
        self._timeout_ms = DEFAULT_SEND_TIMEOUT_MS if timeout is None else timeout
        self._compress_level = DEFAULT_COMPRESS_LEVEL if compress_level is None else compress_level
        self._max_message_size = (
            DEFAULT_MAX_MESSAGE_SIZE if max_message_size is None else max_message_size
        )
        self._retry_times = DEFAULT_RETRY_TIMES
        self._async: AsyncProducer | None = None
        self._callbacks: concurrent.futures.ThreadPoolExecutor | None = None

    # --- settings ------------------------------------------------------------------------

    def set_group(self, group_name: str | bytes) -> None:
        self._group = _text(group_name)

    def set_timeout(self, timeout: int) -> None:
        """Send timeout in ms."""
        self._timeout_ms = timeout
        if self._async is not None:
            self._async.send_timeout_s = timeout / 1000

    def set_compress_level(self, level: int) -> None:
        self._compress_level = level
        if self._async is not None:
            self._async.compress_level = level

    def set_max_message_size(self, max_size: int) -> None:
        self._max_message_size = max_size
        if self._async is not None:
            self._async.max_message_size = max_size

    def set_retry_times(self, times: int) -> None:
        """Further attempts, on another broker when there is one, after a failed send
        (default 2)."""
        self._retry_times = times
        if self._async is not None:
            self._async.retry_times_when_send_failed = times

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        if self._async is not None:
            return
        cls = exceptions.ProducerStartFailed
        try:
            config = self._config()
        except PyrmqError as e:
            _raise_as(cls, e)
        producer = self._new_producer(
            self._group,
            send_timeout_s=self._timeout_ms / 1000,
            retry_times_when_send_failed=self._retry_times,
            compress_level=self._compress_level,
            max_message_size=self._max_message_size,
            client_config=config,
        )
        _run(producer.start(), cls)
        self._callbacks = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"pyrmq-send-callback-{self._group}"
        )
        self._async = producer

    def _new_producer(self, group: str, **settings: Any) -> AsyncProducer:
        return AsyncProducer(group, **settings)

    def shutdown(self) -> None:
        """Waits for ``send_async`` sends (up to the send timeout) and their callbacks, then
        unregisters from the brokers."""
        producer, self._async = self._async, None
        callbacks, self._callbacks = self._callbacks, None
        try:
            if producer is not None:
                runtime.run(producer.shutdown())
        finally:
            if callbacks is not None:
                # From a callback, the callback thread runs the rest once it returns.
                callbacks.shutdown(wait=_callback_thread.pool is not callbacks)

    def _producer(self, cls: type[RocketMQException]) -> AsyncProducer:
        if self._async is None:
            raise cls(f"producer {self._group} is not started")
        return self._async

    # --- sending -------------------------------------------------------------------------

    def send_sync(self, msg: Message) -> SendResult:
        """Sends and waits for the broker's answer.

        Raises:
            ProducerSendSyncFailed: The message is invalid, the topic has no route, or no
                broker took it.
        """
        cls = exceptions.ProducerSendSyncFailed
        return _run(self._producer(cls).send(_own(msg)), cls)

    def send_async(
        self,
        msg: Message,
        success_callback: Callable[[SendResult], object] | None,
        exception_callback: Callable[[BaseException], object] | None,
    ) -> None:
        """Starts a send and returns; ``success_callback(result)`` or
        ``exception_callback(ProducerSendAsyncFailed)`` runs later on the producer's callback
        thread. :meth:`shutdown` waits for both.

        As the official client, what fails before the send starts raises
        :class:`RocketMQException` here: a message that fails the checks (the callbacks are
        not called), and a topic without a route (``exception_callback`` is called too).
        """
        cls = exceptions.ProducerSendAsyncFailed
        producer = self._producer(exceptions.ProducerSendSyncFailed)
        callbacks = self._callbacks
        assert callbacks is not None

        def run_callback(fn: Callable[[Any], object], arg: object) -> None:
            _callback_thread.pool = callbacks
            try:
                fn(arg)
            except Exception:
                log.exception("send_async callback failed topic=%s", msg.topic)
            finally:
                _callback_thread.pool = None

        def hand_over(fn: Callable[[Any], object], arg: object) -> None:
            try:
                callbacks.submit(run_callback, fn, arg)
            except RuntimeError:  # shut down meanwhile
                log.warning("send_async callback dropped at shutdown topic=%s", msg.topic)

        def on_success(result: SendResult) -> None:
            if success_callback is not None:
                hand_over(success_callback, result)

        def on_exception(e: BaseException) -> None:
            code = e.code if isinstance(e, BrokerError) else -1
            wrapped = cls(str(e), code, "", 0, type(e).__name__)
            wrapped.__cause__ = e
            if exception_callback is not None:
                hand_over(exception_callback, wrapped)
            else:
                log.warning("send_async to %s failed: %s", msg.topic, e)

        async def start_send() -> None:
            try:
                await producer.send_async_checked(_own(msg), on_success, on_exception)
            except MessageIllegalError:
                raise
            except PyrmqError as e:
                on_exception(e)
                raise

        _run(start_send(), exceptions.RocketMQException)

    def send_oneway(self, msg: Message) -> None:
        """Sends without waiting for an answer."""
        cls = exceptions.ProducerSendOnewayFailed
        _run(self._producer(cls).send_oneway(_own(msg)), cls)

    @staticmethod
    def _select(queue_selector: QueueSelector) -> Callable[..., MessageQueue]:
        """A selector as the official client calls it: with the message as a
        :class:`SentMessage` and, for an int ``arg``, the address of a C int holding it (its
        selectors read it with ``ctypes.cast(arg, POINTER(c_int))[0]``)."""

        def select(mqs: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
            if queue_selector is hashing_queue_selector or not isinstance(arg, int):
                index = queue_selector(len(mqs), SentMessage(msg), arg)
            else:
                cell = ctypes.c_int(arg)
                index = queue_selector(len(mqs), SentMessage(msg), ctypes.addressof(cell))
            return mqs[index % len(mqs)]

        return select

    def send_orderly(
        self,
        msg: Message,
        arg: Any,
        retry_times: int = 3,
        queue_selector: QueueSelector = hashing_queue_selector,
    ) -> SendResult:
        """Sends to the queue ``queue_selector(queue count, msg, arg)`` picks (by default
        ``arg % queue count``), so messages with one ``arg`` keep their order. A failed send
        is tried again on that same queue, up to ``retry_times`` attempts in all.

        Raises:
            ProducerSendOrderlyFailed: Every attempt failed, or the message is invalid.
        """
        cls = exceptions.ProducerSendOrderlyFailed
        producer = self._producer(cls)
        select = self._select(queue_selector)
        for attempt in range(max(1, retry_times)):
            try:
                return runtime.run(producer.send_orderly(_own(msg), arg, select))
            except SendError as e:
                if attempt + 1 >= retry_times:
                    _raise_as(cls, e)
                log.info("orderly send to %s failed, retrying: %s", msg.topic, e)
            except PyrmqError as e:
                _raise_as(cls, e)
        raise AssertionError("unreachable")

    def send_orderly_with_sharding_key(self, msg: Message, sharding_key: str) -> SendResult:
        """rocketmq-client-python 2.x: an ordered send to the queue at
        ``hash(sharding_key) % queue count`` (Java's ``String.hashCode``)."""
        cls = exceptions.ProducerSendOrderlyFailed
        sent = self._producer(cls).send_orderly
        return _run(sent(_own(msg), _text(sharding_key), select_by_hash), cls)

    def send_oneway_orderly(
        self, msg: Message, arg: Any, queue_selector: QueueSelector = hashing_queue_selector
    ) -> None:
        """An ordered send (see :meth:`send_orderly`) without waiting for an answer."""
        cls = exceptions.ProducerSendOnewayFailed
        producer = self._producer(cls)
        select = self._select(queue_selector)

        async def send() -> None:
            own = _own(msg)
            mqs = await producer.fetch_publish_queues(own.topic)
            await producer.send_oneway(own, queue=select(mqs, own, arg))

        _run(send(), cls)

    def send_batch(self, msgs: Sequence[Message]) -> SendResult:
        """Sends messages of one topic in one request; they are stored together in one
        queue. ``msg_id`` of the result is their ids joined by commas."""
        cls = exceptions.ProducerSendSyncFailed
        if not msgs:
            raise cls("a batch needs at least one message")
        return _run(self._producer(cls).send_batch([_own(m) for m in msgs]), cls)


def _own(msg: Message) -> Message:
    """The copy of ``msg`` a send takes: as the official client sends a copy, every send of one
    :class:`Message` is a message of its own, with an id of its own, and ``msg`` is left as it
    was (an id set on it stays)."""
    own = Message(msg.topic, msg.body, properties=msg.properties)
    own.flag = msg.flag
    return own


class SentMessage(_MessageView):
    """The message of a transaction as ``local_execute`` sees it, with the accessors of
    :class:`RecvMessage` that a message just sent has; ``id`` is its ``UNIQ_KEY``."""

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        self.message: Message = message

    @property
    def keys(self) -> bytes:
        return (self.message.keys or "").encode()

    @property
    def id(self) -> str:
        return self.message.properties.get(UNIQ_KEY, "")

    def _property(self, name: str) -> str | None:
        return self.message.properties.get(name)


class TransactionMQProducer(Producer):
    """rocketmq-client-python 2.x's transactional producer.

    :meth:`send_message_in_transaction` stores the message as a half message, runs
    ``local_execute(message, user_args)`` and commits or rolls the half back by what it
    returns (a :class:`TransactionStatus`). A half left UNKNOWN, or whose producer died before
    ending it, is checked later: the broker asks a producer of the group, whose
    ``checker_callback(msg)`` (a :class:`RecvMessage`) answers. Both callbacks run on a
    thread of their own, so they may block.

    >>> from pyrmq.client import Message, TransactionMQProducer, TransactionStatus
    >>> def checker(msg):
    ...     return TransactionStatus.COMMIT
    >>> producer = TransactionMQProducer("PG_TX", checker)
    >>> producer.set_name_server_address("127.0.0.1:9876")
    >>> producer.start()  # doctest: +SKIP
    >>> ret = producer.send_message_in_transaction(  # doctest: +SKIP
    ...     Message("TopicTest"), lambda msg, args: TransactionStatus.COMMIT)
    >>> producer.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        group_id: str | bytes,
        checker_callback: Callable[[RecvMessage], TransactionStatus],
        user_args: Any = None,
        timeout: int | None = None,
        compress_level: int | None = None,
        max_message_size: int | None = None,
    ) -> None:
        super().__init__(group_id, timeout, compress_level, max_message_size)
        self._checker_callback = checker_callback

    def _new_producer(self, group: str, **settings: Any) -> AsyncProducer:
        checker = self._checker_callback

        def check(half: MessageExt) -> TransactionState:
            return checker(RecvMessage(half))  # on the producer's check thread

        return AsyncTransactionProducer(group, checker=check, **settings)

    def send_message_in_transaction(
        self,
        message: Message,
        local_execute: Callable[[SentMessage, Any], TransactionStatus],
        user_args: Any = None,
    ) -> SendResult:
        """Sends ``message`` as a half, runs ``local_execute(message, user_args)`` on the
        calling thread (where the application's own transaction lives) and ends the half
        with its answer; returns the half's send result. If ``local_execute`` raises, the
        half is left for the checker and the exception propagates. A half the broker did not
        store as promised is rolled back without running ``local_execute``.

        Raises:
            ProducerSendSyncFailed: The message is invalid, or no broker took the half.
        """
        cls = exceptions.ProducerSendSyncFailed
        producer = self._producer(cls)
        assert isinstance(producer, AsyncTransactionProducer)
        message = _own(message)
        result, half = _run(producer.send_half(message), cls)
        if result.status is SendStatus.OK:
            state = TransactionState(local_execute(SentMessage(message), user_args))
        else:
            state = TransactionState.ROLLBACK
        try:
            runtime.run(producer.end(half, state))
        except PyrmqError as e:
            log.warning(
                "%s of %s not delivered (%s); the checker settles it", state.name, half.msg_id, e
            )
        return result


MessageCallback = Callable[[RecvMessage], object]
"""``callback(msg)``: return nothing or ``ConsumeStatus.CONSUME_SUCCESS``; raise or return
``ConsumeStatus.RECONSUME_LATER`` to have the message delivered again later."""

CONSUME_FROM: Final = frozenset(
    {"CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_TIMESTAMP"}
)


class PushConsumer(_Client):
    """A blocking push consumer: :meth:`subscribe` with a callback, then :meth:`start`.

    A new group starts at the end of each queue (``CONSUME_FROM_LAST_OFFSET``), so it gets the
    messages sent after it started; :meth:`set_consume_from_where` changes that. As in
    RocketMQ, a queue that still starts at offset 0 with its first message in the broker's
    memory is the exception: the broker has a new group start it at 0.

    >>> from pyrmq.client import ConsumeStatus, PushConsumer
    >>> def callback(msg):
    ...     print(msg.id, msg.body)
    ...     return ConsumeStatus.CONSUME_SUCCESS
    >>> consumer = PushConsumer("CID_XXX")
    >>> consumer.set_namesrv_addr("127.0.0.1:9876")
    >>> consumer.subscribe("TopicTest", callback, "TagA || TagB")
    >>> consumer.start()  # doctest: +SKIP
    >>> consumer.shutdown()  # doctest: +SKIP
    """

    def __init__(
        self,
        group_id: str | bytes,
        orderly: bool = False,
        message_model: MessageModel = MessageModel.CLUSTERING,
    ) -> None:
        super().__init__(group_id)
        self._orderly = orderly
        self._model = MessageModel(message_model)
        self._threads = 20
        self._batch_max = 1
        self._consume_from_where = "CONSUME_FROM_LAST_OFFSET"
        self._subs: dict[str, tuple[str, MessageCallback]] = {}
        self._async: AsyncPushConsumer | None = None

    def set_group(self, group_id: str | bytes) -> None:
        self._group = _text(group_id)

    def set_message_model(self, model: MessageModel) -> None:
        """``MessageModel.CLUSTERING`` (default) or ``MessageModel.BROADCASTING``."""
        self._model = MessageModel(model)

    def set_thread_count(self, thread_count: int) -> None:
        """Threads that run callbacks (default 20)."""
        self._threads = thread_count

    def set_message_batch_max_size(self, max_size: int) -> None:
        """Messages handed over together (default 1); the callback still gets one at a time,
        and a failure redelivers the whole batch, as in the official client."""
        self._batch_max = max_size

    def set_consume_from_where(self, where: str) -> None:
        """Where a new group starts: ``CONSUME_FROM_LAST_OFFSET`` (default),
        ``CONSUME_FROM_FIRST_OFFSET`` or ``CONSUME_FROM_TIMESTAMP`` (half an hour back)."""
        if where not in CONSUME_FROM:
            raise ValueError(f"unknown consume_from_where {where!r}")
        self._consume_from_where = where

    def subscribe(
        self, topic: str | bytes, callback: MessageCallback, expression: str = "*"
    ) -> None:
        """Delivers ``topic``'s messages whose tag matches ``expression`` (``*`` or
        ``TagA || TagB``) to ``callback``."""
        self._subs[_text(topic)] = (_text(expression), callback)

    def start(self) -> None:
        """Connects and starts consuming.

        Raises:
            PushConsumerStartFailed: No subscription, or the name server was unreachable.
        """
        if self._async is not None:
            return
        cls = exceptions.PushConsumerStartFailed
        try:
            config = self._config()
        except PyrmqError as e:
            _raise_as(cls, e)
        consumer = AsyncPushConsumer(
            self._group,
            message_model=self._model.name,  # type: ignore[arg-type]
            consume_from_where=self._consume_from_where,  # type: ignore[arg-type]
            consume_thread_max=self._threads,
            consume_message_batch_max_size=self._batch_max,
            orderly=self._orderly,
            client_config=config,
        )
        try:
            for topic, (expression, callback) in self._subs.items():
                consumer.subscribe(topic, expression, _per_message(callback))
        except PyrmqError as e:
            _raise_as(cls, e)
        # Set first: callbacks can run, and shut the consumer down, before start returns.
        self._async = consumer
        try:
            _run(consumer.start(), cls)
        except BaseException:
            self._async = None
            raise

    def shutdown(self) -> None:
        """Stops pulling, waits for running callbacks and commits the offsets. Called from
        a callback, it does not wait for that callback, whose message is delivered again."""
        consumer, self._async = self._async, None
        if consumer is not None:
            runtime.run(consumer.shutdown(waiting_thread=threading.get_ident()))


def _per_message(
    callback: MessageCallback,
) -> Callable[[list[MessageExt], ConsumeContext], ConsumeStatus]:
    def listener(msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        for m in msgs:
            # Only the status itself: 0.4.4 ignores what a callback returns, and a callback
            # returning True ("handled") must not have its message delivered again.
            if callback(RecvMessage(m)) is ConsumeStatus.RECONSUME_LATER:
                return ConsumeStatus.RECONSUME_LATER
        return ConsumeStatus.CONSUME_SUCCESS

    return listener


class _PullMember:
    """Registers a :class:`PullConsumer`'s group with its client instance: the instance
    stays up while the consumer does, and heartbeats name the group (CONSUME_ACTIVELY)."""

    def __init__(self, group: str) -> None:
        self.group = group

    def topics(self) -> list[str]:
        return []

    def on_route(self, topic: str, route: TopicRoute) -> None:
        pass

    def heartbeat_data(self) -> dict[str, Any]:
        return consumer_data(
            self.group, "CONSUME_ACTIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", ()
        )

    async def rebalance(self) -> None:
        pass

    async def persist_offsets(self) -> None:
        pass

    def running_info(self) -> dict[str, Any]:
        return {
            "properties": {"consumerGroup": self.group, "consumeType": "CONSUME_ACTIVELY"},
            "subscriptionSet": [],
            "mqTable": [],
        }

    async def reset_offsets(self, topic: str, offsets: dict[MessageQueue, int]) -> None:
        pass

    def offset_table(self, topic: str) -> dict[MessageQueue, int]:
        # Its offsets live in the PullConsumer (offset_table), not in the client instance.
        return {}


def _tag_filter(expression: str) -> frozenset[str] | None:
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or expression.strip() == "*" else tags


class PullConsumer(_Client):
    """The official client's simple pull consumer: :meth:`pull` yields every message of a
    topic from the offsets this object remembers (0 at first) until each queue is caught up.

    Offsets live in this process only (:attr:`offset_table`, shared by the group's pull
    consumers, as the official client's class-wide table is: one made again for each poll goes
    on where the last stopped); nothing is committed to the broker. A topic no name server
    knows yields nothing, as with the official client.

    >>> consumer = PullConsumer("CID_PULL")
    >>> consumer.set_namesrv_addr("127.0.0.1:9876")
    >>> consumer.start()  # doctest: +SKIP
    >>> for msg in consumer.pull("TopicTest"):  # doctest: +SKIP
    ...     print(msg.id, msg.body)
    >>> consumer.shutdown()  # doctest: +SKIP
    """

    _tables: ClassVar[dict[str, dict[str, int]]] = {}
    """Each group's offsets (see :attr:`offset_table`)."""

    def __init__(self, group_id: str | bytes) -> None:
        super().__init__(group_id)
        self._instance: ClientInstance | None = None
        self._member: _PullMember | None = None

    @property
    def offset_table(self) -> dict[str, int]:
        """The group's next offset per queue, keyed by ``topic@broker@queue id``."""
        return PullConsumer._tables.setdefault(self._group, {})

    def set_group(self, group_id: str | bytes) -> None:
        self._group = _text(group_id)

    def start(self) -> None:
        if self._instance is not None:
            return
        try:
            config = self._config()
        except PyrmqError as e:
            _raise_as(exceptions.PullConsumerStartFailed, e)
        member = _PullMember(self._group)

        async def start() -> ClientInstance:
            inst = ClientInstance.acquire(config, member.group, consumer=True)
            inst.consumers[member.group] = member
            inst.start()
            return inst

        self._instance = _run(start(), exceptions.PullConsumerStartFailed)
        self._member = member

    def shutdown(self) -> None:
        inst, self._instance = self._instance, None
        member, self._member = self._member, None
        if inst is None or member is None:
            return

        async def stop() -> None:
            if inst.consumers.get(member.group) is member:
                del inst.consumers[member.group]
            await inst.release()

        runtime.run(stop())

    @staticmethod
    def _mq_key(mq: MessageQueue) -> str:
        return f"{mq.topic}@{mq.broker_name}@{mq.queue_id}"

    def get_message_queue_offset(self, mq: MessageQueue) -> int:
        """Where the next :meth:`pull` reads ``mq`` from."""
        return self.offset_table.get(self._mq_key(mq), 0)

    def set_message_queue_offset(self, mq: MessageQueue, offset: int) -> None:
        self.offset_table[self._mq_key(mq)] = offset

    def fetch_message_queues(self, topic: str | bytes) -> list[MessageQueue]:
        """The topic's readable queues (pyrmq's addition)."""
        inst = self._started()
        topic = _text(topic)
        route = _run(inst.update_route(topic), exceptions.PullConsumerFetchMQFailed)
        if route is None:
            raise exceptions.PullConsumerFetchMQFailed(f"no route info of topic {topic}")
        return route.subscribe_queues()

    def _started(self) -> ClientInstance:
        if self._instance is None:
            raise exceptions.PullConsumerFetchMessageFailed(
                f"pull consumer {self._group} is not started"
            )
        return self._instance

    def pull(
        self, topic: str | bytes, expression: str = "*", max_num: int = 32
    ) -> Iterator[RecvMessage]:
        """Yields the messages of every queue of ``topic`` whose tag matches ``expression``,
        queue after queue, from each queue's remembered offset until it has no new message;
        the offsets move on as it goes.

        Yields nothing, as the official client, while no name server answers (logged).

        Raises:
            PullConsumerFetchMessageFailed: A pull failed (the offsets stay where the last
                yielded message left them).
        """
        inst = self._started()
        topic = _text(topic)
        expression = _text(expression)
        tags = _tag_filter(expression)
        try:
            route = runtime.run(inst.update_route(topic))
        except PyrmqError as e:
            log.warning("no route for %s to pull: %s", topic, e)
            return
        if route is None:
            return
        for mq in route.subscribe_queues():
            while True:
                offset = self.get_message_queue_offset(mq)
                header = PullMessageRequestHeader.immediate(
                    self._group, topic, mq.queue_id, offset, max_num, expression
                )
                result = _run(
                    _pull_once(inst, mq, header), exceptions.PullConsumerFetchMessageFailed
                )
                moved = result.next_begin_offset != offset
                if result.status is PullStatus.FOUND:
                    for m in result.messages:
                        if tags is None or m.tags in tags:
                            self.set_message_queue_offset(mq, m.queue_offset + 1)
                            yield RecvMessage(m)
                self.set_message_queue_offset(mq, result.next_begin_offset)
                if result.status is PullStatus.NO_NEW_MSG or not moved:
                    break


async def _pull_once(
    inst: ClientInstance, mq: MessageQueue, header: PullMessageRequestHeader
) -> PullResult:
    addr = await inst.master_addr(mq.broker_name, mq.topic)
    return await inst.api.pull(addr, mq.broker_name, header, inst.config.request_timeout_s)
