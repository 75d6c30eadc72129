"""``pyrmq admin export-metadata`` (``exportMetadata``): the brokers' topic and consumer group
configs as one JSON file, in the broker's own ``topics.json`` / ``subscriptionGroup.json``
form, to carry them to another cluster."""

import json
import time
from pathlib import Path
from typing import Any

import click

from pyrmq.client.admin import Admin

from .group import NAMESRV, admin, ask, host_port

DEFAULT_DIR = "/tmp/rocketmq/export"


async def _merged(
    a: Admin, addrs: list[str], topics: bool, groups: bool, special: bool
) -> dict[str, Any]:
    """The configs of every broker at ``addrs``; a topic or group on more than one has its
    queue counts summed, as mqadmin's cluster export does."""
    topic_table: dict[str, dict[str, Any]] = {}
    group_table: dict[str, dict[str, Any]] = {}
    for addr in addrs:
        if topics:
            for name, config in (
                await a.topic_configs(addr, system=False, special=special)
            ).items():
                if (seen := topic_table.get(name)) is not None:
                    for field in ("readQueueNums", "writeQueueNums"):
                        config[field] = int(config.get(field, 0)) + int(seen.get(field, 0))
                topic_table[name] = config
        if groups:
            for name, config in (await a.user_groups(addr)).items():
                if (seen := group_table.get(name)) is not None:
                    config["retryQueueNums"] = int(config.get("retryQueueNums", 0)) + int(
                        seen.get("retryQueueNums", 0)
                    )
                group_table[name] = config
    out: dict[str, Any] = {}
    if topics:
        out["topicConfigTable"] = dict(sorted(topic_table.items()))
    if groups:
        out["subscriptionGroupTable"] = dict(sorted(group_table.items()))
    out["exportTime"] = time.time_ns() // 1_000_000
    return out


@admin.command("export-metadata")
@NAMESRV
@click.option("-c", "--cluster", help="Every master of this cluster.")
@click.option("-b", "--broker-addr", callback=host_port, help="This broker only, host:port.")
@click.option("-t", "--topic", "topic_only", is_flag=True, help="Only topics, to topic.json.")
@click.option(
    "-g", "--group", "group_only", is_flag=True, help="Only groups, to subscriptionGroup.json."
)
@click.option("-s", "--special-topic", is_flag=True, help="With retry and DLQ topics.")
@click.option(
    "-f",
    "--file-path",
    default=DEFAULT_DIR,
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory to write to.",
)
def export_metadata(
    namesrv_addr: str,
    cluster: str | None,
    broker_addr: str | None,
    topic_only: bool,
    group_only: bool,
    special_topic: bool,
    file_path: Path,
) -> None:
    """Write the brokers' topic configs (system topics left out) and consumer group configs
    (RocketMQ's own left out) to metadata.json, or one of them to topic.json or
    subscriptionGroup.json."""
    if (cluster is None) == (broker_addr is None):
        raise click.UsageError("give one of -c/--cluster and -b/--broker-addr")
    if topic_only and group_only:
        raise click.UsageError("-t/--topic and -g/--group exclude each other")
    name = (
        "topic.json" if topic_only else "subscriptionGroup.json" if group_only else "metadata.json"
    )

    async def question(a: Admin) -> dict[str, Any]:
        addrs = [broker_addr] if broker_addr else await a.masters(cluster)
        return await _merged(a, addrs, not group_only, not topic_only, special_topic)

    metadata = ask(namesrv_addr, question)
    target = file_path / name
    try:
        file_path.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(metadata, indent=2) + "\n")
    except OSError as e:
        raise click.ClickException(f"cannot write {target}: {e}") from e
    click.echo(f"export {target} success")
