"""The plain ACL's admin requests against a real ``pyrmq serve --acl``: accounts created,
changed and deleted, the global white list replaced, the file's version and accounts read,
by :class:`~pyrmq.client.admin.Admin` and by ``pyrmq admin``; refusals of bad input and of
non-admin accounts; and what a broker without ACL answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from tests.compat.servers import ServerProcess, serving

from pyrmq.acl import Credentials
from pyrmq.cli.main import main
from pyrmq.client.admin import Admin
from pyrmq.errors import BrokerError
from pyrmq.remoting.client import RemotingClient
from pyrmq.remoting.command import RemotingCommand
from pyrmq.remoting.protocol import RequestCode, ResponseCode

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PLAIN = """\
accounts:
  - accessKey: adminuser
    secretKey: admin-secret
    admin: true
  - accessKey: reader01
    secretKey: reader-secret
    defaultTopicPerm: SUB
"""
ADMIN = Credentials("adminuser", "admin-secret")
READER = Credentials("reader01", "reader-secret")
TESTER = Credentials("tester01", "tester-secret")


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """A ``pyrmq serve --acl`` with topics TopicPub and TopicDeny: (name server, broker, the
    ACL file)."""
    root = tmp_path_factory.mktemp("acl")
    acl = root / "plain_acl.yml"
    acl.write_text(PLAIN)
    with serving(root, "--acl", str(acl)) as proc:
        namesrv, broker = proc.addresses()[:2]

        async def topics() -> None:
            async with Admin(namesrv, credentials=ADMIN) as admin:
                for topic in ("TopicPub", "TopicDeny"):
                    await admin.create_topic(topic, queue_nums=1, broker_addr=broker)

        asyncio.run(topics())
        yield namesrv, broker, acl


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("no-acl")) as proc:
        yield proc


def call(
    addr: str,
    code: int,
    ext: dict[str, str] | None = None,
    credentials: Credentials | None = None,
    body: bytes = b"",
) -> RemotingCommand:
    """One request on a fresh connection, signed with ``credentials`` when given."""

    async def run() -> RemotingCommand:
        client = RemotingClient(credentials=credentials)
        try:
            return await client.invoke(addr, RemotingCommand.request(code, ext, body), 5.0)
        finally:
            await client.close()

    return asyncio.run(run())


def send(broker: str, topic: str, credentials: Credentials | None) -> RemotingCommand:
    ext = {
        "producerGroup": "PG_ACL",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "1",
        "queueId": "0",
        "sysFlag": "0",
        "bornTimestamp": "0",
        "flag": "0",
        "properties": "",
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    return call(broker, RequestCode.SEND_MESSAGE, ext, credentials, b"hello")


def cli(*args: str, credentials: Credentials | None = ADMIN) -> Result:
    keys = []
    if credentials is not None:
        keys = ["--access-key", credentials.access_key, "--secret-key", credentials.secret_key]
    return CliRunner().invoke(main, ["admin", *keys, *args])


def accounts(acl: Path) -> dict[str, dict[str, Any]]:
    return {a["accessKey"]: a for a in yaml.safe_load(acl.read_text())["accounts"]}


def with_admin(namesrv: str, question: Any, credentials: Credentials = ADMIN) -> Any:
    async def run() -> Any:
        async with Admin(namesrv, credentials=credentials) as admin:
            return await question(admin)

    return asyncio.run(run())


def test_an_account_created_by_the_cli_sends_where_it_may_until_deleted(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, acl = acl_server
    refused = send(broker, "TopicPub", TESTER)
    assert refused.code == ResponseCode.NO_PERMISSION
    assert "No acl config for tester01" in (refused.remark or "")

    result = cli(
        *("update-acl-config", "-n", namesrv, "-b", broker),
        *("-a", "tester01", "-s", "tester-secret", "-i", "SUB", "-u", "SUB"),
        *("-t", "TopicPub=PUB,TopicDeny=DENY", "-g", "PG_ACL=SUB"),
    )
    assert result.exit_code == 0, result.output
    assert f"create or update plain access config to {broker} success." in result.output
    written = accounts(acl)["tester01"]
    assert written["topicPerms"] == ["TopicPub=PUB", "TopicDeny=DENY"]
    assert written["admin"] is False
    assert written["defaultTopicPerm"] == "SUB"

    # At once: the broker uses what it wrote without waiting to read the file again.
    sent = send(broker, "TopicPub", TESTER)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    denied = send(broker, "TopicDeny", TESTER)
    assert denied.code == ResponseCode.NO_PERMISSION
    assert "No PUB permission for topic TopicDeny" in (denied.remark or "")
    # A wrong secret is still refused.
    forged = send(broker, "TopicPub", Credentials("tester01", "not-the-secret"))
    assert forged.code == ResponseCode.NO_PERMISSION

    # Changed: a field not given keeps what it was, a given one replaces it.
    result = cli(
        *("update-acl-config", "-n", namesrv, "-b", broker),
        *("-a", "tester01", "-s", "tester-secret", "-t", "TopicDeny=PUB"),
    )
    assert result.exit_code == 0, result.output
    assert accounts(acl)["tester01"]["defaultTopicPerm"] == "SUB"
    assert send(broker, "TopicDeny", TESTER).code == ResponseCode.SUCCESS

    result = cli("delete-acl-config", "-n", namesrv, "-b", broker, "-a", "tester01")
    assert result.exit_code == 0, result.output
    assert f"delete plain access config account from {broker} success." in result.output
    assert "tester01" not in accounts(acl)
    gone = send(broker, "TopicPub", TESTER)
    assert gone.code == ResponseCode.NO_PERMISSION
    assert "No acl config for tester01" in (gone.remark or "")


def test_an_account_made_admin_may_then_change_accounts(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, acl = acl_server

    async def scenario(admin: Admin) -> None:
        await admin.update_acl_config("admin002", "admin2-secret", admin=True, broker_addr=broker)

    with_admin(namesrv, scenario)
    second = Credentials("admin002", "admin2-secret")

    async def as_second(admin: Admin) -> None:
        await admin.update_acl_config("tester02", "tester2-secret", cluster="DefaultCluster")
        await admin.delete_acl_config("tester02", broker_addr=broker)
        await admin.delete_acl_config("admin002", broker_addr=broker)

    with_admin(namesrv, as_second, second)
    assert not {"tester02", "admin002"} & set(accounts(acl))


def test_a_non_admin_account_may_not_change_or_read_accounts(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, acl = acl_server
    before = acl.read_bytes()
    result = cli(
        *("update-acl-config", "-n", namesrv, "-b", broker),
        *("-a", "reader01", "-s", "reader-secret", "-m", "true"),
        credentials=READER,
    )
    assert result.exit_code != 0
    assert "reader01 is not an admin" in result.output
    for code, ext in [
        (RequestCode.DELETE_ACL_CONFIG, {"accessKey": "adminuser"}),
        (RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "*"}),
        (RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}),
        (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}),
    ]:
        answer = call(broker, code, ext, READER)
        assert answer.code == ResponseCode.NO_PERMISSION, code
        assert b"admin-secret" not in answer.body
        # Unsigned: refused as well.
        assert call(broker, code, ext).code == ResponseCode.NO_PERMISSION, code
    assert acl.read_bytes() == before


def test_the_global_white_list_lets_unsigned_clients_of_its_hosts_in(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, acl = acl_server
    assert send(broker, "TopicPub", None).code == ResponseCode.NO_PERMISSION
    try:
        result = cli(
            *("update-global-white-addr", "-n", namesrv, "-c", "DefaultCluster"),
            *("-g", "10.10.103.*,127.0.0.1"),
        )
        assert result.exit_code == 0, result.output
        assert f"update global white remote addresses to {broker} success." in result.output
        written = yaml.safe_load(acl.read_text())
        assert written["globalWhiteRemoteAddresses"] == ["10.10.103.*", "127.0.0.1"]
        assert send(broker, "TopicPub", None).code == ResponseCode.SUCCESS
        assert send(broker, "TopicDeny", None).code == ResponseCode.SUCCESS
    finally:
        result = cli("update-global-white-addr", "-n", namesrv, "-b", broker, "-g", "")
        assert result.exit_code == 0, result.output
    assert yaml.safe_load(acl.read_text())["globalWhiteRemoteAddresses"] == []
    assert send(broker, "TopicPub", None).code == ResponseCode.NO_PERMISSION


def test_get_acl_config_gives_every_account_and_the_white_list(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, _ = acl_server
    configs = with_admin(namesrv, lambda a: a.acl_config(cluster="DefaultCluster"))
    assert list(configs) == [broker]
    by_key = {a.access_key: a for a in configs[broker].accounts}
    assert {"adminuser", "reader01"} <= set(by_key)
    assert by_key["adminuser"].admin is True
    assert by_key["reader01"].admin is False
    assert by_key["reader01"].secret_key == "reader-secret"
    assert by_key["reader01"].default_topic_perm == "SUB"
    assert configs[broker].global_white_addrs == []
    # The body as RocketMQ's GetBrokerClusterAclConfigResponseBody has it.
    raw = json.loads(call(broker, RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}, ADMIN).body)
    assert set(raw) == {"globalWhiteAddrs", "plainAccessConfigs"}
    reader = next(c for c in raw["plainAccessConfigs"] if c["accessKey"] == "reader01")
    assert reader == {
        "accessKey": "reader01",
        "admin": False,
        "defaultTopicPerm": "SUB",
        "secretKey": "reader-secret",
    }

    result = cli("get-acl-config", "-n", namesrv, "-b", broker)
    assert result.exit_code == 0, result.output
    assert f"============{broker}============" in result.output
    assert "  accessKey         : reader01" in result.output
    assert "  defaultTopicPerm  : SUB" in result.output


def test_the_acl_version_counts_each_change(acl_server: tuple[str, str, Path]) -> None:
    namesrv, broker, acl = acl_server
    [before] = with_admin(namesrv, lambda a: a.acl_versions(broker_addr=broker))
    assert (before.cluster_name, before.broker_name, before.broker_addr) == (
        "DefaultCluster",
        "broker-a",
        broker,
    )
    assert list(before.file_versions) == [str(acl)]

    async def change(admin: Admin) -> None:
        await admin.update_acl_config("tester03", "tester3-secret", broker_addr=broker)
        await admin.delete_acl_config("tester03", broker_addr=broker)

    with_admin(namesrv, change)
    [after] = with_admin(namesrv, lambda a: a.acl_versions(cluster="DefaultCluster"))
    assert after.version.counter == before.version.counter + 2
    assert after.version.timestamp >= before.version.timestamp
    assert after.file_versions[str(acl)] == after.version
    assert yaml.safe_load(acl.read_text())["dataVersion"][0]["counter"] == after.version.counter
    # The header as RocketMQ's GetBrokerAclConfigResponseHeader has it.
    answer = call(broker, RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}, ADMIN)
    assert json.loads(answer.ext_fields["version"]) == {
        "counter": after.version.counter,
        "timestamp": after.version.timestamp,
    }
    assert json.loads(answer.ext_fields["allAclFileVersion"]) == {
        str(acl): json.loads(answer.ext_fields["version"])
    }
    assert answer.ext_fields["clusterName"] == "DefaultCluster"
    assert answer.ext_fields["brokerName"] == "broker-a"
    assert answer.ext_fields["brokerAddr"] == broker

    result = cli("cluster-acl-config-version", "-n", namesrv, "-c", "DefaultCluster")
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split() == [
        "#Cluster",
        "Name",
        "#Broker",
        "Name",
        "#Broker",
        "Addr",
        "#AclFilePath",
        "#AclConfigVersionNum",
        "#AclLastUpdateTime",
    ]
    assert row.split()[:5] == [
        "DefaultCluster",
        "broker-a",
        broker,
        str(acl),
        str(after.version.counter),
    ]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"accessKey": "short", "secretKey": "long-enough"}, "accessKey 'short' is too short"),
        ({"accessKey": "long-enough", "secretKey": "123456"}, "secretKey '123456' is too short"),
        ({"accessKey": "long-enough"}, "secretKey is required"),
        (
            {"accessKey": "long-enough", "secretKey": "long-enough", "topicPerms": "T=PUB,U=RW"},
            "topicPerms: 'U=RW' is not name=PERM",
        ),
        (
            {"accessKey": "long-enough", "secretKey": "long-enough", "groupPerms": "G"},
            "groupPerms: 'G' is not name=PERM",
        ),
        (
            {"accessKey": "long-enough", "secretKey": "long-enough", "defaultTopicPerm": "ALL"},
            "defaultTopicPerm: 'ALL' is not one of",
        ),
        (
            {"accessKey": "long-enough", "secretKey": "long-enough", "whiteRemoteAddress": "1.2"},
            "is not",
        ),
    ],
)
def test_a_bad_account_is_refused_and_changes_nothing(
    acl_server: tuple[str, str, Path], fields: dict[str, str], reason: str
) -> None:
    _, broker, acl = acl_server
    before = acl.read_bytes()
    answer = call(broker, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG, fields, ADMIN)
    assert answer.code == ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED
    assert reason in (answer.remark or "")
    assert acl.read_bytes() == before


def test_bad_deletes_and_white_lists_are_refused_and_change_nothing(
    acl_server: tuple[str, str, Path],
) -> None:
    namesrv, broker, acl = acl_server
    before = acl.read_bytes()
    unknown = call(broker, RequestCode.DELETE_ACL_CONFIG, {"accessKey": "nobody01"}, ADMIN)
    assert unknown.code == ResponseCode.DELETE_ACL_CONFIG_FAILED
    assert "no account with accessKey 'nobody01'" in (unknown.remark or "")
    white = call(
        broker, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG, {"globalWhiteAddrs": "1.2.3"}, ADMIN
    )
    assert white.code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
    assert "1.2.3" in (white.remark or "")
    other = call(
        broker,
        RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
        {"globalWhiteAddrs": "127.0.0.1", "aclFileFullPath": "/etc/other_acl.yml"},
        ADMIN,
    )
    assert other.code == ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED
    assert "reads one ACL file" in (other.remark or "")
    assert acl.read_bytes() == before
    # The CLI says why and fails.
    result = cli("update-acl-config", "-n", namesrv, "-b", broker, "-a", "tester04", "-s", "short")
    assert result.exit_code != 0
    assert "secretKey 'short' is too short" in result.output
    with pytest.raises(BrokerError) as refused:
        with_admin(namesrv, lambda a: a.delete_acl_config("nobody01", broker_addr=broker))
    assert refused.value.code == ResponseCode.DELETE_ACL_CONFIG_FAILED
    assert acl.read_bytes() == before


def test_a_broker_without_acl_refuses_the_acl_requests(plain_server: ServerProcess) -> None:
    namesrv, broker = plain_server.addresses()[:2]
    for code, ext, failed in [
        (
            RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
            {"accessKey": "tester05", "secretKey": "tester5-secret"},
            ResponseCode.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
        ),
        (
            RequestCode.DELETE_ACL_CONFIG,
            {"accessKey": "tester05"},
            ResponseCode.DELETE_ACL_CONFIG_FAILED,
        ),
        (
            RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
            {"globalWhiteAddrs": "127.0.0.1"},
            ResponseCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
        ),
        (RequestCode.GET_BROKER_CLUSTER_ACL_INFO, {}, ResponseCode.SYSTEM_ERROR),
        (RequestCode.GET_BROKER_CLUSTER_ACL_CONFIG, {}, ResponseCode.SYSTEM_ERROR),
    ]:
        answer = call(broker, code, ext)
        assert answer.code == failed, code
        assert "ACL is not enabled" in (answer.remark or ""), code
    result = cli("get-acl-config", "-n", namesrv, "-b", broker, credentials=None)
    assert result.exit_code != 0
    assert "ACL is not enabled" in result.output
