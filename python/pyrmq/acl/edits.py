"""What RocketMQ's ACL admin requests change in a ``plain_acl.yml``, as a YAML document (a
dict): an account created or updated (``updateAclConfig``), an account deleted
(``deleteAclConfig``), the global white list replaced (``updateGlobalWhiteAddr``), each change
counted in the file's ``dataVersion``; and the document as RocketMQ's AclConfig JSON
(``getAclConfig``).

The functions here take a document and give a new one; they check what RocketMQ checks and
raise :class:`AclEditError` with the reason. :meth:`pyrmq.acl.plain.AclFile.rewrite` then
checks the whole file still reads, and writes it.

>>> doc = updated_account({}, AccountChange("user0001", "secret01", topic_perms=["T=PUB"]))
>>> doc["accounts"]
[{'accessKey': 'user0001', 'secretKey': 'secret01', 'admin': False, 'topicPerms': ['T=PUB']}]
>>> updated_account(doc, AccountChange("user0001", "secret01", topic_perms=["T=RW"]))
Traceback (most recent call last):
    ...
pyrmq.acl.edits.AclEditError: topicPerms: 'T=RW' is not name=PERM, PERM one of DENY, PUB, SUB, ...
"""

import copy
import dataclasses
from collections.abc import Iterable
from typing import Any

from pyrmq.acl.plain import MIN_KEY_LENGTH, AclError, parse_data_version

__all__ = [
    "PERMISSIONS",
    "AccountChange",
    "AclEditError",
    "acl_config",
    "data_version",
    "next_version",
    "split_list",
    "updated_account",
    "with_global_white",
    "without_account",
]

# As RocketMQ spells them when it writes an account: exact, upper case.
PERMISSIONS = ("DENY", "PUB", "SUB", "PUB|SUB", "SUB|PUB")

ACCOUNTS = "accounts"
GLOBAL_WHITE = "globalWhiteRemoteAddresses"
DATA_VERSION = "dataVersion"


class AclEditError(AclError):
    """An ACL admin request whose change cannot be made."""


@dataclasses.dataclass(frozen=True, slots=True)
class AccountChange:
    """An account as UPDATE_AND_CREATE_ACL_CONFIG gives it. None leaves what the account had;
    ``admin`` is always set, as RocketMQ sets it."""

    access_key: str
    secret_key: str | None
    white_remote_address: str | None = None
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: list[str] | None = None
    group_perms: list[str] | None = None

    def check(self) -> None:
        for name, key in (("accessKey", self.access_key), ("secretKey", self.secret_key)):
            if not key:
                raise AclEditError(f"{name} is required")
            if len(key) < MIN_KEY_LENGTH:
                raise AclEditError(
                    f"{name} {key!r} is too short: it needs {MIN_KEY_LENGTH} characters or more"
                )
        for name, perm in (
            ("defaultTopicPerm", self.default_topic_perm),
            # RocketMQ takes a default it cannot read as DENY; refused here, as the file
            # would no longer read.
            ("defaultGroupPerm", self.default_group_perm),
        ):
            if perm and perm.strip() not in PERMISSIONS:
                raise AclEditError(f"{name}: {perm!r} is not one of {', '.join(PERMISSIONS)}")
        for name, items in (("topicPerms", self.topic_perms), ("groupPerms", self.group_perms)):
            for item in items or ():
                resource, eq, perm = item.partition("=")
                if not eq or not resource.strip() or perm.strip() not in PERMISSIONS:
                    raise AclEditError(
                        f"{name}: {item!r} is not name=PERM, PERM one of {', '.join(PERMISSIONS)}"
                    )

    def merged(self, account: dict[str, Any]) -> dict[str, Any]:
        """``account`` (from the file, possibly empty) with this change made, keys in
        RocketMQ's order for a new account."""
        out = dict(account)
        out["accessKey"] = self.access_key
        if self.secret_key:
            out["secretKey"] = self.secret_key
        if self.white_remote_address is not None:
            out["whiteRemoteAddress"] = self.white_remote_address
        out["admin"] = self.admin
        if self.default_topic_perm:
            out["defaultTopicPerm"] = self.default_topic_perm.strip()
        if self.default_group_perm:
            out["defaultGroupPerm"] = self.default_group_perm.strip()
        if self.topic_perms is not None:
            out["topicPerms"] = list(self.topic_perms)
        if self.group_perms is not None:
            out["groupPerms"] = list(self.group_perms)
        return out


def split_list(text: str | None) -> list[str] | None:
    """A ``,``-joined header value as its items, blank ones left out; None stays None.

    >>> split_list("TopicA=PUB, TopicB=DENY,"), split_list(""), split_list(None)
    (['TopicA=PUB', 'TopicB=DENY'], [], None)
    """
    if text is None:
        return None
    return [item.strip() for item in text.split(",") if item.strip()]


def _accounts(doc: dict[str, Any]) -> list[Any]:
    accounts = doc.get(ACCOUNTS)
    if accounts is None:
        return []
    if not isinstance(accounts, list):
        raise AclEditError(f"{ACCOUNTS} in the ACL file is not a list")
    return accounts


def _key_of(account: Any) -> str | None:
    if isinstance(account, dict) and account.get("accessKey") is not None:
        return str(account["accessKey"])
    return None


def updated_account(doc: dict[str, Any], change: AccountChange) -> dict[str, Any]:
    """``doc`` with ``change``'s account created (at the end) or updated (in its place)."""
    change.check()
    out = copy.deepcopy(doc)
    accounts = _accounts(out)
    for i, account in enumerate(accounts):
        if _key_of(account) == change.access_key:
            accounts[i] = change.merged(account)
            break
    else:
        accounts.append(change.merged({}))
    out[ACCOUNTS] = accounts
    _keep_an_admin(doc, out)
    return out


def _keep_an_admin(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Refuses a change that leaves no admin account where there was one: only admin accounts
    may change the file through the broker, so none could undo it."""

    def admins(doc: dict[str, Any]) -> int:
        return sum(1 for a in _accounts(doc) if isinstance(a, dict) and a.get("admin") is True)

    if admins(before) and not admins(after):
        raise AclEditError(
            "the change would leave no admin account, and only an admin account may change "
            "the ACL (give another account admin first, or set -m true)"
        )


def without_account(doc: dict[str, Any], access_key: str) -> dict[str, Any]:
    """``doc`` without the account of ``access_key``."""
    if not access_key:
        raise AclEditError("no accessKey given")
    out = copy.deepcopy(doc)
    accounts = _accounts(out)
    kept = [a for a in accounts if _key_of(a) != access_key]
    if len(kept) == len(accounts):
        raise AclEditError(f"no account with accessKey {access_key!r}")
    out[ACCOUNTS] = kept
    _keep_an_admin(doc, out)
    return out


def with_global_white(doc: dict[str, Any], patterns: Iterable[str]) -> dict[str, Any]:
    """``doc`` with ``patterns`` as its whole global white list."""
    out = copy.deepcopy(doc)
    out[GLOBAL_WHITE] = [p.strip() for p in patterns if p.strip()]
    return out


def data_version(doc: dict[str, Any]) -> tuple[int, int] | None:
    """The document's ``dataVersion`` as (counter, timestamp ms), if it has one."""
    return parse_data_version(doc.get(DATA_VERSION))


def next_version(doc: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """``doc`` with its ``dataVersion`` counted up and stamped ``now_ms``, as RocketMQ counts
    each change it writes."""
    counter = (data_version(doc) or (0, 0))[0]
    out = dict(doc)
    out[DATA_VERSION] = [{"counter": counter + 1, "timestamp": now_ms}]
    return out


def _strings(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value if v is not None]
    return [str(value)]


def acl_config(doc: dict[str, Any]) -> dict[str, Any]:
    """RocketMQ's AclConfig (the body of GET_BROKER_CLUSTER_ACL_CONFIG): the global white
    list and every account with its secret, fields in name order and absent ones left out, as
    fastjson writes them."""
    configs = []
    seen = set()
    for account in _accounts(doc):
        key = _key_of(account)
        if key is None or key in seen:
            continue
        seen.add(key)
        admin = str(account.get("admin")).strip().lower() == "true"
        config: dict[str, Any] = {"accessKey": key, "admin": admin}
        for name in ("defaultGroupPerm", "defaultTopicPerm"):
            if account.get(name) is not None:
                config[name] = str(account[name])
        if account.get("groupPerms") is not None:
            config["groupPerms"] = _strings(account["groupPerms"])
        if account.get("secretKey") is not None:
            config["secretKey"] = str(account["secretKey"])
        if account.get("topicPerms") is not None:
            config["topicPerms"] = _strings(account["topicPerms"])
        if account.get("whiteRemoteAddress") is not None:
            config["whiteRemoteAddress"] = str(account["whiteRemoteAddress"])
        configs.append(config)
    return {"globalWhiteAddrs": _strings(doc.get(GLOBAL_WHITE)), "plainAccessConfigs": configs}
