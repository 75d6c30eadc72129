//! The transport over TLS, with rustls's client: TLS only, TLS and plain on one port, client
//! certificates asked for and required, and certificates that cannot be used.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use pyrmq_grpc::{frame, self_signed, ClientAuth, Config, Event, Tls, Transport};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

const SERVICE: &str = "test.Service";

/// A CA, a server certificate for 127.0.0.1 and a client certificate it issued, in PEM.
struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

fn pki() -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issue = |name: &str| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    };
    Pki {
        ca: ca.pem(),
        server: issue("127.0.0.1"),
        client: issue("client"),
    }
}

/// TLS with the PKI's server certificate, no client certificates; plain clients too with
/// `plain_too`.
fn server_tls(p: &Pki, plain_too: bool) -> Tls {
    let (cert, key) = &p.server;
    Tls::new(
        cert.as_bytes(),
        key.as_bytes(),
        ClientAuth::None,
        None,
        plain_too,
    )
    .unwrap()
}

fn transport(tls: Tls) -> Transport {
    let config = Config {
        service: SERVICE.to_owned(),
        client_streaming: HashSet::new(),
        max_message_bytes: 1 << 20,
        tls: Some(tls),
    };
    Transport::bind("127.0.0.1", 0, config).unwrap()
}

fn client_config(ca: &str, client: Option<&(String, String)>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                CertificateDer::pem_slice_iter(cert.as_bytes())
                    .map(Result::unwrap)
                    .collect(),
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(config)
}

/// One unary call made over `socket`, answered by the test with the request's bytes reversed;
/// the answer's message.
async fn call<S>(t: &Transport, socket: S) -> Bytes
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut client, conn) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(conn);
    let request = Request::post(format!("https://127.0.0.1/{SERVICE}/Send"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(request, false).unwrap();
    body.send_data(frame::encode(b"ping"), true).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let (id, got) = loop {
        assert!(Instant::now() < deadline, "no call arrived");
        if let Some(Event::Start { call, request, .. }) = t.take_events().into_iter().next() {
            break (call, request.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let mut answer = got.to_vec();
    answer.reverse();
    assert!(t.reply(id, &answer));
    let mut body = response.await.unwrap().into_body();
    let mut decoder = frame::Decoder::new(1 << 20);
    while let Some(chunk) = body.data().await {
        decoder.push(&chunk.unwrap());
    }
    decoder.next_message().unwrap().unwrap()
}

async fn tls_socket(
    t: &Transport,
    config: Arc<ClientConfig>,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut stream = TlsConnector::from(config).connect(name, socket).await?;
    // TLS 1.3 servers refuse a client certificate after the handshake: a round trip tells.
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await?;
    stream.flush().await?;
    Ok(stream)
}

async fn plain_socket(t: &Transport) -> TcpStream {
    TcpStream::connect(("127.0.0.1", t.port())).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_tls_agree_on_http2_and_are_answered() {
    let p = pki();
    let t = transport(server_tls(&p, false));
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let stream = TlsConnector::from(client_config(&p.ca, None))
        .connect(name, socket)
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(call(&t, stream).await, Bytes::from_static(b"gnip"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_only_closes_plain_connections() {
    let p = pki();
    let t = transport(server_tls(&p, false));
    let mut plain = plain_socket(&t).await;
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    // The TLS handshake fails on the preface: the server writes an alert or nothing, and closes.
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut total = 0;
        loop {
            match plain.read(&mut buf).await {
                Ok(0) | Err(_) => break total,
                Ok(n) => total += n,
            }
        }
    })
    .await
    .expect("the plain connection stays open");
    assert!(read < 64, "{read} bytes answered to a plain client");
    assert!(t.take_events().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permissive_port_serves_tls_and_plain_clients_side_by_side() {
    let p = pki();
    let t = transport(server_tls(&p, true));
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await.unwrap();
    let secure = TlsConnector::from(client_config(&p.ca, None))
        .connect(name, socket)
        .await
        .unwrap();
    assert_eq!(call(&t, secure).await, Bytes::from_static(b"gnip"));
    assert_eq!(
        call(&t, plain_socket(&t).await).await,
        Bytes::from_static(b"gnip")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_when_asked_for_and_when_required() {
    let p = pki();
    let optional = transport(
        Tls::new(
            p.server.0.as_bytes(),
            p.server.1.as_bytes(),
            ClientAuth::Optional,
            Some(p.ca.as_bytes()),
            false,
        )
        .unwrap(),
    );
    let required = transport(
        Tls::new(
            p.server.0.as_bytes(),
            p.server.1.as_bytes(),
            ClientAuth::Require,
            Some(p.ca.as_bytes()),
            false,
        )
        .unwrap(),
    );
    let without = client_config(&p.ca, None);
    let with = client_config(&p.ca, Some(&p.client));
    // A stranger's certificate: issued by another CA.
    let stranger = client_config(&p.ca, Some(&pki().client));
    let read_back = |stream: std::io::Result<tokio_rustls::client::TlsStream<TcpStream>>| async {
        let mut stream = stream?;
        let mut buf = [0u8; 9];
        // The server's SETTINGS frame header, or the alert refusing the certificate.
        stream.read_exact(&mut buf).await.map(|_| ())
    };
    assert!(read_back(tls_socket(&optional, Arc::clone(&without)).await)
        .await
        .is_ok());
    assert!(read_back(tls_socket(&optional, Arc::clone(&with)).await)
        .await
        .is_ok());
    assert!(
        read_back(tls_socket(&optional, Arc::clone(&stranger)).await)
            .await
            .is_err()
    );
    assert!(read_back(tls_socket(&required, Arc::clone(&with)).await)
        .await
        .is_ok());
    assert!(read_back(tls_socket(&required, without).await)
        .await
        .is_err());
    assert!(read_back(tls_socket(&required, stranger).await)
        .await
        .is_err());
}

/// Certificate, key, client certificates, trust file, and what the error says.
type Case<'a> = (&'a [u8], &'a [u8], ClientAuth, Option<&'a [u8]>, &'a str);

#[test]
fn certificates_that_cannot_be_used_are_refused_with_a_reason() {
    let p = pki();
    let (cert, key) = (p.server.0.as_bytes(), p.server.1.as_bytes());
    let other_key = pki().server.1;
    let cases: [Case; 5] = [
        (b"", key, ClientAuth::None, None, "no certificate"),
        (
            cert,
            b"not a key",
            ClientAuth::None,
            None,
            "no unencrypted private key",
        ),
        (
            cert,
            other_key.as_bytes(),
            ClientAuth::None,
            None,
            "does not go with the certificate",
        ),
        (cert, key, ClientAuth::Require, None, "trust file"),
        (
            cert,
            key,
            ClientAuth::Require,
            Some(b""),
            "client certificates cannot be checked",
        ),
    ];
    for (cert, key, auth, trust, expected) in cases {
        let error = Tls::new(cert, key, auth, trust, false).unwrap_err();
        assert!(
            error.to_string().contains(expected),
            "{error} lacks {expected:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_certificate_serves_a_client_that_trusts_it() {
    let (cert, key) = self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    let t = transport(
        Tls::new(
            cert.as_bytes(),
            key.as_bytes(),
            ClientAuth::None,
            None,
            true,
        )
        .unwrap(),
    );
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream = TlsConnector::from(client_config(&cert, None))
        .connect(name, socket)
        .await
        .unwrap();
    assert_eq!(call(&t, stream).await, Bytes::from_static(b"gnip"));
}
