"""``pyrmq admin`` for topics: ``topicList``, ``topicRoute``, ``topicStatus``, ``updateTopic``,
``deleteTopic``, ``statsAll``, ``topicClusterList``, ``updateTopicPerm``, ``updateOrderConf``
and ``allocateMQ``."""

import json

import click

from pyrmq.client.admin import Admin, TopicOffset
from pyrmq.client.allocate import allocate_averagely
from pyrmq.client.message import MessageQueue
from pyrmq.errors import PyrmqError

from .group import NAMESRV, admin, ask, host_port, per_target, shown_time, table


@admin.command("topic-list")
@NAMESRV
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
        for topic in ask(namesrv_addr, lambda a: a.topic_list()):
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

    table(ask(namesrv_addr, question))


@admin.command("topic-route")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_route(namesrv_addr: str, topic: str) -> None:
    """The topic's route as the name servers give it: its brokers and their queues."""
    route = ask(namesrv_addr, lambda a: a.route(topic))
    if route is None:
        raise click.ClickException(f"no broker holds topic {topic}")
    click.echo(json.dumps(route.to_json(), indent=2))


@admin.command("topic-status")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_status(namesrv_addr: str, topic: str) -> None:
    """Each queue's min and max offsets and last store time."""
    ask(namesrv_addr, lambda a: a.topic_status(topic), _status)


def _status(status: dict[MessageQueue, TopicOffset]) -> None:
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
                shown_time(offset.last_update_timestamp),
            )
        )
    table(rows)


@admin.command("update-topic")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", help="On every master of this cluster [default: of all].")
@click.option("-b", "--broker-addr", callback=host_port, help="On this broker only, host:port.")
@click.option("-r", "--queue-nums", default=8, show_default=True, help="Read and write queues.")
@click.option("-p", "--perm", default=6, show_default=True, help="2 write, 4 read, 6 both.")
@click.option("-o", "--order", is_flag=True, help="An ordered topic.")
@click.option(
    "-a",
    "--attributes",
    help="Topic attribute changes, e.g. +message.type=FIFO (or -message.type to remove it).",
)
def update_topic(
    namesrv_addr: str,
    topic: str,
    cluster: str | None,
    broker_addr: str | None,
    queue_nums: int,
    perm: int,
    order: bool,
    attributes: str | None,
) -> None:
    """Create a topic, or change its queues and permission. With -o, the name servers'
    ORDER_TOPIC_CONFIG gets the topic's queue count on each broker it was made on (merged
    into what they hold, with -b), as mqadmin sets it."""

    async def question(a: Admin) -> tuple[list[str], str | None]:
        addrs = await a.create_topic(
            topic,
            queue_nums=queue_nums,
            perm=perm,
            order=order,
            cluster=cluster,
            broker_addr=broker_addr,
            attributes=attributes,
        )
        if not order:
            return addrs, None
        brokers = await a.clusters()
        if broker_addr:
            names = [b.broker_name for b in brokers if broker_addr in b.addrs.values()]
            if not names:
                raise PyrmqError(f"broker {broker_addr} is not known to the name servers")
            confs = {}
            for part in (await a.kv_config(ORDER_TOPIC_CONFIG, topic) or "").split(";"):
                if part.strip():
                    confs[part.split(":")[0]] = part
            confs[names[0]] = f"{names[0]}:{queue_nums}"
            value = ";".join(confs.values())
        else:
            names = sorted({b.broker_name for b in brokers if cluster in (None, b.cluster)})
            value = ";".join(f"{name}:{queue_nums}" for name in names)
        await a.put_kv_config(ORDER_TOPIC_CONFIG, topic, value)
        return addrs, value

    def show(answer: tuple[list[str], str | None]) -> None:
        addrs, order_conf = answer
        for addr in addrs:
            click.echo(f"create topic to {addr} success.")
        if order_conf is not None:
            scope = "broker" if broker_addr else "cluster"
            click.echo(f"set {scope} orderConf. isOrder=true, orderConf=[{order_conf}]")

    ask(namesrv_addr, question, show)


@admin.command("delete-topic")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--cluster", help="From every master of this cluster [default: of all].")
def delete_topic(namesrv_addr: str, topic: str, cluster: str | None) -> None:
    """Delete a topic, its messages and the groups' offsets on it."""
    ask(
        namesrv_addr,
        lambda a: a.delete_topic(topic, cluster=cluster),
        lambda addrs: click.echo(
            f"delete topic [{topic}] from {', '.join(addrs) or 'no broker'} success."
        ),
    )


@admin.command("stats-all")
@NAMESRV
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

    table(ask(namesrv_addr, question))


@admin.command("topic-cluster-list")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_cluster_list(namesrv_addr: str, topic: str) -> None:
    """The clusters of the brokers that hold the topic, one per line."""
    for cluster in ask(namesrv_addr, lambda a: a.topic_clusters(topic.strip())):
        click.echo(cluster)


@admin.command("update-topic-perm")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-p",
    "--perm",
    required=True,
    type=click.Choice(["2", "4", "6"]),
    help="2 write, 4 read, 6 both.",
)
@click.option("-b", "--broker-addr", callback=host_port, help="On this broker only, host:port.")
@click.option(
    "-c", "--cluster", help="On the masters of this cluster [default: every master of the topic]."
)
def update_topic_perm(
    namesrv_addr: str, topic: str, perm: str, broker_addr: str | None, cluster: str | None
) -> None:
    """Change an existing topic's permission, keeping its queues: 4 stops sends to it,
    2 stops consumers reading it."""
    if broker_addr and cluster:
        raise click.UsageError("-b/--broker-addr and -c/--cluster exclude each other")
    new = int(perm)

    def show(before: dict[str, int]) -> None:
        for addr, old in before.items():
            if old == new:
                click.echo(f"perm of topic [{topic}] in {addr} is {new} already.")
            else:
                click.echo(f"update topic perm from {old} to {new} in {addr} success.")

    ask(
        namesrv_addr,
        lambda a: a.update_topic_perm(topic.strip(), new, broker_addr=broker_addr, cluster=cluster),
        show,
    )


ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"
"""The name servers' KV namespace of ordered topics' queue counts per broker."""


def _order_conf(text: str) -> str:
    """``brokerName:num;brokerName:num``, checked, without blanks."""
    parts = []
    for part in text.split(";"):
        name, sep, count = part.strip().partition(":")
        if not sep or not name.strip() or not count.strip().isdigit() or not int(count):
            raise click.BadParameter(
                f"{part.strip()!r} is not brokerName:num, num 1 or more", param_hint="--order-conf"
            )
        parts.append(f"{name.strip()}:{int(count)}")
    return ";".join(parts)


@admin.command("update-order-conf")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-m", "--method", required=True, type=click.Choice(["get", "put", "delete"]), help="What to do."
)
@click.option("-v", "--order-conf", help="With put: brokerName1:num;brokerName2:num.")
def update_order_conf(namesrv_addr: str, topic: str, method: str, order_conf: str | None) -> None:
    """Read, set or remove an ordered topic's queue counts per broker (the name servers'
    ORDER_TOPIC_CONFIG); with orderMessageEnable the name servers route it so."""
    topic = topic.strip()
    if method == "get":
        value = ask(namesrv_addr, lambda a: a.kv_config(ORDER_TOPIC_CONFIG, topic))
        if value is None:
            raise click.ClickException(f"no orderConf for topic [{topic}]")
        click.echo(f"get orderConf success. topic=[{topic}], orderConf=[{value}]")
    elif method == "put":
        if not order_conf or not order_conf.strip():
            raise click.UsageError("put needs the order conf: -v brokerName:num;...")
        conf = _order_conf(order_conf)
        ask(
            namesrv_addr,
            lambda a: a.put_kv_config(ORDER_TOPIC_CONFIG, topic, conf),
            lambda addrs: per_target(
                f"update orderConf success. topic=[{topic}], orderConf=[{conf}]", addrs
            ),
        )
    else:
        ask(
            namesrv_addr,
            lambda a: a.delete_kv_config(ORDER_TOPIC_CONFIG, topic),
            lambda addrs: per_target(f"delete orderConf success. topic=[{topic}]", addrs),
        )


@admin.command("allocate-mq")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-i", "--ip-list", required=True, help="Client ids, comma-separated, in order.")
def allocate_mq(namesrv_addr: str, topic: str, ip_list: str) -> None:
    """How the averagely strategy shares the topic's readable queues among these client ids,
    as JSON: each id's queues."""
    cids = [c.strip() for c in ip_list.split(",") if c.strip()]
    if not cids:
        raise click.BadParameter("no client id given", param_hint="--ip-list")
    queues = ask(namesrv_addr, lambda a: a.read_queues(topic.strip()))
    result = {
        cid: [
            dict(sorted(mq.to_json().items())) for mq in allocate_averagely("aa", cid, queues, cids)
        ]
        for cid in cids
    }
    click.echo(json.dumps({"result": result}, separators=(",", ":")))
