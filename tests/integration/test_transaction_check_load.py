"""Thousands of open halves against a real ``pyrmq serve``: the broker's check rounds leave
its event loop free for sends and pulls, and still reach every half."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.compat.servers import create_topic, serving
from tests.helpers import child_env, fast_config

from pyrmq.client.aio import Message, MessageExt, TransactionProducer, TransactionState
from pyrmq.client.api import ClientAPI
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.headers import PullMessageRequestHeader

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

# As many as held up a broker whose rounds walked every open half without a break.
HALVES = 20_000
TOPIC = "TopicTxMany"
PROBE_TOPIC = "TopicTxProbe"
# One send and pull of the probe: generous, as a loop held by a round stalls for seconds.
PROBE_LIMIT_S = 1.0
PROBE = Path(__file__).with_name("send_pull_probe.py")


def _refuse(half: MessageExt) -> TransactionState:
    raise AssertionError(f"no check expected yet, got one for {half.id}")


async def _send_halves(namesrv: str) -> dict[str, bytes]:
    """Sends the halves (none ended); returns their producer ids and bodies."""
    config = fast_config(namesrv, instance_name="sender")
    sent: dict[str, bytes] = {}
    async with TransactionProducer("PG_TXMANY", checker=_refuse, client_config=config) as p:
        for start in range(0, HALVES, 200):
            bodies = [f"half-{i}".encode() for i in range(start, min(start + 200, HALVES))]
            results = await asyncio.gather(*(p.send_half(Message(TOPIC, b)) for b in bodies))
            sent.update(
                (result.msg_id, body) for (result, _), body in zip(results, bodies, strict=True)
            )
    return sent


async def _read_all(api: ClientAPI, broker: str, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    offset = 0
    while True:
        header = PullMessageRequestHeader.immediate("CG_TEST_INSPECT", topic, 0, offset)
        try:
            result = await api.pull(broker, "broker-a", header, 5.0)
        except BrokerError:
            return out
        if not result.messages:
            return out
        out += result.messages
        offset = result.next_begin_offset


async def _check_all(namesrv: str, broker: str) -> tuple[dict[str, float], list[MessageExt]]:
    """Connects a producer of the halves' group whose checker commits every half; returns
    when (epoch seconds) each half was first checked, and what the halves' topic holds once
    every half is delivered and no check comes any more."""
    first_checked: dict[str, float] = {}
    topics: set[str] = set()
    answers = 0

    def checker(half: MessageExt) -> TransactionState:
        nonlocal answers
        answers += 1
        first_checked.setdefault(half.id, time.time())
        topics.add(half.topic)
        return TransactionState.COMMIT

    remoting = RemotingClient()
    api = ClientAPI(remoting)
    config = fast_config(namesrv, instance_name="checker")
    try:
        async with TransactionProducer("PG_TXMANY", checker=checker, client_config=config):
            deadline = time.monotonic() + 120
            while len(delivered := await _read_all(api, broker, TOPIC)) < HALVES:
                assert time.monotonic() < deadline, (
                    f"{len(first_checked)} of {HALVES} checked, {len(delivered)} delivered"
                )
                await asyncio.sleep(0.5)
            # Checks would come again if any half were left open.
            await asyncio.sleep(1.0)
            seen = answers
            await asyncio.sleep(1.0)
            assert answers == seen
            assert topics == {TOPIC}
        return first_checked, await _read_all(api, broker, TOPIC)
    finally:
        await remoting.close()


def test_many_open_halves_are_all_checked_while_sends_and_pulls_are_served(
    tmp_path: Path,
) -> None:
    # First the halves, with a timeout no round reaches; then a broker restarted with a short
    # one finds every half due at once, as after an outage.
    quiet = tmp_path / "quiet.conf"
    quiet.write_text("transactionTimeOut=3600000\n")
    with serving(tmp_path, "-c", str(quiet)) as server:
        namesrv, broker = server.addresses()
        create_topic(broker, TOPIC, 1)
        create_topic(broker, PROBE_TOPIC, 1)
        sent = asyncio.run(asyncio.wait_for(_send_halves(namesrv), 120))
    assert len(sent) == HALVES

    conf = tmp_path / "broker.conf"
    # Until the checker connects, rounds count with no producer to ask: a check count no test
    # run reaches keeps the halves open for it.
    conf.write_text(
        "transactionTimeOut=100\ntransactionCheckInterval=200\ntransactionCheckMax=100000\n"
    )
    with serving(tmp_path, "-c", str(conf)) as server:
        namesrv, broker = server.addresses()
        # Timed from a process of its own: this one's loop is busy answering checks.
        probe = subprocess.Popen(
            [sys.executable, str(PROBE), broker, PROBE_TOPIC],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env(),
        )
        try:
            assert probe.stdout is not None
            assert probe.stdout.readline() == b"ready\n"
            first_checked, delivered = asyncio.run(
                asyncio.wait_for(_check_all(namesrv, broker), 240)
            )
        finally:
            out, _ = probe.communicate(timeout=60)
        assert probe.returncode == 0
    timings: list[list[float]] = json.loads(out)

    assert set(first_checked) == set(sent)
    ids = [m.id for m in delivered]
    assert len(ids) == len(set(ids)) == HALVES, "a half delivered twice, or not at all"
    assert {m.id: m.body for m in delivered} == sent
    # The probe ran while the halves were checked, and no answer waited behind a round.
    checking_from, checking_to = min(first_checked.values()), max(first_checked.values())
    during = [s for began, s in timings if checking_from <= began <= checking_to]
    assert len(during) >= 3, (checking_to - checking_from, len(timings))
    slow = [round(s, 3) for _, s in timings if s >= PROBE_LIMIT_S]
    assert not slow, f"sends and pulls that waited behind a check round: {slow}"
