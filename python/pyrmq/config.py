"""Store configuration: :class:`StoreConfig` and its loaders.

Field names are snake_case with their unit in the name; the defaults equal RocketMQ's
``MessageStoreConfig``. :data:`ROCKETMQ_ALIASES` maps the camelCase keys of a RocketMQ
``broker.conf`` onto the fields, so an existing properties file loads unchanged.
"""

import dataclasses
import ipaddress
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Self

from pyrmq.errors import ConfigError

__all__ = [
    "ASYNC_FLUSH",
    "ASYNC_MASTER",
    "BROKER_ROLES",
    "CQ_STORE_UNIT_SIZE",
    "FLUSH_DISK_TYPES",
    "RETENTION_FIELDS",
    "ROCKETMQ_ALIASES",
    "SLAVE",
    "SYNC_FLUSH",
    "SYNC_MASTER",
    "StoreConfig",
    "parse_delay_levels",
    "parse_properties",
    "rocketmq_key",
]

log = logging.getLogger(__name__)

ASYNC_FLUSH: Final = "ASYNC_FLUSH"
SYNC_FLUSH: Final = "SYNC_FLUSH"
FLUSH_DISK_TYPES: Final = frozenset({ASYNC_FLUSH, SYNC_FLUSH})

ASYNC_MASTER: Final = "ASYNC_MASTER"
SYNC_MASTER: Final = "SYNC_MASTER"
SLAVE: Final = "SLAVE"
BROKER_ROLES: Final = frozenset({ASYNC_MASTER, SYNC_MASTER, SLAVE})

CQ_STORE_UNIT_SIZE: Final = 20
"""Bytes in one ConsumeQueue unit: phy_offset i64, size i32, tags_code i64."""

_I32_MAX: Final = 2**31 - 1
_I64_MAX: Final = 2**63 - 1
_MS_PER_HOUR: Final = 3_600_000
_DELAY_UNIT_MS: Final[Mapping[str, int]] = MappingProxyType(
    {"s": 1_000, "m": 60_000, "h": _MS_PER_HOUR, "d": 24 * _MS_PER_HOUR}
)

ROCKETMQ_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "storePathRootDir": "store_path_root_dir",
        "storePathCommitLog": "store_path_commit_log",
        "mappedFileSizeCommitLog": "mapped_file_size_commit_log",
        "mapedFileSizeCommitLog": "mapped_file_size_commit_log",
        "mappedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
        "mapedFileSizeConsumeQueue": "mapped_file_size_consume_queue",
        "flushDiskType": "flush_disk_type",
        "brokerRole": "broker_role",
        "flushIntervalCommitLog": "flush_interval_commit_log_ms",
        "flushIntervalConsumeQueue": "flush_interval_consume_queue_ms",
        "syncFlushTimeout": "sync_flush_timeout_ms",
        "fileReservedTime": "file_reserved_time_hours",
        "deleteWhen": "delete_when",
        "cleanResourceInterval": "clean_resource_interval_ms",
        "diskMaxUsedSpaceRatio": "disk_max_used_space_ratio",
        "diskSpaceCleanForciblyRatio": "disk_space_clean_forcibly_ratio",
        "diskSpaceWarningLevelRatio": "disk_space_warning_level_ratio",
        "maxMessageSize": "max_message_size",
        "maxTransferBytesOnMessageInMemory": "max_transfer_bytes_on_message_in_memory",
        "maxTransferCountOnMessageInMemory": "max_transfer_count_on_message_in_memory",
        "maxTransferBytesOnMessageInDisk": "max_transfer_bytes_on_message_in_disk",
        "maxTransferCountOnMessageInDisk": "max_transfer_count_on_message_in_disk",
        "accessMessageInMemoryMaxRatio": "access_message_in_memory_max_ratio",
        "messageIndexEnable": "message_index_enable",
        "maxHashSlotNum": "max_hash_slot_num",
        "maxIndexNum": "max_index_num",
        "messageDelayLevel": "message_delay_level",
        "checkCRCOnRecover": "check_crc_on_recover",
        "storeHost": "store_host",
        "maxQueueNumsPerTopic": "max_queue_nums_per_topic",
    }
)
"""RocketMQ property key -> StoreConfig field. ``maped*`` is the spelling of RocketMQ before 4.4."""

RETENTION_FIELDS: Final = frozenset(
    {
        "file_reserved_time_hours",
        "delete_when",
        "disk_max_used_space_ratio",
        "disk_space_clean_forcibly_ratio",
        "disk_space_warning_level_ratio",
    }
)
"""The StoreConfig fields an open store can change (``MessageStore.set_retention``)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class StoreConfig:
    """Settings of one message store, checked as a whole when the object is built.

    Build it directly, or load RocketMQ keys with :meth:`from_properties`, :meth:`from_mapping`
    or :meth:`from_env`. Use :func:`dataclasses.replace` for a changed copy. Every problem found
    is reported in a single :class:`~pyrmq.errors.ConfigError`.

    Example:
        >>> config = StoreConfig(flush_disk_type="SYNC_FLUSH")
        >>> config.mapped_file_size_commit_log
        1073741824
        >>> StoreConfig.from_mapping({"flushDiskType": "SYNC_FLUSH"}) == config
        True
        >>> config.delay_levels_ms()[:3]
        [1000, 5000, 10000]
        >>> StoreConfig(max_message_size=0)
        Traceback (most recent call last):
        ...
        pyrmq.errors.ConfigError: invalid StoreConfig (1 problem):
          - max_message_size (maxMessageSize) = 0: must be in [1, 2147483647]
    """

    # Directory holding commitlog/, consumequeue/, index/ and checkpoint; '~' is expanded.
    store_path_root_dir: str = "~/store"
    # The CommitLog's directory when not <root>/commitlog, often a disk of its own; '~' is
    # expanded. Disk use is checked here and at the root.
    store_path_commit_log: str = ""
    # Bytes in one CommitLog segment file.
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    # Bytes in one ConsumeQueue segment file: 300,000 units of 20 bytes.
    mapped_file_size_consume_queue: int = 300_000 * CQ_STORE_UNIT_SIZE
    # ASYNC_FLUSH: put returns once the record is in the page cache; SYNC_FLUSH: after fsync.
    flush_disk_type: str = ASYNC_FLUSH
    # ASYNC_MASTER or SYNC_MASTER: a master (a SYNC_MASTER answers a send once a slave has it);
    # SLAVE: a copy of its master's CommitLog that only replication writes.
    broker_role: str = ASYNC_MASTER
    # Period of the background CommitLog flush under ASYNC_FLUSH.
    flush_interval_commit_log_ms: int = 500
    # Period of the background ConsumeQueue flush.
    flush_interval_consume_queue_ms: int = 1000
    # Longest a SYNC_FLUSH put waits for its fsync before reporting FLUSH_DISK_TIMEOUT.
    sync_flush_timeout_ms: int = 5000
    # Age after which a CommitLog segment may be deleted (by its last modification time).
    file_reserved_time_hours: int = 72
    # Hours of the day (local time, ';'-separated) at which expired segments are deleted.
    delete_when: str = "04"
    # Period of the retention check.
    clean_resource_interval_ms: int = 10000
    # Disk usage percent above which expired segments are deleted at any hour.
    disk_max_used_space_ratio: int = 75
    # Disk usage percent above which the oldest segments are deleted even if not expired.
    disk_space_clean_forcibly_ratio: int = 85
    # Disk usage percent above which puts are refused with DiskFullError.
    disk_space_warning_level_ratio: int = 90
    # Largest body a put accepts, in bytes (RocketMQ 5 checks the body, not the whole record).
    max_message_size: int = 1024 * 1024 * 4
    # Byte budget of one get() batch served from memory.
    max_transfer_bytes_on_message_in_memory: int = 1024 * 256
    # Message budget of one get() batch served from memory.
    max_transfer_count_on_message_in_memory: int = 32
    # The budgets of a batch the page cache has likely dropped, read from the disk: messages
    # further behind the end of the CommitLog than access_message_in_memory_max_ratio percent
    # of the machine's memory.
    max_transfer_bytes_on_message_in_disk: int = 1024 * 64
    max_transfer_count_on_message_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    # Build the key index behind query_message().
    message_index_enable: bool = True
    # Hash slots in one index file.
    max_hash_slot_num: int = 5_000_000
    # Index entries in one index file.
    max_index_num: int = 5_000_000 * 4
    # Delay of each level, level 1 first; units s, m, h, d.
    message_delay_level: str = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    # Check every record's body CRC when recovering the CommitLog at open.
    check_crc_on_recover: bool = True
    # "ipv4:port" written into each record and into offset message ids.
    store_host: str = "127.0.0.1:10911"
    # Queue ids of a topic must be in [0, this).
    max_queue_nums_per_topic: int = 1024

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ConfigError(_summary(problems, source=None), problems=problems)

    @classmethod
    def from_mapping(cls, values: Mapping[str, object]) -> Self:
        """Build a config from snake_case field names or RocketMQ camelCase keys.

        String values are converted to the field's type: integers in decimal, booleans as
        ``true``/``false`` in any case. Unknown keys are logged as a warning and ignored.

        Args:
            values: Key -> value; a key may be a field name or a RocketMQ property key.

        Raises:
            ConfigError: Listing every value that failed to convert or to validate.
        """
        entries = [(key, _resolve_key(key), value) for key, value in values.items()]
        return cls._build(entries, source="mapping")

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str]) -> Self:
        """Load a RocketMQ ``.properties`` file such as ``broker.conf``.

        The file uses Java properties syntax: ``key=value``, ``key: value`` or ``key value``
        lines, whole-line comments starting with ``#`` or ``!``, a trailing backslash to continue
        a line, and backslash escapes. Keys that are not store settings (``brokerName`` and the
        like) are logged as a warning and ignored.

        Args:
            path: The file to read, UTF-8 encoded (else ISO-8859-1, as Java reads it).

        Raises:
            ConfigError: The file cannot be read, or lists every value that is invalid.
        """
        try:
            text = read_properties_text(path)
        except OSError as exc:
            raise ConfigError(f"cannot read store config {os.fspath(path)!r}: {exc}") from exc
        properties = parse_properties(text, source=os.fspath(path))
        entries = [(key, _resolve_key(key), value) for key, value in properties.items()]
        return cls._build(entries, source=os.fspath(path))

    @classmethod
    def from_env(cls, prefix: str = "PYRMQ_", environ: Mapping[str, str] | None = None) -> Self:
        """Load settings from environment variables named ``<prefix><FIELD_NAME>``.

        For example ``PYRMQ_MAPPED_FILE_SIZE_COMMIT_LOG=1048576``. Variables with the prefix that
        name no field are logged as a warning and ignored.

        Args:
            prefix: Only variables starting with it are read.
            environ: The variables to read; :data:`os.environ` when omitted.

        Raises:
            ConfigError: Listing every value that failed to convert or to validate.
        """
        env = os.environ if environ is None else environ
        entries: list[tuple[str, str | None, object]] = []
        for var in sorted(env):
            if var.startswith(prefix):
                name = var[len(prefix) :].lower()
                entries.append((var, name if name in _FIELD_TYPES else None, env[var]))
        return cls._build(entries, source=f"environment ({prefix}*)")

    def to_core(self) -> dict[str, object]:
        """Return the settings as the dict the Rust store takes at open.

        Keys are the field names and values are plain ints, bools and strs, with ``~`` in
        :attr:`store_path_root_dir` and :attr:`store_path_commit_log` expanded.
        """
        core = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        core["store_path_root_dir"] = os.path.expanduser(self.store_path_root_dir)
        core["store_path_commit_log"] = os.path.expanduser(self.store_path_commit_log)
        return core

    def delay_levels_ms(self) -> list[int]:
        """Return the delay of each level in milliseconds; index 0 is delay level 1."""
        return parse_delay_levels(self.message_delay_level)

    def delete_when_hours(self) -> tuple[int, ...]:
        """Return the hours of the day (0-23) listed in :attr:`delete_when`."""
        return _parse_delete_hours(self.delete_when)

    @classmethod
    def _build(cls, entries: Iterable[tuple[str, str | None, object]], *, source: str) -> Self:
        values: dict[str, Any] = {}
        given_as: dict[str, str] = {}
        problems: list[str] = []
        for key, name, raw in entries:
            if name is None:
                log.warning("unknown store config key ignored: key=%s source=%s", key, source)
                continue
            if name in given_as:
                problems.append(f"{key}: {name} is already given as {given_as[name]}")
                continue
            given_as[name] = key
            try:
                values[name] = _convert(name, raw)
            except ValueError as exc:
                problems.append(f"{key} = {raw!r}: {exc}")
        try:
            config = cls(**values)
        except ConfigError as exc:
            problems.extend(exc.problems)
        else:
            if not problems:
                return config
        raise ConfigError(_summary(problems, source=source), problems=problems)


def parse_delay_levels(text: str) -> list[int]:
    """Parse a RocketMQ ``messageDelayLevel`` string into milliseconds per level.

    Example:
        >>> parse_delay_levels("1s 2m 1h 1d")
        [1000, 120000, 3600000, 86400000]

    Raises:
        ValueError: A token is not a positive number followed by s, m, h or d, or there is none.
    """
    # ASCII whitespace only, as the store splits it (str.split would also split at \x1c-\x1f).
    tokens = re.findall(r"[^ \t\n\r\f\v]+", text)
    if not tokens:
        raise ValueError("needs at least one level")
    levels = []
    for token in tokens:
        number, unit = token[:-1], token[-1:]
        if unit not in _DELAY_UNIT_MS or not number.isascii() or not number.isdigit():
            raise ValueError(f"level {token!r} is not a number followed by s, m, h or d")
        delay_ms = int(number) * _DELAY_UNIT_MS[unit]
        if not 0 < delay_ms <= _I64_MAX:
            raise ValueError(f"level {token!r} must be above zero and fit in 64 bits of ms")
        levels.append(delay_ms)
    return levels


def _parse_delete_hours(text: str) -> tuple[int, ...]:
    hours = []
    for token in text.split(";"):
        token = token.strip()
        if not (token.isascii() and token.isdigit() and 0 <= int(token) <= 23):
            raise ValueError(f"hour {token!r} is not in 0..23")
        hours.append(int(token))
    return tuple(hours)


def _check_ipv4_host(text: str) -> None:
    ip, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError("expected ipv4:port")
    try:
        ipaddress.IPv4Address(ip)
    except ValueError:
        raise ValueError(f"{ip!r} is not an IPv4 address") from None
    if not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError(f"port {port!r} is not in 0..65535")


_INT_RANGES: Final[Mapping[str, tuple[int, int]]] = MappingProxyType(
    {
        "mapped_file_size_commit_log": (4096, _I32_MAX),
        "mapped_file_size_consume_queue": (CQ_STORE_UNIT_SIZE, _I32_MAX),
        "flush_interval_commit_log_ms": (1, _I64_MAX),
        "flush_interval_consume_queue_ms": (1, _I64_MAX),
        "sync_flush_timeout_ms": (1, _I64_MAX),
        "file_reserved_time_hours": (0, _I64_MAX // _MS_PER_HOUR),
        "clean_resource_interval_ms": (1, _I64_MAX),
        "disk_max_used_space_ratio": (1, 100),
        "disk_space_clean_forcibly_ratio": (1, 100),
        "disk_space_warning_level_ratio": (1, 100),
        "max_message_size": (1, _I32_MAX),
        "max_transfer_bytes_on_message_in_memory": (1, _I32_MAX),
        "max_transfer_count_on_message_in_memory": (1, _I32_MAX),
        "max_transfer_bytes_on_message_in_disk": (1, _I32_MAX),
        "max_transfer_count_on_message_in_disk": (1, _I32_MAX),
        "access_message_in_memory_max_ratio": (0, 100),
        "max_hash_slot_num": (1, _I32_MAX),
        "max_index_num": (2, _I32_MAX),
        "max_queue_nums_per_topic": (1, _I32_MAX + 1),
    }
)
"""Inclusive bounds of every int field: record sizes and queue ids are i32 on disk."""


def _field_types() -> dict[str, type]:
    types: dict[str, type] = {}
    for field in dataclasses.fields(StoreConfig):
        if not isinstance(field.type, type):
            raise TypeError(f"StoreConfig.{field.name} needs a class as its annotation")
        types[field.name] = field.type
    return types


_FIELD_TYPES: Final = _field_types()

_ROCKETMQ_KEY: Final = {name: key for key, name in reversed([*ROCKETMQ_ALIASES.items()])}
"""Field -> its current RocketMQ key, used to label problems."""


def rocketmq_key(field: str) -> str:
    """The RocketMQ key of a StoreConfig field (its current spelling), or the field's name
    for pyrmq's own settings."""
    return _ROCKETMQ_KEY.get(field, field)


def _resolve_key(key: str) -> str | None:
    if key in _FIELD_TYPES:
        return key
    return ROCKETMQ_ALIASES.get(key)


def _label(name: str) -> str:
    return f"{name} ({_ROCKETMQ_KEY[name]})"


def _convert(name: str, raw: object) -> object:
    """Convert a string to the field's type; any other value is left for validation."""
    expected = _FIELD_TYPES[name]
    if not isinstance(raw, str) or expected is str:
        return raw
    text = raw.strip()
    if expected is bool:
        if text.lower() not in ("true", "false"):
            raise ValueError("expected true or false")
        return text.lower() == "true"
    if expected is int:
        if re.fullmatch(r"[+-]?[0-9]+", text) is None:
            raise ValueError("expected a decimal integer")
        return int(text)
    raise TypeError(f"no string conversion for {expected.__name__}")


def _has_type(value: object, expected: type) -> bool:
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _check_path(path: str) -> None:
    if not path.strip() or "\0" in path:
        raise ValueError("must be a non-blank path without NUL")


def _check_commit_log_path(path: str) -> None:
    if path and ";" in path:
        raise ValueError("several CommitLog directories (';') are not supported")
    if path:
        _check_path(path)


def _check_cq_size(size_bytes: int) -> None:
    if size_bytes % CQ_STORE_UNIT_SIZE:
        raise ValueError(f"must be a multiple of {CQ_STORE_UNIT_SIZE} (the ConsumeQueue unit size)")


def _check_broker_role(role: str) -> None:
    if role not in BROKER_ROLES:
        raise ValueError(f"must be {ASYNC_MASTER}, {SYNC_MASTER} or {SLAVE}")


def _check_flush_disk_type(flush_disk_type: str) -> None:
    if flush_disk_type not in FLUSH_DISK_TYPES:
        raise ValueError(f"must be {ASYNC_FLUSH} or {SYNC_FLUSH}")


_VALUE_CHECKS: Final[Mapping[str, Callable[[Any], object]]] = MappingProxyType(
    {
        "store_path_root_dir": _check_path,
        "store_path_commit_log": _check_commit_log_path,
        "mapped_file_size_consume_queue": _check_cq_size,
        "flush_disk_type": _check_flush_disk_type,
        "broker_role": _check_broker_role,
        "delete_when": _parse_delete_hours,
        "message_delay_level": parse_delay_levels,
        "store_host": _check_ipv4_host,
    }
)
"""Checks beyond type and range; each raises ValueError with the reason."""


def _field_problem(name: str, value: object) -> str | None:
    expected = _FIELD_TYPES[name]
    if not _has_type(value, expected):
        return f"expected {expected.__name__}"
    if isinstance(value, int) and expected is int:
        low, high = _INT_RANGES[name]
        if not low <= value <= high:
            return f"must be in [{low}, {high}]"
    check = _VALUE_CHECKS.get(name)
    if check is not None:
        try:
            check(value)
        except ValueError as exc:
            return str(exc)
    return None


def _problems(config: StoreConfig) -> list[str]:
    problems: list[str] = []
    for name in _FIELD_TYPES:
        value = getattr(config, name)
        reason = _field_problem(name, value)
        if reason is not None:
            problems.append(f"{_label(name)} = {value!r}: {reason}")
    return problems


def _summary(problems: list[str], *, source: str | None) -> str:
    origin = f" from {source}" if source else ""
    count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
    return f"invalid StoreConfig{origin} ({count}):" + "".join(f"\n  - {p}" for p in problems)


_PROPERTY_ESCAPES: Final[Mapping[str, str]] = MappingProxyType(
    {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
)


def _unescape(text: str, source: str) -> str:
    def replace(match: re.Match[str]) -> str:
        escaped = match.group(1)
        if escaped == "u":
            raise ConfigError(f"{source}: malformed \\uxxxx encoding in {text!r}")
        if len(escaped) == 5:
            return chr(int(escaped[1:], 16))
        return _PROPERTY_ESCAPES.get(escaped, escaped)

    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", replace, text, flags=re.DOTALL)


def read_properties_text(path: str | os.PathLike[str]) -> str:
    """A properties file's text: UTF-8, or else ISO-8859-1, the encoding java.util.Properties
    reads a stream in (a RocketMQ broker.conf with one Latin-1 byte, in a comment say, was
    refused)."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        log.warning("%s is not UTF-8: read as ISO-8859-1, as Java reads it", os.fspath(path))
        return data.decode("latin-1")


LINE_BREAK: Final = re.compile(r"\r\n|\r|\n")
"""Where java.util.Properties ends a line: not at the other breaks str.splitlines knows
(form feed, U+2028, ...), which may sit inside a comment or a value."""


def _logical_lines(text: str) -> Iterable[str]:
    pending: str | None = None
    for physical in LINE_BREAK.split(text):
        line = physical.lstrip(" \t\f")
        if pending is None and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending is not None:
        yield pending


def parse_properties(text: str, *, source: str = "properties") -> dict[str, str]:
    r"""Parse Java properties text; a repeated key keeps its last value, as java.util.Properties.

    >>> parse_properties("# retention\nfileReservedTime = 48\ndeleteWhen: 01;04")
    {'fileReservedTime': '48', 'deleteWhen': '01;04'}
    """
    properties: dict[str, str] = {}
    for line in _logical_lines(text):
        end = 0
        while end < len(line) and line[end] not in "=: \t\f":
            end += 2 if line[end] == "\\" else 1
        end = min(end, len(line))
        start = end
        while start < len(line) and line[start] in " \t\f":
            start += 1
        if start < len(line) and line[start] in "=:":
            start += 1
        key = _unescape(line[:end], source)
        # Java keeps a value's trailing spaces, escaped or not, and RocketMQ trims them.
        value = _unescape(line[start:], source).strip(" \t\f")
        if key in properties:
            log.warning("store config key repeated, last value wins: key=%s source=%s", key, source)
        properties[key] = value
    return properties
