//! The flatness table of the report: the in-stock purchase with 10 million buyers, 100 sales and
//! 10,000 connections, each as a ratio to the single-sale reference of the same app and run
//! (req/s, and CPU µs per purchase of the app, Redis and Postgres).

use serde_json::Value;

use super::builder::{Builder, Report};
use super::model::{FLAT_ROWS, Row, group, main_status, us_per_request};

/// A flat row's cost may grow by this much over the reference before it counts as not flat: the
/// spread of one short row on a shared two-core machine.
pub const FLAT_MAX: f64 = 1.25;

/// The parties whose CPU per purchase is compared: (column, watched label).
pub const PARTIES: [(&str, &str); 3] = [("app", "seckill"), ("redis", "redis"), ("postgres", "postgres")];

pub fn rows(b: &mut Builder) -> Vec<Row> {
    let m = |k: &str| b.r.meta(&format!("flat.{k}")).and_then(|s| s.parse::<f64>().ok()).map_or("?".into(), group);
    let labels = [
        "POST /buy in stock, one sale (reference)".to_string(),
        format!("POST /buy in stock, {} buyers already in the set", m("buyers")),
        format!("POST /buy in stock, {} sales at once", m("sales")),
        format!("POST /buy in stock, {} connections", m("connections")),
        "POST /buy in stock, one sale again (drift)".to_string(),
    ];
    let mut rows: Vec<Row> = vec![];
    for (key, label) in FLAT_ROWS.iter().zip(labels) {
        let (run, out) = match b.r.wrk(key) {
            Ok(found) => found,
            Err(why) => {
                b.problems.push(format!("flatness, {label}: no result ({why})"));
                continue;
            }
        };
        let (path_ok, _) = b.expect_share(&out, "201", 0.99, &format!("flatness, {label}"));
        let mut row = b.http_row(key, label.clone(), run, &out);
        row.path_ok = Some(path_ok);
        let detail = b.r.meta(&format!("{key}.detail")).unwrap_or("").to_string();
        let fill = b.r.meta("flat.fill").filter(|_| *key == "flat-buyers").map(|f| format!("; {f}"));
        row.detail = detail + &fill.unwrap_or_default();
        if *key == "flat-conns" {
            row.extra("connections", b.r.meta("flat.connections"));
        }
        let window: Option<Value> = b.r.meta(&format!("{key}.window")).and_then(|w| serde_json::from_str(w).ok());
        match window.as_ref().and_then(|w| Some((w["wall_s"].as_f64()?, w["purchases"].as_u64()?))) {
            Some((wall, purchases)) if wall > 0.0 && purchases > 0 => {
                let w = window.as_ref().expect("parsed above");
                row.extra("steady_rate", purchases as f64 / wall);
                row.extra("steady_purchases", purchases);
                row.extra("steady_wall_s", wall);
                for (col, process) in PARTIES {
                    let us = w["cpu_s"][process].as_f64().map(|cpu| cpu / purchases as f64 * 1e6);
                    row.extra(&format!("{col}_us"), us);
                }
                // Postgres: the worker's whole share, from the row's start until its queues drained.
                let drained: Option<Value> =
                    b.r.meta(&format!("{key}.drained")).and_then(|w| serde_json::from_str(w).ok());
                let pg = drained.as_ref().and_then(|d| {
                    let n = d["purchases"].as_u64().filter(|n| *n > 0)?;
                    Some(d["cpu_s"]["postgres"].as_f64()? / n as f64 * 1e6)
                });
                if pg.is_some() {
                    row.extra("postgres_us", pg);
                }
                row.detail += &format!(
                    "; whole row (wrk) {} req/s; steady window {:.1} s: {} purchases",
                    group(out.rate()),
                    wall,
                    group(purchases as f64)
                );
            }
            _ => {
                b.problems.push(format!("flatness, {label}: no steady window; figures of the whole row instead"));
                row.extra("steady_rate", out.rate());
                for (col, process) in PARTIES {
                    row.extra(&format!("{col}_us"), us_per_request(run, out.status("201"), process));
                }
            }
        }
        rows.push(row);
    }
    let Some(reference) = rows.iter().find(|r| r.key == FLAT_ROWS[0]).cloned() else { return rows };
    for row in &mut rows {
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).filter(|(_, b)| *b > 0.0).map(|(a, b)| a / b);
        row.extra("rate_ratio", ratio(row.extra_f64("steady_rate"), reference.extra_f64("steady_rate")));
        let mut flat = true;
        for (col, _) in PARTIES {
            let key = format!("{col}_us");
            let r = ratio(row.extra_f64(&key), reference.extra_f64(&key));
            // Postgres's share is the worker's batches: too small to judge at a few µs, so it is
            // shown but only the app and Redis decide.
            flat &= col == "postgres" || r.is_none_or(|r| r <= FLAT_MAX);
            row.extra(&format!("{col}_ratio"), r);
        }
        if row.key == FLAT_ROWS[0] {
            row.target = "(reference)".into();
        } else if row.key == FLAT_ROWS[4] {
            row.target = "(the reference again: drift)".into();
        } else {
            row.target = format!("app and Redis µs ≤ {FLAT_MAX:.2} × reference");
            row.met = Some(flat && row.path_ok == Some(true));
        }
    }
    rows
}

/// The flatness table's columns.
pub const HEAD: [&str; 11] = [
    "scenario",
    "purchases/s, steady (× ref)",
    "status",
    "p50 ms",
    "p99 ms",
    "app µs/purchase (× ref)",
    "Redis µs/purchase (× ref)",
    "Postgres µs/purchase (× ref)",
    "other CPU",
    "target",
    "result",
];
/// The target column (left-aligned).
pub const TARGET_COL: usize = 9;

const INTRO: &str = "`POST /buy` in stock, every request a new buyer, on one app (`SECKILL_RATE_LIMIT={high}`, worker in the app), {seconds} per row, one after the other; each figure also as a ratio to the first row (one fresh sale). Rates and costs are of each row's steady part: from a third of the row after its first purchase, for half the row (every connection open by then), the app's created purchases (`seckill_purchases_total{outcome=\"created\"}` from `/metrics`) and the CPU of each process meanwhile; µs per purchase = that CPU ÷ those purchases, except Postgres (the postmaster and its backends, i.e. the worker's inserts): its CPU from the row's start until the queues drained ÷ the row's purchases, as the worker may lag behind the window. Latencies are wrk's, of the whole row. The many-connections row keeps every connection open and busy, so its latency is the queue of {connections} requests in flight, not a slower path.";

fn with_ratio(value: String, ratio: Option<f64>) -> String {
    match ratio {
        Some(r) => format!("{value} ({r:.2})"),
        None => value,
    }
}

fn cells(row: &Row, status: String) -> Vec<String> {
    use super::model::{fmt_ms, fmt_rate, fmt_us, fmt2};
    let us =
        |col: &str| with_ratio(fmt_us(row.extra_f64(&format!("{col}_us"))), row.extra_f64(&format!("{col}_ratio")));
    vec![
        row.scenario.clone(),
        with_ratio(fmt_rate(row.extra_f64("steady_rate")), row.extra_f64("rate_ratio")),
        status,
        fmt_ms(row.p50_ms),
        fmt_ms(row.p99_ms),
        us("app"),
        us("redis"),
        us("postgres"),
        fmt2(row.cpu.other_cpu),
        row.target.clone(),
        match row.met {
            None => "-".into(),
            Some(true) => "met".into(),
            Some(false) => "NOT MET".into(),
        },
    ]
}

/// The table's introduction, with this run's settings.
pub fn intro(r: &Report) -> String {
    let s = |k: &str| r.settings.get(k).map_or("?", String::as_str).to_string();
    let connections = r.flat.iter().find(|row| row.key == "flat-conns").and_then(|row| row.extra.get("connections"));
    INTRO
        .replace("{high}", &s("high_rate_limit"))
        .replace("{seconds}", &s("duration_flat"))
        .replace("{connections}", connections.and_then(|c| c.as_str()).unwrap_or("all"))
}

/// The table's cells, one line per row.
pub fn table(r: &Report) -> Vec<Vec<String>> {
    r.flat.iter().map(|row| cells(row, main_status(row))).collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::Results;
    use super::*;
    use crate::measure::cpu::Usage;
    use crate::measure::process::Run;

    fn run(name: &str, created: u64) -> Run {
        let stdout = format!(
            "BENCH_WRK {{\"requests\":{created},\"duration_us\":6000000,\"errors\":{{}},\"latency_us\":{{\"mean\":1,\"max\":9,\"p50\":1,\"p90\":2,\"p99\":3,\"p999\":4}},\"statuses\":{{\"201\":{created}}}}}\n"
        );
        Run { name: name.into(), cmd: vec![], rc: 0, timed_out: false, usage: Usage::default(), stdout }
    }

    #[test]
    fn rows_are_ratios_to_the_reference_in_their_steady_window() {
        let mut r = Results::default();
        // (row, purchases in 3 s, app CPU s, Redis CPU s)
        for (key, purchases, app, redis) in
            [("flat-ref", 30_000, 1.5, 0.9), ("flat-buyers", 30_000, 1.5, 1.2), ("flat-sales", 15_000, 0.9, 0.45)]
        {
            r.wrk.insert(key.into(), run(key, purchases * 2));
            let cpu = serde_json::json!({"seckill": app, "redis": redis, "postgres": 0.3});
            r.set(format!("{key}.window"), serde_json::json!({"wall_s": 3.0, "purchases": purchases, "cpu_s": cpu}));
        }
        let mut b = Builder { r: &r, ceiling: None, problems: vec![] };
        let rows = rows(&mut b);
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].extra_f64("app_us"), Some(50.0));
        assert_eq!(rows[0].extra_f64("rate_ratio"), Some(1.0));
        assert_eq!(rows[0].met, None);
        // Redis 40 µs vs 30 µs: 1.33 × the reference, beyond FLAT_MAX.
        assert!((rows[1].extra_f64("redis_ratio").unwrap() - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(rows[1].met, Some(false));
        // Half the rate at a higher app cost per purchase (60 µs: 1.2 ×), Redis the same: flat.
        assert_eq!(rows[2].extra_f64("rate_ratio"), Some(0.5));
        assert_eq!(rows[2].met, Some(true));
        assert!(b.problems.iter().any(|p| p.contains("connections: no result")), "{:?}", b.problems);
    }
}
