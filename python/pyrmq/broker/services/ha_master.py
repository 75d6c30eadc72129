"""A master's side of replication: its slaves' connections, and sends that wait for them.

The wire is RocketMQ's HA protocol. A slave reports the end of its CommitLog as 8 bytes
(big-endian) when it connects, after each append and at least every heartbeat interval. The
master answers with frames of a 12-byte header, the CommitLog offset of the data (8 bytes) and
its length (4), followed by that many bytes of its CommitLog; a frame of length 0 is a
heartbeat. A slave that reports 0 has nothing: it is sent the master's last segment onward, as
RocketMQ does, not years of history. pyrmq's frames carry whole append groups, fences included,
so that the slave checks each group as its recovery would before it writes a byte. Where the
master's log is damaged (a group that fails its checks, kept in place as its recovery keeps it),
the frame's length is negated and a 4-byte count of the damaged bytes leads the data: the slave
copies them as they are, then checks what ends them as usual. A slave that
resumes is first sent the fence that ends the master's log where the slave's ends, to compare
with its own: a log that is not a prefix of the master's (a master rebuilt empty, another
master's slave) is refused, not continued.

A SYNC_MASTER answers a send once a slave has reported an offset past it:
SLAVE_NOT_AVAILABLE at once when no slave is connected within ``haSlaveFallbehindMax`` bytes
of the end, FLUSH_SLAVE_TIMEOUT when none reports it within ``syncFlushTimeout``.
"""

import asyncio
import collections
import contextlib
import dataclasses
import heapq
import itertools
import logging
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyrmq.errors import PyrmqError
from pyrmq.remoting.protocol import ResponseCode

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["DAMAGED", "FENCE_LEN", "HEADER", "REPORT", "HAService", "SlaveLink"]

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qi")
"""A master's frame header: the data's CommitLog offset, its length."""
DAMAGED = struct.Struct(">i")
"""Leads a frame of negated length: how many of its bytes are damaged on the master."""
REPORT = struct.Struct(">q")
"""A slave's report: the end of its CommitLog."""
FENCE_LEN = 20
FENCE_MAGIC = (0x5EA1F3C7).to_bytes(4, "big")
"""An append group's fence (see rust/pyrmq-store/src/commit_log.rs): 20 bytes, magic at 4."""

# Entries of HAService._logged kept before they are forgotten (a slave host per entry).
_LOGGED_KEPT = 1024
# When nothing signals an append (the store's own delayed deliveries), look this often.
_IDLE_LOOK_S = 0.1


@dataclasses.dataclass(eq=False)
class SlaveLink:
    """One connected slave."""

    peer: str
    # The end of the slave's CommitLog as it last reported, no further than what it was sent;
    # -1 before its first report.
    acked: int = -1
    # Where the next frame starts.
    next: int = -1
    # Set when new bytes may be there to send.
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


@dataclasses.dataclass(eq=False, slots=True)
class _Waiter:
    """A send waiting for a slave to have the CommitLog up to ``end`` until ``deadline``."""

    end: int
    deadline: float
    callback: Callable[[int], None]
    done: bool = False

    def finish(self, code: int) -> None:
        if not self.done:
            self.done = True
            self.callback(code)


class HAService:
    """Serves slaves on the HA port and tells sends when a slave has their bytes."""

    def __init__(self, broker: "BrokerController", host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.links: set[SlaveLink] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # (end offset, ticket, waiter): sends waiting for a slave, the lowest end first; one
        # answered by its timeout stays until the acks pass it.
        self._waiters: list[tuple[int, int, _Waiter]] = []
        self._tickets = itertools.count()
        # The same waiters by deadline (one timeout for all: the order they came in), looked
        # at by one timer rather than a timer each: a timer per send costs the loop more
        # than the rest of the wait.
        self._deadlines: collections.deque[_Waiter] = collections.deque()
        self._sweeper: asyncio.TimerHandle | None = None
        # (slave host, offset) of refusals and starts already logged: a slave refused comes
        # back every second.
        self._logged: set[tuple[str, int]] = set()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
        self._finish_all(ResponseCode.SLAVE_NOT_AVAILABLE)

    def appended(self) -> None:
        """New bytes are in the CommitLog (called after each append in the loop)."""
        for link in self.links:
            link.wake.set()

    def slave_ok(self, end: int) -> bool:
        """Whether a slave is connected and within ``haSlaveFallbehindMax`` of ``end``."""
        return any(
            link.acked >= 0 and end - link.acked < self.broker.config.ha_slave_fallbehind_max
            for link in self.links
        )

    def replicated_to(self) -> int:
        """The furthest CommitLog offset a connected slave has; -1 with none."""
        return max((link.acked for link in self.links), default=-1)

    def when_replicated(self, end: int, callback: Callable[[int], None]) -> None:
        """Calls ``callback`` with SUCCESS once a slave has the CommitLog up to ``end``, with
        FLUSH_SLAVE_TIMEOUT after ``syncFlushTimeout``, or at once with SLAVE_NOT_AVAILABLE."""
        if self.replicated_to() >= end:
            callback(ResponseCode.SUCCESS)
            return
        if not self.slave_ok(end):
            callback(ResponseCode.SLAVE_NOT_AVAILABLE)
            return
        loop = self.broker.loop
        timeout_s = self.broker.config.store.sync_flush_timeout_ms / 1000
        waiter = _Waiter(end, loop.time() + timeout_s, callback)
        heapq.heappush(self._waiters, (end, next(self._tickets), waiter))
        self._deadlines.append(waiter)
        if self._sweeper is None:
            self._sweeper = loop.call_at(waiter.deadline, self._sweep)

    def _sweep(self) -> None:
        """Answers the waiters whose deadline passed FLUSH_SLAVE_TIMEOUT, and comes back at
        the next deadline."""
        self._sweeper = None
        deadlines = self._deadlines
        now = self.broker.loop.time()
        while deadlines and (deadlines[0].done or deadlines[0].deadline <= now):
            deadlines.popleft().finish(ResponseCode.FLUSH_SLAVE_TIMEOUT)
        if deadlines:
            self._sweeper = self.broker.loop.call_at(deadlines[0].deadline, self._sweep)

    def _finish_all(self, code: int) -> None:
        waiters, self._waiters = self._waiters, []
        self._deadlines.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for _, _, waiter in waiters:
            waiter.finish(code)

    def _acked(self, link: SlaveLink, offset: int) -> None:
        # A slave has no more than it was sent: a report past that (a slave of another
        # master, or one that kept data its master lost) proves nothing.
        link.acked = min(offset, link.next) if link.next >= 0 else offset
        waiters = self._waiters
        while waiters and (waiters[0][0] <= link.acked or waiters[0][2].done):
            heapq.heappop(waiters)[2].finish(ResponseCode.SUCCESS)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = "{}:{}".format(*writer.get_extra_info("peername")[:2])
        link = SlaveLink(peer)
        self.links.add(link)
        log.debug("slave connected from %s", peer)
        pusher: asyncio.Task[None] | None = None
        start = -1
        try:
            while True:
                timeout_s = self.broker.config.ha_housekeeping_interval_ms / 1000
                async with asyncio.timeout(timeout_s):
                    data = await reader.readexactly(REPORT.size)
                (offset,) = REPORT.unpack(data)
                if offset < 0:
                    log.warning("slave %s reported offset %d; dropping it", peer, offset)
                    return
                if pusher is None:
                    begin = self._start_offset(peer, offset)
                    if begin is None:
                        return
                    seal = self._seal(begin)
                    if seal == b"":
                        if not self._told(peer, -begin):
                            log.error(
                                "slave %s resumes at offset %d, which ends no append group "
                                "here: its log is not this master's; refused until its store "
                                "is rebuilt",
                                peer,
                                begin,
                            )
                        return
                    link.next = start = begin
                    if seal is None:
                        # Nothing to check first: what it reports, it has.
                        self._acked(link, offset)
                    log.log(
                        logging.DEBUG if self._told(peer, start) else logging.INFO,
                        "replicating to slave %s from offset %d",
                        peer,
                        start,
                    )
                    pusher = asyncio.create_task(self._push(link, writer, seal))
                    pusher.add_done_callback(lambda _: writer.close())
                elif pusher.done():
                    return
                else:
                    self._acked(link, offset)
        except TimeoutError:
            log.warning("slave %s silent for %d ms; dropped", peer,
                        self.broker.config.ha_housekeeping_interval_ms)  # fmt: skip
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.links.discard(link)
            if not self.links:
                # No slave left to wait for: say so now rather than at each timeout.
                self._finish_all(ResponseCode.SLAVE_NOT_AVAILABLE)
            if pusher is not None:
                pusher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pusher
            writer.close()
            self._tasks.discard(task)
            log.log(
                logging.INFO if link.acked > start >= 0 else logging.DEBUG,
                "slave %s disconnected at offset %d",
                peer,
                link.acked,
            )

    def _start_offset(self, peer: str, reported: int) -> int | None:
        """Where a slave that reported ``reported`` is sent from; None to drop it."""
        store = self.broker.store
        if reported > 0:
            if reported < store.min_phy_offset:
                if not self._told(peer, reported):
                    log.error(
                        "slave %s resumes at offset %d, below this master's first segment "
                        "(%d; retention removed the rest): refused until its store is rebuilt",
                        peer,
                        reported,
                        store.min_phy_offset,
                    )
                return None
            if reported > store.max_phy_offset:
                # Its log holds data this master does not (lost, or another master's): what
                # follows here would not continue it.
                if not self._told(peer, reported):
                    log.error(
                        "slave %s reports offset %d, past this master's end %d: it holds "
                        "data this master has not; refused until its store is rebuilt",
                        peer,
                        reported,
                        store.max_phy_offset,
                    )
                return None
            return reported
        end = store.max_phy_offset
        segment = self.broker.config.store.mapped_file_size_commit_log
        return max(end - end % segment, store.min_phy_offset)

    def _told(self, peer: str, offset: int) -> bool:
        """Whether (``peer``'s host, ``offset``) was logged already; notes it if not."""
        key = (peer.rpartition(":")[0], offset)
        if key in self._logged:
            return True
        if len(self._logged) >= _LOGGED_KEPT:
            self._logged.clear()
        self._logged.add(key)
        return False

    def _seal(self, start: int) -> bytes | None:
        """The fence that ends this master's log at ``start`` (20 bytes before it), which a
        slave resuming there must hold too; None at a segment's start (a blank closes the
        segment before, not a fence) or at 0."""
        if start % self.broker.config.store.mapped_file_size_commit_log == 0:
            return None
        try:
            chunk = self.broker.store.read_replica(start - FENCE_LEN, FENCE_LEN)
        except PyrmqError:
            chunk = None
        if chunk is None or chunk[1:] != (start, 0) or chunk[0][4:8] != FENCE_MAGIC:
            return b""
        return chunk[0]

    async def _push(
        self, link: SlaveLink, writer: asyncio.StreamWriter, seal: bytes | None
    ) -> None:
        store = self.broker.store
        batch = self.broker.config.ha_transfer_batch_size
        heartbeat_s = self.broker.config.ha_send_heartbeat_interval_ms / 1000
        loop = self.broker.loop
        if seal:
            # A frame ending where the slave's log ends: it checks that its bytes are these,
            # and only its next report counts as what it has.
            writer.write(HEADER.pack(link.next - len(seal), len(seal)))
            writer.write(seal)
        last_sent = loop.time()
        while True:
            link.wake.clear()
            try:
                chunk = store.read_replica(link.next, batch)
            except PyrmqError as e:
                log.error("cannot replicate to slave %s from offset %d: %s", link.peer,
                          link.next, e)  # fmt: skip
                return
            if chunk is not None:
                data, after, damaged = chunk
                if damaged:
                    writer.write(HEADER.pack(link.next, -len(data)))
                    writer.write(DAMAGED.pack(damaged))
                else:
                    writer.write(HEADER.pack(link.next, len(data)))
                writer.write(data)
                link.next = after
                await writer.drain()
                last_sent = loop.time()
                continue
            if loop.time() - last_sent >= heartbeat_s:
                writer.write(HEADER.pack(link.next, 0))
                await writer.drain()
                last_sent = loop.time()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_IDLE_LOOK_S):
                    await link.wake.wait()
