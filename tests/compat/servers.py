"""Real pyrmq server processes for the compatibility suite: start, wait for the ready line, stop
with SIGTERM and check the exit was clean."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

READY = re.compile(rb"pyrmq (ready|name server ready|broker ready): (.*)")


class ServerProcess:
    """One ``pyrmq`` command running as a child process."""

    def __init__(self, args: list[str], log_path: Path, *, ready_timeout_s: float = 30.0) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # A home of its own: what a server keeps under ~ by default (a name server's KV
        # config) is then the test's, not shared with every other test and run.
        home = log_path.with_name(log_path.name + ".home")
        home.mkdir(exist_ok=True)
        env["HOME"] = str(home)
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyrmq.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
        )
        self.ready_line = self._wait_ready(ready_timeout_s)

    def _wait_ready(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        buf = b""
        while time.monotonic() < deadline:
            if not sel.select(timeout=0.2):
                if self.proc.poll() is not None:
                    break
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            if READY.search(buf):
                return buf.decode().strip()
        self.kill()
        raise RuntimeError(
            f"no ready line within {timeout_s} s; log:\n{self.log_path.read_text()[-3000:]}"
        )

    def addresses(self) -> list[str]:
        """The name server's and broker's addresses (remoting), in the ready line's order."""
        remoting = self.ready_line.split(", gRPC ")[0].split(", metrics ")[0]
        return re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", remoting)

    def grpc_address(self) -> str:
        """The broker's RocketMQ 5 gRPC address."""
        match = re.search(r", gRPC (\d+\.\d+\.\d+\.\d+:\d+)", self.ready_line)
        assert match is not None, f"no gRPC address in {self.ready_line!r}"
        return match.group(1)

    def metrics_address(self) -> str:
        """The broker's metrics endpoint, for Prometheus."""
        match = re.search(r", metrics (\d+\.\d+\.\d+\.\d+:\d+)", self.ready_line)
        assert match is not None, f"no metrics address in {self.ready_line!r}"
        return match.group(1)

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGTERM, then wait: a clean shutdown exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_files()
        return self.proc.returncode

    def _close_files(self) -> None:
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_files()


def start_serve(root: Path, *args: str) -> ServerProcess:
    """``pyrmq serve`` on free ports over ``root / "store"``, logging to ``root / "serve.log"``,
    with ``args`` appended, once it is ready."""
    return ServerProcess(
        [
            "serve",
            "--store",
            str(root / "store"),
            "--namesrv-port",
            "0",
            "--broker-port",
            "0",
            "--grpc-port",
            "0",
            *args,
        ],
        root / "serve.log",
    )


def start_broker(
    namesrv: str, root: Path, name: str, *args: str, config: str = ""
) -> ServerProcess:
    """``pyrmq broker`` ``name`` of ``namesrv``'s cluster on a free port, storing in
    ``root / name`` and logging to ``root / f"{name}.log"``, with ``config`` lines added to its
    config file and ``args`` to its command line, once it is ready."""
    conf = root / f"{name}.conf"
    conf.write_text(f"brokerName={name}\n{config}")
    return ServerProcess(
        [
            *("broker", "-n", namesrv, "-c", str(conf), "--store", str(root / name)),
            *("--port", "0", *args),
        ],
        root / f"{name}.log",
    )


@contextmanager
def serving(root: Path, *args: str) -> Iterator[ServerProcess]:
    """:func:`start_serve`; on exit, stops it and checks the exit was clean."""
    server = start_serve(root, *args)
    try:
        yield server
    finally:
        assert server.stop() == 0, (root / "serve.log").read_text()[-3000:]


def create_topic(broker_addr: str, topic: str, queue_nums: int = 4, *, perm: int = 6) -> None:
    """UPDATE_AND_CREATE_TOPIC on one broker, as an operator does before consumers start."""
    import asyncio

    from pyrmq.remoting.client import RemotingClient
    from pyrmq.remoting.command import RemotingCommand
    from pyrmq.remoting.headers import CreateTopicRequestHeader
    from pyrmq.remoting.protocol import RequestCode, ResponseCode

    async def main() -> None:
        client = RemotingClient()
        try:
            header = CreateTopicRequestHeader(
                topic=topic,
                default_topic="TBW102",
                read_queue_nums=queue_nums,
                write_queue_nums=queue_nums,
                perm=perm,
            )
            request = RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
            response = await client.invoke(broker_addr, request, timeout_s=5)
            assert response.code == ResponseCode.SUCCESS, response.remark
        finally:
            await client.close()

    asyncio.run(main())


BROKER_HA = "broker-ha"
"""The broker name of a :class:`Cluster`'s master and slave."""


class Cluster:
    """A name server and the brokers of ``BROKER_HA`` started so far, each over its own store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.namesrv_proc = ServerProcess(["namesrv", "--port", "0"], root / "namesrv.log")
        self.namesrv = self.namesrv_proc.addresses()[0]
        self.procs: dict[str, ServerProcess] = {}
        self.addrs: dict[str, str] = {}
        self.logs: dict[str, Path] = {}

    def start(self, name: str, role: str, *extra: str) -> str:
        """``pyrmq broker`` ``name`` as a ``role`` (ASYNC_MASTER, SYNC_MASTER or SLAVE) of
        :data:`BROKER_HA`, with ``extra`` broker.conf lines; returns its address."""
        broker_id = 1 if role == "SLAVE" else 0
        conf = self.root / f"{name}.conf"
        conf.write_text(
            "\n".join(
                [
                    f"brokerName={BROKER_HA}",
                    f"brokerId={broker_id}",
                    f"brokerRole={role}",
                    "haListenPort=0",
                    f"mappedFileSizeCommitLog={1 << 20}",
                    "flushConsumerOffsetInterval=500",
                    *extra,
                ]
            )
            + "\n"
        )
        log = self.root / f"{name}-{len(self.logs)}.log"
        self.logs[name] = log
        proc = ServerProcess(
            [
                *("broker", "-n", self.namesrv, "-c", str(conf)),
                *("--store", str(self.root / name), "--port", "0"),
            ],
            log,
        )
        self.procs[name] = proc
        self.addrs[name] = proc.addresses()[-1]
        return self.addrs[name]

    def log(self, name: str) -> str:
        return self.logs[name].read_text()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        self.namesrv_proc.kill()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
