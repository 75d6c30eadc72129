"""Name-server lifecycle: listen, expire silent brokers, stop."""

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pyrmq.errors import ConfigError
from pyrmq.remoting.server import Connection, RemotingServer
from pyrmq.remoting.tls import TlsConfig, TlsMode

from .kv_config import KvConfig
from .processor import NamesrvProcessor
from .route_info import RouteInfo

__all__ = ["NAMESRV_LIVE_SETTINGS", "NAMESRV_SETTINGS", "NameServer", "NamesrvConfig"]

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
    # Connections idle this long are closed (serverChannelMaxIdleTimeSeconds; 0: never).
    server_channel_max_idle_s: int = 120
    # TLS on the listen port (pyrmq.remoting.tls); tls.config.file is read at start.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listen_port {self.listen_port} is not a port (0..65535)")
        for name in ("scan_not_active_broker_interval_ms", "broker_channel_expired_time_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} {getattr(self, name)} is not positive")

    def to_properties(self) -> dict[str, str]:
        """The settings under their RocketMQ keys, as GET_NAMESRV_CONFIG answers them."""
        out = {}
        for key, name in NAMESRV_SETTINGS.items():
            value = getattr(self, name)
            if value is None:
                out[key] = ""
            elif isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = str(value)
        return out

    def updated(self, values: Mapping[str, str]) -> "NamesrvConfig":
        """A copy with ``values`` (RocketMQ keys) applied; ConfigError if one is unknown, is
        not a setting a running name server changes (:data:`NAMESRV_LIVE_SETTINGS`) or is
        malformed. Settings equal to the current ones are no change."""
        unknown = sorted(key for key in values if key not in NAMESRV_SETTINGS)
        if unknown:
            raise ConfigError(
                f"no such name server settings: {', '.join(unknown)} (known: "
                f"{', '.join(sorted(NAMESRV_SETTINGS))})"
            )
        current = self.to_properties()
        fixed = sorted(
            k for k in values if k not in NAMESRV_LIVE_SETTINGS and values[k] != current[k]
        )
        if fixed:
            raise ConfigError(
                f"{', '.join(fixed)} take effect only when the name server starts; a running "
                f"one changes {', '.join(sorted(NAMESRV_LIVE_SETTINGS))}"
            )
        changes: dict[str, Any] = {}
        for key, text in values.items():
            name = NAMESRV_SETTINGS[key]
            if key not in NAMESRV_LIVE_SETTINGS:
                continue
            if isinstance(getattr(self, name), bool):
                if text.strip().lower() not in ("true", "false"):
                    raise ConfigError(f"{key} {text!r} is not true or false")
                changes[name] = text.strip().lower() == "true"
            else:
                try:
                    changes[name] = int(text.strip())
                except ValueError:
                    raise ConfigError(f"{key} {text!r} is not an integer") from None
        return dataclasses.replace(self, **changes)


NAMESRV_SETTINGS: Final[Mapping[str, str]] = {
    "listenPort": "listen_port",
    "kvConfigPath": "kv_config_path",
    "orderMessageEnable": "order_message_enable",
    "scanNotActiveBrokerInterval": "scan_not_active_broker_interval_ms",
    "brokerChannelExpiredTime": "broker_channel_expired_time_ms",
    "serverChannelMaxIdleTimeSeconds": "server_channel_max_idle_s",
}
"""The name server's settings by RocketMQ key (``mqadmin getNamesrvConfig``)."""

NAMESRV_LIVE_SETTINGS: Final = frozenset(
    {"orderMessageEnable", "scanNotActiveBrokerInterval", "brokerChannelExpiredTime"}
)
"""The settings a running name server changes (``mqadmin updateNamesrvConfig``), in memory
only: a restart goes back to the ones it is started with."""


class NameServer:
    """A RocketMQ name server on asyncio."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        config = config or NamesrvConfig()
        self.routes = RouteInfo()
        path = config.kv_config_path
        self.kv = KvConfig(Path(path).expanduser() if path else None)
        self.server = RemotingServer(
            config.listen_host, config.listen_port, max_idle_s=config.server_channel_max_idle_s
        )
        self.processor = NamesrvProcessor(self.routes, self.kv, config)
        self.processor.install(self.server)
        self._scanner: asyncio.Task[None] | None = None

    @property
    def config(self) -> NamesrvConfig:
        """The settings now: UPDATE_NAMESRV_CONFIG changes some while it runs."""
        return self.processor.config

    @property
    def address(self) -> str:
        return self.server.address

    async def start(self) -> None:
        tls = self.config.tls.with_file()
        self.server.tls = tls.server_context()
        self.server.tls_only = tls.server_mode is TlsMode.ENFORCING
        await self.server.start()
        # The port bound, for GET_NAMESRV_CONFIG (0 asks for any free one).
        self.processor.config = dataclasses.replace(self.config, listen_port=self.server.port)
        self._scanner = asyncio.get_running_loop().create_task(self._scan())
        log.info("name server started address=%s", self.address)

    async def _scan(self) -> None:
        while True:
            # Read each time: UPDATE_NAMESRV_CONFIG may have changed it.
            await asyncio.sleep(self.config.scan_not_active_broker_interval_ms / 1000)
            try:
                connections = {a: live.connection for a, live in self.routes.live.items()}
                gone = self.routes.expire(
                    int(time.time() * 1000), self.config.broker_channel_expired_time_ms
                )
                # As RocketMQ's: a broker silent that long loses its connection too, so that
                # one that comes back registers afresh.
                for addr in gone:
                    if isinstance(conn := connections.get(addr), Connection):
                        conn.close()
            except Exception:
                log.exception("broker expiry scan failed")

    async def stop(self) -> None:
        if self._scanner is not None:
            self._scanner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scanner
        await self.server.stop()
        log.info("name server stopped address=%s", self.address)
