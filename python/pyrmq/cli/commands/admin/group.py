"""The ``pyrmq admin`` command group and what its commands share: the name-server option,
an :class:`~pyrmq.client.admin.Admin` for the question asked, and plain-text tables."""

import asyncio
import datetime
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar, cast

import click

from pyrmq.acl.signing import Credentials
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig
from pyrmq.errors import PartialFailureError, PyrmqError
from pyrmq.remoting.tls import client_context

__all__ = [
    "NAMESRV",
    "admin",
    "ask",
    "client_config",
    "host_port",
    "pairs",
    "per_target",
    "properties",
    "run",
    "shown_time",
    "table",
    "timestamp_ms",
]

T = TypeVar("T")

_TLS = "pyrmq.tls"

NAMESRV = click.option(
    "-n",
    "--namesrv-addr",
    default="127.0.0.1:9876",
    show_default=True,
    envvar="NAMESRV_ADDR",
    help="Name servers, host:port;host:port (else $NAMESRV_ADDR, as mqadmin reads it).",
)


def host_port(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A server address option's value, ``host:port`` stripped of blanks (None if not given)."""
    if value is None:
        return None
    host, _, port = value.strip().rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{value!r} is not host:port", ctx, param)
    return f"{host}:{port}"


def ask(
    namesrv_addr: str,
    question: Callable[[Admin], Awaitable[T]],
    show: Callable[[T], None] | None = None,
) -> T:
    """``question``'s answer from an :class:`Admin` of the command's name servers, account
    and TLS, shown by ``show`` when given (see :func:`run`)."""
    ctx = click.get_current_context()
    credentials = ctx.find_object(Credentials)
    tls = ctx.meta.get(_TLS)

    async def asked() -> T:
        async with Admin(namesrv_addr, credentials=credentials, tls=tls) as admin:
            return await question(admin)

    return run(asked, show)


def run(work: Callable[[], Awaitable[T]], show: Callable[[T], None] | None = None) -> T:
    """Runs ``work`` in a new event loop and ``show``s its result; a pyrmq error becomes the
    command's error. When some of the brokers or name servers asked failed, ``show`` shows
    what the others did or answered, a line on stderr names each one that failed and why,
    and the command exits 1."""

    async def main() -> T:
        return await work()

    try:
        result = asyncio.run(main())
    except PartialFailureError as e:
        if show is None:
            raise click.ClickException(str(e)) from e
        # The error's result is the work's, from the targets that succeeded.
        show(cast(T, e.result))
        for target, error in e.failed.items():
            click.echo(f"Error: {target} failed: {error}", err=True)
        raise click.exceptions.Exit(1) from e
    except PyrmqError as e:
        raise click.ClickException(str(e)) from e
    if show is not None:
        show(result)
    return result


def client_config(namesrv_addr: str) -> ClientConfig:
    """Settings for a producer or consumer a command runs: the name servers, the account and
    TLS given to ``pyrmq admin``, and an instance of its own."""
    ctx = click.get_current_context()
    try:
        return ClientConfig(
            namesrv_addr=namesrv_addr,
            instance_name=f"admin-{time.time_ns()}",
            credentials=ctx.find_object(Credentials),
            tls=ctx.meta.get(_TLS),
        )
    except PyrmqError as e:
        raise click.BadParameter(str(e), param_hint="--namesrv-addr") from e


def timestamp_ms(text: str, param_hint: str) -> int:
    """mqadmin's time forms: ms since the epoch, or local time as ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is neither ms since the epoch nor yyyy-MM-dd#HH:mm:ss:SSS",
            param_hint=param_hint,
        ) from None
    return int(when.timestamp() * 1000)


def shown_time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]


def table(rows: list[tuple[object, ...]]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def properties(values: dict[str, str]) -> str:
    """A message's properties as mqadmin prints them (a Java map): ``{KEYS=k1, TAGS=TagA}``."""
    return "{" + ", ".join(f"{key}={value}" for key, value in sorted(values.items())) + "}"


def pairs(values: dict[str, str], sep: str) -> None:
    width = max(map(len, values), default=0)
    for key in sorted(values):
        click.echo(f"{key.ljust(width)} {sep} {values[key]}")


def per_target(line: str, targets: list[str]) -> None:
    """``line`` once for each broker or name server done, naming it."""
    for target in targets:
        click.echo(f"{line}, {target}")


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
