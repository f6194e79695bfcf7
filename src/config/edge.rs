//! What a connection may hold before a request reaches a handler (`crate::http::edge`), and
//! where `/metrics` and `/readyz` are served.

use std::net::SocketAddr;
use std::time::Duration;

use super::duration;
use crate::http::edge::EdgeSettings;

/// The edge's bounds (docs/operations.md: "The edge").
#[derive(Debug, Clone, clap::Args)]
pub struct EdgeConfig {
    /// The longest a request's head, and then its body, may take to arrive once begun (a new
    /// connection's first head: from the connection's start); then the client gets 408 and the
    /// connection is closed (a slow or stalled upload holds nothing; a new connection that sent
    /// nothing is closed without an answer).
    #[arg(long, env = "SECKILL_REQUEST_READ_TIMEOUT", default_value = "5s", value_parser = read_timeout,
          global = true)]
    pub request_read_timeout: Duration,

    /// The longest the answers written on a connection (a refusal's included) may wait for the
    /// client to take them (1s-5m), counted from when a write first waits until all are written;
    /// then the connection is closed (a client that never reads holds nothing for long).
    #[arg(long, env = "SECKILL_RESPONSE_WRITE_TIMEOUT", default_value = "10s", value_parser = write_timeout,
          global = true)]
    pub response_write_timeout: Duration,

    /// Requests of one connection handed to the handlers ahead of the answers written (1-16);
    /// further pipelined requests wait in the kernel until those answers are taken.
    #[arg(long, env = "SECKILL_MAX_PIPELINED_REQUESTS", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..=16), global = true)]
    pub max_pipelined_requests: u32,

    /// The largest request head (request line and headers), in bytes (1024-131072); a larger
    /// one gets 431 and the connection is closed.
    #[arg(long, env = "SECKILL_MAX_HEAD_BYTES", default_value_t = 8192,
          value_parser = clap::value_parser!(u32).range(1024..=131_072), global = true)]
    pub max_head_bytes: u32,

    /// Open connections one client may hold (an IPv4 address, an IPv6 network of
    /// SECKILL_IPV6_PREFIX bits; a trusted proxy's count only against the budget), and the IPv6
    /// clients of one /48 together as many; a client, and a /48, also hold at most a client's
    /// share of the free part of the connection budget, derived from nofile. A connection over
    /// either gets 503 and is closed. 0: no limit per client (only the budget).
    #[arg(long, env = "SECKILL_MAX_CONNECTIONS_PER_CLIENT", default_value_t = 256, global = true)]
    pub max_connections_per_client: u32,

    /// Serve /metrics and /readyz on this address only (e.g. 0.0.0.0:9091 for Prometheus and
    /// probes), not on SECKILL_LISTEN. Unset: both on SECKILL_LISTEN.
    #[arg(long, env = "SECKILL_METRICS_LISTEN", global = true)]
    pub metrics_listen: Option<SocketAddr>,
}

impl Default for EdgeConfig {
    /// 5 s to read a request, 10 s to write its answers, 4 requests pipelined ahead, 8 KiB
    /// heads, 256 connections per client, metrics on the API port.
    fn default() -> Self {
        Self {
            request_read_timeout: Duration::from_secs(5),
            response_write_timeout: Duration::from_secs(10),
            max_pipelined_requests: 4,
            max_head_bytes: 8192,
            max_connections_per_client: 256,
            metrics_listen: None,
        }
    }
}

impl EdgeConfig {
    /// The bounds the HTTP server applies.
    pub fn settings(&self) -> EdgeSettings {
        EdgeSettings {
            read_timeout: self.request_read_timeout,
            write_timeout: self.response_write_timeout,
            max_pipelined: self.max_pipelined_requests,
            max_head_bytes: self.max_head_bytes as usize,
            max_connections_per_client: self.max_connections_per_client,
        }
    }
}

fn read_timeout(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_millis(100), "the request read timeout is 100ms-5m")
}

fn write_timeout(s: &str) -> Result<Duration, String> {
    within(s, Duration::from_secs(1), "the response write timeout is 1s-5m")
}

/// A duration from `min` to 5 minutes, else `refusal`.
fn within(s: &str, min: Duration, refusal: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if (min..=Duration::from_secs(300)).contains(&d) { Ok(d) } else { Err(refusal.into()) }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::config::Cli;

    #[test]
    fn the_edge_bounds_have_defaults_and_limits() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["seckill", "migrate"], args].concat());
        let edge = parse(&[]).unwrap().config().unwrap().edge;
        assert_eq!((edge.max_head_bytes, edge.max_connections_per_client), (8192, 256));
        assert_eq!(edge.request_read_timeout, std::time::Duration::from_secs(5));
        assert_eq!((edge.response_write_timeout.as_secs(), edge.max_pipelined_requests), (10, 4));
        assert!(parse(&["--response-write-timeout", "500ms"]).is_err());
        assert!(parse(&["--max-pipelined-requests", "0"]).is_err());
        assert!(parse(&["--max-pipelined-requests", "17"]).is_err());
        assert!(edge.metrics_listen.is_none());
        assert!(parse(&["--max-head-bytes", "100"]).is_err());
        assert!(parse(&["--request-read-timeout", "0s"]).is_err());
        assert!(parse(&["--request-read-timeout", "1h"]).is_err());
        let set = parse(&["--metrics-listen", "127.0.0.1:9091", "--max-connections-per-client", "0"]).unwrap();
        assert_eq!(set.command.config().unwrap().edge.metrics_listen, Some("127.0.0.1:9091".parse().unwrap()));
    }
}
