//! `cargo xtask shard-ceiling`: the throughput of ONE flash sale whose stock is split over K
//! shards (`{"shards": K}` when seeding, docs/stock-sharding.md) on a Redis Cluster of
//! `--masters` masters (3 by default), K = 1, 2, 3 by default: the Redis-side ceiling, and what
//! `POST /buy` delivers end to end.
//!
//! All keys of one shard share one hash tag, so one slot, one master, one Redis core: with one
//! shard, that core is the sale's ceiling however big the cluster is; K shards spread over K
//! masters (the app places them by the cluster's slot map).
//!
//! A. Redis ceiling: an app (prefix `ceiling`, no worker) seeds `ceiling-kK` over K shards; the
//!    layout is read from shard 0's `shard_suffixes` and each shard's master from CLUSTER KEYSLOT
//!    and CLUSTER NODES; then K redis-benchmark processes run AT THE SAME TIME, one per shard,
//!    against its master (EVALSHA buy.lua with the sale's shard count, user `u-__rand_int__`),
//!    `--total-requests / K` calls and `--total-clients / K` connections each. Each shard is then
//!    checked (stock_initial = stock + SCARD buyers, XLEN = SCARD, >= 99 % bought, K masters),
//!    its keys deleted and the AOF rewritten outside the measured window.
//! B. HTTP: an app with its worker serves `http-kK` (K shards) to wrk for `--duration` seconds,
//!    with the CPU of the app and each master; afterwards `seckill reconcile` for each sale. A
//!    first row runs the same against the single Redis server, so the app's CPU per purchase on
//!    the cluster reads against it (the shape of the ceiling).
//!
//! The tables go to stdout and `load-tests/results/shard-ceiling.md`. Exit status 1 when a check
//! fails. Everything runs on 127.0.0.1, bounded, and is stopped by PID.

mod http;
mod masters;
mod redis_rows;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use procfs::Current;
use testbed::{Options, Services, Target};

use crate::measure::clock::utc_now;
use crate::measure::host::{need_tools, raw_dir};
use crate::measure::settings::{Profile, setting};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Shard counts to run (each at most --masters).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3", value_parser = clap::value_parser!(u32).range(1..=12))]
    pub k: Vec<u32>,
    /// Shard counts to run on the single Redis server too, after its unsharded row (e.g. 3: whether
    /// a sharded sale's cost is the Cluster's or the sharding's).
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(2..=12))]
    pub server_k: Vec<u32>,
    /// Masters of the throwaway Redis Cluster (e.g. 6 for the ceiling's 6-master row).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(3..=12))]
    pub masters: u32,
    /// EVALSHA calls per K, split evenly over the K shards.
    #[arg(long, default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(3..=300_000))]
    pub total_requests: u64,
    /// Connections per K, split evenly over the K shards (48 = 48, 24, 16).
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u64).range(3..=3000))]
    pub total_clients: u64,
    /// The Redis-row sale's stock, split over the K shards (at least 3 × --total-requests).
    #[arg(long, default_value_t = 10_000_000)]
    pub stock_total: u64,
    /// Seconds of each HTTP row.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub duration: u64,
    /// The HTTP-row sale's stock (never sells out within --duration).
    #[arg(long, default_value_t = 10_000_000)]
    pub http_stock: u64,
    /// wrk threads.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub threads: u32,
    /// wrk connections.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub connections: u32,
    /// Before the runs, wait up to --load-wait seconds for the 1-minute load average to drop below this.
    #[arg(long, default_value_t = 0.5)]
    pub load_max: f32,
    /// The longest wait for that quiet moment, in seconds (then it runs anyway).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub load_wait: u64,
    /// Where the Markdown goes [default: load-tests/results/shard-ceiling.md].
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Which build of seckill runs.
    #[arg(long, value_enum, default_value_t = Profile::Release)]
    pub profile: Profile,
    /// Run this seckill binary instead of building one (e.g. a copy of an earlier build, to
    /// compare two builds run by run).
    #[arg(long)]
    pub bin: Option<PathBuf>,
    /// Skip the Redis ceiling (part A): only the POST /buy rows.
    #[arg(long)]
    pub http_only: bool,
    /// A setting of the HTTP rows' app, `NAME=VALUE` (repeatable), e.g.
    /// `SECKILL_RATE_LIMIT_SCOPE=global` to measure the two-call purchase.
    #[arg(long = "app-env", value_parser = setting)]
    pub app_env: Vec<(String, String)>,
}

/// The 1, 5 and 15-minute load averages as text.
fn loadavg() -> String {
    procfs::LoadAverage::current().map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen)).unwrap_or_default()
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::steps::handle_signals()?;
    anyhow::ensure!(
        args.stock_total >= 3 * args.total_requests,
        "--stock-total must be >= 3 x --total-requests (the sale must never sell out)"
    );
    anyhow::ensure!(args.k.iter().all(|&k| k <= args.masters), "every --k must be at most --masters");
    need_tools(&[("wrk", "wrk"), ("redis-benchmark", "redis-tools")])?;
    let work = raw_dir("shard-ceiling")?;
    let mut services = Services::start(&Options { cluster: Some(args.masters as usize), browser: false })?;
    // Every seckill process here (serve, reconcile) uses the cluster.
    services.target = Target::Cluster;
    let binary = match &args.bin {
        Some(bin) => bin.clone(),
        None => testbed::Profile::from(args.profile).build()?,
    };
    let mut masters = masters::Masters::find(&services)?;
    masters.prepare()?;

    let load_start = loadavg();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(args.load_wait);
    while procfs::LoadAverage::current().is_ok_and(|l| l.one >= args.load_max) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
    let load_run = loadavg();
    eprintln!("shard-ceiling: load average at start {load_start}, at the first run {load_run}");
    let started_at = utc_now();

    let ceiling = match args.http_only {
        true => Ok(vec![]),
        false => redis_rows::run(&args, &services, &binary, &masters, &work),
    };
    let both = ceiling.and_then(|ceiling| Ok((ceiling, http::run(&args, &mut services, &binary, &masters, &work)?)));
    let (ceiling, http) = match both {
        Ok(both) => both,
        Err(err) => return crate::steps::interrupted().ok_or(err),
    };
    let failed = ceiling.iter().any(|r| !r.ok) || http.reconciled.iter().any(|(_, ok)| !ok);
    let md = table::render(&args, &masters, &ceiling, &http, [&load_start, &load_run, &loadavg()], &started_at);
    let path =
        args.results.clone().unwrap_or_else(|| testbed::workspace_root().join("load-tests/results/shard-ceiling.md"));
    std::fs::write(&path, md)?;
    eprintln!("shard-ceiling: wrote {}", path.display());
    let _ = std::fs::remove_dir_all(&work);
    if failed {
        eprintln!("shard-ceiling: a check failed (see FAIL above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
