"""Store throughput across commits: append, ConsumeQueue scan, batched get.

``time_*`` and ``peakmem_*`` run a fixed amount of work; ``track_*`` report msgs/s measured
inside the benchmark (bounded by count and time).
"""

from __future__ import annotations

from ._common import IMPLS, ScratchStore, close_if_open, seeded_paths, skip_unless_available, w

APPEND_MSGS = 4096
TRACK_SECONDS = 0.5
SCAN_UNITS = 262_144
SCAN_CHUNK = 32_768
GET_MSGS = 16_384
WARMUP_BYTES = 256 * 1024 * 1024


class Append(ScratchStore):
    params = (IMPLS, [128, 4096], [1, w.APPEND_BATCH])
    param_names = ("impl", "body_bytes", "batch")
    timeout = 300

    def setup(self, impl: str, body_bytes: int, batch: int) -> None:
        skip_unless_available(impl)
        w.warm_page_cache(WARMUP_BYTES)  # appends then reuse warm page-cache pages
        store = self.open_scratch(impl)
        self.op = w.append_op(store, body_bytes, batch)
        self.calls = max(1, APPEND_MSGS // batch)

    def time_append(self, impl: str, body_bytes: int, batch: int) -> None:
        op = self.op
        for _ in range(self.calls):
            op()

    def peakmem_append(self, impl: str, body_bytes: int, batch: int) -> None:
        self.time_append(impl, body_bytes, batch)

    def track_append_msgs_per_s(self, impl: str, body_bytes: int, batch: int) -> float:
        msgs, _, secs = w.run_bounded(
            self.op, max_ops=64 * self.calls, max_seconds=TRACK_SECONDS, warmup_ops=self.calls
        )
        return msgs / secs

    track_append_msgs_per_s.unit = "msgs/s"  # type: ignore[attr-defined]


class Scan:
    params = (IMPLS, ["*", w.FILTER_TAG])
    param_names = ("impl", "tags")
    timeout = 300

    def setup_cache(self) -> dict[str, str]:
        return seeded_paths("scan", SCAN_UNITS, 16)

    def setup(self, paths: dict[str, str], impl: str, tags: str) -> None:
        skip_unless_available(impl)
        self.store = w.open_store(impl, paths[impl])
        self.tags = None if tags == "*" else tags
        self.op = w.scan_op(self.store, SCAN_CHUNK, self.tags)
        if impl == "pyrmq" and not hasattr(self.store.store, "scan_consume_queue"):  # type: ignore[attr-defined]
            raise NotImplementedError("MessageStore.scan_consume_queue is not available")

    def teardown(self, paths: dict[str, str], impl: str, tags: str) -> None:
        close_if_open(self)

    def time_scan_queue(self, paths: dict[str, str], impl: str, tags: str) -> None:
        for _ in range(SCAN_UNITS // SCAN_CHUNK):
            self.op()

    def track_scan_units_per_s(self, paths: dict[str, str], impl: str, tags: str) -> float:
        units, _, secs = w.run_bounded(self.op, max_ops=1000, max_seconds=TRACK_SECONDS)
        return units / secs

    track_scan_units_per_s.unit = "units/s"  # type: ignore[attr-defined]


class Get:
    params = (IMPLS, [128, 1024])
    param_names = ("impl", "body_bytes")
    timeout = 300

    def setup_cache(self) -> dict[str, dict[str, str]]:
        return {str(b): seeded_paths(f"get{b}", GET_MSGS, b) for b in (128, 1024)}

    def setup(self, paths: dict[str, dict[str, str]], impl: str, body_bytes: int) -> None:
        skip_unless_available(impl)
        self.store = w.open_store(impl, paths[str(body_bytes)][impl])
        self.op = w.get_op(self.store, batch=w.GET_BATCH)
        self.op()

    def teardown(self, paths: dict[str, dict[str, str]], impl: str, body_bytes: int) -> None:
        close_if_open(self)

    def time_get_32_batches(self, paths: dict, impl: str, body_bytes: int) -> None:
        op = self.op
        for _ in range(GET_MSGS // w.GET_BATCH):
            op()

    def peakmem_get_32_batches(self, paths: dict, impl: str, body_bytes: int) -> None:
        self.time_get_32_batches(paths, impl, body_bytes)

    def track_get_msgs_per_s(self, paths: dict, impl: str, body_bytes: int) -> float:
        msgs, _, secs = w.run_bounded(self.op, max_ops=100_000, max_seconds=TRACK_SECONDS)
        return msgs / secs

    track_get_msgs_per_s.unit = "msgs/s"  # type: ignore[attr-defined]
