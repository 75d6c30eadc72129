"""The broker's tables: when a save fails (a full disk) nothing changes that is not on disk
and nothing is forgotten that still has to be written; clients that leave take their groups
with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyrmq.broker.clients import ClientTable
from pyrmq.broker.state.groups import GroupTable
from pyrmq.broker.state.offsets import OffsetTable
from pyrmq.broker.state.topics import TopicConfig, TopicTable


def block_saves(path: Path) -> Path:
    """Puts a directory where the table's temporary file goes, so its saves fail."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.mkdir(parents=True)
    return tmp


def test_offsets_whose_save_failed_are_saved_by_the_next_one(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    table = OffsetTable(path)
    table.commit("G", "T", 0, 7)
    blocked = block_saves(path)
    with pytest.raises(IsADirectoryError):
        table.persist()
    blocked.rmdir()
    table.persist()  # nothing new committed since: only the failed save makes it write
    assert json.loads(path.read_text()) == {"offsetTable": {"T@G": {"0": 7}}}


def test_an_older_snapshot_written_late_does_not_replace_a_newer_one(tmp_path: Path) -> None:
    path = tmp_path / "consumerOffset.json"
    table = OffsetTable(path)
    table.commit("G", "T", 0, 1)
    older = table.encode()
    table.commit("G", "T", 0, 2)
    newer = table.encode()
    assert older is not None
    assert newer is not None
    table.write(newer)
    table.write(older)
    assert json.loads(path.read_text()) == {"offsetTable": {"T@G": {"0": 2}}}


def test_a_topic_change_that_cannot_be_saved_is_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    table = TopicTable(path, auto_create_topic_enable=True, default_topic_queue_nums=4)
    table.save_system_topics()
    table.put(TopicConfig("TopicOld", 2, 2, 6))
    blocked = block_saves(path)

    with pytest.raises(IsADirectoryError):
        table.create_on_send("TopicNew", "TBW102", 4)
    assert table.get("TopicNew") is None
    with pytest.raises(IsADirectoryError):
        table.put(TopicConfig("TopicOld", 8, 8, 6))
    assert table.get("TopicOld") == TopicConfig("TopicOld", 2, 2, 6)
    with pytest.raises(IsADirectoryError):
        table.delete("TopicOld")
    assert table.get("TopicOld") is not None

    blocked.rmdir()
    created, new = table.create_on_send("TopicNew", "TBW102", 4)
    assert new
    assert created is not None
    saved = json.loads(path.read_text())["topicConfigTable"]
    assert {"TopicNew", "TopicOld"} <= set(saved)
    assert saved["TopicOld"]["writeQueueNums"] == 2


def test_a_group_whose_last_client_left_is_forgotten() -> None:
    """As RocketMQ's client managers: with clients coming and going, groups kept empty made the
    tables, and each walk over them on every disconnect, grow for good."""
    clients = ClientTable()
    gone, kept = object(), object()
    data = {"subscriptionDataSet": [{"topic": "T", "subString": "*"}]}
    clients.register_consumer("CG_GONE", data, "c1", gone, 0)
    clients.register_consumer("CG_KEPT", data, "c2", kept, 0)
    clients.register_producer("PG_GONE", "c1", gone, 0)
    clients.register_producer("PG_LEFT", "c3", kept, 0)
    assert clients.drop_connection(gone) == ["CG_GONE"]
    assert clients.unregister(kept, "", "PG_LEFT") == []
    assert set(clients.consumers) == {"CG_KEPT"}
    assert clients.producers == {}
    assert clients.expire(now_ms=10_000, expired_after_ms=1_000) == ["CG_KEPT"]
    assert clients.consumers == {}


def test_a_slave_takes_its_masters_group_table_in_place_of_its_own(tmp_path: Path) -> None:
    """A group deleted on the master goes from the slave too (it stayed, and its settings, a
    consumeEnable of false say, went on refusing pulls there), as RocketMQ's slave replaces
    its table with the master's."""
    path = tmp_path / "subscriptionGroup.json"
    groups = GroupTable(path)
    groups.put({"groupName": "GID_GONE", "consumeEnable": False})
    groups.put({"groupName": "GID_KEPT", "retryMaxTimes": 3})
    master = {
        "subscriptionGroupTable": {
            "GID_KEPT": {"groupName": "GID_KEPT", "retryMaxTimes": 5},
            "GID_NEW": {"groupName": "GID_NEW"},
        }
    }
    groups.replace_from_master(master)
    assert [g.group_name for g in groups.all()] == ["GID_KEPT", "GID_NEW"]
    kept = groups.get("GID_KEPT")
    assert kept is not None
    assert kept.retry_max_times == 5
    # Saved: a restarted slave (or one made a master) has the master's table.
    assert [g.group_name for g in GroupTable(path).all()] == ["GID_KEPT", "GID_NEW"]
