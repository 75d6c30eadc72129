"""``pyrmq admin`` for reading a topic's messages by pulling its queues: ``consumeMessage``,
``printMsg`` and ``printMsgByQueue``. Nothing is committed: the pulls keep no offsets."""

import codecs
import collections
from collections.abc import AsyncIterator, Callable

import click

from pyrmq._core import MessageExt
from pyrmq.client.admin import TOOLS_CONSUMER_GROUP, Admin
from pyrmq.client.api import PullStatus
from pyrmq.client.message import MessageQueue

from .group import NAMESRV, admin, ask, properties, timestamp_ms

PULL_BATCH = 32

_BEGIN_HELP = "Stored at or after: ms since the epoch or yyyy-MM-dd#HH:mm:ss:SSS."
_END_HELP = "Stored before: same forms."


def _print_options(command: Callable[..., None]) -> Callable[..., None]:
    """print-msg's and print-msg-by-queue's charset, tag expression and time range."""
    for option in reversed(
        [
            click.option(
                "-c", "--charset", default="UTF-8", show_default=True, help="Of the bodies."
            ),
            click.option(
                "-s",
                "--sub-expression",
                default="*",
                show_default=True,
                help="Tags, e.g. TagA || TagB.",
            ),
            click.option("-b", "--begin-timestamp", help=_BEGIN_HELP),
            click.option("-e", "--end-timestamp", help=_END_HELP),
        ]
    ):
        command = option(command)
    return command


def _charset(name: str) -> str:
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise click.BadParameter(f"unknown charset {name!r}", param_hint="--charset") from None


def _times(
    begin: str | None, end: str | None, hints: tuple[str, str]
) -> tuple[int | None, int | None]:
    begin_ms = None if begin is None else timestamp_ms(begin.strip(), hints[0])
    end_ms = None if end is None else timestamp_ms(end.strip(), hints[1])
    if begin_ms is not None and end_ms is not None and begin_ms > end_ms:
        raise click.UsageError("the begin time is after the end time")
    return begin_ms, end_ms


def _line(msg: MessageExt, charset: str, body: bool) -> str:
    text = msg.body.decode(charset, "backslashreplace") if body else "NOT PRINT BODY"
    return (
        f"MSGID: {msg.msg_id} MessageExt [topic={msg.topic}, brokerName={msg.broker_name}, "
        f"queueId={msg.queue_id}, queueOffset={msg.queue_offset}, storeSize={msg.store_size}, "
        f"sysFlag={msg.stored.sys_flag}, bornTimestamp={msg.born_timestamp}, "
        f"bornHost={msg.born_host}, storeTimestamp={msg.store_timestamp}, "
        f"storeHost={msg.store_host}, commitLogOffset={msg.commit_log_offset}, "
        f"reconsumeTimes={msg.reconsume_times}, tags={msg.tags or ''}, keys={msg.keys}, "
        f"properties={properties(msg.properties)}] BODY: {text}"
    )


async def _span(
    a: Admin, mq: MessageQueue, begin_ms: int | None, end_ms: int | None
) -> tuple[int, int]:
    """The queue offsets ``[first, end)`` of the messages stored in ``[begin_ms, end_ms)``
    (the whole queue where a bound is None)."""
    first = await (a.min_offset(mq) if begin_ms is None else a.search_offset(mq, begin_ms))
    end = await (a.max_offset(mq) if end_ms is None else a.search_offset(mq, end_ms))
    return first, end


async def _queue(a: Admin, topic: str, broker_name: str, queue_id: int) -> MessageQueue:
    """The topic's readable queue named; ClickException if it has none such (a pull of it
    finds nothing, which would print nothing)."""
    mq = MessageQueue(topic, broker_name, queue_id)
    if mq not in await a.read_queues(topic):
        raise click.ClickException(
            f"topic {topic} has no readable queue {queue_id} on {broker_name}"
        )
    return mq


async def _pulled(
    a: Admin,
    mq: MessageQueue,
    first: int,
    end: int,
    expression: str = "*",
    group: str = TOOLS_CONSUMER_GROUP,
) -> AsyncIterator[list[MessageExt]]:
    """The messages at queue offsets ``[first, end)`` that match the tag ``expression``, a
    pull's worth at a time."""
    # RocketMQ's brokers filter by tag hash code only: the tags themselves are compared here.
    tags = None if expression.strip() in ("", "*") else {t.strip() for t in expression.split("||")}
    offset = first
    while offset < end:
        result = await a.pull(
            mq, offset, min(PULL_BATCH, end - offset), expression=expression, group=group
        )
        if result.status is PullStatus.FOUND:
            found = [
                m
                for m in result.messages
                if m.queue_offset < end and (tags is None or m.tags in tags)
            ]
            if found:
                yield found
        elif result.status is not PullStatus.NO_MATCHED_MSG:
            raise click.ClickException(
                f"pulling {mq} at offset {offset}: the broker answered {result.status.name}"
            )
        if result.next_begin_offset <= offset:
            return
        offset = result.next_begin_offset


@admin.command("consume-message")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--broker-name", help="Only this broker's queue (with -i).")
@click.option("-i", "--queue-id", type=click.IntRange(0), help="Only this queue (with -b).")
@click.option("-o", "--offset", type=click.IntRange(0), help="From this queue offset on (with -i).")
@click.option(
    "-g",
    "--group",
    default=TOOLS_CONSUMER_GROUP,
    show_default=True,
    help="Pull as this consumer group (its offsets stay as they are).",
)
@click.option("-s", "--begin-timestamp", help=_BEGIN_HELP)
@click.option("-e", "--end-timestamp", help=_END_HELP)
@click.option(
    "-c",
    "--count",
    default=128,
    show_default=True,
    type=click.IntRange(1),
    help="At most this many messages (per queue with -i).",
)
def consume_message(
    namesrv_addr: str,
    topic: str,
    broker_name: str | None,
    queue_id: int | None,
    offset: int | None,
    group: str,
    begin_timestamp: str | None,
    end_timestamp: str | None,
    count: int,
) -> None:
    """Print a topic's messages, oldest first in each queue: every queue's, or one queue's
    from an offset on."""
    if (broker_name is None) != (queue_id is None):
        raise click.UsageError("-b/--broker-name and -i/--queue-id go together")
    if offset is not None and queue_id is None:
        raise click.UsageError("-o/--offset needs -b/--broker-name and -i/--queue-id")
    begin_ms, end_ms = _times(begin_timestamp, end_timestamp, ("-s", "-e"))
    topic = topic.strip()

    async def question(a: Admin) -> None:
        if broker_name is not None and queue_id is not None:
            queues = [await _queue(a, topic, broker_name.strip(), queue_id)]
        else:
            queues = await a.read_queues(topic)
        left = count
        for mq in queues:
            if left == 0:
                break
            first, end = await _span(a, mq, begin_ms, end_ms)
            if offset is not None:
                if offset >= end:
                    click.echo(f"{mq}: no message at or after offset {offset}, end {end}")
                    continue
                first = max(first, offset)
            if end - first > left:
                click.echo(f"{mq}: the oldest {left} of {end - first} messages")
                end = first + left
            left -= max(end - first, 0)
            async for batch in _pulled(a, mq, first, end, group=group.strip()):
                for msg in batch:
                    click.echo(_line(msg, "utf-8", True))

    ask(namesrv_addr, question)


@admin.command("print-msg")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@_print_options
@click.option(
    "-d", "--print-body", default=True, show_default=True, type=bool, help="Print bodies."
)
def print_msg(
    namesrv_addr: str,
    topic: str,
    charset: str,
    sub_expression: str,
    begin_timestamp: str | None,
    end_timestamp: str | None,
    print_body: bool,
) -> None:
    """Print every message of a topic stored in a time range, queue by queue."""
    encoding = _charset(charset.strip())
    begin_ms, end_ms = _times(begin_timestamp, end_timestamp, ("-b", "-e"))

    async def question(a: Admin) -> None:
        for mq in await a.read_queues(topic.strip()):
            first, end = await _span(a, mq, begin_ms, end_ms)
            click.echo(f"minOffset={first}, maxOffset={end}, {mq}")
            async for batch in _pulled(a, mq, first, end, sub_expression):
                for msg in batch:
                    click.echo(_line(msg, encoding, print_body))
            click.echo("-" * 56)

    ask(namesrv_addr, question)


@admin.command("print-msg-by-queue")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-a", "--broker-name", required=True, help="Broker name (not address).")
@click.option("-i", "--queue-id", required=True, type=click.IntRange(0), help="Queue id.")
@_print_options
@click.option(
    "-p", "--print-msg", default=False, show_default=True, type=bool, help="Print the messages."
)
@click.option(
    "-d",
    "--print-body",
    default=False,
    show_default=True,
    type=bool,
    help="With them, their bodies.",
)
@click.option(
    "-f",
    "--calculate",
    default=False,
    show_default=True,
    type=bool,
    help="Count the messages of each tag.",
)
def print_msg_by_queue(
    namesrv_addr: str,
    topic: str,
    broker_name: str,
    queue_id: int,
    charset: str,
    sub_expression: str,
    begin_timestamp: str | None,
    end_timestamp: str | None,
    print_msg: bool,
    print_body: bool,
    calculate: bool,
) -> None:
    """Print one queue's messages stored in a time range, or count them by tag, or both."""
    encoding = _charset(charset.strip())
    begin_ms, end_ms = _times(begin_timestamp, end_timestamp, ("-b", "-e"))
    tags: collections.Counter[str] = collections.Counter()

    async def question(a: Admin) -> None:
        mq = await _queue(a, topic.strip(), broker_name.strip(), queue_id)
        first, end = await _span(a, mq, begin_ms, end_ms)
        async for batch in _pulled(a, mq, first, end, sub_expression):
            tags.update(m.tags for m in batch if m.tags and m.tags.strip())
            if print_msg:
                for msg in batch:
                    click.echo(_line(msg, encoding, print_body))

    ask(namesrv_addr, question)
    if calculate:
        for tag, n in tags.most_common():
            click.echo(f"Tag: {tag:<30} Count: {n}")
