//! The listener and its HTTP/2 connections, on one thread of their own.
//!
//! Each call is read and framed here and handed over as [`Event`]s; its caller answers through
//! [`Transport::send`], [`Transport::reply`] and [`Transport::finish`], which queue what to write
//! for the call's task. No answer waits for the caller's thread and no call holds a lock while it
//! waits for the network. A call stays known until its status is written: a client that leaves
//! before that is reported ([`Event::Cancel`]), and a caller that asked is told when the status
//! went out ([`Event::Done`]). A client stream is read only as fast as the caller takes its
//! messages ([`Transport::consumed`]), so HTTP/2's flow control holds the rest back.

use std::collections::{HashMap, HashSet};
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::{RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use crate::events::{Event, Events};
use crate::frame::{self, code, Decoder};
use crate::tls::{Tls, HANDSHAKE_RECORD};

/// How long open connections get to finish their calls once the transport closes.
const GRACE: Duration = Duration::from_secs(1);
// Windows large enough that a batch of big messages is not paced by WINDOW_UPDATEs.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
const MAX_CONCURRENT_STREAMS: u32 = 1000;
const MAX_HEADER_LIST_BYTES: u32 = 64 << 10;
/// A connection that has not finished its TLS and HTTP/2 handshakes by then is closed.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);
/// Messages of a client stream handed over and not yet taken, before reading pauses.
const UNCONSUMED_MESSAGES: usize = 64;
/// At most one warning of failing accepts per this long (out of descriptors, they repeat).
const ACCEPT_WARNING_EVERY: Duration = Duration::from_secs(10);

/// What the transport serves.
#[derive(Debug, Clone)]
pub struct Config {
    /// The service's name, as in `/{service}/{method}` paths.
    pub service: String,
    /// Methods whose client sends a stream of messages; every other method's client sends one.
    pub client_streaming: HashSet<String>,
    /// Longest request message accepted.
    pub max_message_bytes: usize,
    /// TLS, when the port serves it.
    pub tls: Option<Tls>,
}

enum Out {
    Message(Bytes),
    /// The status, and whether the caller wants [`Event::Done`] once it is written.
    Status(u32, String, bool),
}

/// A call between its start and its status on the wire.
struct CallEntry {
    out: mpsc::UnboundedSender<Out>,
    /// Set once the caller gave the status: nothing more may be sent.
    finished: bool,
    /// A client stream's reader, told of each message the caller took.
    consumed: Option<mpsc::UnboundedSender<()>>,
}

struct Shared {
    config: Config,
    prefix: String,
    events: Events,
    calls: Mutex<HashMap<u64, CallEntry>>,
    next_call: AtomicU64,
}

impl Shared {
    /// Forgets a call the client left or that ran out of time, unless its status was written.
    fn cancelled(&self, call: u64) {
        if self.calls.lock().remove(&call).is_some() {
            self.events.push(Event::Cancel { call });
        }
    }

    /// Forgets a call whose status was written.
    fn done(&self, call: u64, notify: bool) {
        if self.calls.lock().remove(&call).is_some() && notify {
            self.events.push(Event::Done { call });
        }
    }

    /// Queues `out` for a call still open to answers; with `last`, none may follow.
    fn answer(&self, call: u64, out: impl IntoIterator<Item = Out>, last: bool) -> bool {
        let mut calls = self.calls.lock();
        let Some(entry) = calls.get_mut(&call) else {
            return false;
        };
        if entry.finished {
            return false;
        }
        entry.finished = last;
        out.into_iter().all(|o| entry.out.send(o).is_ok())
    }
}

/// A gRPC server on one address, its calls handled by whoever takes its events.
pub struct Transport {
    shared: Arc<Shared>,
    port: u16,
    shutdown: watch::Sender<bool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Transport {
    /// Binds `host:port` (0: any free port) and serves from now on.
    pub fn bind(host: &str, port: u16, config: Config) -> io::Result<Transport> {
        let listener = std::net::TcpListener::bind((host, port))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let prefix = format!("/{}/", config.service);
        let shared = Arc::new(Shared {
            config,
            prefix,
            events: Events::new()?,
            calls: Mutex::new(HashMap::new()),
            next_call: AtomicU64::new(1),
        });
        let (shutdown, closing) = watch::channel(false);
        let serving = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("pyrmq-grpc-{port}"))
            .spawn(move || runtime.block_on(serve(listener, serving, closing)))?;
        Ok(Transport {
            shared,
            port,
            shutdown,
            thread: Mutex::new(Some(thread)),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Readable while events wait to be taken.
    pub fn fd(&self) -> RawFd {
        self.shared.events.fd()
    }

    pub fn take_events(&self) -> Vec<Event> {
        self.shared.events.take()
    }

    /// Sends messages of a call's answer, written together; false if the call is over or
    /// unknown.
    pub fn send<'a>(&self, call: u64, messages: impl IntoIterator<Item = &'a [u8]>) -> bool {
        let framed = frame::encode_all(messages);
        self.shared.answer(call, [Out::Message(framed)], false)
    }

    /// Answers a call with one message and OK.
    pub fn reply(&self, call: u64, message: &[u8]) -> bool {
        let framed = frame::encode(message);
        let status = Out::Status(code::OK, String::new(), false);
        self.shared
            .answer(call, [Out::Message(framed), status], true)
    }

    /// Ends a call with a status; with `notify`, [`Event::Done`] follows once it is written
    /// (or [`Event::Cancel`], if the client left first).
    pub fn finish(&self, call: u64, status: u32, message: &str, notify: bool) -> bool {
        let out = Out::Status(status, message.to_owned(), notify);
        self.shared.answer(call, [out], true)
    }

    /// The caller took one message of a client stream: the stream may be read further.
    pub fn consumed(&self, call: u64) {
        if let Some(entry) = self.shared.calls.lock().get(&call) {
            if let Some(consumed) = &entry.consumed {
                let _ = consumed.send(());
            }
        }
    }

    /// Stops listening, gives open calls [`GRACE`] to finish, then drops every connection.
    pub fn close(&self) {
        let _ = self.shutdown.send(true);
        if let Some(thread) = self.thread.lock().take() {
            let _ = thread.join();
        }
        self.shared.calls.lock().clear();
    }
}

impl Drop for Transport {
    /// Stops the thread without waiting for it: a drop may come on a thread that holds what the
    /// serving thread's logging needs (Python's GIL, through the binding).
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut closing: watch::Receiver<bool>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            log::error!("gRPC listener cannot be registered: {e}");
            return;
        }
    };
    let mut connections = JoinSet::new();
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let _ = socket.set_nodelay(true);
                    connections.spawn(accept(socket, peer, Arc::clone(&shared), closing.clone()));
                }
                Err(e) => {
                    // Out of descriptors, most likely: wait rather than spin.
                    if warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARNING_EVERY) {
                        log::warn!("gRPC accept failed: {e}");
                        warned = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = closing.changed() => break,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}

/// Serves a new connection, over TLS or not as the port and the client's first byte say.
async fn accept(
    socket: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    closing: watch::Receiver<bool>,
) {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let Some(tls) = shared.config.tls.clone() else {
        return connection(socket, peer, shared, closing, deadline).await;
    };
    if tls.plain_too {
        let mut first = [0u8; 1];
        match timeout_at(deadline, socket.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] == HANDSHAKE_RECORD => {}
            Ok(Ok(1)) => return connection(socket, peer, shared, closing, deadline).await,
            _ => return,
        }
    }
    let handshake = TlsAcceptor::from(tls.config).accept(socket);
    let Ok(Ok(stream)) = timeout_at(deadline, handshake).await else {
        return;
    };
    connection(stream, peer, shared, closing, deadline).await;
}

async fn connection<S>(
    socket: S,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut closing: watch::Receiver<bool>,
    deadline: Instant,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    // As gRPC names peers.
    let peer = match peer {
        SocketAddr::V4(a) => format!("ipv4:{a}"),
        SocketAddr::V6(a) => format!("ipv6:{a}"),
    };
    let handshake = h2::server::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .max_header_list_size(MAX_HEADER_LIST_BYTES)
        .handshake::<_, Bytes>(socket);
    let Ok(Ok(mut conn)) = timeout_at(deadline, handshake).await else {
        return;
    };
    // Calls run as tasks of this connection: they end with it.
    let mut calls = JoinSet::new();
    let mut shutting_down = false;
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((request, respond))) => {
                    calls.spawn(call(request, respond, peer.clone(), Arc::clone(&shared)));
                }
                // The connection failed or the client closed it.
                Some(Err(_)) | None => break,
            },
            Some(_) = calls.join_next(), if !calls.is_empty() => {}
            _ = closing.changed(), if !shutting_down => {
                shutting_down = true;
                conn.graceful_shutdown();
            }
        }
    }
    // Dropped, the connection fails its streams: each call still open ends as cancelled.
    drop(conn);
    while calls.join_next().await.is_some() {}
}

/// One call: its request read, handed over, and its answers written as they are queued.
async fn call(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    peer: String,
    shared: Arc<Shared>,
) {
    let (parts, mut body) = request.into_parts();
    let Some(method) = parts.uri.path().strip_prefix(&shared.prefix) else {
        let path = parts.uri.path();
        let _ = trailers_only(
            &mut respond,
            code::UNIMPLEMENTED,
            &format!("unknown method {path}"),
        );
        return;
    };
    let method = method.to_owned();
    let grpc = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if !grpc {
        let refusal = Response::builder()
            .status(http::StatusCode::UNSUPPORTED_MEDIA_TYPE)
            .body(())
            .unwrap_or_default();
        let _ = respond.send_response(refusal, true);
        return;
    }
    let timeout = parts
        .headers
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(frame::parse_timeout);
    let metadata = metadata(&parts.headers);
    let mut decoder = Decoder::new(shared.config.max_message_bytes);
    let streaming = shared.config.client_streaming.contains(&method);
    let request = if streaming {
        None
    } else {
        match read_one(&mut body, &mut decoder).await {
            Ok(Some(message)) => Some(message),
            Ok(None) => return, // the client left before its request was whole
            Err((status, message)) => {
                let _ = trailers_only(&mut respond, status, &message);
                return;
            }
        }
    };
    let (out, answers) = mpsc::unbounded_channel();
    let (consumed, taken) = if streaming {
        let (tx, rx) = mpsc::unbounded_channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let id = shared.next_call.fetch_add(1, Ordering::Relaxed);
    let entry = CallEntry {
        out,
        finished: false,
        consumed,
    };
    shared.calls.lock().insert(id, entry);
    shared.events.push(Event::Start {
        call: id,
        method,
        metadata,
        peer,
        timeout,
        request,
    });
    let served = async {
        if let Some(taken) = taken {
            tokio::join!(
                read_stream(body, decoder, taken, id, &shared),
                write(respond, answers, id, &shared)
            );
        } else {
            drop(body);
            write(respond, answers, id, &shared).await;
        }
    };
    match timeout {
        // Past its deadline the client has given up on the call: so does the server (the
        // stream is reset as the call's task drops it).
        Some(timeout) => {
            if tokio::time::timeout(timeout, served).await.is_err() {
                shared.cancelled(id);
            }
        }
        None => served.await,
    }
}

/// Headers a handler may read: gRPC's own and HTTP/2's are left out.
fn metadata(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| {
            let name = name.as_str();
            !matches!(
                name,
                "content-type" | "te" | "grpc-timeout" | "grpc-encoding" | "grpc-accept-encoding"
            )
        })
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The one request message of a call whose client sends one; None if the client left first.
async fn read_one(
    body: &mut RecvStream,
    decoder: &mut Decoder,
) -> Result<Option<Bytes>, (u32, String)> {
    let mut message = None;
    while let Some(chunk) = body.data().await {
        let Ok(chunk) = chunk else { return Ok(None) };
        let _ = body.flow_control().release_capacity(chunk.len());
        decoder.push(&chunk);
        while let Some(m) = decoder.next_message().map_err(|e| e.status())? {
            if message.replace(m).is_some() {
                return Err((
                    code::UNIMPLEMENTED,
                    "more than one request message".to_owned(),
                ));
            }
        }
    }
    if !decoder.is_empty() {
        return Err((
            code::INTERNAL,
            "the request ends inside a message".to_owned(),
        ));
    }
    match message {
        Some(m) => Ok(Some(m)),
        None => Err((code::UNIMPLEMENTED, "no request message".to_owned())),
    }
}

async fn read_stream(
    mut body: RecvStream,
    mut decoder: Decoder,
    mut taken: mpsc::UnboundedReceiver<()>,
    call: u64,
    shared: &Shared,
) {
    let mut waiting = 0usize;
    let mut ended = false;
    loop {
        // Whole messages go over as far as the caller keeps up.
        while waiting < UNCONSUMED_MESSAGES {
            match decoder.next_message() {
                Ok(Some(message)) => {
                    waiting += 1;
                    shared.events.push(Event::Message { call, message });
                }
                Ok(None) => break,
                Err(e) => {
                    // Answered with the status; the caller is told the call is gone.
                    let (status, message) = e.status();
                    if let Some(entry) = shared.calls.lock().get(&call) {
                        let _ = entry.out.send(Out::Status(status, message, false));
                    }
                    shared.cancelled(call);
                    return;
                }
            }
        }
        if waiting >= UNCONSUMED_MESSAGES {
            // Meanwhile the rest stays unread in h2's buffer, and the client's window closes.
            if taken.recv().await.is_none() {
                return;
            }
            waiting -= 1;
            continue;
        }
        if ended {
            break;
        }
        let chunk = tokio::select! {
            chunk = body.data() => chunk,
            Some(()) = taken.recv() => {
                waiting = waiting.saturating_sub(1);
                continue;
            }
        };
        match chunk {
            Some(Ok(chunk)) => {
                let _ = body.flow_control().release_capacity(chunk.len());
                decoder.push(&chunk);
            }
            Some(Err(_)) => {
                shared.cancelled(call);
                return;
            }
            None => ended = true,
        }
    }
    shared.events.push(Event::HalfClose { call });
}

/// Writes a call's answers as they are queued, until its status, or until the client resets it.
async fn write(
    mut respond: SendResponse<Bytes>,
    mut answers: mpsc::UnboundedReceiver<Out>,
    call: u64,
    shared: &Shared,
) {
    let mut stream: Option<SendStream<Bytes>> = None;
    loop {
        let next = tokio::select! {
            next = answers.recv() => next,
            _ = poll_fn(|cx| match stream.as_mut() {
                Some(s) => s.poll_reset(cx),
                None => respond.poll_reset(cx),
            }) => None,
        };
        let sent = match next {
            Some(Out::Message(framed)) => {
                let open = match stream.as_mut() {
                    Some(s) => Some(s),
                    None => match respond.send_response(grpc_headers(), false) {
                        Ok(s) => Some(stream.insert(s)),
                        Err(_) => None,
                    },
                };
                match open {
                    Some(s) => send_data(s, framed).await,
                    None => false,
                }
            }
            Some(Out::Status(status, message, notify)) => {
                let written = match stream.as_mut() {
                    Some(s) => s.send_trailers(status_trailers(status, &message)).is_ok(),
                    None => trailers_only(&mut respond, status, &message).is_ok(),
                };
                if written {
                    shared.done(call, notify);
                } else {
                    shared.cancelled(call);
                }
                return;
            }
            None => false,
        };
        if !sent {
            shared.cancelled(call);
            if let Some(s) = stream.as_mut() {
                s.send_reset(h2::Reason::CANCEL);
            }
            return;
        }
    }
}

/// Sends `data` as the peer's window allows; false once the stream is gone.
async fn send_data(stream: &mut SendStream<Bytes>, mut data: Bytes) -> bool {
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(granted)) if granted > 0 => {
                let chunk = data.split_to(granted.min(data.len()));
                if stream.send_data(chunk, false).is_err() {
                    return false;
                }
            }
            Some(Ok(_)) => {}
            _ => return false,
        }
    }
    true
}

fn grpc_headers() -> Response<()> {
    let mut response = Response::new(());
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    // Messages are never compressed here, either way.
    headers.insert("grpc-accept-encoding", HeaderValue::from_static("identity"));
    response
}

fn status_trailers(status: u32, message: &str) -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from(status));
    if !message.is_empty() {
        if let Ok(value) = HeaderValue::from_str(&frame::percent_encode(message)) {
            trailers.insert("grpc-message", value);
        }
    }
    trailers
}

/// A status with no answer before it: headers and status in one HEADERS frame.
fn trailers_only(
    respond: &mut SendResponse<Bytes>,
    status: u32,
    message: &str,
) -> Result<(), h2::Error> {
    let mut response = grpc_headers();
    response
        .headers_mut()
        .extend(status_trailers(status, message));
    respond.send_response(response, true).map(|_| ())
}
