"""``pyrmq admin`` against a cluster where one broker of two fails: every broker is asked
whatever the others answer, and the caller learns which ones did what was asked and which
failed and why (:class:`~pyrmq.errors.PartialFailureError`; on the command line, a line per
broker and exit status 1).

The cluster: ``pyrmq serve --acl`` (a name server and broker-a, with ACL) and broker-0, a
broker of its own without ACL. broker-0 comes first in the cluster's order, so that a loop that
stopped at the first failure would leave broker-a unchanged. It refuses every ACL request; to
fail the others it is stopped (SIGSTOP) and does not answer within the admin's timeout.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner, Result
from tests.compat.servers import ServerProcess, serving, start_broker

from pyrmq.acl import Credentials
from pyrmq.cli.main import main
from pyrmq.client.admin import Admin
from pyrmq.client.instance import ClientConfig
from pyrmq.client.message import Message
from pyrmq.client.producer import Producer
from pyrmq.errors import BrokerError, PartialFailureError, RemotingError

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ADMIN = Credentials("adminuser", "admin-secret")
PLAIN = """\
accounts:
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
"""
TIMEOUT_S = 0.5
"""The admin's wait for the stopped broker: short, so that its failure comes quickly."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, ServerProcess]]:
    """(name server, broker-a's address, broker-0's process), both brokers registered."""
    root = tmp_path_factory.mktemp("partial")
    acl = root / "plain_acl.yml"
    acl.write_text(PLAIN)
    (root / "a").mkdir()
    with serving(root / "a", "--acl", str(acl)) as first:
        namesrv, broker_a = first.addresses()[:2]
        second = start_broker(namesrv, root, "broker-0")
        try:
            asyncio.run(_registered(namesrv, 2))
            yield namesrv, broker_a, second
        finally:
            second.proc.send_signal(signal.SIGCONT)
            assert second.stop() == 0


async def _registered(namesrv: str, brokers: int) -> None:
    async with Admin(namesrv, credentials=ADMIN) as admin:
        for _ in range(100):
            if len(await admin.masters()) == brokers:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"{brokers} brokers never registered")


@contextmanager
def stopped(proc: ServerProcess) -> Iterator[None]:
    """The process stopped: its connections stay open, but it answers nothing."""
    proc.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.proc.send_signal(signal.SIGCONT)


def cli(*args: str) -> Result:
    keys = ["--access-key", ADMIN.access_key, "--secret-key", ADMIN.secret_key]
    return CliRunner().invoke(main, ["admin", *keys, *args])


def broker_0(proc: ServerProcess) -> str:
    return proc.addresses()[-1]


def test_an_acl_change_reaches_the_broker_that_takes_it_and_names_the_one_that_refused(
    cluster: tuple[str, str, ServerProcess],
) -> None:
    namesrv, broker_a, second = cluster
    refusing = broker_0(second)

    result = cli("update-acl-config", "-n", namesrv, "-a", "partial01", "-s", "partial-secret")

    assert result.exit_code == 1, result.output
    assert result.stdout == f"create or update plain access config to {broker_a} success.\n"
    (failure,) = result.stderr.splitlines()
    assert failure.startswith(f"Error: {refusing} failed: broker {refusing} answered code")
    assert "ACL is not enabled" in failure

    async def accounts() -> list[str]:
        async with Admin(namesrv, credentials=ADMIN) as admin:
            config = (await admin.acl_config(broker_addr=broker_a))[broker_a]
        return [a.access_key for a in config.accounts]

    assert "partial01" in asyncio.run(accounts())


def test_a_topic_is_created_on_the_brokers_that_answer_and_the_error_names_the_others(
    cluster: tuple[str, str, ServerProcess],
) -> None:
    namesrv, broker_a, second = cluster
    silent = broker_0(second)
    topic = "TopicPartialCreate"

    async def scenario() -> None:
        async with Admin(namesrv, credentials=ADMIN, timeout_s=TIMEOUT_S) as admin:
            with stopped(second):
                with pytest.raises(PartialFailureError) as created:
                    await admin.create_topic(topic, queue_nums=2)
                # One broker asked: its own failure, as before.
                with pytest.raises(RemotingError):
                    await admin.create_topic(topic, broker_addr=silent)
                with pytest.raises(PartialFailureError) as deleted:
                    await admin.delete_topic("TopicPartialNone")
            assert topic in await admin.topic_configs(broker_a)

        e = created.value
        assert (e.succeeded, list(e.failed), e.result) == ((broker_a,), [silent], [broker_a])
        assert isinstance(e.failed[silent], TimeoutError)
        assert f"{silent}: no answer from {silent}" in str(e)
        assert str(e).endswith(f"succeeded on {broker_a}")
        # The name server too, after the brokers, whatever they answered.
        d = deleted.value
        assert (d.succeeded, list(d.failed), d.result) == (
            (broker_a, namesrv),
            [silent],
            [broker_a],
        )

    asyncio.run(scenario())


def test_a_read_of_several_brokers_keeps_the_answers_of_those_that_gave_one(
    cluster: tuple[str, str, ServerProcess],
) -> None:
    namesrv, broker_a, second = cluster
    refusing = broker_0(second)

    async def scenario() -> None:
        async with Admin(namesrv, credentials=ADMIN) as admin:
            with pytest.raises(PartialFailureError) as read:
                await admin.acl_config()
        e = read.value
        assert isinstance(e.result, dict)
        assert list(e.result) == [broker_a]
        assert "adminuser" in [a.access_key for a in e.result[broker_a].accounts]
        assert isinstance(e.failed[refusing], BrokerError)

    asyncio.run(scenario())

    shown = cli("get-acl-config", "-n", namesrv)
    assert shown.exit_code == 1, shown.output
    assert shown.stdout.startswith(f"============{broker_a}============\n")
    assert "adminuser" in shown.stdout
    assert refusing not in shown.stdout
    (failure,) = shown.stderr.splitlines()
    assert failure.startswith(f"Error: {refusing} failed: ")


def test_a_key_query_keeps_what_the_brokers_that_answered_found(
    cluster: tuple[str, str, ServerProcess],
) -> None:
    namesrv, broker_a, second = cluster
    silent = broker_0(second)
    topic = "TopicPartialQuery"

    async def scenario() -> None:
        async with Admin(namesrv, credentials=ADMIN, timeout_s=TIMEOUT_S) as admin:
            await admin.create_topic(topic, queue_nums=1)
            config = ClientConfig(namesrv_addr=namesrv, credentials=ADMIN)
            async with Producer("PG_PARTIAL", client_config=config) as producer:
                for _ in range(2):  # one on each broker, the first on broker-0
                    await producer.send(Message(topic, b"keyed", keys="order-7"))
            with stopped(second):
                with pytest.raises(PartialFailureError) as queried:
                    await admin.query_message(topic, "order-7")
                with pytest.raises(PartialFailureError) as connected:
                    await admin.producer_connection("PG_PARTIAL", topic)
        e = queried.value
        assert list(e.failed) == [silent]
        assert [(m.body, m.keys, m.broker_name) for m in e.result] == [
            (b"keyed", "order-7", "broker-a")
        ]
        # The producer has shut down: broker-a knows no connection of its group any more.
        c = connected.value
        assert (c.succeeded, list(c.failed), c.result) == ((broker_a,), [silent], [])

    asyncio.run(scenario())
