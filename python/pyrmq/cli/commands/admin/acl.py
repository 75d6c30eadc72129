"""``pyrmq admin`` for the brokers' plain ACL: ``updateAclConfig``, ``deleteAclConfig``,
``updateGlobalWhiteAddr``, ``clusterAclConfigVersion`` and ``getAclConfig``.

A broker with ``aclEnable`` takes these from admin accounts only: give one with ``pyrmq admin
--access-key KEY --secret-key SECRET``.
"""

import click

from pyrmq.client.acl_info import AclConfig, BrokerAclVersion

from .group import NAMESRV, admin, ask, host_port, shown_time, table

CLUSTER = click.option("-c", "--cluster", help="Every broker of this cluster [default: of all].")
BROKER = click.option(
    "-b", "--broker-addr", callback=host_port, help="This broker only, host:port."
)


def _list(text: str | None) -> list[str] | None:
    return None if text is None else text.strip().split(",")


def _shown(value: object) -> str:
    """A field as mqadmin prints it (Java's toString): lists in brackets, booleans in lower
    case, nothing for a field not set."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value)


@admin.command("update-acl-config")
@NAMESRV
@CLUSTER
@BROKER
@click.option("-a", "--access-key", required=True, help="The account's accessKey.")
@click.option("-s", "--secret-key", required=True, help="Its secretKey (7 characters or more).")
@click.option("-w", "--white-remote-address", help="Its hosts that need no signature.")
@click.option("-i", "--default-topic-perm", help="DENY, PUB, SUB or PUB|SUB for topics not listed.")
@click.option("-u", "--default-group-perm", help="The same for groups not listed.")
@click.option("-t", "--topic-perms", help="Topics' permissions, e.g. topicA=DENY,topicD=SUB.")
@click.option("-g", "--group-perms", help="Groups' permissions, e.g. groupA=DENY,groupD=SUB.")
@click.option(
    "-m", "--admin", "is_admin", type=bool, default=False, show_default=True, help="An admin."
)
def update_acl_config(
    namesrv_addr: str,
    cluster: str | None,
    broker_addr: str | None,
    access_key: str,
    secret_key: str | None,
    white_remote_address: str | None,
    default_topic_perm: str | None,
    default_group_perm: str | None,
    topic_perms: str | None,
    group_perms: str | None,
    is_admin: bool,
) -> None:
    """Create an ACL account, or change one, in the brokers' plain_acl.yml (slaves' too)."""

    def show(addrs: list[str]) -> None:
        for addr in addrs:
            click.echo(f"create or update plain access config to {addr} success.")

    ask(
        namesrv_addr,
        lambda a: a.update_acl_config(
            access_key.strip(),
            (secret_key or "").strip(),
            white_remote_address=white_remote_address and white_remote_address.strip(),
            default_topic_perm=default_topic_perm and default_topic_perm.strip(),
            default_group_perm=default_group_perm and default_group_perm.strip(),
            topic_perms=_list(topic_perms),
            group_perms=_list(group_perms),
            admin=is_admin,
            cluster=cluster,
            broker_addr=broker_addr,
        ),
        show,
    )


@admin.command("delete-acl-config")
@NAMESRV
@CLUSTER
@BROKER
@click.option("-a", "--access-key", required=True, help="The account's accessKey.")
def delete_acl_config(
    namesrv_addr: str, cluster: str | None, broker_addr: str | None, access_key: str
) -> None:
    """Delete an ACL account from the brokers' plain_acl.yml (slaves' too)."""

    def show(addrs: list[str]) -> None:
        for addr in addrs:
            click.echo(f"delete plain access config account from {addr} success.")
        click.echo(f"account's accesskey is: {access_key.strip()}")

    ask(
        namesrv_addr,
        lambda a: a.delete_acl_config(access_key.strip(), cluster=cluster, broker_addr=broker_addr),
        show,
    )


@admin.command("update-global-white-addr")
@NAMESRV
@CLUSTER
@BROKER
@click.option(
    "-g",
    "--global-white-remote-addresses",
    required=True,
    help="The whole new list, e.g. 10.10.103.*,192.168.0.*; '' empties it.",
)
@click.option("-p", "--acl-file-full-path", help="The ACL file [default: the broker's].")
def update_global_white_addr(
    namesrv_addr: str,
    cluster: str | None,
    broker_addr: str | None,
    global_white_remote_addresses: str,
    acl_file_full_path: str | None,
) -> None:
    """Replace the brokers' global white list: hosts that need no account."""
    patterns = global_white_remote_addresses.strip().split(",")

    def show(addrs: list[str]) -> None:
        for addr in addrs:
            click.echo(f"update global white remote addresses to {addr} success.")

    ask(
        namesrv_addr,
        lambda a: a.update_global_white_addrs(
            patterns, acl_file_path=acl_file_full_path, cluster=cluster, broker_addr=broker_addr
        ),
        show,
    )


@admin.command("cluster-acl-config-version")
@NAMESRV
@CLUSTER
@BROKER
def cluster_acl_config_version(
    namesrv_addr: str, cluster: str | None, broker_addr: str | None
) -> None:
    """Each master's ACL file: how many changes it has had and when the last was made."""
    ask(namesrv_addr, lambda a: a.acl_versions(cluster=cluster, broker_addr=broker_addr), _versions)


def _versions(versions: list[BrokerAclVersion]) -> None:
    rows: list[tuple[object, ...]] = [
        (
            "#Cluster Name",
            "#Broker Name",
            "#Broker Addr",
            "#AclFilePath",
            "#AclConfigVersionNum",
            "#AclLastUpdateTime",
        )
    ]
    for v in versions:
        for path, version in sorted(v.file_versions.items()):
            rows.append(
                (
                    v.cluster_name,
                    v.broker_name,
                    v.broker_addr,
                    path,
                    version.counter,
                    shown_time(version.timestamp),
                )
            )
    table(rows)


@admin.command("get-acl-config")
@NAMESRV
@CLUSTER
@BROKER
def get_acl_config(namesrv_addr: str, cluster: str | None, broker_addr: str | None) -> None:
    """Each master's global white list and ACL accounts, secrets included."""
    ask(namesrv_addr, lambda a: a.acl_config(cluster=cluster, broker_addr=broker_addr), _configs)


def _configs(configs: dict[str, AclConfig]) -> None:
    for addr, config in configs.items():
        click.echo(f"============{addr}============")
        click.echo(f"{'globalWhiteRemoteAddresses':<20}: {_shown(config.global_white_addrs)}")
        click.echo("")
        click.echo("accounts:")
        for account in config.accounts:
            for name, value in account.fields().items():
                click.echo(f"  {name:<18}: {_shown(value)}")
            click.echo("")
