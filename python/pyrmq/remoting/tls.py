"""TLS for the remoting protocol, configured with RocketMQ's ``tls.*`` settings.

A server runs in one of RocketMQ's modes (``tls.server.mode``): ``disabled`` serves plain TCP,
``enforcing`` TLS only, and ``permissive`` (the default) both on one port, telling them apart by
the first byte a client sends (22 opens a TLS handshake; a remoting frame starts with its
length's high byte). TLS needs a certificate (``tls.server.certPath`` and ``tls.server.keyPath``).
A server given none makes itself a self-signed one at start in RocketMQ's test mode
(``tls.test.mode.enable``, on by default as in RocketMQ), so that clients that check no
certificate, as RocketMQ's do by default (the 5.x Java client speaks TLS by default), connect;
with the test mode off, a permissive server without a certificate serves plain TCP only.

A client speaks TLS with ``tls.enable=true``. As in RocketMQ, it then verifies the server's
certificate chain only with ``tls.client.authServer=true``, against ``tls.client.trustCertPath``
or the system's roots, and never the host name (brokers are reached by the IP the name server
gives). :func:`client_context` is the stricter choice for programs.

The settings come from the server's configuration (broker.conf takes ``tls.*`` keys as RocketMQ
takes them as JVM system properties) and then from ``tls.config.file`` (by default
``/etc/rocketmq/tls.properties``, read when it exists), whose values win, as in RocketMQ. That
file may also set ``tls.server.mode`` and ``tls.enable``, which RocketMQ takes only as JVM
properties.
"""

import dataclasses
import enum
import functools
import logging
import os
import re
import socket
import ssl
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from pyrmq.errors import ConfigError

__all__ = [
    "DEFAULT_CONFIG_FILE",
    "TLS_KEYS",
    "ClientTls",
    "TlsConfig",
    "TlsMode",
    "client_context",
    "looks_like_tls",
]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_FILE = "/etc/rocketmq/tls.properties"

HANDSHAKE_RECORD = 0x16
"""The first byte of a TLS handshake record (a ClientHello)."""


class TlsMode(enum.StrEnum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


_CLIENT_AUTH = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "require": ssl.CERT_REQUIRED}

# RocketMQ's key -> field.
_FIELDS = {
    "tls.server.mode": "server_mode",
    "tls.enable": "enable",
    "tls.config.file": "config_file",
    "tls.test.mode.enable": "test_mode_enable",
    "tls.server.need.client.auth": "server_need_client_auth",
    "tls.server.keyPath": "server_key_path",
    "tls.server.keyPassword": "server_key_password",
    "tls.server.certPath": "server_cert_path",
    "tls.server.authClient": "server_auth_client",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.client.keyPath": "client_key_path",
    "tls.client.keyPassword": "client_key_password",
    "tls.client.certPath": "client_cert_path",
    "tls.client.authServer": "client_auth_server",
    "tls.client.trustCertPath": "client_trust_cert_path",
}
TLS_KEYS = frozenset(_FIELDS)
SECRET_KEYS = frozenset({"tls.server.keyPassword", "tls.client.keyPassword"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TlsConfig:
    """One process's TLS settings, server and client side; defaults are RocketMQ's."""

    server_mode: TlsMode = TlsMode.PERMISSIVE
    server_cert_path: str = ""
    server_key_path: str = ""
    server_key_password: str = ""
    # none, optional or require: whether clients are asked for a certificate. One that is asked
    # for is verified (against server_trust_cert_path or the system's roots): Python's ssl cannot
    # ask for a certificate and take any, as RocketMQ does without authClient.
    server_need_client_auth: str = "none"
    server_auth_client: bool = False
    server_trust_cert_path: str = ""
    # The client side: this process's connections to name servers and brokers.
    enable: bool = False
    client_cert_path: str = ""
    client_key_path: str = ""
    client_key_password: str = ""
    client_auth_server: bool = False
    client_trust_cert_path: str = ""
    # A server without a certificate makes itself a self-signed one. RocketMQ's test mode also
    # makes its clients trust any server; here tls.client.authServer alone says that.
    test_mode_enable: bool = True
    config_file: str = DEFAULT_CONFIG_FILE

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "server_mode", TlsMode(str(self.server_mode).lower()))
        except ValueError:
            raise ConfigError(
                f"tls.server.mode {self.server_mode!r} is not disabled, permissive or enforcing"
            ) from None
        if self.server_need_client_auth not in _CLIENT_AUTH:
            raise ConfigError(
                f"tls.server.need.client.auth {self.server_need_client_auth!r} is not none, "
                "optional or require"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, object], *, base: "TlsConfig | None" = None) -> Self:
        """The ``tls.*`` keys of ``values`` over ``base``; other keys are ignored."""
        base = base or cls()
        changes: dict[str, object] = {}
        problems = []
        for key, raw in values.items():
            field = _FIELDS.get(key)
            if field is None:
                if key.startswith("tls."):
                    problems.append(f"{key} is not a TLS setting")
                continue
            if isinstance(getattr(base, field), bool):
                text = str(raw).strip().lower()
                if text not in ("true", "false"):
                    problems.append(f"{key}: {raw!r} is not true or false")
                    continue
                changes[field] = text == "true"
            else:
                changes[field] = str(raw).strip()
        if problems:
            raise ConfigError("; ".join(problems), problems=problems)
        return cls(
            **{**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **changes}
        )

    def with_file(self) -> "TlsConfig":
        """These settings with those of ``config_file`` over them, when it exists.

        Raises:
            ConfigError: The file exists but cannot be read, or sets a bad value.
        """
        from pyrmq.config import parse_properties

        path = Path(self.config_file).expanduser()
        if not self.config_file or not path.is_file():
            return self
        try:
            values = parse_properties(path.read_text(encoding="utf-8"), source=str(path))
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read tls.config.file {path}: {e}") from e
        if "tls.config.file" in values:
            log.warning("%s: tls.config.file ignored: it names this file", path)
            del values["tls.config.file"]
        try:
            return TlsConfig.from_mapping(values, base=self)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}", problems=e.problems) from e

    def to_properties(self) -> dict[str, str]:
        """Every setting under its RocketMQ key."""
        out = {}
        for key, field in _FIELDS.items():
            value = getattr(self, field)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    def server_pem(self) -> tuple[bytes, bytes] | None:
        """The server's certificate chain and key in PEM, as files or the test mode give them;
        None when it serves plain TCP only.

        Raises:
            ConfigError: ``enforcing`` without a certificate; a file that cannot be read.
        """
        if self.server_mode is TlsMode.DISABLED:
            return None
        if not self.server_cert_path:
            if self.test_mode_enable:
                return self_signed_pem()
            if self.server_mode is TlsMode.ENFORCING:
                raise ConfigError(
                    "tls.server.mode=enforcing needs tls.server.certPath and tls.server.keyPath "
                    "(or tls.test.mode.enable=true)"
                )
            return None
        key_path = self.server_key_path or self.server_cert_path
        try:
            return Path(self.server_cert_path).read_bytes(), Path(key_path).read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read the TLS certificate or key: {e}") from e

    def server_context(self) -> ssl.SSLContext | None:
        """The context a server accepts TLS with; None when it serves plain TCP only.

        Raises:
            ConfigError: ``enforcing`` without a certificate; a certificate, key or trust file
                that cannot be loaded.
        """
        if self.server_mode is TlsMode.DISABLED:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if self.server_cert_path:
            _load_chain(
                context, self.server_cert_path, self.server_key_path, self.server_key_password
            )
        elif self.test_mode_enable:
            # ssl loads certificates from files only.
            cert, key = self_signed_pem()
            with tempfile.TemporaryDirectory(prefix="pyrmq-tls-") as private:
                cert_path, key_path = Path(private, "cert.pem"), Path(private, "key.pem")
                cert_path.write_bytes(cert)
                key_path.write_bytes(key)
                _load_chain(context, str(cert_path), str(key_path), "")
        elif self.server_mode is TlsMode.ENFORCING:
            raise ConfigError(
                "tls.server.mode=enforcing needs tls.server.certPath and tls.server.keyPath "
                "(or tls.test.mode.enable=true)"
            )
        else:
            return None
        mode = _CLIENT_AUTH[self.server_need_client_auth]
        if mode != ssl.CERT_NONE:
            context.verify_mode = mode
            _load_trust(context, self.server_trust_cert_path, ssl.Purpose.CLIENT_AUTH)
        return context

    def client_context(self) -> ssl.SSLContext | None:
        """The context this process connects to servers with; None for plain TCP.

        Raises:
            ConfigError: A certificate, key or trust file that cannot be loaded.
        """
        if not self.enable:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        if self.client_auth_server:
            _load_trust(context, self.client_trust_cert_path, ssl.Purpose.SERVER_AUTH)
        else:
            context.verify_mode = ssl.CERT_NONE
        if self.client_cert_path:
            _load_chain(
                context, self.client_cert_path, self.client_key_path, self.client_key_password
            )
        return context


def client_context(
    *,
    ca_file: str | os.PathLike[str] | None = None,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client context for :class:`pyrmq.client.ClientConfig` and :class:`pyrmq.client.Admin`.

    With ``verify`` (the default) the server's certificate must chain to ``ca_file`` (or the
    system's roots) and name the host or IP address connected to, as the name server gives it.
    ``verify=False`` trusts any server, as RocketMQ's clients do by default. ``cert_file`` and
    ``key_file`` are this client's own certificate, for servers that ask for one.
    """
    context = ssl.create_default_context(cafile=os.fspath(ca_file) if ca_file else None)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert_file is not None:
        context.load_cert_chain(os.fspath(cert_file), os.fspath(key_file) if key_file else None)
    return context


@dataclasses.dataclass(frozen=True, slots=True)
class ClientTls:
    """:func:`client_context`'s arguments as a value that pickles (Spark ships it to its
    executors; an SSLContext does not pickle)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        """The context; ConfigError when a file cannot be loaded."""
        try:
            return client_context(
                ca_file=self.ca_file,
                cert_file=self.cert_file,
                key_file=self.key_file,
                verify=self.verify,
            )
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot set up TLS: {e}") from e


def looks_like_tls(data: bytes) -> bool:
    """Whether ``data`` starts like a TLS handshake (a ClientHello) rather than a frame."""
    return len(data) >= 2 and data[0] == HANDSHAKE_RECORD and data[1] == 3


@functools.cache
def self_signed_pem() -> tuple[bytes, bytes]:
    """This process's certificate for the test mode, self-signed, and its key, in PEM."""
    from pyrmq import _core

    names = {"localhost", "127.0.0.1"}
    host = socket.gethostname()
    # A certificate names only what DNS can spell.
    if _HOST_NAME.fullmatch(host):
        names.add(host)
    cert, key = _core.self_signed_certificate(sorted(names))
    return cert.encode(), key.encode()


_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")


def _no_password() -> str:
    # Without it, OpenSSL asks for the pass phrase on the terminal, and start waits there.
    raise ConfigError("the key is encrypted: tls.server.keyPassword (or its client one) is not set")


def _load_chain(context: ssl.SSLContext, cert: str, key: str, password: str) -> None:
    try:
        context.load_cert_chain(cert, key or None, password or _no_password)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the TLS certificate {cert} (key {key or cert}): {e}") from e


def _load_trust(context: ssl.SSLContext, trust: str, purpose: ssl.Purpose) -> None:
    if not trust:
        context.load_default_certs(purpose)
        return
    try:
        context.load_verify_locations(cafile=trust)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the TLS trust certificates {trust}: {e}") from e
