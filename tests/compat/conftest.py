"""Fixtures shared by the compatibility tests."""

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .servers import ServerProcess, serving

ROOT = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("rmq5_client.py")
RMQ5_PYTHON = Path(os.environ.get("PYRMQ_RMQ5_PYTHON", ROOT / ".venv-rmq5" / "bin" / "python"))


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[ServerProcess]:
    """``pyrmq serve`` on free ports, over a store under ``tmp_path``."""
    with serving(tmp_path) as server:
        yield server


@pytest.fixture(scope="module")
def rmq5(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Runs one scenario of ``rmq5_client.py`` with the official client; returns its report."""
    if not RMQ5_PYTHON.exists():
        pytest.fail(
            f"the official RocketMQ 5 client is missing: run `make rmq5-client` ({RMQ5_PYTHON})"
        )
    home = tmp_path_factory.mktemp("rmq5-home")

    def run(
        scenario: str,
        spec: dict[str, Any],
        timeout_s: float = 90,
        env: dict[str, str] | None = None,
    ) -> Any:
        # The client logs under $HOME and reads nothing else from it.
        env = {"HOME": str(home), "PATH": os.environ.get("PATH", ""), **(env or {})}
        done = subprocess.run(
            [str(RMQ5_PYTHON), str(DRIVER), scenario, json.dumps(spec)],
            capture_output=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        return json.loads(done.stdout.decode().strip().splitlines()[-1])

    return run
