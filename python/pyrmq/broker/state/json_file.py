"""Atomic JSON files for the broker's tables (write, fsync, rename; keep one backup)."""

import json
import logging
import os
from pathlib import Path
from typing import Any

__all__ = ["load_json", "store_json", "write_atomic"]

log = logging.getLogger(__name__)


def store_json(path: Path, value: object) -> None:
    """Replaces ``path`` atomically; the previous version is kept as ``path.bak``."""
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True).encode())


def write_atomic(path: Path, data: bytes, *, backup: bool = True) -> None:
    """Replaces ``path`` with ``data`` atomically (write, fsync, rename); with ``backup`` the
    previous version is kept as ``path.bak`` (and for a moment only there). Nothing but system
    calls: run on a worker thread, it hardly holds the GIL, so the event loop does not wait
    for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        # A full disk: no half-written file is left beside the table.
        tmp.unlink(missing_ok=True)
        raise
    if backup and path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)


def load_json(path: Path) -> Any:
    """The JSON in ``path`` (or its backup if it is unreadable); None when neither exists."""
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            return json.loads(candidate.read_bytes())
        except FileNotFoundError:
            continue
        except ValueError as e:
            log.error("unreadable table file path=%s: %s; trying its backup", candidate, e)
    return None
