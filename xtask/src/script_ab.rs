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

use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use testbed::{Options, Services};

use crate::measure::cpu::process_cpu;
use crate::measure::host::need_tools;
use crate::measure::lua::{lua_file, splice};
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
    let pid = redis.pid().context("the Redis server's pid")? as i32;
    // No AOF rewrite during a run: each run starts from an emptied keyspace and a rewritten AOF.
    redis.query::<()>(redis::cmd("CONFIG").arg("SET").arg("auto-aof-rewrite-percentage").arg(0))?;
    let shas: Vec<String> =
        scripts.iter().map(|s| redis.query(redis::cmd("SCRIPT").arg("LOAD").arg(s))).collect::<Result<_, _>>()?;
    let keys: Vec<String> = ["meta", "stock", "buyers", "orders", "receipts", "queue:bought", "held"]
        .iter()
        .map(|k| format!("script-ab:{{sale:sab}}:{k}"))
        .collect();
    let n = args.per_call as usize;
    // Each revision's call (redis-benchmark draws every __rand_int__ anew): its keys, then the
    // sale, shards and n, then per purchase a new buyer, order (and, from issue 41 on, a quantity
    // of 1; from issue 44 on, no proof of work) and client limit key. A revision's contract line says which: `KEYS[1..7]` from issue 41.
    let calls: Vec<Vec<String>> = shas
        .iter()
        .zip(scripts)
        .map(|(sha, script)| {
            let quantities = script.contains("-- KEYS[1..7]");
            // From issue 44 on, each purchase says whether its proof of work was proven ("": no).
            let proven = script.contains("proven (buy.lua's ARGV[8])");
            let sale_keys = if quantities { 7 } else { 6 };
            let mut call: Vec<String> = vec!["EVALSHA".into(), sha.clone(), (sale_keys + n).to_string()];
            let client = if args.one_address {
                "script-ab:{sale:sab}:limit:c1"
            } else {
                "script-ab:{sale:sab}:limit:c__rand_int__"
            };
            let mut limit_keys = vec![];
            for i in 0..n {
                limit_keys.extend(
                    [client.to_string(), format!("script-ab:{{sale:sab}}:limit:u{i}-__rand_int__")]
                        .into_iter()
                        .take(args.checks as usize),
                );
            }
            call[2] = (sale_keys + limit_keys.len()).to_string();
            call.extend(keys.iter().take(sale_keys).cloned());
            call.extend(limit_keys);
            call.extend(["sab".into(), "1".into(), n.to_string()]);
            for i in 0..n {
                call.extend([format!("u{i}-__rand_int__"), "o__rand_int__".into(), String::new(), String::new()]);
                if quantities {
                    call.push("1".into());
                }
                if proven {
                    call.push(String::new());
                }
                call.push(args.checks.to_string());
                for _ in 0..args.checks {
                    // A limit no purchase meets: each is admitted, each costs its limit's work.
                    call.extend(["1000000", "1000", "1000000", "n__rand_int__", ""].map(String::from));
                }
            }
            call
        })
        .collect();
    let mut per_purchase = [vec![], vec![]];
    for round in 1..=args.rounds {
        let order = if round % 2 == 1 { [0, 1] } else { [1, 0] };
        for build in order {
            redis.query::<()>(&redis::cmd("FLUSHALL"))?;
            redis.query::<String>(&redis::cmd("BGREWRITEAOF"))?;
            ensure!(redis.wait_aof_rewritten(Duration::from_secs(60)), "the AOF rewrite took over 60 s");
            redis.query::<()>(
                redis::cmd("HSET").arg(&keys[0]).arg("stock_initial").arg(u64::MAX >> 12).arg("shards").arg(1),
            )?;
            redis.query::<()>(redis::cmd("SET").arg(&keys[1]).arg(u64::MAX >> 12))?;
            let before = process_cpu(pid).context("the Redis server's CPU")?;
            let status = Command::new("redis-benchmark")
                .args(["-h", "127.0.0.1", "-p", &redis.port.to_string(), "-c", &args.clients.to_string()])
                .args(["-n", &args.calls.to_string(), "-r", "2147483647", "-q"])
                .args(&calls[build])
                .stdout(Stdio::null())
                .status()?;
            ensure!(status.success(), "redis-benchmark failed");
            let cpu = process_cpu(pid).context("the Redis server's CPU")? - before;
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
