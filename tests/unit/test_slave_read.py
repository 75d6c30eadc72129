"""slaveReadEnable, the setting (when a pull reads data counted out of the page cache is the
store's ``GetResult.in_disk``, tested with the store)."""

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.processors.config import LIVE_SETTINGS


def test_slave_read_is_off_by_default_and_set_under_rocketmq_s_key() -> None:
    assert BrokerConfig().slave_read_enable is False
    config = BrokerConfig.from_mapping({"slaveReadEnable": "true"})
    assert config.slave_read_enable is True
    assert config.to_properties()["slaveReadEnable"] == "true"
    # A running broker takes it (the pull path reads the setting on every answer).
    assert "slaveReadEnable" in LIVE_SETTINGS
