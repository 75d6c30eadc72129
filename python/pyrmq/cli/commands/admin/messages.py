"""``pyrmq admin`` for messages: ``queryMsgByKey``, ``queryMsgById`` (with ``-g -d``, a message
consumed again by one consumer), ``queryMsgByUniqueKey``, ``queryMsgByOffset``, ``queryCq``
and ``resumeCheckHalfMessage``."""

import click

from pyrmq import _core
from pyrmq._core import MessageExt
from pyrmq.client.admin import Admin
from pyrmq.client.api import PullStatus
from pyrmq.client.message import MessageQueue

from .group import NAMESRV, admin, ask, host_port, properties, shown_time, table


def _print_message(msg: MessageExt) -> None:
    fields = [
        ("OffsetID", msg.offset_msg_id),
        ("MsgId", msg.msg_id),
        ("Topic", msg.topic),
        ("Tags", f"[{msg.tags or ''}]"),
        ("Keys", f"[{msg.keys}]"),
        ("Broker Name", msg.broker_name),
        ("Queue ID", msg.queue_id),
        ("Queue Offset", msg.queue_offset),
        ("CommitLog Offset", msg.commit_log_offset),
        ("Reconsume Times", msg.reconsume_times),
        ("Born Timestamp", shown_time(msg.born_timestamp)),
        ("Store Timestamp", shown_time(msg.store_timestamp)),
        ("Born Host", msg.born_host),
        ("Store Host", msg.store_host),
        ("System Flag", msg.stored.sys_flag),
        ("Properties", properties(msg.properties)),
        ("Message Body", msg.body.decode("utf-8", "backslashreplace")),
    ]
    for name, value in fields:
        click.echo(f"{name + ':':<20} {value}")


@admin.command("query-msg-by-key")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-k", "--key", required=True, help="A key the producer set (KEYS).")
@click.option(
    "-b", "--begin", "begin_ms", default=0, help="Stored at or after, ms since the epoch."
)
@click.option("-e", "--end", "end_ms", type=int, help="Stored at or before [default: now].")
@click.option(
    "-c", "--max-num", default=32, show_default=True, help="At most this many per broker."
)
def query_msg_by_key(
    namesrv_addr: str, topic: str, key: str, begin_ms: int, end_ms: int | None, max_num: int
) -> None:
    """The messages with a key, from the brokers' index, oldest first."""
    ask(
        namesrv_addr,
        lambda a: a.query_message(topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms),
        _found,
    )


def _found(found: list[MessageExt]) -> None:
    rows: list[tuple[object, ...]] = [("#Message ID", "#Broker Name", "#QID", "#Offset")]
    rows += [(m.msg_id, m.broker_name, m.queue_id, m.queue_offset) for m in found]
    table(rows)


@admin.command("query-msg-by-id")
@NAMESRV
@click.option("-i", "--msg-id", required=True, help="Offset message id (a send's offsetMsgId).")
@click.option("-g", "--group", help="With -d: have this group's consumer consume the message.")
@click.option(
    "-d", "--client-id", help="With -g: the consumer (its client id) that consumes the message."
)
def query_msg_by_id(
    namesrv_addr: str, msg_id: str, group: str | None, client_id: str | None
) -> None:
    """The message an offset message id names, every field; or, with -g and -d, have one
    online consumer run its listener on it (nothing is committed) and print what it did."""
    if (group is None) != (client_id is None):
        raise click.UsageError("-g/--group and -d/--client-id go together")
    try:
        _core.decode_offset_msg_id(msg_id)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    if group is not None and client_id is not None:
        result = ask(namesrv_addr, lambda a: a.consume_message_directly(group, client_id, msg_id))
        click.echo(str(result))
        return
    _print_message(ask(namesrv_addr, lambda a: a.view_message(msg_id)))


@admin.command("query-msg-by-unique-key")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-i", "--msg-id", required=True, help="The producer's message id (UNIQ_KEY).")
def query_msg_by_unique_key(namesrv_addr: str, topic: str, msg_id: str) -> None:
    """The message a producer's message id names, every field (each copy if it was sent
    more than once)."""
    found = ask(namesrv_addr, lambda a: a.query_message_by_unique_key(topic, msg_id))
    if not found:
        raise click.ClickException(f"no message of topic {topic} has message id {msg_id}")
    for i, msg in enumerate(found):
        if i:
            click.echo()
        _print_message(msg)


@admin.command("query-msg-by-offset")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--broker-name", required=True, help="Broker name (not address).")
@click.option("-i", "--queue-id", required=True, type=click.IntRange(0), help="Queue id.")
@click.option("-o", "--offset", required=True, type=click.IntRange(0), help="Queue offset.")
def query_msg_by_offset(
    namesrv_addr: str, topic: str, broker_name: str, queue_id: int, offset: int
) -> None:
    """The message at a queue offset, every field."""
    mq = MessageQueue(topic.strip(), broker_name.strip(), queue_id)

    async def question(a: Admin) -> MessageExt | None:
        result = await a.pull(mq, offset, 1)
        found = [m for m in result.messages if m.queue_offset == offset]
        return found[0] if result.status is PullStatus.FOUND and found else None

    msg = ask(namesrv_addr, question)
    if msg is None:
        raise click.ClickException(f"no message at offset {offset} of queue {mq}")
    _print_message(msg)


@admin.command("query-cq")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-q", "--queue-id", required=True, type=int, help="Queue id.")
@click.option("-i", "--index", default=0, show_default=True, help="First queue offset.")
@click.option("-c", "--count", default=10, show_default=True, help="Units to show.")
@click.option("-g", "--group", help="Also show whether this group takes each message.")
def query_cq(
    namesrv_addr: str,
    broker_addr: str,
    topic: str,
    queue_id: int,
    index: int,
    count: int,
    group: str | None,
) -> None:
    """A ConsumeQueue's units: each message's CommitLog offset, size and tag code."""
    view = ask(
        namesrv_addr,
        lambda a: a.query_consume_queue(broker_addr, topic, queue_id, index, count, group=group),
    )
    click.echo(f"queue {queue_id}@{topic}: min offset {view.min_offset}, max {view.max_offset}")
    if group is not None:
        click.echo(f"{group} subscribes with: {view.subscription or '- (no live consumer)'}")
    header: tuple[object, ...] = ("#Offset", "#CommitLog Offset", "#Size", "#Tags Code")
    rows = [header + (("#Taken",) if group is not None else ())]
    for u in view.units:
        row: tuple[object, ...] = (u.queue_offset, u.phy_offset, u.size, u.tags_code)
        rows.append(row + ((str(u.taken).lower(),) if group is not None else ()))
    table(rows)


@admin.command("resume-check-half-message")
@NAMESRV
@click.option(
    "-t",
    "--topic",
    default="TRANS_CHECK_MAX_TIME_TOPIC",
    show_default=True,
    help="Topic of the message, when -i is the producer's message id.",
)
@click.option(
    "-i", "--msg-id", required=True, help="Offset message id, or the producer's message id."
)
def resume_check_half_message(namesrv_addr: str, topic: str, msg_id: str) -> None:
    """Have the broker check a transaction it gave up after transactionCheckMax checks again,
    from a count of none: its producer's checker then commits or rolls it back."""
    addr = ask(namesrv_addr, lambda a: a.resume_check_half_message(topic.strip(), msg_id.strip()))
    click.echo(f"resume check half message success, {addr}")
