//! wrk with `load-tests/lib/wrk-bench.lua` (one script for every HTTP row) and the
//! `BENCH_WRK {...}` line its `done()` prints; redis-benchmark's `--csv` result.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::{Deserialize, Serialize};

/// What one wrk run sends.
#[derive(Debug, Clone)]
pub enum Mode<'a> {
    /// GET /healthz.
    Healthz,
    /// GET /sales/{sale}: the public status a waiting crowd polls.
    Sale { sale: &'a str },
    /// POST /buy on `sale`, every request a new user `<prefix>-<counter>-<thread>`.
    Buy { sale: &'a str, prefix: &'a str },
    /// POST /buy on `sale` as [`Mode::Buy`], each request from a new client address (an
    /// `X-Forwarded-For` of its own: the app must trust 127.0.0.1 as a proxy).
    BuyXff { sale: &'a str, prefix: &'a str },
    /// POST /buy spread over the sales `<sales>-0` .. `<sales>-<count - 1>` (taking turns), every
    /// request a new user `<prefix>-<counter>-<thread>`.
    BuySales { sales: &'a str, count: u32, prefix: &'a str },
    /// POST /buy on `sale` (`SECKILL_AUTH=jwt`), every request with the next bearer token of
    /// `tokens` (one per line, each a distinct user; wrk cannot sign).
    BuyJwt { sale: &'a str, tokens: &'a Path },
    /// POST /buy on `sale` cycling over the users `<prefix>-0` .. `<prefix>-<users - 1>`, who
    /// bought beforehand: every answer a 409; a sample of the bodies is checked for an order id.
    Repeat { sale: &'a str, prefix: &'a str, users: u32 },
    /// POST /sales/{sale}/queue, every request a new buyer `<prefix>-<counter>-<thread>` joining.
    QueueJoin { sale: &'a str, prefix: &'a str },
    /// GET /sales/{sale}/queue with a ticket, cycling over `tickets` ("<user> <ticket>" lines).
    QueuePoll { sale: &'a str, tickets: &'a Path },
}

/// One wrk invocation.
#[derive(Debug, Clone)]
pub struct Wrk<'a> {
    pub threads: u32,
    pub connections: u32,
    pub seconds: u64,
    pub url: &'a str,
    pub mode: Mode<'a>,
    /// Paced: total requests per second (the script's `delay()`), else closed loop.
    pub rate: Option<u64>,
}

impl Wrk<'_> {
    pub fn command(&self, repo: &Path) -> Command {
        let mut cmd = Command::new("wrk");
        cmd.arg(format!("-t{}", self.threads))
            .arg(format!("-c{}", self.connections))
            .arg(format!("-d{}s", self.seconds))
            .args(["--latency", "--timeout", "5s", "-s"])
            .arg(repo.join("load-tests/lib/wrk-bench.lua"))
            .arg(self.url)
            .arg("--");
        match &self.mode {
            Mode::Healthz => cmd.arg("healthz"),
            Mode::Sale { sale } => cmd.args(["sale", sale]),
            Mode::Buy { sale, prefix } => cmd.args(["buy", sale, prefix]),
            Mode::BuyXff { sale, prefix } => cmd.args(["buy-xff", sale, prefix, &self.threads.to_string()]),
            Mode::BuySales { sales, count, prefix } => {
                cmd.args(["buy-sales", sales, &count.to_string(), prefix, &self.threads.to_string()])
            }
            Mode::BuyJwt { sale, tokens } => cmd.args(["buy-jwt", sale]).arg(tokens).arg(self.threads.to_string()),
            Mode::Repeat { sale, prefix, users } => {
                cmd.args(["repeat", sale, prefix, &users.to_string(), &self.threads.to_string()])
            }
            Mode::QueueJoin { sale, prefix } => cmd.args(["queue-join", sale, prefix]),
            Mode::QueuePoll { sale, tickets } => {
                cmd.args(["queue-poll", sale]).arg(tickets).arg(self.threads.to_string())
            }
        };
        if let Some(rate) = self.rate {
            cmd.env("BENCH_RATE", rate.to_string()).env("BENCH_THREADS", self.threads.to_string());
        }
        cmd
    }
}

/// wrk's latency percentiles in µs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latency {
    pub mean: f64,
    pub max: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
}

/// The `BENCH_WRK` line.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WrkOut {
    pub requests: u64,
    pub duration_us: u64,
    pub errors: BTreeMap<String, u64>,
    pub latency_us: Latency,
    pub statuses: BTreeMap<String, u64>,
    /// Repeat mode: `sampled` bodies (every 16th), of which `order_id` carried one.
    #[serde(default)]
    pub bodies: BTreeMap<String, u64>,
}

impl WrkOut {
    /// The last `BENCH_WRK` line of wrk's output.
    pub fn parse(stdout: &str) -> Option<Self> {
        stdout.lines().rev().find_map(|l| l.strip_prefix("BENCH_WRK ")).and_then(|j| serde_json::from_str(j).ok())
    }

    pub fn seconds(&self) -> f64 {
        self.duration_us as f64 / 1e6
    }

    /// Requests per second.
    pub fn rate(&self) -> f64 {
        if self.duration_us == 0 { 0.0 } else { self.requests as f64 / self.seconds() }
    }

    pub fn status(&self, code: &str) -> u64 {
        self.statuses.get(code).copied().unwrap_or(0)
    }

    /// Socket errors (connect, read, write, timeout), without wrk's non-2xx count.
    pub fn socket_errors(&self) -> BTreeMap<String, u64> {
        self.errors.iter().filter(|(k, v)| k.as_str() != "status" && **v > 0).map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// wrk's errors (socket errors and non-2xx/3xx answers) plus requests without a counted status.
    pub fn failed(&self) -> u64 {
        let answered: u64 = self.statuses.values().sum();
        self.errors.values().sum::<u64>() + self.requests.saturating_sub(answered)
    }
}

/// One redis-benchmark `--csv` result (latencies in ms).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RedisBench {
    pub rate: f64,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

impl RedisBench {
    /// The last data row under the `"test","rps",...` header.
    pub fn parse(stdout: &str) -> Option<Self> {
        let mut header: Option<Vec<String>> = None;
        let mut found = None;
        for line in stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let cells: Vec<String> = line.trim_matches('"').split("\",\"").map(str::to_string).collect();
            if cells[0].starts_with("test") {
                header = Some(cells);
            } else if let Some(h) = header.as_ref().filter(|h| h.len() == cells.len()) {
                let get = |key: &str| h.iter().position(|c| c == key).and_then(|i| cells[i].parse::<f64>().ok());
                found = Some(Self {
                    rate: get("rps")?,
                    mean_ms: get("avg_latency_ms"),
                    p50_ms: get("p50_latency_ms"),
                    p99_ms: get("p99_latency_ms"),
                    max_ms: get("max_latency_ms"),
                });
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_bench_wrk_line() {
        let out = "Running 1s test\nBENCH_WRK {\"requests\":100,\"duration_us\":2000000,\"bytes\":1,\"errors\":{\"connect\":0,\"read\":1,\"write\":0,\"status\":3,\"timeout\":0},\"latency_us\":{\"mean\":10.0,\"stdev\":1.0,\"max\":90,\"p50\":8,\"p90\":20,\"p99\":50,\"p999\":80},\"statuses\":{\"201\":97,\"409\":2},\"bodies\":{\"sampled\":6,\"order_id\":5}}\n";
        let w = WrkOut::parse(out).unwrap();
        assert_eq!(w.rate(), 50.0);
        assert_eq!(w.status("201"), 97);
        assert_eq!(w.socket_errors().len(), 1);
        assert_eq!(w.failed(), 5);
        assert_eq!(w.bodies["order_id"], 5);
    }

    #[test]
    fn parses_redis_benchmark_csv() {
        let out = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\"EVALSHA\",\"35311.44\",\"1.2\",\"0.1\",\"1.14\",\"2.0\",\"3.86\",\"9.1\"\n";
        let r = RedisBench::parse(out).unwrap();
        assert_eq!(r.rate, 35311.44);
        assert_eq!(r.p99_ms, Some(3.86));
        assert!(RedisBench::parse("garbage").is_none());
    }
}
