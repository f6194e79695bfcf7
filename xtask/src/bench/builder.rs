//! The report's values and the state that builds them: [`Report`] (what bench.json holds) and
//! [`Builder`] (the results, the HTTP ceiling and the problems so far, with the row builders the
//! main table shares). It reads the model only.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::logs::LogInfo;
use super::model::Algorithm;
use super::model::{CpuCols, Results, Row, cost_text, fmt_ms, group, status_text};
use crate::measure::process::Run;
use crate::measure::wrk::WrkOut;

/// What bench.json holds.
#[derive(Debug, Serialize)]
pub struct Report {
    pub generated_at: String,
    pub machine: BTreeMap<String, String>,
    pub settings: BTreeMap<String, String>,
    pub healthz_rate: Option<f64>,
    pub rows: Vec<Row>,
    pub algorithms: Vec<Algorithm>,
    /// The flatness rows (`flat`): the single-sale reference first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub flat: Vec<Row>,
    /// The concurrency sweep (`sweep`), fewest connections first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<Row>,
    pub invariants: Vec<Value>,
    pub logs: BTreeMap<String, LogInfo>,
    pub notes: Vec<String>,
    pub problems: Vec<String>,
}

/// Building state: the results, the ceiling and the problems found so far.
pub struct Builder<'a> {
    pub r: &'a Results,
    pub ceiling: Option<f64>,
    pub problems: Vec<String>,
}

impl Builder<'_> {
    pub fn ratio(&self, rate: Option<f64>) -> Option<f64> {
        self.ceiling.zip(rate).map(|(c, r)| r / c)
    }

    /// Whether at least `minimum` of the answers had `code`; 5xx and socket errors are problems.
    pub fn expect_share(&mut self, out: &WrkOut, code: &str, minimum: f64, label: &str) -> (bool, f64) {
        let total: u64 = out.statuses.values().sum();
        let share = if total > 0 { out.status(code) as f64 / total as f64 } else { 0.0 };
        let server: BTreeMap<_, _> = out.statuses.iter().filter(|(k, _)| k.starts_with('5')).collect();
        if !server.is_empty() {
            self.problems.push(format!("{label}: server errors {server:?} (see the app log)"));
        }
        if !out.socket_errors().is_empty() {
            self.problems.push(format!("{label}: wrk socket errors {:?}", out.socket_errors()));
        }
        if share < minimum {
            self.problems.push(format!(
                "{label}: only {:.2}% {code} (expected >= {:.0}%); path not as intended",
                share * 100.0,
                minimum * 100.0
            ));
        }
        (share >= minimum, share)
    }

    /// A wrk row's figures (rate, latencies, statuses, CPU, cost).
    pub fn http_row(&self, key: &str, scenario: String, run: &Run, out: &WrkOut) -> Row {
        Row {
            key: key.into(),
            scenario,
            unit: "req/s",
            rate: Some(out.rate()),
            p50_ms: Some(out.latency_us.p50 / 1000.0),
            p99_ms: Some(out.latency_us.p99 / 1000.0),
            ratio: self.ratio(Some(out.rate())),
            requests: Some(out.requests),
            duration_s: Some((out.seconds() * 1000.0).round() / 1000.0),
            statuses: Some(out.statuses.clone()),
            socket_errors: Some(out.socket_errors()),
            p90_ms: Some(out.latency_us.p90 / 1000.0),
            p999_ms: Some(out.latency_us.p999 / 1000.0),
            max_ms: Some(out.latency_us.max / 1000.0),
            cpu: CpuCols::of(&run.usage, true, "seckill"),
            cost: cost_text(&run.usage.watched_cpu_s, out.requests, run.usage.generator()),
            ..Default::default()
        }
    }

    fn detail(&self, key: &str, out: &WrkOut) -> String {
        [self.r.meta(&format!("{key}.detail")).unwrap_or("").to_string(), status_text(&out.statuses)]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The main HTTP rows: key, scenario, expected status, its share, target ratio.
    pub(super) fn main_http_rows(&mut self, rows: &mut Vec<Row>, healthz_runs: &[(&Run, WrkOut)]) {
        let specs = [
            ("http-healthz", "GET /healthz (HTTP ceiling)", "200", 0.9999, None),
            ("http-buy-instock", "POST /buy in stock, distinct users", "201", 0.99, Some(0.5)),
            ("http-buy-instock-jwt", "POST /buy in stock, distinct users, SECKILL_AUTH=jwt", "201", 0.99, Some(0.5)),
            ("http-buy-soldout", "POST /buy sold out", "410", 0.99, Some(0.8)),
            ("http-buy-limited", "POST /buy rate limited", "429", 0.99, Some(0.8)),
        ];
        for (key, label, code, share_min, target) in specs {
            let target_text = target.map(|t| format!("≥ {t:.2} × healthz"));
            let found = if key == "http-healthz" {
                healthz_runs
                    .iter()
                    .max_by(|a, b| a.1.rate().total_cmp(&b.1.rate()))
                    .cloned()
                    .ok_or("not run".to_string())
            } else {
                self.r.wrk(key)
            };
            let (run, out) = match found {
                Ok(found) => found,
                Err(why) => {
                    self.problems.push(format!("{label}: no result ({why})"));
                    let target = target_text.unwrap_or_default();
                    rows.push(Row {
                        key: key.into(),
                        scenario: label.into(),
                        unit: "req/s",
                        target,
                        detail: "not run".into(),
                        ..Default::default()
                    });
                    continue;
                }
            };
            let (path_ok, _) = self.expect_share(&out, code, share_min, label);
            let mut row = self.http_row(key, label.into(), run, &out);
            row.detail = self.detail(key, &out);
            row.met = target.map(|t| row.ratio.is_some_and(|r| r >= t));
            row.path_ok = Some(path_ok);
            row.target = target_text.unwrap_or("(reference)".into());
            row.extra("source", &run.name);
            if key == "http-healthz" && healthz_runs.len() > 1 {
                let runs: Vec<String> = healthz_runs
                    .iter()
                    .map(|(r, o)| {
                        let when = if r.name == "http-healthz" { "first" } else { "after the /buy rows" };
                        format!("{when} {} req/s (p99 {} ms)", group(o.rate()), fmt_ms(Some(o.latency_us.p99 / 1000.0)))
                    })
                    .collect();
                row.detail += &format!("; the better of two runs: {}", runs.join(", "));
                let runs: Vec<Value> = healthz_runs
                    .iter()
                    .map(|(r, o)| json!({"name": r.name, "rate": o.rate(), "p50_ms": o.latency_us.p50 / 1000.0, "p99_ms": o.latency_us.p99 / 1000.0}))
                    .collect();
                row.extra("runs", runs);
            }
            rows.push(row);
        }
    }

    /// The paced rows: at 80% of the in-stock peak (target p99 < 10 ms), and the light one.
    pub(super) fn paced_rows(&mut self, rows: &mut Vec<Row>) {
        match self.r.wrk("http-buy-instock-paced") {
            Ok((run, out)) => {
                let target_rate: f64 = self.r.meta("paced.target_rate").and_then(|s| s.parse().ok()).unwrap_or(0.0);
                let (path_ok, _) = self.expect_share(&out, "201", 0.99, "paced in-stock");
                let reached = target_rate > 0.0 && out.rate() >= 0.95 * target_rate;
                let note = if reached {
                    String::new()
                } else {
                    format!(" (rate reached only {} of {}/s)", group(out.rate()), group(target_rate))
                };
                let mut row = self.http_row(
                    "http-buy-instock-paced",
                    "POST /buy in stock, paced at 80% of peak".into(),
                    run,
                    &out,
                );
                row.detail = format!(
                    "scheduled {}/s = 80% of the in-stock peak, over {} connections; Redis forked {} times during the row (AOF rewrites); {}{note}",
                    group(target_rate),
                    self.r.meta("paced.connections").unwrap_or("?"),
                    self.r.meta("paced.redis_forks").unwrap_or("?"),
                    status_text(&out.statuses)
                );
                row.path_ok = Some(path_ok);
                row.target = "p99 < 10 ms".into();
                row.met = Some(out.latency_us.p99 / 1000.0 < 10.0 && reached);
                row.extra("target_rate", target_rate);
                rows.push(row);
            }
            Err(_) => self.problems.push("paced in-stock run: no result".into()),
        }
        if let Ok((run, out)) = self.r.wrk("http-buy-instock-light") {
            let target_rate: f64 = self.r.meta("light.target_rate").and_then(|s| s.parse().ok()).unwrap_or(0.0);
            let (path_ok, _) = self.expect_share(&out, "201", 0.99, "light in-stock");
            let mut row = self.http_row(
                "http-buy-instock-light",
                format!("POST /buy in stock, paced at {}/s", group(target_rate)),
                run,
                &out,
            );
            row.detail = format!(
                "light load, {} connections; {}",
                self.r.meta("light.connections").unwrap_or("?"),
                status_text(&out.statuses)
            );
            row.path_ok = Some(path_ok);
            row.target = "(latency floor)".into();
            row.extra("target_rate", target_rate);
            rows.push(row);
        }
    }

    /// A redis-benchmark row (Redis ceiling): ops/s, probe, Redis CPU per call.
    pub fn redis_row(&mut self, key: &str, label: &str) -> Option<Row> {
        let Some((run, res)) = self.r.redis(key) else {
            self.problems.push(format!("{label}: no result"));
            return None;
        };
        let count: u64 = self.r.meta(&format!("{key}.count")).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut detail = self.r.meta(&format!("{key}.detail")).unwrap_or("").to_string();
        let probe = self.r.meta(&format!("{key}.probe"));
        if let Some(probe) = probe {
            detail += &format!(
                "; one more call right after the run answered {{{}}} (allowed, remaining, retry_after_us, reset_us)",
                probe.replace(' ', ", ")
            );
        }
        let watched = &run.usage.watched_cpu_s;
        let mut row = Row {
            key: key.into(),
            scenario: label.into(),
            unit: "ops/s",
            rate: Some(res.rate),
            p50_ms: res.p50_ms,
            p99_ms: res.p99_ms,
            ratio: self.ratio(Some(res.rate)),
            detail,
            target: "(Redis ceiling)".into(),
            cpu: CpuCols::of(&run.usage, true, "seckill"),
            cost: cost_text(watched, count, run.usage.generator()),
            ..Default::default()
        };
        row.extra("calls", count);
        if let Some(probe) = probe {
            let names = ["allowed", "remaining", "retry_after_us", "reset_us"];
            let values: serde_json::Map<_, _> = names
                .iter()
                .zip(probe.split(' '))
                .map(|(k, v)| (k.to_string(), json!(v.parse::<i64>().ok())))
                .collect();
            row.extra("probe", values);
        }
        if let Some(ok) = self.r.meta(&format!("{key}.ok")).and_then(|s| s.parse::<u64>().ok()).filter(|_| count > 0) {
            let mut statuses = BTreeMap::from([("ok".to_string(), ok)]);
            if count > ok {
                statuses.insert("other".into(), count - ok);
            }
            row.statuses = Some(statuses);
        }
        let us = watched.get("redis").filter(|_| count > 0).map(|cpu| cpu / count as f64 * 1e6);
        row.extra("redis_us_per_op", us);
        Some(row)
    }
}
