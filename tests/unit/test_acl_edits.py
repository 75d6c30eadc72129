"""Changes the ACL admin requests make to a ``plain_acl.yml``: what an update keeps, what
RocketMQ's AclConfig shows, and how :meth:`AclFile.rewrite` writes (or does not)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from pyrmq.acl.edits import (
    AccountChange,
    AclEditError,
    acl_config,
    next_version,
    updated_account,
    with_global_white,
    without_account,
)
from pyrmq.acl.plain import AclError, AclFile

PLAIN = """\
# operators' notes
globalWhiteRemoteAddresses: [10.0.0.*]
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    whiteRemoteAddress: 192.168.1.*
    defaultTopicPerm: DENY
    topicPerms: [TopicA=PUB]
"""


def test_an_update_keeps_the_fields_it_does_not_give_but_always_sets_admin() -> None:
    doc = yaml.safe_load(PLAIN.replace("DENY", "DENY\n    admin: true"))
    doc["accounts"].append({"accessKey": "rootadmin", "secretKey": "root-secret", "admin": True})
    out = updated_account(doc, AccountChange("producer1", "new-secret", group_perms=["G=SUB"]))
    account, _ = out["accounts"]
    assert account == {
        "accessKey": "producer1",
        "secretKey": "new-secret",
        "whiteRemoteAddress": "192.168.1.*",
        "defaultTopicPerm": "DENY",
        "admin": False,
        "topicPerms": ["TopicA=PUB"],
        "groupPerms": ["G=SUB"],
    }
    # The document given is left alone.
    assert doc["accounts"][0]["secretKey"] == "producer-secret"


@pytest.mark.parametrize("perm", ["pub", "PUB|", "ANY", "RW"])
def test_permissions_are_refused_unless_spelled_as_rocketmq_writes_them(perm: str) -> None:
    with pytest.raises(AclEditError, match="defaultGroupPerm"):
        AccountChange("producer1", "producer-secret", default_group_perm=perm).check()
    with pytest.raises(AclEditError, match="topicPerms"):
        AccountChange("producer1", "producer-secret", topic_perms=[f"T={perm}"]).check()


def test_the_data_version_counts_changes() -> None:
    doc = next_version(next_version({}, 5), 9)
    assert doc["dataVersion"] == [{"counter": 2, "timestamp": 9}]


def test_acl_config_as_fastjson_writes_it() -> None:
    config = acl_config(yaml.safe_load(PLAIN))
    assert config == {
        "globalWhiteAddrs": ["10.0.0.*"],
        "plainAccessConfigs": [
            {
                "accessKey": "producer1",
                "admin": False,
                "defaultTopicPerm": "DENY",
                "secretKey": "producer-secret",
                "topicPerms": ["TopicA=PUB"],
                "whiteRemoteAddress": "192.168.1.*",
            }
        ],
    }


def test_a_rewrite_is_used_at_once_and_keeps_the_file_private(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    os.chmod(path, 0o640)
    acl = AclFile(path)
    assert acl.version()[0] == 0
    acl.rewrite(lambda doc: next_version(with_global_white(doc, ["127.0.0.1"]), 42))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert yaml.safe_load(path.read_text())["globalWhiteRemoteAddresses"] == ["127.0.0.1"]
    assert acl.version() == (1, 42)
    # Nothing to read again: the broker already uses it.
    assert not acl.poll()
    assert not acl.poll()
    assert [p.name for p in tmp_path.iterdir()] == ["plain_acl.yml"]


def test_a_rewrite_that_would_not_read_leaves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "plain_acl.yml"
    path.write_text(PLAIN)
    acl = AclFile(path)
    with pytest.raises(AclError, match=r"1\.2\.3"):
        acl.rewrite(lambda doc: with_global_white(doc, ["1.2.3"]))
    with pytest.raises(AclEditError):
        acl.rewrite(lambda doc: updated_account(doc, AccountChange("short", "short")))
    assert path.read_text() == PLAIN
    assert [p.name for p in tmp_path.iterdir()] == ["plain_acl.yml"]


def test_no_change_leaves_the_acl_without_an_admin_account() -> None:
    """Only admin accounts may change the ACL through a broker: demoting or deleting the last
    one would lock every operator out."""
    doc = {
        "accounts": [
            {"accessKey": "adminuser", "secretKey": "admin-secret", "admin": True},
            {"accessKey": "producer1", "secretKey": "secret-p1", "admin": False},
        ]
    }
    demote = AccountChange(access_key="adminuser", secret_key="admin-secret", admin=False)
    with pytest.raises(AclEditError, match="no admin account"):
        updated_account(doc, demote)
    with pytest.raises(AclEditError, match="no admin account"):
        without_account(doc, "adminuser")
    promoted = updated_account(
        doc, AccountChange(access_key="producer1", secret_key="secret-p1", admin=True)
    )
    assert [a["admin"] for a in updated_account(promoted, demote)["accounts"]] == [False, True]
    assert [a["accessKey"] for a in without_account(doc, "producer1")["accounts"]] == ["adminuser"]
