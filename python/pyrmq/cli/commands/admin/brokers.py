"""``pyrmq admin`` for brokers and name servers: ``clusterList``, ``brokerStatus``,
``getBrokerConfig``, ``updateBrokerConfig``, ``deleteExpiredCommitLog``, ``cleanExpiredCQ``,
``cleanUnusedTopic``, ``getNamesrvConfig``, ``updateNamesrvConfig``, ``updateKvConfig``,
``deleteKvConfig``, ``wipeWritePerm`` and ``addWritePerm``."""

import click

from pyrmq.client.admin import Admin
from pyrmq.errors import PyrmqError

from .group import NAMESRV, admin, ask, host_port, pairs, per_target, table


@admin.command("cluster-list")
@NAMESRV
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

    table(ask(namesrv_addr, question))


@admin.command("broker-status")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
def broker_status(namesrv_addr: str, broker_addr: str) -> None:
    """The broker's runtime figures, one ``key : value`` per line."""
    pairs(ask(namesrv_addr, lambda a: a.broker_runtime_info(broker_addr)), ":")


@admin.command("get-broker-config")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
def get_broker_config(namesrv_addr: str, broker_addr: str) -> None:
    """Every setting of a broker, one ``key = value`` per line."""
    pairs(ask(namesrv_addr, lambda a: a.broker_config(broker_addr)), "=")


@admin.command("update-broker-config")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
@click.option("-k", "--key", required=True, help="Setting, e.g. fileReservedTime.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_broker_config(namesrv_addr: str, broker_addr: str, key: str, value: str) -> None:
    """Change a setting of a running broker: its retention (fileReservedTime, deleteWhen,
    diskMaxUsedSpaceRatio, diskSpaceCleanForciblyRatio, diskSpaceWarningLevelRatio), which
    it also writes to its configuration file."""
    ask(namesrv_addr, lambda a: a.update_broker_config(broker_addr, {key: value}))
    click.echo(f"update broker config success, {broker_addr}")


@admin.command("delete-expired-commit-log")
@NAMESRV
@click.option(
    "-b", "--broker-addr", callback=host_port, required=True, help="Broker address, host:port."
)
def delete_expired_commit_log(namesrv_addr: str, broker_addr: str) -> None:
    """Delete a broker's CommitLog segments older than its fileReservedTime now, whatever
    the hour of its deleteWhen."""
    answer = ask(namesrv_addr, lambda a: a.delete_expired_commit_log(broker_addr))
    click.echo(f"{broker_addr}: {answer}")


@admin.command("clean-expired-cq")
@NAMESRV
@click.option("-b", "--broker-addr", callback=host_port, help="Broker address, host:port.")
@click.option("-c", "--cluster", help="Cluster name [default: every cluster].")
def clean_expired_cq(namesrv_addr: str, broker_addr: str | None, cluster: str | None) -> None:
    """Have the broker (or each broker of the cluster) delete the ConsumeQueues whose
    messages retention has all removed from its CommitLog. A topic's queues go together:
    one with messages left keeps its topic's expired ones."""
    ask(
        namesrv_addr,
        lambda a: a.clean_expired_consume_queue(broker_addr, cluster=cluster),
        lambda addrs: per_target("clean expired ConsumeQueue success", addrs),
    )


@admin.command("clean-unused-topic")
@NAMESRV
@click.option("-b", "--broker-addr", callback=host_port, help="Broker address, host:port.")
@click.option("-c", "--cluster", help="Cluster name [default: every cluster].")
def clean_unused_topic(namesrv_addr: str, broker_addr: str | None, cluster: str | None) -> None:
    """Have the broker (or each broker of the cluster) delete the ConsumeQueues of topics no
    longer in its topic table."""
    ask(
        namesrv_addr,
        lambda a: a.clean_unused_topic(broker_addr, cluster=cluster),
        lambda addrs: per_target("clean unused topic success", addrs),
    )


@admin.command("get-namesrv-config")
@NAMESRV
def get_namesrv_config(namesrv_addr: str) -> None:
    """Every setting of each name server, ``key = value``, under a line with its address."""

    def show(configs: dict[str, dict[str, str]]) -> None:
        for addr, settings in configs.items():
            click.echo(f"============{addr}============")
            pairs(settings, "=")

    ask(namesrv_addr, lambda a: a.namesrv_config(), show)


@admin.command("update-namesrv-config")
@NAMESRV
@click.option("-k", "--key", required=True, help="Setting, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="Its new value.")
def update_namesrv_config(namesrv_addr: str, key: str, value: str) -> None:
    """Change a setting of each running name server until it restarts: orderMessageEnable,
    scanNotActiveBrokerInterval or brokerChannelExpiredTime (ms)."""
    ask(
        namesrv_addr,
        lambda a: a.update_namesrv_config({key.strip(): value.strip()}),
        lambda addrs: click.echo(
            f"update name server config success! {', '.join(addrs)}: {key} = {value}"
        ),
    )


@admin.command("update-kv-config")
@NAMESRV
@click.option("-s", "--namespace", required=True, help="Namespace, e.g. ORDER_TOPIC_CONFIG.")
@click.option("-k", "--key", required=True, help="Key.")
@click.option("-v", "--value", required=True, help="Value.")
def update_kv_config(namesrv_addr: str, namespace: str, key: str, value: str) -> None:
    """Set a KV config value on every name server."""
    ask(
        namesrv_addr,
        lambda a: a.put_kv_config(namespace.strip(), key.strip(), value.strip()),
        lambda addrs: per_target("create or update kv config to namespace success", addrs),
    )


@admin.command("delete-kv-config")
@NAMESRV
@click.option("-s", "--namespace", required=True, help="Namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def delete_kv_config(namesrv_addr: str, namespace: str, key: str) -> None:
    """Remove a KV config value from every name server."""
    ask(
        namesrv_addr,
        lambda a: a.delete_kv_config(namespace.strip(), key.strip()),
        lambda addrs: per_target("delete kv config from namespace success", addrs),
    )


@admin.command("wipe-write-perm")
@NAMESRV
@click.option("-b", "--broker-name", required=True, help="Broker name (not address).")
def wipe_write_perm(namesrv_addr: str, broker_name: str) -> None:
    """Take a broker's write permission out of every name server's routes, so that producers
    send to the other brokers while it drains."""

    def show(counts: dict[str, int]) -> None:
        for addr, count in counts.items():
            click.echo(
                f"wipe write perm of broker[{broker_name}] in name server[{addr}] OK, {count}"
            )

    ask(namesrv_addr, lambda a: a.wipe_write_perm(broker_name.strip()), show)


@admin.command("add-write-perm")
@NAMESRV
@click.option("-b", "--broker-name", required=True, help="Broker name (not address).")
def add_write_perm(namesrv_addr: str, broker_name: str) -> None:
    """Give back the write permission wipe-write-perm took."""

    def show(counts: dict[str, int]) -> None:
        for addr, count in counts.items():
            click.echo(
                f"add write perm of broker[{broker_name}] in name server[{addr}] OK, {count}"
            )

    ask(namesrv_addr, lambda a: a.add_write_perm(broker_name.strip()), show)
