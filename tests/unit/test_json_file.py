"""Table files replaced whole or not at all."""

import errno
import os
from pathlib import Path

import pytest

from pyrmq.broker.state.json_file import load_json, store_json


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
