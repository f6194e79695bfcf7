//! `cargo xtask bench`: one command, one table: how fast is seckill on this machine, compared
//! with its own HTTP ceiling, and do the promises still hold afterwards?
//!
//! It starts a throwaway Redis and Postgres (`testbed`), builds and starts the binary, runs every
//! row for a bounded time or count against 127.0.0.1 only, prints the tables and writes them to
//! `load-tests/results/bench.json` and `bench.md` (the Markdown also says how each figure was
//! measured). Everything it started is stopped by PID, also on failure.
//!
//! Rows (every HTTP row: wrk with `load-tests/lib/wrk-bench.lua`, same threads and connections
//! except the paced 80% run): GET /healthz (the ceiling; run twice, the better counts), POST /buy
//! in stock, paced at 80% of that peak, paced at `--light-rate`, sold out, rate limited; a polling
//! storm on GET /sales/{id} (with the Redis commands it caused) and a storm of repeated purchases
//! by 500 buyers (409 with their order id); Redis
//! EVALSHA buy.lua (redis-benchmark), the worker drain of its orders, the queue lag of the
//! in-stock run; and per limiter algorithm (`seckill::limiter::Algorithm::ALL`) three EVALSHA
//! rows of its script and two /buy rows through an app running it. Then `seckill reconcile` for
//! every sale used. Then the concurrency sweep (`rows_sweep`): the in-stock purchase at 4 to
//! 1,024 connections, drawn as two SVG charts (`--only sweep` runs just those). Last, the flatness rows (`rows_flat`): the in-stock purchase on one sale, then
//! on a sale whose buyer set holds 10 million synthetic members, over 100 sales at once and over
//! 10,000 connections, and the first again (drift), each as a ratio to the first (`--only flat`
//! runs just those).
//!
//! Exit status 0 when every sale is consistent (missed targets, 5xx and log warnings are listed
//! as problems in the report); 1 when an invariant fails; an error when a step could not run.
//!
//! # Layout
//!
//! The modules stand in layers, lowest first: rows produce values of the model, the report reads
//! them and never the rows. A module imports from its own layer and the layers below only, and
//! the modules of one layer not in a circle (the test at the end of this file checks every
//! `super::` path against this list, with `crate::layout`).
//!
//! 1. Sampling: `queue`, `logs` (the queue-lag sampler and the drain, the apps' log scan; the
//!    measuring every command shares, CPU, generator runs and their outputs, is `crate::measure`).
//! 2. Model: `model` (the results of a run, a row, and what the rows tell the report).
//! 3. Report: `builder`, `algs`, `lag`, `storms`, `flat`, `sweep`, `report`, `render`, `chart`
//!    (from the results to the tables and the charts).
//! 4. Running: `runner` (one bench run: its servers and apps, one measured generator run, what
//!    the rows share).
//! 5. Rows: `rows_redis`, `rows_storms`, `rows_flat`, `rows_sweep`, `rows` (what runs, in which
//!    order).

mod algs;
mod builder;
mod chart;
mod flat;
mod lag;
mod logs;
mod model;
mod queue;
mod render;
mod report;
mod rows;
mod rows_flat;
mod rows_redis;
mod rows_storms;
mod rows_sweep;
mod runner;
mod storms;
mod sweep;

use std::path::PathBuf;
use std::process::ExitCode;

use seckill::limiter::Algorithm;
use testbed::{Options, Services};

use self::model::Results;
use self::runner::Bench;
use crate::measure::clock::utc_now;
use crate::measure::host::{need_tools, raw_dir};
use crate::measure::settings::Profile;

/// A subset of the rows (`--only`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// The flatness rows and their single-sale reference (`rows_flat`), written to
    /// `bench-flat.json` and `bench-flat.md` so a partial run never replaces the full table.
    Flat,
    /// The concurrency sweep (`rows_sweep`), written to `bench-sweep.json`, `bench-sweep.md` and
    /// its two charts `bench-sweep-concurrency.svg` and `bench-sweep-cpu.svg`.
    Sweep,
}

impl Only {
    /// The name of the files the run writes.
    fn stem(self) -> &'static str {
        match self {
            Only::Flat => "bench-flat",
            Only::Sweep => "bench-sweep",
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A smoke run of every row (about 2 minutes after the build): 2 s per HTTP row, 1 s per
    /// algorithm row, 20,000 drain orders, 10,000 limiter calls, 1,000,000 synthetic buyers in
    /// the flatness row (explicit options still win).
    #[arg(long)]
    pub quick: bool,
    /// Run only these rows (the report then holds just them).
    #[arg(long, value_enum)]
    pub only: Option<Only>,
    /// Synthetic buyers in the buyer set of the flatness row's sale before it runs
    /// [default: 10000000; --quick: 1000000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=50_000_000))]
    pub flat_buyers: Option<u64>,
    /// Sales open and bought at once in the many-sales flatness row.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(2..=10_000))]
    pub flat_sales: u32,
    /// wrk connections (-c) of the many-connections flatness row (the soft open files limit is
    /// raised to the hard one for it).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    pub flat_connections: u32,
    /// Seconds per main HTTP row (wrk -d) [default: 6; --quick: 2].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub duration: Option<u64>,
    /// Seconds per per-algorithm HTTP row (10 of them with every algorithm) [default: 4; --quick: 1].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub duration_alg: Option<u64>,
    /// Orders queued by the buy.lua redis-benchmark run, then drained by the worker
    /// [default: 100000; --quick: 20000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=5_000_000))]
    pub drain_orders: Option<u64>,
    /// Calls per limiter redis-benchmark run (3 runs per algorithm) [default: 100000; --quick: 10000].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=5_000_000))]
    pub limiter_requests: Option<u64>,
    /// Limiter algorithms measured, in this order [default: all of them].
    #[arg(long, value_delimiter = ',')]
    pub algorithms: Vec<Algorithm>,
    /// wrk threads (-t); the generator shares the machine's cores with the service.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// wrk connections (-c).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// wrk connections of the paced 80% run: enough idle ones that the schedule sets the rate.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub paced_connections: u32,
    /// Rate of the light-load paced run (the latency floor).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub light_rate: u64,
    /// SECKILL_RATE_LIMIT of the rate-limited apps.
    #[arg(long, default_value = "10/1s")]
    pub limited_rate_limit: String,
    /// SECKILL_WORKER_BATCH of the apps and the drain worker [default: the app's, 2000].
    #[arg(long)]
    pub worker_batch: Option<u32>,
    /// SECKILL_KEY_PREFIX of the apps.
    #[arg(long, default_value = "bench")]
    pub key_prefix: String,
    /// Where bench.json and bench.md go [default: load-tests/results].
    #[arg(long)]
    pub results_dir: Option<PathBuf>,
    /// Before each row, wait up to this many seconds for the machine to use < 0.3 cores.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600))]
    pub quiet_wait: u64,
    /// Keep the raw outputs (generator outputs, app logs) and print where (kept anyway on failure).
    #[arg(long)]
    pub keep_raw: bool,
    /// Which build of seckill runs.
    #[arg(long, value_enum, default_value_t = Profile::Release)]
    pub profile: Profile,
}

impl Args {
    fn pick(&self, value: Option<u64>, full: u64, quick: u64) -> u64 {
        value.unwrap_or(if self.quick { quick } else { full })
    }

    pub fn duration(&self) -> u64 {
        self.pick(self.duration, 6, 2)
    }

    pub fn duration_alg(&self) -> u64 {
        self.pick(self.duration_alg, 4, 1)
    }

    pub fn drain_orders(&self) -> u64 {
        self.pick(self.drain_orders, 100_000, 20_000)
    }

    pub fn limiter_requests(&self) -> u64 {
        self.pick(self.limiter_requests, 100_000, 10_000)
    }

    pub fn flat_buyers(&self) -> u64 {
        self.pick(self.flat_buyers, 10_000_000, 1_000_000)
    }

    pub fn algorithms(&self) -> Vec<Algorithm> {
        if self.algorithms.is_empty() { Algorithm::ALL.to_vec() } else { self.algorithms.clone() }
    }
}

/// The whole run: rows, then the report.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    // Each app gets its settings from here; none leak in from the caller's environment.
    for var in [
        "SECKILL_NO_WORKER",
        "SECKILL_RATE_LIMIT",
        "SECKILL_RATE_LIMIT_ALGORITHM",
        "SECKILL_RATE_LIMIT_BURST",
        "SECKILL_TRUSTED_PROXIES",
        "SECKILL_MAX_CONNECTIONS_PER_CLIENT",
    ] {
        // SAFETY: no other thread runs yet (the signal thread starts below).
        unsafe { std::env::remove_var(var) };
    }
    crate::steps::handle_signals()?;
    need_tools(&[("wrk", "wrk"), ("redis-benchmark", "redis-tools")])?;
    rows_flat::raise_nofile(args.flat_connections)?;
    // A partial run has files of its own: it never replaces the full table.
    let stem = args.only.map_or("bench", Only::stem);
    let raw = raw_dir("bench")?;
    let results_dir = args.results_dir.clone().unwrap_or_else(|| testbed::workspace_root().join("load-tests/results"));
    let services = Services::start(&Options { cluster: None, browser: false })?;
    let started = std::time::Instant::now();
    let binary = testbed::Profile::from(args.profile).build()?;
    eprintln!("==> build took {} s", started.elapsed().as_secs());
    if let Some(code) = crate::steps::interrupted() {
        return Ok(code);
    }
    let mut base_env =
        vec![("SECKILL_KEY_PREFIX".to_string(), args.key_prefix.clone()), ("RUST_LOG".into(), "info,sqlx=warn".into())];
    if let Some(batch) = args.worker_batch {
        base_env.push(("SECKILL_WORKER_BATCH".into(), batch.to_string()));
    }
    let results = Results { raw: raw.clone(), ..Default::default() };
    let mut bench = Bench { args, services, binary, repo: testbed::workspace_root(), results, base_env };
    let started = std::time::Instant::now();
    let outcome = rows::all(&mut bench);
    eprintln!("==> scenarios took {} s", started.elapsed().as_secs());
    if let Err(err) = outcome {
        eprintln!("bench: raw outputs and logs kept in {}", raw.display());
        return crate::steps::interrupted().ok_or(err);
    }
    let rep = report::build(&bench.results, utc_now());
    std::fs::create_dir_all(&results_dir)?;
    std::fs::write(results_dir.join(format!("{stem}.json")), serde_json::to_string_pretty(&rep)? + "\n")?;
    std::fs::write(results_dir.join(format!("{stem}.md")), render::markdown(&rep, stem))?;
    let mut written = vec![format!("{stem}.json"), format!("{stem}.md")];
    for (name, svg) in chart::charts(&rep)?.into_iter().flatten() {
        written.push(format!("{stem}-{name}.svg"));
        std::fs::write(results_dir.join(written.last().expect("pushed")), svg)?;
    }
    let dir = results_dir.display();
    let written: Vec<String> = written.iter().map(|name| format!("{dir}/{name}")).collect();
    println!("{}\n\nwritten: {}", render::text(&rep), written.join(" "));
    let consistent = bench.results.checks.iter().all(|(_, rc, _)| *rc == 0);
    if !consistent || bench.args.keep_raw {
        eprintln!("bench: raw outputs and logs kept in {}", raw.display());
    } else {
        let _ = std::fs::remove_dir_all(&raw);
    }
    if !consistent {
        eprintln!("bench: an invariant failed (see the invariants above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_module_imports_only_its_own_layer_and_below_without_a_circle() {
        crate::layout::check("bench", include_str!("mod.rs"), "super::", true);
    }
}
