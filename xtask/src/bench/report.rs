//! From [`Results`] to the [`Report`]: the main table's rows with their targets, the problems
//! (paths not taken, 5xx, log warnings, failed invariants) and the notes on a shared machine.

use serde_json::json;

use super::builder::{Builder, Report};
use super::logs::scan_logs;
use super::model::Algorithm;
use super::model::{CpuCols, Results, Row, fmt2};
use crate::measure::process::Run;
use crate::measure::wrk::WrkOut;

/// Builds the report: rows, algorithms, invariants, logs, notes and problems.
pub fn build(r: &Results, generated_at: String) -> Report {
    let healthz_runs: Vec<_> = ["http-healthz", "http-healthz-2"].iter().filter_map(|n| r.wrk(n).ok()).collect();
    let ceiling = healthz_runs.iter().map(|(_, o)| o.rate()).max_by(f64::total_cmp);
    let mut b = Builder { r, ceiling, problems: vec![] };
    let mut rows = vec![];
    let logs = scan_logs(&r.raw);
    let mut algorithms = vec![];
    // `--only flat`: just the flatness table.
    if r.meta("setting.only").is_none() {
        b.main_http_rows(&mut rows, &healthz_runs);
        b.paced_rows(&mut rows);
        // Sold out and rate limited after the paced rows, as the table reads.
        let (tail, head): (Vec<Row>, Vec<Row>) =
            rows.into_iter().partition(|row| row.key == "http-buy-soldout" || row.key == "http-buy-limited");
        rows = head.into_iter().chain(tail).collect();
        super::storms::rows(&mut b, &mut rows);
        if let Some(row) = b.redis_row("redis-buy", "Redis buy.lua, distinct users") {
            rows.push(row);
        }
        algorithms = super::algs::algorithms(&mut b);
        super::lag::drain_row(&mut b, &mut rows, logs.get("worker.log").and_then(|l| l.worker_stats.clone()));
        super::lag::queue_row(&mut b, &mut rows);
    }
    let flat = super::flat::rows(&mut b);
    let sweep = super::sweep::rows(&mut b);

    let mut checks: Vec<_> = r.checks.iter().collect();
    checks.sort_by(|a, b| a.0.cmp(&b.0));
    let invariants = checks
        .iter()
        .map(|(sale, rc, report)| json!({"sale": sale, "rc": rc, "consistent": *rc == 0, "report": report}))
        .collect();
    for (sale, rc, _) in &checks {
        if *rc != 0 {
            b.problems.push(format!("invariants: sale {sale} is NOT consistent (reconcile exit {rc})"));
        }
    }
    for (name, info) in &logs {
        if info.warn + info.error + info.panic > 0 {
            b.problems.push(format!(
                "{name}: {} warnings, {} errors, {} panics; first: {}",
                info.warn,
                info.error,
                info.panic,
                info.first_problem.as_deref().unwrap_or("")
            ));
        }
        if let Some(ws) = info
            .worker_stats
            .as_ref()
            .filter(|ws| ws.get("conflicts").unwrap_or(&0) + ws.get("malformed").unwrap_or(&0) > 0)
        {
            b.problems.push(format!("{name}: worker stats {ws:?}"));
        }
    }
    let all: Vec<Row> = rows.iter().chain(&flat).cloned().collect();
    let notes = notes(&all, &algorithms, &healthz_runs, ceiling);
    let prefixed =
        |p: &str| r.meta.iter().filter_map(|(k, v)| k.strip_prefix(p).map(|k| (k.to_string(), v.clone()))).collect();
    Report {
        generated_at,
        machine: prefixed("machine."),
        settings: prefixed("setting."),
        healthz_rate: ceiling,
        rows,
        algorithms,
        flat,
        sweep,
        invariants,
        logs,
        notes,
        problems: b.problems,
    }
}

/// What the reader needs to know about this machine while reading the rows.
fn notes(rows: &[Row], algorithms: &[Algorithm], healthz: &[(&Run, WrkOut)], ceiling: Option<f64>) -> Vec<String> {
    let all: Vec<&Row> =
        rows.iter().chain(algorithms.iter().flat_map(|a| a.redis.values().chain(a.http.values()))).collect();
    let mut notes = vec![];
    let others: Vec<f64> = all.iter().filter_map(|r| r.cpu.other_cpu).collect();
    let max_other = others.iter().copied().fold(0.0, f64::max);
    if max_other > 0.25 {
        notes.push(format!(
            "other processes kept up to {max_other:.2} cores busy during the rows (mean {:.2}; see the other CPU column): the machine was shared, so rates are lower and tails longer than on an idle machine; ratios within one row set are affected too, as the load varied between rows",
            others.iter().sum::<f64>() / others.len() as f64
        ));
    }
    let above: Vec<String> = all
        .iter()
        .filter(|r| r.ratio.unwrap_or(0.0) > 1.0 && r.unit == "req/s")
        .map(|r| format!("{} ({:.2}, other CPU {})", r.scenario, r.ratio.unwrap_or(0.0), fmt2(r.cpu.other_cpu)))
        .collect();
    if !above.is_empty() && ceiling.is_some() {
        let best = healthz.iter().max_by(|a, b| a.1.rate().total_cmp(&b.1.rate()));
        let ceiling_other = best.and_then(|(run, _)| CpuCols::of(&run.usage, true, "seckill").other_cpu);
        notes.push(format!(
            "above 1.00 × healthz: {}; the /healthz ceiling ran while other processes used {} cores. Rates taken at different moments of a shared machine are not comparable; the CPU µs per request are much less affected",
            above.join(", "),
            fmt2(ceiling_other)
        ));
    }
    let steal = all.iter().filter_map(|r| r.cpu.steal_cpu).fold(0.0, f64::max);
    if steal > 0.05 {
        notes.push(format!("the hypervisor took up to {steal:.2} cores (steal)"));
    }
    notes
}
