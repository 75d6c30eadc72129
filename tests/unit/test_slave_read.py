"""slaveReadEnable's pieces: when a pull reads data counted out of the page cache, and the
setting itself."""

import pytest

from pyrmq.broker.config import BrokerConfig
from pyrmq.broker.processors.config import LIVE_SETTINGS
from pyrmq.broker.processors.pull import PHYSICAL_MEMORY, reads_cold

GIB = 1 << 30


@pytest.mark.parametrize(
    ("behind", "ratio", "cold"),
    [
        # 40 % of 10 GiB, rounded as the store rounds it: 4,294,967,280 bytes.
        (10 * GIB // 100 * 40, 40, False),
        (10 * GIB // 100 * 40 + 1, 40, True),
        (1 * GIB, 40, False),
        (9 * GIB, 40, True),
        # 0: any record short of the CommitLog's end, and the last one read always is.
        (1, 0, True),
        (0, 0, False),
        (9 * GIB, 100, False),
    ],
)
def test_a_pull_is_cold_past_its_share_of_memory_behind_the_end(
    behind: int, ratio: int, cold: bool
) -> None:
    end = 50 * GIB
    assert reads_cold(end, end - behind, ratio, 10 * GIB) is cold


def test_the_default_memory_is_the_machines() -> None:
    assert PHYSICAL_MEMORY > 0
    assert not reads_cold(1 << 20, 0, 40)
    assert reads_cold(PHYSICAL_MEMORY, 0, 40)


def test_slave_read_is_off_by_default_and_set_under_rocketmq_s_key() -> None:
    assert BrokerConfig().slave_read_enable is False
    config = BrokerConfig.from_mapping({"slaveReadEnable": "true"})
    assert config.slave_read_enable is True
    assert config.to_properties()["slaveReadEnable"] == "true"
    # A running broker takes it (the pull path reads the setting on every answer).
    assert "slaveReadEnable" in LIVE_SETTINGS
