"""``pyrmq admin``: the cluster's brokers, a topic's queues, a group's lag and a broker's
figures, as RocketMQ's ``mqadmin clusterList``, ``topicStatus``, ``consumerProgress`` and
``brokerStatus`` print them; topics created and deleted as ``updateTopic`` and ``deleteTopic``
do; messages found as ``queryMsgByKey``, ``queryMsgById`` and ``queryMsgByUniqueKey`` find
them; a broker's settings shown and changed as ``getBrokerConfig`` and ``updateBrokerConfig``
do; a topic's route, a group's connected clients and its offsets moved to a time as
``topicRoute``, ``consumerConnection``, ``producerConnection`` and ``resetOffsetByTime`` do;
and ``topicList``, ``cloneGroupOffset``, ``brokerConsumeStats``, ``getNamesrvConfig``,
``updateNamesrvConfig``, ``updateKvConfig``, ``deleteKvConfig``, ``wipeWritePerm`` and
``addWritePerm`` under kebab-case names; a message pushed to one consumer as ``queryMsgById -g
-d`` does; consumers' own offsets as ``getConsumerStatus`` shows them."""

import asyncio
import datetime
import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import click

from pyrmq import _core
from pyrmq._core import MessageExt
from pyrmq.acl.signing import Credentials
from pyrmq.client.admin import Admin, ClientConnection
from pyrmq.errors import PyrmqError
from pyrmq.remoting.protocol import MQVersion
from pyrmq.remoting.tls import client_context

T = TypeVar("T")

_TLS = "pyrmq.tls"

_NAMESRV = click.option(
    "-n",
    "--namesrv-addr",
    default="127.0.0.1:9876",
    show_default=True,
    help="Name servers, host:port;host:port.",
)


def _ask(namesrv_addr: str, question: Callable[[Admin], Awaitable[T]]) -> T:
    ctx = click.get_current_context()
    credentials = ctx.find_object(Credentials)
    tls = ctx.meta.get(_TLS)

    async def run() -> T:
        async with Admin(namesrv_addr, credentials=credentials, tls=tls) as admin:
            return await question(admin)

    try:
        return asyncio.run(run())
    except PyrmqError as e:
        raise click.ClickException(str(e)) from e


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def _table(rows: list[tuple[object, ...]]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _pairs(values: dict[str, str], sep: str) -> None:
    width = max(map(len, values), default=0)
    for key in sorted(values):
        click.echo(f"{key.ljust(width)} {sep} {values[key]}")


@click.group("admin")
@click.option(
    "--access-key",
    envvar="PYRMQ_ACCESS_KEY",
    help="Sign requests as this ACL account (brokers with aclEnable) [env PYRMQ_ACCESS_KEY].",
)
@click.option("--secret-key", envvar="PYRMQ_SECRET_KEY", help="Its secret [env PYRMQ_SECRET_KEY].")
@click.option("--tls", is_flag=True, help="Connect over TLS (servers with tls.server.mode).")
@click.option(
    "--tls-ca",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Trust servers whose certificates chain to these CAs [default: the system's].",
)
@click.option(
    "--tls-insecure", is_flag=True, help="Trust any server certificate, as RocketMQ's clients do."
)
@click.pass_context
def admin(
    ctx: click.Context,
    access_key: str | None,
    secret_key: str | None,
    tls: bool,
    tls_ca: Path | None,
    tls_insecure: bool,
) -> None:
    """Ask a running cluster for its brokers, offsets and lag."""
    if (access_key is None) != (secret_key is None):
        raise click.UsageError("--access-key and --secret-key go together")
    if (tls_ca is not None or tls_insecure) and not tls:
        raise click.UsageError("--tls-ca and --tls-insecure go with --tls")
    if access_key is not None and secret_key is not None:
        ctx.obj = Credentials(access_key, secret_key)
    if tls:
        # meta is shared with the subcommand's context.
        try:
            ctx.meta[_TLS] = client_context(ca_file=tls_ca, verify=not tls_insecure)
        except (OSError, ssl.SSLError) as e:
            raise click.BadParameter(f"{tls_ca}: {e}", param_hint="--tls-ca") from e


@admin.command("cluster-list")
@_NAMESRV
def cluster_list(namesrv_addr: str) -> None:
    """Every broker, with its message totals and rates."""

    async def question(a: Admin) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = [
            ("#Cluster", "#Broker", "#BID", "#Addr", "#InTPS", "#OutTPS", "#InTotalToday")
        ]
        for broker in await a.clusters():
            for bid, addr in sorted(broker.addrs.items()):
                try:
                    info = await a.broker_runtime_info(addr)
                except PyrmqError as e:
                    # Listed, but not answering (hung, or gone without closing its
                    # connection): shown without figures, as mqadmin does.
                    click.echo(f"{addr}: {e}", err=True)
                    info = {}
                rows.append(
                    (
                        broker.cluster,
                        broker.broker_name,
                        bid,
                        addr,
                        info.get("putTps", "0").split(" ")[0],
                        info.get("getTransferedTps", "0").split(" ")[0],
                        int(info.get("msgPutTotalTodayNow", "0"))
                        - int(info.get("msgPutTotalTodayMorning", "0")),
                    )
                )
        return rows

    _table(_ask(namesrv_addr, question))


@admin.command("topic-status")
@_NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_status(namesrv_addr: str, topic: str) -> None:
    """Each queue's min and max offsets and last store time."""
    status = _ask(namesrv_addr, lambda a: a.topic_status(topic))
    rows: list[tuple[object, ...]] = [
        ("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated")
    ]
    for mq, offset in status.items():
        rows.append(
            (
                mq.broker_name,
                mq.queue_id,
                offset.min_offset,
                offset.max_offset,
                _time(offset.last_update_timestamp),
            )
        )
    _table(rows)


@admin.command("consumer-progress")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", help="Only this topic [default: every topic of the group].")
def consumer_progress(namesrv_addr: str, group: str, topic: str | None) -> None:
    """The group's offset against each queue's max offset, the difference (lag), and the
    group's consume rate."""
    stats = _ask(namesrv_addr, lambda a: a.consume_stats(group, topic))
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
                _time(p.last_timestamp),
            )
        )
    _table(rows)
    click.echo()
    click.echo(f"Consume TPS: {stats.consume_tps:.2f}")
    click.echo(f"Diff Total: {stats.lag}")


@admin.command("update-topic")
@_NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", help="On every master of this cluster [default: of all].")
@click.option("-b", "--broker-addr", help="On this broker only, host:port.")
@click.option("-r", "--queue-nums", default=8, show_default=True, help="Read and write queues.")
@click.option("-p", "--perm", default=6, show_default=True, help="2 write, 4 read, 6 both.")
@click.option("-o", "--order", is_flag=True, help="An ordered topic.")
def update_topic(
    namesrv_addr: str,
    topic: str,
    cluster: str | None,
    broker_addr: str | None,
    queue_nums: int,
    perm: int,
    order: bool,
) -> None:
    """Create a topic, or change its queues and permission."""
    addrs = _ask(
        namesrv_addr,
        lambda a: a.create_topic(
            topic,
            queue_nums=queue_nums,
            perm=perm,
            order=order,
            cluster=cluster,
            broker_addr=broker_addr,
        ),
    )
    for addr in addrs:
        click.echo(f"create topic to {addr} success.")


@admin.command("update-group")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-c", "--cluster", help="On every master of this cluster [default: of all].")
@click.option("-b", "--broker-addr", help="On this broker only, host:port.")
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
def update_group(
    namesrv_addr: str,
    group: str,
    cluster: str | None,
    broker_addr: str | None,
    orderly: bool,
    retry_max_times: int,
) -> None:
    """Create or change a consumer group's settings."""
    addrs = _ask(
        namesrv_addr,
        lambda a: a.update_group(
            group,
            orderly=orderly,
            retry_max_times=retry_max_times,
            cluster=cluster,
            broker_addr=broker_addr,
        ),
    )
    for addr in addrs:
        click.echo(f"create subscription group to {addr} success.")


@admin.command("delete-group")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group name.")
@click.option("-c", "--cluster", help="From every master of this cluster [default: of all].")
def delete_group(namesrv_addr: str, group: str, cluster: str | None) -> None:
    """Delete a consumer group's settings (its offsets stay)."""
    addrs = _ask(namesrv_addr, lambda a: a.delete_group(group, cluster=cluster))
    click.echo(
        f"delete subscription group [{group}] from {', '.join(addrs) or 'no broker'} success."
    )


@admin.command("delete-topic")
@_NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", help="From every master of this cluster [default: of all].")
def delete_topic(namesrv_addr: str, topic: str, cluster: str | None) -> None:
    """Delete a topic, its messages and the groups' offsets on it."""
    addrs = _ask(namesrv_addr, lambda a: a.delete_topic(topic, cluster=cluster))
    click.echo(f"delete topic [{topic}] from {', '.join(addrs) or 'no broker'} success.")


@admin.command("broker-status")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
def broker_status(namesrv_addr: str, broker_addr: str) -> None:
    """The broker's runtime figures, one ``key : value`` per line."""
    _pairs(_ask(namesrv_addr, lambda a: a.broker_runtime_info(broker_addr)), ":")


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
        ("Born Timestamp", _time(msg.born_timestamp)),
        ("Store Timestamp", _time(msg.store_timestamp)),
        ("Born Host", msg.born_host),
        ("Store Host", msg.store_host),
        ("System Flag", msg.stored.sys_flag),
        ("Properties", msg.properties),
        ("Message Body", msg.body.decode("utf-8", "backslashreplace")),
    ]
    for name, value in fields:
        click.echo(f"{name + ':':<20} {value}")


@admin.command("query-msg-by-key")
@_NAMESRV
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
    found = _ask(
        namesrv_addr,
        lambda a: a.query_message(topic, key, max_num=max_num, begin_ms=begin_ms, end_ms=end_ms),
    )
    rows: list[tuple[object, ...]] = [("#Message ID", "#Broker Name", "#QID", "#Offset")]
    rows += [(m.msg_id, m.broker_name, m.queue_id, m.queue_offset) for m in found]
    _table(rows)


@admin.command("query-msg-by-id")
@_NAMESRV
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
        result = _ask(namesrv_addr, lambda a: a.consume_message_directly(group, client_id, msg_id))
        click.echo(str(result))
        return
    _print_message(_ask(namesrv_addr, lambda a: a.view_message(msg_id)))


@admin.command("query-msg-by-unique-key")
@_NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-i", "--msg-id", required=True, help="The producer's message id (UNIQ_KEY).")
def query_msg_by_unique_key(namesrv_addr: str, topic: str, msg_id: str) -> None:
    """The message a producer's message id names, every field (each copy if it was sent
    more than once)."""
    found = _ask(namesrv_addr, lambda a: a.query_message_by_unique_key(topic, msg_id))
    if not found:
        raise click.ClickException(f"no message of topic {topic} has message id {msg_id}")
    for i, msg in enumerate(found):
        if i:
            click.echo()
        _print_message(msg)


@admin.command("get-broker-config")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
def get_broker_config(namesrv_addr: str, broker_addr: str) -> None:
    """Every setting of a broker, one ``key = value`` per line."""
    _pairs(_ask(namesrv_addr, lambda a: a.broker_config(broker_addr)), "=")


@admin.command("update-broker-config")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
@click.option("-k", "--key", required=True, help="Setting, e.g. fileReservedTime.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_broker_config(namesrv_addr: str, broker_addr: str, key: str, value: str) -> None:
    """Change a setting of a running broker: its retention (fileReservedTime, deleteWhen,
    diskMaxUsedSpaceRatio, diskSpaceCleanForciblyRatio, diskSpaceWarningLevelRatio), which
    it also writes to its configuration file."""
    _ask(namesrv_addr, lambda a: a.update_broker_config(broker_addr, {key: value}))
    click.echo(f"update broker config success, {broker_addr}")


@admin.command("delete-expired-commit-log")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
def delete_expired_commit_log(namesrv_addr: str, broker_addr: str) -> None:
    """Delete a broker's CommitLog segments older than its fileReservedTime now, whatever
    the hour of its deleteWhen."""
    answer = _ask(namesrv_addr, lambda a: a.delete_expired_commit_log(broker_addr))
    click.echo(f"{broker_addr}: {answer}")


@admin.command("query-cq")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
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
    view = _ask(
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
    _table(rows)


@admin.command("topic-route")
@_NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_route(namesrv_addr: str, topic: str) -> None:
    """The topic's route as the name servers give it: its brokers and their queues."""
    route = _ask(namesrv_addr, lambda a: a.route(topic))
    if route is None:
        raise click.ClickException(f"no broker holds topic {topic}")
    click.echo(json.dumps(route.to_json(), indent=2))


def _connections(connections: list[ClientConnection]) -> None:
    rows: list[tuple[object, ...]] = [("#", "#ClientId", "#ClientAddr", "#Language", "#Version")]
    for i, c in enumerate(connections, 1):
        rows.append((f"{i:03d}", c.client_id, c.client_addr, c.language, _version(c.version)))
    _table(rows)


def _version(ordinal: int) -> str:
    try:
        return MQVersion(ordinal).name
    except ValueError:
        return str(ordinal)


@admin.command("consumer-connection")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
def consumer_connection(namesrv_addr: str, group: str) -> None:
    """The group's online consumers, what they subscribe to and how they consume."""
    found = _ask(namesrv_addr, lambda a: a.consumer_connection(group))
    _connections(found.connections)
    click.echo()
    click.echo("Below is subscription:")
    rows: list[tuple[object, ...]] = [("#", "#Topic", "#Type", "#SubExpression")]
    for i, (topic, (kind, expression)) in enumerate(found.subscriptions.items(), 1):
        rows.append((f"{i:03d}", topic, kind, expression))
    _table(rows)
    click.echo()
    click.echo(f"ConsumeType: {found.consume_type}")
    click.echo(f"MessageModel: {found.message_model}")
    click.echo(f"ConsumeFromWhere: {found.consume_from_where}")


@admin.command("producer-connection")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Producer group.")
@click.option("-t", "--topic", required=True, help="A topic the group sends to.")
def producer_connection(namesrv_addr: str, group: str, topic: str) -> None:
    """The group's producers connected to the topic's brokers."""
    _connections(_ask(namesrv_addr, lambda a: a.producer_connection(group, topic)))


def _timestamp(text: str) -> int:
    """mqadmin's forms: ``now`` (-1, each queue's end), ms since the epoch, or local time as
    ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    if text == "now":
        return -1
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither now, ms since the epoch nor yyyy-MM-dd#HH:mm:ss:SSS",
            param_hint="--timestamp",
        ) from None
    return int(when.timestamp() * 1000)


@admin.command("reset-offset-by-time")
@_NAMESRV
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
    offsets = _ask(namesrv_addr, lambda a: a.reset_offset_by_time(topic, group, ms, force=force))
    click.echo(
        f"reset offsets of group [{group}] on topic [{topic}], force [{str(force).lower()}], "
        f"timestamp [{timestamp}] ({ms})"
    )
    rows: list[tuple[object, ...]] = [("#Broker Name", "#QID", "#Offset")]
    rows += [(mq.broker_name, mq.queue_id, offset) for mq, offset in offsets.items()]
    _table(rows)


# --- topic lists, offset clone, name-server settings, KV config, write permission,
# --- broker-wide consume stats


@admin.command("topic-list")
@_NAMESRV
@click.option(
    "-c",
    "--cluster-model",
    is_flag=True,
    help="Also show each topic's cluster and the groups that consume it; retry and DLQ "
    "topics are left out.",
)
def topic_list(namesrv_addr: str, cluster_model: bool) -> None:
    """Every topic the name servers route, one per line."""
    if not cluster_model:
        for topic in _ask(namesrv_addr, lambda a: a.topic_list()):
            click.echo(topic)
        return

    async def question(a: Admin) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = [("#Cluster Name", "#Topic", "#Consumer Group")]
        for topic in await a.topic_list():
            if topic.startswith(("%RETRY%", "%DLQ%")):
                continue
            route = await a.route(topic)
            if route is None:
                continue
            cluster = ",".join(sorted({b.cluster for b in route.brokers.values()})) or "-"
            groups = await a.topic_consumed_by(topic)
            rows += [(cluster, topic, group) for group in groups or [""]]
        return rows

    _table(_ask(namesrv_addr, question))


@admin.command("clone-group-offset")
@_NAMESRV
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
    cloned = _ask(
        namesrv_addr,
        lambda a: a.clone_group_offset(src_group, dest_group, topic, offline=offline),
    )
    rows: list[tuple[object, ...]] = [("#Broker Name", "#QID", "#Offset")]
    rows += [(mq.broker_name, mq.queue_id, offset) for mq, offset in cloned.items()]
    _table(rows)
    click.echo(
        f"clone group offset success. srcGroup[{src_group}], destGroup=[{dest_group}], "
        f"topic[{topic}]"
    )


@admin.command("get-namesrv-config")
@_NAMESRV
def get_namesrv_config(namesrv_addr: str) -> None:
    """Every setting of each name server, ``key = value``, under a line with its address."""
    configs = _ask(namesrv_addr, lambda a: a.namesrv_config())
    for addr, settings in configs.items():
        click.echo(f"============{addr}============")
        _pairs(settings, "=")


@admin.command("update-namesrv-config")
@_NAMESRV
@click.option("-k", "--key", required=True, help="Setting, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_namesrv_config(namesrv_addr: str, key: str, value: str) -> None:
    """Change a setting of each running name server until it restarts: orderMessageEnable,
    scanNotActiveBrokerInterval or brokerChannelExpiredTime (ms)."""
    addrs = _ask(namesrv_addr, lambda a: a.update_namesrv_config({key.strip(): value.strip()}))
    click.echo(f"update name server config success! {', '.join(addrs)}: {key} = {value}")


@admin.command("update-kv-config")
@_NAMESRV
@click.option("-s", "--namespace", required=True, help="Namespace, e.g. ORDER_TOPIC_CONFIG.")
@click.option("-k", "--key", required=True, help="Key.")
@click.option("-v", "--value", required=True, help="Value.")
def update_kv_config(namesrv_addr: str, namespace: str, key: str, value: str) -> None:
    """Set a KV config value on every name server."""
    _ask(namesrv_addr, lambda a: a.put_kv_config(namespace.strip(), key.strip(), value.strip()))
    click.echo("create or update kv config to namespace success.")


@admin.command("delete-kv-config")
@_NAMESRV
@click.option("-s", "--namespace", required=True, help="Namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def delete_kv_config(namesrv_addr: str, namespace: str, key: str) -> None:
    """Remove a KV config value from every name server."""
    _ask(namesrv_addr, lambda a: a.delete_kv_config(namespace.strip(), key.strip()))
    click.echo("delete kv config from namespace success.")


@admin.command("wipe-write-perm")
@_NAMESRV
@click.option("-b", "--broker-name", required=True, help="Broker name (not address).")
def wipe_write_perm(namesrv_addr: str, broker_name: str) -> None:
    """Take a broker's write permission out of every name server's routes, so that producers
    send to the other brokers while it drains."""
    counts = _ask(namesrv_addr, lambda a: a.wipe_write_perm(broker_name.strip()))
    for addr, count in counts.items():
        click.echo(f"wipe write perm of broker[{broker_name}] in name server[{addr}] OK, {count}")


@admin.command("add-write-perm")
@_NAMESRV
@click.option("-b", "--broker-name", required=True, help="Broker name (not address).")
def add_write_perm(namesrv_addr: str, broker_name: str) -> None:
    """Give back the write permission wipe-write-perm took."""
    counts = _ask(namesrv_addr, lambda a: a.add_write_perm(broker_name.strip()))
    for addr, count in counts.items():
        click.echo(f"add write perm of broker[{broker_name}] in name server[{addr}] OK, {count}")


@admin.command("broker-consume-stats")
@_NAMESRV
@click.option("-b", "--broker-addr", required=True, help="Broker address, host:port.")
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
    stats = _ask(
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
                    _time(p.last_timestamp),
                )
            )
    _table(rows)
    click.echo()
    click.echo(f"Diff Total: {stats.total_diff}")


@admin.command("stats-all")
@_NAMESRV
@click.option("-a", "--active", is_flag=True, help="Only topics with traffic in the last 24 h.")
@click.option("-t", "--topic", help="Only this topic.")
def stats_all(namesrv_addr: str, active: bool, topic: str | None) -> None:
    """Each topic's messages in and each consuming group's messages out: rates over the last
    minute and counts over the last 24 hours, with the group's lag."""

    async def question(a: Admin) -> list[tuple[object, ...]]:
        rows: list[tuple[object, ...]] = [
            (
                "#Topic",
                "#Consumer Group",
                "#Accumulation",
                "#InTPS",
                "#OutTPS",
                "#InMsg24Hour",
                "#OutMsg24Hour",
            )
        ]
        for name in [topic] if topic else await a.topic_list():
            if name.startswith(("%RETRY%", "%DLQ%")):
                continue
            try:
                traffic = await a.topic_traffic(name)
            except PyrmqError as e:
                click.echo(f"{name}: {e}", err=True)
                continue
            if not traffic.groups:
                if not active or traffic.in_24h:
                    rows.append(
                        (name, "", 0, f"{traffic.in_tps:.2f}", "", traffic.in_24h, "NO_CONSUMER")
                    )
                continue
            for group, (out_tps, out_24h, lag) in traffic.groups.items():
                if not active or traffic.in_24h or out_24h:
                    rows.append(
                        (
                            name,
                            group,
                            lag,
                            f"{traffic.in_tps:.2f}",
                            f"{out_tps:.2f}",
                            traffic.in_24h,
                            out_24h,
                        )
                    )
        return rows

    _table(_ask(namesrv_addr, question))


@admin.command("get-consumer-status")
@_NAMESRV
@click.option("-g", "--group", required=True, help="Consumer group.")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-i", "--client-id", help="Only this consumer (its client id) [default: all].")
def get_consumer_status(namesrv_addr: str, group: str, topic: str, client_id: str | None) -> None:
    """Each online consumer's offset on each queue of the topic, as the consumer holds it
    (it may be ahead of what it has committed)."""
    table = _ask(namesrv_addr, lambda a: a.consumer_status(group, topic, client_id))
    click.echo(
        f"get consumer status from client. group={group}, topic={topic}, "
        f"originClientId={client_id or ''}"
    )
    rows: list[tuple[object, ...]] = [("#clientId", "#brokerName", "#queueId", "#offset")]
    for cid, offsets in table.items():
        rows += [(cid, mq.broker_name, mq.queue_id, offset) for mq, offset in offsets.items()]
    _table(rows)
