"""BrokerConfig from a RocketMQ broker.conf: broker keys and store keys mixed, in camelCase."""

import logging
from pathlib import Path

import pytest

from pyrmq.broker.config import BrokerConfig, setting_key, write_settings
from pyrmq.config import SYNC_FLUSH, parse_properties
from pyrmq.errors import ConfigError

BROKER_CONF = """\
# as RocketMQ ships it
brokerClusterName = DefaultCluster
brokerName = broker-b
brokerId = 0
listenPort = 30911
namesrvAddr = 127.0.0.1:9876;127.0.0.1:9877
defaultTopicQueueNums = 4
autoCreateTopicEnable = false
flushDiskType = SYNC_FLUSH
storePathRootDir = {store}
storePathCommitLog = {store}/../disk2/commitlog
mappedFileSizeCommitLog = 1048576
deleteWhen = 04
"""


def test_a_broker_conf_sets_broker_and_store_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF.format(store=tmp_path / "store"))

    config = BrokerConfig.from_properties(path)

    assert (config.broker_name, config.listen_port, config.default_topic_queue_nums) == (
        "broker-b",
        30911,
        4,
    )
    assert config.namesrv_addrs == ["127.0.0.1:9876", "127.0.0.1:9877"]
    assert config.auto_create_topic_enable is False
    assert config.store.flush_disk_type == SYNC_FLUSH
    assert config.store.store_path_root_dir == str(tmp_path / "store")
    assert config.store.store_path_commit_log == f"{tmp_path / 'store'}/../disk2/commitlog"
    assert config.store.mapped_file_size_commit_log == 1 << 20


def test_store_keys_override_a_base_config_given_by_field(tmp_path: Path) -> None:
    base = BrokerConfig.from_mapping({"store_path_root_dir": str(tmp_path), "listenPort": 1})

    config = BrokerConfig.from_mapping({"flushDiskType": "SYNC_FLUSH"}, base=base)

    assert config.store.flush_disk_type == SYNC_FLUSH
    assert config.store.store_path_root_dir == str(tmp_path)
    assert config.listen_port == 1


def test_replication_keys_load_and_a_role_needs_its_broker_id() -> None:
    slave = BrokerConfig.from_mapping(
        {"brokerRole": "SLAVE", "brokerId": "2", "haMasterAddress": "10.0.0.1:10912",
         "haListenPort": "0", "haTransferBatchSize": "65536"}
    )  # fmt: skip
    assert slave.is_slave
    assert (slave.ha_master_address, slave.ha_listen_port) == ("10.0.0.1:10912", 0)
    assert slave.ha_transfer_batch_size == 65536
    assert slave.to_properties()["brokerRole"] == "SLAVE"
    assert not BrokerConfig.from_mapping({"brokerRole": "SYNC_MASTER"}).is_slave
    with pytest.raises(ConfigError, match="SLAVE's broker_id must be > 0"):
        BrokerConfig.from_mapping({"brokerRole": "SLAVE"})
    # As RocketMQ's BrokerStartup: a master's id is 0 whatever brokerId says.
    assert BrokerConfig.from_mapping({"brokerId": "1"}).broker_id == 0
    with pytest.raises(ConfigError, match="broker_role"):
        BrokerConfig.from_mapping({"brokerRole": "LEADER"})
    with pytest.raises(ConfigError, match="ha_master_address"):
        BrokerConfig.from_mapping({"brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": "x"})


def test_the_grpc_transport_is_native_unless_grpcio_is_asked_for() -> None:
    assert BrokerConfig().grpc_transport == "native"
    assert BrokerConfig.from_mapping({"grpcTransport": "grpcio"}).grpc_transport == "grpcio"
    with pytest.raises(ConfigError, match="grpc_transport 'tonic' is not native or grpcio"):
        BrokerConfig.from_mapping({"grpcTransport": "tonic"})


def test_bad_values_are_reported_together() -> None:
    with pytest.raises(ConfigError) as err:
        BrokerConfig.from_mapping({"listenPort": "port", "autoCreateTopicEnable": "maybe"})

    assert len(err.value.problems) == 2


def test_a_setting_under_two_spellings_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(
        "mapedFileSizeCommitLog=1048576\nmappedFileSizeCommitLog=2097152\n"
        "listenPort=10911\nlisten_port=10912\n"
    )
    with pytest.raises(ConfigError) as err:
        BrokerConfig.from_properties(path)

    assert err.value.problems == (
        "mappedFileSizeCommitLog: mapped_file_size_commit_log is already given as "
        "mapedFileSizeCommitLog",
        "listen_port: listen_port is already given as listenPort",
    )


@pytest.mark.parametrize("raw", ["1_0911", "\u0664", "0x10", "1e3", ""])
def test_integers_are_decimal_digits(raw: str) -> None:
    with pytest.raises(ConfigError, match="decimal integer"):
        BrokerConfig.from_mapping({"listenPort": raw})


def test_unknown_keys_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        BrokerConfig.from_mapping({"noSuchKey": "1"})

    assert "noSuchKey" in caplog.text


def test_settings_are_reported_under_rocketmq_keys(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text(BROKER_CONF.format(store=tmp_path / "store"))
    settings = BrokerConfig.from_properties(path).to_properties()
    assert settings["brokerName"] == "broker-b"
    assert settings["autoCreateTopicEnable"] == "false"
    assert settings["mappedFileSizeCommitLog"] == "1048576"
    assert settings["fileReservedTime"] == "72"
    assert settings["brokerConfigPath"] == str(path)
    assert "mapedFileSizeCommitLog" not in settings
    assert {setting_key(k) for k in ("mapedFileSizeCommitLog", "mapped_file_size_commit_log")} == {
        "mappedFileSizeCommitLog"
    }
    assert setting_key("noSuchSetting") is None


def test_written_settings_replace_their_lines_and_keep_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "broker.conf"
    path.write_text("# keep me\nfile_reserved_time_hours = 72\n\nbrokerName=b\n")
    write_settings(path, {"fileReservedTime": "24", "deleteWhen": "01;13"})
    assert path.read_text() == (
        "# keep me\nfile_reserved_time_hours=24\n\nbrokerName=b\ndeleteWhen=01;13\n"
    )
    config = BrokerConfig.from_properties(path)
    assert (config.store.file_reserved_time_hours, config.store.delete_when) == (24, "01;13")
    assert not list(tmp_path.glob("*.tmp"))


def test_a_written_setting_replaces_every_entry_of_its_key_with_their_continued_lines(
    tmp_path: Path,
) -> None:
    """A key set twice (the last wins) and a value continued on the next line: the update
    holds after a restart and leaves no stray line (the first entry only was rewritten, the
    last still won, and a continued line became a key of its own)."""
    path = tmp_path / "broker.conf"
    path.write_text(
        "brokerName=b1\nfileReservedTime=72\ndeleteWhen=01;\\\n    02\nfileReservedTime=48\n"
    )
    write_settings(path, {"fileReservedTime": "24", "deleteWhen": "05"})
    settings = parse_properties(path.read_text())
    assert settings == {"brokerName": "b1", "fileReservedTime": "24", "deleteWhen": "05"}
    # A value is escaped as java.util.Properties writes it: it cannot set another key.
    write_settings(path, {"brokerClusterName": "c\nbrokerRole=SLAVE"})
    assert parse_properties(path.read_text())["brokerClusterName"] == "c\nbrokerRole=SLAVE"
    assert BrokerConfig.from_properties(path).store.broker_role == "ASYNC_MASTER"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"flushConsumerOffsetInterval": "0"}, "flushConsumerOffsetInterval 0 must be positive"),
        ({"channelExpiredTimeout": "-1"}, "channelExpiredTimeout -1 must be positive"),
        ({"brokerRole": "SLAVE", "brokerId": "99999999999999999999"}, "out of range"),
        ({"defaultTopicQueueNums": "3000000000"}, "more than maxQueueNumsPerTopic 1024"),
        # RocketMQ reads both as false; they enabled the ACL here.
        ({"aclEnable": "1"}, "'1' is not true or false"),
        ({"autoCreateTopicEnable": "yes"}, "'yes' is not true or false"),
    ],
)
def test_settings_rocketmq_would_not_start_with_are_refused(
    settings: dict[str, str], message: str
) -> None:
    """A period of 0 spun the broker's loop at full CPU; a number past a Java long, or more
    queues than a topic may have, reached the name server or topics.json; a boolean that
    RocketMQ reads as false was read as true."""
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_mapping(settings)


def test_a_broker_conf_that_is_not_utf8_is_read_as_java_reads_it(tmp_path: Path) -> None:
    """ISO-8859-1, java.util.Properties' encoding (such a file was refused)."""
    path = tmp_path / "broker.conf"
    path.write_bytes("# réplica\nbrokerName=b\xe9\n".encode("latin-1"))
    assert BrokerConfig.from_properties(path).broker_name == "bé"
