"""Accounts and permissions from RocketMQ's ``plain_acl.yml``, and the check a request passes.

A request passes when its client's host is on the global white list, or when it names an
account (``AccessKey``) and either comes from that account's white remote address or carries
a valid signature and the permissions it needs. Topics and groups not listed under an
account's ``topicPerms``/``groupPerms`` take its ``defaultTopicPerm``/``defaultGroupPerm``
(DENY when absent). Administrative requests need ``admin: true``, and an admin account may do
anything.
"""

import contextlib
import dataclasses
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from pyrmq.acl.addresses import AddressPatternError, address_matcher
from pyrmq.errors import PyrmqError

__all__ = [
    "AccessRequest",
    "Account",
    "AclError",
    "AclFile",
    "ForbiddenError",
    "NotAuthenticatedError",
    "Permission",
    "PlainAcl",
    "allows",
    "parse_data_version",
]

log = logging.getLogger(__name__)

RETRY_PREFIX = "%RETRY%"
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# How often the owner of an AclFile looks for changes.
POLL_INTERVAL_S = 0.25
# RocketMQ refuses keys of six characters or fewer.
MIN_KEY_LENGTH = 7


class AclError(PyrmqError):
    """A request refused by the ACL, or a ``plain_acl.yml`` that cannot be used."""


class NotAuthenticatedError(AclError):
    """The request names no account, an unknown one, or carries a wrong signature."""


class ForbiddenError(AclError):
    """The account may not do what the request asks."""


class Permission:
    """RocketMQ's permission bits (plain ints: a check runs on every request)."""

    DENY = 1
    ANY = 2
    PUB = 4
    SUB = 8

    @classmethod
    def parse(cls, text: object, where: str) -> int:
        """A permission as RocketMQ spells it; any other spelling (``pub``, ``RW``) denies,
        as in RocketMQ, so a file means here what it means to a RocketMQ broker."""
        spelled = {
            "DENY": cls.DENY,
            "PUB": cls.PUB,
            "SUB": cls.SUB,
            "PUB|SUB": cls.PUB | cls.SUB,
            "SUB|PUB": cls.PUB | cls.SUB,
        }
        if text is None:
            return cls.DENY
        found = spelled.get(str(text).strip())
        if found is None:
            log.warning("%s: %r is not DENY, PUB, SUB or PUB|SUB: it denies", where, text)
            return cls.DENY
        return found


def allows(owned: int, needed: int) -> bool:
    """Whether an account holding ``owned`` may do what needs ``needed``."""
    if owned & Permission.DENY:
        return False
    if needed & Permission.ANY:
        return bool(owned & (Permission.PUB | Permission.SUB))
    return bool(owned & needed)


@dataclasses.dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    white: Callable[[str], bool]
    admin: bool
    default_topic: int
    default_group: int
    topics: Mapping[str, int]
    groups: Mapping[str, int]


@dataclasses.dataclass(slots=True)
class AccessRequest:
    """What a request asks for: who sends it (``host``, ``access_key``), whether its
    signature holds under a secret key, and the topics and groups it needs."""

    host: str
    access_key: str | None
    signed: Callable[[str], bool]
    admin: bool = False
    """An administrative request (creating or deleting topics and groups, broker config)."""
    topics: dict[str, int] = dataclasses.field(default_factory=dict)
    groups: dict[str, int] = dataclasses.field(default_factory=dict)

    def need_topic(self, topic: str | None, permission: int) -> None:
        if topic is None:
            return
        if topic.startswith(RETRY_PREFIX):
            # A group's retry topic is the group's.
            self.need_group(topic[len(RETRY_PREFIX) :], permission)
        else:
            self.topics[topic] = self.topics.get(topic, 0) | permission

    def need_group(self, group: str | None, permission: int) -> None:
        # None named (a producer's unregistration, say): nothing of a group is asked.
        if group:
            self.groups[group] = self.groups.get(group, 0) | permission


class PlainAcl:
    """The accounts and global white list of one ``plain_acl.yml``, and the ``dataVersion``
    RocketMQ counts its admin changes in (counter, timestamp ms), when it has one."""

    def __init__(
        self,
        accounts: Iterable[Account] = (),
        global_white: Iterable[str] = (),
        data_version: tuple[int, int] | None = None,
    ) -> None:
        self.accounts = {a.access_key: a for a in accounts}
        self.data_version = data_version
        try:
            self._global_white = [address_matcher(p) for p in global_white]
        except AddressPatternError as e:
            raise AclError(f"globalWhiteRemoteAddresses: {e}") from None

    @classmethod
    def parse(cls, text: str, source: str = "plain_acl.yml") -> "PlainAcl":
        if not text.strip():
            # Most often a file caught between its truncation and its rewrite.
            raise AclError(f"{source} is empty (deny everyone with accounts: [])")
        try:
            loaded = yaml.load(text, Loader=_LOADER)
        except (yaml.YAMLError, ValueError, TypeError, RecursionError) as e:
            # ValueError: a YAML date that is no date (2023-13-45), among others.
            raise AclError(f"{source} is not YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise AclError(f"{source}: expected a mapping at the top")
        white = _strings(loaded.get("globalWhiteRemoteAddresses"), f"{source}: white list")
        raw_accounts = loaded.get("accounts") or []
        if not isinstance(raw_accounts, list):
            raise AclError(f"{source}: accounts must be a list")
        accounts = []
        for i, raw in enumerate(raw_accounts):
            accounts.append(_account(raw, f"{source}: account {i + 1}"))
        keys = [a.access_key for a in accounts]
        duplicated = sorted({k for k in keys if keys.count(k) > 1})
        if duplicated:
            raise AclError(f"{source}: access keys given twice: {duplicated}")
        return cls(accounts, white, parse_data_version(loaded.get("dataVersion")))

    @classmethod
    def load(cls, path: Path) -> "PlainAcl":
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise AclError(f"cannot read the ACL file {path}: {e}") from None
        try:
            return cls.parse(text, str(path))
        except AclError:
            raise
        except Exception as e:
            # A shape the checks above did not foresee: still the file's fault, said so.
            raise AclError(f"{path}: {type(e).__name__}: {e}") from None

    def check(self, request: AccessRequest) -> None:
        """Raises AclError unless ``request`` may go on."""
        for white in self._global_white:
            if white(request.host):
                return
        key = request.access_key
        if not key:
            raise NotAuthenticatedError("No accessKey is configured")
        account = self.accounts.get(key)
        if account is None:
            raise NotAuthenticatedError(f"No acl config for {key}")
        if account.white(request.host):
            return
        if not request.signed(account.secret_key):
            raise NotAuthenticatedError(f"Check signature failed for accessKey={key}")
        if request.topics.get(TRACE_TOPIC) == Permission.PUB:
            # Message traces go to the trace topic whatever the account's topic permissions.
            return
        if request.admin and not account.admin:
            raise ForbiddenError(
                f"accessKey={key} is not an admin: the request needs admin permission"
            )
        if account.admin:
            # As RocketMQ since 5.1.1: an admin's listed permissions do not narrow it.
            return
        for topic, needed in request.topics.items():
            owned = account.topics.get(topic, account.default_topic)
            if not allows(owned, needed):
                raise ForbiddenError(f"No {_name(needed)} permission for topic {topic} ({key})")
        for group, needed in request.groups.items():
            owned = account.groups.get(group, account.default_group)
            if not allows(owned, needed):
                raise ForbiddenError(f"No {_name(needed)} permission for group {group} ({key})")


class AclFile:
    """A ``plain_acl.yml`` read again when it changes. :meth:`poll` (run every
    ``POLL_INTERVAL_S`` off the event loop by its owner) reads a change once the file has stayed
    the same between two polls, not while it is being written; a change that cannot be used is
    logged and the accounts before it stay."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Held by poll and rewrite, which run off the event loop, so that neither reads the
        # file halfway through the other's change.
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.acl = PlainAcl.load(path)
        self.loaded_ms = _now_ms()
        self._pending: object = _UNSEEN

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def current(self) -> PlainAcl:
        return self.acl

    def version(self) -> tuple[int, int]:
        """The file's data version, (counter, timestamp ms): its ``dataVersion``, else, as
        RocketMQ's, counter 0 stamped when the file was read."""
        return self.acl.data_version or (0, self.loaded_ms)

    def document(self) -> dict[str, Any]:
        """The file as YAML reads it; ``{}`` when it is missing or empty."""
        with self._lock:
            return self._document()

    def _document(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            raise AclError(f"cannot read the ACL file {self.path}: {e}") from None
        try:
            loaded = yaml.load(text, Loader=_LOADER) if text.strip() else {}
        except (yaml.YAMLError, ValueError, TypeError, RecursionError) as e:
            raise AclError(f"{self.path} is not YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise AclError(f"{self.path}: expected a mapping at the top")
        return loaded

    def rewrite(self, change: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Writes the file as ``change`` makes it of what it holds, and uses it at once; the
        file is left as it was when ``change`` raises or the result would not read. The new
        file replaces the old in one rename, so a reader sees one or the other; comments in
        it are lost, as RocketMQ loses them."""
        with self._lock:
            text = yaml.dump(
                change(self._document()), Dumper=_DUMPER, sort_keys=False, allow_unicode=True
            )
            acl = PlainAcl.parse(text, str(self.path))
            _replace(self.path, text)
            self.acl, self.loaded_ms = acl, _now_ms()
            self._stamp, self._pending = self._stat(), _UNSEEN

    def poll(self) -> bool:
        """Reads the file again if it changed before the last poll and not since; whether
        the accounts changed."""
        with self._lock:
            return self._poll()

    def _poll(self) -> bool:
        stamp = self._stat()
        if stamp == self._stamp:
            self._pending = _UNSEEN
            return False
        if stamp != self._pending:
            self._pending = stamp  # changed since the last poll: maybe still being written
            return False
        self._stamp, self._pending = stamp, _UNSEEN
        try:
            acl = PlainAcl.load(self.path)
        except Exception as e:
            log.error("ACL file changed but cannot be used, keeping the accounts before: %s", e)
            return False
        self.acl, self.loaded_ms = acl, _now_ms()
        log.info("ACL file %s read again: %d accounts", self.path, len(acl.accounts))
        return True


_UNSEEN = object()
# libyaml's loader where PyYAML was built with it: a large file parses ten times faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _replace(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a file beside it renamed over it, with the old
    file's mode (the file holds secrets: a new one is readable by its owner only)."""
    target = Path(os.path.realpath(path))
    try:
        mode: int | None = os.stat(target).st_mode & 0o777
    except FileNotFoundError:
        mode = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def parse_data_version(value: Any) -> tuple[int, int] | None:
    """A file's ``dataVersion`` (``[{counter: 3, timestamp: ...}]``) as (counter, timestamp
    ms); None when it has none that reads."""
    if not isinstance(value, list) or not value or not isinstance(value[0], dict):
        return None
    try:
        return int(value[0]["counter"]), int(value[0]["timestamp"])
    except (KeyError, TypeError, ValueError):
        return None


def _name(permission: int) -> str:
    if permission & Permission.ANY:
        return "PUB or SUB"
    return "|".join(
        n for n, p in (("PUB", Permission.PUB), ("SUB", Permission.SUB)) if permission & p
    )


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise AclError(f"{where}: expected a list")
    return [str(v) for v in value if v is not None]


def _account(raw: Any, where: str) -> Account:
    if not isinstance(raw, dict):
        raise AclError(f"{where}: expected a mapping")
    access_key, secret_key = raw.get("accessKey"), raw.get("secretKey")
    if access_key is None or secret_key is None:
        raise AclError(f"{where}: accessKey and secretKey are required")
    access_key, secret_key = str(access_key), str(secret_key)
    where = f"{where} ({access_key})"
    if len(access_key) < MIN_KEY_LENGTH or len(secret_key) < MIN_KEY_LENGTH:
        raise AclError(f"{where}: accessKey and secretKey need {MIN_KEY_LENGTH} characters or more")
    white_text = raw.get("whiteRemoteAddress")
    if white_text is not None and not isinstance(white_text, str):
        raise AclError(f"{where}: whiteRemoteAddress must be one pattern (a, b for several)")
    try:
        white = address_matcher(white_text)
    except AddressPatternError as e:
        raise AclError(f"{where}: {e}") from None
    return Account(
        access_key=access_key,
        secret_key=secret_key,
        white=white,
        admin=_bool(raw.get("admin"), f"{where}: admin"),
        default_topic=Permission.parse(raw.get("defaultTopicPerm"), f"{where}: defaultTopicPerm"),
        default_group=Permission.parse(raw.get("defaultGroupPerm"), f"{where}: defaultGroupPerm"),
        topics=_perms(raw.get("topicPerms"), f"{where}: topicPerms"),
        groups=_perms(raw.get("groupPerms"), f"{where}: groupPerms"),
    )


def _bool(value: Any, where: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if str(value).strip().lower() in ("true", "false"):
        return str(value).strip().lower() == "true"
    raise AclError(f"{where}: {value!r} is not true or false")


def _perms(value: Any, where: str) -> dict[str, int]:
    out = {}
    for item in _strings(value, where):
        name, eq, perm = item.partition("=")
        if not eq or not name.strip():
            raise AclError(f"{where}: {item!r} is not name=PERM (e.g. TopicA=PUB|SUB)")
        out[name.strip()] = Permission.parse(perm, f"{where}: {name.strip()}")
    return out
