//! The report as a terminal table and as `bench.md` (the same rows and columns as before the port to Rust).

use super::builder::Report;
use super::model::{Algorithm, REDIS_KINDS};
use super::model::{Row, fmt_ms, fmt_rate, fmt_us, fmt2, main_status, percent};
use super::{flat, sweep};

const HEAD: [&str; 14] = [
    "scenario",
    "figure",
    "status",
    "p50 ms",
    "p99 ms",
    "× healthz",
    "gen CPU",
    "app CPU",
    "redis CPU",
    "pg CPU",
    "other CPU",
    "steal",
    "target",
    "result",
];
const TARGET_COL: usize = 12;
const ALG_HEAD: [&str; 8] = [
    "algorithm",
    "EVALSHA hot admitted",
    "key per client",
    "hot refused",
    "/buy limited req/s (× healthz)",
    "/buy in stock req/s (× healthz)",
    "429 share",
    "5xx",
];
const ALG_COST_HEAD: [&str; 9] = [
    "algorithm",
    "Redis CPU µs/call: hot admitted",
    "key per client",
    "hot refused",
    "EVALSHA p99 ms (admitted / per client / refused)",
    "/buy in stock p50 / p99 ms",
    "/buy in stock CPU µs/req (app / Redis)",
    "/buy limited p50 / p99 ms",
    "/buy limited app CPU µs/req",
];
const ALG_INTRO: &str = "Each algorithm's script (`lua/sliding_log.lua` for sliding-log, and so on) under `redis-benchmark` EVALSHA, and `POST /buy` through an app restarted with `SECKILL_RATE_LIMIT_ALGORITHM=<algorithm>`: rate limited = `SECKILL_RATE_LIMIT={limited}`, one client address, in-stock sale; in stock = `SECKILL_RATE_LIMIT={high}`, every request admitted, so the row shows what the limiter costs the purchase path. {seconds} per HTTP row; × healthz is against the main table's ceiling. 429 share = of the rate-limited row; 5xx = of both HTTP rows.";
const CPU_TEXT: &str = "CPU columns: CPU-seconds per wall second while the row ran (1.00 = one core); gen = the load generator itself, app = the seckill process (for the drain row: `seckill worker`), pg = the postmaster and its backends, other = everything else on the machine (busy time from /proc/stat minus the four before: other sessions' work shares these cores), steal = CPU time the hypervisor gave to other guests.";
const HOW_MEASURED: &str = include_str!("how-measured.md");

fn met_text(met: Option<bool>) -> &'static str {
    match met {
        None => "-",
        Some(true) => "met",
        Some(false) => "NOT MET",
    }
}

fn figure(row: &Row) -> String {
    if row.key == "queue-buy-calls" {
        return row.rate.map_or("-".into(), |calls| format!("{calls:.2} {}", row.unit));
    }
    if row.key == "queue-lag" {
        return row.extra_f64("lag_ms").map_or("-".into(), |ms| format!("{} ms", fmt_rate(Some(ms))));
    }
    match row
        .extra_f64("redis_cmds_per_s")
        .filter(|_| ["http-sale-poll", "http-queue-join", "http-queue-poll"].contains(&row.key.as_str()))
    {
        Some(per_s) => format!("{} {} (Redis {per_s:.0} commands/s)", fmt_rate(row.rate), row.unit),
        None => format!("{} {}", fmt_rate(row.rate), row.unit),
    }
}

fn table_cells(r: &Row) -> Vec<String> {
    let c = &r.cpu;
    vec![
        r.scenario.clone(),
        figure(r),
        main_status(r),
        fmt_ms(r.p50_ms),
        fmt_ms(r.p99_ms),
        fmt2(r.ratio),
        fmt2(c.gen_cpu),
        fmt2(c.app_cpu),
        fmt2(c.redis_cpu),
        fmt2(c.pg_cpu),
        fmt2(c.other_cpu),
        fmt2(c.steal_cpu),
        r.target.clone(),
        met_text(r.met).into(),
    ]
}

fn alg_cells(a: &Algorithm) -> Vec<String> {
    let ops = |kind: &str| a.redis.get(kind).map_or("-".into(), |r| format!("{} ops/s", fmt_rate(r.rate)));
    let req = |kind: &str| {
        a.http.get(kind).map_or("-".into(), |r| {
            format!("{} ({}){}", fmt_rate(r.rate), fmt2(r.ratio), if r.path_ok.unwrap_or(true) { "" } else { " (!)" })
        })
    };
    let mut share = a.limited_429_share.map_or("-".into(), percent);
    if let Some(n) = a.instock_429.filter(|n| *n > 0) {
        share += &format!(" (in stock: {} × 429!)", fmt_rate(Some(n as f64)));
    }
    vec![
        a.algorithm.clone(),
        ops("hot-admit"),
        ops("perclient"),
        ops("hot-refused"),
        req("limited"),
        req("instock"),
        share,
        fmt_rate(Some(a.server_errors as f64)),
    ]
}

fn alg_cost_cells(a: &Algorithm) -> Vec<String> {
    let us = |kind: &str| a.redis.get(kind).map_or("-".into(), |r| fmt_us(r.extra_f64("redis_us_per_op")));
    let p99s: Vec<String> =
        REDIS_KINDS.iter().map(|(k, _)| a.redis.get(*k).map_or("-".into(), |r| fmt_ms(r.p99_ms))).collect();
    let lat =
        |kind: &str| a.http.get(kind).map_or("-".into(), |r| format!("{} / {}", fmt_ms(r.p50_ms), fmt_ms(r.p99_ms)));
    let instock = a.http.get("instock");
    vec![
        a.algorithm.clone(),
        us("hot-admit"),
        us("perclient"),
        us("hot-refused"),
        p99s.join(" / "),
        lat("instock"),
        instock.map_or("-".into(), |r| {
            format!("{} / {}", fmt_us(r.extra_f64("app_us_per_req")), fmt_us(r.extra_f64("redis_us_per_req")))
        }),
        lat("limited"),
        a.http.get("limited").map_or("-".into(), |r| fmt_us(r.extra_f64("app_us_per_req"))),
    ]
}

/// Columns padded to width; `left` columns left-aligned, the rest right-aligned.
fn text_table(head: &[&str], cells: Vec<Vec<String>>, left: &[usize]) -> Vec<String> {
    let all: Vec<Vec<String>> = std::iter::once(head.iter().map(|s| s.to_string()).collect()).chain(cells).collect();
    let widths: Vec<usize> =
        (0..head.len()).map(|i| all.iter().map(|c| c[i].chars().count()).max().unwrap_or(0)).collect();
    let mut lines = vec![];
    for (n, row) in all.iter().enumerate() {
        let cells: Vec<String> =
            row.iter()
                .enumerate()
                .map(|(i, v)| {
                    if left.contains(&i) {
                        format!("{v:<w$}", w = widths[i])
                    } else {
                        format!("{v:>w$}", w = widths[i])
                    }
                })
                .collect();
        lines.push(cells.join("  ").trim_end().to_string());
        if n == 0 {
            lines.push(widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
        }
    }
    lines
}

fn md_table(head: &[&str], cells: Vec<Vec<String>>, left: &[usize]) -> Vec<String> {
    let mut out = vec![format!("| {} |", head.join(" | "))];
    let align: Vec<&str> = (0..head.len()).map(|i| if left.contains(&i) { "---" } else { "---:" }).collect();
    out.push(format!("|{}|", align.join("|")));
    for row in cells {
        out.push(format!("| {} |", row.iter().map(|c| c.replace('|', "\\|")).collect::<Vec<_>>().join(" | ")));
    }
    out
}

fn alg_intro(r: &Report) -> String {
    let s = |k: &str| r.settings.get(k).map_or("?", String::as_str).to_string();
    ALG_INTRO
        .replace("{limited}", &s("limited_rate_limit"))
        .replace("{high}", &s("high_rate_limit"))
        .replace("{seconds}", &s("duration_alg"))
}

fn detail(r: &Row) -> String {
    [r.detail.as_str(), r.cost.as_str()].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>().join("; ")
}

fn invariant_text(c: &serde_json::Value) -> (String, bool, String) {
    let rep = &c["report"];
    let f = |k: &str| rep.get(k).map_or("?".to_string(), |v| v.to_string());
    let n = |k: &str| {
        let counted = rep.get(format!("{k}_count")).and_then(|v| v.as_i64());
        counted.unwrap_or_else(|| rep.get(k).and_then(|v| v.as_array()).map_or(0, |a| a.len() as i64))
    };
    let sale = c["sale"].as_str().unwrap_or("?").to_string();
    let text = format!(
        "stock_initial {}, stock_left {}, buyers {}, persisted {}, queued {}, missing_in_postgres {}, unknown_to_redis {}",
        f("stock_initial"),
        f("stock_left"),
        f("buyers"),
        f("persisted"),
        f("queued"),
        n("missing_in_postgres"),
        n("unknown_to_redis")
    );
    let text = match rep.get("note").and_then(|v| v.as_str()) {
        Some(note) => format!("{text}; {note}"),
        None => text,
    };
    (sale, c["consistent"].as_bool().unwrap_or(false), text)
}

/// The table printed at the end of a run.
pub fn text(r: &Report) -> String {
    let m = |k: &str| r.machine.get(k).map_or("?", String::as_str);
    let s = |k: &str| r.settings.get(k).map_or("?", String::as_str);
    let mut lines = vec![
        format!(
            "seckill bench — {} — {}, {} cores, load avg at start {}, busy before the runs {} cores",
            r.generated_at,
            m("cpu"),
            m("nproc"),
            m("loadavg"),
            m("busy_before")
        ),
        format!("HTTP generator: {}; {} per HTTP scenario.", s("generator"), s("duration")),
        CPU_TEXT.replace('`', ""),
        String::new(),
    ];
    if !r.rows.is_empty() {
        lines.extend(text_table(&HEAD, r.rows.iter().map(table_cells).collect(), &[0, TARGET_COL]));
    }
    if !r.flat.is_empty() {
        lines.extend([
            String::new(),
            format!("how cost grows with the work: {}", flat::intro(r).replace('`', "")),
            String::new(),
        ]);
        lines.extend(text_table(&flat::HEAD, flat::table(r), &[0, flat::TARGET_COL]));
    }
    if !r.sweep.is_empty() {
        lines.extend([
            String::new(),
            format!("against concurrency: {}", sweep::intro(r).replace('`', "")),
            String::new(),
        ]);
        lines.extend(text_table(&sweep::HEAD, sweep::table(r), &[]));
    }
    if !r.algorithms.is_empty() {
        lines.extend([
            String::new(),
            format!("rate limiter, per algorithm: {}", alg_intro(r).replace('`', "")),
            String::new(),
        ]);
        lines.extend(text_table(&ALG_HEAD, r.algorithms.iter().map(alg_cells).collect(), &[0]));
        lines.push(String::new());
        lines.extend(text_table(&ALG_COST_HEAD, r.algorithms.iter().map(alg_cost_cells).collect(), &[0]));
    }
    lines.extend([String::new(), "details:".into()]);
    lines.extend(
        r.rows
            .iter()
            .chain(&r.flat)
            .chain(&r.sweep)
            .filter(|row| !detail(row).is_empty())
            .map(|row| format!("  {}: {}", row.scenario, detail(row))),
    );
    lines.extend([String::new(), "invariants (seckill reconcile, after the queue drained):".into()]);
    for c in &r.invariants {
        let (sale, ok, text) = invariant_text(c);
        lines.push(format!("  {sale}: {} ({text})", if ok { "consistent" } else { "NOT CONSISTENT" }));
    }
    for (title, items) in [("notes:", &r.notes), ("problems:", &r.problems)] {
        if !items.is_empty() {
            lines.extend([String::new(), title.into()]);
            lines.extend(items.iter().map(|n| format!("  - {n}")));
        }
    }
    lines.join("\n")
}

/// `load-tests/results/bench.md`.
pub fn markdown(r: &Report, stem: &str) -> String {
    let m = |k: &str| r.machine.get(k).map_or("?", String::as_str);
    let s = |k: &str| r.settings.get(k).map_or("?", String::as_str);
    let mut out = vec![
        "# seckill bench results".to_string(),
        String::new(),
        format!("Generated by `cargo xtask bench` at {}.", r.generated_at),
        String::new(),
        format!(
            "- machine: {}, {} cores (shared by the generator, seckill, Redis and Postgres), load average at start {}, busy CPU just before the runs {} cores, {}",
            m("cpu"),
            m("nproc"),
            m("loadavg"),
            m("busy_before"),
            m("kernel")
        ),
        format!("- versions: {}", m("versions")),
        format!(
            "- HTTP generator: {}, {} per HTTP scenario; Redis generator: {}",
            s("generator"),
            s("duration"),
            s("redis_generator")
        ),
        format!("- settings: {}", s("app")),
        format!(
            "- app peak resident memory (VmHWM) of each app in the order they ran (seckill-1: the main rows; the last: the flatness rows, 10,000 connections among them): {}",
            s("app_peak_memory")
        ),
        format!("- {CPU_TEXT}"),
        String::new(),
    ];
    if !r.rows.is_empty() {
        out.extend(md_table(&HEAD, r.rows.iter().map(table_cells).collect(), &[0, TARGET_COL]));
    }
    if !r.flat.is_empty() {
        out.extend([
            String::new(),
            "## How cost grows with the work".into(),
            String::new(),
            flat::intro(r),
            String::new(),
        ]);
        out.extend(md_table(&flat::HEAD, flat::table(r), &[0, flat::TARGET_COL]));
    }
    if !r.sweep.is_empty() {
        out.extend(["\n## Against concurrency\n".into(), sweep::intro(r), String::new()]);
        out.extend(md_table(&sweep::HEAD, sweep::table(r), &[]));
        out.push(format!("\n![purchases per second and p99 against connections]({stem}-concurrency.svg)"));
        out.push(format!("\n![CPU µs per purchase by party against connections]({stem}-cpu.svg)"));
    }
    if !r.algorithms.is_empty() {
        out.extend([
            String::new(),
            "## Rate limiter, per algorithm".into(),
            String::new(),
            alg_intro(r),
            String::new(),
        ]);
        out.extend(md_table(&ALG_HEAD, r.algorithms.iter().map(alg_cells).collect(), &[0]));
        out.extend([String::new(), "What each costs: Redis CPU per limiter call (from Redis's own CPU time during the run, far less sensitive to other load on the machine than the rates), the EVALSHA p99, and the latency and CPU per request of the two `/buy` rows.".into(), String::new()]);
        out.extend(md_table(&ALG_COST_HEAD, r.algorithms.iter().map(alg_cost_cells).collect(), &[0]));
    }
    out.extend([String::new(), "## Details".into(), String::new()]);
    out.extend(
        r.rows
            .iter()
            .chain(&r.flat)
            .chain(&r.sweep)
            .filter(|row| !detail(row).is_empty())
            .map(|row| format!("- **{}**: {}", row.scenario, detail(row))),
    );
    for a in &r.algorithms {
        let redis = REDIS_KINDS.iter().filter_map(|(k, _)| a.redis.get(*k));
        for row in redis.chain(a.http.values()) {
            let cpu = [
                ("gen", row.cpu.gen_cpu),
                ("app", row.cpu.app_cpu),
                ("redis", row.cpu.redis_cpu),
                ("pg", row.cpu.pg_cpu),
                ("other", row.cpu.other_cpu),
            ];
            let cpu: Vec<String> = cpu.iter().filter_map(|(k, v)| v.map(|v| format!("{k} {v:.2}"))).collect();
            let name = if row.key.starts_with("alg-") {
                row.scenario.split_once(": ").map_or(row.scenario.as_str(), |x| x.1)
            } else {
                &row.scenario
            };
            out.push(format!(
                "- **{}, {name}**: {} {}; p50 {} ms, p99 {} ms, CPU per wall second: {}; {}",
                a.algorithm,
                fmt_rate(row.rate),
                row.unit,
                fmt_ms(row.p50_ms),
                fmt_ms(row.p99_ms),
                cpu.join(", "),
                detail(row)
            ));
        }
    }
    out.extend([
        String::new(),
        "## Invariants".into(),
        String::new(),
        "`seckill reconcile SALE` after the queue drained, for every sale used:".into(),
        String::new(),
    ]);
    for c in &r.invariants {
        let (sale, ok, text) = invariant_text(c);
        out.push(format!("- `{sale}`: {} — {text}", if ok { "consistent" } else { "**NOT CONSISTENT**" }));
    }
    for (title, items) in [("## Notes", &r.notes), ("## Problems", &r.problems)] {
        if !items.is_empty() {
            out.extend([String::new(), title.into(), String::new()]);
            out.extend(items.iter().map(|n| format!("- {n}")));
        }
    }
    out.extend([
        String::new(),
        "## How each figure is measured".into(),
        String::new(),
        HOW_MEASURED.trim().into(),
        String::new(),
    ]);
    out.join("\n")
}
