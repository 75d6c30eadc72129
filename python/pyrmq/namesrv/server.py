"""Name-server lifecycle: listen, expire silent brokers, stop."""

import asyncio
import contextlib
import dataclasses
import logging
import time
from pathlib import Path

from pyrmq.errors import ConfigError
from pyrmq.remoting.server import RemotingServer
from pyrmq.remoting.tls import TlsConfig, TlsMode

from .kv_config import KvConfig
from .processor import NamesrvProcessor
from .route_info import RouteInfo

__all__ = ["NameServer", "NamesrvConfig"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NamesrvConfig:
    """Name-server settings; defaults are RocketMQ's."""

    listen_host: str = "127.0.0.1"
    # RocketMQ's listenPort; 0 picks a free port.
    listen_port: int = 9876
    # How often silent brokers are looked for (scanNotActiveBroker).
    scan_not_active_broker_interval_ms: int = 10_000
    # A broker silent this long is dropped (brokerChannelExpiredTime).
    broker_channel_expired_time_ms: int = 120_000
    # RocketMQ's kvConfigPath (its default is ~/namesrv/kvConfig.json); None keeps the KV
    # config in memory only.
    kv_config_path: str | None = "~/.pyrmq/namesrv/kvConfig.json"
    # Routes carry a topic's ORDER_TOPIC_CONFIG value as orderTopicConf.
    order_message_enable: bool = False
    # TLS on the listen port (pyrmq.remoting.tls); tls.config.file is read at start.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listen_port {self.listen_port} is not a port (0..65535)")


class NameServer:
    """A RocketMQ name server on asyncio."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.config = config or NamesrvConfig()
        self.routes = RouteInfo()
        path = self.config.kv_config_path
        self.kv = KvConfig(Path(path).expanduser() if path else None)
        self.server = RemotingServer(self.config.listen_host, self.config.listen_port)
        NamesrvProcessor(
            self.routes, self.kv, order_message_enable=self.config.order_message_enable
        ).install(self.server)
        self._scanner: asyncio.Task[None] | None = None

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        tls = self.config.tls.with_file()
        self.server.tls = tls.server_context()
        self.server.tls_only = tls.server_mode is TlsMode.ENFORCING
        await self.server.start()
        self._scanner = asyncio.get_running_loop().create_task(self._scan())
        log.info("name server started address=%s", self.address)

    async def _scan(self) -> None:
        interval = self.config.scan_not_active_broker_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.routes.expire(
                    int(time.time() * 1000), self.config.broker_channel_expired_time_ms
                )
            except Exception:
                log.exception("broker expiry scan failed")

    async def stop(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
        await self.server.stop()
        log.info("name server stopped address=%s", self.address)
