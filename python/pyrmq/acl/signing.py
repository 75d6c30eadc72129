"""Request signatures of RocketMQ's ACL.

A remoting request carries ``AccessKey`` and ``Signature`` among its ext fields. The signature
is Base64(HMAC-SHA1(secret key, content)), where the content is the values of every other ext
field in ascending key order, joined with nothing, followed by the body. A gRPC call carries an
``authorization`` header whose signature is the lowercase hex HMAC-SHA1 of its
``x-mq-date-time`` header.
"""

import base64
import dataclasses
import hashlib
import hmac
from collections.abc import Mapping

from pyrmq.remoting.command import RemotingCommand

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "Credentials",
    "grpc_signature",
    "remoting_content",
    "remoting_signature",
    "sign",
    "signature_matches",
]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Left out of the signed content by RocketMQ 4.9 brokers (and by 5.x ones for old clients),
# signed by some clients: both are accepted.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """An account's keys, as ``plain_acl.yml`` names them; a client signs every request
    with them."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:
        # Never print the secret.
        return f"Credentials(access_key={self.access_key!r})"


def remoting_content(ext_fields: Mapping[str, str], body: bytes, *, skip: str = "") -> bytes:
    """What a remoting request's signature covers (``Signature`` and ``skip`` left out)."""
    values = "".join([ext_fields[k] for k in sorted(ext_fields) if k != SIGNATURE and k != skip])
    return values.encode() + body


def remoting_signature(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.digest(secret_key.encode(), content, "sha1")).decode("ascii")


def signature_matches(ext_fields: Mapping[str, str], body: bytes, secret_key: str) -> bool:
    """Whether a request's ``Signature`` is its content's, under ``secret_key``. Clients
    that sign ``_UNIQUE_KEY_QUERY`` and clients that leave it out both pass."""
    text = ext_fields.get(SIGNATURE)
    if text is None:
        return False
    # As bytes: compare_digest refuses str with non-ASCII characters.
    given = text.encode("utf-8", "surrogateescape")
    content = remoting_content(ext_fields, body)
    if hmac.compare_digest(remoting_signature(content, secret_key).encode(), given):
        return True
    if UNIQUE_KEY_QUERY in ext_fields:
        content = remoting_content(ext_fields, body, skip=UNIQUE_KEY_QUERY)
        return hmac.compare_digest(remoting_signature(content, secret_key).encode(), given)
    return False


def sign(request: RemotingCommand, credentials: Credentials) -> None:
    """Adds the credentials and the signature to ``request``'s ext fields."""
    fields = request.ext_fields
    fields.pop(SIGNATURE, None)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token:
        fields[SECURITY_TOKEN] = credentials.security_token
    content = remoting_content(fields, request.body)
    fields[SIGNATURE] = remoting_signature(content, credentials.secret_key)


def grpc_signature(date_time: str, secret_key: str) -> str:
    """The signature of a gRPC call's ``authorization`` header."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()
