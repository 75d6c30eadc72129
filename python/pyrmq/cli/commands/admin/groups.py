"""``pyrmq admin`` for consumer and producer groups: ``consumerProgress``, ``updateSubGroup``,
``deleteSubGroup``, ``consumerConnection``, ``producerConnection``, ``getConsumerStatus``,
``resetOffsetByTime``, ``cloneGroupOffset``, ``brokerConsumeStats``, ``setConsumeMode`` and the
correction offsets of a group (QUERY_CORRECTION_OFFSET)."""

import click

from pyrmq.client.admin import ClientConnection, ConsumerConnection, ConsumeStats
from pyrmq.client.message import MessageQueue
from pyrmq.remoting.protocol import MQVersion

from .group import NAMESRV, admin, ask, host_port, shown_time, table, timestamp_ms


@admin.command("consumer-progress")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", help="Only this topic [default: every topic of the group].")
def consumer_progress(namesrv_addr: str, group: str, topic: str | None) -> None:
    """The group's offset against each queue's max offset, the difference (lag), and the
    group's consume rate."""
    ask(namesrv_addr, lambda a: a.consume_stats(group, topic), _progress)


def _progress(stats: ConsumeStats) -> None:
    rows: list[tuple[object, ...]] = [
        (
            "#Topic",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff",
            "#LastTime",
        )
    ]
    for mq, p in stats.queues.items():
        rows.append(
            (
                mq.topic,
                mq.broker_name,
                mq.queue_id,
                p.broker_offset,
                p.consumer_offset,
                p.lag,
                shown_time(p.last_timestamp),
            )
        )
    table(rows)
    click.echo()
    click.echo(f"Consume TPS: {stats.consume_tps:.2f}")
    click.echo(f"Diff Total: {stats.lag}")


@admin.command("update-group")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-c", "--cluster", help="On every master of this cluster [default: of all].")
@click.option("-b", "--broker-addr", callback=host_port, help="On this broker only, host:port.")
@click.option(
    "-o",
    "--orderly",
    is_flag=True,
    help="RocketMQ 5 clients of the group consume FIFO messages in order.",
)
@click.option(
    "-r",
    "--retry-max-times",
    default=16,
    show_default=True,
    type=click.IntRange(0),
    help="Redeliveries before the group's DLQ.",
)
@click.option(
    "-q",
    "--retry-queue-nums",
    default=1,
    show_default=True,
    type=click.IntRange(0),
    help="Queues of the group's retry topic, made with them (0: no retries).",
)
def update_group(
    namesrv_addr: str,
    group: str,
    cluster: str | None,
    broker_addr: str | None,
    orderly: bool,
    retry_max_times: int,
    retry_queue_nums: int,
) -> None:
    """Create or change a consumer group's settings."""

    def show(addrs: list[str]) -> None:
        for addr in addrs:
            click.echo(f"create subscription group to {addr} success.")

    ask(
        namesrv_addr,
        lambda a: a.update_group(
            group,
            orderly=orderly,
            retry_max_times=retry_max_times,
            retry_queue_nums=retry_queue_nums,
            cluster=cluster,
            broker_addr=broker_addr,
        ),
        show,
    )


@admin.command("set-consume-mode")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic.")
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option(
    "-m", "--mode", required=True, type=click.Choice(["PULL", "POP"]), help="How it reads."
)
@click.option(
    "-q",
    "--pop-share-queue-num",
    default=0,
    show_default=True,
    type=int,
    help="In POP: other members' queues each member also pops (0 or less: every queue).",
)
@click.option("-c", "--cluster", help="On every master of this cluster [default: of all].")
@click.option("-b", "--broker-addr", callback=host_port, help="On this broker only, host:port.")
def set_consume_mode(
    namesrv_addr: str,
    topic: str,
    group: str,
    mode: str,
    pop_share_queue_num: int,
    cluster: str | None,
    broker_addr: str | None,
) -> None:
    """How a group reads a topic when its consumers leave the rebalance to the brokers (Java's
    clientRebalance=false): by pull or by pop."""

    def show(addrs: list[str]) -> None:
        for addr in addrs:
            click.echo(f"set consume mode to {addr} success.")

    ask(
        namesrv_addr,
        lambda a: a.set_consume_mode(
            topic,
            group,
            mode,
            pop_share_queue_num=pop_share_queue_num,
            cluster=cluster,
            broker_addr=broker_addr,
        ),
        show,
    )


@admin.command("delete-group")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-c", "--cluster", help="From every master of this cluster [default: of all].")
@click.option(
    "-r",
    "--remove-offset",
    is_flag=True,
    help="Delete the group's offsets too (a group of that name starts anew).",
)
def delete_group(namesrv_addr: str, group: str, cluster: str | None, remove_offset: bool) -> None:
    """Delete a consumer group's settings (and with -r its offsets)."""
    ask(
        namesrv_addr,
        lambda a: a.delete_group(group, cluster=cluster, remove_offsets=remove_offset),
        lambda addrs: click.echo(
            f"delete subscription group [{group}] from {', '.join(addrs) or 'no broker'} success."
        ),
    )


def _connections(connections: list[ClientConnection]) -> None:
    rows: list[tuple[object, ...]] = [("#", "#ClientId", "#ClientAddr", "#Language", "#Version")]
    for i, c in enumerate(connections, 1):
        rows.append((f"{i:03d}", c.client_id, c.client_addr, c.language, _version(c.version)))
    table(rows)


def _version(ordinal: int) -> str:
    try:
        return MQVersion(ordinal).name
    except ValueError:
        return str(ordinal)


@admin.command("consumer-connection")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
def consumer_connection(namesrv_addr: str, group: str) -> None:
    """The group's online consumers, what they subscribe to and how they consume."""
    ask(namesrv_addr, lambda a: a.consumer_connection(group), _consumers)


def _consumers(found: ConsumerConnection | None) -> None:
    if found is None:  # none of the brokers that answered knows the group online
        return
    _connections(found.connections)
    click.echo()
    click.echo("Below is subscription:")
    rows: list[tuple[object, ...]] = [("#", "#Topic", "#Type", "#SubExpression")]
    for i, (topic, (kind, expression)) in enumerate(found.subscriptions.items(), 1):
        rows.append((f"{i:03d}", topic, kind, expression))
    table(rows)
    click.echo()
    click.echo(f"ConsumeType: {found.consume_type}")
    click.echo(f"MessageModel: {found.message_model}")
    click.echo(f"ConsumeFromWhere: {found.consume_from_where}")


@admin.command("producer-connection")
@NAMESRV
@click.option("-g", "--group", required=True, help="Producer group.")
@click.option("-t", "--topic", required=True, help="A topic the group sends to.")
def producer_connection(namesrv_addr: str, group: str, topic: str) -> None:
    """The group's producers connected to the topic's brokers."""
    ask(namesrv_addr, lambda a: a.producer_connection(group, topic), _connections)


@admin.command("get-consumer-status")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-i",
    "--client-id",
    help="Only these consumers (client ids, comma-separated) [default: all].",
)
def get_consumer_status(namesrv_addr: str, group: str, topic: str, client_id: str | None) -> None:
    """Each online consumer's offset on each queue of the topic, as the consumer holds it
    (it may be ahead of what it has committed)."""
    status = ask(namesrv_addr, lambda a: a.consumer_status(group, topic, client_id))
    click.echo(
        f"get consumer status from client. group={group}, topic={topic}, "
        f"originClientId={client_id or ''}"
    )
    rows: list[tuple[object, ...]] = [("#clientId", "#brokerName", "#queueId", "#offset")]
    for cid, offsets in status.items():
        rows += [(cid, mq.broker_name, mq.queue_id, offset) for mq, offset in offsets.items()]
    table(rows)


def _timestamp(text: str) -> int:
    """``now`` (-1, each queue's end), or one of :func:`timestamp_ms`'s forms."""
    return -1 if text == "now" else timestamp_ms(text, "--timestamp")


@admin.command("reset-offset-by-time")
@NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-s",
    "--timestamp",
    required=True,
    help="now, ms since the epoch, or local time as yyyy-MM-dd#HH:mm:ss:SSS.",
)
@click.option(
    "-f",
    "--force",
    default=True,
    show_default=True,
    type=bool,
    help="false: only move offsets back.",
)
def reset_offset_by_time(
    namesrv_addr: str, group: str, topic: str, timestamp: str, force: bool
) -> None:
    """Move the group's offsets on the topic to the first message stored at or after a
    time; consumers online move with them."""
    ms = _timestamp(timestamp)

    def show(offsets: dict[MessageQueue, int]) -> None:
        click.echo(
            f"reset offsets of group [{group}] on topic [{topic}], force [{str(force).lower()}], "
            f"timestamp [{timestamp}] ({ms})"
        )
        _offsets(offsets)

    ask(namesrv_addr, lambda a: a.reset_offset_by_time(topic, group, ms, force=force), show)


def _offsets(offsets: dict[MessageQueue, int]) -> None:
    rows: list[tuple[object, ...]] = [("#Broker Name", "#QID", "#Offset")]
    rows += [(mq.broker_name, mq.queue_id, offset) for mq, offset in offsets.items()]
    table(rows)


# --- topic lists, offset clone, name-server settings, KV config, write permission,
# --- broker-wide consume stats


@admin.command("clone-group-offset")
@NAMESRV
@click.option("-s", "--src-group", required=True, help="Consumer group whose offsets to copy.")
@click.option("-d", "--dest-group", required=True, help="Consumer group that takes them.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-o",
    "--offline",
    is_flag=True,
    help="Copy even when the source group is online and does not subscribe to the topic.",
)
def clone_group_offset(
    namesrv_addr: str, src_group: str, dest_group: str, topic: str, offline: bool
) -> None:
    """Give a consumer group another group's committed offsets on a topic."""

    def show(cloned: dict[MessageQueue, int]) -> None:
        _offsets(cloned)
        click.echo(
            f"clone group offset success. srcGroup[{src_group}], destGroup=[{dest_group}], "
            f"topic[{topic}]"
        )

    ask(
        namesrv_addr,
        lambda a: a.clone_group_offset(src_group, dest_group, topic, offline=offline),
        show,
    )


@admin.command("query-correction-offset")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-g", "--group", required=True, help="Consumer group compared.")
@click.option("-f", "--filter-groups", help="Groups left out, comma-separated.")
def query_correction_offset(
    namesrv_addr: str, broker_addr: str, topic: str, group: str, filter_groups: str | None
) -> None:
    """Per queue of the topic on the broker, the lowest offset any group but the filtered
    ones has committed, or 9223372036854775807 where the group's own is lower than that."""
    left_out = [g.strip() for g in (filter_groups or "").split(",") if g.strip()]
    offsets = ask(
        namesrv_addr,
        lambda a: a.query_correction_offset(broker_addr, topic, group, left_out),
    )
    rows: list[tuple[object, ...]] = [("#QID", "#Offset")]
    rows += list(offsets.items())
    table(rows)


@admin.command("broker-consume-stats")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
@click.option("-o", "--order", is_flag=True, help="Only ordered topics.")
@click.option(
    "-l", "--level", default=0, show_default=True, help="Only queues with at least this lag."
)
@click.option(
    "-t",
    "--timeout-millis",
    default=50_000,
    show_default=True,
    type=click.IntRange(1),
    help="How long to wait for the broker.",
)
def broker_consume_stats(
    namesrv_addr: str, broker_addr: str, order: bool, level: int, timeout_millis: int
) -> None:
    """Every consumer group's offsets and lag on one broker."""
    stats = ask(
        namesrv_addr,
        lambda a: a.broker_consume_stats(
            broker_addr, order_only=order, timeout_s=timeout_millis / 1000
        ),
    )
    rows: list[tuple[object, ...]] = [
        (
            "#Topic",
            "#Group",
            "#Broker Name",
            "#QID",
            "#Broker Offset",
            "#Consumer Offset",
            "#Diff",
            "#LastTime",
        )
    ]
    for entry in stats.groups:
        for mq, p in entry.queues.items():
            diff = p.broker_offset - p.consumer_offset
            if diff < level:
                continue
            rows.append(
                (
                    mq.topic,
                    entry.group,
                    mq.broker_name,
                    mq.queue_id,
                    p.broker_offset,
                    p.consumer_offset,
                    diff,
                    shown_time(p.last_timestamp),
                )
            )
    table(rows)
    click.echo()
    click.echo(f"Diff Total: {stats.total_diff}")
