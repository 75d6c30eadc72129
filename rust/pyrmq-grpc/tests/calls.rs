//! Calls made over real HTTP/2 connections by h2's client, answered by a test standing in for
//! the broker: what arrives as events, what the client reads back, and how calls end.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use http::{HeaderMap, Request};
use pyrmq_grpc::{frame, Config, Event, Transport};
use tokio::net::TcpStream;

const SERVICE: &str = "test.Service";

fn transport(max_message_bytes: usize) -> Transport {
    let config = Config {
        service: SERVICE.to_owned(),
        client_streaming: HashSet::from(["Chat".to_owned()]),
        max_message_bytes,
        tls: None,
    };
    Transport::bind("127.0.0.1", 0, config).unwrap()
}

/// Events until `count` have come, or 5 s.
async fn events(t: &Transport, count: usize) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while got.len() < count {
        assert!(Instant::now() < deadline, "only {got:?}");
        got.extend(t.take_events());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    got
}

async fn connect(t: &Transport) -> SendRequest<Bytes> {
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await.unwrap();
    let (client, conn) = h2::client::handshake(socket).await.unwrap();
    tokio::spawn(conn);
    client
}

fn request(method: &str, headers: &[(&str, &str)]) -> Request<()> {
    let mut builder = Request::post(format!("http://127.0.0.1/{SERVICE}/{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    builder.body(()).unwrap()
}

/// The messages and trailers of an answer (trailers-only answers: their headers).
async fn answer(response: h2::client::ResponseFuture) -> (Vec<Bytes>, HeaderMap) {
    let response = response.await.unwrap();
    assert_eq!(response.status(), 200);
    if response.headers().contains_key("grpc-status") {
        return (Vec::new(), response.headers().clone());
    }
    let mut body = response.into_body();
    let mut decoder = frame::Decoder::new(1 << 20);
    let mut messages = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        decoder.push(&chunk);
        while let Some(m) = decoder.next_message().unwrap() {
            messages.push(m);
        }
    }
    (messages, body.trailers().await.unwrap().unwrap())
}

fn status(trailers: &HeaderMap) -> (&str, &str) {
    let get = |k| trailers.get(k).map_or("", |v| v.to_str().unwrap());
    (get("grpc-status"), get("grpc-message"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unary_call_arrives_whole_and_is_answered() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (response, mut body) = client
        .send_request(
            request(
                "Send",
                &[("x-mq-client-id", "c1"), ("grpc-timeout", "1500m")],
            ),
            false,
        )
        .unwrap();
    // The request in two DATA frames, split inside the prefix.
    let framed = frame::encode(b"hello");
    body.send_data(framed.slice(..3), false).unwrap();
    body.send_data(framed.slice(3..), true).unwrap();
    let [Event::Start {
        call,
        method,
        metadata,
        peer,
        timeout,
        request,
    }] = &events(&t, 1).await[..]
    else {
        panic!("not one start")
    };
    assert_eq!(method, "Send");
    assert!(metadata.contains(&("x-mq-client-id".to_owned(), "c1".to_owned())));
    assert!(!metadata
        .iter()
        .any(|(k, _)| k == "content-type" || k == "grpc-timeout"));
    assert!(peer.starts_with("ipv4:127.0.0.1:"), "{peer}");
    assert_eq!(*timeout, Some(Duration::from_millis(1500)));
    assert_eq!(request.as_deref(), Some(&b"hello"[..]));
    assert!(t.reply(*call, b"world"));
    let (messages, trailers) = answer(response).await;
    assert_eq!(messages, [Bytes::from_static(b"world")]);
    assert_eq!(status(&trailers), ("0", ""));
    // Answered: the call is gone.
    assert!(!t.reply(*call, b"again"));
    assert!(!t.finish(*call, 2, "late", false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_before_and_after_answers() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (failing, mut body) = client.send_request(request("Send", &[]), false).unwrap();
    body.send_data(frame::encode(b"x"), true).unwrap();
    let (streaming, mut body) = client.send_request(request("Receive", &[]), false).unwrap();
    body.send_data(frame::encode(b"y"), true).unwrap();
    let started = events(&t, 2).await;
    let call_of = |wanted: &[u8]| {
        started
            .iter()
            .find_map(|e| match e {
                Event::Start { call, request, .. } if request.as_deref() == Some(wanted) => {
                    Some(*call)
                }
                _ => None,
            })
            .unwrap()
    };
    assert!(t.finish(call_of(b"x"), 5, "no topic 100% é", false));
    let (messages, trailers) = answer(failing).await;
    assert!(messages.is_empty());
    assert_eq!(status(&trailers), ("5", "no topic 100%25 %C3%A9"));
    let receive = call_of(b"y");
    let big = vec![9u8; 70_000];
    assert!(t.send(receive, [&b"1"[..], b""]));
    assert!(t.send(receive, [&big[..]]));
    assert!(t.finish(receive, 0, "", true));
    assert!(!t.send(receive, [&b"after the status"[..]]));
    let (messages, trailers) = answer(streaming).await;
    let lens: Vec<usize> = messages.iter().map(Bytes::len).collect();
    assert_eq!(lens, [1, 0, 70_000]);
    assert_eq!(status(&trailers), ("0", ""));
    // Asked for, the caller hears that the status went out.
    let got = events(&t, 1).await;
    assert!(
        matches!(got[..], [Event::Done { call }] if call == receive),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_arrives_message_by_message() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (response, mut body) = client.send_request(request("Chat", &[]), false).unwrap();
    let [Event::Start { call, request, .. }] = &events(&t, 1).await[..] else {
        panic!("not one start")
    };
    assert!(request.is_none());
    let call = *call;
    let mut both = frame::encode(b"one").to_vec();
    both.extend_from_slice(&frame::encode(b"two"));
    body.send_data(Bytes::from(both), false).unwrap();
    let got = events(&t, 2).await;
    let messages: Vec<&[u8]> = got
        .iter()
        .map(|e| match e {
            Event::Message { call: c, message } if *c == call => &message[..],
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(messages, [&b"one"[..], b"two"]);
    // Answered while the client still sends.
    assert!(t.send(call, [&b"ack"[..]]));
    body.send_data(frame::encode(b"three"), true).unwrap();
    let got = events(&t, 2).await;
    assert!(matches!(&got[0], Event::Message { message, .. } if &message[..] == b"three"));
    assert!(matches!(got[1], Event::HalfClose { call: c } if c == call));
    assert!(t.finish(call, 0, "", false));
    let (messages, trailers) = answer(response).await;
    assert_eq!(messages, [Bytes::from_static(b"ack")]);
    assert_eq!(status(&trailers), ("0", ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_call_is_cancelled_and_takes_no_more_answers() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (_response, mut body) = client.send_request(request("Receive", &[]), false).unwrap();
    body.send_data(frame::encode(b"r"), true).unwrap();
    let [Event::Start { call, .. }] = &events(&t, 1).await[..] else {
        panic!("not one start")
    };
    body.send_reset(h2::Reason::CANCEL);
    let got = events(&t, 1).await;
    assert!(
        matches!(got[..], [Event::Cancel { call: c }] if c == *call),
        "{got:?}"
    );
    assert!(!t.send(*call, [&b"late"[..]]));
    // A client whose connection goes away cancels its calls too, streaming or not.
    let socket = TcpStream::connect(("127.0.0.1", t.port())).await.unwrap();
    let (mut other, conn) = h2::client::handshake(socket).await.unwrap();
    let driving = tokio::spawn(conn);
    let (_chat, mut body) = other.send_request(request("Chat", &[]), false).unwrap();
    body.send_data(frame::encode(b"hi"), false).unwrap();
    let (_receive, mut unary) = other.send_request(request("Receive", &[]), false).unwrap();
    unary.send_data(frame::encode(b"r"), true).unwrap();
    let got = events(&t, 3).await;
    let mut open: Vec<u64> = got
        .iter()
        .filter_map(|e| match e {
            Event::Start { call, .. } => Some(*call),
            _ => None,
        })
        .collect();
    assert_eq!(open.len(), 2, "{got:?}");
    driving.abort();
    let mut cancelled: Vec<u64> = events(&t, 2)
        .await
        .iter()
        .map(|e| match e {
            Event::Cancel { call } => *call,
            other => panic!("{other:?}"),
        })
        .collect();
    open.sort_unstable();
    cancelled.sort_unstable();
    assert_eq!(cancelled, open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_calls_get_a_status_and_never_reach_the_caller() {
    let t = transport(16);
    let mut client = connect(&t).await;
    let unknown = Request::post("http://127.0.0.1/other.Service/Send")
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let (response, _) = client.send_request(unknown, true).unwrap();
    assert_eq!(status(&answer(response).await.1).0, "12");

    // A client that could compress but sends plain messages is served; a compressed message
    // is refused.
    let (response, mut body) = client
        .send_request(request("Send", &[("grpc-encoding", "gzip")]), false)
        .unwrap();
    let mut compressed = frame::encode(b"z").to_vec();
    compressed[0] = 1;
    body.send_data(Bytes::from(compressed), true).unwrap();
    let (_, trailers) = answer(response).await;
    assert_eq!(
        status(&trailers),
        ("12", "compressed messages are not supported")
    );

    let (response, mut body) = client.send_request(request("Send", &[]), false).unwrap();
    body.send_data(frame::encode(&[0u8; 17]), true).unwrap();
    let (_, trailers) = answer(response).await;
    assert_eq!(status(&trailers).0, "8");

    let (response, mut body) = client.send_request(request("Send", &[]), false).unwrap();
    let mut two = frame::encode(b"a").to_vec();
    two.extend_from_slice(&frame::encode(b"b"));
    body.send_data(Bytes::from(two), true).unwrap();
    assert_eq!(status(&answer(response).await.1).0, "12");

    let (response, mut body) = client.send_request(request("Send", &[]), false).unwrap();
    body.send_data(frame::encode(b"abc").slice(..6), true)
        .unwrap();
    assert_eq!(status(&answer(response).await.1).0, "13");

    let plain = Request::post(format!("http://127.0.0.1/{SERVICE}/Send"))
        .body(())
        .unwrap();
    let (response, _) = client.send_request(plain, true).unwrap();
    assert_eq!(response.await.unwrap().status(), 415);
    assert!(t.take_events().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_ends_open_calls_within_the_grace() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (response, mut body) = client.send_request(request("Chat", &[]), false).unwrap();
    body.send_data(frame::encode(b"open"), false).unwrap();
    events(&t, 2).await;
    let started = Instant::now();
    tokio::task::spawn_blocking(move || t.close())
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(3));
    // The call never got a status: the connection went away under it.
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        match response.await {
            Ok(r) => r.into_body().data().await.and_then(Result::ok).is_none(),
            Err(_) => true,
        }
    })
    .await;
    assert_eq!(ended, Ok(true));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_is_cancelled() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (_response, mut body) = client
        .send_request(request("Chat", &[("grpc-timeout", "300m")]), false)
        .unwrap();
    body.send_data(frame::encode(b"x"), false).unwrap();
    let got = events(&t, 2).await;
    let Event::Start { call, .. } = got[0] else {
        panic!("{got:?}")
    };
    let started = Instant::now();
    let got = events(&t, 1).await;
    assert!(
        matches!(got[..], [Event::Cancel { call: c }] if c == call),
        "{got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(!t.send(call, [&b"late"[..]]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stream_is_read_only_as_fast_as_its_messages_are_taken() {
    let t = transport(1 << 20);
    let mut client = connect(&t).await;
    let (_response, mut body) = client.send_request(request("Chat", &[]), false).unwrap();
    let [Event::Start { call, .. }] = &events(&t, 1).await[..] else {
        panic!("not one start")
    };
    let call = *call;
    // Far more than the stream's window: the client can send only what the server reads.
    let sender = tokio::spawn(async move {
        let mut sent = 0usize;
        while sent < 1_000_000 {
            body.reserve_capacity(1 << 16);
            match std::future::poll_fn(|cx| body.poll_capacity(cx)).await {
                Some(Ok(n)) if n > 0 => {
                    let many: Vec<u8> = (0..n / 5).flat_map(|_| frame::encode(b"")).collect();
                    sent += many.len() / 5;
                    body.send_data(Bytes::from(many), false).unwrap();
                }
                _ => break,
            }
        }
        sent
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let handed = t.take_events().len();
    assert_eq!(handed, 64, "messages handed over before any was taken");
    assert!(!sender.is_finished());
    // Each message taken lets one more through.
    for _ in 0..10 {
        t.consumed(call);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(t.take_events().len(), 10);
    sender.abort();
}
