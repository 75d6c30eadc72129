"""BrokerController: wires the store, tables, processors and services; owns start/stop order."""

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path

from pyrmq.acl.plain import POLL_INTERVAL_S, AclError, AclFile
from pyrmq.broker.access import RemotingAccess, acl_file_path
from pyrmq.broker.clients import ClientTable
from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.metrics import BrokerMetrics, MetricsEndpoint
from pyrmq.broker.processors.acl import AclProcessor
from pyrmq.broker.processors.admin import AdminProcessor
from pyrmq.broker.processors.assignment import AssignmentProcessor
from pyrmq.broker.processors.cleanup import CleanupProcessor
from pyrmq.broker.processors.client_manage import ClientManageProcessor
from pyrmq.broker.processors.config import ConfigProcessor
from pyrmq.broker.processors.connections import ConnectionsProcessor
from pyrmq.broker.processors.consumer_calls import ConsumerCallsProcessor
from pyrmq.broker.processors.consumer_manage import ConsumerManageProcessor
from pyrmq.broker.processors.groups import GroupProcessor
from pyrmq.broker.processors.pop import PopProcessor
from pyrmq.broker.processors.pull import PullProcessor
from pyrmq.broker.processors.recall import RecallProcessor
from pyrmq.broker.processors.reply import ReplyProcessor
from pyrmq.broker.processors.send import SendProcessor
from pyrmq.broker.processors.stats import StatsProcessor
from pyrmq.broker.processors.transactions import EndTransactionProcessor
from pyrmq.broker.services.ha_master import HAService
from pyrmq.broker.services.ha_slave import HAClient, SlaveSync
from pyrmq.broker.services.hold import PullHoldService
from pyrmq.broker.services.stats import BrokerStats
from pyrmq.broker.services.stats_items import Period, StatsItems
from pyrmq.broker.services.transactions import TransactionService
from pyrmq.broker.state.groups import GroupConfig, GroupTable
from pyrmq.broker.state.offsets import OffsetTable
from pyrmq.broker.state.queue_locks import QueueLockTable
from pyrmq.broker.state.request_modes import RequestModes
from pyrmq.broker.state.topics import PERM_READ, PERM_WRITE, TopicConfig, TopicTable
from pyrmq.errors import ConfigError, PyrmqError, RemotingError
from pyrmq.proxy.server import GrpcServer
from pyrmq.proxy.service import MessagingService
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.headers import RegisterBrokerRequestHeader, UnregisterBrokerRequestHeader
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.remoting.tls import TlsMode
from pyrmq.store import FlushWaiter, MessageStore, PutResult

__all__ = ["BrokerController"]

log = logging.getLogger(__name__)

# Client liveness is checked this often (RocketMQ's ClientHousekeepingService: 10 s).
CLIENT_SCAN_INTERVAL_S = 10.0
# Held pulls are re-checked this often (5 s; 1 s without long polling).
HOLD_CHECK_INTERVAL_S = 5.0
SHORT_POLLING_CHECK_INTERVAL_S = 1.0
# A slave whose master is not registered registers again this soon, to learn of it.
SLAVE_REGISTER_RETRY_S = 5.0


class BrokerController:
    """One RocketMQ broker on asyncio over an embedded :class:`MessageStore`."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # Clients reach it at brokerIP1 (stored messages name it); it listens on bindAddress.
        self.server = RemotingServer(
            config.listen_host, config.listen_port, max_idle_s=config.server_channel_max_idle_s
        )
        self.clients = ClientTable()
        # Name servers and peer brokers (whose ACLs may want this broker's own account).
        self.namesrv = RemotingClient(credentials=config.inner_credentials)
        self._root = Path(config.store.store_path_root_dir).expanduser()
        self.topics = TopicTable(
            self._root / "config" / "topics.json",
            auto_create_topic_enable=config.auto_create_topic_enable,
            default_topic_queue_nums=config.default_topic_queue_nums,
            cluster_name=config.broker_cluster_name,
            broker_name=config.broker_name,
            cluster_topic_enable=config.cluster_topic_enable,
            broker_topic_enable=config.broker_topic_enable,
        )
        self.offsets = OffsetTable(self._root / "config" / "consumerOffset.json")
        self.queue_locks = QueueLockTable(self._root / "config" / "queueLocks.json")
        self.groups = GroupTable(self._root / "config" / "subscriptionGroup.json")
        self.request_modes = RequestModes(self._root / "config" / "messageRequestMode.json")
        self.transactions = TransactionService(self, self._root / "config" / "transactions.json")
        self.stats = BrokerStats()
        self.stats_items = StatsItems()
        self._store: MessageStore | None = None
        self._hold: PullHoldService | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Set once a start has finished, cleared by the stop that follows it.
        self._running = False
        self._register_now = asyncio.Event()
        # What the next registration carries: the topics named since the last one, or (None)
        # the whole table.
        self._register_topics: set[str] | None = set()
        self._offsets_write: asyncio.Future[None] | None = None
        self._flushes: FlushWaiter | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.grpc: GrpcServer | None = None
        # A master serves its slaves; a slave follows its master.
        self.ha: HAService | None = None
        self.ha_client: HAClient | None = None
        self.slave_sync: SlaveSync | None = None
        if config.is_slave:
            self.ha_client = HAClient(self)
            self.slave_sync = SlaveSync(self)
        # Accounts and permissions of the plain ACL, read at start; None when requests are
        # not checked.
        self.acl: AclFile | None = None
        # What pop consumers (gRPC's and 4.x's) hold in flight, with the gRPC front's calls.
        self.pops = MessagingService(self, config.grpc_server_port)
        if config.grpc_server_port >= 0:
            self.grpc = GrpcServer(self, config.listen_host, config.grpc_server_port)
        self.metrics: BrokerMetrics | None = None
        self._metrics_endpoint: MetricsEndpoint | None = None
        if config.metrics_exporter_type == "PROM":
            self.metrics = BrokerMetrics(self)
            self.server.rpc_observer = self.metrics.rpc
        self.pulls = PullProcessor(self)
        self.recalls = RecallProcessor(self)
        self.clients.on_consumer_left.append(self.pulls.client_left)
        sends = SendProcessor(self)
        for processor in (
            sends,
            ReplyProcessor(self, sends),
            self.pulls,
            ClientManageProcessor(self),
            ConnectionsProcessor(self),
            ConsumerManageProcessor(self),
            ConsumerCallsProcessor(self),
            GroupProcessor(self),
            AdminProcessor(self),
            CleanupProcessor(self),
            AclProcessor(self),
            StatsProcessor(self),
            ConfigProcessor(self),
            EndTransactionProcessor(self),
            self.recalls,
            PopProcessor(self),
            AssignmentProcessor(self),
        ):
            processor.install(self.server)
        self.server.on_disconnect.append(self._client_disconnected)

    @property
    def store(self) -> MessageStore:
        assert self._store is not None, "the broker is not started"
        return self._store

    @property
    def hold(self) -> PullHoldService:
        assert self._hold is not None, "the broker is not started"
        return self._hold

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The broker's event loop (looked up once: on 3.11 each lookup is a system call)."""
        assert self._loop is not None, "the broker is not started"
        return self._loop

    @property
    def address(self) -> str:
        return f"{self.config.broker_ip1}:{self.server.port}"

    @property
    def ha_address(self) -> str:
        """Where slaves reach a master's HA port."""
        port = self.ha.port if self.ha is not None else self.server.port + 1
        return f"{self.config.broker_ip1}:{port}"

    @property
    def grpc_address(self) -> str | None:
        """Where RocketMQ 5 clients reach the broker, when it serves them."""
        return None if self.grpc is None else f"{self.config.broker_ip1}:{self.grpc.port}"

    def group_config(self, group: str) -> GroupConfig:
        """A group's settings: those an operator set, or RocketMQ's defaults with the broker's
        ``maxReconsumeTimes``."""
        config = self.groups.get(group)
        if config is None:
            config = GroupConfig(group, retry_max_times=self.config.max_reconsume_times)
        return config

    def topic(self, topic: str, queue_id: int | None = None) -> TopicConfig | None:
        """A topic's config; on a slave also a topic only its copied log holds yet (see
        :meth:`SlaveSync.topic_in_store`)."""
        config = self.topics.get(topic)
        if config is None and self.slave_sync is not None:
            config = self.slave_sync.topic_in_store(topic, queue_id)
        return config

    def queue_ids(self, queue_nums: int) -> range:
        """The queue ids of a topic with ``queue_nums`` queues that the store can hold: a
        count beyond them, from a topics.json written by hand, costs no loop over billions."""
        return range(max(0, min(queue_nums, self.config.store.max_queue_nums_per_topic)))

    async def start(self) -> None:
        try:
            await self._start()
            self._running = True
        except BaseException:
            # A port in use, a store that will not open: what had started lets go of its
            # port and store, for the caller to try again or the process to end cleanly.
            with contextlib.suppress(Exception):
                await self._stop(served=False)
            raise

    async def _start(self) -> None:
        if self.config.acl_enable:
            try:
                self.acl = AclFile(acl_file_path(self.config))
            except AclError as e:
                raise ConfigError(f"aclEnable: {e}") from None
            self.server.access_check = RemotingAccess(self.acl)
        tls = self.config.tls.with_file()
        self.server.tls = tls.server_context()
        self.server.tls_only = tls.server_mode is TlsMode.ENFORCING
        self.namesrv.tls = tls.client_context()
        # Bound before the store opens, so that a port in use fails the start at once (and
        # the store knows its host), but served only once everything a request needs runs:
        # a send answered before the flush waiter does would not wait for the disk.
        await self.server.start(serve=False)
        if self.grpc is not None:
            await self.grpc.start(tls, serve=False)
            # Peers ask for it (GET_BROKER_CONFIG) to route 5.x clients here: the bound port.
            self.config = dataclasses.replace(self.config, grpc_server_port=self.grpc.port)
            self.transactions.askers.append(self.pops.ask_producer)
        store_config = dataclasses.replace(self.config.store, store_host=self.address)
        self._loop = loop = asyncio.get_running_loop()
        self._store = await loop.run_in_executor(None, MessageStore.open, self._root, store_config)
        self.topics.save_system_topics()
        await loop.run_in_executor(None, self.transactions.load)
        self.pops.restore(self._root / "config" / "popState.json")
        interval = (
            HOLD_CHECK_INTERVAL_S
            if self.config.long_polling_enable
            else SHORT_POLLING_CHECK_INTERVAL_S
        )
        self._hold = PullHoldService(self._store, check_interval_s=interval)
        self._hold.start()
        if self.puts_wait_for_disk:
            self._flushes = FlushWaiter(
                self._store, timeout_s=self.config.store.sync_flush_timeout_ms / 1000
            )
            self._flushes.start()
        if not self.config.is_slave:
            ha_port = self.config.ha_listen_port
            if ha_port == -1:
                # RocketMQ's: the listen port + 1; with a port picked by the system, any.
                ha_port = self.server.port + 1 if self.config.listen_port else 0
            self.ha = HAService(self, self.config.listen_host, ha_port)
            await self.ha.start()
        await self.server.serve()
        if self.grpc is not None:
            await self.grpc.serve()
        if self.metrics is not None:
            endpoint = MetricsEndpoint(
                self.metrics,
                # As RocketMQ: the broker's own address when none is given.
                self.config.metrics_prom_exporter_host or self.config.listen_host,
                self.config.metrics_prom_exporter_port,
            )
            await loop.run_in_executor(None, endpoint.start)
            self._metrics_endpoint = endpoint
        await self._register_all()
        self._tasks = [
            loop.create_task(self._registration_loop()),
            loop.create_task(self._persist_offsets_loop()),
            loop.create_task(self._client_scan_loop()),
            loop.create_task(self._stats_loop()),
        ]
        if self.acl is not None:
            self._tasks.append(loop.create_task(self._acl_watch_loop()))
        period = self.config.flush_consumer_offset_interval_ms / 1000
        self._tasks.append(loop.create_task(self.pops.persist_loop(period)))
        if self.ha_client is not None and self.slave_sync is not None:
            self._tasks += [
                loop.create_task(self.ha_client.run()),
                loop.create_task(self.slave_sync.run()),
            ]
        else:
            # A slave's halves are its master's to check.
            self._tasks.append(loop.create_task(self._transaction_check_loop()))
        log.info(
            "broker started name=%s id=%s role=%s address=%s%s",
            self.config.broker_name,
            self.config.broker_id,
            self.config.store.broker_role,
            self.address,
            f" ha={self.ha_address}" if self.ha is not None else "",
        )

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` Prometheus scrapes, when metrics are served."""
        endpoint = self._metrics_endpoint
        if endpoint is None:
            return None
        return f"{self.config.metrics_prom_exporter_host or self.config.broker_ip1}:{endpoint.port}"

    async def stop(self) -> None:
        """Stops a running broker; nothing for one that is not (never started, its start
        failed, or stopped already)."""
        if self._running:
            self._running = False
            await self._stop(served=True)

    async def _stop(self, *, served: bool) -> None:
        """Stops what runs and closes the store; a broker that ``served`` also unregisters
        and saves its offsets and in-flight state (one whose start failed has nothing to say
        and must leave its store directory as it found it)."""
        if self._metrics_endpoint is not None:
            # Its scrapes wait for this loop: shut it down from another thread.
            endpoint, self._metrics_endpoint = self._metrics_endpoint, None
            await asyncio.get_running_loop().run_in_executor(None, endpoint.close)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if served:
            await self._unregister_all()
        if self.ha is not None:
            await self.ha.stop()
        if self.grpc is not None:
            await self.grpc.stop()
        if self._hold is not None:
            await self._hold.stop()
        await self.server.stop()
        await self.namesrv.close()
        if self._offsets_write is not None:
            with contextlib.suppress(Exception):
                await self._offsets_write
        # Each step runs even when one before failed (a full disk refuses the offsets' file but
        # not the store's close); the first failure is raised at the end.
        failures: list[Exception] = []
        try:
            if served:
                self.offsets.persist(force=True)
        except OSError as e:
            log.error("saving consumer offsets at stop failed: %s", e)
            failures.append(e)
        if served:
            try:
                self.pops.save()
            except OSError as e:
                log.error("saving the gRPC groups' in-flight state at stop failed: %s", e)
                failures.append(e)
        if self._flushes is not None:
            self._flushes.stop()
        if self._store is not None:
            store = self._store
            try:
                await asyncio.get_running_loop().run_in_executor(None, store.close)
            except (PyrmqError, OSError) as e:
                log.error("closing the store failed: %s", e)
                failures.append(e)
        if failures:
            raise failures[0]
        log.info("broker stopped name=%s address=%s", self.config.broker_name, self.address)

    @property
    def puts_wait_for_disk(self) -> bool:
        """Under SYNC_FLUSH a send is answered once its append is durable: append with
        ``wait_for_flush=False`` and answer through :meth:`when_durable`."""
        return self.config.store.flush_disk_type == "SYNC_FLUSH"

    def put_now(self, fn: Callable[[], PutResult]) -> PutResult:
        """Runs a store append in the loop (a page-cache write: it never waits for the disk
        when called with ``wait_for_flush=False``), then answers the held pulls it woke before
        the caller answers the send."""
        result = fn()
        self.stats.stored(result.count, result.wrote_bytes)
        if self._hold is not None:
            self._hold.answer_ready()
        if self.ha is not None:
            self.ha.appended()
        return result

    @property
    def puts_wait_for_slave(self) -> bool:
        """A SYNC_MASTER answers a send once a slave has it too."""
        return self.config.store.broker_role == "SYNC_MASTER"

    @property
    def puts_wait(self) -> bool:
        """Whether a send's answer waits (for the disk, a slave, or both)."""
        return self.puts_wait_for_disk or self.puts_wait_for_slave

    def when_stored(
        self, result: PutResult, callback: Callable[[int], None], *, slave: bool = True
    ) -> None:
        """Calls ``callback`` with the send's answer code once ``result``'s append is as safe
        as the broker promises: on disk under SYNC_FLUSH (else FLUSH_DISK_TIMEOUT after
        ``syncFlushTimeout``), then on a slave for a SYNC_MASTER unless ``slave`` is false
        (else FLUSH_SLAVE_TIMEOUT, or SLAVE_NOT_AVAILABLE); SUCCESS at once when neither
        applies."""

        def flushed(durable: bool) -> None:
            if not durable:
                callback(ResponseCode.FLUSH_DISK_TIMEOUT)
            elif slave and self.puts_wait_for_slave and self.ha is not None:
                self.ha.when_replicated(result.end_offset, callback)
            else:
                callback(ResponseCode.SUCCESS)

        if self._flushes is None:
            flushed(True)
        else:
            self._flushes.when_durable(result.end_offset, flushed)

    async def put(
        self, fn: Callable[[], PutResult], *, slave: bool = True
    ) -> tuple[PutResult, bool]:
        """Runs a store append with :meth:`put_now` and waits as :meth:`when_stored` does;
        returns the result and whether the append is as safe as the broker promises."""
        result = self.put_now(fn)
        return result, await self.durable(result, slave=slave)

    async def durable(self, result: PutResult, *, slave: bool = True) -> bool:
        """Waits as :meth:`put` does for an append made with :meth:`put_now`."""
        if not (self.puts_wait_for_disk or (slave and self.puts_wait_for_slave)):
            return True
        code: asyncio.Future[int] = self.loop.create_future()

        def answer(value: int) -> None:
            if not code.done():
                code.set_result(value)

        self.when_stored(result, answer, slave=slave)
        return await code == ResponseCode.SUCCESS

    def request_registration(self, *topics: str) -> None:
        """Registers with the name servers soon: ``topics`` (created or changed) alone, as
        RocketMQ's brokers register an admin's change, or without any the whole topic table.
        A topic registered alone leaves the others' routes as they are: a broker drained by
        wipeWritePerm stays drained when one of its topics changes."""
        if topics and self._register_topics is not None:
            self._register_topics.update(topics)
        else:
            self._register_topics = None
        self._register_now.set()

    def notify_consumer_ids_changed(self, group: str) -> None:
        """Tells every member of ``group`` to rebalance now (oneway)."""
        for member in self.clients.members(group):
            conn = member.connection
            if isinstance(conn, Connection):
                conn.send(
                    RemotingCommand.request(
                        RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                        {"consumerGroup": group},
                        oneway=True,
                    )
                )

    def _client_disconnected(self, conn: Connection) -> None:
        for group in self.clients.drop_connection(conn):
            self.notify_consumer_ids_changed(group)

    async def register_all(self) -> None:
        """Registers every topic with the name servers now."""
        await self._register_all()

    async def register_topics(self, *topics: str) -> None:
        """Registers ``topics`` with the name servers now, as RocketMQ's broker does before it
        answers an admin's topic change: a client routed right after finds them."""
        await self._register_all(set(topics))

    def _registration_body(self, topics: set[str] | None = None) -> bytes | None:
        """A REGISTER_BROKER body with the data version and ``topics`` (every topic: None);
        None when none of them is left."""
        wrapper = self.topics.to_json()
        table = wrapper["topicConfigTable"]
        if topics is not None:
            table = {name: config for name, config in table.items() if name in topics}
            if not table:
                return None
        if (allowed := self.config.broker_permission) != PERM_READ | PERM_WRITE:
            # A read-only broker's topics are routed read-only (RocketMQ's brokerPermission).
            table = {name: {**c, "perm": c["perm"] & allowed} for name, c in table.items()}
        return json.dumps(
            {
                "filterServerList": [],
                "topicConfigSerializeWrapper": {
                    "dataVersion": wrapper["dataVersion"],
                    "topicConfigTable": table,
                },
            },
            separators=(",", ":"),
        ).encode()

    async def _register_all(self, topics: set[str] | None = None) -> None:
        ha_addr = self.ha_address
        header = RegisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.address,
            cluster_name=self.config.broker_cluster_name,
            ha_server_addr=ha_addr,
            broker_id=self.config.broker_id,
        )
        body = self._registration_body(topics)
        if body is None:
            return

        async def register(addr: str) -> RemotingCommand | None:
            request = RemotingCommand.request(RequestCode.REGISTER_BROKER, header.to_ext(), body)
            try:
                response = await self.namesrv.invoke(addr, request, timeout_s=3.0)
            except RemotingError as e:
                log.warning("registration with name server %s failed: %s", addr, e)
                return None
            if response.code != ResponseCode.SUCCESS:
                log.warning(
                    "name server %s refused registration: %s %s",
                    addr,
                    response.code,
                    response.remark,
                )
                return None
            return response

        # Every name server at once: one that does not answer holds up none of the others.
        responses = await asyncio.gather(*map(register, self.config.namesrv_addrs))
        answered = [r for r in responses if r is not None]
        if answered:
            self._take_order_topics(answered[0].body)
        if self.ha_client is not None and self.slave_sync is not None:
            # The name servers name this slave's master once it has registered; one that has
            # not heard of it yet names none.
            named = [r.ext_fields for r in answered]
            master = next((a for a in named if a.get("masterAddr")), None)
            if named:
                chosen = master if master is not None else named[0]
                self.ha_client.master_named(chosen.get("haServerAddr") or "")
                self.slave_sync.master_named(chosen.get("masterAddr") or "")

    def _take_order_topics(self, body: bytes | None) -> None:
        """The name servers' ORDER_TOPIC_CONFIG table, which answers a registration when they
        have one: its topics are orderly here (RocketMQ's updateOrderTopicConfig)."""
        if not body:
            return
        try:
            table = json.loads(body).get("table")
        except (ValueError, AttributeError):
            log.warning("the name server's order topic table is not JSON: %r", body[:200])
            return
        if isinstance(table, dict):
            try:
                self.topics.set_order_topics(set(map(str, table)))
            except OSError as e:
                log.warning("cannot save the order topics the name servers name: %s", e)

    async def _unregister_all(self) -> None:
        header = UnregisterBrokerRequestHeader(
            broker_name=self.config.broker_name,
            broker_addr=self.address,
            cluster_name=self.config.broker_cluster_name,
            broker_id=self.config.broker_id,
        )
        for addr in self.config.namesrv_addrs:
            request = RemotingCommand.request(RequestCode.UNREGISTER_BROKER, header.to_ext())
            with contextlib.suppress(RemotingError):
                await self.namesrv.invoke(addr, request, timeout_s=3.0)

    async def _registration_loop(self) -> None:
        # As RocketMQ's broker: every 10-60 s whatever the setting, well inside the name
        # server's 120 s expiry.
        period = max(10_000, min(self.config.register_name_server_period_ms, 60_000)) / 1000
        while True:
            wait_s = period
            if self.slave_sync is not None and not self.slave_sync.master_addr:
                # No master registered yet (or it is away): ask again sooner.
                wait_s = SLAVE_REGISTER_RETRY_S
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
            # arrives as the event is set, and stop() would then wait forever.
            topics: set[str] | None = None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await self._register_now.wait()
                    topics = self._register_topics
            self._register_now.clear()
            self._register_topics = set()
            try:
                await self._register_all(topics)
            except Exception:
                log.exception("name server registration failed")

    async def _persist_offsets_loop(self) -> None:
        # Encoded here, written on a thread: encoding on the thread would hold the GIL for as
        # long as it takes, and the loop would wait for it (up to the 5 ms switch interval at
        # a time) with messages in hand. The write is shielded so that stop() can wait for it
        # before writing the file one last time.
        period = self.config.flush_consumer_offset_interval_ms / 1000
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            try:
                snapshot = self.offsets.encode()
                if snapshot is not None:
                    self._offsets_write = loop.run_in_executor(None, self.offsets.write, snapshot)
                    await asyncio.shield(self._offsets_write)
            except Exception:
                log.exception("persisting consumer offsets failed")

    async def _client_scan_loop(self) -> None:
        while True:
            await asyncio.sleep(CLIENT_SCAN_INTERVAL_S)
            now = int(time.time() * 1000)
            for group in self.clients.expire(now, self.config.channel_expired_timeout_ms):
                self.notify_consumer_ids_changed(group)
            self.pops.expire_clients()

    async def _acl_watch_loop(self) -> None:
        acl = self.acl
        assert acl is not None
        while True:
            await asyncio.sleep(POLL_INTERVAL_S)
            # Off the loop: a large file takes a while to parse.
            await asyncio.to_thread(acl.poll)

    async def _transaction_check_loop(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.config.transaction_check_interval_ms / 1000)
                try:
                    await self.transactions.check()
                    await self.transactions.save_checkpoint()
                except Exception:
                    log.exception("transaction check failed")
        finally:
            # At stop: the next start reads the halves from here.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.transactions.save_checkpoint())

    async def _stats_loop(self) -> None:
        due = {p: time.monotonic() + p.every_ms / 1000 for p in Period}
        while True:
            await asyncio.sleep(1.0)
            self.stats.delivered(*self.store.delayed_deliveries())
            self.stats.sample()
            now = time.monotonic()
            for period, at in due.items():
                if now >= at:
                    self.stats_items.sample(period, now_ms=time.time_ns() // 1_000_000)
                    due[period] = max(at + period.every_ms / 1000, now)
