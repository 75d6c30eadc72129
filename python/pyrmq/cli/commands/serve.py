"""``pyrmq serve``, ``pyrmq namesrv`` and ``pyrmq broker``: run until SIGTERM or Ctrl-C."""

import asyncio
import dataclasses
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import click

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.controller import BrokerController
from pyrmq.config import StoreConfig
from pyrmq.errors import ConfigError, PyrmqError
from pyrmq.eventloop import loop_factory
from pyrmq.namesrv import NameServer, NamesrvConfig
from pyrmq.remoting.tls import TlsConfig

log = logging.getLogger(__name__)

DEFAULT_STORE = Path("~/.pyrmq/store")
PORT = click.IntRange(0, 65535)
GRPC_PORT = click.IntRange(-1, 65535)
# RocketMQ 5's proxy port, where its gRPC clients look by default.
DEFAULT_GRPC_PORT = 8081
LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


class Service(Protocol):
    what: str

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def ready_line(self) -> str: ...


class EmbeddedServers:
    """A name server and a broker registered with it, in one process."""

    what = "name server and broker"

    def __init__(self, namesrv_port: int, broker: BrokerConfig) -> None:
        # One TLS setting and one listen address for both: the name server listens as the
        # broker does, and is reached at the broker's address. Its KV config (order topics)
        # is kept in the store's directory with the broker's tables, so that each store
        # has its own.
        kv_path = Path(broker.store.store_path_root_dir) / "namesrv" / "kvConfig.json"
        self.namesrv = NameServer(
            NamesrvConfig(
                listen_host=broker.listen_host,
                listen_port=namesrv_port,
                tls=broker.tls,
                kv_config_path=str(kv_path),
            )
        )
        self._broker_config = broker
        self.broker: BrokerController | None = None

    @property
    def namesrv_address(self) -> str:
        return f"{self._broker_config.broker_ip1}:{self.namesrv.server.port}"

    async def start(self) -> None:
        await self.namesrv.start()
        config = dataclasses.replace(self._broker_config, namesrv_addr=self.namesrv_address)
        if self.namesrv.server.tls_only:
            # The broker registers with a name server that takes TLS only.
            config = dataclasses.replace(config, tls=dataclasses.replace(config.tls, enable=True))
        broker = BrokerController(config)
        await broker.start()
        self.broker = broker

    async def stop(self) -> None:
        try:
            if self.broker is not None:
                await self.broker.stop()
        finally:
            await self.namesrv.stop()

    def ready_line(self) -> str:
        assert self.broker is not None
        line = f"pyrmq ready: name server {self.namesrv_address}, broker {self.broker.address}"
        return line + _grpc_part(self.broker)


class _Single:
    """One name server or one broker, with the line it prints when ready."""

    def __init__(self, server: NameServer | BrokerController, what: str) -> None:
        self.server = server
        self.what = what

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    def ready_line(self) -> str:
        line = f"pyrmq {self.what} ready: {self.server.address}"
        if isinstance(self.server, BrokerController):
            line += _grpc_part(self.server)
        return line


def _grpc_part(broker: BrokerController) -> str:
    """The broker's other ports: gRPC, and metrics when served."""
    part = "" if broker.grpc_address is None else f", gRPC {broker.grpc_address}"
    metrics = broker.metrics_address
    return part if metrics is None else f"{part}, metrics {metrics}"


def _setup_logging(level: str, log_file: Path | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handlers.append(logging.FileHandler(log_file))
        except OSError as e:
            raise click.UsageError(f"--log-file {log_file}: {e.strerror or e}") from None
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        handlers=handlers,
        force=True,
    )


def _run(make: Callable[[], Service]) -> None:
    """Makes and starts a service, prints its ready line, and stops it cleanly on SIGTERM or
    SIGINT."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            service = make()
        except (PyrmqError, OSError) as e:
            # A table file it cannot read: say so, without a traceback.
            raise click.ClickException(f"cannot start: {e}") from e
        stopped: Exception | None = None
        try:
            try:
                await service.start()
            except (PyrmqError, OSError) as e:
                # A store it cannot open, a port in use: say so, without a traceback.
                raise click.ClickException(f"cannot start: {e}") from e
            click.echo(service.ready_line())
            await stop.wait()
        finally:
            try:
                await service.stop()
            except Exception as e:
                log.error("stopping the %s failed: %s", service.what, e)
                stopped = e
        if stopped is not None:
            # A stop that did not finish (a full disk) must not look like a clean one.
            raise click.ClickException(f"{service.what} did not stop cleanly: {stopped}")

    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())


def _broker_config(
    config_file: Path | None,
    store: Path | None,
    port: int | None,
    flush: str | None,
    namesrv_addr: str | None,
    grpc_port: int | None = None,
    acl: Path | None = None,
    tls_config: Path | None = None,
    *,
    grpc_default: int = -1,
    namesrv_default: str = "",
) -> BrokerConfig:
    # The store's default root is pyrmq's, unless the file or --store names one.
    base = BrokerConfig(
        store=StoreConfig(store_path_root_dir=str(DEFAULT_STORE.expanduser())),
        grpc_server_port=grpc_default,
        namesrv_addr=namesrv_default,
    )
    try:
        config = BrokerConfig.from_properties(config_file, base=base) if config_file else base
    except (ConfigError, OSError) as e:
        raise click.UsageError(f"{config_file}: {e}") from e
    store_config = config.store
    if store is not None:
        store_config = dataclasses.replace(
            store_config, store_path_root_dir=str(store.expanduser())
        )
    if flush is not None:
        kind = "SYNC_FLUSH" if flush == "sync" else "ASYNC_FLUSH"
        store_config = dataclasses.replace(store_config, flush_disk_type=kind)
    changes: dict[str, object] = {"store": store_config}
    if port is not None:
        changes["listen_port"] = port
    if namesrv_addr is not None:
        changes["namesrv_addr"] = namesrv_addr
    if grpc_port is not None:
        changes["grpc_server_port"] = grpc_port
    if acl is not None:
        changes["acl_enable"] = True
        changes["plain_acl_file"] = str(acl)
    if tls_config is not None:
        changes["tls"] = dataclasses.replace(config.tls, config_file=str(tls_config))
    try:
        return dataclasses.replace(config, **changes)  # type: ignore[arg-type]
    except ConfigError as e:
        raise click.UsageError(str(e)) from e


@click.command("serve")
@click.option(
    "--store",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Store directory [default: {DEFAULT_STORE}].",
)
@click.option(
    "--namesrv-port", default=9876, show_default=True, type=PORT, help="Name server port; 0: any."
)
@click.option("--broker-port", type=PORT, help="Broker port [default: 10911]; 0: any.")
@click.option(
    "--grpc-port",
    type=GRPC_PORT,
    help=f"RocketMQ 5 gRPC port [default: {DEFAULT_GRPC_PORT}]; 0: any; -1: none.",
)
@click.option("--flush", type=click.Choice(["sync", "async"]), help="flushDiskType [async].")
@click.option(
    "--acl",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Check requests against this plain_acl.yml (aclEnable, plainAclFile).",
)
@click.option(
    "--tls-config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TLS settings: a RocketMQ tls.properties (tls.config.file).",
)
@click.option(
    "-c",
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A RocketMQ broker.conf.",
)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), help="Also log here.")
def serve(
    store: Path | None,
    namesrv_port: int,
    broker_port: int | None,
    grpc_port: int | None,
    flush: str | None,
    acl: Path | None,
    tls_config: Path | None,
    config_file: Path | None,
    log_level: str,
    log_file: Path | None,
) -> None:
    """A name server and a broker in one process, on an embedded store."""
    _setup_logging(log_level, log_file)
    config = _broker_config(
        config_file,
        store,
        broker_port,
        flush,
        None,
        grpc_port,
        acl,
        tls_config,
        grpc_default=DEFAULT_GRPC_PORT,
    )
    _run(lambda: EmbeddedServers(namesrv_port, config))


@click.command("namesrv")
@click.option("--port", default=9876, show_default=True, type=PORT, help="Listen port; 0: any.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Listen address; 0.0.0.0 for every interface (brokers and clients on other hosts).",
)
@click.option(
    "--tls-config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TLS settings: a RocketMQ tls.properties (tls.config.file).",
)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), help="Also log here.")
def namesrv(
    port: int, host: str, tls_config: Path | None, log_level: str, log_file: Path | None
) -> None:
    """A name server."""
    _setup_logging(log_level, log_file)
    tls = TlsConfig() if tls_config is None else TlsConfig(config_file=str(tls_config))
    config = NamesrvConfig(listen_host=host, listen_port=port, tls=tls)
    _run(lambda: _Single(NameServer(config), "name server"))


@click.command("broker")
@click.option("-n", "--namesrv-addr", help="Name servers, host:port;host:port.")
@click.option(
    "-c",
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="A RocketMQ broker.conf.",
)
@click.option("--store", type=click.Path(file_okay=False, path_type=Path), help="Store directory.")
@click.option("--port", type=PORT, help="Listen port (overrides listenPort).")
@click.option(
    "--grpc-port",
    type=GRPC_PORT,
    help="RocketMQ 5 gRPC port (overrides grpcServerPort); 0: any; -1: none [default: none].",
)
@click.option("--flush", type=click.Choice(["sync", "async"]), help="flushDiskType.")
@click.option(
    "--acl",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Check requests against this plain_acl.yml (aclEnable, plainAclFile).",
)
@click.option(
    "--tls-config",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TLS settings: a RocketMQ tls.properties (tls.config.file).",
)
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path), help="Also log here.")
def broker(
    namesrv_addr: str | None,
    config_file: Path | None,
    store: Path | None,
    port: int | None,
    grpc_port: int | None,
    flush: str | None,
    acl: Path | None,
    tls_config: Path | None,
    log_level: str,
    log_file: Path | None,
) -> None:
    """A broker that registers with the given name servers."""
    _setup_logging(log_level, log_file)
    config = _broker_config(
        config_file,
        store,
        port,
        flush,
        namesrv_addr,
        grpc_port,
        acl,
        tls_config,
        # As RocketMQ's broker: the environment's, unless broker.conf or -n names others.
        namesrv_default=os.environ.get("NAMESRV_ADDR", ""),
    )
    if not config.namesrv_addrs:
        raise click.UsageError("no name server: give -n HOST:PORT or namesrvAddr in broker.conf")
    _run(lambda: _Single(BrokerController(config), "broker"))
