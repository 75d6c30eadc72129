"""Type stubs of ``pyrmq._core``, the Rust extension behind :mod:`pyrmq.store` and
:mod:`pyrmq.remoting.codec` and the gRPC transport of :mod:`pyrmq.proxy.calls`.

Every method that touches store files releases the GIL. Errors are raised as the classes of
:mod:`pyrmq.errors`.
"""

import os
from collections.abc import Iterable, Sequence
from typing import Any, Literal, Protocol, Self, TypedDict, final

from typing_extensions import Buffer, disjoint_base

from pyrmq.client.message import MessageQueue
from pyrmq.store.status import GetMessageStatus, PutStatus

__all__ = [
    "GetResult",
    "GrpcTransport",
    "MessageExt",
    "MessageStore",
    "PutResult",
    "StoredMessage",
    "__version__",
    "batch_timer_properties",
    "build_profile",
    "compress_body",
    "decode_frames",
    "decode_messages",
    "decode_offset_msg_id",
    "decode_received",
    "encode_batch",
    "encode_command",
    "encode_message",
    "inflate_body",
    "java_string_hash",
    "message_ids",
    "received_extent",
    "received_times",
    "self_signed_certificate",
    "validate_topic",
]

__version__: str
"""Version of the ``pyrmq-py`` crate the extension was built from."""

_CommandTuple = tuple[int, str, int, int, int, str | None, dict[str, str], bytes, int]
"""``(code, language, version, opaque, flag, remark, ext_fields, body, serialize_type)``."""

class _Recovery(TypedDict):
    """What the last open of a store found (``MessageStore.recovery``)."""

    records: int
    """Records re-dispatched to the ConsumeQueues and the index."""
    groups: int
    """Append groups (single messages or batches) among those records."""
    end_offset: int
    """CommitLog offset where the valid data ends."""
    truncated_bytes: int
    """Bytes removed from the torn tail."""
    corrupt_ranges: list[tuple[int, int]]
    """``(start, end)`` CommitLog ranges that failed their checks but were kept."""

@final
class StoredMessage:
    """A message as stored: every field of the record, decoded.

    Numbers, topic and body are decoded up front; hosts, ids and properties are read from the
    shared record buffer when accessed.
    """

    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def phy_offset(self) -> int:
        """CommitLog offset of the record."""
    @property
    def body(self) -> bytes: ...
    @property
    def flag(self) -> int: ...
    @property
    def sys_flag(self) -> int: ...
    @property
    def born_timestamp_ms(self) -> int: ...
    @property
    def born_host(self) -> str:
        """``ip:port`` of the producer."""
    @property
    def store_timestamp_ms(self) -> int: ...
    @property
    def store_host(self) -> str:
        """``ip:port`` of the broker that stored the message."""
    @property
    def reconsume_times(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...
    @property
    def properties(self) -> dict[str, str]:
        """Every property, TAGS, KEYS and UNIQ_KEY included."""
    @property
    def body_crc(self) -> int: ...
    @property
    def store_size(self) -> int:
        """Size of the whole record in bytes."""
    @property
    def msg_id(self) -> str:
        """Offset message id: store host and CommitLog offset, in hex."""
    @property
    def tags(self) -> str | None:
        """The ``TAGS`` property."""
    @property
    def keys(self) -> list[str]:
        """The ``KEYS`` property split on spaces."""
    @property
    def uniq_key(self) -> str | None:
        """The producer's message id (``UNIQ_KEY``)."""
    def property(self, name: str) -> str | None:
        """One property, or None (cheaper than building :attr:`properties`)."""
    def record(self, reconsume_times: int | None = None) -> bytes:
        """The record byte for byte as stored; with ``reconsume_times``, that field set to it."""

@final
class GrpcTransport:
    """A gRPC listener on ``host:port`` (0: any free port), serving from construction on a
    thread of its own; the caller takes its calls as events and answers them.

    With ``tls_cert`` and ``tls_key`` (PEM; the key unencrypted) it serves TLS, and plain
    clients too with ``tls_plain_too``, told apart by their first byte. ``tls_client_auth``
    (none, optional or require) asks for client certificates, checked against ``tls_trust``.

    Raises:
        ConfigError: A certificate, key or trust file that cannot be used.
        OSError: The address cannot be bound.
    """

    def __new__(
        cls,
        host: str,
        port: int,
        *,
        service: str,
        client_streaming: set[str] | frozenset[str],
        max_message_bytes: int,
        tls_cert: bytes | None = None,
        tls_key: bytes | None = None,
        tls_client_auth: str = "none",
        tls_trust: bytes | None = None,
        tls_plain_too: bool = False,
    ) -> Self: ...
    @property
    def port(self) -> int: ...
    def fileno(self) -> int:
        """An eventfd, readable while events wait to be taken."""
    def take_events(self) -> list[tuple[Any, ...]]:
        """Every event since the last call, oldest first: ``(0, call, method, metadata, peer,
        timeout_s, request)`` when a call starts (``request`` None for a client-streaming
        method), ``(1, call, message)`` for each message of a client stream, ``(2, call)`` once
        that client sends no more, ``(3, call)`` when a client left (or let its deadline pass)
        before the call's status was written, ``(4, call)`` when a status asked for is written.
        At most 4,096 at a time; the fd stays readable while more wait."""
    def send(self, call: int, messages: list[bytes]) -> bool:
        """Sends messages of the call's answer, written together; False if the call is over."""
    def reply(self, call: int, message: bytes) -> bool:
        """Answers the call with one message and status OK; False if the call is over."""
    def finish(self, call: int, code: int, message: str, *, notify: bool = False) -> bool:
        """Ends the call with a gRPC status; False if it was over. With ``notify``, an event
        ``(4, call)`` follows once the status is written (``(3, call)`` if the client left
        first)."""
    def consumed(self, call: int) -> None:
        """One message of the call's client stream was taken: the stream may be read further
        (at most 64 are handed over untaken)."""
    def close(self) -> None:
        """Stops listening and gives open calls a second before their connections close."""

@final
class PutResult:
    """The result of an append of one message or one batch."""

    @property
    def status(self) -> PutStatus:
        """PUT_OK, or FLUSH_DISK_TIMEOUT (stored, fsync late)."""
    @property
    def phy_offsets(self) -> list[int]:
        """CommitLog offset of each message."""
    @property
    def queue_offsets(self) -> list[int]:
        """Queue offset of each message."""
    @property
    def queue_ids(self) -> list[int]:
        """Queue id of each message."""
    @property
    def store_timestamp_ms(self) -> int: ...
    @property
    def wrote_bytes(self) -> int:
        """Bytes appended to the CommitLog."""
    @property
    def end_offset(self) -> int:
        """CommitLog offset just past the group: durable once the flushed offset reaches it."""
    @property
    def store_host(self) -> str:
        """``ip:port`` of the broker that stored the messages."""
    @property
    def count(self) -> int:
        """Number of messages stored."""
    @property
    def phy_offset(self) -> int:
        """CommitLog offset of the first message."""
    @property
    def queue_offset(self) -> int:
        """Queue offset of the first message."""
    @property
    def queue_id(self) -> int:
        """Queue id of the first message."""
    @property
    def msg_ids(self) -> list[str]:
        """Offset message ids (store host + CommitLog offset), one per message."""
    @property
    def msg_ids_joined(self) -> str:
        """The offset message ids joined by commas, as the answer to a batch send carries them."""
    @property
    def msg_id(self) -> str:
        """Offset message id of the first message."""

@final
class GetResult:
    """Messages read from one queue: their records end to end in one buffer."""

    @property
    def status(self) -> GetMessageStatus:
        """How the read ended."""
    @property
    def next_begin_offset(self) -> int:
        """Queue offset to read from next."""
    @property
    def min_offset(self) -> int: ...
    @property
    def max_offset(self) -> int: ...
    @property
    def buffer(self) -> bytes:
        """The records, end to end: exactly a PULL_MESSAGE answer body."""
    @property
    def queue_offsets(self) -> list[int]:
        """Queue offset of each record in the buffer."""
    @property
    def phy_offsets(self) -> list[int]:
        """CommitLog offset of each record in the buffer."""
    @property
    def sizes(self) -> list[int]:
        """Size in bytes of each record in the buffer."""
    @property
    def corrupt_offsets(self) -> list[int]:
        """Queue offsets whose records failed their checks and were skipped."""
    @property
    def in_disk(self) -> bool:
        """Whether the last unit examined lies further behind the CommitLog's end than
        ``accessMessageInMemoryMaxRatio`` percent of memory (RocketMQ's
        suggestPullingFromSlave)."""
    @property
    def message_count(self) -> int:
        """Number of records in the buffer."""
    def messages(self) -> list[StoredMessage]:
        """Decodes every record of the buffer."""
    def views(self) -> list[memoryview]:
        """One read-only memoryview per record, sharing the buffer."""
    def __len__(self) -> int: ...

@disjoint_base
class MessageStore:
    """A CommitLog with ConsumeQueues and a key index, rooted at one directory.

    Subclassable; :class:`pyrmq.store.MessageStore` is the Python face of it.
    """

    def __new__(cls, path: str | os.PathLike[str], config: dict[str, Any] | None = None) -> Self:
        """Opens the store rooted at ``path``; ``config`` maps StoreConfig field names to values."""
    def put(
        self,
        topic: str,
        body: Buffer,
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: dict[str, str] | str | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        prepared_transaction_offset: int = 0,
        internal: bool = False,
        wait_for_flush: bool = True,
    ) -> PutResult:
        """Appends one message; ``properties`` is a dict or an already encoded string.

        Under SYNC_FLUSH it returns once the message is on disk. ``wait_for_flush=False``
        returns once it is stored and visible, with its flush requested: it is durable when
        :attr:`flushed_phy_offset` reaches the result's ``end_offset``, and each flush that may
        make it so makes :meth:`flushed_fd` readable (:class:`pyrmq.store.FlushWaiter` awaits
        that in an event loop).
        """
    def put_batch(
        self,
        topic: str,
        bodies: Iterable[Buffer],
        *,
        queue_id: int = 0,
        tags: str | None = None,
        keys: str | Sequence[str] | None = None,
        properties: dict[str, str] | str | None = None,
        flag: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str | None = None,
        internal: bool = False,
        wait_for_flush: bool = True,
    ) -> PutResult:
        """Appends ``bodies`` to one queue as one group, all sharing tags, keys and properties
        (``wait_for_flush`` as for :meth:`put`)."""
    def put_encoded_batch(
        self,
        topic: str,
        batch_body: Buffer,
        *,
        queue_id: int = 0,
        sys_flag: int = 0,
        born_timestamp_ms: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
        internal: bool = False,
        wait_for_flush: bool = True,
        batch_properties: str | None = None,
    ) -> PutResult:
        """Appends a client batch body (RocketMQ's SEND_BATCH_MESSAGE encoding) to one queue
        (``wait_for_flush`` as for :meth:`put`); ``batch_properties`` (encoded) follow each
        message's own."""
    def get(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int = 32,
        max_bytes: int | None = None,
        tags: str | Sequence[str] | None = None,
    ) -> GetResult:
        """Reads up to ``max_count`` messages (or ``max_bytes``) from ``queue_offset`` on.

        Keeps those whose tag matches ``tags``: "*" (every message), "TagA || TagB", or a
        list of tags. As in RocketMQ, a "*" within a longer expression or a list is a tag.
        """
    def look_message_by_offset(self, phy_offset: int) -> StoredMessage | None:
        """The message whose record starts at ``phy_offset``, or None."""
    def look_record(self, phy_offset: int) -> bytes | None:
        """The stored record at ``phy_offset``, byte for byte, or None."""
    def read_replica(self, from_offset: int, max_bytes: int) -> tuple[bytes, int, int] | None:
        """Published CommitLog bytes from ``from_offset`` for a slave: whole append groups of
        about ``max_bytes`` (at least one), or a segment's closing blank alone; with the offset
        after them and 0. Where this log is damaged, the damaged bytes as they are and what
        ends them (an intact group, the closing blank, or the segment's end), with the number
        of damaged bytes. None when nothing is published past ``from_offset``."""
    def append_replica(self, from_offset: int, data: bytes, damaged: int = 0) -> int:
        """A slave's store takes bytes its master's :meth:`read_replica` gave for
        ``from_offset``: checks, writes and dispatches them; returns the new CommitLog end.
        The first ``damaged`` bytes are written as they are and dispatch nothing. Raises
        ReplicationError (nothing written) when they do not continue this log."""
    def view_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The message named by an offset message id, or None."""
    def query_message(
        self,
        topic: str,
        key: str,
        *,
        max_count: int = 32,
        begin_ms: int = 0,
        end_ms: int | None = None,
    ) -> list[StoredMessage]:
        """The newest ``max_count`` messages of ``topic`` with ``key`` among their KEYS or as
        UNIQ_KEY, oldest first (RocketMQ's order)."""
    def min_offset(self, topic: str, queue_id: int) -> int:
        """The smallest queue offset still stored."""
    def max_offset(self, topic: str, queue_id: int) -> int:
        """The next free queue offset."""
    def offset_for_time(
        self,
        topic: str,
        queue_id: int,
        timestamp_ms: int,
        *,
        boundary: Literal["lower", "upper"] = "lower",
    ) -> int:
        """The queue offset at ``boundary`` of ``timestamp_ms``, as RocketMQ 5 answers it.

        ``"lower"``: the first message stored at or after it (the max offset when every message
        is older). ``"upper"``: the last one stored at or before it (the min offset when every
        message is newer).
        """
    def earliest_store_time(self, topic: str, queue_id: int) -> int | None:
        """Store timestamp of the queue's first message, or None."""
    def offset_in_disk(self, topic: str, queue_id: int, queue_offset: int) -> bool:
        """Whether the message at ``queue_offset`` lies further behind the CommitLog's end than
        ``accessMessageInMemoryMaxRatio`` of memory (RocketMQ's ``checkInDiskByConsumeOffset``);
        False when there is no such message."""
    def store_time(self, topic: str, queue_id: int, queue_offset: int) -> int | None:
        """Store timestamp of the message at ``queue_offset``, or None."""
    @property
    def min_phy_offset(self) -> int:
        """The smallest CommitLog offset still stored."""
    @property
    def max_phy_offset(self) -> int:
        """The CommitLog offset the next append will write at."""
    @property
    def flushed_phy_offset(self) -> int:
        """The CommitLog offset up to which data is on disk."""
    def flushed_fd(self) -> int:
        """A file descriptor that becomes readable after a flush that may have made a
        ``wait_for_flush=False`` put durable (see :meth:`drain_flushed`)."""
    def drain_flushed(self) -> int:
        """Clears :meth:`flushed_fd`, then returns the flushed CommitLog offset."""
    def queue_ids(self) -> list[tuple[str, int]]:
        """Every ``(topic, queue id)`` with a ConsumeQueue."""
    def scan_consume_queue(
        self,
        topic: str,
        queue_id: int,
        start_offset: int,
        max_units: int,
        tags: str | Sequence[str] | None = None,
    ) -> int:
        """Counts units of a ConsumeQueue range passing a tag filter (the scan loop, in Rust)."""
    def consume_queue_units(
        self, topic: str, queue_id: int, start_offset: int, max_units: int
    ) -> list[tuple[int, int, int, int]]:
        """Raw units ``(queue_offset, phy_offset, size, tags_code)`` from ``start_offset``."""
    def flush(self) -> int:
        """Flushes everything and advances the checkpoint; returns the flushed CommitLog offset."""
    def delete_expired_files(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Runs retention as of ``now_ms``; returns the number of CommitLog segments deleted."""
    def deliver_due(self, now_ms: int | None = None) -> int:
        """Delivers the delayed messages due at ``now_ms`` (default: now) to their real topics;
        returns how many. The schedule service does this by itself every 100 ms while
        background services run."""
    def delete_topic(self, topic: str) -> int:
        """Deletes the topic's ConsumeQueues, as RocketMQ's ``deleteTopics``; returns how many
        there were. Its messages are no longer readable or found by key, and a later put
        starts again at queue offset 0. Its records stay in the CommitLog until retention
        removes them, and recovery does not bring the queues back."""
    def recall(
        self,
        topic: str,
        uniq_key: str,
        due_ms: int,
        *,
        producer_group: str | None = None,
        born_host: str | None = None,
        wait_for_flush: bool = True,
    ) -> PutResult:
        """Recalls the timer message ``uniq_key`` (its ``UNIQ_KEY``) of ``topic``, due at
        ``due_ms`` (RocketMQ 5's RecallMessage): stores a marker in ``rmq_sys_wheel_timer``,
        and from then on the schedule drops that message instead of delivering it, across
        restarts too. Returns as :meth:`put` does. Recalling a message already delivered, or
        never sent, stores a marker that drops nothing."""
    def pending_recalls(self) -> int:
        """How many recalled timer messages the schedule has yet to meet."""
    def delay_offsets(self) -> dict[int, int]:
        """Each delay level's next queue offset in SCHEDULE_TOPIC_XXXX (RocketMQ's
        ``delayOffset.json``)."""
    def copy_delay_offsets(self, offsets: dict[int, int]) -> None:
        """Takes a master's delay offsets in place of this store's, persisted with the next
        flush: a slave keeps them so that, made a master, it delivers on from where its master
        was instead of every delayed message its log holds again."""
    def delayed_deliveries(self) -> tuple[int, int]:
        """``(messages, bytes)`` of delayed messages stored again under their real topics since
        the store opened (by the schedule service or :meth:`deliver_due`)."""
    def retention(self) -> dict[str, int | str]:
        """The retention settings in force, by :class:`~pyrmq.config.StoreConfig` field name
        (``RETENTION_FIELDS``)."""
    def set_retention(self, settings: dict[str, int | str]) -> None:
        """Changes retention settings (``RETENTION_FIELDS``) of the open store, as RocketMQ's
        ``updateBrokerConfig`` changes ``fileReservedTime``; the others keep their values. The
        next retention pass uses them, and a changed ``disk_space_warning_level_ratio`` is
        checked at once. Raises ConfigError for any other key or a bad value and changes
        nothing."""
    def check_disk(self) -> float | None:
        """Re-reads disk usage and updates ``is_disk_full``.

        Returns the used fraction (0.0-1.0) of the fuller of the store's file systems (the
        root's and, when it lives elsewhere, the CommitLog's), or None if unknown.
        """
    @property
    def is_disk_full(self) -> bool:
        """Whether writes are refused: disk use was above the warning level at the last check."""
    def hold_pull(
        self,
        pull_id: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        tags: str | Sequence[str] | None = None,
    ) -> None:
        """Parks a pull until its queue passes ``queue_offset`` with a matching tag."""
    def cancel_held_pull(self, pull_id: int, topic: str, queue_id: int) -> bool:
        """Removes held pull ``pull_id``, parked on (topic, queue id), whose time ran out;
        False if it was woken already."""
    def check_held_pulls(self) -> None:
        """Wakes held pulls whose queue moved past their offset."""
    def drain_ready_pulls(self) -> list[tuple[int, int]]:
        """Held pulls ready to answer: ``(pull_id, reason)`` (0 arrival, 1 at park, 2 check)."""
    def held_pulls_fd(self) -> int:
        """A file descriptor that becomes readable when held pulls are ready."""
    @property
    def held_pull_count(self) -> int:
        """Pulls currently held."""
    def wakeup_fd(self) -> int:
        """A file descriptor that becomes readable when messages arrive (see ``drain_arrivals``)."""
    def drain_arrivals(self) -> list[tuple[str, int, int, list[int] | None]]:
        """Pending arrivals: ``(topic, queue_id, max_offset, tags_codes or None)`` per queue."""
    @property
    def recovery(self) -> _Recovery:
        """What the last open found: records re-dispatched, torn bytes removed, corrupt ranges."""
    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
    def close(self) -> None:
        """Flushes everything and marks the shutdown clean. Idempotent."""

def self_signed_certificate(names: list[str]) -> tuple[str, str]:
    """A self-signed certificate for ``names`` (host names and IP addresses) and its key, in
    PEM: RocketMQ's TLS test mode."""

def compress_body(body: bytes, compression: str, level: int) -> tuple[bytes, int]:
    """``(compressed body, sys flag bits)`` of ``body`` compressed with ``compression``
    (``"zlib"``, ``"lz4"`` or ``"zstd"``); ``level`` applies to zlib. ConfigError for another
    name."""

def inflate_body(body: bytes, sys_flag: int, limit: int | None = None) -> bytes:
    """``body``, compressed as ``sys_flag`` says (zlib, LZ4 or Zstandard), inflated;
    MessageBodyError when it does not inflate, names an unknown compression, or inflates past
    ``limit`` bytes."""

def decode_messages(buffer: Buffer) -> list[StoredMessage]:
    """Decodes records laid end to end (a PULL body, or ``GetResult.buffer``)."""

def decode_received(
    buffer: Buffer,
    broker_name: str,
    namespace: str | None = None,
    min_offset: int | None = None,
    max_offset: int | None = None,
) -> list[MessageExt]:
    """Decodes a PULL body from ``broker_name`` into received messages, each kept out of
    the cycle collector (they refer only to strings and bytes). Their topics are shown without
    ``namespace`` (``ns%TopicA`` as ``TopicA``). With the pull answer's ``min_offset`` and
    ``max_offset``, each shows them as its ``MIN_OFFSET`` and ``MAX_OFFSET`` properties, as
    Java's consumers add them."""

def received_extent(msgs: list[Any]) -> tuple[int, int, bool, int] | None:
    """``(first queue offset, last queue offset, consecutive, total store size)`` of a pulled
    batch in one pass; None if it is empty or holds anything but :class:`MessageExt`."""

def received_times(
    msgs: list[Any],
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], int] | None:
    """``(born timestamps, store timestamps, body bytes)`` of a received batch in one pass,
    for latency accounting: each timestamp list holds ``(ms, messages)`` per distinct value,
    and body bytes are counted inflated. None if the list is empty or holds anything but
    :class:`MessageExt`."""

@final
class MessageExt:
    """A received message: every stored field, the producer's id, and the broker it came from.

    A message redelivered from the group's retry topic shows its original topic; ``stored``
    gives the record as stored.
    """

    @classmethod
    def from_stored(
        cls, stored: StoredMessage, broker_name: str, namespace: str | None = None
    ) -> MessageExt:
        """Wraps a stored message received from ``broker_name``, its topic shown without
        ``namespace``."""
    @classmethod
    def from_batch(
        cls, stored: list[StoredMessage], broker_name: str, namespace: str | None = None
    ) -> list[MessageExt]:
        """Wraps the messages of one pull."""
    @property
    def broker_name(self) -> str: ...
    @property
    def topic(self) -> str:
        """The topic it was sent to (the original one for a retry), without the consumer's
        namespace."""
    @property
    def stored(self) -> StoredMessage:
        """The record as stored (its ``topic`` is a retry topic for a retry)."""
    @property
    def body(self) -> bytes:
        """The body, inflated if the producer compressed it."""
    @property
    def tags(self) -> str | None: ...
    @property
    def keys(self) -> str:
        """The keys, separated by spaces ("" if none), as the official client gives them."""
    @property
    def id(self) -> str:
        """The producer's message id (``UNIQ_KEY``), or the offset id when there is none."""
    @property
    def msg_id(self) -> str:
        """Same as ``id``, under the official client's name."""
    @property
    def offset_msg_id(self) -> str:
        """Store host and CommitLog offset, in hex."""
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def message_queue(self) -> MessageQueue:
        """The queue it was pulled from: (stored topic, broker, queue id)."""
    @property
    def reconsume_times(self) -> int:
        """Deliveries before this one: the broker's count, plus the retries a consumer made
        in memory (orderly ones, and a send-back that failed)."""
    def count_local_retry(self) -> int:
        """Counts a retry a consumer makes in memory; returns the new ``reconsume_times``."""
    @property
    def store_size(self) -> int: ...
    @property
    def born_timestamp(self) -> int: ...
    @property
    def store_timestamp(self) -> int: ...
    @property
    def born_host(self) -> str: ...
    @property
    def store_host(self) -> str: ...
    @property
    def commit_log_offset(self) -> int: ...
    @property
    def prepared_transaction_offset(self) -> int: ...
    @property
    def flag(self) -> int: ...
    @property
    def sys_flag(self) -> int:
        """The record's sys flag (compression, transaction type, host kinds)."""
    @property
    def delay_time_level(self) -> int: ...
    @property
    def properties(self) -> dict[str, str]:
        """Every property, as a new dict on each access."""
    def get_property(self, prop: str | bytes) -> str | None:
        """One property (a ``str`` or ``bytes`` name), or None."""
    def __getitem__(self, key: str | bytes, /) -> str | None: ...
    def __bytes__(self) -> bytes: ...

class _BatchMessage(Protocol):
    body: bytes
    flag: int
    properties: dict[str, str]

def encode_message(message: _BatchMessage, topic: str, max_size: int) -> str:
    """The properties of ``message`` encoded for SEND_MESSAGE, after the client-side checks
    (a non-empty body within ``max_size``, clean property names and values, properties within
    32767 bytes)."""

def encode_batch(messages: Iterable[_BatchMessage], topic: str, max_size: int) -> bytes:
    """A SEND_BATCH_MESSAGE body for ``messages``, after the client-side checks (non-empty
    bodies within ``max_size``, clean property names and values, no delay level, properties
    within 32767 bytes, the whole body within ``max_size``)."""

def validate_topic(topic: str, internal: bool = False) -> None:
    """RocketMQ's topic rule as the store applies it; raises InvalidTopicError or, unless
    ``internal``, SystemTopicError for a topic only the broker writes (``SCHEDULE_TOPIC_XXXX``,
    the transaction topics, ...)."""

def batch_timer_properties(body: bytes) -> list[str]:
    """The encoded properties of each message of a client batch ``body`` that names a timer
    (``TIMER_...``); none for a body that is not a batch (the store refuses it when put)."""

def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` of ``s``: RocketMQ's tag code and index key hash."""

def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """``(store host "ip:port", CommitLog offset)`` of an offset message id, as
    ``VIEW_MESSAGE_BY_ID`` needs them; ``ValueError`` for anything else."""

def message_ids(head: bytes, count: int) -> list[str]:
    """``count`` producer message ids: ``head`` (the id's bytes before its counter) in
    upper-case hex, each followed by the next value of the process's 16-bit counter."""

def decode_frames(
    buffer: Buffer, max_frame_bytes: int = 16777216
) -> tuple[list[_CommandTuple], int]:
    """Decodes every whole remoting frame at the start of ``buffer``.

    Returns ``(commands, consumed)``: a tuple ``(code, language, version, opaque, flag, remark,
    ext_fields, body, serialize_type)`` per frame, and the bytes those frames took. An incomplete
    trailing frame is not consumed. Raises ``FrameDecodeError`` on a malformed frame, including a
    length field above ``max_frame_bytes`` (checked on the 4 length bytes alone).
    """

def encode_command(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str],
    body: Buffer,
    serialize_type: int,
) -> bytes:
    """Encodes a whole remoting frame: length field, header-length word, header and body.

    ``serialize_type`` 0 writes a JSON header shaped like a Java 4.9.7 broker's (sorted keys,
    every ext field a string); 1 writes the ROCKETMQ binary header. Raises ``ValueError`` when a
    value does not fit the chosen serialize type (e.g. a code above 32767 in a binary header).
    """

def build_profile() -> str:
    """How this extension was optimized: ``"release"`` (opt-level 3 without debug assertions),
    ``"debug"`` (debug assertions on), or ``"opt-level N"`` for any other profile."""
