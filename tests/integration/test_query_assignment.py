"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE against a real ``pyrmq serve``: the rebalance a
Java 5.x push consumer built with ``clientRebalance=false`` asks its broker for, with bodies as
``MQClientAPIImpl.queryAssignment`` sends them, and the mode ``pyrmq admin set-consume-mode``
(``mqadmin setConsumeMode``) sets, kept across a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import create_topic, start_serve
from tests.helpers import consumer_heartbeat, pyrmq_admin, remoting_call, run

from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = pytest.mark.integration

TOPIC = "TopicAssigned"
GROUP = "GID_ASSIGNED"
CLIENTS = ("c1", "c2", "c3")


def _query(
    client: RemotingClient,
    broker: str,
    client_id: str,
    *,
    topic: str = TOPIC,
    strategy: str = "AVG",
    model: str = "CLUSTERING",
) -> Any:
    body = {
        "clientId": client_id,
        "consumerGroup": GROUP,
        "messageModel": model,
        "strategyName": strategy,
        "topic": topic,
    }
    return client.invoke(
        broker,
        RemotingCommand.request(RequestCode.QUERY_ASSIGNMENT, {}, json.dumps(body).encode()),
        5.0,
    )


def _assigned(response: RemotingCommand) -> set[tuple[str, int, str]] | None:
    """(broker, queue id, mode) of each assignment; None for an answer without any."""
    assert response.code == ResponseCode.SUCCESS, response.remark
    found = json.loads(response.body).get("messageQueueAssignments")
    if found is None:
        return None
    return {
        (a["messageQueue"]["brokerName"], a["messageQueue"]["queueId"], a["mode"]) for a in found
    }


async def _members(broker: str) -> dict[str, RemotingClient]:
    """One connection per client id, each with its consumer heartbeat sent."""
    clients = {}
    for client_id in CLIENTS:
        client = clients[client_id] = RemotingClient()
        beat = RemotingCommand.request(
            RequestCode.HEART_BEAT, {}, consumer_heartbeat(client_id, GROUP, TOPIC)
        )
        assert (await client.invoke(broker, beat, 5.0)).code == ResponseCode.SUCCESS
    return clients


async def _shares(broker: str, **kwargs: Any) -> dict[str, set[tuple[str, int, str]] | None]:
    clients = await _members(broker)
    try:
        return {c: _assigned(await _query(clients[c], broker, c, **kwargs)) for c in CLIENTS}
    finally:
        for client in clients.values():
            await client.close()


def _pull(*queue_ids: int) -> set[tuple[str, int, str]]:
    return {("broker-a", q, "PULL") for q in queue_ids}


def test_the_broker_shares_a_group_s_queues_and_pop_mode_lasts_across_a_restart(
    tmp_path: Path,
) -> None:
    server = start_serve(tmp_path, "--grpc-port", "-1")
    try:
        namesrv, broker = server.addresses()[:2]
        create_topic(broker, TOPIC, 4)

        async def scenario() -> None:
            assert await _shares(broker) == {"c1": _pull(0, 1), "c2": _pull(2), "c3": _pull(3)}
            by_circle = await _shares(broker, strategy="AVG_BY_CIRCLE")
            assert by_circle == {"c1": _pull(0, 3), "c2": _pull(1), "c3": _pull(2)}
            everyone = await _shares(broker, model="BROADCASTING")
            assert everyone == dict.fromkeys(CLIENTS, _pull(0, 1, 2, 3))
            # A strategy the broker does not have: no answer, the consumer keeps its queues.
            assert await _shares(broker, strategy="CONSISTENT_HASH") == dict.fromkeys(CLIENTS)
            # Nothing routes a topic no one has.
            assert await _shares(broker, topic="NoSuchTopic") == dict.fromkeys(CLIENTS)

        run(scenario)
        out = pyrmq_admin("set-consume-mode", "-n", namesrv, "-t", TOPIC, "-g", GROUP, "-m", "POP")
        assert out.returncode == 0, out.stderr
        assert f"set consume mode to {broker} success." in out.stdout
        # Every member pops the whole broker.
        whole = {("broker-a", -1, "POP")}

        async def popping() -> None:
            assert await _shares(broker) == dict.fromkeys(CLIENTS, whole)

        run(popping)
        # A retry topic is always pulled, and its mode cannot be set.
        body = {"topic": f"%RETRY%{GROUP}", "consumerGroup": GROUP, "mode": "POP"}
        refused = remoting_call(
            broker, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, json.dumps(body).encode()
        )
        assert refused.code == ResponseCode.NO_PERMISSION
        out = pyrmq_admin(
            *("set-consume-mode", "-n", namesrv, "-t", TOPIC, "-g", GROUP, "-m", "POP", "-q", "1")
        )
        assert out.returncode == 0, out.stderr
    finally:
        assert server.stop() == 0
    server = start_serve(tmp_path, "--grpc-port", "-1")
    try:
        broker = server.addresses()[1]

        async def after_restart() -> None:
            # Its own share and the next member's, in pop mode.
            shares = await _shares(broker)
            assert shares == {
                "c1": {("broker-a", q, "POP") for q in (0, 1, 2)},
                "c2": {("broker-a", q, "POP") for q in (2, 3)},
                "c3": {("broker-a", q, "POP") for q in (3, 0, 1)},
            }
            retry = await _shares(broker, topic=f"%RETRY%{GROUP}")
            assert retry == {"c1": _pull(0), "c2": set(), "c3": set()}

        run(after_restart)
    finally:
        assert server.stop() == 0
