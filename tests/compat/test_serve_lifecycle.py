"""``pyrmq serve`` as a process: it says when it is ready, and SIGTERM stops it cleanly with its
messages, offsets and store intact for the next start."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import remoting_call, send_raw

from pyrmq import _core
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode
from pyrmq.store import MessageStore

from .servers import ServerProcess

pytestmark = pytest.mark.integration


# Any free port for each listener.
FREE_PORTS = ["--namesrv-port", "0", "--broker-port", "0", "--grpc-port", "0"]


call = remoting_call


def send(broker: str, topic: str, body: bytes) -> RemotingCommand:
    return send_raw(broker, topic, body)


@pytest.mark.parametrize("flush", ["sync", "async"])
def test_sigterm_stops_cleanly_and_a_restart_serves_everything(tmp_path: Path, flush: str) -> None:
    store = tmp_path / "store"
    args = [
        "serve",
        "--store",
        str(store),
        "--namesrv-port",
        "0",
        "--broker-port",
        "0",
        "--grpc-port",
        "0",
        "--flush",
        flush,
    ]
    first = ServerProcess(args, tmp_path / "first.log")
    namesrv, broker = first.addresses()
    assert first.ready_line.startswith(f"pyrmq ready: name server {namesrv}, broker {broker}")
    for i in range(20):
        assert send(broker, "TopicLife", f"m{i}".encode()).code == ResponseCode.SUCCESS
    committed = call(
        broker,
        RequestCode.UPDATE_CONSUMER_OFFSET,
        {"consumerGroup": "CG", "topic": "TopicLife", "queueId": "0", "commitOffset": "12"},
    )
    assert committed.code == ResponseCode.SUCCESS
    assert first.stop() == 0, (tmp_path / "first.log").read_text()[-3000:]
    # A clean stop removes the abort marker and leaves the offsets on disk.
    assert not (store / "abort").exists()
    offsets = json.loads((store / "config" / "consumerOffset.json").read_text())
    assert offsets["offsetTable"]["TopicLife@CG"] == {"0": 12}

    second = ServerProcess(args, tmp_path / "second.log")
    try:
        _, broker = second.addresses()
        query = call(
            broker,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": "CG", "topic": "TopicLife", "queueId": "0"},
        )
        assert (query.code, query.ext_fields["offset"]) == (ResponseCode.SUCCESS, "12")
        pull = call(
            broker,
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "CG",
                "topic": "TopicLife",
                "queueId": "0",
                "queueOffset": "12",
                "maxMsgNums": "32",
                "sysFlag": "4",
                "commitOffset": "0",
                "subVersion": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
            },
        )
        assert pull.code == ResponseCode.SUCCESS
        assert [m.body for m in _core.decode_messages(pull.body)] == [
            f"m{i}".encode() for i in range(12, 20)
        ]
        assert "not shut down cleanly" not in (tmp_path / "second.log").read_text()
    finally:
        assert second.stop() == 0


@pytest.mark.parametrize(
    "command",
    [["serve", *FREE_PORTS], ["broker", "-n", "127.0.0.1:9", "--port", "0", "--grpc-port", "0"]],
    ids=["serve", "broker"],
)
def test_a_store_it_cannot_open_is_an_error_and_is_left_as_it_was(
    tmp_path: Path, command: list[str]
) -> None:
    """Here the store is held by another process; a RocketMQ CommitLog is refused the same way
    (test_store_recovery). The broker writes nothing into the directory, before or after."""
    store = tmp_path / "store"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    with MessageStore.open(store, {"mappedFileSizeCommitLog": 1 << 20}) as held:
        held.put("TopicHeld", b"held")
        args = [*command, "--store", str(store)]
        done = subprocess.run(
            [sys.executable, "-m", "pyrmq.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
    assert done.returncode == 1, done.stderr
    assert "Error: cannot start: " in done.stderr
    assert "in use by another process" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (store / "config").exists()


@pytest.mark.parametrize(
    ("command", "table", "content"),
    [
        (["serve", *FREE_PORTS], "topics.json", '{"topicConfigTable": {"TopicX": 5}}'),
        (
            ["broker", "-n", "127.0.0.1:9", "--port", "0", "--grpc-port", "0"],
            "consumerOffset.json",
            '{"offsetTable": {"TopicX@CG": {"0": "x"}}}',
        ),
    ],
    ids=["serve", "broker"],
)
def test_a_table_file_that_cannot_be_read_stops_the_start_with_its_name(
    tmp_path: Path, command: list[str], table: str, content: str
) -> None:
    """A table that parses as JSON but is not the table, with no backup to fall back to: the
    start is refused naming the file, as RocketMQ's broker refuses it. It once crashed with a
    traceback (or, for JSON that is not an object, started with the table empty)."""
    store = tmp_path / "store"
    (store / "config").mkdir(parents=True)
    (store / "config" / table).write_text(content)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-m", "pyrmq.cli.main", *command, "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 1, done.stderr
    assert f"Error: cannot start: {store / 'config' / table} cannot be read" in done.stderr
    assert "Traceback" not in done.stderr
    assert (store / "config" / table).read_text() == content


def test_a_broker_conf_can_put_the_commit_log_on_a_disk_of_its_own(tmp_path: Path) -> None:
    store, commit_log = tmp_path / "store", tmp_path / "disk2" / "commitlog"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir = {store}\nstorePathCommitLog = {commit_log}\n")
    args = ["serve", "-c", str(conf), *FREE_PORTS]
    server = ServerProcess(args, tmp_path / "serve.log")
    try:
        _, broker = server.addresses()
        assert send(broker, "TopicDisk2", b"on disk 2").code == ResponseCode.SUCCESS
    finally:
        assert server.stop() == 0
    assert os.listdir(commit_log) != []
    assert not (store / "commitlog").exists()
    assert (store / "config" / "topics.json").exists()


def test_a_stop_that_cannot_save_the_offsets_still_closes_the_store_and_says_so(
    tmp_path: Path,
) -> None:
    """A full disk refuses the offsets' new file (here a directory is in its way): the store is
    still closed cleanly, and the exit status tells that the stop was not."""
    store = tmp_path / "store"
    args = ["serve", "--store", str(store), *FREE_PORTS]
    server = ServerProcess(args, tmp_path / "serve.log")
    _, broker = server.addresses()
    assert send(broker, "TopicStop", b"kept").code == ResponseCode.SUCCESS
    (store / "config" / "consumerOffset.json.tmp").mkdir(parents=True)
    assert server.stop() != 0
    log = (tmp_path / "serve.log").read_text()
    assert "saving consumer offsets at stop failed" in log
    assert "did not stop cleanly" in log
    assert not (store / "abort").exists()
    with MessageStore.open(store) as reopened:
        assert reopened.recovery["records"] == 0
        [message] = reopened.get("TopicStop", 0, 0).messages()
        assert message.body == b"kept"


def test_a_kill_during_a_topic_deletion_never_leaves_offsets_past_a_topic_created_again(
    tmp_path: Path,
) -> None:
    """The groups' offsets on the topic are saved without it before its queues go: killed in
    between, a topic created again started at 0 under a group offset of 20, and the group
    skipped its first messages."""
    import time

    store, conf = tmp_path / "store", tmp_path / "broker.conf"
    conf.write_text("flushConsumerOffsetInterval=100\n")
    args = ["serve", "--store", str(store), *FREE_PORTS]
    args += ["--flush", "sync", "-c", str(conf)]
    server = ServerProcess(args, tmp_path / "first.log")
    _, broker = server.addresses()
    for _ in range(20):
        assert send(broker, "TopicDel", b"old").code == ResponseCode.SUCCESS
    commit = {"consumerGroup": "CG", "topic": "TopicDel", "queueId": "0", "commitOffset": "20"}
    assert call(broker, RequestCode.UPDATE_CONSUMER_OFFSET, commit).code == ResponseCode.SUCCESS
    offsets, deleted = (
        store / "config" / "consumerOffset.json",
        store / "config" / "deletedTopics.json",
    )
    deadline = time.monotonic() + 10
    while "TopicDel@CG" not in (offsets.read_text() if offsets.exists() else ""):
        assert time.monotonic() < deadline, "the offset was never saved"
        time.sleep(0.02)

    async def delete_and_kill() -> None:
        client = RemotingClient()
        request = RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TopicDel"})
        answer = asyncio.ensure_future(client.invoke(broker, request, timeout_s=5))
        while "TopicDel" not in (deleted.read_text() if deleted.exists() else ""):
            assert time.monotonic() < deadline + 10, "the deletion was never recorded"
            await asyncio.sleep(0)
        server.kill()
        with contextlib.suppress(Exception):
            await answer
        await client.close()

    asyncio.run(delete_and_kill())
    second = ServerProcess(args, tmp_path / "second.log")
    try:
        _, broker = second.addresses()
        query = {"consumerGroup": "CG", "topic": "TopicDel", "queueId": "0"}
        answer = call(broker, RequestCode.QUERY_CONSUMER_OFFSET, query)
        assert answer.code != ResponseCode.SUCCESS or answer.ext_fields["offset"] == "0"
    finally:
        assert second.stop() == 0
