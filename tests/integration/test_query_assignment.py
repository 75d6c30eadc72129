"""QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE against a real ``pyrmq serve``: the rebalance a
Java 5.x push consumer built with ``clientRebalance=false`` asks its broker for, with bodies as
``MQClientAPIImpl.queryAssignment`` sends them, and the mode ``pyrmq admin set-consume-mode``
(``mqadmin setConsumeMode``) sets, kept across a restart."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tests.compat.servers import (
    BROKER_HA,
    Cluster,
    ServerProcess,
    create_topic,
    start_broker,
    start_serve,
)
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


def run_value(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(scenario(), 60))


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
            # A client without an id: nothing to share with it.
            client = RemotingClient()
            try:
                assert _assigned(await _query(client, broker, " ")) is None
            finally:
                await client.close()

        run(scenario)
        out = pyrmq_admin("set-consume-mode", "-n", namesrv, "-t", TOPIC, "-g", GROUP, "-m", "POP")
        assert out.returncode == 0, out.stderr
        assert f"set consume mode to {broker} success." in out.stdout
        # Every member pops the whole broker.
        whole = {("broker-a", -1, "POP")}

        async def popping() -> None:
            assert await _shares(broker) == dict.fromkeys(CLIENTS, whole)

        run(popping)
        # A topic no queue of which is readable (made write-only for a while): the members
        # keep what they have, in either mode.
        create_topic(broker, "TopicWriteOnly", 4, perm=2)
        for mode in ("PULL", "POP"):
            out = pyrmq_admin(
                *("set-consume-mode", "-n", namesrv, "-t", "TopicWriteOnly", "-g", GROUP),
                *("-m", mode, "-q", "1"),
            )
            assert out.returncode == 0, out.stderr

            async def write_only() -> None:
                assert await _shares(broker, topic="TopicWriteOnly") == dict.fromkeys(CLIENTS)

            run(write_only)
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


def test_two_brokers_share_alike_and_keep_the_route_when_the_name_server_is_gone(
    tmp_path: Path,
) -> None:
    namesrv_proc = ServerProcess(["namesrv", "--port", "0"], tmp_path / "namesrv.log")
    brokers: dict[str, ServerProcess] = {}
    try:
        namesrv = namesrv_proc.addresses()[0]
        for name in ("broker-a", "broker-b"):
            brokers[name] = start_broker(namesrv, tmp_path, name)
        addrs = {name: proc.addresses()[-1] for name, proc in brokers.items()}
        for addr in addrs.values():
            create_topic(addr, TOPIC, 4)
        deadline = time.monotonic() + 20
        while True:
            route = remoting_call(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
            if (
                route.code == ResponseCode.SUCCESS
                and len(json.loads(route.body)["queueDatas"]) == 2
            ):
                break
            assert time.monotonic() < deadline, "both brokers routed"
            time.sleep(0.2)

        async def shares_from_each() -> dict[str, dict[str, Any]]:
            members = [await _members(addr) for addr in addrs.values()]
            try:
                return {
                    name: {c: _assigned(await _query(m[c], addr, c)) for c in CLIENTS}
                    for m, (name, addr) in zip(members, addrs.items(), strict=True)
                }
            finally:
                for m in members:
                    for client in m.values():
                        await client.close()

        # AVG over 8 queues of 2 brokers and 3 members.
        expected = {
            "c1": {("broker-a", 0, "PULL"), ("broker-a", 1, "PULL"), ("broker-a", 2, "PULL")},
            "c2": {("broker-a", 3, "PULL"), ("broker-b", 0, "PULL"), ("broker-b", 1, "PULL")},
            "c3": {("broker-b", 2, "PULL"), ("broker-b", 3, "PULL")},
        }
        # Whichever broker a member asks, the shares cover both brokers' queues alike.
        assert run_value(shares_from_each) == dict.fromkeys(addrs, expected)
        namesrv_proc.kill()
        # The name server gone, each broker keeps the route it had.
        assert run_value(shares_from_each) == dict.fromkeys(addrs, expected)
    finally:
        for proc in brokers.values():
            proc.kill()
        namesrv_proc.kill()


def test_a_slave_copies_its_master_s_request_modes(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        master = cluster.start("m", "ASYNC_MASTER")
        create_topic(master, TOPIC, 4)
        body = {"topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 0}
        answer = remoting_call(
            master, RequestCode.SET_MESSAGE_REQUEST_MODE, {}, json.dumps(body).encode()
        )
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        slave = cluster.start("s", "SLAVE")
        deadline = time.monotonic() + 25
        while True:
            copied = remoting_call(slave, RequestCode.GET_ALL_MESSAGE_REQUEST_MODE, {})
            modes = json.loads(copied.body or b"{}").get("messageRequestModeMap") or {}
            if GROUP in modes.get(TOPIC, {}):
                break
            assert time.monotonic() < deadline, "the slave copied the modes"
            time.sleep(0.3)
        assert modes[TOPIC][GROUP]["mode"] == "POP"

        async def from_slave() -> None:
            # With the master away, a member asking the slave still pops.
            shares = await _shares(slave)
            assert shares == {key: {(BROKER_HA, -1, "POP")} for key in CLIENTS}

        run(from_slave)
