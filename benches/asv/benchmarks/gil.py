"""Does put_batch release the GIL? N threads against a serial loop doing the same work.

Each thread appends to its own queue. With the GIL released around the store work, the threaded
time drops below the serial time (up to the commit-log put lock); the baseline shows the cost of
holding it.
"""

from __future__ import annotations

import time

from ._common import IMPLS, ScratchStore, w

TOTAL_BATCHES = 512
BODY_BYTES = 128


class PutBatchThreads(ScratchStore):
    params = (IMPLS, [2, 4, 8])
    param_names = ("impl", "threads")
    timeout = 300

    def setup(self, impl: str, threads: int) -> None:
        store = self.open_scratch(impl)
        self.per_thread = TOTAL_BATCHES // threads
        for i in range(threads):
            w.append_op(store, BODY_BYTES, w.APPEND_BATCH, queue_id=i)()

    def _threaded(self, threads: int) -> None:
        w.run_threads(
            threads,
            lambda i: w.append_op(self.store, BODY_BYTES, w.APPEND_BATCH, queue_id=i),
            max_ops_per_thread=self.per_thread,
            max_seconds=60.0,
        )

    def _serial(self, threads: int) -> None:
        ops = [
            w.append_op(self.store, BODY_BYTES, w.APPEND_BATCH, queue_id=i) for i in range(threads)
        ]
        for op in ops:
            for _ in range(self.per_thread):
                op()

    def time_threads(self, impl: str, threads: int) -> None:
        self._threaded(threads)

    def time_serial(self, impl: str, threads: int) -> None:
        self._serial(threads)

    def track_thread_speedup(self, impl: str, threads: int) -> float:
        """Serial time over threaded time, best of 3 alternating runs each."""
        serial = threaded = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            self._threaded(threads)
            threaded = min(threaded, time.perf_counter() - start)
            start = time.perf_counter()
            self._serial(threads)
            serial = min(serial, time.perf_counter() - start)
        return serial / threaded

    track_thread_speedup.unit = "x"  # type: ignore[attr-defined]
