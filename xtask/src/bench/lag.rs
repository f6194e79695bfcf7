//! The two queue rows of the report: the worker drain (orders/s from the first batch to an
//! empty stream) and the queue lag of the in-stock run (sampler maxima and Postgres lag).

use std::collections::BTreeMap;

use serde_json::Value;

use super::builder::Builder;
use super::model::{CpuCols, Row, cost_text, fmt_ms, group};

/// The `worker drain, Redis → Postgres` row (target ≥ 30,000 orders/s).
pub fn drain_row(b: &mut Builder, rows: &mut Vec<Row>, worker_stats: Option<BTreeMap<String, u64>>) {
    let Some(drain) = b.r.drain.as_ref().filter(|d| d.first_drop_at.is_some()) else {
        b.problems.push("worker drain: no result".into());
        return;
    };
    let orders: u64 = b.r.meta("drain.orders").and_then(|s| s.parse().ok()).unwrap_or(drain.initial_xlen);
    let first = drain.first_drop_at.unwrap_or(drain.started);
    let steady_s = drain.ended_at - first;
    let total_s = drain.ended_at - drain.started;
    let steady = (steady_s > 0.0).then(|| drain.xlen_at_first_drop.unwrap_or(0) as f64 / steady_s);
    let overall = (total_s > 0.0).then(|| orders as f64 / total_s);
    let pg_rows: i64 = b.r.meta("drain.pg_rows").and_then(|s| s.parse().ok()).unwrap_or(-1);
    let ok_rows = pg_rows == orders as i64;
    if !ok_rows {
        b.problems.push(format!("worker drain: Postgres has {pg_rows} rows for the drain sale, expected {orders}"));
    }
    if drain.timed_out {
        b.problems.push("worker drain: the queue did not drain in time".into());
    }
    let usage = crate::measure::cpu::Usage {
        wall_s: total_s,
        watched_cpu_s: drain.watched_cpu_s.clone(),
        ..Default::default()
    };
    let mut detail = format!(
        "{} orders queued, batch {}; all drained in {total_s:.2} s from `seckill worker` start = {}/s incl. start-up; Postgres rows {}",
        group(orders as f64),
        b.r.meta("worker.batch").unwrap_or("?"),
        group(overall.unwrap_or(0.0)),
        group(pg_rows as f64)
    );
    if let Some(ws) = &worker_stats {
        let stats: Vec<String> = ["inserted", "redelivered", "conflicts", "malformed", "reclaimed"]
            .iter()
            .filter_map(|k| ws.get(*k).map(|v| format!("{k} {v}")))
            .collect();
        detail += &format!("; `seckill worker` stats at exit: {}", stats.join(", "));
    }
    let mut row = Row {
        key: "worker-drain".into(),
        scenario: "worker drain, Redis → Postgres".into(),
        unit: "orders/s",
        rate: steady,
        ratio: b.ratio(steady),
        detail,
        target: "≥ 30,000/s".into(),
        met: Some(steady.is_some_and(|s| s >= 30000.0) && ok_rows),
        cpu: CpuCols::of(&usage, false, "worker"),
        cost: cost_text(&drain.watched_cpu_s, orders, 0.0),
        ..Default::default()
    };
    row.extra("overall_rate", overall);
    row.extra("steady_seconds", steady_s);
    row.extra("total_seconds", total_s);
    row.extra("pg_rows", pg_rows);
    if let Some(ws) = worker_stats {
        row.extra("worker_stats", ws);
    }
    rows.push(row);
}

/// The `queue lag, in-stock run` row (target ≤ 1 s): the larger of the sampled oldest-entry
/// age and Postgres's persisted_at − created_at.
pub fn queue_row(b: &mut Builder, rows: &mut Vec<Row>) {
    let (queue, lag) = (b.r.queue.as_ref(), b.r.lag.as_ref());
    if queue.is_none() && lag.is_none() {
        b.problems.push("queue lag: no result".into());
        return;
    }
    let lag_f = |k: &str| lag.and_then(|l| l.get(k)).and_then(Value::as_f64);
    let mut parts = vec![];
    if let Some(q) = queue {
        parts.push(format!(
            "max XLEN {} (mean {:.1}), oldest entry at most {} ms old ({} samples every {} ms)",
            group(q.max_xlen as f64),
            q.mean_xlen,
            group(q.max_oldest_age_ms as f64),
            q.samples,
            (q.interval_s * 1000.0) as u64
        ));
    }
    if lag.is_some() {
        parts.push(format!(
            "Postgres persisted_at − created_at over {} orders: p50 {} ms, p99 {} ms, max {} ms",
            group(lag_f("orders").unwrap_or(0.0)),
            fmt_ms(lag_f("p50_ms")),
            fmt_ms(lag_f("p99_ms")),
            fmt_ms(lag_f("max_ms"))
        ));
    }
    let worst =
        [lag_f("max_ms"), queue.map(|q| q.max_oldest_age_ms as f64)].into_iter().flatten().max_by(f64::total_cmp);
    let mut row = Row {
        key: "queue-lag".into(),
        scenario: "queue lag, in-stock run".into(),
        unit: "ms",
        p50_ms: lag_f("p50_ms"),
        p99_ms: lag_f("p99_ms"),
        detail: parts.join("; "),
        target: "≤ 1 s".into(),
        met: Some(worst.is_some_and(|w| w <= 1000.0)),
        ..Default::default()
    };
    row.extra("lag_ms", worst);
    row.extra("max_xlen", queue.map(|q| q.max_xlen));
    row.extra("max_oldest_age_ms", queue.map(|q| q.max_oldest_age_ms));
    row.extra("pg_lag", lag);
    rows.push(row);
}
