"""Shared test setup.

Hypothesis profiles: ``small`` (the default) keeps the whole suite quick; ``large`` is for long
runs. Pick one with ``PYRMQ_HYPOTHESIS_PROFILE=large``.
"""

import os
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("small", max_examples=50, deadline=None)
settings.register_profile(
    "large",
    max_examples=2_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("PYRMQ_HYPOTHESIS_PROFILE", "small"))


@pytest.fixture(autouse=True, scope="session")
def _broadcast_offsets_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Broadcasting consumers keep offsets in files that outlive a run: tests that do not pick
    a directory get one of this run's, not ``~/.rocketmq_offsets`` from runs before."""
    saved = os.environ.get("PYRMQ_OFFSETS_DIR")
    os.environ["PYRMQ_OFFSETS_DIR"] = str(tmp_path_factory.mktemp("offsets"))
    yield
    if saved is None:
        del os.environ["PYRMQ_OFFSETS_DIR"]
    else:
        os.environ["PYRMQ_OFFSETS_DIR"] = saved


# --- store fixtures -------------------------------------------------------------------------
# Imports of the store stay inside the fixtures, so tests of pure-Python modules run without the
# compiled extension.

SMALL_STORE: dict[str, Any] = {
    "mapped_file_size_commit_log": 256 * 1024,
    "mapped_file_size_consume_queue": 20 * 1000,
    "max_hash_slot_num": 1000,
    "max_index_num": 4000,
}
"""Segment and index sizes that keep store tests fast and small on disk."""

MESSAGE_MAGIC = 0xDAA320A7


def _wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, what: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.002)


@pytest.fixture
def wait_until() -> Callable[..., None]:
    """``wait_until(predicate, timeout=10.0, what=...)``: polls until the predicate holds."""
    return _wait_until


@pytest.fixture
def make_config() -> Callable[..., Any]:
    """``make_config(**overrides)``: a StoreConfig with small segments."""
    from pyrmq.config import StoreConfig

    def make(**overrides: Any) -> StoreConfig:
        return StoreConfig(**{**SMALL_STORE, **overrides})

    return make


@pytest.fixture
def open_store(tmp_path: Path, make_config: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """``open_store(path=None, config=None, *, background_services=False, **overrides)``.

    Opens a store (at ``tmp_path / "store"`` by default) and closes every store it opened when
    the test ends.
    """
    from pyrmq.store import MessageStore

    opened: list[MessageStore] = []

    def open_(
        path: Path | None = None,
        config: Any = None,
        *,
        background_services: bool = False,
        **overrides: Any,
    ) -> MessageStore:
        store = MessageStore.open(
            path if path is not None else tmp_path / "store",
            config if config is not None else make_config(**overrides),
            background_services=background_services,
        )
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


def decode_record(buf: bytes | memoryview, *, check_crc: bool = True) -> dict[str, Any]:
    """Decodes one stored record (message format V1, IPv4 hosts) independently of the store.

    Raises AssertionError when the magic code, lengths or body CRC are wrong.
    """
    buf = bytes(buf)
    assert len(buf) >= 91, f"record of {len(buf)} bytes is shorter than its fixed part"

    def i32(at: int) -> int:
        return int.from_bytes(buf[at : at + 4], "big", signed=True)

    def i64(at: int) -> int:
        return int.from_bytes(buf[at : at + 8], "big", signed=True)

    def host(at: int) -> str:
        return ".".join(str(b) for b in buf[at : at + 4]) + f":{i32(at + 4)}"

    total = i32(0)
    assert total == len(buf), f"TOTALSIZE {total} != {len(buf)} bytes"
    magic = i32(4) & 0xFFFFFFFF
    assert magic == MESSAGE_MAGIC, f"bad magic {magic:#x}"
    sys_flag = i32(36)
    assert sys_flag & 0x30 == 0, "IPv6 hosts are not expected in tests"
    body_len = i32(84)
    body = buf[88 : 88 + body_len]
    topic_len = buf[88 + body_len]
    topic_at = 89 + body_len
    topic = buf[topic_at : topic_at + topic_len].decode()
    props_at = topic_at + topic_len
    props_len = int.from_bytes(buf[props_at : props_at + 2], "big")
    props_raw = buf[props_at + 2 : props_at + 2 + props_len]
    assert props_at + 2 + props_len == total, "field lengths do not add up to TOTALSIZE"
    body_crc = i32(8)
    if check_crc:
        assert body_crc == zlib.crc32(body) & 0x7FFFFFFF, "body CRC mismatch"
    properties = {}
    for pair in props_raw.split(b"\x02"):
        if pair:
            name, _, value = pair.partition(b"\x01")
            properties[name.decode()] = value.decode()
    return {
        "total_size": total,
        "body_crc": body_crc,
        "queue_id": i32(12),
        "flag": i32(16),
        "queue_offset": i64(20),
        "phy_offset": i64(28),
        "sys_flag": sys_flag,
        "born_timestamp_ms": i64(40),
        "born_host": host(48),
        "store_timestamp_ms": i64(56),
        "store_host": host(64),
        "reconsume_times": i32(72),
        "prepared_transaction_offset": i64(76),
        "body": body,
        "topic": topic,
        "properties": properties,
    }


@pytest.fixture
def record_decoder() -> Callable[..., dict[str, Any]]:
    """:func:`decode_record`: a pure-Python decoder of stored records that checks the CRC."""
    return decode_record
