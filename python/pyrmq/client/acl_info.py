"""What brokers answer about their plain ACL: the data version of their ACL file
(GET_BROKER_CLUSTER_ACL_INFO, ``mqadmin clusterAclConfigVersion``) and its accounts and global
white list (GET_BROKER_CLUSTER_ACL_CONFIG, ``mqadmin getAclConfig``).

>>> AclConfig.parse({"globalWhiteAddrs": ["10.0.0.*"], "plainAccessConfigs": [
...     {"accessKey": "user0001", "admin": False, "secretKey": "secret01",
...      "topicPerms": ["TopicA=PUB"]}]}).accounts[0].topic_perms
['TopicA=PUB']
"""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from pyrmq.remoting.headers import GetBrokerAclConfigResponseHeader

__all__ = ["AclConfig", "BrokerAclVersion", "DataVersion", "PlainAccessConfig"]


@dataclasses.dataclass(frozen=True, slots=True)
class DataVersion:
    """How many changes an ACL file has had through the admin requests, and when the last
    was made (ms)."""

    counter: int
    timestamp: int

    @classmethod
    def parse(cls, raw: Any) -> "DataVersion":
        if isinstance(raw, str):
            raw = json.loads(raw)
        if not isinstance(raw, Mapping):
            raise TypeError(f"not a DataVersion: {raw!r}")
        return cls(int(raw.get("counter", 0)), int(raw.get("timestamp", 0)))


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerAclVersion:
    """One broker's answer to GET_BROKER_CLUSTER_ACL_INFO."""

    cluster_name: str
    broker_name: str
    broker_addr: str
    version: DataVersion
    file_versions: dict[str, DataVersion]
    """Each ACL file the broker reads, by path."""

    @classmethod
    def parse(cls, header: GetBrokerAclConfigResponseHeader) -> "BrokerAclVersion":
        files = json.loads(header.all_acl_file_version) if header.all_acl_file_version else {}
        return cls(
            cluster_name=header.cluster_name,
            broker_name=header.broker_name,
            broker_addr=header.broker_addr,
            version=DataVersion.parse(header.version),
            file_versions={str(path): DataVersion.parse(v) for path, v in files.items()},
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PlainAccessConfig:
    """An account as RocketMQ's PlainAccessConfig gives it: permissions as written in the
    file (``PUB|SUB``, ``TopicA=DENY``)."""

    access_key: str
    secret_key: str | None = None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "PlainAccessConfig":
        def strings(value: Any) -> list[str] | None:
            return None if value is None else [str(v) for v in value]

        return cls(
            access_key=str(raw.get("accessKey", "")),
            secret_key=raw.get("secretKey"),
            white_remote_address=raw.get("whiteRemoteAddress"),
            admin=bool(raw.get("admin", False)),
            default_topic_perm=raw.get("defaultTopicPerm"),
            default_group_perm=raw.get("defaultGroupPerm"),
            topic_perms=strings(raw.get("topicPerms")),
            group_perms=strings(raw.get("groupPerms")),
        )

    def fields(self) -> dict[str, object]:
        """The account under RocketMQ's field names, in the order ``getAclConfig`` prints
        them."""
        return {
            "accessKey": self.access_key,
            "secretKey": self.secret_key,
            "whiteRemoteAddress": self.white_remote_address,
            "admin": self.admin,
            "defaultTopicPerm": self.default_topic_perm,
            "defaultGroupPerm": self.default_group_perm,
            "topicPerms": self.topic_perms,
            "groupPerms": self.group_perms,
        }


@dataclasses.dataclass(frozen=True, slots=True)
class AclConfig:
    """A broker's global white list and accounts (RocketMQ's AclConfig)."""

    global_white_addrs: list[str]
    accounts: list[PlainAccessConfig]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> "AclConfig":
        return cls(
            global_white_addrs=[str(a) for a in raw.get("globalWhiteAddrs") or []],
            accounts=[PlainAccessConfig.parse(a) for a in raw.get("plainAccessConfigs") or []],
        )
