"""Broker settings, with RocketMQ's broker.conf key names."""

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pyrmq.acl.signing import Credentials
from pyrmq.broker.metrics import EXPORTER_TYPES, parse_labels
from pyrmq.broker.state.json_file import write_atomic
from pyrmq.config import (
    LINE_BREAK,
    ROCKETMQ_ALIASES,
    StoreConfig,
    parse_properties,
    read_properties_text,
    rocketmq_key,
)
from pyrmq.errors import ConfigError
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.tls import SECRET_KEYS, TLS_KEYS, TlsConfig

__all__ = ["SECRET_SETTINGS", "BrokerConfig", "setting_key", "write_settings"]

log = logging.getLogger(__name__)

_ALIASES = {
    "brokerName": "broker_name",
    "brokerClusterName": "broker_cluster_name",
    "brokerId": "broker_id",
    "brokerIP1": "broker_ip1",
    "bindAddress": "bind_address",
    "listenPort": "listen_port",
    "serverChannelMaxIdleTimeSeconds": "server_channel_max_idle_s",
    "namesrvAddr": "namesrv_addr",
    "autoCreateTopicEnable": "auto_create_topic_enable",
    "clusterTopicEnable": "cluster_topic_enable",
    "brokerTopicEnable": "broker_topic_enable",
    "brokerPermission": "broker_permission",
    "defaultTopicQueueNums": "default_topic_queue_nums",
    "longPollingEnable": "long_polling_enable",
    "shortPollingTimeMills": "short_polling_time_ms",
    "registerNameServerPeriod": "register_name_server_period_ms",
    "flushConsumerOffsetInterval": "flush_consumer_offset_interval_ms",
    "channelExpiredTimeout": "channel_expired_timeout_ms",
    "grpcServerPort": "grpc_server_port",
    "grpcTransport": "grpc_transport",
    "enablePropertyFilter": "enable_property_filter",
    "defaultMessageRequestMode": "default_message_request_mode",
    "defaultPopShareQueueNum": "default_pop_share_queue_num",
    "serverLoadBalancerEnable": "server_load_balancer_enable",
    "timerMaxDelaySec": "timer_max_delay_s",
    "recallMessageEnable": "recall_message_enable",
    "metricsExporterType": "metrics_exporter_type",
    "metricsPromExporterHost": "metrics_prom_exporter_host",
    "metricsPromExporterPort": "metrics_prom_exporter_port",
    "metricsLabel": "metrics_label",
    "metricsOtelCardinalityLimit": "metrics_otel_cardinality_limit",
    "storeReplyMessageEnable": "store_reply_message_enable",
    "transactionTimeOut": "transaction_timeout_ms",
    "transactionCheckInterval": "transaction_check_interval_ms",
    "transactionCheckMax": "transaction_check_max",
    "maxReconsumeTimes": "max_reconsume_times",
    "mqAccessControlEnable": "mq_access_control_enable",
    "lockQueueTimeout": "lock_queue_timeout_ms",
    "brokerConfigPath": "broker_config_path",
    "haListenPort": "ha_listen_port",
    "haMasterAddress": "ha_master_address",
    "haSendHeartbeatInterval": "ha_send_heartbeat_interval_ms",
    "haHousekeepingInterval": "ha_housekeeping_interval_ms",
    "haTransferBatchSize": "ha_transfer_batch_size",
    "haSlaveFallbehindMax": "ha_slave_fallbehind_max",
    "slaveReadEnable": "slave_read_enable",
    "aclEnable": "acl_enable",
    "plainAclFile": "plain_acl_file",
    "innerClientAuthenticationCredentials": "inner_client_authentication_credentials",
}
_KEYS = {name: key for key, name in _ALIASES.items()}
# Fields holding settings of their own, with their own keys.
_NESTED = frozenset({"store", "tls"})
SECRET_SETTINGS = frozenset({"innerClientAuthenticationCredentials", *SECRET_KEYS})
"""Settings GET_BROKER_CONFIG leaves out: any account may ask for a broker's settings."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """One broker's settings; defaults are RocketMQ's."""

    broker_name: str = "broker-a"
    broker_cluster_name: str = "DefaultCluster"
    # 0 is the master.
    broker_id: int = 0
    # Address clients reach this broker on; written into every stored message.
    broker_ip1: str = "127.0.0.1"
    # Where the broker's ports listen (RocketMQ 5's bindAddress): brokerIP1 when empty;
    # 0.0.0.0 for every interface, as behind NAT, where brokerIP1 is not this host's own.
    bind_address: str = ""
    listen_port: int = 10911
    # Connections idle this long are closed (0: never).
    server_channel_max_idle_s: int = 120
    # RocketMQ 5's gRPC protocol on this port (RocketMQ's proxy uses 8081); -1: not served.
    grpc_server_port: int = -1
    # What serves the gRPC port's plain connections: pyrmq's own HTTP/2 transport ("native")
    # or grpcio ("grpcio"); TLS connections are always grpcio's.
    grpc_transport: str = "native"
    # Name servers, "host:port;host:port".
    namesrv_addr: str = ""
    auto_create_topic_enable: bool = True
    # Topics named after the cluster and the broker take sends (RocketMQ's; mqadmin clusterRT
    # sends to the broker's).
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    # What the broker lets clients do, over every topic's own permission: 6 read and write,
    # 4 read only (sends go elsewhere: its topics are routed read-only), 2 write only.
    broker_permission: int = 6
    default_topic_queue_nums: int = 8
    long_polling_enable: bool = True
    # Consumers may filter by SQL92 over message properties (RocketMQ's default: off).
    enable_property_filter: bool = False
    # What QUERY_ASSIGNMENT answers consumers that leave their rebalance to the broker
    # (clientRebalance=false) for a group and topic no one set a mode for (SET_MESSAGE_REQUEST
    # _MODE): PULL or POP, and in POP how many other members' queues each one also pops (-1:
    # every queue). serverLoadBalancerEnable off: every member gets every queue.
    default_message_request_mode: str = "PULL"
    default_pop_share_queue_num: int = -1
    server_load_balancer_enable: bool = True
    # How long a pull waits when long polling is off.
    short_polling_time_ms: int = 1000
    register_name_server_period_ms: int = 30_000
    flush_consumer_offset_interval_ms: int = 5_000
    # A client silent this long is dropped.
    channel_expired_timeout_ms: int = 120_000
    # Deliveries before a message goes to %DLQ%<group> (the group's retryMaxTimes).
    max_reconsume_times: int = 16
    # A transaction's half message is checked with its producer once it is this old, every
    # interval, at most this many times.
    transaction_timeout_ms: int = 6_000
    transaction_check_interval_ms: int = 60_000
    transaction_check_max: int = 15
    # A queue of a clustering push group moves to another client only once its owner has
    # acked what it was delivered, released it, left, or not pulled it for lockQueueTimeout
    # (DeFiBus's access lock; its timeout is 100 ms, for clients that do not long-poll).
    mq_access_control_enable: bool = True
    lock_queue_timeout_ms: int = 5_000
    # How far ahead a timer message may be due (RocketMQ's default: 3 days).
    timer_max_delay_s: int = 3 * 24 * 3600
    # Producers may recall timer messages before they fall due (RocketMQ 5.3's RecallMessage;
    # off by default there too). A running broker changes it.
    recall_message_enable: bool = False
    # Metrics with RocketMQ's names: PROM serves them for Prometheus on the exporter's host
    # ("": every interface) and port; DISABLE (the default) keeps none. metricsLabel adds
    # "key:value,..." labels to every series.
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_host: str = ""
    metrics_prom_exporter_port: int = 5557
    metrics_label: str = ""
    # Series a counter keeps at most (RocketMQ's limit on each instrument).
    metrics_otel_cardinality_limit: int = 50_000
    # A reply (SEND_REPLY_MESSAGE) is also stored in its topic, {cluster}_REPLY_TOPIC, besides
    # being pushed to its requester.
    store_reply_message_enable: bool = True
    # The broker.conf these settings came from, where settings changed while the broker runs
    # are written (RocketMQ's brokerConfigPath); empty: such changes last until it stops.
    broker_config_path: str = ""
    # Replication (brokerRole is a store setting). A master serves its slaves on haListenPort
    # (-1: the listen port + 1, as RocketMQ; 0: any free port, named to the name servers).
    ha_listen_port: int = -1
    # A slave's master, "host:haPort"; empty: the one the name server names at registration.
    ha_master_address: str = ""
    # A side that heard nothing for the housekeeping interval drops the connection; each sends
    # at least every heartbeat interval.
    ha_send_heartbeat_interval_ms: int = 5_000
    ha_housekeeping_interval_ms: int = 20_000
    # Bytes a master sends a slave at a time (whole append groups, so one may be larger).
    ha_transfer_batch_size: int = 32 * 1024
    # A SYNC_MASTER answers SLAVE_NOT_AVAILABLE at once when no slave is within this many
    # bytes of its CommitLog's end.
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    # Pull answers send consumers reading data the page cache has likely dropped (further
    # behind the CommitLog's end than the store's accessMessageInMemoryMaxRatio) to their
    # group's whichBrokerWhenConsumeSlowly, and the others to its brokerId; off, always to
    # the master. A running broker changes it.
    slave_read_enable: bool = False
    # Requests are checked against the accounts of plain_acl.yml (RocketMQ's plain ACL): by
    # default $ROCKETMQ_HOME/conf/plain_acl.yml, read again when it changes.
    acl_enable: bool = False
    plain_acl_file: str = ""
    # The account this broker signs its own requests to peers and name servers with, as
    # RocketMQ's JSON: {"accessKey": "...", "secretKey": "..."}; empty: unsigned.
    inner_client_authentication_credentials: str = ""
    # TLS on the listen port and towards name servers and peers: RocketMQ's tls.* keys
    # (pyrmq.remoting.tls), which broker.conf may set as RocketMQ's JVM properties do.
    tls: TlsConfig = dataclasses.field(default_factory=TlsConfig)
    store: StoreConfig = dataclasses.field(default_factory=StoreConfig)

    def __post_init__(self) -> None:
        problems = []
        if not 0 <= self.listen_port < 65536:
            problems.append(f"listen_port {self.listen_port} is not a port")
        if not -1 <= self.grpc_server_port < 65536:
            problems.append(f"grpc_server_port {self.grpc_server_port} is not a port or -1")
        if self.grpc_transport not in ("native", "grpcio"):
            problems.append(f"grpc_transport {self.grpc_transport!r} is not native or grpcio")
        if self.transaction_check_interval_ms <= 0 or self.transaction_timeout_ms < 0:
            problems.append("transaction timings must be positive")
        if self.lock_queue_timeout_ms < 0:
            problems.append("lock_queue_timeout_ms must be >= 0")
        # Periods of the broker's loops (one of 0 would spin) and timeouts: RocketMQ's
        # scheduled executors refuse a period of 0 or less, so its broker does not start.
        for key, value in (
            ("flushConsumerOffsetInterval", self.flush_consumer_offset_interval_ms),
            ("registerNameServerPeriod", self.register_name_server_period_ms),
            ("channelExpiredTimeout", self.channel_expired_timeout_ms),
            ("serverChannelMaxIdleTimeSeconds", self.server_channel_max_idle_s),
            ("shortPollingTimeMills", self.short_polling_time_ms),
            ("timerMaxDelaySec", self.timer_max_delay_s),
        ):
            if value <= 0:
                problems.append(f"{key} {value} must be positive")
        if self.default_topic_queue_nums <= 0:
            problems.append("default_topic_queue_nums must be positive")
        elif self.default_topic_queue_nums > self.store.max_queue_nums_per_topic:
            problems.append(
                f"defaultTopicQueueNums {self.default_topic_queue_nums} is more than "
                f"maxQueueNumsPerTopic {self.store.max_queue_nums_per_topic}"
            )
        if self.default_message_request_mode not in ("PULL", "POP"):
            problems.append(
                f"defaultMessageRequestMode {self.default_message_request_mode!r} is not PULL "
                "or POP"
            )
        if self.broker_permission not in (2, 4, 6):
            problems.append(
                f"brokerPermission {self.broker_permission} is not 2 (write), 4 (read) or 6 (both)"
            )
        if self.broker_id < 0:
            problems.append("broker_id must be >= 0")
        elif self.is_slave and self.broker_id == 0:
            problems.append("a SLAVE's broker_id must be > 0 (0 is its master's)")
        elif not self.is_slave and self.broker_id != 0:
            # As RocketMQ's BrokerStartup, which sets a master's id to 0 whatever it was.
            log.warning(
                "brokerId %d of a %s taken as 0: a master's id is 0 (slaves have ids above 0)",
                self.broker_id,
                self.store.broker_role,
            )
            object.__setattr__(self, "broker_id", 0)
        if self.metrics_exporter_type.isdigit() and int(self.metrics_exporter_type) < len(
            EXPORTER_TYPES
        ):
            # RocketMQ takes the type's ordinal too.
            object.__setattr__(
                self, "metrics_exporter_type", EXPORTER_TYPES[int(self.metrics_exporter_type)]
            )
        if self.metrics_otel_cardinality_limit <= 0:
            problems.append("metricsOtelCardinalityLimit must be positive")
        if self.metrics_exporter_type not in ("DISABLE", "PROM"):
            problems.append(
                f"metricsExporterType {self.metrics_exporter_type!r}: pyrmq serves DISABLE or "
                "PROM (OTLP_GRPC and LOG are not supported)"
            )
        if not 0 <= self.metrics_prom_exporter_port < 65536:
            problems.append(
                f"metricsPromExporterPort {self.metrics_prom_exporter_port} is not a port"
            )
        try:
            parse_labels(self.metrics_label)
        except ConfigError as e:
            problems.append(str(e))
        if not -1 <= self.ha_listen_port < 65536:
            problems.append(f"ha_listen_port {self.ha_listen_port} is not a port or -1")
        if self.ha_master_address:
            try:
                split_addresses(self.ha_master_address)
            except ValueError as e:
                problems.append(f"ha_master_address: {e}")
        if min(self.ha_send_heartbeat_interval_ms, self.ha_housekeeping_interval_ms) <= 0:
            problems.append("ha intervals must be positive")
        if self.ha_transfer_batch_size <= 0 or self.ha_slave_fallbehind_max <= 0:
            problems.append("ha_transfer_batch_size and ha_slave_fallbehind_max must be positive")
        try:
            split_addresses(self.namesrv_addr)
        except ValueError as e:
            problems.append(f"namesrv_addr: {e}")
        try:
            self.inner_credentials  # noqa: B018
        except ValueError as e:
            problems.append(f"innerClientAuthenticationCredentials: {e}")
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)

    @property
    def listen_host(self) -> str:
        """The address the broker's ports listen on."""
        return self.bind_address or self.broker_ip1

    @property
    def is_slave(self) -> bool:
        return self.store.broker_role == "SLAVE"

    @property
    def inner_credentials(self) -> Credentials | None:
        """``innerClientAuthenticationCredentials`` as credentials (ValueError if malformed)."""
        text = self.inner_client_authentication_credentials.strip()
        if not text:
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise ValueError("not JSON") from None
        key = value.get("accessKey") if isinstance(value, dict) else None
        secret = value.get("secretKey") if isinstance(value, dict) else None
        if not isinstance(key, str) or not isinstance(secret, str) or not key:
            raise ValueError('expected {"accessKey": "...", "secretKey": "..."}')
        return Credentials(key, secret)

    @property
    def namesrv_addrs(self) -> list[str]:
        return split_addresses(self.namesrv_addr)

    @classmethod
    def from_mapping(
        cls, values: Mapping[str, object], *, base: "BrokerConfig | None" = None
    ) -> Self:
        """Broker keys (camelCase or snake_case) and store keys in one mapping, as broker.conf
        mixes them. Unknown keys are warned about; bad values raise one ConfigError."""
        broker_fields = {f.name: f for f in dataclasses.fields(cls) if f.name not in _NESTED}
        broker_values: dict[str, Any] = {}
        store_values: dict[str, object] = {}
        tls_values: dict[str, object] = {}
        problems = []
        given_as: dict[str, str] = {}
        for key, raw in values.items():
            if key.startswith("tls."):
                tls_values[key] = raw
                continue
            name = _ALIASES.get(key, key)
            # One setting under two spellings (mapedFileSizeCommitLog, mappedFileSizeCommitLog):
            # neither may silently win.
            setting = name if name in broker_fields else ROCKETMQ_ALIASES.get(key, key)
            if setting in given_as:
                problems.append(f"{key}: {setting} is already given as {given_as[setting]}")
                continue
            given_as[setting] = key
            if name in broker_fields:
                try:
                    broker_values[name] = _convert(broker_fields[name].type, raw)
                except (TypeError, ValueError) as e:
                    problems.append(f"{key}: {e}")
            else:
                store_values[key] = raw
        base = base or cls()
        tls = base.tls
        if tls_values:
            try:
                tls = TlsConfig.from_mapping(tls_values, base=base.tls)
            except ConfigError as e:
                problems.extend(e.problems or [str(e)])
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)
        # Keys given here override the base's fields: merge by field name, since broker.conf
        # names them in camelCase (flushDiskType) and the base by field (flush_disk_type).
        store_fields = {f.name for f in dataclasses.fields(StoreConfig)}
        overrides = {
            name if (name := ROCKETMQ_ALIASES.get(key, key)) in store_fields else key: raw
            for key, raw in store_values.items()
        }
        store = (
            StoreConfig.from_mapping({**_store_mapping(base.store), **overrides})
            if store_values
            else base.store
        )
        fields = {**{f: getattr(base, f) for f in broker_fields}, **broker_values}
        return cls(**fields, tls=tls, store=store)

    @classmethod
    def from_properties(cls, path: str | Path, *, base: "BrokerConfig | None" = None) -> Self:
        """Reads a RocketMQ broker.conf (Java properties: ``key=value`` lines, comments)."""
        values = parse_properties(read_properties_text(path), source=str(path))
        values.setdefault("brokerConfigPath", str(path))
        return cls.from_mapping(values, base=base)

    def to_properties(self) -> dict[str, str]:
        """Every setting, broker's and store's, under its RocketMQ key (GET_BROKER_CONFIG)."""
        out = {
            _KEYS.get(f.name, f.name): _format(getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.name not in _NESTED
        }
        for f in dataclasses.fields(self.store):
            out[rocketmq_key(f.name)] = _format(getattr(self.store, f.name))
        out.update(self.tls.to_properties())
        return out


def setting_key(key: str) -> str | None:
    """The key :meth:`BrokerConfig.to_properties` reports a setting under, for any of its
    spellings (RocketMQ's, old or current, or the field name); None for no setting."""
    if key in TLS_KEYS:
        return key
    broker_field = _ALIASES.get(key, key)
    if broker_field in _BROKER_FIELDS:
        return _KEYS.get(broker_field, broker_field)
    store_field = ROCKETMQ_ALIASES.get(key, key)
    if store_field in _STORE_FIELDS:
        return rocketmq_key(store_field)
    return None


_KEY_OF_LINE = re.compile(r"^[ \t\f]*([^#!=: \t\f][^=: \t\f]*)")


def write_settings(path: str | Path, updates: Mapping[str, str]) -> None:
    """Sets ``updates`` (by :func:`setting_key`) in the properties file at ``path``: each entry
    that sets one (with the lines a trailing backslash continues it on) becomes one line with
    the new value, under the key it was written with; the others are appended. Comments and
    every other entry stay as they were. The file is replaced whole (written aside, synced,
    renamed), so a crash leaves the old or the new one."""
    path = Path(path)
    lines = LINE_BREAK.split(path.read_text(encoding="utf-8"))
    if lines and not lines[-1]:
        lines.pop()
    out: list[str] = []
    written: set[str] = set()
    i = 0
    while i < len(lines):
        first = lines[i]
        stripped = first.lstrip(" \t\f")
        end = i
        if stripped and stripped[0] not in "#!":
            while end + 1 < len(lines) and _continues(lines[end]):
                end += 1
        match = None if not stripped or stripped[0] in "#!" else _KEY_OF_LINE.match(first)
        key = setting_key(match.group(1)) if match else None
        if match and key is not None and key in updates:
            out.append(f"{match.group(1)}={_escape(updates[key])}")
            written.add(key)
        else:
            out += lines[i : end + 1]
        i = end + 1
    out += [f"{key}={_escape(value)}" for key, value in updates.items() if key not in written]
    # No backup: the broker must find its configuration file at every moment.
    write_atomic(path, ("\n".join(out) + "\n").encode(), backup=False)


def _continues(line: str) -> bool:
    """Whether a properties line goes on on the next: it ends in an odd number of backslashes."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _escape(value: str) -> str:
    r"""A value as java.util.Properties writes it: backslashes and line breaks escaped, so that
    a value can neither end its line early nor set another key.

    >>> _escape("C:\\store\nbrokerRole=SLAVE")
    'C:\\\\store\\nbrokerRole=SLAVE'
    """
    out = value.replace("\\", "\\\\")
    for char, escaped in (("\n", "\\n"), ("\r", "\\r"), ("\t", "\\t"), ("\f", "\\f")):
        out = out.replace(char, escaped)
    return "\\" + out if out.startswith(" ") else out


def _format(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


_BROKER_FIELDS = frozenset(
    f.name for f in dataclasses.fields(BrokerConfig) if f.name not in _NESTED
)
_STORE_FIELDS = frozenset(f.name for f in dataclasses.fields(StoreConfig))


def _store_mapping(store: StoreConfig) -> dict[str, object]:
    return {f.name: getattr(store, f.name) for f in dataclasses.fields(store)}


def _convert(kind: object, raw: object) -> object:
    if kind in (bool, "bool"):
        if isinstance(raw, bool):
            return raw
        # RocketMQ's Boolean.parseBoolean reads anything but "true" as false: "1" or "yes"
        # would mean false there, so they are refused here rather than read either way.
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ValueError(f"{raw!r} is not true or false")
    if kind in (int, "int"):
        if isinstance(raw, bool):
            raise ValueError(f"{raw!r} is not an integer")
        text = str(raw).strip()
        if re.fullmatch(r"[+-]?[0-9]+", text) is None:
            raise ValueError(f"{raw!r} is not a decimal integer")
        value = int(text)
        if not -(2**63) <= value < 2**63:  # a Java long, the widest RocketMQ's settings take
            raise ValueError(f"{raw!r} is out of range")
        return value
    return str(raw)
