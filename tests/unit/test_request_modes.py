"""The table of request modes (config/messageRequestMode.json): RocketMQ's layout, and a bad
file refused with a clear error rather than a traceback or an empty table."""

import json
from pathlib import Path

import pytest

from pyrmq.broker.state.request_modes import RequestMode, RequestModes, share_num
from pyrmq.errors import ConfigError


def test_the_table_is_written_as_rocketmq_writes_it_and_read_back(tmp_path: Path) -> None:
    table = RequestModes(tmp_path / "messageRequestMode.json")
    table.set("T", "G", RequestMode("POP", 2))
    written = json.loads(table.path.read_text())
    assert written == {
        "messageRequestModeMap": {
            "T": {"G": {"consumerGroup": "G", "mode": "POP", "popShareQueueNum": 2, "topic": "T"}}
        }
    }
    assert RequestModes(table.path).get("T", "G") == RequestMode("POP", 2)
    table.replace_from_master({"messageRequestModeMap": {}})
    assert RequestModes(table.path).get("T", "G") is None


@pytest.mark.parametrize(
    "body",
    [
        b'{"messageRequestModeMap": {"T": {"G": {"mode": "PUSH"}}}}',
        b'{"messageRequestModeMap": {"T": {"G": {"mode": "POP", "popShareQueueNum": 1e400}}}}',
        b'{"messageRequestModeMap": {"T": {"G": {"popShareQueueNum": 4294967296}}}}',
        b'{"messageRequestModeMap": {"T": ["G"]}}',
    ],
)
def test_a_bad_file_is_refused_clearly(tmp_path: Path, body: bytes) -> None:
    path = tmp_path / "messageRequestMode.json"
    path.write_bytes(body)
    with pytest.raises(ConfigError, match=r"messageRequestMode\.json"):
        RequestModes(path)


def test_share_num_takes_int32s_only() -> None:
    assert share_num(None) == 0
    assert share_num("-1") == -1
    for bad in (float("inf"), 2**31, "x", [1]):
        with pytest.raises(ValueError, match="popShareQueueNum"):
            share_num(bad)
