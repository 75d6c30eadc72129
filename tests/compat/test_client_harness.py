"""The official-client harness fails fast and says why when there is no server to talk to."""

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.compat.rmq_client import (
    EXIT_CLIENT_ERROR,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    ClientError,
    _never_left_the_client,
    _OwnLog,
    check,
    client_supported_platform,
    producer_command,
    pull_command,
    run_command,
    start_push_consumer,
)

pytestmark = [
    pytest.mark.compat,
    pytest.mark.skipif(
        not client_supported_platform(),
        reason="rocketmq==0.4.4 ships librocketmq for x86_64 Linux only",
    ),
]


@pytest.fixture
def closed_addr() -> str:
    """A loopback address nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"127.0.0.1:{port}"


@pytest.fixture
def silent_addr() -> Iterator[str]:
    """A loopback address that completes the TCP handshake and then never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def test_producer_reports_a_send_failure_naming_the_name_server(closed_addr: str) -> None:
    run = run_command(producer_command(closed_addr, "TopicTest", ["hello"], timeout=20))

    assert run.returncode == EXIT_CLIENT_ERROR, run.describe()
    assert run.of("started"), "librocketmq did not load or the producer did not start"
    [error] = run.errors
    assert error["stage"] == "send"
    assert error["namesrv"] == closed_addr
    assert "No route info of this topic: TopicTest" in error["error"]
    assert not run.of("resend"), "a topic without a route is not worth a second send"
    assert run.of("done") == [run.events[-1]]
    assert run.elapsed_s < 20
    with pytest.raises(ClientError, match=closed_addr):
        check(run)


def test_pull_consumer_reports_a_topic_without_queues(closed_addr: str) -> None:
    run = run_command(pull_command(closed_addr, "TopicTest", timeout=20))

    assert run.returncode == EXIT_CLIENT_ERROR, run.describe()
    [error] = run.errors
    assert error["error_type"] == "NoMessageQueues"
    assert closed_addr in error["error"]
    assert not run.messages


def test_push_consumer_wait_times_out_and_stop_ends_the_child(closed_addr: str) -> None:
    with start_push_consumer(closed_addr, "TopicTest", timeout=60) as consumer:
        with pytest.raises(ClientError, match="waiting for 1 messages"):
            consumer.wait_for(1, timeout=2)
        run = consumer.stop()

    assert run.returncode == EXIT_OK, run.describe()
    assert run.events[-1]["event"] == "done"
    assert run.elapsed_s < 30
    assert consumer.messages() == []


def test_watchdog_ends_a_client_blocked_inside_the_library(silent_addr: str) -> None:
    # Unbounded, librocketmq waits about a minute for a route from a silent name server.
    run = run_command(producer_command(silent_addr, "TopicTest", ["hello"], timeout=2))

    assert run.returncode == EXIT_TIMEOUT, run.describe()
    [error] = run.errors
    assert error["stage"] == "timeout"
    assert error["namesrv"] == silent_addr
    assert run.elapsed_s < 15


def test_unknown_command_keys_are_rejected(closed_addr: str) -> None:
    command = {**producer_command(closed_addr, "TopicTest", ["hello"]), "delay": 3}

    run = run_command(command)

    assert run.returncode == EXIT_USAGE
    assert "unknown produce keys: delay" in run.errors[0]["error"]


_LOCKED = "(error):GetTransport of:127.0.0.1:45805 get timed_mutex timeout[CreateTransport:297]"
_FAILED = "(error):send failed of times:{n},brokerName:broker-a[sendDefaultImpl:369]"
_NO_ANSWER = "(error):wait response timeout or get NULL response of code:10[invokeSync:208]"
_NAMESRV_LOCKED = (
    "(error):CreateNameserverTransport get timed_mutex timeout[CreateNameServerTransport:371]"
)


@pytest.mark.parametrize(
    ("causes", "resend"),
    [
        ([_LOCKED] * 5, True),
        ([_LOCKED] * 4 + [_NO_ANSWER], False),
        ([_NO_ANSWER], False),
        ([f"{_NAMESRV_LOCKED}\n{_NO_ANSWER}"], False),
        ([], False),
    ],
    ids=["all-locked", "one-unanswered", "unanswered", "name-server-locked", "no-attempt"],
)
def test_a_send_is_repeated_only_when_no_attempt_left_the_client(
    causes: list[str], resend: bool
) -> None:
    log = "".join(f"{cause}\n{_FAILED.format(n=n)}\n" for n, cause in enumerate(causes, start=1))
    log += "(warning):Retry many times, still failed[sendDefaultImpl:376]\n"
    assert _never_left_the_client(log) is resend


def test_the_own_log_is_read_from_the_mark_and_from_the_start_of_a_new_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    logs = tmp_path / "logs" / "rocketmq-cpp"
    logs.mkdir(parents=True)
    first = logs / f"{os.getpid()}_rocketmq-cpp.log.0"
    first.write_text("before\n")
    (logs / "1_rocketmq-cpp.log.0").write_text("another process\n")
    own = _OwnLog()
    own.mark()
    with first.open("a") as f:
        f.write("after\n")
    assert own.since_mark() == "after\n"
    os.utime(first, (1, 1))
    (logs / f"{os.getpid()}_rocketmq-cpp.log.1").write_text("rolled\n")
    assert own.since_mark() == "rolled\n"
