//! Part B, end to end: per K, `POST /buy` on a sale of K shards through one app (worker in the
//! process) on the cluster, with the CPU of the app and each master; then `seckill reconcile`.

use std::path::Path;
use std::time::Duration;

use testbed::{App, Services};

use super::Args;
use super::masters::Masters;
use crate::bench::cpu::{Usage, Watch, switches};
use crate::bench::driver::reconcile;
use crate::bench::measure;
use crate::bench::wrk::{Mode, Wrk, WrkOut};

/// One K's HTTP row.
pub struct HttpRow {
    pub k: u32,
    pub out: WrkOut,
    pub usage: Usage,
    /// The app's context switches over the run.
    pub switches: u64,
}

pub struct Http {
    pub rows: Vec<HttpRow>,
    /// "sale: consistent (...)" lines, and whether each was.
    pub reconciled: Vec<(String, bool)>,
}

pub fn run(args: &Args, services: &Services, binary: &Path, masters: &Masters, work: &Path) -> anyhow::Result<Http> {
    let app = App::start(services, binary, &[("SECKILL_RATE_LIMIT", "1000000/1s"), ("RUST_LOG", "warn")])?;
    let repo = testbed::workspace_root();
    let mut rows = vec![];
    for &k in &args.k {
        let sale = format!("http-k{k}");
        app.seed(&sale, args.http_stock, Some(k))?;
        let mut watch = masters.watch();
        watch.push(Watch::process("seckill", app.pid()));
        let prefix = format!("k{k}");
        let w = Wrk {
            threads: args.threads,
            connections: args.connections,
            seconds: args.duration,
            url: &app.url,
            mode: Mode::Buy { sale: &sale, prefix: &prefix },
            rate: None,
        };
        eprintln!(
            "shard-ceiling: K={k}: wrk -t{} -c{} -d{}s POST /buy {sale}",
            args.threads, args.connections, args.duration
        );
        let sw0 = switches(app.pid() as i32).unwrap_or(0);
        let run = measure::run(
            &format!("http-k{k}"),
            w.command(&repo),
            Duration::from_secs(args.duration + 30),
            &watch,
            work,
        )?;
        let sw1 = switches(app.pid() as i32).unwrap_or(0);
        let out =
            WrkOut::parse(&run.stdout).ok_or_else(|| anyhow::anyhow!("K={k}: no BENCH_WRK line in {}", run.stdout))?;
        eprintln!("shard-ceiling: K={k}: {:.0} req/s, 201 {} of {}", out.rate(), out.status("201"), out.requests);
        rows.push(HttpRow { k, out, usage: run.usage, switches: sw1.saturating_sub(sw0) });
    }
    let mut reconciled = vec![];
    for &k in &args.k {
        let sale = format!("http-k{k}");
        let (rc, stdout, report) = reconcile(&app, &sale)?;
        let line = match report.filter(|_| rc == 0) {
            Some(r) => format!("{sale}: consistent (\"buyers\":{},\"persisted\":{})", r["buyers"], r["persisted"]),
            None => format!("{sale}: NOT consistent: {}", stdout.replace('\n', "")),
        };
        eprintln!("shard-ceiling: {line}");
        reconciled.push((line, rc == 0));
    }
    Ok(Http { rows, reconciled })
}
