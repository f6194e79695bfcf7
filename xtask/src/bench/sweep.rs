//! The concurrency sweep's table of the report: for each number of connections, purchases per
//! second, latency and the CPU µs per purchase of each party (the charts are `chart`'s).

use super::builder::{Builder, Report};
use super::model::{Row, SWEEP_CONNECTIONS, fmt_ms, fmt_rate, fmt_us, main_status, sweep_key, us_per_request};

/// The parties whose CPU per purchase is shown: (column, watched label); `wrk` is the generator.
pub const PARTIES: [(&str, &str); 4] = [("app", "seckill"), ("redis", "redis"), ("postgres", "postgres"), ("wrk", "")];

pub fn rows(b: &mut Builder) -> Vec<Row> {
    let mut rows = vec![];
    for c in SWEEP_CONNECTIONS {
        let key = sweep_key(c);
        let Ok((run, out)) = b.r.wrk(&key) else { continue };
        let label = format!("POST /buy in stock, {c} connections");
        let (path_ok, _) = b.expect_share(&out, "201", 0.99, &format!("sweep, {label}"));
        let mut row = b.http_row(&key, label, run, &out);
        row.path_ok = Some(path_ok);
        row.extra("connections", c);
        let created = out.status("201");
        for (col, process) in PARTIES {
            let us = match process {
                "" => (created > 0).then(|| run.usage.generator() / created as f64 * 1e6),
                process => us_per_request(run, created, process),
            };
            row.extra(&format!("{col}_us"), us);
        }
        rows.push(row);
    }
    rows
}

/// The sweep table's columns.
pub const HEAD: [&str; 9] = [
    "connections",
    "purchases/s",
    "status",
    "p50 ms",
    "p99 ms",
    "app µs/purchase",
    "Redis µs/purchase",
    "Postgres µs/purchase",
    "wrk µs/purchase",
];

pub fn table(r: &Report) -> Vec<Vec<String>> {
    r.sweep
        .iter()
        .map(|row| {
            let mut cells = vec![
                row.extra_f64("connections").map_or("-".into(), |c| format!("{c:.0}")),
                fmt_rate(row.rate),
                main_status(row),
                fmt_ms(row.p50_ms),
                fmt_ms(row.p99_ms),
            ];
            cells.extend(PARTIES.iter().map(|(col, _)| fmt_us(row.extra_f64(&format!("{col}_us")))));
            cells
        })
        .collect()
}

/// What the sweep is, for the report.
pub fn intro(r: &Report) -> String {
    let seconds = r.settings.get("duration").map_or("?", String::as_str);
    format!(
        "`POST /buy` in stock, every request a new buyer, on one app (`SECKILL_RATE_LIMIT={high}`, worker in the app, no per-client connection cap), {seconds} per row at each number of wrk keep-alive connections, one after the other. CPU µs per purchase = each process's CPU during the row ÷ the row's 201s (Postgres: the postmaster and its backends, the worker's inserts during the row; wrk: the generator itself). The charts: `<stem>-concurrency.svg`, `<stem>-cpu.svg` beside this file.",
        high = r.settings.get("high_rate_limit").map_or("?", String::as_str)
    )
}
