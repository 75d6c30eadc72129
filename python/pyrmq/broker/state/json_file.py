"""Atomic JSON files for the broker's tables (write, fsync, rename; keep one backup)."""

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pyrmq.errors import ConfigError

__all__ = ["load_json", "object_in", "store_json", "write_atomic"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _as_is(value: Any) -> Any:
    return value


def object_in(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object; TypeError naming ``what`` otherwise (a decoder's
    check of a table file's shape)."""
    if not isinstance(value, dict):
        raise TypeError(f"{what} is not an object but {type(value).__name__}")
    return value


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


def load_json(path: Path, decode: Callable[[Any], T] = _as_is) -> T | None:
    """The table in ``path`` as ``decode`` makes it from the file's JSON, or from the backup
    when the file cannot be parsed or decoded; None when neither file exists.

    ``decode`` raises KeyError, TypeError, ValueError or AttributeError for JSON of another
    shape. When a file exists but neither it nor its backup can be read, raises
    :class:`~pyrmq.errors.ConfigError`: as RocketMQ's brokers, a table is never silently
    started empty in place of one that is there."""
    failures = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            data = candidate.read_bytes()
        except FileNotFoundError:
            continue
        try:
            return decode(json.loads(data))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            why = f"{type(e).__name__}: {e}" if isinstance(e, KeyError) else str(e) or repr(e)
            log.error("unreadable table file path=%s: %s", candidate, why)
            failures.append(f"{candidate.name}: {why}")
    if failures:
        raise ConfigError(
            f"{path} cannot be read ({'; '.join(failures)}): repair it, or remove it and its "
            "backup to start that table empty"
        )
    return None
