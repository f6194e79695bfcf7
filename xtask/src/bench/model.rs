//! The report's vocabulary: what the driver collected ([`Results`]), one table row ([`Row`]),
//! its CPU columns, and the number formats of both tables.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use super::queue::{Drain, QueueStats};
use crate::measure::cpu::Usage;
use crate::measure::process::Run;
pub use crate::measure::stats::group;
use crate::measure::wrk::{RedisBench, WrkOut};

/// Free-form facts the driver recorded while running (`machine.*`, `setting.*`, `<row>.detail`,
/// `<row>.count`, `<row>.probe`, ...), as the bash driver's meta.tsv had them.
pub type Meta = BTreeMap<String, String>;

/// Everything one bench run measured, before it becomes a report.
#[derive(Default)]
pub struct Results {
    pub meta: Meta,
    /// wrk runs by row name.
    pub wrk: BTreeMap<String, Run>,
    /// redis-benchmark runs by row name.
    pub redis: BTreeMap<String, Run>,
    pub drain: Option<Drain>,
    pub queue: Option<QueueStats>,
    /// Postgres `persisted_at - created_at` of the in-stock run: orders, p50_ms, p99_ms, max_ms.
    pub lag: Option<Value>,
    /// The Redis commands run during a row, by row name (the storm rows).
    pub redis_calls: BTreeMap<String, RedisCalls>,
    /// (sale, `seckill reconcile` exit code, its JSON report).
    pub checks: Vec<(String, i32, Option<Value>)>,
    /// Where the app and worker logs were copied (`seckill-*.log`, `worker.log`).
    pub raw: PathBuf,
}

impl Results {
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.meta.get(key).map(String::as_str)
    }

    pub fn set(&mut self, key: impl Into<String>, value: impl ToString) {
        self.meta.insert(key.into(), value.to_string());
    }

    /// A wrk row with its parsed `BENCH_WRK` line.
    pub fn wrk(&self, name: &str) -> Result<(&Run, WrkOut), String> {
        let run = self.wrk.get(name).ok_or("not run")?;
        WrkOut::parse(&run.stdout).map(|out| (run, out)).ok_or_else(|| "no BENCH_WRK line in wrk output".into())
    }

    /// A redis-benchmark row with its parsed CSV.
    pub fn redis(&self, name: &str) -> Option<(&Run, RedisBench)> {
        let run = self.redis.get(name)?;
        RedisBench::parse(&run.stdout).map(|out| (run, out))
    }
}

/// CPU-seconds per wall second of each party while a row ran.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CpuCols {
    pub gen_cpu: Option<f64>,
    pub app_cpu: Option<f64>,
    pub redis_cpu: Option<f64>,
    pub pg_cpu: Option<f64>,
    pub busy_cpu: Option<f64>,
    pub steal_cpu: Option<f64>,
    pub other_cpu: Option<f64>,
}

impl CpuCols {
    /// `app` is the label counted as the app (`seckill`, or `worker` in the drain row).
    pub fn of(usage: &Usage, generator: bool, app: &str) -> Self {
        let wall = usage.wall_s;
        let mut cols = Self {
            gen_cpu: (generator && wall > 0.0).then(|| usage.generator() / wall),
            app_cpu: usage.per_wall(app),
            redis_cpu: usage.per_wall("redis"),
            pg_cpu: usage.per_wall("postgres"),
            busy_cpu: usage.per_wall("machine_busy"),
            steal_cpu: usage.per_wall("machine_steal"),
            other_cpu: None,
        };
        let ours: f64 = [cols.gen_cpu, cols.app_cpu, cols.redis_cpu, cols.pg_cpu].iter().flatten().sum();
        cols.other_cpu = cols.busy_cpu.map(|busy| (busy - ours).max(0.0));
        cols
    }
}

/// One row of the main table, or of an algorithm's side-by-side entry.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub key: String,
    pub scenario: String,
    pub unit: &'static str,
    pub rate: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub ratio: Option<f64>,
    pub detail: String,
    pub target: String,
    pub met: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statuses: Option<BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_errors: Option<BTreeMap<String, u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(flatten)]
    pub cpu: CpuCols,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub cost: String,
    /// Anything particular to one kind of row (runs, probe, calls, µs per request, lag, ...).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

impl Row {
    pub fn extra(&mut self, key: &str, value: impl Serialize) {
        self.extra.insert(key.to_string(), serde_json::to_value(value).unwrap_or(Value::Null));
    }

    pub fn extra_f64(&self, key: &str) -> Option<f64> {
        self.extra.get(key).and_then(Value::as_f64)
    }
}

/// CPU µs of the watched process `label` per request of a run.
pub fn us_per_request(run: &Run, requests: u64, label: &str) -> Option<f64> {
    run.usage.get(label).filter(|_| requests > 0).map(|cpu| cpu / requests as f64 * 1e6)
}

/// "CPU µs per operation: app 13.6, redis 0.0, generator 10.9".
pub fn cost_text(watched: &BTreeMap<String, f64>, ops: u64, generator_s: f64) -> String {
    if ops == 0 {
        return String::new();
    }
    let mut parts = vec![];
    for (label, key) in [("app", "seckill"), ("worker", "worker"), ("redis", "redis"), ("postgres", "postgres")] {
        if let Some(cpu) = watched.get(key).filter(|c| **c > 0.0005) {
            parts.push(format!("{label} {}", group1(cpu / ops as f64 * 1e6)));
        }
    }
    if generator_s > 0.0 {
        parts.push(format!("generator {}", group1(generator_s / ops as f64 * 1e6)));
    }
    if parts.is_empty() { String::new() } else { format!("CPU µs per operation: {}", parts.join(", ")) }
}

/// 1234.56 -> "1,234.6".
pub fn group1(value: f64) -> String {
    let tenths = (value * 10.0).round();
    format!("{}.{}", group((tenths / 10.0).trunc()), (tenths % 10.0).abs() as i64)
}

pub fn fmt_rate(value: Option<f64>) -> String {
    value.map_or("-".into(), group)
}

pub fn fmt_ms(value: Option<f64>) -> String {
    match value {
        None => "-".into(),
        Some(v) if v < 100.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.0}"),
    }
}

/// Ratios and CPU columns: two decimals.
pub fn fmt2(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.2}"))
}

pub fn fmt_us(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{v:.1}"))
}

/// A share in percent, "100%" once it rounds there.
pub fn percent(share: f64) -> String {
    if share < 0.99995 { format!("{:.2}%", share * 100.0) } else { "100%".into() }
}

/// "201: 48,641 (100%), 409: 2 (0.00%)", most frequent first.
pub fn status_text(statuses: &BTreeMap<String, u64>) -> String {
    let total: u64 = statuses.values().sum();
    if total == 0 {
        return "-".into();
    }
    let mut sorted: Vec<_> = statuses.iter().collect();
    sorted.sort_by_key(|(_, n)| std::cmp::Reverse(**n));
    let parts: Vec<_> = sorted
        .iter()
        .map(|(code, n)| format!("{code}: {} ({})", group(**n as f64), percent(**n as f64 / total as f64)))
        .collect();
    parts.join(", ")
}

// ---- the limiter algorithms' rows ----------------------------------------------------------

/// The redis-benchmark rows of each algorithm: kind, label.
pub const REDIS_KINDS: [(&str, &str); 3] =
    [("hot-admit", "one hot key, admitted"), ("perclient", "key per client"), ("hot-refused", "one hot key, refused")];

/// One algorithm's entry.
#[derive(Debug, Serialize)]
pub struct Algorithm {
    pub algorithm: String,
    pub script: String,
    pub redis: BTreeMap<String, Row>,
    pub http: BTreeMap<String, Row>,
    pub server_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limited_429_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instock_429: Option<u64>,
}

/// The script of an algorithm named `name` (`lua/sliding_log.lua` for sliding-log).
pub fn script(name: &str) -> String {
    format!("lua/{}.lua", name.replace('-', "_"))
}

// ---- what the storm and flatness rows did, which the rows set and the report reads ----------

/// The buyers of the repeat storm.
pub const REPEAT_BUYERS: u32 = 500;
/// Of them, how many ask once more after the storm (their 409 must name their 201's order).
pub const REASKED: usize = 50;
/// Buyers of the ticket polling storm (the driver joins them and keeps their tickets).
pub const POLLERS: u32 = 2000;
/// Purchases compared for their Redis calls: with an admission on the queued sale, and on a sale
/// without a queue.
pub const COMPARED_BUYS: u32 = 300;
/// The flatness rows' names, in the order they run.
pub const FLAT_ROWS: [&str; 5] = ["flat-ref", "flat-buyers", "flat-sales", "flat-conns", "flat-ref-again"];
/// The concurrency sweep's wrk connections (-c), one row each, in the order they run.
pub const SWEEP_CONNECTIONS: [u32; 5] = [4, 16, 64, 256, 1024];

/// The sweep row of `connections`.
pub fn sweep_key(connections: u32) -> String {
    format!("sweep-c{connections}")
}

/// The Redis commands run while a row ran, by command (`INFO commandstats`, INFO itself left out).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RedisCalls {
    pub by_command: BTreeMap<String, u64>,
}

impl RedisCalls {
    pub fn total(&self) -> u64 {
        self.by_command.values().sum()
    }
}

/// A row's main status and its share: "201 100%", with " (!)" when its path was not the one
/// expected.
pub fn main_status(row: &Row) -> String {
    let Some(statuses) = row.statuses.as_ref().filter(|s| !s.is_empty()) else { return "-".into() };
    let total: u64 = statuses.values().sum();
    let (code, n) = statuses.iter().max_by_key(|(_, n)| **n).expect("not empty");
    let text = format!("{code} {}", percent(*n as f64 / total as f64));
    if row.path_ok.unwrap_or(true) { text } else { text + " (!)" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_the_tables() {
        assert_eq!(group(1234567.6), "1,234,568");
        assert_eq!(group(999.0), "999");
        assert_eq!(group1(71.84), "71.8");
        assert_eq!(group1(1234.56), "1,234.6");
        assert_eq!(fmt_ms(Some(5.328)), "5.33");
        assert_eq!(fmt_ms(Some(474.9)), "475");
        assert_eq!(percent(0.5), "50.00%");
        assert_eq!(percent(0.99999), "100%");
        let s = BTreeMap::from([("201".to_string(), 100u64), ("410".to_string(), 370_991)]);
        assert_eq!(status_text(&s), "410: 370,991 (99.97%), 201: 100 (0.03%)");
    }
}
