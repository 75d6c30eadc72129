"""Fixtures shared by the compatibility tests."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from .servers import ServerProcess, serving


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """``pyrmq serve`` on free ports, over a store under ``tmp_path``."""
    with serving(tmp_path) as server:
        yield server
