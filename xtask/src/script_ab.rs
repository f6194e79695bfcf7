//! `cargo xtask script-ab`: paired A/B rounds of `lua/buy_batch.lua` from two revisions, the
//! script alone on Redis. `redis-benchmark` sends calls of `--per-call` purchases, each a new
//! buyer with `--checks` limits (the sliding log by default): the client's, from an address of its
//! own or (`--one-address`) one address for all, then the buyer's. It sends them to one throwaway
//! Redis (appendonly, `appendfsync everysec`, as the service's), A and B alternating within each
//! round (A first in odd rounds), each run on a fresh keyspace and AOF (rewritten before it, none
//! during). It prints Redis CPU µs per purchase (the server's CPU from /proc over the buyers
//! recorded) for each run, then B / A paired within the rounds (median and range). Without HTTP,
//! the app, the worker and Postgres in the way, a change to the script shows within a few per cent
//! where `ab`'s rounds swing by ten.
//!
//! Both revisions must take the batch script's ARGV as this tool sends them (sale, shards, n, then
//! per purchase user, order, place, traceparent, quantity and proven where the revision takes them,
//! checks and each limit's five ARGV).

use std::process::ExitCode;

use anyhow::{bail, ensure};
use testbed::{Options, Services};

use crate::measure::host::need_tools;
use crate::measure::lua::{lua_file, splice};
use crate::measure::script_run::{self, Shape};
use crate::measure::stats::{median, median_and_range};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Revision A (its `lua/` files, from git).
    #[arg(long)]
    a: String,
    /// Revision B; without it, the working tree's `lua/` files.
    #[arg(long)]
    b: Option<String>,
    /// The limiter script assembled into the batch script (`lua/<ALGORITHM>.lua`).
    #[arg(long, default_value = "sliding_log", value_parser = ["sliding_log", "sliding_counter", "fixed_window", "token_bucket", "gcra"])]
    algorithm: String,
    /// Purchases per call (about what `ab` sees at saturation: 13-14).
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u32).range(1..=64))]
    per_call: u32,
    /// Calls per run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(100..=200_000))]
    calls: u64,
    /// Rounds: one run of each revision per round.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// redis-benchmark's connections.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: u32,
    /// Limits checked per purchase: 1 the client's (the default configuration), 2 the client's and
    /// the buyer's (`SECKILL_USER_RATE_LIMIT` set).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=2))]
    checks: u32,
    /// Every purchase of a call from one client address (one limiter key), as from one address
    /// behind no proxy; without it, each purchase from an address of its own.
    #[arg(long)]
    one_address: bool,
}

/// The batch script of `rev` with its limiter put after the `-- @limiter` line and each piece
/// `lua/<name>.lua` after its `-- @<name>` line (in the pieces too), as the app does.
fn batch_script(rev: Option<&str>, algorithm: &str) -> anyhow::Result<String> {
    let (template, limiter) = (lua_file(rev, "buy_batch.lua")?, lua_file(rev, &format!("{algorithm}.lua"))?);
    ensure!(
        template.lines().any(|l| l == "-- @limiter"),
        "{}: buy_batch.lua has no -- @limiter line",
        rev.unwrap_or("the working tree")
    );
    let mut script = String::new();
    splice(rev, &template, &limiter, &mut script)?;
    Ok(script)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::steps::handle_signals()?;
    need_tools(&[("redis-benchmark", "redis-tools")])?;
    let labels = [args.a.clone(), args.b.clone().unwrap_or_else(|| "the working tree".into())];
    let scripts = [batch_script(Some(&args.a), &args.algorithm)?, batch_script(args.b.as_deref(), &args.algorithm)?];
    let mut services = Services::start(&Options::default())?;
    let outcome = rounds(&args, &services, &labels, &scripts);
    services.stop();
    outcome
}

fn rounds(args: &Args, services: &Services, labels: &[String; 2], scripts: &[String; 2]) -> anyhow::Result<ExitCode> {
    let redis = &services.redis;
    let pid = script_run::prepare(redis)?;
    let shas: Vec<String> =
        scripts.iter().map(|s| redis.query(redis::cmd("SCRIPT").arg("LOAD").arg(s))).collect::<Result<_, _>>()?;
    let shape = Shape { per_call: args.per_call, checks: args.checks, one_address: args.one_address };
    let calls: Vec<Vec<String>> =
        shas.iter().zip(scripts).map(|(sha, script)| script_run::batch_call(sha, script, shape)).collect();
    let keys = script_run::sale_keys();
    let n = args.per_call as usize;
    let mut per_purchase = [vec![], vec![]];
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for build in order {
            let cpu = script_run::fresh_run(redis, pid, &calls[build], args.calls, args.clients)?;
            // The buyers, not the stream's entries: from issue 54 on, a call's orders share one.
            let bought: u64 = redis.query(redis::cmd("SCARD").arg(&keys[2]))?;
            // A few buyers drawn twice are refused; far fewer orders mean the script failed.
            if (bought as f64) < 0.99 * (args.calls * n as u64) as f64 {
                bail!(
                    "{}: {bought} orders from {} purchases: does it take this tool's ARGV?",
                    labels[build],
                    args.calls * n as u64
                );
            }
            let us = cpu * 1e6 / bought as f64;
            per_purchase[build].push(us);
            eprintln!(
                "script-ab: round {round} {}: {bought} purchases, Redis {us:.2} µs CPU per purchase",
                ["a", "b"][build]
            );
        }
    }
    let ratios: Vec<f64> = per_purchase[1].iter().zip(&per_purchase[0]).map(|(b, a)| b / a).collect();
    for (build, label) in labels.iter().enumerate() {
        println!(
            "{} = {label}: median {:.2} µs Redis CPU per purchase",
            ["a", "b"][build],
            median(per_purchase[build].clone())
        );
    }
    let clients = if args.one_address { "one address" } else { "an address each" };
    println!(
        "paired b / a over {} rounds ({} purchases per call, {}, {} limit(s) checked, {clients}), median (range): \
         {} × Redis CPU per purchase",
        args.rounds,
        args.per_call,
        args.algorithm,
        args.checks,
        median_and_range(ratios)
    );
    Ok(ExitCode::SUCCESS)
}
