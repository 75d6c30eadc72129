"""TLS settings: RocketMQ's keys and modes, tls.config.file over broker.conf, the contexts they
give, and the clear errors bad ones get; the Spark source's TLS options."""

import pickle
import ssl
from pathlib import Path

import pytest
import trustme

from pyrmq.broker.config import SECRET_SETTINGS, BrokerConfig, setting_key
from pyrmq.errors import ConfigError
from pyrmq.remoting.tls import ClientTls, TlsConfig, TlsMode
from pyrmq.spark.options import ReadOptions, WriteOptions

CA = trustme.CA()


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1, as files."""
    cert = CA.issue_cert("127.0.0.1")
    files = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "s.pem", "key": tmp_path / "s.key"}
    CA.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    return files


def test_defaults_are_rocketmqs_and_a_server_without_a_certificate_signs_its_own(
    tmp_path: Path,
) -> None:
    tls = TlsConfig(config_file=str(tmp_path / "absent.properties"))
    assert tls.server_mode is TlsMode.PERMISSIVE
    assert tls.test_mode_enable
    assert tls.with_file() is tls
    assert tls.server_context() is not None
    cert, key = tls.server_pem() or (b"", b"")
    assert cert.startswith(b"-----BEGIN CERTIFICATE-----")
    assert b"PRIVATE KEY" in key
    # One certificate per process: the remoting and gRPC ports serve the same.
    assert TlsConfig().server_pem() == (cert, key)
    assert tls.client_context() is None
    # Without the test mode, such a server serves plain TCP only.
    plain = TlsConfig(test_mode_enable=False)
    assert plain.server_context() is None
    assert plain.server_pem() is None


def test_the_test_mode_leaves_clients_checking_servers_when_asked_to(pem: dict[str, Path]) -> None:
    client = TlsConfig(
        enable=True, client_auth_server=True, client_trust_cert_path=str(pem["ca"])
    ).client_context()
    assert client is not None
    assert client.verify_mode == ssl.CERT_REQUIRED


def test_keys_modes_and_their_errors() -> None:
    tls = TlsConfig.from_mapping({"tls.server.mode": "ENFORCING", "tls.enable": "true"})
    assert tls.server_mode is TlsMode.ENFORCING
    assert tls.enable
    with pytest.raises(ConfigError, match="not disabled, permissive or enforcing"):
        TlsConfig.from_mapping({"tls.server.mode": "strict"})
    with pytest.raises(ConfigError, match="not none, optional or require"):
        TlsConfig.from_mapping({"tls.server.need.client.auth": "always"})
    with pytest.raises(ConfigError, match=r"tls\.server\.keypath is not a TLS setting") as bad:
        TlsConfig.from_mapping({"tls.server.keypath": "x", "tls.enable": "yes"})
    assert len(bad.value.problems) == 2  # both reported at once
    assert tls.server_context() is not None  # self-signed, in the test mode
    strict = TlsConfig.from_mapping(
        {"tls.server.mode": "enforcing", "tls.test.mode.enable": "false"}
    )
    with pytest.raises(ConfigError, match=r"enforcing needs tls\.server\.certPath"):
        strict.server_context()
    with pytest.raises(ConfigError, match=r"enforcing needs tls\.server\.certPath"):
        strict.server_pem()


def test_the_file_wins_over_the_servers_settings(tmp_path: Path, pem: dict[str, Path]) -> None:
    path = tmp_path / "tls.properties"
    path.write_text(
        f"tls.server.mode=enforcing\ntls.server.certPath={pem['cert']}\n"
        f"tls.server.keyPath={pem['key']}\ntls.config.file=/elsewhere\n"
    )
    tls = TlsConfig.from_mapping(
        {"tls.server.mode": "disabled", "tls.config.file": str(path)}
    ).with_file()
    assert tls.server_mode is TlsMode.ENFORCING
    assert tls.config_file == str(path)
    context = tls.server_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE
    path.write_text("tls.server.mode=sometimes\n")
    with pytest.raises(ConfigError, match=f"{path}: tls.server.mode 'sometimes'"):
        TlsConfig(config_file=str(path)).with_file()


def test_contexts_follow_the_settings(tmp_path: Path, pem: dict[str, Path]) -> None:
    server = TlsConfig(
        server_cert_path=str(pem["cert"]),
        server_key_path=str(pem["key"]),
        server_need_client_auth="require",
        server_trust_cert_path=str(pem["ca"]),
    ).server_context()
    assert server is not None
    assert server.verify_mode == ssl.CERT_REQUIRED
    # As RocketMQ's clients: no check of the server unless asked, never of its name.
    trusting = TlsConfig(enable=True).client_context()
    assert trusting is not None
    assert trusting.verify_mode == ssl.CERT_NONE
    checking = TlsConfig(
        enable=True, client_auth_server=True, client_trust_cert_path=str(pem["ca"])
    ).client_context()
    assert checking is not None
    assert checking.verify_mode == ssl.CERT_REQUIRED
    assert not checking.check_hostname
    with pytest.raises(ConfigError, match="cannot load the TLS certificate"):
        TlsConfig(server_cert_path=str(tmp_path / "missing.pem")).server_context()
    with pytest.raises(ConfigError, match="cannot load the TLS trust certificates"):
        TlsConfig(
            enable=True, client_auth_server=True, client_trust_cert_path=str(pem["key"])
        ).client_context()


def test_broker_conf_takes_tls_keys_and_keeps_their_secrets() -> None:
    config = BrokerConfig.from_mapping(
        {"brokerName": "b1", "tls.server.mode": "disabled", "tls.server.keyPassword": "hush"}
    )
    assert config.tls.server_mode is TlsMode.DISABLED
    settings = config.to_properties()
    assert settings["tls.server.mode"] == "disabled"
    assert "tls.server.keyPassword" in SECRET_SETTINGS
    assert setting_key("tls.server.mode") == "tls.server.mode"
    # A later mapping keeps what it does not name.
    again = BrokerConfig.from_mapping({"tls.enable": "true"}, base=config)
    assert (again.tls.server_mode, again.tls.enable) == (TlsMode.DISABLED, True)
    with pytest.raises(ConfigError, match=r"tls\.servermode is not a TLS setting"):
        BrokerConfig.from_mapping({"tls.servermode": "enforcing"})


def test_spark_tls_options(pem: dict[str, Path]) -> None:
    base = {"nameServer": "127.0.0.1:9876", "subscribe": "T"}
    options = ReadOptions.parse(
        {**base, "rocketmq.tls": "true", "rocketmq.tls.caFile": str(pem["ca"])}, "batch"
    )
    assert options.tls == ClientTls(ca_file=str(pem["ca"]))
    # What crosses to the executors pickles, and gives a context there.
    shipped = pickle.loads(pickle.dumps(options))
    assert shipped.tls.context().verify_mode == ssl.CERT_REQUIRED
    write = WriteOptions.parse(
        {"nameServer": "127.0.0.1:9876", "topic": "T", "rocketmq.tls": "true"}
    )
    assert write.tls == ClientTls()
    with pytest.raises(ConfigError, match=r"rocketmq.tls.\* need rocketmq.tls=true"):
        ReadOptions.parse({**base, "rocketmq.tls.caFile": str(pem["ca"])}, "batch")
    with pytest.raises(ConfigError, match="cannot set up TLS"):
        ReadOptions.parse({**base, "rocketmq.tls": "true", "rocketmq.tls.caFile": "/no"}, "batch")


def test_an_encrypted_key_without_its_password_is_a_config_error_not_a_prompt(
    tmp_path: Path,
) -> None:
    cert = CA.issue_cert("127.0.0.1")
    key = tmp_path / "enc.key"
    from cryptography.hazmat.primitives import serialization

    private = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    chain = tmp_path / "s.pem"
    cert.cert_chain_pems[0].write_to_path(str(chain))
    tls = TlsConfig(server_cert_path=str(chain), server_key_path=str(key))
    with pytest.raises(ConfigError, match="the key is encrypted"):
        tls.server_context()
    with_password = TlsConfig(
        server_cert_path=str(chain), server_key_path=str(key), server_key_password="secret"
    )
    assert with_password.server_context() is not None


def test_the_self_signed_certificate_leaves_out_a_host_name_dns_cannot_spell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pyrmq.remoting import tls as tls_module

    tls_module.self_signed_pem.cache_clear()
    monkeypatch.setattr(tls_module.socket, "gethostname", lambda: "hôte-ü")
    try:
        cert, _ = tls_module.self_signed_pem()
        assert cert.startswith(b"-----BEGIN CERTIFICATE-----")
    finally:
        tls_module.self_signed_pem.cache_clear()
