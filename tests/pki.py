"""A test certificate authority and the PEM files TLS tests give servers and clients."""

import ssl
from pathlib import Path

import trustme

from pyrmq.remoting.tls import client_context

__all__ = ["Pki"]


class Pki:
    """A test CA with a certificate for 127.0.0.1 and a client one, as PEM files."""

    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        server = self.ca.issue_cert("127.0.0.1")
        self.cert_file, self.key_file = root / "server.pem", root / "server.key"
        server.cert_chain_pems[0].write_to_path(str(self.cert_file))
        server.private_key_pem.write_to_path(str(self.key_file))
        client = self.ca.issue_cert("pyrmq-client@example.com")
        self.client_cert, self.client_key = root / "client.pem", root / "client.key"
        client.cert_chain_pems[0].write_to_path(str(self.client_cert))
        client.private_key_pem.write_to_path(str(self.client_key))

    def properties(self, path: Path, **settings: str) -> Path:
        """A tls.properties with this server certificate and ``settings`` (dots as ``_``)."""
        lines = {
            "tls.server.certPath": str(self.cert_file),
            "tls.server.keyPath": str(self.key_file),
            **{key.replace("_", "."): value for key, value in settings.items()},
        }
        path.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        return path

    def client(self, *, with_cert: bool = False) -> ssl.SSLContext:
        if with_cert:
            return client_context(
                ca_file=self.ca_file, cert_file=self.client_cert, key_file=self.client_key
            )
        return client_context(ca_file=self.ca_file)
