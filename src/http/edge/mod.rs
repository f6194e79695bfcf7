//! The edge: what a connection may make the server hold. Each accepted TCP stream is admitted
//! against its listener's connection budget and its client's share of it (`connections`) and
//! wrapped in an [`EdgeStream`] (`stream`) that bounds each request's head size and read time,
//! hands actix-http at most a few requests ahead of the answers it has written, and closes a
//! connection whose answers are not taken within the write timeout, following the requests'
//! heads and bodies as they arrive (`framing`). A refusal is a JSON answer like every other
//! error (heads actix-http would refuse with an empty answer included), then the connection is
//! closed, and it is counted in
//! `seckill_edge_refusals_total{reason}`, as are the connections closed at the write timeout. A
//! connection refused at once holds a descriptor outside the budget while its answer is written
//! and, for at most [`LINGERING_REFUSALS`] at a time, while it lingers.
//!
//! What the edge cannot do alone: a crowd of millions of addresses, or a flood that fills the
//! listen backlog, needs a proxy or a load balancer in front (docs/operations.md).

mod connections;
mod framing;
mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use prometheus::IntCounter;

pub use self::connections::{ClientConnections, ConnectionSlot, MAX_BUDGET};
pub use self::stream::EdgeStream;
use crate::http::client_ip::TrustedProxies;
use crate::metrics::Metrics;

/// The edge's bounds (`SECKILL_REQUEST_READ_TIMEOUT`, `SECKILL_RESPONSE_WRITE_TIMEOUT`,
/// `SECKILL_MAX_PIPELINED_REQUESTS`, `SECKILL_MAX_HEAD_BYTES`,
/// `SECKILL_MAX_CONNECTIONS_PER_CLIENT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EdgeSettings {
    /// The longest a request's head, and then its body, may take to arrive once begun (and a
    /// new connection's first head to begin).
    pub read_timeout: Duration,
    /// The longest the answers written on a connection may wait for the client to take them.
    pub write_timeout: Duration,
    /// The requests handed to actix-http ahead of the answers it has written.
    pub max_pipelined: u32,
    /// The largest request head (request line and headers), in bytes.
    pub max_head_bytes: usize,
    /// Open connections per client key, who also holds at most its share of what is free (0: no
    /// limit per client, only the budget).
    pub max_connections_per_client: u32,
}

/// The connections each listener may hold, trusted proxies' included (`crate::app` derives them
/// from `nofile`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// `SECKILL_LISTEN`'s.
    pub public: u32,
    /// `SECKILL_METRICS_LISTEN`'s, when it is set (its own, so probes and scrapes get in
    /// whatever the public side holds).
    pub operations: Option<u32>,
}

/// Connections refused at once that may linger at a time (each at most 100 ms, so that its
/// answer is not lost to a reset); the others are closed as soon as their answer is written.
pub const LINGERING_REFUSALS: u32 = 32;

/// Accepted connections that may wait for an HTTP worker to admit or refuse them: past them,
/// actix-server's accept loop waits for a connection to close rather than take a descriptor
/// that may not be there (`crate::app::server`).
pub const QUEUED_CONNECTIONS: u32 = 16;

/// Why the edge closed a connection, with the answer the client gets first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 503 `too_many_connections`: the client holds what it may of the listener's budget, or the
    /// budget is spent.
    TooManyConnections,
    /// 431 `header_too_large`: the request head is over the maximum size or 96 header lines.
    HeadTooLarge,
    /// 400 `bad_request`: a head actix-http refuses (malformed, a second `Content-Length` or
    /// `Host`, no `Host` in HTTP/1.1, a URI it cannot parse).
    BadRequest,
    /// 411 `length_required`: a chunked body (bodies here need a `Content-Length`).
    LengthRequired,
    /// 408 `request_timeout`: the head or the body stopped arriving.
    ReadTimeout,
}

impl Refusal {
    /// Every refusal, in the order of [`Edge`]'s answers and counters.
    pub const ALL: [Refusal; 5] =
        [Self::TooManyConnections, Self::HeadTooLarge, Self::BadRequest, Self::LengthRequired, Self::ReadTimeout];

    /// The `reason` label and the JSON `error` code.
    pub fn code(self) -> &'static str {
        match self {
            Self::TooManyConnections => "too_many_connections",
            Self::HeadTooLarge => "header_too_large",
            Self::BadRequest => "bad_request",
            Self::LengthRequired => "length_required",
            Self::ReadTimeout => "request_timeout",
        }
    }

    fn status_line(self) -> &'static str {
        match self {
            Self::TooManyConnections => "503 Service Unavailable",
            Self::HeadTooLarge => "431 Request Header Fields Too Large",
            Self::BadRequest => "400 Bad Request",
            Self::LengthRequired => "411 Length Required",
            Self::ReadTimeout => "408 Request Timeout",
        }
    }

    fn message(self, settings: &EdgeSettings) -> String {
        match self {
            Self::TooManyConnections => match settings.max_connections_per_client {
                0 => "the server holds as many open connections as it can; retry in a moment".into(),
                cap => format!(
                    "this client holds as many open connections as the server can give it now (at most {cap}, fewer \
                     while it is busy); reuse one"
                ),
            },
            Self::HeadTooLarge => {
                format!("the request head is over {} bytes or 96 header lines", settings.max_head_bytes)
            }
            Self::BadRequest => {
                "the request head is not valid HTTP/1.1 (one Host and at most one Content-Length)".into()
            }
            Self::LengthRequired => "a request body needs a Content-Length (no chunked bodies)".into(),
            Self::ReadTimeout => {
                format!("the request did not arrive within {} ms", settings.read_timeout.as_millis())
            }
        }
    }

    /// The whole HTTP/1.1 answer: the JSON error body, `Connection: close`.
    fn answer(self, settings: &EdgeSettings) -> Box<[u8]> {
        let body = serde_json::json!({"error": self.code(), "message": self.message(settings)}).to_string();
        let retry = if self == Self::TooManyConnections { "retry-after: 1\r\n" } else { "" };
        format!(
            "HTTP/1.1 {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{retry}connection: \
                close\r\n\r\n{body}",
            self.status_line(),
            body.len()
        )
        .into_bytes()
        .into_boxed_slice()
    }
}

/// A refused connection's place to linger; dropping it gives the place back.
struct LingerPermit(Arc<Edge>);

impl Drop for LingerPermit {
    fn drop(&mut self) {
        self.0.lingering.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The `reason` of the connections closed because their answers were not taken in time.
pub const WRITE_TIMEOUT: &str = "write_timeout";

/// The edge of one server: its bounds, each listener's open connections, the refusals' answers
/// (formatted once) and counters.
pub struct Edge {
    settings: EdgeSettings,
    public: Arc<ClientConnections>,
    operations: Option<Arc<ClientConnections>>,
    /// Refused connections lingering now.
    lingering: AtomicU32,
    answers: Vec<Box<[u8]>>,
    refused: Vec<IntCounter>,
    write_timeouts: IntCounter,
}

impl Edge {
    /// The edge for `settings` and `budget`; clients keyed as the rate limiter keys them.
    pub fn new(
        settings: EdgeSettings,
        budget: Budget,
        ipv6_prefix: u8,
        proxies: TrustedProxies,
        metrics: &Metrics,
    ) -> Arc<Self> {
        let cap = settings.max_connections_per_client;
        let connections = |budget| ClientConnections::new(budget, cap, ipv6_prefix, proxies.clone());
        Arc::new(Self {
            settings,
            public: connections(budget.public),
            operations: budget.operations.map(connections),
            lingering: AtomicU32::new(0),
            answers: Refusal::ALL.iter().map(|r| r.answer(&settings)).collect(),
            refused: Refusal::ALL.iter().map(|r| metrics.edge_refusals.with_label_values(&[r.code()])).collect(),
            write_timeouts: metrics.edge_refusals.with_label_values(&[WRITE_TIMEOUT]),
        })
    }

    /// A newly accepted stream from `peer` on the public listener (`operations`: on the metrics
    /// listener): admitted, or set to answer 503 and close (a peer already gone too).
    pub fn accept<S>(self: &Arc<Self>, io: S, peer: Option<SocketAddr>, operations: bool) -> EdgeStream<S> {
        let connections = if operations { self.operations.as_ref().unwrap_or(&self.public) } else { &self.public };
        match peer.and_then(|peer| connections.admit(peer.ip())) {
            Some(slot) => EdgeStream::new(io, self.clone(), Some(slot), None),
            None => EdgeStream::new(io, self.clone(), None, Some(Refusal::TooManyConnections)),
        }
    }

    /// The most connections the listeners hold at once, those refused and lingering included.
    pub fn most_held(&self) -> u32 {
        self.public.budget() + self.operations.as_ref().map_or(0, |o| o.budget()) + LINGERING_REFUSALS
    }

    /// The bounds this edge applies.
    pub fn settings(&self) -> &EdgeSettings {
        &self.settings
    }

    /// A place for a refused connection to linger, if fewer than [`LINGERING_REFUSALS`] do.
    fn linger(self: &Arc<Self>) -> Option<LingerPermit> {
        let taken = self
            .lingering
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < LINGERING_REFUSALS).then_some(n + 1));
        taken.is_ok().then(|| LingerPermit(self.clone()))
    }

    fn index(refusal: Refusal) -> usize {
        Refusal::ALL.iter().position(|r| *r == refusal).expect("every refusal is listed")
    }

    fn answer(&self, refusal: Refusal) -> &[u8] {
        &self.answers[Self::index(refusal)]
    }

    fn count(&self, refusal: Refusal) {
        self.refused[Self::index(refusal)].inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> EdgeSettings {
        EdgeSettings {
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_pipelined: 4,
            max_head_bytes: 8192,
            max_connections_per_client: 64,
        }
    }

    #[test]
    fn the_metrics_listener_has_a_budget_of_its_own() {
        let budget = Budget { public: 1, operations: Some(1) };
        let edge = Edge::new(settings(), budget, 64, TrustedProxies::default(), &Metrics::new());
        let peer = Some("192.0.2.1:1000".parse().unwrap());
        let _held = edge.accept((), peer, false);
        let _refused = edge.accept((), peer, false);
        assert_eq!((edge.public.open().0, edge.refused[Edge::index(Refusal::TooManyConnections)].get()), (1, 1));
        let _probe = edge.accept((), peer, true);
        assert_eq!(edge.operations.as_ref().map(|o| o.open().0), Some(1), "admitted on the metrics listener");
        assert_eq!(edge.most_held(), 2 + LINGERING_REFUSALS);
    }

    #[test]
    fn every_answer_is_http_with_a_json_error_of_its_exact_length() {
        let settings = settings();
        for refusal in Refusal::ALL {
            let answer = String::from_utf8(refusal.answer(&settings).into_vec()).unwrap();
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            assert!(head.contains(&format!("content-length: {}\r\n", body.len())), "{answer}");
            assert!(head.ends_with("connection: close"), "{answer}");
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(json["error"], refusal.code());
        }
    }
}
