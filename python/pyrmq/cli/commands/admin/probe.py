"""``pyrmq admin`` commands that send: ``sendMessage``, and the send round trips of
``checkMsgSendRT`` and ``clusterRT``. Each runs a producer of a group of its own, named after
the time, as mqadmin's do."""

import asyncio
import dataclasses
import datetime
import time
from collections.abc import Callable, Sequence
from typing import Any

import click

from pyrmq.client.admin import Admin
from pyrmq.client.message import Message, MessageQueue, SendResult
from pyrmq.client.producer import Producer
from pyrmq.errors import PyrmqError

from .group import NAMESRV, admin, client_config, run, table


def _producer(namesrv_addr: str) -> Producer:
    return Producer(str(time.time_ns() // 1_000_000), client_config=client_config(namesrv_addr))


@admin.command("send-message")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-p", "--body", required=True, help="The body, as UTF-8 text.")
@click.option("-k", "--key", help="Message keys.")
@click.option("-c", "--tags", help="Message tag.")
@click.option("-b", "--broker-name", help="To this broker's queue (with -i).")
@click.option("-i", "--queue-id", type=click.IntRange(0), help="To this queue (with -b).")
def send_message(
    namesrv_addr: str,
    topic: str,
    body: str,
    key: str | None,
    tags: str | None,
    broker_name: str | None,
    queue_id: int | None,
) -> None:
    """Send one message and print where it was stored."""
    if (broker_name is None) != (queue_id is None):
        raise click.UsageError("-b/--broker-name and -i/--queue-id go together")
    topic = topic.strip()
    msg = Message(
        topic,
        body.strip().encode(),
        tags=tags.strip() if tags else None,
        keys=key.strip() if key else None,
    )
    queue = None
    if broker_name is not None and queue_id is not None:
        queue = MessageQueue(topic, broker_name.strip(), queue_id)

    async def sent() -> SendResult:
        async with _producer(namesrv_addr) as producer:
            return await producer.send(msg, queue=queue)

    result = run(sent)
    mq = result.message_queue
    table(
        [
            ("#Broker Name", "#QID", "#Queue Offset", "#Send Result", "#MsgId", "#OffsetMsgId"),
            (
                mq.broker_name if mq else "-",
                mq.queue_id if mq else "-",
                result.offset,
                result.status.name,
                result.msg_id,
                result.offset_msg_id,
            ),
        ]
    )


@dataclasses.dataclass(slots=True)
class _Round:
    """One timed send."""

    queue: MessageQueue | None
    ok: bool
    rt_ms: int


async def _timed(producer: Producer, msg: Message, queue: MessageQueue) -> _Round:
    started = time.monotonic()
    try:
        await producer.send(msg, queue=queue)
        ok = True
    except PyrmqError:
        ok = False
    return _Round(queue, ok, int((time.monotonic() - started) * 1000))


def _average_rt(rounds: Sequence[_Round]) -> float:
    """The mean round trip, the first send left out (it also opens the connection), as
    mqadmin counts it."""
    counted = rounds[1:] or rounds
    return sum(r.rt_ms for r in counted) / len(counted) if counted else 0.0


def _amount_and_size(amount_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """-a (how many sends) and -s (their body size), as mqadmin's RT commands take them."""

    def options(command: Callable[..., None]) -> Callable[..., None]:
        command = click.option(
            "-s",
            "--size",
            default=128,
            show_default=True,
            type=click.IntRange(0),
            help="Body size, bytes.",
        )(command)
        return click.option(
            "-a",
            "--amount",
            default=100,
            show_default=True,
            type=click.IntRange(1),
            help=amount_help,
        )(command)

    return options


@admin.command("check-msg-send-rt")
@NAMESRV
@click.option("-t", "--topic", required=True, help="Topic name.")
@_amount_and_size("Messages to send.")
def check_msg_send_rt(namesrv_addr: str, topic: str, amount: int, size: int) -> None:
    """Send messages one at a time, each to the next queue of the topic, and print each
    one's queue, outcome and round trip (ms), then the average."""
    topic = topic.strip()
    msg = Message(topic, b"a" * size)

    async def rounds() -> list[_Round]:
        async with _producer(namesrv_addr) as producer:
            queues = await producer.fetch_publish_queues(topic)
            if not queues:
                raise click.ClickException(f"topic {topic} has no writable queue")
            return [await _timed(producer, msg, queues[i % len(queues)]) for i in range(amount)]

    done = run(rounds)
    rows: list[tuple[object, ...]] = [("#Broker Name", "#QID", "#Send Result", "#RT")]
    for r in done:
        q = r.queue
        rows.append(
            (q.broker_name if q else "-", q.queue_id if q else "-", str(r.ok).lower(), r.rt_ms)
        )
    table(rows)
    click.echo(f"Avg RT: {_average_rt(done):.2f}")


@dataclasses.dataclass(slots=True)
class _BrokerRT:
    cluster: str
    broker_name: str
    rt_ms: float
    successes: int
    failures: int
    held: bool = True
    """Whether the broker holds a writable topic to send to."""


async def _broker_rts(
    a: Admin, producer: Producer, cluster: str | None, topic: str | None, amount: int, size: int
) -> list[_BrokerRT]:
    brokers = [b for b in await a.clusters() if cluster is None or b.cluster == cluster]
    if cluster is not None and not brokers:
        raise click.ClickException(f"cluster [{cluster}] not exist")
    out = []
    for b in brokers:
        # As mqadmin: to the topic named after each broker (brokerTopicEnable), whose one
        # queue is the broker's own, so that the round trips are its alone.
        name = topic or b.broker_name
        route = await a.route(name)
        queues = (
            [q for q in route.publish_queues() if q.broker_name == b.broker_name] if route else []
        )
        if not queues:
            click.echo(
                f"{b.broker_name} holds no writable topic {name} (brokerTopicEnable=false?): "
                "name one it holds with -t",
                err=True,
            )
            out.append(_BrokerRT(b.cluster, b.broker_name, 0.0, 0, amount, held=False))
            continue
        msg = Message(name, b"a" * size)
        rounds = [await _timed(producer, msg, queues[i % len(queues)]) for i in range(amount)]
        ok = sum(r.ok for r in rounds)
        out.append(_BrokerRT(b.cluster, b.broker_name, _average_rt(rounds), ok, amount - ok))
    return out


@admin.command("cluster-rt")
@NAMESRV
@_amount_and_size("Messages per broker.")
@click.option("-c", "--cluster", help="Only this cluster's brokers [default: every cluster's].")
@click.option(
    "-p",
    "--print-log",
    default=False,
    show_default=True,
    type=bool,
    help="One time|room|cluster|broker|rt line per broker, for a log.",
)
@click.option(
    "-m", "--machine-room", default="noname", show_default=True, help="Room named in -p lines."
)
@click.option(
    "-i",
    "--interval",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Seconds between rounds.",
)
@click.option(
    "-r", "--rounds", default=1, show_default=True, type=click.IntRange(1), help="Rounds of sends."
)
@click.option(
    "-t", "--topic", help="Send to this topic [default: the one named after each broker]."
)
def cluster_rt(
    namesrv_addr: str,
    amount: int,
    size: int,
    cluster: str | None,
    print_log: bool,
    machine_room: str,
    interval: float,
    rounds: int,
    topic: str | None,
) -> None:
    """Each broker's send round trip: send messages to its own queues one at a time and
    print the average (ms, the first send left out) with the successes and failures."""

    async def measured(a: Admin, producer: Producer) -> list[_BrokerRT]:
        return await _broker_rts(
            a, producer, cluster and cluster.strip(), topic and topic.strip(), amount, size
        )

    config = client_config(namesrv_addr)

    async def all_rounds() -> bool:
        """Whether every broker held the topic in every round."""
        held = True
        async with (
            Admin(namesrv_addr, credentials=config.credentials, tls=config.tls) as a,
            _producer(namesrv_addr) as producer,
        ):
            for n in range(rounds):
                if n:
                    await asyncio.sleep(interval)
                rts = await measured(a, producer)
                _show(rts, print_log, machine_room)
                held = held and all(r.held for r in rts)
        return held

    if not run(all_rounds):
        # The table is shown, but a topic missing is the operator's mistake, not a result.
        raise click.exceptions.Exit(1)


def _show(rts: list[_BrokerRT], print_log: bool, machine_room: str) -> None:
    if print_log:
        now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        for r in rts:
            click.echo(f"{now}|{machine_room}|{r.cluster}|{r.broker_name}|{round(r.rt_ms)}")
        return
    rows: list[tuple[Any, ...]] = [
        ("#Cluster Name", "#Broker Name", "#RT", "#successCount", "#failCount")
    ]
    rows += [(r.cluster, r.broker_name, f"{r.rt_ms:.2f}", r.successes, r.failures) for r in rts]
    table(rows)
