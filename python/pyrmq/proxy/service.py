"""The MessagingService of RocketMQ 5's gRPC protocol, served from the broker's event loop.

Each RPC works on the broker's own tables and store, as RocketMQ's proxy does in its "local"
mode: routes name this broker's queues at the gRPC address; sends are appended like 4.x sends
(and under SYNC_FLUSH answered once durable); receives pop messages as ``pop.py`` describes,
long-polling through the broker's held-pull service. Failures are answered in the response's
``status``, never as gRPC errors, since the official clients read only that. With the broker's
ACL (``aclEnable``), every request, and every telemetry command, passes ``access.py``'s check
before it is served.
"""

import asyncio
import contextlib
import dataclasses
import functools
import ipaddress
import itertools
import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyrmq import _core
from pyrmq.broker.processors.recall import recall_handle
from pyrmq.broker.services import transactions
from pyrmq.broker.services.hold import HeldPull
from pyrmq.broker.services.transactions import TransactionError
from pyrmq.broker.state.groups import check_group_name
from pyrmq.broker.state.topic_attributes import MIXED
from pyrmq.broker.state.topics import DLQ_PREFIX, PERM_READ, PERM_WRITE, RETRY_PREFIX, TopicConfig
from pyrmq.errors import (
    DiskFullError,
    MessageBodyError,
    MessageIllegalError,
    StoreClosedError,
    StoreError,
    SystemTopicError,
)
from pyrmq.namespace import is_system_topic
from pyrmq.properties import ORIGIN_MESSAGE_ID, RECONSUME_TIME, RETRY_TOPIC, UNIQ_KEY
from pyrmq.proxy import messages, pop_state
from pyrmq.proxy.access import Caller, GrpcAccess, peer_endpoint
from pyrmq.proxy.cluster import BrokerQueues, ClusterRoutes
from pyrmq.proxy.messages import Delivery, SendCheckError
from pyrmq.proxy.pop import InFlight, PopQueue, Receipt, new_generations
from pyrmq.proxy.pop_state import PopKey
from pyrmq.proxy.proto import messaging_pb2 as pb
from pyrmq.recall_handle import RecallHandle, RecallHandleError
from pyrmq.remoting.protocol import SYSFLAG_COMPRESSED, ResponseCode
from pyrmq.sql_filter import SqlFilter, SqlFilterError, parse_cached
from pyrmq.store import GetMessageStatus, StoredMessage

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["Client", "MessagingService", "Receive"]

log = logging.getLogger(__name__)

MAX_BATCH = 32
# RocketMQ 5's proxy defaults.
DEFAULT_LONG_POLLING_S = 20.0
MAX_LONG_POLLING_S = 20.0
MIN_INVISIBLE_S = 10.0
MAX_INVISIBLE_S = 12 * 3600.0
# Messages popped for a push consumer are kept invisible while it stays connected (this is
# only the figure reported to it), for at most 3 hours, as RocketMQ's proxy renews them.
AUTO_RENEW_INVISIBLE_S = 60.0
AUTO_RENEW_MAX_S = 3 * 3600.0
# A compressed 4.x body is inflated for 5.x clients up to this size.
MAX_INFLATED_BYTES = 64 * 1024 * 1024
# A long poll ends this long before the client's deadline, so its answer arrives in time.
DEADLINE_MARGIN_S = 0.5
# A client with no telemetry stream counts as present this long after its last call (at most
# the broker's channel expiry): three of the official clients' heartbeats, 10 s apart. A
# stream that broke is not a client gone, as RocketMQ's proxy keeps renewing its messages.
CLIENT_PRESENT_S = 30.0
# What a producer is told to retry with: RocketMQ 5's defaults.
PRODUCER_MAX_ATTEMPTS = 3
# What a topic takes by its message.type attribute; one without takes every type (MIXED).
ACCEPTED_TYPES = {
    "NORMAL": [pb.NORMAL],
    "FIFO": [pb.FIFO],
    "DELAY": [pb.DELAY],
    "TRANSACTION": [pb.TRANSACTION],
    "MIXED": [pb.NORMAL, pb.FIFO, pb.DELAY, pb.TRANSACTION],
}
# EndTransactionRequest.resolution
COMMIT, ROLLBACK = 1, 2
# The topic new topics take their settings from (RocketMQ's AUTO_CREATE_TOPIC_KEY_TOPIC).
DEFAULT_TOPIC = "TBW102"
# Generations below this are the pop times (ms) of 4.x-protocol pops; gRPC's count µs.
POP_TIME_LIMIT = 10**14
SYSTEM_GROUP_PREFIX = "CID_RMQ_SYS_"
"""Consumer groups the broker keeps for itself (RocketMQ's ``MixAll.CID_RMQ_SYS_PREFIX``)."""


def _status(code: "pb.Code | int", message: str = "") -> pb.Status:
    return pb.Status(code=code, message=message or pb.Code.Name(code))  # type: ignore[arg-type]


OK = _status(pb.OK)
NOT_FOUND = _status(pb.MESSAGE_NOT_FOUND, "no new message")


@dataclasses.dataclass(slots=True)
class Client:
    """A gRPC client as the broker knows it, by its ``x-mq-client-id``."""

    client_id: str
    client_type: int = pb.CLIENT_TYPE_UNSPECIFIED
    group: str = ""
    settings: pb.Settings | None = None
    # One per open telemetry stream: commands the broker sends the client on it.
    outboxes: list["asyncio.Queue[pb.TelemetryCommand]"] = dataclasses.field(default_factory=list)
    last_seen: float = 0.0
    away: bool = False
    """Found absent by :meth:`MessagingService.expire_clients`, its messages given up."""
    # With an ACL: the account ("" for one let in by address) whose calls first named this
    # client id. Other accounts' calls naming it are refused, as they would act on this
    # client's messages and transactions.
    owner: str | None = None

    @property
    def streams(self) -> int:
        return len(self.outboxes)

    def publishes(self, topic: str) -> bool:
        settings = self.settings
        return (
            settings is not None
            and settings.WhichOneof("pub_sub") == "publishing"
            and any(t.name == topic for t in settings.publishing.topics)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Receive:
    """One ReceiveMessage request (or one POP_MESSAGE), checked."""

    client: Client
    group: str
    config: TopicConfig
    expression: str
    batch: int
    invisible_s: float
    auto_renew: bool
    # -1: every readable queue.
    queue_id: int
    attempt_id: str
    orderly: bool
    max_attempts: int
    sql: SqlFilter | None = None
    # A 4.x-protocol pop (:mod:`pyrmq.broker.processors.pop`): every delivery takes this
    # generation, the pop time its handles carry; bodies go as stored (its clients inflate
    # them); a group new to a queue starts at the queue's first message.
    pop_time: int = 0
    raw_bodies: bool = False
    start_at_min: bool = False

    @property
    def hold_s(self) -> float:
        """How long a delivery stays invisible unless acked or nacked."""
        return AUTO_RENEW_MAX_S if self.auto_renew else self.invisible_s


class MessagingService:
    def __init__(self, broker: "BrokerController", port: int) -> None:
        self.broker = broker
        self.port = port
        self.clients: dict[str, Client] = {}
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        self.cluster = ClusterRoutes(broker)
        self._generations = new_generations()
        # The last pop time given to a 4.x-protocol pop (see next_pop_time).
        self._last_pop_time = 0
        self._round_robin = itertools.count()
        # Receives waiting for a message, by (group, topic): woken by an arrival, a nack or a
        # client that left.
        self._waiters: dict[tuple[str, str], set[asyncio.Event]] = {}
        # Each client's last receive with an attempt id, by (client, group, topic, the queue
        # asked for or -1): the id and the deliveries (queue id, offset, generation) it answered
        # with. A client asks again with the same id when that answer never reached it; a push
        # consumer of an orderly group receives from each queue on its own.
        self._attempts: dict[tuple[str, str, str, int], tuple[str, list[tuple[int, int, int]]]] = {}
        # The ACL's check of requests, when the broker has one (``broker.acl``).
        self.access = GrpcAccess()
        self.peer_of: Callable[[str], str] = _same
        """The client behind a gRPC peer string (a front in between hides it)."""
        # Where the groups' in-flight state is kept (see restore), and whether it changed
        # since it was last written.
        self._state_path: Path | None = None
        self._dirty = False
        self._encoder = pop_state.Encoder()

    def _peer(self, context: Any) -> str:
        """The caller's gRPC peer string, as the client it stands for."""
        return self.peer_of(context.peer() or "")

    def _refused(self, request: Any, context: Any) -> pb.Status | None:
        """None if the broker's ACL lets ``request`` through, else the status refusing it.
        Called only when the broker has an ACL."""
        assert self.broker.acl is not None
        caller = Caller.of(context, self._peer(context))
        refused = self.access.check(self.broker.acl, caller, request)
        if refused is None:
            client = self._client(context)
            if client is not None:
                refused = self._bind(client, caller)
        return refused

    def _bind(self, client: Client, caller: Caller) -> pb.Status | None:
        account = caller.access_key or ""
        if client.owner is None:
            client.owner = account
        elif client.owner != account:
            return _status(pb.FORBIDDEN, f"client id {client.client_id} is another account's")
        return None

    # -- clients ---------------------------------------------------------------------------

    def _client(self, context: Any) -> Client | None:
        client_id = ""
        for key, value in context.invocation_metadata() or ():
            if key == "x-mq-client-id":
                client_id = value if isinstance(value, str) else value.decode()
                break
        if not client_id.strip():
            return None
        client = self.clients.get(client_id)
        if client is None:
            client = self.clients[client_id] = Client(client_id)
        client.last_seen = time.monotonic()
        client.away = False
        return client

    def _present(self, now: float) -> set[str]:
        window = min(CLIENT_PRESENT_S, self.broker.config.channel_expired_timeout_ms / 1000)
        return {
            c.client_id
            for c in self.clients.values()
            if c.streams > 0 or now - c.last_seen < window
        }

    def _client_left(self, client: Client, *, returned: bool = False) -> None:
        """Makes the messages a departed client held visible to its group again (``returned``:
        as given back, see :meth:`PopQueue.release`)."""
        self._dirty = True
        for key in [k for k in self._attempts if k[0] == client.client_id]:
            del self._attempts[key]
        now = time.monotonic()
        for (group, topic, _), queue in self._queues.items():
            if queue.release(client.client_id, now, returned=returned):
                self._wake(group, topic)

    def expire_clients(self) -> None:
        """Gives up the messages of clients no longer present (their held receives are woken)
        and forgets those silent for longer than the broker's channel expiry."""
        now = time.monotonic()
        limit = now - self.broker.config.channel_expired_timeout_ms / 1000
        present = self._present(now)
        for client_id, client in list(self.clients.items()):
            if client.streams == 0 and client.last_seen < limit:
                del self.clients[client_id]
                self._client_left(client)
            elif client_id not in present and not client.away:
                client.away = True
                self._client_left(client)

    # -- routes ----------------------------------------------------------------------------

    def _topic(self, resource: pb.Resource, *, create: bool) -> TopicConfig | pb.Status:
        name = resource.name
        if (refused := _check_topic(name)) is not None:
            return refused
        broker = self.broker
        config = broker.topics.get(name)
        if config is None and create and self._may_create(name):
            config, created = broker.topics.create_on_send(
                name, DEFAULT_TOPIC, broker.config.default_topic_queue_nums
            )
            if created:
                broker.request_registration(name)
        if config is None:
            return _status(pb.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        return config

    @staticmethod
    def _endpoints(host: str, port: int) -> pb.Endpoints:
        try:
            scheme = pb.IPv6 if ipaddress.ip_address(host).version == 6 else pb.IPv4
        except ValueError:
            scheme = pb.DOMAIN_NAME
        return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])

    @staticmethod
    def _queue_permission(config: TopicConfig, queue_id: int) -> "pb.Permission":
        read = bool(config.perm & PERM_READ) and queue_id < config.read_queue_nums
        write = bool(config.perm & PERM_WRITE) and queue_id < config.write_queue_nums
        if read and write:
            return pb.READ_WRITE
        if read:
            return pb.READ
        if write:
            return pb.WRITE
        return pb.NONE

    def _message_queue(
        self,
        resource: pb.Resource,
        share: BrokerQueues,
        queue_id: int,
        permission: int,
        accepted: list[Any],
    ) -> Any:
        return pb.MessageQueue(
            topic=resource,
            id=queue_id,
            permission=permission,  # type: ignore[arg-type]
            broker=pb.Broker(
                name=share.broker_name, id=0, endpoints=self._endpoints(share.host, share.port)
            ),
            accept_message_types=accepted,
        )

    def _accepted_types(self, topic: str) -> list[Any]:
        """The message types a route names for ``topic``, by its ``message.type`` as this
        broker holds it; MIXED for one it does not hold (the route's other brokers keep
        theirs)."""
        config = self.broker.topics.get(topic)
        kind = MIXED if config is None else config.message_type
        return ACCEPTED_TYPES.get(kind, [pb.MESSAGE_TYPE_UNSPECIFIED])

    async def _shares(
        self, resource: pb.Resource, *, to_send: bool
    ) -> list[BrokerQueues] | pb.Status:
        """The topic's queues on every broker of the cluster that serves gRPC. With
        ``to_send``, a topic no broker holds gets the queues a send creates it with here
        (``autoCreateTopicEnable``), as over the 4.x protocol: the route makes nothing, so a
        consumer's receive from a topic never sent to is told it does not exist."""
        config = self._topic(resource, create=False)
        if isinstance(config, pb.Status) and config.code != pb.TOPIC_NOT_FOUND:
            return config
        local = None if isinstance(config, pb.Status) else config
        shares = await self.cluster.brokers(local, resource.name)
        if not shares and to_send and self._may_create(resource.name):
            sendable = self.broker.topics.config_on_send(
                resource.name, DEFAULT_TOPIC, self.broker.config.default_topic_queue_nums
            )
            if sendable is not None:
                shares = [self.cluster.local(sendable)]
        if not shares:
            return _status(pb.TOPIC_NOT_FOUND, f"topic {resource.name!r} does not exist")
        return shares

    def _may_create(self, topic: str) -> bool:
        """Whether a send may create ``topic`` (``autoCreateTopicEnable``): a group's retry and
        dead-letter topics are the broker's to make."""
        auto = self.broker.config.auto_create_topic_enable
        return auto and not topic.startswith((RETRY_PREFIX, DLQ_PREFIX))

    async def query_route(self, request: pb.QueryRouteRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.QueryRouteResponse(status=refused)
        if self._client(context) is None:
            return pb.QueryRouteResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        # A 5.x client asks for routes before it says what kind of client it is.
        shares = await self._shares(request.topic, to_send=True)
        if isinstance(shares, pb.Status):
            return pb.QueryRouteResponse(status=shares)
        queues = []
        accepted = self._accepted_types(request.topic.name)
        for share in shares:
            config = share.config
            for queue_id in self.broker.queue_ids(
                max(config.read_queue_nums, config.write_queue_nums)
            ):
                permission = self._queue_permission(config, queue_id)
                queues.append(
                    self._message_queue(request.topic, share, queue_id, permission, accepted)
                )
        return pb.QueryRouteResponse(status=OK, message_queues=queues)

    async def query_assignment(self, request: pb.QueryAssignmentRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.QueryAssignmentResponse(status=refused)
        if self._client(context) is None:
            return pb.QueryAssignmentResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        group_status = _check_group(request.group.name)
        if group_status is not None:
            return pb.QueryAssignmentResponse(status=group_status)
        shares = await self._shares(request.topic, to_send=False)
        if isinstance(shares, pb.Status):
            return pb.QueryAssignmentResponse(status=shares)
        orderly = self.broker.group_config(request.group.name).consume_message_orderly
        queues = []
        accepted = self._accepted_types(request.topic.name)
        for share in shares:
            config = share.config
            if not config.perm & PERM_READ or config.read_queue_nums < 1:
                continue
            if orderly:
                # An orderly group receives queue by queue, each queue one batch at a time.
                for queue_id in self.broker.queue_ids(config.read_queue_nums):
                    permission = self._queue_permission(config, queue_id)
                    queues.append(
                        self._message_queue(request.topic, share, queue_id, permission, accepted)
                    )
            else:
                # One assignment per broker (queue id -1): its receives pop from every queue.
                permission = pb.READ_WRITE if config.perm & PERM_WRITE else pb.READ
                queues.append(self._message_queue(request.topic, share, -1, permission, accepted))
        if not queues:
            return pb.QueryAssignmentResponse(
                status=_status(pb.FORBIDDEN, f"topic {request.topic.name!r} has no readable queue")
            )
        return pb.QueryAssignmentResponse(
            status=OK, assignments=[pb.Assignment(message_queue=q) for q in queues]
        )

    # -- client lifecycle ------------------------------------------------------------------

    async def heartbeat(self, request: pb.HeartbeatRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.HeartbeatResponse(status=refused)
        client = self._client(context)
        if client is None:
            return pb.HeartbeatResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        client.client_type = request.client_type
        if request.HasField("group"):
            client.group = request.group.name
        return pb.HeartbeatResponse(status=OK)

    async def notify_client_termination(
        self, request: pb.NotifyClientTerminationRequest, context: Any
    ) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.NotifyClientTerminationResponse(status=refused)
        client = self._client(context)
        if client is None:
            return pb.NotifyClientTerminationResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        self.clients.pop(client.client_id, None)
        # A client shutting down gives back what it has not consumed: no attempt is spent.
        self._client_left(client, returned=True)
        return pb.NotifyClientTerminationResponse(status=OK)

    async def telemetry(
        self, requests: AsyncIterator[pb.TelemetryCommand], context: Any
    ) -> AsyncIterator[pb.TelemetryCommand]:
        client = self._client(context)
        if client is None:
            yield pb.TelemetryCommand(status=_status(pb.CLIENT_ID_REQUIRED))
            return
        # With an ACL, each command is checked as the stream's caller sends it. The stream
        # takes the broker's commands (transaction checks) only once one of its commands has
        # passed, and a refused command ends it, as RocketMQ's proxy ends it.
        caller = None if self.broker.acl is None else Caller.of(context, self._peer(context))
        if caller is not None and (refused := self._bind(client, caller)) is not None:
            yield pb.TelemetryCommand(status=refused)
            return
        # Answers to the client's commands and the broker's own (transaction checks) share the
        # stream: both go through the outbox, read while the client's commands are.
        outbox: asyncio.Queue[pb.TelemetryCommand] = asyncio.Queue()
        if caller is None:
            self._open_stream(client, outbox)
        reader = asyncio.ensure_future(self._read_commands(client, requests, outbox, caller))
        take: asyncio.Future[pb.TelemetryCommand] | None = None
        try:
            while True:
                take = asyncio.ensure_future(outbox.get())
                await asyncio.wait({take, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not take.done():
                    break
                yield take.result()
            # What the reader queued before it ended (a refusal, say) still goes out.
            while not outbox.empty():
                yield outbox.get_nowait()
        finally:
            if take is not None:
                take.cancel()
            reader.cancel()
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                log.debug("telemetry stream of %s ended: %r", client.client_id, reader.exception())
            if outbox in client.outboxes:
                client.outboxes.remove(outbox)
                # Present a while longer (see CLIENT_PRESENT_S): a client whose stream broke
                # opens another, and acks what it holds meanwhile.
                client.last_seen = time.monotonic()

    @staticmethod
    def _open_stream(client: Client, outbox: "asyncio.Queue[pb.TelemetryCommand]") -> None:
        if outbox not in client.outboxes:
            client.outboxes.append(outbox)
            client.away = False

    async def _read_commands(
        self,
        client: Client,
        requests: AsyncIterator[pb.TelemetryCommand],
        outbox: "asyncio.Queue[pb.TelemetryCommand]",
        caller: Caller | None = None,
    ) -> None:
        async for command in requests:
            acl = self.broker.acl
            if caller is not None and acl is not None:
                refused = self.access.check(acl, caller, command)
                if refused is not None:
                    outbox.put_nowait(pb.TelemetryCommand(status=refused))
                    return
                self._open_stream(client, outbox)
            if command.HasField("settings"):
                outbox.put_nowait(
                    pb.TelemetryCommand(status=OK, settings=self._settings(client, command))
                )

    async def ask_producer(self, stored: StoredMessage, transaction_id: str) -> bool:
        """Asks a connected producer of a half message's topic to resolve it (RocketMQ's
        orphaned transaction recovery); False when none is connected."""
        topic = stored.property(transactions.REAL_TOPIC) or ""
        producers = [c for c in self.clients.values() if c.outboxes and c.publishes(topic)]
        if not producers:
            return False
        body = self._body("", stored)
        if body is None:
            return False
        message = messages.to_delivered(stored, Delivery("", 1, 0, body, 0, 0))
        message.topic.name = topic
        message.system_properties.message_type = pb.TRANSACTION
        message.system_properties.ClearField("receipt_handle")
        command = pb.TelemetryCommand(
            recover_orphaned_transaction_command=pb.RecoverOrphanedTransactionCommand(
                message=message, transaction_id=transaction_id
            )
        )
        random.choice(producers).outboxes[-1].put_nowait(command)
        return True

    def _settings(self, client: Client, command: pb.TelemetryCommand) -> pb.Settings:
        """Records a client's settings and answers them with the broker's part filled in."""
        settings = command.settings
        client.settings = settings
        if settings.HasField("client_type"):
            client.client_type = settings.client_type
        reply = pb.Settings()
        reply.CopyFrom(settings)
        reply.metric.on = False
        reply.metric.ClearField("endpoints")
        config = self.broker.config
        if settings.WhichOneof("pub_sub") == "publishing":
            reply.publishing.max_body_size = config.store.max_message_size
            reply.publishing.validate_message_type = True
            policy = reply.backoff_policy
            policy.max_attempts = PRODUCER_MAX_ATTEMPTS
            policy.exponential_backoff.initial.FromMilliseconds(10)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
        elif settings.WhichOneof("pub_sub") == "subscription":
            subscription = reply.subscription
            if subscription.HasField("group"):
                client.group = subscription.group.name
            group_settings = self.broker.group_config(client.group)
            subscription.fifo = group_settings.consume_message_orderly
            if not subscription.HasField("long_polling_timeout"):
                subscription.long_polling_timeout.FromSeconds(int(DEFAULT_LONG_POLLING_S))
            subscription.receive_batch_size = MAX_BATCH
            policy = reply.backoff_policy
            policy.max_attempts = group_settings.retry_max_times + 1
            policy.customized_backoff.ClearField("next")
            for ms in config.store.delay_levels_ms():
                policy.customized_backoff.next.add().FromMilliseconds(ms)
        return reply

    def _max_attempts(self, group: str) -> int:
        return self.broker.group_config(group).retry_max_times + 1

    # -- sending ---------------------------------------------------------------------------

    async def send_message(self, request: pb.SendMessageRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.SendMessageResponse(status=refused)
        if self._client(context) is None:
            return pb.SendMessageResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        if not request.messages:
            return pb.SendMessageResponse(
                status=_status(pb.MESSAGE_CORRUPTED, "the request holds no message")
            )
        topic = request.messages[0].topic
        if any(m.topic.name != topic.name for m in request.messages):
            return pb.SendMessageResponse(
                status=_status(pb.MESSAGE_CORRUPTED, "the messages name different topics")
            )
        config = self._topic(topic, create=True)
        if topic.name.startswith((RETRY_PREFIX, DLQ_PREFIX)) or topic.name == DEFAULT_TOPIC:
            config = _status(pb.ILLEGAL_TOPIC, f"topic {topic.name!r} takes no sends from clients")
        if isinstance(config, pb.Status):
            entries = [pb.SendResultEntry(status=config) for _ in request.messages]
            return pb.SendMessageResponse(status=config, entries=entries)
        born_host = _peer_address(self._peer(context))
        # As RocketMQ's proxy, which sends several as one batch: a handle only for one alone.
        single = len(request.messages) == 1
        results = [await self._send_one(m, config, born_host, single) for m in request.messages]
        codes = {entry.status.code for entry in results}
        top = results[0].status if len(codes) == 1 else _status(pb.MULTIPLE_RESULTS)
        return pb.SendMessageResponse(status=top, entries=results)

    async def _send_one(
        self, message: pb.Message, config: TopicConfig, born_host: str, single: bool
    ) -> pb.SendResultEntry:
        message_id = message.system_properties.message_id
        broker = self.broker
        if not config.perm & PERM_WRITE or config.write_queue_nums < 1:
            return pb.SendResultEntry(
                status=_status(pb.FORBIDDEN, f"topic {config.topic_name!r} is not writable"),
                message_id=message_id,
            )
        try:
            props = messages.checked_properties(
                message, broker.config.store.max_message_size, _now_ms()
            )
            sys_flag = messages.stored_sys_flag(message, MAX_INFLATED_BYTES)
        except SendCheckError as e:
            return pb.SendResultEntry(status=_status(e.code, str(e)), message_id=message_id)
        expected = config.message_type
        if expected != MIXED and not config.topic_name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            kind = messages.message_kind(message, props)
            if kind != expected:
                return pb.SendResultEntry(
                    status=_status(
                        pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                        f"topic {config.topic_name!r} takes {expected} messages, not {kind}",
                    ),
                    message_id=message_id,
                )
        group = props.get(messages.MESSAGE_GROUP)
        if group is not None:
            queue_id = messages.fifo_queue(group, config.write_queue_nums)
        else:
            queue_id = next(self._round_robin) % config.write_queue_nums
        store = broker.store
        transaction = message.system_properties.message_type == pb.TRANSACTION
        try:
            if transaction:
                # A half message, held back until EndTransaction; RocketMQ's proxy names the
                # topic as the producer group of gRPC producers.
                result = broker.transactions.prepare(
                    config.topic_name,
                    queue_id,
                    message.body,
                    props,
                    config.topic_name,
                    sys_flag=sys_flag,
                    born_host=born_host,
                )
                durable = await broker.durable(result)
            else:
                result, durable = await broker.put(
                    lambda: store.put(
                        config.topic_name,
                        message.body,
                        queue_id=queue_id,
                        properties=props,
                        sys_flag=sys_flag,
                        born_host=born_host,
                        wait_for_flush=False,
                    )
                )
        except MessageIllegalError as e:
            return pb.SendResultEntry(status=_status(pb.BAD_REQUEST, str(e)), message_id=message_id)
        except (DiskFullError, StoreClosedError) as e:
            return pb.SendResultEntry(
                status=_status(pb.INTERNAL_SERVER_ERROR, f"the broker cannot store now: {e}"),
                message_id=message_id,
            )
        except StoreError as e:
            log.error("store failed a gRPC send topic=%s: %s", config.topic_name, e)
            return pb.SendResultEntry(
                status=_status(pb.INTERNAL_SERVER_ERROR, str(e)), message_id=message_id
            )
        if not durable:
            return pb.SendResultEntry(
                status=_status(pb.MASTER_PERSISTENCE_TIMEOUT, "stored, but not flushed in time"),
                message_id=message_id,
                offset=result.queue_offset,
            )
        broker.stats_items.stored(
            config.topic_name, result.count, result.wrote_bytes, broker.config.broker_cluster_name
        )
        if (metrics := broker.metrics) is not None:
            kind = _MESSAGE_TYPES.get(message.system_properties.message_type, "normal")
            metrics.received(config.topic_name, kind, result.count, result.wrote_bytes)
        handle = None
        # Only a timer message, which a delivery time makes, has a handle.
        if single and messages.TIMER_DELIVER_MS in props:
            handle = recall_handle(
                broker.store, broker.config.broker_name, config.topic_name, result
            )
        return pb.SendResultEntry(
            status=OK,
            message_id=message_id,
            offset=result.queue_offset,
            # The half's offset message id: EndTransaction finds it by that.
            transaction_id=result.msg_id if transaction else "",
            recall_handle=handle or "",
        )

    async def end_transaction(self, request: pb.EndTransactionRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.EndTransactionResponse(status=refused)
        if self._client(context) is None:
            return pb.EndTransactionResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        if (refused := _check_topic(request.topic.name)) is not None:
            return pb.EndTransactionResponse(status=refused)
        if not request.transaction_id.strip():
            return pb.EndTransactionResponse(
                status=_status(pb.INVALID_TRANSACTION_ID, "no transaction id")
            )
        if request.resolution not in (COMMIT, ROLLBACK):
            # Not known yet: the half waits for the next check.
            return pb.EndTransactionResponse(status=OK)
        try:
            _, phy_offset = _core.decode_offset_msg_id(request.transaction_id)
            # gRPC halves are stored with their topic as producer group: a producer ends only
            # its own topic's, which the ACL checked it may publish to.
            result = self.broker.transactions.end(
                phy_offset,
                commit=request.resolution == COMMIT,
                message_id=request.message_id,
                producer_group=request.topic.name,
            )
        except (ValueError, TransactionError) as e:
            return pb.EndTransactionResponse(status=_status(pb.INVALID_TRANSACTION_ID, str(e)))
        except (StoreError, MessageIllegalError) as e:
            return pb.EndTransactionResponse(status=_status(pb.INTERNAL_SERVER_ERROR, str(e)))
        if not await self.broker.durable(result):
            return pb.EndTransactionResponse(
                status=_status(pb.MASTER_PERSISTENCE_TIMEOUT, "ended, but not flushed in time")
            )
        return pb.EndTransactionResponse(status=OK)

    async def recall_message(self, request: pb.RecallMessageRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.RecallMessageResponse(status=refused)
        if self._client(context) is None:
            return pb.RecallMessageResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        topic = request.topic.name
        if (refused := _check_topic(topic)) is not None:
            return pb.RecallMessageResponse(status=refused)
        try:
            handle = RecallHandle.decode(request.recall_handle)
        except RecallHandleError as e:
            return pb.RecallMessageResponse(status=_status(pb.INTERNAL_SERVER_ERROR, str(e)))
        broker = self.broker
        if handle.broker_name == broker.config.broker_name:
            outcome = await broker.recalls.recall(
                topic,
                request.recall_handle,
                producer_group=topic,
                born_host=_peer_address(self._peer(context)),
            )
        else:
            # A message of another broker: RocketMQ's proxy passes the recall on to it.
            outcome = await self.cluster.recall(topic, handle.broker_name, request.recall_handle)
        if outcome.code != ResponseCode.SUCCESS:
            status = _status(_recall_code(outcome.code), outcome.remark)
            return pb.RecallMessageResponse(status=status)
        return pb.RecallMessageResponse(status=OK, message_id=outcome.message_id)

    # -- receiving -------------------------------------------------------------------------

    def _pop_queue(
        self, group: str, topic: str, queue_id: int, *, start_at_min: bool = False
    ) -> PopQueue:
        key = (group, topic, queue_id)
        queue = self._queues.get(key)
        if queue is None:
            offsets = self.broker.offsets
            start = offsets.query(group, topic, queue_id)
            if start is None:
                start = (
                    self.broker.store.min_offset(topic, queue_id)
                    if start_at_min
                    else self._first_offset(topic, queue_id)
                )
                offsets.commit(group, topic, queue_id, start)
            queue = self._queues[key] = PopQueue(start)
        return queue

    def _first_offset(self, topic: str, queue_id: int) -> int:
        """Where a group new to a queue starts, as RocketMQ's pop does: a retry topic at its
        first message; another at 0 while the queue still starts there and its head is in
        memory (so nothing sent before the group's first receive is skipped), at its last
        message otherwise."""
        store = self.broker.store
        first = store.min_offset(topic, queue_id)
        if topic.startswith(RETRY_PREFIX):
            return first
        if first == 0 and not store.offset_in_disk(topic, queue_id, 0):
            return 0
        return max(0, store.max_offset(topic, queue_id) - 1)

    def _commit(self, group: str, topic: str, queue_id: int, queue: PopQueue) -> None:
        offsets = self.broker.offsets
        committed = queue.committed
        if offsets.query(group, topic, queue_id) != committed:
            offsets.commit(group, topic, queue_id, committed)

    def _read_one(self, topic: str, queue_id: int, offset: int) -> StoredMessage | None:
        result = self.broker.store.get(topic, queue_id, offset, max_count=1)
        if result.status is not GetMessageStatus.FOUND:
            return None
        stored = result.messages()[0]
        return stored if stored.queue_offset == offset else None

    def pop_now(self, r: "Receive") -> list[tuple[StoredMessage, Delivery]]:
        """Takes up to ``r.batch`` messages: due redeliveries first, then new ones, from the
        queue asked for or every readable queue of the topic, starting at a different queue
        each time."""
        self._dirty = True
        out = self._same_attempt(r)
        if not out:
            out = self._pop_queues(r)
        if r.attempt_id and out:
            # A redelivery of the same attempt gets new generations: a further repeat names
            # them.
            self._attempts[_attempt_key(r)] = (
                r.attempt_id,
                [(d.queue_id, stored.queue_offset, d.generation) for stored, d in out],
            )
        return out

    def _same_attempt(self, r: "Receive") -> list[tuple[StoredMessage, Delivery]]:
        """The deliveries of the client's last receive, again, if this receive repeats its
        attempt id and they are still the client's: that answer was lost on the way."""
        if not r.attempt_id:
            return []
        last = self._attempts.get(_attempt_key(r))
        if last is None or last[0] != r.attempt_id:
            return []
        now = time.monotonic()
        out: list[tuple[StoredMessage, Delivery]] = []
        for queue_id, offset, generation in last[1]:
            queue = self._queues.get((r.group, r.config.topic_name, queue_id))
            if queue is None:
                continue
            entry = queue.current(Receipt(queue_id, offset, generation), now)
            if entry is not None and entry.client_id == r.client.client_id:
                out += self._redeliver(r, queue_id, queue, [entry], 1, now, count=False)
        return out

    def _pop_queues(self, r: "Receive") -> list[tuple[StoredMessage, Delivery]]:
        queue_ids = self._queue_ids(r)
        if not queue_ids:
            return []
        start = next(self._round_robin) % len(queue_ids)
        queue_ids = queue_ids[start:] + queue_ids[:start]
        now = time.monotonic()
        present = self._present(now)
        topic = r.config.topic_name
        out: list[tuple[StoredMessage, Delivery]] = []
        for queue_id in queue_ids:
            queue = self._pop_queue(r.group, topic, queue_id, start_at_min=r.start_at_min)
            room = r.batch - len(out)
            if r.orderly:
                out += self._pop_orderly(r, queue_id, queue, room, now, present)
            else:
                out += self._redeliver(r, queue_id, queue, queue.due(now, present), room, now)
                room = r.batch - len(out)
                if room > 0:
                    out += self._pop_new(r, queue_id, queue, room, now)
            self._commit(r.group, topic, queue_id, queue)
            if len(out) >= r.batch:
                break
        return out

    def _queue_ids(self, r: "Receive") -> list[int]:
        readable = self.broker.queue_ids(r.config.read_queue_nums)
        if r.queue_id >= 0:
            return [r.queue_id] if r.queue_id in readable else []
        return list(readable)

    def _pop_orderly(
        self,
        r: "Receive",
        queue_id: int,
        queue: PopQueue,
        room: int,
        now: float,
        present: set[str],
    ) -> list[tuple[StoredMessage, Delivery]]:
        """An orderly group takes one batch of a queue at a time, as RocketMQ's proxy does:
        nothing more of the queue is delivered until every message of the batch is acked or
        forwarded, and a batch whose invisibility ran out comes back whole and first. So each
        message group is consumed in order, whatever groups a batch mixes."""
        if queue.inflight:
            due = sorted(queue.due(now, present), key=lambda e: e.offset)
            if len(due) < len(queue.inflight):
                return []
            return self._redeliver(r, queue_id, queue, due, room, now)
        return self._pop_new(r, queue_id, queue, room, now)

    def _redeliver(
        self,
        r: "Receive",
        queue_id: int,
        queue: PopQueue,
        entries: Iterable[InFlight],
        room: int,
        now: float,
        *,
        count: bool = True,
    ) -> list[tuple[StoredMessage, Delivery]]:
        """Delivers ``entries`` again, in order; one out of attempts goes to the DLQ instead.
        ``count=False`` sends a delivery again without counting an attempt."""
        topic = r.config.topic_name
        out: list[tuple[StoredMessage, Delivery]] = []
        for entry in entries:
            if len(out) >= room:
                break
            stored = self._read_one(topic, queue_id, entry.offset)
            if stored is None:
                # Gone to retention, or a deleted topic.
                queue.finish(entry.offset)
                continue
            if _stale(entry, stored):
                # The topic was deleted and made again: what the group had in flight is gone.
                self._forget_queue((r.group, topic, queue_id))
                break
            if count and _spent(entry, stored, r.max_attempts):
                if self._to_dead_letters(r.group, stored, entry.attempt):
                    queue.finish(entry.offset)
                continue
            body = stored.body if r.raw_bodies else self._body(r.group, stored)
            if body is None:
                if self._to_dead_letters(r.group, stored, entry.attempt):
                    queue.finish(entry.offset)
                continue
            generation = r.pop_time or next(self._generations)
            visible_at = now + r.hold_s
            queue.redelivered(
                entry,
                generation,
                visible_at,
                r.client.client_id,
                auto_renew=r.auto_renew if count else entry.auto_renew,
                count=count,
            )
            if _spent(entry, stored, r.max_attempts):
                self._watch((r.group, topic, queue_id), entry)
            out.append((stored, self._delivery(queue_id, entry, r.invisible_s, body)))
        return out

    def _pop_new(
        self, r: "Receive", queue_id: int, queue: PopQueue, room: int, now: float
    ) -> list[tuple[StoredMessage, Delivery]]:
        store = self.broker.store
        topic = r.config.topic_name
        result = store.get(topic, queue_id, queue.cursor, max_count=room, tags=r.expression)
        status = result.status
        if status is GetMessageStatus.FOUND:
            out = []
            cursor = result.next_begin_offset
            for stored in result.messages():
                if r.sql is not None and not r.sql.matches(stored.properties):
                    # Not this group's: read past, as the store reads past other tags.
                    continue
                body = stored.body if r.raw_bodies else self._body(r.group, stored)
                if body is None:
                    if self._to_dead_letters(r.group, stored, 0):
                        continue
                    # The DLQ refused it (a full disk): the queue waits at it.
                    cursor = stored.queue_offset
                    break
                entry = queue.delivered(
                    stored.queue_offset,
                    r.pop_time or next(self._generations),
                    now + r.hold_s,
                    r.client.client_id,
                    auto_renew=r.auto_renew,
                    phy_offset=stored.phy_offset,
                )
                if _spent(entry, stored, r.max_attempts):
                    self._watch((r.group, topic, queue_id), entry)
                out.append((stored, self._delivery(queue_id, entry, r.invisible_s, body)))
            queue.moved_cursor(cursor)
            return out
        if status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and result.next_begin_offset < (
            queue.cursor
        ):
            # The queue is behind the group: the topic was deleted and made again.
            queue.reset(result.next_begin_offset)
        else:
            # Past messages the filter does not take, or gone to retention. What is in flight
            # below stays so: it is still to be acked.
            queue.moved_cursor(result.next_begin_offset)
        return []

    @staticmethod
    def _body(group: str, stored: StoredMessage) -> bytes | None:
        """The body a 5.x client gets, inflated (zlib, LZ4 or Zstandard): the client takes
        gzip only, and one body it cannot decode fails its whole receive. None for a body
        that does not inflate, which then belongs in the group's DLQ (read from a DLQ, such a
        body comes as stored)."""
        if not stored.sys_flag & SYSFLAG_COMPRESSED:
            return stored.body
        try:
            return _core.inflate_body(stored.body, stored.sys_flag, MAX_INFLATED_BYTES)
        except MessageBodyError as e:
            if stored.topic.startswith(DLQ_PREFIX):
                # The end of the line: whoever drains a DLQ gets the bytes as stored.
                return stored.body
            log.error(
                "message %s:%d for %s cannot be delivered over gRPC (%s); it goes to the DLQ",
                stored.topic,
                stored.queue_offset,
                group,
                e,
            )
            return None

    @staticmethod
    def _delivery(queue_id: int, entry: InFlight, invisible_s: float, body: bytes) -> Delivery:
        handle = Receipt(queue_id, entry.offset, entry.generation).encode()
        return Delivery(handle, entry.attempt, invisible_s, body, queue_id, entry.generation)

    def _to_dead_letters(self, group: str, stored: StoredMessage, attempts: int) -> bool:
        """Copies a message that used up its attempts to ``%DLQ%<group>``; False if the store
        refused it (the message then stays where it is, to be tried again)."""
        broker = self.broker
        topic = DLQ_PREFIX + group
        _, created = broker.topics.create_system(topic, 1, PERM_READ | PERM_WRITE)
        if created:
            broker.request_registration(topic)
        props = dict(stored.properties)
        origin_id = props.get(UNIQ_KEY) or stored.msg_id
        props.setdefault(messages.DLQ_ORIGIN_TOPIC, stored.topic)
        props.setdefault(messages.DLQ_ORIGIN_MESSAGE_ID, origin_id)
        # What RocketMQ's send-back, which makes every dead letter there, names: tools that
        # send dead letters back read them.
        props.setdefault(RETRY_TOPIC, stored.topic)
        props.setdefault(ORIGIN_MESSAGE_ID, origin_id)
        props.pop(RECONSUME_TIME, None)
        try:
            broker.put_now(
                lambda: broker.store.put(
                    topic,
                    stored.body,
                    queue_id=0,
                    properties=props,
                    flag=stored.flag,
                    sys_flag=stored.sys_flag,
                    born_timestamp_ms=stored.born_timestamp_ms,
                    born_host=stored.born_host,
                    reconsume_times=stored.reconsume_times + attempts,
                    internal=True,
                    wait_for_flush=False,
                )
            )
        except (StoreError, MessageIllegalError) as e:
            log.error("moving %s:%d to %s failed: %s", stored.topic, stored.queue_offset, topic, e)
            return False
        if (metrics := broker.metrics) is not None:
            metrics.dead_lettered(stored.topic, group)
        log.info(
            "message %s of %s moved to %s after %d attempts",
            props[messages.DLQ_ORIGIN_MESSAGE_ID],
            stored.topic,
            topic,
            attempts,
        )
        return True

    def _wake(self, group: str, topic: str) -> None:
        for event in self._waiters.get((group, topic), ()):
            event.set()

    async def _wait(self, r: "Receive", timeout_s: float) -> None:
        """Waits until a message may have arrived on a queue the receive reads, a message of
        the group became visible again or an orderly queue's batch was finished, or
        ``timeout_s`` passed."""
        broker = self.broker
        event = asyncio.Event()
        topic = r.config.topic_name
        key = (r.group, topic)
        self._waiters.setdefault(key, set()).add(event)
        deadline = broker.loop.time() + timeout_s
        held = []
        try:
            for queue_id in self._queue_ids(r):
                queue = self._pop_queue(r.group, topic, queue_id)
                pull = HeldPull(topic, queue_id, queue.cursor, r.expression, deadline, event.set)
                held.append(broker.hold.hold(pull))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            for pull_id in held:
                broker.hold.cancel(pull_id)
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    def _next_visible_in(self, r: "Receive", now: float) -> float | None:
        """Seconds until something in flight on the queues ``r`` reads may be delivered again:
        a message of a normal group, a whole batch of an orderly one. None if nothing will be
        (what is due already and was not taken waits for another wake-up, not a spin)."""
        times = []
        for queue_id in self._queue_ids(r):
            queue = self._queues.get((r.group, r.config.topic_name, queue_id))
            if queue is None:
                continue
            at = queue.batch_visible_at() if r.orderly else queue.next_visible_at(after=now)
            if at is not None and at > now:
                times.append(at)
        return min(times) - now if times else None

    async def receive_message(
        self, request: pb.ReceiveMessageRequest, context: Any
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            r: Receive | pb.Status = refused
        else:
            r = self._check_receive(request, self._client(context))
        if isinstance(r, pb.Status):
            yield pb.ReceiveMessageResponse(status=r)
            yield pb.ReceiveMessageResponse(delivery_timestamp=messages.timestamp(_now_ms()))
            return
        remaining = context.time_remaining()
        window = DEFAULT_LONG_POLLING_S
        if request.HasField("long_polling_timeout"):
            window = min(messages.duration_s(request.long_polling_timeout), MAX_LONG_POLLING_S)
        if remaining is not None:
            window = min(window, remaining - DEADLINE_MARGIN_S)
        topic = r.config.topic_name
        popped = self.pop_now(r) or await self.pop_later(r, window)
        if popped and (on_cancelled := getattr(context, "on_cancelled", None)) is not None:
            # Handed to the transport is not yet delivered: a client that leaves before the
            # answer is out never got these.
            on_cancelled(lambda: self._release(r.group, topic, popped))
        try:
            if not popped:
                yield pb.ReceiveMessageResponse(status=NOT_FOUND)
            else:
                nbytes = sum(stored.store_size for stored, _ in popped)
                self.broker.stats_items.delivered(
                    r.config.topic_name,
                    r.group,
                    len(popped),
                    nbytes,
                    self.broker.config.broker_cluster_name,
                )
                if (metrics := self.broker.metrics) is not None:
                    metrics.delivered(r.config.topic_name, r.group, len(popped), nbytes)
                yield pb.ReceiveMessageResponse(status=OK)
                for stored, delivery in popped:
                    yield pb.ReceiveMessageResponse(message=messages.to_delivered(stored, delivery))
            yield pb.ReceiveMessageResponse(delivery_timestamp=messages.timestamp(_now_ms()))
        except BaseException:
            # The client is gone (deadline, cancel): what it did not get is visible again.
            self._release(r.group, topic, popped)
            raise

    async def pop_later(
        self, r: "Receive", window_s: float
    ) -> list[tuple[StoredMessage, Delivery]]:
        """Pops for ``r`` once something can be delivered, within ``window_s``, after a
        :meth:`pop_now` found nothing. A 4.x pop's deliveries take a pop time from when they
        are made (their ``generation``)."""
        loop = self.broker.loop
        end = loop.time() + max(0.0, window_s)
        popped: list[tuple[StoredMessage, Delivery]] = []
        while not popped:
            left = end - loop.time()
            if left <= 0:
                break
            visible_in = self._next_visible_in(r, time.monotonic())
            if visible_in is not None:
                left = min(left, visible_in + 0.001)
            await self._wait(r, left)
            if r.pop_time:
                # A pop's time is when it delivers, as a 4.x client counts the invisible
                # time from it.
                r = dataclasses.replace(r, pop_time=self.next_pop_time())
            popped = self.pop_now(r)
        return popped

    def _release(
        self, group: str, topic: str, popped: Iterable[tuple[StoredMessage, Delivery]]
    ) -> None:
        self._dirty = True
        now = time.monotonic()
        for stored, delivery in popped:
            queue = self._queues.get((group, topic, delivery.queue_id))
            if queue is None:
                continue
            receipt = Receipt(delivery.queue_id, stored.queue_offset, delivery.generation)
            entry = queue.current(receipt, now)
            if entry is not None:
                # Never delivered: the next delivery is no new attempt.
                queue.given_back(entry, now)
        self._wake(group, topic)

    def _check_receive(
        self, request: pb.ReceiveMessageRequest, client: Client | None
    ) -> "Receive | pb.Status":
        if client is None:
            return _status(pb.CLIENT_ID_REQUIRED)
        group = request.group.name
        group_status = _check_group(group)
        if group_status is not None:
            return group_status
        config = self._topic(request.message_queue.topic, create=False)
        if isinstance(config, pb.Status):
            return config
        if not config.perm & PERM_READ:
            return _status(pb.FORBIDDEN, f"topic {config.topic_name!r} is not readable")
        filter_expression = request.filter_expression
        sql = None
        if filter_expression.type == pb.SQL:
            if not self.broker.config.enable_property_filter:
                return _status(
                    pb.ILLEGAL_FILTER_EXPRESSION,
                    "this broker does not filter by SQL92 (enablePropertyFilter is off)",
                )
            try:
                sql = parse_cached(filter_expression.expression)
            except SqlFilterError as e:
                return _status(pb.ILLEGAL_FILTER_EXPRESSION, f"bad SQL92 filter: {e}")
        elif not _names_tags(filter_expression.expression):
            return _status(
                pb.ILLEGAL_FILTER_EXPRESSION,
                f"tag expression {filter_expression.expression!r} names no tag",
            )
        if request.auto_renew:
            invisible_s = AUTO_RENEW_INVISIBLE_S
        else:
            invisible_s = messages.duration_s(request.invisible_duration)
            if not MIN_INVISIBLE_S <= invisible_s <= MAX_INVISIBLE_S:
                return _status(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {invisible_s:g} s is outside "
                    f"[{MIN_INVISIBLE_S:g} s, {MAX_INVISIBLE_S:g} s]",
                )
        settings = self.broker.group_config(group)
        orderly = settings.consume_message_orderly
        return Receive(
            client=client,
            group=group,
            config=config,
            # The store filters by tag; a SQL92 filter takes what it reads.
            expression="*" if sql else filter_expression.expression.strip() or "*",
            sql=sql,
            batch=min(max(request.batch_size, 1), MAX_BATCH),
            invisible_s=invisible_s,
            auto_renew=request.auto_renew,
            # A group pops from every queue of the broker, whatever queue the client named
            # (RocketMQ's proxy does the same), but for a push consumer of an orderly group,
            # which is assigned queue by queue. A simple consumer names a queue at random.
            queue_id=request.message_queue.id if orderly and _pushes(client, request) else -1,
            attempt_id=request.attempt_id,
            orderly=orderly,
            max_attempts=settings.retry_max_times + 1,
        )

    def _finish(self, group: str, topic: str, queue_id: int, queue: PopQueue, offset: int) -> None:
        """A message is acked or forwarded: commit what that allows, and let a receive of an
        orderly group that waits on the queue's batch take the next one."""
        self._dirty = True
        queue.finish(offset)
        self._commit(group, topic, queue_id, queue)
        if not queue.inflight:
            self._wake(group, topic)

    def _watch(self, key: PopKey, entry: InFlight) -> None:
        """Moves ``entry`` to the DLQ when it comes due if it is out of deliveries then, as
        RocketMQ's revive does, whether or not a consumer is there to receive it."""
        delay = max(0.0, entry.visible_at - time.monotonic())
        self.broker.loop.call_later(delay, self._came_due, key, entry.offset, entry.generation)

    def _came_due(self, key: PopKey, offset: int, generation: int) -> None:
        queue = self._queues.get(key)
        entry = None if queue is None else queue.inflight.get(offset)
        if queue is None or entry is None or entry.generation != generation:
            return  # acked, or delivered or nacked again since
        if entry.visible_at > time.monotonic():
            self._watch(key, entry)
            return
        group, topic, queue_id = key
        stored = self._read_one(topic, queue_id, offset)
        if stored is not None and _stale(entry, stored):
            self._forget_queue(key)
            return
        if (
            stored is not None
            and _spent(entry, stored, self._max_attempts(group))
            and self._to_dead_letters(group, stored, entry.attempt)
        ):
            self._finish(group, topic, queue_id, queue, offset)

    def _forget_queue(self, key: PopKey, why: str = "the topic was deleted") -> None:
        """Drops a group's state of a queue whose topic, or the group's offsets, were deleted:
        the group reads it anew from where a new group starts."""
        if self._queues.pop(key, None) is not None:
            log.info("%s forgets what it had in flight on %s:%d: %s", *key, why)
            self._dirty = True

    def forget_topic(self, topic: str) -> None:
        """A deleted topic: every group's in-flight state on it goes."""
        for key in [k for k in self._queues if k[1] == topic]:
            self._forget_queue(key)
        for attempt in [k for k in self._attempts if k[2] == topic]:
            del self._attempts[attempt]

    def forget_group(self, group: str) -> None:
        """A group deleted with its offsets: its in-flight state goes too."""
        for key in [k for k in self._queues if k[0] == group]:
            self._forget_queue(key, "its offsets were deleted")
        for attempt in [k for k in self._attempts if k[1] == group]:
            del self._attempts[attempt]

    def restore(self, path: Path) -> None:
        """Takes up what the groups had in flight when the broker last stopped, and keeps it in
        ``path`` from now on (:meth:`persist_loop`, :meth:`save`). Call once the store is
        open."""
        self._state_path = path
        offsets = self.broker.offsets
        top = 0
        restored = 0
        for key, queue in pop_state.load(path, renew_grace_s=AUTO_RENEW_INVISIBLE_S).items():
            if key in self._queues:
                continue
            group, topic, queue_id = key
            committed = offsets.query(group, topic, queue_id)
            if committed is not None:
                # Acked after the state was written: the offsets were written later.
                for offset in [o for o in queue.inflight if o < committed]:
                    queue.finish(offset)
                queue.cursor = max(queue.cursor, committed)
            self._queues[key] = queue
            for entry in queue.inflight.values():
                top = max(top, entry.generation)
                self._watch(key, entry)
                restored += 1
            self._commit(group, topic, queue_id, queue)
        self._generations = new_generations(after=top)
        self._last_pop_time = max(
            (g for q in self._queues.values() for g in _pop_times(q)), default=0
        )
        if restored:
            log.info("gRPC groups have %d messages in flight from before the restart", restored)

    async def persist_loop(self, period_s: float) -> None:
        """Writes the in-flight state every ``period_s`` while it changes (encoded here in
        slices, written on a thread)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period_s)
            path = self._state_path
            if path is None or not self._dirty:
                continue
            self._dirty = False
            data = await self._encoder.encode_in_slices(self._queues)
            try:
                await loop.run_in_executor(None, pop_state.write, path, data)
            except OSError as e:
                self._dirty = True
                log.error("writing the gRPC groups' in-flight state failed: %s", e)

    def save(self) -> None:
        """Writes the in-flight state now (at a clean stop)."""
        if self._state_path is not None:
            pop_state.write(self._state_path, self._encoder.encode(self._queues))
            self._dirty = False

    def _in_flight(
        self, group: str, topic: str, handle: str
    ) -> tuple[PopQueue, InFlight, Receipt] | pb.Status:
        receipt = Receipt.parse(handle)
        queue = None if receipt is None else self._queues.get((group, topic, receipt.queue_id))
        entry = (
            None if queue is None or receipt is None else queue.current(receipt, time.monotonic())
        )
        if entry is None or queue is None or receipt is None:
            return _status(
                pb.INVALID_RECEIPT_HANDLE,
                "the receipt handle is unknown, expired, or replaced by a later one",
            )
        return queue, entry, receipt

    async def ack_message(self, request: pb.AckMessageRequest, context: Any) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.AckMessageResponse(status=refused)
        if self._client(context) is None:
            return pb.AckMessageResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        group, topic = request.group.name, request.topic.name
        if (refused := _check_topic(topic) or _check_group(group)) is not None:
            return pb.AckMessageResponse(status=refused)
        results = []
        for ack in request.entries:
            found = self._in_flight(group, topic, ack.receipt_handle)
            if isinstance(found, pb.Status):
                status = found
            else:
                queue, entry, receipt = found
                self._finish(group, topic, receipt.queue_id, queue, entry.offset)
                status = OK
            results.append(
                pb.AckMessageResultEntry(
                    message_id=ack.message_id, receipt_handle=ack.receipt_handle, status=status
                )
            )
        if not results:
            return pb.AckMessageResponse(status=_status(pb.BAD_REQUEST, "no entry to ack"))
        codes = {r.status.code for r in results}
        top = results[0].status if len(codes) == 1 else _status(pb.MULTIPLE_RESULTS)
        return pb.AckMessageResponse(status=top, entries=results)

    async def change_invisible_duration(
        self, request: pb.ChangeInvisibleDurationRequest, context: Any
    ) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.ChangeInvisibleDurationResponse(status=refused)
        if self._client(context) is None:
            return pb.ChangeInvisibleDurationResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        seconds = messages.duration_s(request.invisible_duration)
        if not 0 <= seconds <= MAX_INVISIBLE_S:
            return pb.ChangeInvisibleDurationResponse(
                status=_status(
                    pb.ILLEGAL_INVISIBLE_TIME,
                    f"invisible duration {seconds:g} s is outside [0 s, {MAX_INVISIBLE_S:g} s]",
                )
            )
        group, topic = request.group.name, request.topic.name
        if (refused := _check_topic(topic) or _check_group(group)) is not None:
            return pb.ChangeInvisibleDurationResponse(status=refused)
        found = self._in_flight(group, topic, request.receipt_handle)
        if isinstance(found, pb.Status):
            return pb.ChangeInvisibleDurationResponse(status=found)
        _, entry, receipt = found
        self._hide(group, topic, receipt.queue_id, entry, next(self._generations), seconds)
        handle = Receipt(receipt.queue_id, entry.offset, entry.generation).encode()
        return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=handle)

    def _hide(
        self,
        group: str,
        topic: str,
        queue_id: int,
        entry: InFlight,
        generation: int,
        seconds: float,
    ) -> None:
        """Makes ``entry`` come back ``seconds`` from now, under ``generation``."""
        queue = self._queues[(group, topic, queue_id)]
        self._dirty = True
        queue.hidden(entry, generation, time.monotonic() + seconds)
        # As in RocketMQ, a message out of deliveries goes to the DLQ when it comes due, not
        # now: the client may be extending the one it is still working on, and acks it later.
        stored = self._read_one(topic, queue_id, entry.offset)
        if stored is not None and _spent(entry, stored, self._max_attempts(group)):
            self._watch((group, topic, queue_id), entry)
        # A receive waiting on this group re-checks when the message comes due.
        self._wake(group, topic)

    # -- the 4.x protocol's pop (pyrmq.broker.processors.pop) ------------------------------

    def next_pop_time(self) -> int:
        """A pop time for one 4.x-protocol pop: the clock in ms, but above every one given
        before, so that it tells this pop's deliveries from any other's (it is their
        generation). Far below the gRPC handles' generations, which count microseconds."""
        self._last_pop_time = max(time.time_ns() // 1_000_000, self._last_pop_time + 1)
        return self._last_pop_time

    def _delivered_at(
        self, group: str, topic: str, queue_id: int, offset: int, pop_time: int
    ) -> InFlight | None:
        queue = self._queues.get((group, topic, queue_id))
        if queue is None:
            return None
        return queue.latest(Receipt(queue_id, offset, pop_time))

    def ack(self, group: str, topic: str, queue_id: int, offset: int, pop_time: int) -> bool:
        """Ends the delivery of a message that a pop at ``pop_time`` (or a change of its
        invisible time) made, also once its invisible time ran out, until it is delivered
        again; True too for a message that is done already. False if that is not the
        message's latest delivery."""
        entry = self._delivered_at(group, topic, queue_id, offset, pop_time)
        if entry is None:
            queue = self._queues.get((group, topic, queue_id))
            # Below the cursor and not in flight: acked (or read past) already.
            return queue is not None and offset < queue.cursor and offset not in queue.inflight
        self._finish(group, topic, queue_id, self._queues[(group, topic, queue_id)], offset)
        return True

    def change_invisible(
        self, group: str, topic: str, queue_id: int, offset: int, pop_time: int, seconds: float
    ) -> int | None:
        """Makes a message delivered at ``pop_time`` come back ``seconds`` from now; returns
        the pop time of its new handle, None as :meth:`ack` refuses."""
        entry = self._delivered_at(group, topic, queue_id, offset, pop_time)
        if entry is None:
            return None
        new_pop_time = self.next_pop_time()
        self._hide(group, topic, queue_id, entry, new_pop_time, seconds)
        return new_pop_time

    def rest(self, r: Receive) -> int:
        """Messages not yet read in the queues ``r`` pops from."""
        store, topic = self.broker.store, r.config.topic_name
        total = 0
        for queue_id in self._queue_ids(r):
            queue = self._queues.get((r.group, topic, queue_id))
            if queue is not None:
                total += max(0, store.max_offset(topic, queue_id) - queue.cursor)
        return total

    async def forward_message_to_dead_letter_queue(
        self, request: pb.ForwardMessageToDeadLetterQueueRequest, context: Any
    ) -> Any:
        if self.broker.acl is not None and (refused := self._refused(request, context)) is not None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=refused)
        if self._client(context) is None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=_status(pb.CLIENT_ID_REQUIRED))
        group, topic = request.group.name, request.topic.name
        if (refused := _check_topic(topic) or _check_group(group)) is not None:
            return pb.ForwardMessageToDeadLetterQueueResponse(status=refused)
        found = self._in_flight(group, topic, request.receipt_handle)
        if isinstance(found, pb.Status):
            return pb.ForwardMessageToDeadLetterQueueResponse(status=found)
        queue, entry, receipt = found
        stored = self._read_one(topic, receipt.queue_id, entry.offset)
        if stored is not None and not self._to_dead_letters(group, stored, entry.attempt):
            return pb.ForwardMessageToDeadLetterQueueResponse(
                status=_status(pb.INTERNAL_SERVER_ERROR, "the dead-letter queue refused it")
            )
        self._finish(group, topic, receipt.queue_id, queue, entry.offset)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # -- introspection ---------------------------------------------------------------------

    def pop_position(self, group: str, topic: str, queue_id: int) -> tuple[int, int, int]:
        """(committed offset, next offset to read, messages in flight) of the group's queue;
        for one it has not received from, where its first receive would start."""
        queue = self._queues.get((group, topic, queue_id))
        if queue is not None:
            return queue.committed, queue.cursor, len(queue.inflight)
        start = self.broker.offsets.query(group, topic, queue_id)
        if start is None:
            start = self._first_offset(topic, queue_id)
        return start, start, 0


# The message_type label of each gRPC message type (RocketMQ's metrics values).
_MESSAGE_TYPES = {pb.FIFO: "fifo", pb.DELAY: "delay", pb.TRANSACTION: "transaction"}


def _pop_times(queue: PopQueue) -> Iterator[int]:
    """The generations of ``queue``'s deliveries that are 4.x-protocol pop times."""
    return (e.generation for e in queue.inflight.values() if e.generation < POP_TIME_LIMIT)


def _recall_code(code: int) -> "pb.Code":
    """RocketMQ's proxy's status for a broker's answer to a recall."""
    if code == ResponseCode.TOPIC_NOT_EXIST:
        return pb.TOPIC_NOT_FOUND
    if code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED:
        return pb.NOT_IMPLEMENTED
    if code == ResponseCode.SYSTEM_BUSY:
        return pb.TOO_MANY_REQUESTS
    return pb.INTERNAL_SERVER_ERROR


def _check_topic(name: str) -> pb.Status | None:
    """RocketMQ's proxy takes a valid name of no system topic, in every call naming one."""
    try:
        _core.validate_topic(name)
    except SystemTopicError:
        return _status(pb.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")
    except MessageIllegalError as e:
        return _status(pb.ILLEGAL_TOPIC, str(e))
    if is_system_topic(name):
        return _status(pb.ILLEGAL_TOPIC, f"topic {name!r} is a system topic")
    return None


def _check_group(group: str) -> pb.Status | None:
    try:
        check_group_name(group)
    except MessageIllegalError as e:
        return _status(pb.ILLEGAL_CONSUMER_GROUP, f"consumer group {group!r}: {e}")
    if group.startswith(SYSTEM_GROUP_PREFIX):
        return _status(pb.ILLEGAL_CONSUMER_GROUP, f"consumer group {group!r} is the broker's own")
    return None


def _pushes(client: Client, request: pb.ReceiveMessageRequest) -> bool:
    """Whether a receive comes from a push consumer (which has its invisibility renewed)."""
    return client.client_type == pb.PUSH_CONSUMER or request.auto_renew


def _names_tags(expression: str) -> bool:
    """Whether a tag expression takes every tag (``*`` or nothing) or names one: RocketMQ's
    proxy refuses ``||`` and the like."""
    text = expression.strip()
    return text in ("", "*") or any(tag.strip() for tag in text.split("||"))


def _attempt_key(r: Receive) -> tuple[str, str, str, int]:
    return (r.client.client_id, r.group, r.config.topic_name, r.queue_id)


def _spent(entry: InFlight, stored: StoredMessage, max_attempts: int) -> bool:
    """Whether the delivery ``entry`` counts is the message's last: when it comes due again,
    it goes to the DLQ."""
    return entry.attempt + stored.reconsume_times >= max_attempts


def _stale(entry: InFlight, stored: StoredMessage) -> bool:
    """Whether ``stored``, read at ``entry``'s queue offset, is another message than the one
    delivered (a topic deleted and made again numbers its queues from 0 again)."""
    return entry.phy_offset >= 0 and stored.phy_offset != entry.phy_offset


def _same(peer: str) -> str:
    return peer


@functools.lru_cache(maxsize=4096)
def _peer_address(peer: str) -> str:
    """``ip:port`` of a gRPC peer, as stored messages name their sender: IPv4 only (a peer
    with no IPv4 address as ``127.0.0.1:0``)."""
    endpoint = peer_endpoint(peer)
    if endpoint is None or ":" in endpoint[0]:
        return "127.0.0.1:0"
    return f"{endpoint[0]}:{endpoint[1]}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
