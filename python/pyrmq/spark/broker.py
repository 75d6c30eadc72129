"""Blocking access to name servers and brokers for the Spark source.

Spark calls a source in several processes: planner workers, a runner on the driver for a
streaming query, and executor workers forked from a daemon. Nothing here outlives a ``with``
block, so nothing needs to survive pickling or a fork: each block runs its own event loop and
connections and closes them.
"""

import asyncio
import time
import types
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Self, TypeVar

from pyrmq.acl.signing import Credentials
from pyrmq.client.api import ClientAPI, PullResult
from pyrmq.client.message import MessageQueue
from pyrmq.client.route import TopicRoute
from pyrmq.client.subscription import Subscription
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.headers import PullMessageRequestHeader
from pyrmq.remoting.tls import ClientTls

__all__ = ["Brokers"]

T = TypeVar("T")

SOURCE_GROUP = "spark-pyrmq-source"
"""The group named in pulls by default; a pull commits nothing and holds nothing."""


class Brokers:
    """Routes, offsets and pulls over connections that last one ``with`` block."""

    def __init__(
        self,
        namesrv: str,
        timeout_s: float = 10.0,
        credentials: Credentials | None = None,
        group: str = SOURCE_GROUP,
        tls: ClientTls | None = None,
        offset_retries: int = 0,
        offset_retry_interval_s: float = 0.01,
    ) -> None:
        self.namesrv = split_addresses(namesrv)
        self.offset_retries = offset_retries
        self.offset_retry_interval_s = offset_retry_interval_s
        self.timeout_s = timeout_s
        self.credentials = credentials
        self.tls = tls
        # Named in pulls: a broker with an ACL checks that the account may consume as it.
        self.group = group
        # A bare loop: asyncio.Runner swaps the SIGINT handler on every run, which cost more
        # than a pull.
        self._loop = asyncio.new_event_loop()
        self._remoting: RemotingClient | None = None
        self._api: ClientAPI | None = None
        self._routes: dict[str, TopicRoute] = {}

    def __enter__(self) -> Self:
        self._remoting = RemotingClient(
            connect_timeout_s=self.timeout_s,
            credentials=self.credentials,
            tls=None if self.tls is None else self.tls.context(),
        )
        self._api = ClientAPI(self._remoting)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        try:
            if self._remoting is not None:
                self._loop.run_until_complete(self._remoting.close())
        finally:
            self._loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the block's loop, whose connections it may use."""
        return self._loop.run_until_complete(coro)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.run(asyncio.wait_for(coro, self.timeout_s))

    @property
    def api(self) -> ClientAPI:
        assert self._api is not None, "used outside its with block"
        return self._api

    def route(self, topic: str) -> TopicRoute:
        """The topic's route from the first name server that answers."""
        route = self._routes.get(topic)
        if route is not None:
            return route
        errors = []
        for namesrv in self.namesrv:
            try:
                found = self._run(self.api.get_route(namesrv, topic))
            except (PyrmqError, OSError, TimeoutError) as e:
                errors.append(f"{namesrv}: {e}")
                continue
            if found is None:
                raise ConfigError(f"topic {topic} does not exist")
            self._routes[topic] = found
            return found
        raise PyrmqError(f"no name server answered for {topic}: {'; '.join(errors)}")

    def topics(self) -> list[str]:
        """Every topic the first name server that answers knows."""
        errors = []
        for namesrv in self.namesrv:
            try:
                return self._run(self.api.topic_list(namesrv))
            except (PyrmqError, OSError, TimeoutError) as e:
                errors.append(f"{namesrv}: {e}")
        raise PyrmqError(f"no name server listed its topics: {'; '.join(errors)}")

    def queues(self, topics: Iterable[str]) -> list[MessageQueue]:
        """The readable queues of ``topics``."""
        return [mq for t in topics for mq in self.route(t).subscribe_queues()]

    def addr(self, mq: MessageQueue) -> str:
        broker = self.route(mq.topic).brokers.get(mq.broker_name)
        addr = broker.any_addr() if broker is not None else None
        if addr is None:
            raise PyrmqError(f"no address for broker {mq.broker_name} of {mq.topic}")
        return addr

    def _offset(self, topic: str, ask: Callable[[], Coroutine[Any, Any, int]]) -> int:
        """An offset look-up, tried ``offset_retries`` more times after a failure (a broker
        restarting, a connection dropped), with the topic's route asked for again: Kafka's
        ``fetchOffset.numRetries``."""
        attempt = 0
        while True:
            try:
                return self._run(ask())
            except ConfigError:
                raise
            except (PyrmqError, OSError, TimeoutError):
                if attempt >= self.offset_retries:
                    raise
            attempt += 1
            self._routes.pop(topic, None)
            time.sleep(self.offset_retry_interval_s)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._offset(mq.topic, lambda: self.api.min_offset(self.addr(mq), mq))

    def max_offset(self, mq: MessageQueue) -> int:
        return self._offset(mq.topic, lambda: self.api.max_offset(self.addr(mq), mq))

    def commit_offset(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Stores ``group``'s consumer offset of ``mq`` on its broker."""
        self._run(self.api.update_consumer_offset(self.addr(mq), group, mq, offset, oneway=False))

    def offset_for_time(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (the queue's end if none)."""
        return self._offset(
            mq.topic, lambda: self.api.search_offset(self.addr(mq), mq, timestamp_ms)
        )

    async def pull(
        self, addr: str, mq: MessageQueue, offset: int, max_nums: int, sub: Subscription
    ) -> PullResult:
        """Up to ``max_nums`` messages of ``mq`` (at ``addr``, see :meth:`addr`) from
        ``offset`` matching ``sub``'s tag hashes; answers at once, without holding. Run it with
        :meth:`run`."""
        header = PullMessageRequestHeader.immediate(
            self.group, mq.topic, mq.queue_id, offset, max_nums, sub.expression
        )
        return await self.api.pull(addr, mq.broker_name, header, self.timeout_s)
