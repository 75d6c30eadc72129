"""What the commands take from their environment, as RocketMQ's do: ``NAMESRV_ADDR`` names
the name servers of ``pyrmq broker`` and ``pyrmq admin`` when neither ``-n`` nor broker.conf
does; and an unusable ``--log-file`` is a usage error, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.compat.servers import serving
from tests.helpers import child_env

pytestmark = pytest.mark.integration


def _pyrmq(
    *args: str, env: dict[str, str], timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyrmq.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_namesrv_addr_names_the_name_servers_of_broker_and_admin(tmp_path: Path) -> None:
    (tmp_path / "serve").mkdir()
    with serving(tmp_path / "serve") as server:
        namesrv = str(server.addresses()[0])
        env = {**child_env(), "NAMESRV_ADDR": namesrv}
        listed = _pyrmq("admin", "cluster-list", env=env)
        assert listed.returncode == 0, listed.stderr
        assert "broker-a" in listed.stdout
        # -n still wins over the environment.
        wrong = _pyrmq("admin", "cluster-list", "-n", "127.0.0.1:1", env=env)
        assert wrong.returncode != 0
        conf = tmp_path / "b.conf"
        conf.write_text("brokerName=broker-env\n")
        log = tmp_path / "broker.log"
        with log.open("w") as out:
            broker = subprocess.Popen(
                [
                    *(sys.executable, "-m", "pyrmq", "broker", "-c", str(conf)),
                    *("--store", str(tmp_path / "b"), "--port", "0"),
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 30
                while (
                    "broker-env" not in (listed := _pyrmq("admin", "cluster-list", env=env)).stdout
                ):
                    assert broker.poll() is None, log.read_text()
                    assert time.monotonic() < deadline, listed.stdout
                    time.sleep(0.2)
            finally:
                broker.terminate()
                broker.wait(30)


def test_an_unusable_log_file_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "afile").touch()
    done = _pyrmq(
        "serve",
        "--store",
        str(tmp_path / "store"),
        "--log-file",
        str(tmp_path / "afile" / "log"),
        env={k: v for k, v in child_env().items() if k != "NAMESRV_ADDR"},
    )
    assert done.returncode == 2, done.stderr
    assert "--log-file" in done.stderr
    assert "Traceback" not in done.stderr
    assert os.path.isfile(tmp_path / "afile")
