//! TLS on the gRPC port: rustls over ring, and, when plain clients are served on the same port
//! (RocketMQ's permissive mode), the first byte a client sends telling the two apart.

use std::fmt;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS record's first byte when it carries a handshake, as a ClientHello does. An HTTP/2
/// client's preface starts with `P`.
pub(crate) const HANDSHAKE_RECORD: u8 = 22;

/// Whether clients are asked for a certificate, as RocketMQ's `tls.server.need.client.auth`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    /// Asked for; one that is given must verify.
    Optional,
    Require,
}

/// What the port serves over TLS.
#[derive(Clone)]
pub struct Tls {
    pub(crate) config: Arc<ServerConfig>,
    /// Plain HTTP/2 clients are served too.
    pub(crate) plain_too: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("plain_too", &self.plain_too)
            .finish_non_exhaustive()
    }
}

/// A certificate, key or trust file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

impl Tls {
    /// From PEM: the server's certificate chain and its unencrypted key, and for client
    /// certificates the authorities that issue them.
    pub fn new(
        cert_chain_pem: &[u8],
        key_pem: &[u8],
        client_auth: ClientAuth,
        trust_pem: Option<&[u8]>,
        plain_too: bool,
    ) -> Result<Tls, TlsError> {
        let chain = CertificateDer::pem_slice_iter(cert_chain_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError(format!("the certificate file cannot be read: {e}")))?;
        if chain.is_empty() {
            return Err(TlsError("the certificate file holds no certificate".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
            TlsError(format!(
                "the key file holds no unencrypted private key ({e})"
            ))
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(e.to_string()))?;
        let builder = match client_auth {
            ClientAuth::None => builder.with_no_client_auth(),
            ClientAuth::Optional | ClientAuth::Require => {
                let Some(trust_pem) = trust_pem else {
                    return Err(TlsError(
                        "client certificates are asked for only with a trust file".into(),
                    ));
                };
                let mut roots = RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(trust_pem) {
                    let cert =
                        cert.map_err(|e| TlsError(format!("the trust file cannot be read: {e}")))?;
                    roots
                        .add(cert)
                        .map_err(|e| TlsError(format!("a trusted certificate is refused: {e}")))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
                let verifier = if client_auth == ClientAuth::Optional {
                    verifier.allow_unauthenticated()
                } else {
                    verifier
                };
                let verifier = verifier
                    .build()
                    .map_err(|e| TlsError(format!("client certificates cannot be checked: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            TlsError(format!(
                "the key is not one rustls takes (RSA, ECDSA P-256 or P-384, Ed25519; \
                 grpcTransport=grpcio takes others) or does not go with the certificate: {e}"
            ))
        })?;
        // gRPC clients insist on HTTP/2 being agreed in the handshake.
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Tls {
            config: Arc::new(config),
            plain_too,
        })
    }
}

/// A self-signed certificate for `names` and its key, in PEM: what a server in RocketMQ's TLS
/// test mode serves when it was given none. Clients in that mode check no certificate.
pub fn self_signed(names: Vec<String>) -> Result<(String, String), TlsError> {
    let certified = rcgen::generate_simple_self_signed(names)
        .map_err(|e| TlsError(format!("no self-signed certificate: {e}")))?;
    Ok((certified.cert.pem(), certified.key_pair.serialize_pem()))
}
