"""Every script in ``examples/`` runs against a real ``pyrmq serve`` process and prints what
it did: the tests read its output back and check it against what the broker delivered."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import serving

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"

MSG_ID = r"[0-9A-F]{32}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with serving(tmp_path_factory.mktemp("serve")) as proc:
        yield proc


@pytest.fixture(scope="module")
def run(server: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run(script, *args)``: runs ``examples/<script>.py --namesrv ...``; returns stdout
    lines, failing the test on a non-zero exit."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    env["PYRMQ_OFFSETS_DIR"] = str(tmp_path_factory.mktemp("offsets"))
    namesrv = server.addresses()[0]

    def run_example(script: str, *args: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / f"{script}.py"), "--namesrv", namesrv, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=40,
            check=False,
        )
        assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
        return proc.stdout.splitlines()

    return run_example


def test_every_example_is_tested() -> None:
    tested = {"produce", "consume", "ordered", "broadcast", "async_example"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


def test_produce_then_consume_delivers_what_was_sent(run: Any) -> None:
    sent = run("produce", "--topic", "ExampleTopic", "--count", "6", "--tags", "TagX")
    pattern = re.compile(rf"sent 'message (\d)': status=OK msg_id=({MSG_ID}) offset=(\d+)$")
    matches = [pattern.match(line) for line in sent[:-1]]
    assert all(matches), sent
    ids = {m.group(2): f"message {m.group(1)}" for m in matches if m}
    assert sorted(ids.values()) == [f"message {i}" for i in range(6)]
    assert sent[-1] == "sent 6 messages to ExampleTopic"

    got = run("consume", "--topic", "ExampleTopic", "--count", "6", "--timeout", "20")
    pattern = re.compile(rf"received ({MSG_ID}) tags=TagX body='(message \d)' reconsume_times=0$")
    received = [pattern.match(line) for line in got[:-1]]
    assert all(received), got
    assert {m.group(1): m.group(2) for m in received if m} == ids
    assert re.fullmatch(r"received 6 messages in \d+\.\d s", got[-1])


def test_consume_fail_first_gets_each_message_again(run: Any) -> None:
    assert run("produce", "--topic", "ExampleRetry", "--count", "3", "--batch")[0].startswith(
        "sent batch of 3: status=OK"
    )
    out = run(
        "consume", "--topic", "ExampleRetry", "--group", "example-retry", "--count", "3",
        "--fail-first", "--timeout", "30",
    )  # fmt: skip
    failed = sorted(re.findall(rf"^failing ({MSG_ID}) ", "\n".join(out), re.M))
    again = sorted(re.findall(rf"^received ({MSG_ID}) .* reconsume_times=1$", "\n".join(out), re.M))
    assert len(failed) == 3
    assert again == failed
    assert out[-1].startswith("received 3 messages")


def test_ordered_keeps_each_orders_steps_in_order(run: Any) -> None:
    out = run("ordered", "--topic", "ExampleOrdered", "--orders", "3")
    assert sum(line.startswith("sent order") for line in out) == 12
    for order in range(3):
        assert f"order {order} (queue [{order}]): created -> paid -> shipped -> delivered" in out
    assert out[-1] == "every order kept its order"


def test_broadcast_gives_every_consumer_every_message(run: Any) -> None:
    out = run("broadcast", "--topic", "ExampleBroadcast", "--consumers", "2", "--count", "4")
    for n in range(2):
        bodies = sorted(
            line.split(" message ")[1].rstrip("'")
            for line in out
            if line.startswith(f"consumer-{n} received '")
        )
        assert bodies == ["0", "1", "2", "3"]
    assert out[-2:] == ["consumer-0 received 4/4 messages", "consumer-1 received 4/4 messages"]


def test_async_example_sends_and_iterates(run: Any) -> None:
    out = run("async_example", "--topic", "ExampleAsync", "--count", "4")
    sent = [line for line in out if line.startswith("sent message")]
    received = sorted(
        re.findall(r"^received '\w{8} (message \d)' tags=TagA ", "\n".join(out), re.M)
    )
    assert len(sent) == 4
    assert all(re.search(rf": OK msg_id={MSG_ID} queue=\d offset=\d+$", line) for line in sent)
    assert received == [f"message {i}" for i in range(4)]
    assert any(re.match(r"lite pull read [1-4] of this run's messages from", s) for s in out)
    assert out[-1] == "received 4/4 messages"
