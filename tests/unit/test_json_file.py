"""Table files replaced whole or not at all."""

import errno
import os
from pathlib import Path

import pytest

from pyrmq.broker.state.json_file import load_json, object_in, store_json
from pyrmq.errors import ConfigError


def test_a_write_the_disk_refuses_leaves_the_table_and_no_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "topics.json"
    store_json(path, {"version": 1})

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        store_json(path, {"version": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["topics.json"]
    assert load_json(path) == {"version": 1}


def test_a_table_of_another_shape_is_read_from_its_backup_and_neither_is_an_error(
    tmp_path: Path,
) -> None:
    """As RocketMQ's brokers: a table file that parses but is not the table falls back to its
    backup as one that does not parse; when neither can be read the table is refused, not
    started empty (which once dropped every topic, or crashed the broker with a traceback)."""

    def decode(value: object) -> dict[str, int]:
        table = object_in(value, "the file")["table"]
        return {str(k): int(v) for k, v in object_in(table, "table").items()}

    path = tmp_path / "offsets.json"
    assert load_json(path, decode) is None
    store_json(path, {"table": {"a": 1}})
    store_json(path, {"table": {"a": 2}})
    assert load_json(path, decode) == {"a": 2}
    for damaged in (b'{"table": {"a": "x"}}', b"null", b"[]", b'{"table": 5}', b"", b"{"):
        path.write_bytes(damaged)
        assert load_json(path, decode) == {"a": 1}, damaged
        path.with_name(path.name + ".bak").write_bytes(damaged)
        with pytest.raises(ConfigError, match=r"offsets\.json cannot be read .*\.bak"):
            load_json(path, decode)
        store_json(path, {"table": {"a": 1}})
        store_json(path, {"table": {"a": 1}})
