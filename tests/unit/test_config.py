import dataclasses
import doctest
import logging
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import pyrmq.config
from pyrmq.config import ROCKETMQ_ALIASES, StoreConfig, parse_delay_levels, parse_properties
from pyrmq.errors import ConfigError, PyrmqError

# RocketMQ's MessageStoreConfig defaults, written as its Java source writes them.
ROCKETMQ_DEFAULTS = {
    "mappedFileSizeCommitLog": 1024 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 300000 * 20,
    "flushDiskType": "ASYNC_FLUSH",
    "flushIntervalCommitLog": 500,
    "flushIntervalConsumeQueue": 1000,
    "syncFlushTimeout": 1000 * 5,
    "fileReservedTime": 72,
    "deleteWhen": "04",
    "cleanResourceInterval": 10000,
    "diskMaxUsedSpaceRatio": 75,
    "diskSpaceCleanForciblyRatio": 85,
    "diskSpaceWarningLevelRatio": 90,
    "maxMessageSize": 1024 * 1024 * 4,
    "maxTransferBytesOnMessageInMemory": 1024 * 256,
    "maxTransferCountOnMessageInMemory": 32,
    "maxTransferBytesOnMessageInDisk": 1024 * 64,
    "maxTransferCountOnMessageInDisk": 8,
    "accessMessageInMemoryMaxRatio": 40,
    "messageIndexEnable": True,
    "maxHashSlotNum": 5000000,
    "maxIndexNum": 5000000 * 4,
    "messageDelayLevel": "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
    "checkCRCOnRecover": True,
}

FIELD_NAMES = [field.name for field in dataclasses.fields(StoreConfig)]

BROKER_CONF = """\
# A broker.conf as RocketMQ ships it, with store settings mixed in.
brokerClusterName = DefaultCluster
brokerName = broker-a
brokerId = 0
! Java properties also allow '!' comments
deleteWhen = 04;16
fileReservedTime = 48
brokerRole = ASYNC_MASTER
flushDiskType = SYNC_FLUSH

   maxMessageSize : 1048576
mappedFileSizeCommitLog 67108864
storePathRootDir=/data/rocketmq/store#1
messageDelayLevel=1s 5s \\
    10s 1m
messageIndexEnable=FALSE
storeHost=10.0.0.7:10911
"""


def as_property(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def problems_of(excinfo: pytest.ExceptionInfo[ConfigError]) -> tuple[str, ...]:
    return excinfo.value.problems


def test_defaults_equal_rocketmq_message_store_config() -> None:
    config = StoreConfig()

    for key, expected in ROCKETMQ_DEFAULTS.items():
        assert getattr(config, ROCKETMQ_ALIASES[key]) == expected, key


def test_defaults_of_settings_rocketmq_keeps_elsewhere() -> None:
    config = StoreConfig()

    assert config.store_path_root_dir == "~/store"
    assert config.store_host == "127.0.0.1:10911"
    assert config.max_queue_nums_per_topic == 1024


def test_every_field_has_a_rocketmq_key_and_every_key_names_a_field() -> None:
    assert set(ROCKETMQ_ALIASES.values()) == set(FIELD_NAMES)


def test_config_is_frozen_slotted_and_keyword_only() -> None:
    config = StoreConfig()

    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_message_size = 1  # type: ignore[misc]
    assert not hasattr(config, "__dict__")
    with pytest.raises(TypeError):
        StoreConfig("/tmp/store")  # type: ignore[call-arg]
    assert hash(config) == hash(StoreConfig())


def test_replace_validates_the_new_copy() -> None:
    config = dataclasses.replace(StoreConfig(), flush_disk_type="SYNC_FLUSH")
    assert config.flush_disk_type == "SYNC_FLUSH"

    with pytest.raises(ConfigError, match="flush_disk_type"):
        dataclasses.replace(config, flush_disk_type="sync")


def test_config_error_is_a_value_error_and_a_pyrmq_error() -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig(max_message_size=0)

    assert isinstance(excinfo.value, ValueError)
    assert isinstance(excinfo.value, PyrmqError)


def test_from_mapping_accepts_camel_case_and_snake_case_keys() -> None:
    camel = StoreConfig.from_mapping(
        {"mappedFileSizeCommitLog": 1 << 20, "checkCRCOnRecover": False}
    )
    snake = StoreConfig.from_mapping(
        {"mapped_file_size_commit_log": 1 << 20, "check_crc_on_recover": False}
    )

    assert (
        camel
        == snake
        == StoreConfig(mapped_file_size_commit_log=1 << 20, check_crc_on_recover=False)
    )


def test_from_mapping_accepts_the_old_maped_spelling() -> None:
    config = StoreConfig.from_mapping(
        {"mapedFileSizeCommitLog": "4096", "mapedFileSizeConsumeQueue": "200"}
    )

    assert config.mapped_file_size_commit_log == 4096
    assert config.mapped_file_size_consume_queue == 200


@pytest.mark.parametrize(
    ("key", "raw", "expected"),
    [
        ("maxMessageSize", "1024", 1024),
        ("maxMessageSize", " 1024 ", 1024),
        ("maxMessageSize", "+1024", 1024),
        ("fileReservedTime", "0", 0),
        ("messageIndexEnable", "false", False),
        ("messageIndexEnable", "TRUE", True),
        ("checkCRCOnRecover", "False", False),
        ("deleteWhen", "01;13", "01;13"),
        ("storePathRootDir", "/var/lib/pyrmq", "/var/lib/pyrmq"),
        ("storePathCommitLog", "/disk2/commitlog", "/disk2/commitlog"),
    ],
)
def test_from_mapping_converts_strings_to_the_field_type(
    key: str, raw: str, expected: object
) -> None:
    config = StoreConfig.from_mapping({key: raw})

    value = getattr(config, ROCKETMQ_ALIASES[key])
    assert value == expected
    assert type(value) is type(expected)


@pytest.mark.parametrize(
    ("key", "raw", "reason"),
    [
        ("maxMessageSize", "4M", "expected a decimal integer"),
        ("maxMessageSize", "1_024", "expected a decimal integer"),
        ("maxMessageSize", "", "expected a decimal integer"),
        ("messageIndexEnable", "yes", "expected true or false"),
        ("messageIndexEnable", "1", "expected true or false"),
    ],
)
def test_from_mapping_reports_strings_that_do_not_convert(key: str, raw: str, reason: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig.from_mapping({key: raw})

    assert problems_of(excinfo) == (f"{key} = {raw!r}: {reason}",)


def test_from_mapping_rejects_a_field_given_under_two_keys() -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig.from_mapping({"maxMessageSize": 10, "max_message_size": 20})

    assert problems_of(excinfo) == (
        "max_message_size: max_message_size is already given as maxMessageSize",
    )


def test_unknown_keys_are_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pyrmq.config"):
        config = StoreConfig.from_mapping({"brokerName": "broker-a", "maxMessageSize": 2048})

    assert config == StoreConfig(max_message_size=2048)
    assert [record.getMessage() for record in caplog.records] == [
        "unknown store config key ignored: key=brokerName source=mapping"
    ]
    assert caplog.records[0].levelno == logging.WARNING


def test_known_keys_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="pyrmq.config"):
        StoreConfig.from_mapping({"maxMessageSize": 2048, "flush_disk_type": "SYNC_FLUSH"})

    assert caplog.records == []


def test_from_properties_reads_a_broker_conf(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF, encoding="utf-8")

    with caplog.at_level(logging.WARNING, logger="pyrmq.config"):
        config = StoreConfig.from_properties(path)

    assert config == StoreConfig(
        delete_when="04;16",
        file_reserved_time_hours=48,
        flush_disk_type="SYNC_FLUSH",
        max_message_size=1048576,
        mapped_file_size_commit_log=67108864,
        store_path_root_dir="/data/rocketmq/store#1",
        message_delay_level="1s 5s 10s 1m",
        message_index_enable=False,
        store_host="10.0.0.7:10911",
    )
    ignored = sorted(record.getMessage().split()[5] for record in caplog.records)
    assert ignored == [
        "key=brokerClusterName",
        "key=brokerId",
        "key=brokerName",
    ]


def test_from_properties_handles_escapes_and_a_repeated_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.properties"
    path.write_text(
        "storePathRootDir = C:\\\\rocketmq\\\\store\\u00e9\n"
        "maxMessageSize=1000\n"
        "maxMessageSize=2000\n"
        "deleteWhen\\=x=1\n",
        encoding="utf-8",
    )

    with caplog.at_level(logging.WARNING, logger="pyrmq.config"):
        config = StoreConfig.from_properties(str(path))

    assert config.store_path_root_dir == "C:\\rocketmq\\store\u00e9"
    assert config.max_message_size == 2000
    messages = [record.getMessage() for record in caplog.records]
    assert f"store config key repeated, last value wins: key=maxMessageSize source={path}" in (
        messages
    )
    assert f"unknown store config key ignored: key=deleteWhen=x source={path}" in messages


def test_properties_lines_end_where_java_ends_them() -> None:
    """Only at \\r and \\n, as java.util.Properties: text past a U+2028 or a form feed in a
    comment stayed a setting (str.splitlines breaks there); an escaped trailing space is the
    value's, trimmed as RocketMQ trims values (it left a stray backslash)."""
    text = "# role docs\u2028brokerRole=SLAVE is for replicas\nbrokerName=b1\f\na=value\\ \n"
    assert parse_properties(text) == {"brokerName": "b1", "a": "value"}
    with pytest.raises(ConfigError, match="malformed"):
        parse_properties("a=\\uZZZZ")


def test_from_properties_of_an_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "empty.properties"
    path.write_text("# nothing but a comment\n\n", encoding="utf-8")

    assert StoreConfig.from_properties(path) == StoreConfig()


def test_from_properties_names_the_file_in_its_error(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("flushDiskType=SYNC\nmaxMessageSize=big\n", encoding="utf-8")

    with pytest.raises(ConfigError, match=f"from {path} \\(2 problems\\)") as excinfo:
        StoreConfig.from_properties(path)

    assert problems_of(excinfo) == (
        "maxMessageSize = 'big': expected a decimal integer",
        "flush_disk_type (flushDiskType) = 'SYNC': must be ASYNC_FLUSH or SYNC_FLUSH",
    )


def test_from_properties_of_a_missing_file_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read store config") as excinfo:
        StoreConfig.from_properties(tmp_path / "missing.conf")

    assert isinstance(excinfo.value.__cause__, FileNotFoundError)


def test_properties_round_trip_through_to_core(tmp_path: Path) -> None:
    config = StoreConfig(
        store_path_root_dir="/srv/store",
        flush_disk_type="SYNC_FLUSH",
        message_index_enable=False,
        delete_when="02;14",
    )
    core = config.to_core()
    lines = [
        f"{key}={as_property(core[name])}"
        for key, name in ROCKETMQ_ALIASES.items()
        if not key.startswith("maped")
    ]
    path = tmp_path / "round-trip.properties"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    assert StoreConfig.from_properties(path) == config


def test_from_env_reads_prefixed_variables(caplog: pytest.LogCaptureFixture) -> None:
    environ = {
        "PYRMQ_MAPPED_FILE_SIZE_COMMIT_LOG": "1048576",
        "PYRMQ_FLUSH_DISK_TYPE": "SYNC_FLUSH",
        "PYRMQ_MESSAGE_INDEX_ENABLE": "false",
        "PYRMQ_NOT_A_SETTING": "1",
        "HOME": "/root",
        "MAX_MESSAGE_SIZE": "1",
    }

    with caplog.at_level(logging.WARNING, logger="pyrmq.config"):
        config = StoreConfig.from_env(environ=environ)

    assert config == StoreConfig(
        mapped_file_size_commit_log=1048576,
        flush_disk_type="SYNC_FLUSH",
        message_index_enable=False,
    )
    assert [record.getMessage() for record in caplog.records] == [
        "unknown store config key ignored: key=PYRMQ_NOT_A_SETTING source=environment (PYRMQ_*)"
    ]


def test_from_env_reads_os_environ_with_a_custom_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYRMQTEST_STORE_MAX_MESSAGE_SIZE", "8192")
    monkeypatch.setenv("PYRMQTEST_STORE_DELETE_WHEN", "03")

    config = StoreConfig.from_env(prefix="PYRMQTEST_STORE_")

    assert config == StoreConfig(max_message_size=8192, delete_when="03")


def test_from_env_reports_bad_values_with_the_variable_name() -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig.from_env(environ={"PYRMQ_SYNC_FLUSH_TIMEOUT_MS": "5s"})

    assert problems_of(excinfo) == (
        "PYRMQ_SYNC_FLUSH_TIMEOUT_MS = '5s': expected a decimal integer",
    )


# One invalid value for each check; all of them must come back in a single ConfigError.
INVALID_VALUES = {
    "store_path_root_dir": ("  ", "must be a non-blank path without NUL"),
    "store_path_commit_log": ("/a;/b", "several CommitLog directories (';') are not supported"),
    "mapped_file_size_commit_log": (0, "must be in [4096, 2147483647]"),
    "mapped_file_size_consume_queue": (6000010, "must be a multiple of 20"),
    "flush_disk_type": ("sync_flush", "must be ASYNC_FLUSH or SYNC_FLUSH"),
    "broker_role": ("MASTER", "must be ASYNC_MASTER, SYNC_MASTER or SLAVE"),
    "flush_interval_commit_log_ms": (-1, "must be in [1, "),
    "flush_interval_consume_queue_ms": (0, "must be in [1, "),
    "sync_flush_timeout_ms": (0, "must be in [1, "),
    "file_reserved_time_hours": (-1, "must be in [0, "),
    "delete_when": ("4am", "hour '4am' is not in 0..23"),
    "clean_resource_interval_ms": (0, "must be in [1, "),
    "disk_max_used_space_ratio": (101, "must be in [1, 100]"),
    "disk_space_clean_forcibly_ratio": (0, "must be in [1, 100]"),
    "disk_space_warning_level_ratio": (150, "must be in [1, 100]"),
    "max_message_size": (2**31, "must be in [1, 2147483647]"),
    "max_transfer_bytes_on_message_in_memory": (0, "must be in [1, "),
    "max_transfer_count_on_message_in_memory": (0, "must be in [1, "),
    "max_transfer_bytes_on_message_in_disk": (0, "must be in [1, "),
    "max_transfer_count_on_message_in_disk": (-1, "must be in [1, "),
    "access_message_in_memory_max_ratio": (101, "must be in [0, 100]"),
    "message_index_enable": (1, "expected bool"),
    "max_hash_slot_num": (0, "must be in [1, 2147483647]"),
    "max_index_num": (-5, "must be in [2, 2147483647]"),
    "message_delay_level": ("1s 5x", "level '5x' is not a number followed by s, m, h or d"),
    "check_crc_on_recover": ("true", "expected bool"),
    "store_host": ("localhost:10911", "'localhost' is not an IPv4 address"),
    "max_queue_nums_per_topic": (0, "must be in [1, 2147483648]"),
}


def test_invalid_values_cover_every_field() -> None:
    assert set(INVALID_VALUES) == set(FIELD_NAMES)


def test_every_problem_is_listed_in_one_config_error() -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig(**{name: value for name, (value, _) in INVALID_VALUES.items()})  # type: ignore[arg-type]

    problems = problems_of(excinfo)
    assert len(problems) == len(INVALID_VALUES)
    for problem, (name, (value, reason)) in zip(problems, INVALID_VALUES.items(), strict=True):
        assert problem.startswith(f"{name} ("), problem
        assert f"= {value!r}: {reason}" in problem
    message = str(excinfo.value)
    assert message.startswith(f"invalid StoreConfig ({len(INVALID_VALUES)} problems):\n  - ")
    assert all(problem in message for problem in problems)


@pytest.mark.parametrize(
    ("name", "value", "reason"), [(n, v, r) for n, (v, r) in INVALID_VALUES.items()]
)
def test_each_invalid_value_is_reported_alone(name: str, value: object, reason: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig(**{name: value})  # type: ignore[arg-type]

    (problem,) = problems_of(excinfo)
    assert problem.startswith(f"{name} ({pyrmq.config._ROCKETMQ_KEY[name]}) = {value!r}: {reason}")


def test_loader_reports_conversion_and_validation_problems_together() -> None:
    with pytest.raises(ConfigError) as excinfo:
        StoreConfig.from_mapping(
            {"maxMessageSize": "lots", "flushDiskType": "ALWAYS", "storeHost": "1.2.3.4:99999"}
        )

    assert problems_of(excinfo) == (
        "maxMessageSize = 'lots': expected a decimal integer",
        "flush_disk_type (flushDiskType) = 'ALWAYS': must be ASYNC_FLUSH or SYNC_FLUSH",
        "store_host (storeHost) = '1.2.3.4:99999': port '99999' is not in 0..65535",
    )


@pytest.mark.parametrize("value", [True, False, 5.0, "5", None])
def test_int_fields_refuse_other_types(value: object) -> None:
    with pytest.raises(ConfigError, match="expected int"):
        StoreConfig(max_message_size=value)  # type: ignore[arg-type]


def test_a_clean_forcibly_ratio_above_the_warning_level_is_taken() -> None:
    """As RocketMQ takes it (the store cleans forcibly past either ratio)."""
    assert StoreConfig(disk_space_clean_forcibly_ratio=91).disk_space_clean_forcibly_ratio == 91
    lowered = StoreConfig.from_mapping({"diskSpaceWarningLevelRatio": "80"})
    assert lowered.disk_space_warning_level_ratio == 80


@pytest.mark.parametrize(
    "host", ["127.0.0.1:10911", "0.0.0.0:0", "255.255.255.255:65535", "10.1.2.3:1"]
)
def test_store_host_accepts_ipv4_and_port(host: str) -> None:
    assert StoreConfig(store_host=host).store_host == host


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.0.0.1:", "::1:10911", "[::1]:10911", "1.2.3.4:-1", "1.2.3.4:1e3"]
)
def test_store_host_refuses_anything_but_ipv4_and_port(host: str) -> None:
    with pytest.raises(ConfigError, match="store_host"):
        StoreConfig(store_host=host)


def test_default_delay_levels_in_ms() -> None:
    seconds, minutes, hours = 1000, 60_000, 3_600_000

    assert StoreConfig().delay_levels_ms() == [
        1 * seconds, 5 * seconds, 10 * seconds, 30 * seconds,
        1 * minutes, 2 * minutes, 3 * minutes, 4 * minutes, 5 * minutes, 6 * minutes,
        7 * minutes, 8 * minutes, 9 * minutes, 10 * minutes, 20 * minutes, 30 * minutes,
        1 * hours, 2 * hours,
    ]  # fmt: skip


def test_delay_levels_accept_days_and_extra_spaces() -> None:
    config = StoreConfig(message_delay_level="  2d   90s\t1h ")

    assert config.delay_levels_ms() == [2 * 86_400_000, 90_000, 3_600_000]


@pytest.mark.parametrize(
    "text", ["", "   ", "5", "s", "1.5s", "-1s", "0s", "1S", "1w", "1s,2s", "٣s"]
)
def test_delay_levels_refuse_malformed_text(text: str) -> None:
    with pytest.raises(ValueError, match="level"):
        parse_delay_levels(text)
    with pytest.raises(ConfigError, match="message_delay_level"):
        StoreConfig(message_delay_level=text)


@pytest.mark.parametrize(
    ("text", "hours"), [("04", (4,)), ("0", (0,)), ("1;13; 23", (1, 13, 23)), ("23", (23,))]
)
def test_delete_when_hours(text: str, hours: tuple[int, ...]) -> None:
    assert StoreConfig(delete_when=text).delete_when_hours() == hours


@pytest.mark.parametrize("text", ["", "24", "04;", "-1", "4 am", "04,16"])
def test_delete_when_refuses_anything_but_hours(text: str) -> None:
    with pytest.raises(ConfigError, match="delete_when"):
        StoreConfig(delete_when=text)


def test_to_core_gives_plain_values_under_field_names() -> None:
    core = StoreConfig().to_core()

    assert list(core) == FIELD_NAMES
    assert all(type(value) in (int, bool, str) for value in core.values())
    assert core["store_path_root_dir"] == os.path.join(os.path.expanduser("~"), "store")
    assert core["mapped_file_size_commit_log"] == 1073741824
    assert core["check_crc_on_recover"] is True


def test_to_core_keeps_an_absolute_path() -> None:
    assert StoreConfig(store_path_root_dir="/srv/store").to_core()["store_path_root_dir"] == (
        "/srv/store"
    )


@given(
    max_message_size=st.integers(1, 2**31 - 1),
    cq_units=st.integers(1, 10**7),
    warning=st.integers(1, 100),
    data=st.data(),
    index_enable=st.booleans(),
    port=st.integers(0, 65535),
)
def test_string_values_load_like_native_values(
    max_message_size: int,
    cq_units: int,
    warning: int,
    data: st.DataObject,
    index_enable: bool,
    port: int,
) -> None:
    forcibly = data.draw(st.integers(1, warning))
    native = {
        "max_message_size": max_message_size,
        "mapped_file_size_consume_queue": cq_units * 20,
        "disk_space_warning_level_ratio": warning,
        "disk_space_clean_forcibly_ratio": forcibly,
        "message_index_enable": index_enable,
        "store_host": f"192.168.0.1:{port}",
    }
    as_strings = {
        pyrmq.config._ROCKETMQ_KEY[name]: as_property(value) for name, value in native.items()
    }

    assert StoreConfig.from_mapping(as_strings) == StoreConfig(**native)  # type: ignore[arg-type]


def test_docstring_examples_run() -> None:
    result = doctest.testmod(pyrmq.config, optionflags=doctest.ELLIPSIS)

    assert result.attempted > 0
    assert result.failed == 0
