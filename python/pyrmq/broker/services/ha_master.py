"""A master's side of replication: its slaves' connections, and sends that wait for them.

The wire is RocketMQ's HA protocol. A slave reports the end of its CommitLog as 8 bytes
(big-endian) when it connects, after each append and at least every heartbeat interval. The
master answers with frames of a 12-byte header, the CommitLog offset of the data (8 bytes) and
its length (4), followed by that many bytes of its CommitLog; a frame of length 0 is a
heartbeat. A slave that reports 0 has nothing: it is sent the master's last segment onward, as
RocketMQ does, not years of history. pyrmq's frames carry whole append groups, fences included,
so that the slave checks each group as its recovery would before it writes a byte.

A SYNC_MASTER answers a send once a slave has reported an offset past it:
SLAVE_NOT_AVAILABLE at once when no slave is connected within ``haSlaveFallbehindMax`` bytes
of the end, FLUSH_SLAVE_TIMEOUT when none reports it within ``syncFlushTimeout``.
"""

import asyncio
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

__all__ = ["HEADER", "REPORT", "HAService", "SlaveLink"]

log = logging.getLogger(__name__)

HEADER = struct.Struct(">qi")
"""A master's frame header: the data's CommitLog offset, its length."""
REPORT = struct.Struct(">q")
"""A slave's report: the end of its CommitLog."""

# When nothing signals an append (the store's own delayed deliveries), look this often.
_IDLE_LOOK_S = 0.1


@dataclasses.dataclass(eq=False)
class SlaveLink:
    """One connected slave."""

    peer: str
    # The end of the slave's CommitLog as it last reported; -1 before its first report.
    acked: int = -1
    # Where the next frame starts.
    next: int = -1
    last_heard: float = 0.0
    # Set when new bytes may be there to send.
    wake: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


class HAService:
    """Serves slaves on the HA port and tells sends when a slave has their bytes."""

    def __init__(self, broker: "BrokerController", host: str, port: int) -> None:
        self.broker = broker
        self.host = host
        self.port = port
        self.links: set[SlaveLink] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # (end offset, ticket, callback): sends waiting for a slave, the lowest end first.
        self._waiters: list[tuple[int, int, Callable[[int], None]]] = []
        self._tickets = itertools.count()
        self.acked_max = 0

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
        for _, _, callback in self._waiters:
            callback(ResponseCode.SLAVE_NOT_AVAILABLE)
        self._waiters.clear()

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

    def when_replicated(self, end: int, callback: Callable[[int], None]) -> None:
        """Calls ``callback`` with SUCCESS once a slave has the CommitLog up to ``end``, with
        FLUSH_SLAVE_TIMEOUT after ``syncFlushTimeout``, or at once with SLAVE_NOT_AVAILABLE."""
        if self.acked_max >= end:
            callback(ResponseCode.SUCCESS)
            return
        if not self.slave_ok(end):
            callback(ResponseCode.SLAVE_NOT_AVAILABLE)
            return
        entry = (end, next(self._tickets), callback)
        heapq.heappush(self._waiters, entry)
        timeout_s = self.broker.config.store.sync_flush_timeout_ms / 1000
        self.broker.loop.call_later(timeout_s, self._time_out, entry)

    async def replicated(self, end: int) -> int:
        """:meth:`when_replicated` as a coroutine."""
        done: asyncio.Future[int] = self.broker.loop.create_future()

        def answer(code: int) -> None:
            if not done.done():
                done.set_result(code)

        self.when_replicated(end, answer)
        return await done

    def _time_out(self, entry: tuple[int, int, Callable[[int], None]]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(entry)
            heapq.heapify(self._waiters)
            entry[2](ResponseCode.FLUSH_SLAVE_TIMEOUT)

    def _acked(self, link: SlaveLink, offset: int) -> None:
        link.acked = offset
        link.last_heard = self.broker.loop.time()
        if offset > self.acked_max:
            self.acked_max = offset
        while self._waiters and self._waiters[0][0] <= self.acked_max:
            heapq.heappop(self._waiters)[2](ResponseCode.SUCCESS)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = "{}:{}".format(*writer.get_extra_info("peername")[:2])
        link = SlaveLink(peer, last_heard=self.broker.loop.time())
        self.links.add(link)
        log.info("slave connected from %s", peer)
        pusher: asyncio.Task[None] | None = None
        try:
            while True:
                timeout_s = self.broker.config.ha_housekeeping_interval_ms / 1000
                async with asyncio.timeout(timeout_s):
                    data = await reader.readexactly(REPORT.size)
                (offset,) = REPORT.unpack(data)
                if offset < 0:
                    log.warning("slave %s reported offset %d; dropping it", peer, offset)
                    return
                self._acked(link, offset)
                if pusher is None:
                    link.next = self._start_offset(offset)
                    log.info("replicating to slave %s from offset %d", peer, link.next)
                    pusher = asyncio.create_task(self._push(link, writer))
                    pusher.add_done_callback(lambda _: writer.close())
                elif pusher.done():
                    return
        except TimeoutError:
            log.warning("slave %s silent for %d ms; dropped", peer,
                        self.broker.config.ha_housekeeping_interval_ms)  # fmt: skip
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.links.discard(link)
            if pusher is not None:
                pusher.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pusher
            writer.close()
            self._tasks.discard(task)
            log.info("slave %s disconnected at offset %d", peer, link.acked)

    def _start_offset(self, reported: int) -> int:
        store = self.broker.store
        if reported > 0:
            if reported > store.max_phy_offset:
                log.error(
                    "a slave reports offset %d, past this master's end %d: it holds data this "
                    "master lost, and receives nothing until the master's log passes it",
                    reported,
                    store.max_phy_offset,
                )
            return reported
        end = store.max_phy_offset
        segment = self.broker.config.store.mapped_file_size_commit_log
        return max(end - end % segment, store.min_phy_offset)

    async def _push(self, link: SlaveLink, writer: asyncio.StreamWriter) -> None:
        store = self.broker.store
        batch = self.broker.config.ha_transfer_batch_size
        heartbeat_s = self.broker.config.ha_send_heartbeat_interval_ms / 1000
        loop = self.broker.loop
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
                data, after = chunk
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
