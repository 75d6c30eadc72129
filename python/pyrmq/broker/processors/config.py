"""GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG: the broker's settings as ``mqadmin
getBrokerConfig`` shows them, and the ones it changes while it runs (``updateBrokerConfig``);
DELETE_EXPIRED_COMMITLOG: retention at once, whatever the hour (``deleteExpiredCommitLog``).

The store's retention settings, the switches read on each request (``LIVE_SETTINGS``:
``recallMessageEnable``, ``slaveReadEnable``, ``storeReplyMessageEnable``) and
``brokerPermission`` (registered again at once) change at once and are written to the broker's
configuration file, so that a restart keeps them. Any other setting
takes effect only when the broker starts, and a request to change one is refused whole, rather
than accepted and silently not applied.
"""

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING

from pyrmq.broker.config import SECRET_SETTINGS, BrokerConfig, setting_key, write_settings
from pyrmq.config import RETENTION_FIELDS, parse_properties, rocketmq_key
from pyrmq.errors import ConfigError
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.remoting.server import Connection, RemotingServer

if TYPE_CHECKING:
    from pyrmq.broker.controller import BrokerController

__all__ = ["LIVE_SETTINGS", "ConfigProcessor"]

log = logging.getLogger(__name__)

LIVE_SETTINGS = frozenset(
    {
        *(rocketmq_key(field) for field in RETENTION_FIELDS),
        "recallMessageEnable",
        "slaveReadEnable",
        "storeReplyMessageEnable",
        "brokerPermission",
    }
)
"""The settings (RocketMQ keys) a running broker changes."""


class ConfigProcessor:
    def __init__(self, broker: "BrokerController") -> None:
        self.broker = broker
        # Updates one at a time: each starts from the settings the one before left.
        self._updating = asyncio.Lock()
        self._version = 0
        self._version_ms = time.time_ns() // 1_000_000

    def install(self, server: RemotingServer) -> None:
        server.register(RequestCode.GET_BROKER_CONFIG, self.get_config)
        server.register(RequestCode.UPDATE_BROKER_CONFIG, self.update_config)
        server.register(RequestCode.DELETE_EXPIRED_COMMITLOG, self.delete_expired)

    async def get_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Every setting as ``key=value`` lines, with the version of the settings."""
        settings = sorted(
            (key, value)
            for key, value in self.broker.config.to_properties().items()
            if key not in SECRET_SETTINGS
        )
        body = "".join(f"{key}={value}\n" for key, value in settings).encode()
        version = {"counter": self._version, "stateVersion": 0, "timestamp": self._version_ms}
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"version": json.dumps(version, separators=(",", ":"))},
            body=body,
        )

    async def update_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Applies ``key=value`` lines: all of them, or none with the reason in the remark."""
        try:
            await self._update(parse_properties(request.body.decode("utf-8", "replace")))
        except (ConfigError, OSError) as e:
            return RemotingCommand.response_to(request, ResponseCode.SYSTEM_ERROR, remark=str(e))
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS)

    async def delete_expired(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """Deletes the CommitLog segments older than ``fileReservedTime`` now, as the delete
        hour would; the remark says how many went."""
        store = self.broker.store
        deleted = await asyncio.to_thread(store.delete_expired_files, force=True)
        log.info("deleted %d expired CommitLog segments on request", deleted)
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, remark=f"{deleted} expired CommitLog segments deleted"
        )

    async def _update(self, values: dict[str, str]) -> None:
        if not values:
            raise ConfigError("no settings given")
        unknown = sorted(key for key in values if setting_key(key) is None)
        if unknown:
            raise ConfigError(f"no such settings: {', '.join(unknown)}")
        async with self._updating:
            old = self.broker.config
            new = BrokerConfig.from_mapping(values, base=old)
            before, after = old.to_properties(), new.to_properties()
            changed = {key: value for key, value in after.items() if value != before[key]}
            fixed = sorted(changed.keys() - LIVE_SETTINGS)
            if fixed:
                raise ConfigError(
                    f"{', '.join(fixed)} take effect only when the broker starts: set them in "
                    f"its configuration file. A running broker changes "
                    f"{', '.join(sorted(LIVE_SETTINGS))}"
                )
            if not changed:
                return
            if old.broker_config_path:
                # Saved first: a change that cannot be kept is not made.
                await asyncio.to_thread(write_settings, old.broker_config_path, changed)
            self.broker.store.set_retention(
                {f: getattr(new.store, f) for f in RETENTION_FIELDS if rocketmq_key(f) in changed}
            )
            self.broker.config = new
            self._version += 1
            self._version_ms = time.time_ns() // 1_000_000
            log.info(
                "settings changed: %s%s",
                ", ".join(f"{key}={value}" for key, value in sorted(changed.items())),
                f" (saved to {old.broker_config_path})" if old.broker_config_path else "",
            )
            if "brokerPermission" in changed:
                # The routes say it at once, as RocketMQ's broker registers again.
                self.broker.topics.next_version()
                await self.broker.register_all()
