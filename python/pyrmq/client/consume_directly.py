"""CONSUME_MESSAGE_DIRECTLY on the client: a push consumer's listener runs on one message an
admin tool picked (``mqadmin queryMsgById -g GROUP -d CLIENT_ID``), outside the consumer's
normal flow, as RocketMQ's ``consumeMessageDirectly`` does: no ProcessQueue, no offset
committed, no send-back or suspension on failure. The answer says what the listener returned,
as a ConsumeMessageDirectlyResult.
"""

import asyncio
import dataclasses
import enum
import inspect
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, cast

from pyrmq.client.consume_orderly import ConsumeOrderlyContext
from pyrmq.client.consume_service import ConsumeContext, awaits
from pyrmq.client.message import MessageExt

if TYPE_CHECKING:
    from pyrmq.client.push_consumer import PushConsumer

__all__ = ["CMResult", "ConsumeMessageDirectlyResult", "consume_directly"]

log = logging.getLogger(__name__)


class CMResult(enum.Enum):
    """What the listener did with the message (RocketMQ's ``CMResult``)."""

    CR_SUCCESS = "CR_SUCCESS"
    CR_LATER = "CR_LATER"
    """It asked for the message again later (RECONSUME_LATER, SUSPEND_CURRENT_QUEUE_A_MOMENT)."""
    CR_ROLLBACK = "CR_ROLLBACK"
    CR_COMMIT = "CR_COMMIT"
    CR_THROW_EXCEPTION = "CR_THROW_EXCEPTION"
    CR_RETURN_NULL = "CR_RETURN_NULL"
    """It returned None (which the consumer counts as success in its normal flow)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResult:
    """A consumer's answer to CONSUME_MESSAGE_DIRECTLY.

    >>> r = ConsumeMessageDirectlyResult.from_json(
    ...     {"order": False, "autoCommit": True, "consumeResult": "CR_LATER",
    ...      "spentTimeMills": 3})
    >>> (r.consume_result, r.spent_time_ms, r.remark)
    (<CMResult.CR_LATER: 'CR_LATER'>, 3, None)
    """

    order: bool
    """The consumer is orderly."""
    auto_commit: bool
    consume_result: CMResult | None
    """None when the listener returned something the consumer does not know."""
    remark: str | None
    """The exception, for CR_THROW_EXCEPTION."""
    spent_time_ms: int

    def to_json(self) -> dict[str, Any]:
        """The JSON object Java writes (``spentTimeMills`` is Java's spelling)."""
        out: dict[str, Any] = {
            "autoCommit": self.auto_commit,
            "order": self.order,
            "spentTimeMills": self.spent_time_ms,
        }
        if self.consume_result is not None:
            out["consumeResult"] = self.consume_result.value
        if self.remark is not None:
            out["remark"] = self.remark
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConsumeMessageDirectlyResult":
        raw = data.get("consumeResult")
        try:
            result = CMResult(raw) if raw is not None else None
        except ValueError:
            result = None
        remark = data.get("remark")
        return cls(
            order=bool(data.get("order", False)),
            auto_commit=bool(data.get("autoCommit", True)),
            consume_result=result,
            remark=None if remark is None else str(remark),
            spent_time_ms=int(data.get("spentTimeMills") or 0),
        )

    def __str__(self) -> str:
        # The line mqadmin prints.
        result = self.consume_result.value if self.consume_result else None
        return (
            f"ConsumeMessageDirectlyResult [order={str(self.order).lower()}, "
            f"autoCommit={str(self.auto_commit).lower()}, consumeResult={result}, "
            f"remark={self.remark}, spentTimeMills={self.spent_time_ms}]"
        )


def _result_of(status: object) -> CMResult:
    # Concurrent and orderly statuses share their values: 0 done, 1 again later.
    if status is None:
        return CMResult.CR_RETURN_NULL
    if status == 0:
        return CMResult.CR_SUCCESS
    return CMResult.CR_LATER


async def consume_directly(
    consumer: "PushConsumer", msg: MessageExt
) -> ConsumeMessageDirectlyResult:
    """Runs ``consumer``'s listener for ``msg``'s topic on ``msg`` alone: a function on a
    thread of its own (not the consume threads, which may all be busy), a coroutine
    function in the event loop. The listener's exception is the answer's remark.

    Raises LookupError when no listener takes the topic (an ``async for`` consumer)."""
    listener = consumer.listener_for(msg.topic)
    if listener is None:
        raise LookupError(
            f"consumer {consumer.group} has no listener for topic {msg.topic} "
            "(its messages go to async for)"
        )
    mq = consumer.shown(msg.message_queue)
    ctx: ConsumeContext | ConsumeOrderlyContext = (
        ConsumeOrderlyContext(mq) if consumer.orderly else ConsumeContext(mq)
    )
    log.info("consuming directly group=%s msg_id=%s queue=%s", consumer.group, msg.id, mq)
    call = cast(Any, listener)
    began = time.monotonic()
    remark = None
    try:
        if awaits(listener):
            status = await cast(Awaitable[object], call([msg], ctx))
        else:
            status = await asyncio.to_thread(call, [msg], ctx)
            if inspect.isawaitable(status):
                status = await status
        result = _result_of(status)
    except Exception as e:
        log.warning("listener of %s failed on a direct consumption of %s", consumer.group, msg.id)
        result, remark = CMResult.CR_THROW_EXCEPTION, f"{type(e).__name__}: {e}"
    spent_ms = int((time.monotonic() - began) * 1000)
    return ConsumeMessageDirectlyResult(
        order=consumer.orderly,
        auto_commit=True,
        consume_result=result,
        remark=remark,
        spent_time_ms=spent_ms,
    )
