"""Access control as RocketMQ's "plain ACL" has it: accounts with an access key and a secret
key in ``plain_acl.yml``, requests signed with HMAC-SHA1, and per-topic and per-group
permissions checked by the broker.

:mod:`pyrmq.acl.signing` signs and verifies requests (clients and brokers share it),
:mod:`pyrmq.acl.addresses` matches RocketMQ's white remote address patterns, and
:mod:`pyrmq.acl.plain` holds the accounts and decides whether a request may go on.
"""

from pyrmq.acl.plain import (
    AccessRequest,
    AclError,
    ForbiddenError,
    NotAuthenticatedError,
    Permission,
    PlainAcl,
)
from pyrmq.acl.signing import Credentials

__all__ = [
    "AccessRequest",
    "AclError",
    "Credentials",
    "ForbiddenError",
    "NotAuthenticatedError",
    "Permission",
    "PlainAcl",
]
