"""Shared setup for the asv suites: import path, implementation check, scratch stores."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[3])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benches import workloads as w  # noqa: E402

IMPLS = list(w.IMPLEMENTATIONS)


def skip_unless_available(impl: str) -> None:
    """asv skips a parameter combination whose setup raises NotImplementedError."""
    if impl == "pyrmq" and not w.pyrmq_available():
        raise NotImplementedError(w.not_built())


def close_if_open(bench: object) -> None:
    """asv calls teardown even when setup raised (a skipped parameter); tolerate that."""
    store = getattr(bench, "store", None)
    if store is not None:
        store.close()
        bench.store = None  # type: ignore[attr-defined]


class ScratchStore:
    """A store in a fresh temp dir, removed by ``teardown``."""

    def open_scratch(self, impl: str, **kwargs: object) -> w.Store:
        skip_unless_available(impl)
        self._dir = tempfile.mkdtemp(prefix=f"pyrmq-asv-{impl}-", dir=w.bench_root())
        self.store = w.open_store(impl, self._dir, **kwargs)  # type: ignore[arg-type]
        return self.store

    def teardown(self, *params: object) -> None:
        close_if_open(self)
        if getattr(self, "_dir", None):
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def seeded_paths(label: str, count: int, body_bytes: int) -> dict[str, str]:
    """Seed one store per available implementation under the cwd (asv's setup_cache dir)."""
    paths = {}
    for impl in IMPLS:
        if impl == "pyrmq" and not w.pyrmq_available():
            continue
        path = Path.cwd() / f"{label}-{impl}"
        store = w.open_store(impl, path)
        try:
            w.seed(store, count, body_bytes)
        finally:
            store.close()
        paths[impl] = str(path)
    return paths
