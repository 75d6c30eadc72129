"""The server commands' options and addresses: what they refuse before starting anything, and
where the store goes."""

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyrmq.cli.commands.serve import _broker_config
from pyrmq.cli.main import main
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig
from pyrmq.errors import ConfigError, RemotingError
from pyrmq.namesrv import NamesrvConfig
from pyrmq.remoting.addresses import split_addresses
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--namesrv-port", "70000"],
        ["serve", "--broker-port", "65536"],
        ["namesrv", "--port", "-1"],
        ["broker", "--port", "70000"],
    ],
    ids=" ".join,
)
def test_a_port_outside_0_to_65535_is_a_usage_error(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "not in the range 0<=x<=65535" in result.output


def test_a_name_server_port_outside_0_to_65535_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a port"):
        NamesrvConfig(listen_port=70000)


def test_a_config_file_that_names_no_store_keeps_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    conf = tmp_path / "broker.conf"
    conf.write_text("flushDiskType=SYNC_FLUSH\n")
    config = _broker_config(conf, None, None, None, None)
    assert config.store.store_path_root_dir == str(tmp_path / ".pyrmq" / "store")
    assert config.store.flush_disk_type == "SYNC_FLUSH"

    conf.write_text(f"storePathRootDir={tmp_path / 'named'}\n")
    assert _broker_config(conf, None, None, None, None).store.store_path_root_dir == str(
        tmp_path / "named"
    )
    chosen = _broker_config(conf, tmp_path / "flag", None, None, None)
    assert chosen.store.store_path_root_dir == str(tmp_path / "flag")


def test_a_config_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_bytes("brokerName=br\u00f6ker\n".encode("latin-1"))
    result = CliRunner().invoke(main, ["broker", "-c", str(conf)])
    assert result.exit_code == 2, result.output
    assert "UTF-8" in result.output


def test_store_demo_appends_exactly_the_count(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["store-demo", "--store", str(tmp_path), "--count", "50"])
    assert result.exit_code == 0, result.output
    assert "append       50 x 128 B" in result.output
    assert "DemoTopic: q0=32, q1=18, q2=0, q3=0" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--size", "-1"], "-1 is not in the range x>=1"), (["--count", "0"], "x>=1")],
)
def test_store_demo_refuses_bad_options(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["store-demo", "--store", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_store_demo_reports_a_bad_config_file(tmp_path: Path) -> None:
    conf = tmp_path / "store.conf"
    conf.write_text("flushIntervalCommitLog=0\n")
    result = CliRunner().invoke(
        main, ["store-demo", "--store", str(tmp_path / "s"), "-c", str(conf)]
    )
    assert result.exit_code == 2, result.output
    assert "flushIntervalCommitLog" in result.output


@pytest.mark.parametrize("entry", ["127.0.0.1", "localhost:98x6", ":9876", "h:65536"])
def test_a_name_server_address_that_is_not_host_port_is_refused(entry: str) -> None:
    listed = f"{entry};127.0.0.1:9876"
    with pytest.raises(ConfigError, match="not host:port"):
        ClientConfig(namesrv_addr=listed)
    with pytest.raises(ConfigError, match="not host:port"):
        Admin(listed)
    result = CliRunner().invoke(main, ["broker", "-n", listed, "--port", "0"])
    assert result.exit_code == 2, result.output
    assert "not host:port" in result.output


def test_name_server_lists_split_on_semicolons_and_commas() -> None:
    assert split_addresses(" a:1; b:2 ,c:3;; ") == ["a:1", "b:2", "c:3"]
    assert ClientConfig(namesrv_addr="a:1;b:2").namesrv_list == ["a:1", "b:2"]


def test_connecting_to_an_address_without_a_port_is_a_remoting_error() -> None:
    async def connect() -> None:
        client = RemotingClient()
        try:
            with pytest.raises(RemotingError, match=r"cannot connect to 127\.0\.0\.1:"):
                await client.invoke("127.0.0.1", RemotingCommand.request(26, {}), timeout_s=1)
        finally:
            await client.close()

    asyncio.run(connect())


def test_python_dash_m_pyrmq_is_the_pyrmq_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pyrmq", "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pyrmq, version ")


def test_serve_speaks_grpc_on_8081_unless_told_otherwise_and_broker_only_when_told(
    tmp_path: Path,
) -> None:
    from pyrmq.cli.commands.serve import DEFAULT_GRPC_PORT

    serve = _broker_config(None, None, None, None, None, None, grpc_default=DEFAULT_GRPC_PORT)
    assert serve.grpc_server_port == 8081
    conf = tmp_path / "broker.conf"
    conf.write_text("grpcServerPort=-1\n")
    off = _broker_config(conf, None, None, None, None, None, grpc_default=DEFAULT_GRPC_PORT)
    assert off.grpc_server_port == -1
    assert _broker_config(conf, None, None, None, None, 0, grpc_default=8081).grpc_server_port == 0
    assert _broker_config(None, None, None, None, "127.0.0.1:9876", None).grpc_server_port == -1
    result = CliRunner().invoke(main, ["serve", "--grpc-port", "-2"])
    assert result.exit_code == 2, result.output
