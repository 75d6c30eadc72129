"""Which queue a written row goes to, and the rows of one queue sent in their order.

A row names its queue with a ``queue_id`` column (and ``broker_name``, when the topic has
queues of that id on several brokers), or, with ``queueSelector=hash``, by a ``sharding_key``
column (else its keys): queue ``hash(key) % queues``, Java's ``String.hashCode`` as RocketMQ's
SelectMessageQueueByHash takes it, so Java producers and this sink agree. Rows with no queue
go round robin. Rows of one queue are sent one after another in the partition's order, as
RocketMQ's ordered sends are; queues are sent to side by side.
"""

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from pyrmq.client.message import Message, MessageQueue
from pyrmq.client.producer import select_by_hash
from pyrmq.errors import ConfigError
from pyrmq.spark.batching import BATCH_COUNT, batches
from pyrmq.spark.options import WriteOptions

__all__ = ["SendMany", "place", "send_in_order"]

T = TypeVar("T")

QueuesOf = Callable[[str], Awaitable[list[MessageQueue]]]
SendMany = Callable[[list[Message], MessageQueue | None], Coroutine[Any, Any, list[T]]]
"""Sends messages (one, or a batch of one topic) to a queue (None: round robin); a result for
each."""
# Rows without a queue of their own share this many lanes, so they still go out side by side.
_FREE_LANES = 8
_LANE_DEPTH = 64


async def place(
    row: Mapping[str, Any], msg: Message, options: WriteOptions, queues_of: QueuesOf
) -> MessageQueue | None:
    """The queue ``row`` names, or None for round robin."""
    queue_id = row.get("queue_id")
    if queue_id is not None:
        broker = row.get("broker_name")
        for mq in await queues_of(msg.topic):
            if mq.queue_id == queue_id and (broker is None or mq.broker_name == broker):
                return mq
        where = f" on {broker}" if broker is not None else ""
        raise ConfigError(f"topic {msg.topic} has no writable queue {queue_id}{where}")
    if options.queue_selector == "hash":
        key = row.get("sharding_key") or msg.keys
        if key:
            return select_by_hash(await queues_of(msg.topic), msg, key)
    return None


async def send_in_order(
    rows: Iterator[Mapping[str, Any]],
    make: Callable[[Mapping[str, Any]], Message],
    options: WriteOptions,
    queues_of: QueuesOf,
    send: SendMany[T],
    batch_single_over: int | None = None,
) -> list[T]:
    """Sends every row, those of one queue in order; the results in no particular order. The
    first failure stops the rest and is raised. ``send`` gets one message, or with
    ``batch_single_over`` (see :func:`~pyrmq.spark.batching.batches`) the batches of what
    waited for a queue while its last send was out."""
    results: list[T] = []
    lanes: dict[Any, asyncio.Queue[tuple[Message, MessageQueue | None] | None]] = {}

    async def drain(lane: asyncio.Queue[tuple[Message, MessageQueue | None] | None]) -> None:
        while (item := await lane.get()) is not None:
            if batch_single_over is None:
                results.extend(await send([item[0]], item[1]))
                continue
            waiting = [item]
            while len(waiting) < BATCH_COUNT and not lane.empty():
                following = lane.get_nowait()
                if following is None:
                    lane.put_nowait(None)  # seen again by the loop above, once these are sent
                    break
                waiting.append(following)
            # A lane's messages share their queue, or have none (round robin).
            for batch in batches((msg for msg, _ in waiting), batch_single_over):
                results.extend(await send(batch, item[1]))

    try:
        async with asyncio.TaskGroup() as group:
            for index, row in enumerate(rows):
                msg = make(row)
                mq = await place(row, msg, options, queues_of)
                key: Any = mq if mq is not None else index % _FREE_LANES
                lane = lanes.get(key)
                if lane is None:
                    lane = lanes[key] = asyncio.Queue(_LANE_DEPTH)
                    group.create_task(drain(lane))
                await lane.put((msg, mq))
            for lane in lanes.values():
                await lane.put(None)
    except BaseExceptionGroup as e:
        # Spark shows the first cause, not a group of one.
        raise e.exceptions[0] from None
    return results
