"""``pyrmq store-demo``: exercise the embedded store and print what it did."""

import dataclasses
import os
import time
from pathlib import Path

import click

from pyrmq.config import StoreConfig
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.store import GetMessageStatus, MessageStore

TOPIC = "DemoTopic"
QUEUES = 4


@click.command("store-demo")
@click.option(
    "--store",
    "store_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("~/.pyrmq/store-demo").expanduser(),
    show_default=True,
    help="Store directory (created if missing; reopened and recovered if it exists).",
)
@click.option(
    "--count",
    default=200_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Messages to append.",
)
@click.option(
    "--size", default=128, show_default=True, type=click.IntRange(min=1), help="Body size in bytes."
)
@click.option(
    "--flush",
    type=click.Choice(["async", "sync"]),
    default="async",
    show_default=True,
    help="ASYNC_FLUSH or SYNC_FLUSH.",
)
@click.option(
    "-c",
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A RocketMQ-style properties file of store settings (storePathRootDir is ignored).",
)
def store_demo(
    store_dir: Path, count: int, size: int, flush: str, config_file: Path | None
) -> None:
    """Append messages in batches of 32, read them back by queue and key, and report."""
    try:
        config = StoreConfig.from_properties(config_file) if config_file else StoreConfig()
    except ConfigError as e:
        raise click.UsageError(str(e)) from e
    flush_type = "SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH"
    settings = dataclasses.replace(config, flush_disk_type=flush_type)

    started = time.perf_counter()
    try:
        store = MessageStore.open(store_dir, settings)
    except (PyrmqError, OSError) as e:
        raise click.ClickException(f"cannot open the store: {e}") from e
    with store:
        opened = time.perf_counter() - started
        recovery = store.recovery
        click.echo(f"store        {store_dir} ({flush_type}), opened in {opened * 1000:.1f} ms")
        click.echo(
            f"recovery     {recovery['records']} records re-dispatched, "
            f"{recovery['truncated_bytes']} torn bytes removed, "
            f"{len(recovery['corrupt_ranges'])} corrupt ranges"
        )
        before = [store.max_offset(TOPIC, q) for q in range(QUEUES)]

        body = os.urandom(size)
        batches = -(-count // 32)
        started = time.perf_counter()
        last = None
        for i in range(batches):
            last = store.put_batch(
                TOPIC,
                [body] * min(32, count - 32 * i),
                queue_id=i % QUEUES,
                tags=f"Tag{i % 3}",
                keys=[f"batch-{i}"],
            )
        elapsed = time.perf_counter() - started
        sent = count
        click.echo(
            f"append       {sent:,} x {size} B in batches of 32: "
            f"{sent / elapsed:,.0f} msgs/s, {sent * size / elapsed / 1e6:,.1f} MB/s"
        )

        started = time.perf_counter()
        read = 0
        for q in range(QUEUES):
            offset = before[q]
            while True:
                got = store.get(TOPIC, q, offset)
                if got.status is not GetMessageStatus.FOUND:
                    break
                read += got.message_count
                offset = got.next_begin_offset
        elapsed = time.perf_counter() - started
        click.echo(f"read back    {read:,} messages: {read / elapsed:,.0f} msgs/s")

        tagged = store.get(TOPIC, 0, before[0], tags="Tag1")
        click.echo(
            f"tag filter   queue 0 from offset {before[0]}, Tag1: {tagged.status.name}, "
            f"{tagged.message_count} messages, next offset {tagged.next_begin_offset}"
        )
        if last is not None:
            key = f"batch-{batches - 1}"
            found = store.query_message(TOPIC, key)
            click.echo(f"key query    {key!r}: {len(found)} messages")
            first = store.view_message_by_id(last.msg_id)
            click.echo(
                f"by msg id    {last.msg_id}: queue offset {first.queue_offset if first else None}"
            )
        totals = ", ".join(f"q{q}={store.max_offset(TOPIC, q)}" for q in range(QUEUES))
        click.echo(f"queues       {TOPIC}: {totals}")
        started = time.perf_counter()
        flushed = store.flush()
        click.echo(
            f"commit log   {store.max_phy_offset:,} bytes; flush made {flushed:,} durable "
            f"in {(time.perf_counter() - started) * 1000:.1f} ms"
        )
