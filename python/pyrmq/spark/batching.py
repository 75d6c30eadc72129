"""Rows sent at least once go in batches: one request and one append for many messages.

RocketMQ stores a batch in one queue, in order, and takes only messages of one topic; it
compresses single messages but not batches, and has no timer or transactional batches.
"""

from collections.abc import Iterable, Iterator

from pyrmq.client.message import Message
from pyrmq.properties import DELAYING

__all__ = ["batches"]

BATCH_COUNT = 32
BATCH_BYTES = 256 << 10


def batches(messages: Iterable[Message], single_over: int) -> Iterator[list[Message]]:
    """``messages`` in order, consecutive ones of a topic gathered into batches of up to
    ``BATCH_COUNT`` messages and ``BATCH_BYTES`` of bodies. A timer message, or a body of
    ``single_over`` bytes or more (sent compressed alone, where a batch is not), goes by
    itself.

    >>> small = [Message("A", b"x") for _ in range(40)] + [Message("B", b"y")]
    >>> [len(b) for b in batches(small, 4096)]
    [32, 8, 1]
    >>> big = [Message("A", b"x"), Message("A", b"z" * 5000), Message("A", b"x")]
    >>> [len(b) for b in batches(big, 4096)]
    [1, 1, 1]
    """
    batch: list[Message] = []
    size = 0
    for msg in messages:
        alone = len(msg.body) >= single_over or msg.properties.keys() & DELAYING
        if batch and (
            alone
            or msg.topic != batch[0].topic
            or len(batch) == BATCH_COUNT
            or size + len(msg.body) > BATCH_BYTES
        ):
            yield batch
            batch, size = [], 0
        if alone:
            yield [msg]
        else:
            batch.append(msg)
            size += len(msg.body)
    if batch:
        yield batch
