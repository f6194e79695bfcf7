//! Part B, end to end: per K, `POST /buy` on a sale of K shards through one app (worker in the
//! process) on the cluster, with the CPU of the app and each master; then `seckill reconcile`.

use std::path::Path;
use std::time::Duration;

use testbed::{App, Redis, Services, Target};

use super::Args;
use super::masters::Masters;
use crate::measure::checks::reconcile;
use crate::measure::commandstats::CommandStats;
use crate::measure::cpu::{Switches, Usage, Watch, switches};
use crate::measure::process;
use crate::measure::wrk::{Mode, Wrk, WrkOut};

/// One K's HTTP row.
pub struct HttpRow {
    /// The shards; 0 for the row on the single Redis server (one unsharded sale).
    pub k: u32,
    /// Whether the row ran on the single Redis server (always for K = 0).
    pub on_server: bool,
    pub out: WrkOut,
    pub usage: Usage,
    /// The app's context switches over the run.
    pub switches: Switches,
    /// Script calls (`EVALSHA`, all servers of the row) over the run: with the requests, how many
    /// purchases went together in a call.
    pub script_calls: u64,
}

pub struct Http {
    pub rows: Vec<HttpRow>,
    /// "sale: consistent (...)" lines, and whether each was.
    pub reconciled: Vec<(String, bool)>,
}

pub fn run(
    args: &Args,
    services: &mut Services,
    binary: &Path,
    masters: &Masters,
    work: &Path,
) -> anyhow::Result<Http> {
    let env: Vec<(&str, &str)> = [("SECKILL_RATE_LIMIT", "1000000/1s"), ("RUST_LOG", "warn")]
        .into_iter()
        .chain(args.app_env.iter().map(|(name, value)| (name.as_str(), value.as_str())))
        .collect();
    let mut rows = vec![];
    let mut reconciled = vec![];
    // The single server first, with the same app settings: the row the cluster rows read against.
    services.target = Target::Server;
    let started = App::start(services, binary, &env);
    services.target = Target::Cluster;
    let server = started?;
    let mut watch = vec![Watch::process("server", services.redis.pid().unwrap_or_default())];
    watch.push(Watch::process("seckill", server.pid()));
    let single = [services.redis.clone()];
    rows.push(row(args, &server, 0, "http-server", &watch, &single, work)?);
    reconciled.push(reconcile_line(&server, "http-server")?);
    for &k in &args.server_k {
        let sale = format!("http-server-k{k}");
        rows.push(HttpRow { on_server: true, ..row(args, &server, k, &sale, &watch, &single, work)? });
        reconciled.push(reconcile_line(&server, &sale)?);
    }
    drop(server);

    let app = App::start(services, binary, &env)?;
    for &k in &args.k {
        let mut watch = masters.watch();
        watch.push(Watch::process("seckill", app.pid()));
        rows.push(row(args, &app, k, &format!("http-k{k}"), &watch, &masters.nodes, work)?);
    }
    for &k in &args.k {
        reconciled.push(reconcile_line(&app, &format!("http-k{k}"))?);
    }
    Ok(Http { rows, reconciled })
}

/// Seeds `sale` over `k` shards (none for 0) and runs wrk on it, watching `watch` and counting
/// the script calls on `servers`.
fn row(
    args: &Args,
    app: &App,
    k: u32,
    sale: &str,
    watch: &[Watch],
    servers: &[Redis],
    work: &Path,
) -> anyhow::Result<HttpRow> {
    let repo = testbed::workspace_root();
    app.seed(sale, args.http_stock, (k > 0).then_some(k))?;
    let prefix = format!("k{k}");
    let w = Wrk {
        threads: args.threads,
        connections: args.connections,
        seconds: args.duration,
        url: &app.url,
        mode: Mode::Buy { sale, prefix: &prefix },
        rate: None,
    };
    eprintln!(
        "shard-ceiling: K={k}: wrk -t{} -c{} -d{}s POST /buy {sale}",
        args.threads, args.connections, args.duration
    );
    let sw0 = switches(app.pid() as i32).unwrap_or_default();
    let calls0 = script_calls(servers);
    let run = process::run(sale, w.command(&repo), Duration::from_secs(args.duration + 30), watch, work)?;
    let sw1 = switches(app.pid() as i32).unwrap_or_default();
    let script_calls = script_calls(servers).saturating_sub(calls0);
    let out =
        WrkOut::parse(&run.stdout).ok_or_else(|| anyhow::anyhow!("K={k}: no BENCH_WRK line in {}", run.stdout))?;
    eprintln!("shard-ceiling: K={k}: {:.0} req/s, 201 {} of {}", out.rate(), out.status("201"), out.requests);
    Ok(HttpRow { k, on_server: k == 0, out, usage: run.usage, switches: sw1.since(sw0), script_calls })
}

/// `EVALSHA` calls so far on `servers` together.
fn script_calls(servers: &[Redis]) -> u64 {
    servers.iter().map(|server| CommandStats::of(server).get("evalsha").0).sum()
}

/// `seckill reconcile` of `sale`: the line for the report, and whether it was consistent.
fn reconcile_line(app: &App, sale: &str) -> anyhow::Result<(String, bool)> {
    let (rc, stdout, report) = reconcile(app, sale)?;
    let line = match report.filter(|_| rc == 0) {
        Some(r) => format!("{sale}: consistent (\"buyers\":{},\"persisted\":{})", r["buyers"], r["persisted"]),
        None => format!("{sale}: NOT consistent: {}", stdout.replace('\n', "")),
    };
    eprintln!("shard-ceiling: {line}");
    Ok((line, rc == 0))
}
