//! The edge stream's own tests: what a connection may hold, and when it is closed.

use std::time::Duration;

use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::http::edge::{EdgeSettings, LINGERING_REFUSALS};
use crate::metrics::Metrics;

fn edge(max_head_bytes: usize) -> Arc<Edge> {
    let settings = EdgeSettings {
        read_timeout: Duration::from_millis(200),
        write_timeout: Duration::from_millis(200),
        max_pipelined: 2,
        max_head_bytes,
        max_connections_per_client: 0,
    };
    let budget = crate::http::edge::Budget { public: 100, operations: None };
    Edge::new(settings, budget, 64, Default::default(), &Metrics::new())
}

#[tokio::test]
async fn pipelined_requests_wait_until_the_answers_ahead_of_them_are_written() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut edge_side = EdgeStream::new(server, edge(1024), None, None);
    let (_client_read, mut client_write) = tokio::io::split(client);
    let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    client_write.write_all(&get.repeat(5)).await.unwrap();
    let mut seen = vec![0; 4096];
    let n = edge_side.read(&mut seen).await.unwrap();
    assert_eq!(&seen[..n], &get.repeat(2)[..], "two requests handed on");
    assert!(edge_side.read(&mut seen).now_or_never().is_none(), "the third waits for their answers");
    edge_side.flush().await.unwrap();
    assert!(edge_side.read(&mut seen).now_or_never().is_none(), "a flush with nothing written frees nothing");
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    edge_side.write_all(answer).await.unwrap();
    edge_side.flush().await.unwrap();
    let n = edge_side.read(&mut seen).await.unwrap();
    assert_eq!(&seen[..n], &get[..], "one answer written: one more, from what was held");
    assert!(edge_side.read(&mut seen).now_or_never().is_none(), "two are ahead again: the next waits");
    edge_side.write_all(answer).await.unwrap();
    edge_side.flush().await.unwrap();
    let n = edge_side.read(&mut seen).await.unwrap();
    assert_eq!(&seen[..n], &get[..], "and one more for the next answer");
}

#[tokio::test]
async fn answers_the_client_does_not_take_fail_at_the_write_deadline() {
    let (_client, server) = tokio::io::duplex(1024);
    let mut edge_side = EdgeStream::new(server, edge(1024), None, None);
    let started = Instant::now();
    let written = edge_side.write_all(&[b'x'; 4096]).await;
    assert_eq!(written.map_err(|err| err.kind()), Err(io::ErrorKind::TimedOut));
    assert!(started.elapsed() >= Duration::from_millis(200), "no sooner than the deadline");
    assert!(edge_side.write(b"x").await.is_err(), "and every write after it fails");
}

#[tokio::test]
async fn a_refusal_the_client_does_not_take_fails_at_the_write_deadline() {
    // The pipe holds 16 bytes each way, less than any refusal's answer, and the client never reads.
    let (client, server) = tokio::io::duplex(16);
    let mut edge_side = EdgeStream::new(server, edge(64), None, None);
    let (_client_read, mut client_write) = tokio::io::split(client);
    let sending = tokio::spawn(async move {
        // A head over the 64 bytes allowed: refused with 431.
        let _ = client_write.write_all(b"GET /healthz HTTP/1.1\r\nx-long: ").await;
        let _ = client_write.write_all(&[b'a'; 256]).await;
        client_write
    });
    let started = Instant::now();
    let mut seen = vec![0; 4096];
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match edge_side.read(&mut seen).await {
                Ok(n) if n > 0 => continue,
                other => break other,
            }
        }
    })
    .await
    .expect("the stream ends: the refusal's answer does not pin the connection");
    assert_eq!(ended.map_err(|err| err.kind()), Err(io::ErrorKind::TimedOut));
    assert!(started.elapsed() >= Duration::from_millis(200), "no sooner than the write deadline");
    drop(edge_side);
    drop(sending);
}

#[tokio::test]
async fn a_body_that_stops_arriving_gets_408_and_the_end_of_the_stream() {
    let (client, server) = tokio::io::duplex(4096);
    let mut edge_side = EdgeStream::new(server, edge(1024), None, None);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    client_write.write_all(b"POST /buy HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\n\r\n{\"sale").await.unwrap();
    let mut seen = vec![0; 4096];
    let n = edge_side.read(&mut seen).await.unwrap();
    assert!(n > 0, "the head and the start of the body reach actix");
    let started = Instant::now();
    let end = edge_side.read(&mut seen).await.unwrap();
    assert_eq!(end, 0, "then the stream ends");
    assert!(started.elapsed() >= Duration::from_millis(200), "no sooner than the deadline");
    let mut answer = String::new();
    client_read.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    assert!(answer.contains(r#""error":"request_timeout""#), "{answer}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_ends_at_the_deadline_without_an_answer() {
    let (client, server) = tokio::io::duplex(4096);
    let mut edge_side = EdgeStream::new(server, edge(1024), None, None);
    let (mut client_read, _client_write) = tokio::io::split(client);
    let started = Instant::now();
    let mut seen = vec![0; 4096];
    assert_eq!(edge_side.read(&mut seen).await.unwrap(), 0, "the stream ends");
    assert!(started.elapsed() >= Duration::from_millis(200), "no sooner than the deadline");
    assert_eq!(edge_side.read(&mut seen).await.unwrap(), 0, "and stays ended");
    drop(edge_side); // actix closes the connection once its stream has ended
    let mut answer = Vec::new();
    client_read.read_to_end(&mut answer).await.unwrap();
    assert!(answer.is_empty(), "no answer: {:?}", String::from_utf8_lossy(&answer));
}

#[tokio::test]
async fn connections_refused_at_once_linger_only_while_few_do() {
    let edge = edge(1024);
    let refused = || {
        let (client, server) = tokio::io::duplex(4096);
        (client, EdgeStream::new(server, edge.clone(), None, Some(Refusal::TooManyConnections)))
    };
    let mut lingering = Vec::new();
    for _ in 0..LINGERING_REFUSALS {
        let (client, mut stream) = refused();
        assert!(stream.read(&mut [0; 16]).now_or_never().is_none(), "answered, then lingering");
        lingering.push((client, stream));
    }
    let (mut client, mut stream) = refused();
    let end = stream.read(&mut [0; 16]).now_or_never().map(Result::unwrap);
    assert_eq!(end, Some(0), "one more ends as soon as its answer is written");
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains(r#""error":"too_many_connections""#), "{answer}");
    lingering.pop();
    let (_client, mut stream) = refused();
    assert!(stream.read(&mut [0; 16]).now_or_never().is_none(), "a place given back lingers again");
}

#[tokio::test]
async fn a_refusal_behind_an_owed_answer_ends_the_stream_without_writing_in_its_place() {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let mut edge_side = EdgeStream::new(server, edge(256), None, None);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let get = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    client_write.write_all(get).await.unwrap();
    let mut seen = vec![0; 4096];
    assert_eq!(edge_side.read(&mut seen).await.unwrap(), get.len(), "the first request is handed on");
    // Its handler runs; the next request's head is over the limit.
    client_write.write_all(b"GET /healthz HTTP/1.1\r\nx-long: ").await.unwrap();
    client_write.write_all(&[b'a'; 512]).await.unwrap();
    assert_eq!(edge_side.read(&mut seen).await.unwrap(), 0, "the stream ends for actix");
    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
    edge_side.write_all(answer).await.unwrap();
    edge_side.flush().await.unwrap();
    // The close lingers until the client closes too (not a reset under its unread input).
    let client = async move {
        let mut received = Vec::new();
        client_read.read_to_end(&mut received).await.unwrap();
        drop(client_write);
        received
    };
    let (closed, received) = tokio::join!(edge_side.shutdown(), client);
    closed.unwrap();
    assert_eq!(received, answer, "the owed answer, and no refusal in its place");
}
