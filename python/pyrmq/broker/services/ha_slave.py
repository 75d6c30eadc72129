"""A slave's side of replication: the CommitLog stream from its master, and its metadata.

:class:`HAClient` connects to the master's HA port (``haMasterAddress``, else the one the name
server names when the slave registers), reports the end of its CommitLog, and appends each
frame the master sends with :meth:`MessageStore.append_replica`, which checks the bytes, writes
them and dispatches their records to queues and index, waking held pulls. A frame that does not
continue the log, or fails its checks, closes the connection; it is opened again a second later
from the slave's end.

:class:`SlaveSync` copies what is not in the CommitLog every 10 s, as RocketMQ's
SlaveSynchronize does: the topics (GET_ALL_TOPIC_CONFIG), the consumer offsets
(GET_ALL_CONSUMER_OFFSET), the consumer groups' settings (GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
and the delayed messages' progress (GET_ALL_DELAY_OFFSET), which a slave made a master goes on
from. While the master is away consumers read from the slave and commit their offsets to it.
"""

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING, Any

from pyrmq.broker.services.ha_master import DAMAGED, HEADER, REPORT
from pyrmq.broker.state.topics import PERM_READ, PERM_WRITE, TopicConfig
from pyrmq.errors import PyrmqError, RemotingError, ReplicationError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["HAClient", "SlaveSync"]

log = logging.getLogger(__name__)

RECONNECT_S = 1.0
# Frames up to this size are appended in the event loop, larger ones on a thread.
INLINE_APPEND_BYTES = 64 * 1024
# While its master cannot be reached, a slave asks the name servers this often where it is.
ASK_NAMESRV_S = 5.0
SYNC_INTERVAL_S = 10.0


class HAClient:
    """Keeps a slave's CommitLog a copy of its master's."""

    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        self.master_ha_addr = broker.config.ha_master_address
        self._addr_known = asyncio.Event()
        if self.master_ha_addr:
            self._addr_known.set()
        self.frames = 0

    def master_named(self, ha_addr: str) -> None:
        """The name server named the master's HA address (unless one is configured)."""
        if ha_addr and not self.broker.config.ha_master_address:
            if ha_addr != self.master_ha_addr:
                log.info("master HA address is %s", ha_addr)
            self.master_ha_addr = ha_addr
            self._addr_known.set()

    async def run(self) -> None:
        # A problem that lasts (a master away, a log refused) is told once, not at every
        # attempt; again after replication made progress.
        last_problem = ""
        asked = 0.0
        while True:
            await self._addr_known.wait()
            addr = self.master_ha_addr
            frames = self.frames
            try:
                await self._replicate(addr)
            except (OSError, asyncio.IncompleteReadError, TimeoutError) as e:
                problem = f"replication from master {addr} stopped: {str(e) or type(e).__name__}"
                if problem != last_problem:
                    log.warning("%s", problem)
                last_problem = problem
                now = asyncio.get_running_loop().time()
                if now - asked >= ASK_NAMESRV_S:
                    # The master may be back elsewhere (new ports): the name server knows.
                    asked = now
                    self.broker.request_registration()
            except PyrmqError as e:
                problem = f"replication from master {addr} refused: {e}"
                if problem != last_problem:
                    log.error("%s", problem)
                last_problem = problem
            except Exception:
                # Whatever went wrong with one connection, the next one is tried.
                log.exception("replication from master %s failed", addr)
                last_problem = ""
            finally:
                if self.frames != frames:
                    last_problem = ""
            await asyncio.sleep(RECONNECT_S)

    async def _replicate(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        config = self.broker.config
        store = self.broker.store
        loop = self.broker.loop
        timeout_s = config.ha_housekeeping_interval_ms / 1000
        heartbeat_s = config.ha_send_heartbeat_interval_ms / 1000
        # Whole groups come in a frame, and a group fits a segment.
        largest = config.store.mapped_file_size_commit_log
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
        try:
            end = store.max_phy_offset
            writer.write(REPORT.pack(end))
            await writer.drain()
            log.info("replicating from master %s at offset %d", addr, end)
            reported = loop.time()
            while True:
                async with asyncio.timeout(timeout_s):
                    offset, size = HEADER.unpack(await reader.readexactly(HEADER.size))
                    damaged = 0
                    if size < 0:
                        size = -size
                        (damaged,) = DAMAGED.unpack(await reader.readexactly(DAMAGED.size))
                        if not 0 < damaged <= size:
                            raise ReplicationError(
                                f"a frame of {size} bytes at offset {offset} with {damaged} damaged"
                            )
                    if size > largest or offset < 0:
                        raise ReplicationError(f"a frame of {size} bytes at offset {offset}")
                    data = await reader.readexactly(size) if size else b""
                if data and offset < end:
                    self._check_seal(offset, data, end)
                elif data:
                    if len(data) <= INLINE_APPEND_BYTES:
                        # A page-cache write and its dispatch: sooner done than a thread hop.
                        end = store.append_replica(offset, data, damaged)
                    else:
                        end = await loop.run_in_executor(
                            None, store.append_replica, offset, data, damaged
                        )
                    self.frames += 1
                    self.broker.hold.answer_ready()
                if data or loop.time() - reported >= heartbeat_s:
                    writer.write(REPORT.pack(end))
                    await writer.drain()
                    reported = loop.time()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _check_seal(self, offset: int, data: bytes, end: int) -> None:
        """A frame ending where this log ends must be what this log holds there: the master's
        check that the slave's log is a prefix of its own."""
        own = (
            self.broker.store.read_replica(offset, len(data)) if offset + len(data) == end else None
        )
        if own is None or own != (data, end, 0):
            raise ReplicationError(
                f"this slave's CommitLog differs from its master's before offset {end}: it "
                "holds data the master does not (rebuild this slave's store to follow it)"
            )


class SlaveSync:
    """Copies the master's topics, consumer offsets and group settings to a slave."""

    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        # The master's remoting address, as the name server last named it ("" when away).
        self.master_addr = ""
        self._named = asyncio.Event()
        # Topics read from the copied log, until the master's topics name them.
        self._found: dict[str, TopicConfig] = {}
        # Topics the master's table had and then did not: deleted there, so not read from
        # the copied log here (until the master has them again).
        self._gone: set[str] = set()

    def master_named(self, addr: str) -> None:
        if addr != self.master_addr:
            log.info("master address is %s", addr or "unknown")
        self.master_addr = addr
        if addr:
            self._named.set()

    async def run(self) -> None:
        await self._named.wait()
        failing = False
        while True:
            if self.master_addr:
                try:
                    await self.sync(self.master_addr)
                    failing = False
                # A file that cannot be saved now (a full disk) fails this round only.
                except (PyrmqError, OSError, ValueError, KeyError, TypeError) as e:
                    log.log(
                        logging.DEBUG if failing else logging.WARNING,
                        "sync from master %s failed: %s",
                        self.master_addr,
                        e,
                    )
                    failing = True
            await asyncio.sleep(SYNC_INTERVAL_S)

    def topic_in_store(self, topic: str, queue_id: int | None = None) -> TopicConfig | None:
        """A topic the copied log holds (in ``queue_id``, or in any queue) but the copied
        topics do not yet (created on the master since the last sync, which may have been
        its last): readable as it is."""
        store = self.broker.store
        if topic in self._gone:
            return None
        config = self._found.get(topic)
        if queue_id is not None and store.max_offset(topic, queue_id) == 0:
            return None
        if config is None or (queue_id is not None and queue_id >= config.read_queue_nums):
            queue_ids = [q for t, q in store.queue_ids() if t == topic]
            if not queue_ids:
                return None
            queues = 1 + max(queue_ids)
            config = TopicConfig(topic, queues, queues, PERM_READ | PERM_WRITE)
            self._found[topic] = config
        return config

    async def sync(self, addr: str) -> None:
        broker = self.broker
        topics = await self._get(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        before = {t.topic_name for t in broker.topics.all()}
        if broker.topics.replace_from_master(topics):
            broker.request_registration()
            after = {t.topic_name for t in broker.topics.all()}
            for topic in before - after:
                # As the master did when it deleted the topic.
                broker.offsets.clean_topic(topic)
            self._gone = (self._gone | (before - after)) - after
        self._found.clear()
        offsets = await self._get(addr, RequestCode.GET_ALL_CONSUMER_OFFSET)
        broker.offsets.merge_from_master(offsets.get("offsetTable") or {})
        groups = await self._get(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        broker.groups.replace_from_master(groups)
        delays = await self._get(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        table = delays.get("offsetTable") or {}
        progress = {int(level): int(n) for level, n in table.items()}
        if not all(0 < level < 1 << 31 and 0 <= n < 1 << 63 for level, n in progress.items()):
            raise ValueError(f"GET_ALL_DELAY_OFFSET answered {table}")
        broker.store.copy_delay_offsets(progress)
        try:
            modes = await self._get(addr, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        except RemotingError as e:
            # A master without pop's request modes (RocketMQ 4.x): nothing to copy.
            log.debug("request modes not copied from %s: %s", addr, e)
        else:
            broker.request_modes.replace_from_master(modes)

    async def _get(self, addr: str, code: int) -> dict[str, Any]:
        request = RemotingCommand.request(code, {})
        response = await self.broker.namesrv.invoke(addr, request, timeout_s=3.0)
        if response.code != ResponseCode.SUCCESS:
            raise RemotingError(f"{RequestCode(code).name}: {response.code} {response.remark}")
        value = json.loads(response.body or b"{}")
        if not isinstance(value, dict):
            raise TypeError(f"{RequestCode(code).name} answered {type(value).__name__}")
        return value
