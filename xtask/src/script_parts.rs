//! `cargo xtask script-parts`: where the Redis CPU of a purchase goes, by elimination. The working
//! tree's `lua/buy_batch.lua` (the sliding log, the client's limit, an address each: the default
//! configuration) is run alone on Redis as `script-ab` runs it, then again with one part after
//! another taken out (the limiter's commands, the writes, the `SISMEMBER`, the deciding of each
//! purchase), then a script that only answers: each row's difference to the row above is what
//! that part costs. Then what a new client address's log costs in three shapes, each alone in a
//! script of the same call: today's sorted set (`ZCARD`, `ZADD`, `PEXPIRE` on a new key), a string
//! (`SET NX PX`), and a field in one shared hash (`HGET` twice, `HSET`: no key per address). The
//! variants only measure: they do not keep the promises, and the app never runs them.
//!
//! Each variant is the assembled script with lines replaced; a replaced line no longer in the
//! script stops the run with its name (update the anchors here when the script changes). Every
//! run is checked: the whole script recorded its buyers, every variant answered one reply per
//! purchase.

use std::process::ExitCode;

use anyhow::{Context, bail, ensure};
use redis::Value;
use testbed::{Options, Redis, Services};

use crate::measure::host::need_tools;
use crate::measure::lua::{lua_file, splice};
use crate::measure::script_run::{self, Shape};
use crate::measure::stats::median;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Rounds: one run of each variant per round (the order turned each round).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    rounds: u32,
    /// Calls per run.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=200_000))]
    calls: u64,
    /// Purchases per call (about what `ab` sees at saturation: 13-14).
    #[arg(long, default_value_t = 14, value_parser = clap::value_parser!(u32).range(1..=64))]
    per_call: u32,
    /// redis-benchmark's connections.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    clients: u32,
}

/// The parts taken out, one after another: a label, and the line replaced (the anchor, then what
/// takes its place).
const CUTS: [(&str, &str, &str); 4] = [
    (
        "without the limiter's commands (it admits)",
        "local memo = type(ARGV[7]) == 'table' and ARGV[7]",
        "do return {1, limit - 1, 0, window} end local memo = type(ARGV[7]) == 'table' and ARGV[7]",
    ),
    (
        "and without the writes (entry, receipts, buyers, counts, stock)",
        "local function commit()",
        "local function commit() do pending, pending_of, sold = {}, {}, 0 return nil end",
    ),
    ("and without the SISMEMBER", "if redis.call('SISMEMBER', KEYS[3], user) == 1 then", "if false then"),
    (
        "and without deciding each purchase (the call's reads stay)",
        "local ok, reply = pcall(one, arg, key, checks)",
        "local ok, reply = true, {{1, 0, 0, 0}, 0, 'ok'}",
    ),
];

/// The loop over the call's purchases the standalone scripts share: `body` runs for each, with
/// `key` its limit key and `order` its order id; the reply is buy_batch.lua's shape.
fn standalone(body: &str) -> String {
    format!(
        "local replies, arg = {{}}, 4\n\
         for i = 1, tonumber(ARGV[3]) do\n\
           local key, order = KEYS[7 + i], ARGV[arg + 1]\n\
           {body}\n\
           replies[i] = {{{{1, 0, 0, 0}}, 0, 'ok'}}\n\
           arg = arg + 7 + 5 * tonumber(ARGV[arg + 6])\n\
         end\n\
         return replies\n"
    )
}

/// The new-address logs, each alone: a label and the body for one purchase.
const LOGS: [(&str, &str); 4] = [
    ("a script that only answers (the call and its arguments)", ""),
    (
        "a log as a sorted set: ZCARD, ZADD, PEXPIRE of a new key (today's)",
        "redis.call('ZCARD', key) redis.call('ZADD', key, 1, '1-' .. order) redis.call('PEXPIRE', key, 1001)",
    ),
    ("a log as a string: SET NX PX of a new key", "redis.call('SET', key, '1-' .. order, 'NX', 'PX', 1001)"),
    (
        "a log as a field of one shared hash: HGET, HGET, HSET (no key per address)",
        "redis.call('HGET', KEYS[6], key) local f = redis.call('HGET', KEYS[7], key) \
         redis.call('HSET', KEYS[7], key, (f or '') .. '1000000000000000 ')",
    ),
];

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    crate::steps::handle_signals()?;
    need_tools(&[("redis-benchmark", "redis-tools")])?;
    let variants = variants()?;
    let mut services = Services::start(&Options::default())?;
    let outcome = rounds(&args, &services.redis, &variants);
    services.stop();
    outcome
}

/// Every script the runs call, labelled: the whole batch script (the working tree's, with the
/// sliding log), each cut after the one before it, then the standalone scripts.
fn variants() -> anyhow::Result<Vec<(String, String)>> {
    let mut whole = String::new();
    splice(None, &lua_file(None, "buy_batch.lua")?, &lua_file(None, "sliding_log.lua")?, &mut whole)?;
    let mut variants = vec![("the batch script, whole".to_string(), whole.clone())];
    let mut script = whole;
    for (label, anchor, replacement) in CUTS {
        let at = script
            .lines()
            .position(|l| l.trim() == anchor)
            .with_context(|| format!("no line {anchor:?} to replace"))?;
        script = script
            .lines()
            .enumerate()
            .map(|(i, l)| if i == at { replacement } else { l })
            .collect::<Vec<_>>()
            .join("\n");
        variants.push((label.to_string(), script.clone()));
    }
    variants.extend(LOGS.iter().map(|(label, body)| (label.to_string(), standalone(body))));
    Ok(variants)
}

fn rounds(args: &Args, redis: &Redis, variants: &[(String, String)]) -> anyhow::Result<ExitCode> {
    let pid = script_run::prepare(redis)?;
    let shape = Shape { per_call: args.per_call, checks: 1, one_address: false };
    let calls: Vec<Vec<String>> = variants
        .iter()
        .map(|(_, script)| {
            let sha: String = redis.query(redis::cmd("SCRIPT").arg("LOAD").arg(script))?;
            Ok(script_run::batch_call(&sha, &variants[0].1, shape))
        })
        .collect::<anyhow::Result<_>>()?;
    let purchases = (args.calls * u64::from(args.per_call)) as f64;
    let mut us = vec![vec![]; variants.len()];
    for round in 0..args.rounds as usize {
        for v in (0..variants.len()).map(|i| (i + round) % variants.len()) {
            let cpu = script_run::fresh_run(redis, pid, &calls[v], args.calls, args.clients)?;
            check(redis, &calls[v], v == 0, purchases, args.per_call)
                .with_context(|| format!("{}: its calls did not run as they should", variants[v].0))?;
            us[v].push(cpu * 1e6 / purchases);
            eprintln!(
                "script-parts: round {} {}: Redis {:.2} µs CPU per purchase",
                round + 1,
                variants[v].0,
                us[v][round]
            );
        }
    }
    println!(
        "Redis CPU µs per purchase, median of {} runs (range), {} purchases a call, the sliding log, an address each:",
        args.rounds, args.per_call
    );
    let medians: Vec<f64> = us.iter().map(|runs| median(runs.clone())).collect();
    for (v, (label, _)) in variants.iter().enumerate() {
        let (lo, hi) = us[v].iter().fold((f64::MAX, f64::MIN), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
        // Each cut against the row before it (what the part cost); each log against the script
        // that only answers (what the log adds).
        let part = match v {
            0 => String::new(),
            v if v > CUTS.len() + 1 => {
                format!("  [{:+.2} over the script that only answers]", medians[v] - medians[CUTS.len() + 1])
            }
            v => format!("  [the part cut: {:.2}]", medians[v - 1] - medians[v]),
        };
        println!("  {:6.2} ({lo:.2}-{hi:.2})  {label}{part}", medians[v]);
    }
    Ok(ExitCode::SUCCESS)
}

/// A run went as it should: the whole script recorded its buyers (a few drawn twice are refused),
/// and one more call of the variant answers a reply per purchase.
fn check(redis: &Redis, call: &[String], whole: bool, purchases: f64, per_call: u32) -> anyhow::Result<()> {
    if whole {
        let bought: u64 = redis.query(redis::cmd("SCARD").arg(&script_run::sale_keys()[2]))?;
        ensure!(bought as f64 >= 0.99 * purchases, "{bought} buyers recorded of {purchases} purchases");
    }
    let mut probe = redis::cmd(&call[0]);
    for arg in &call[1..] {
        probe.arg(arg.replace("__rand_int__", "probe"));
    }
    match redis.query::<Value>(&probe)? {
        Value::Array(replies) if replies.len() == per_call as usize => Ok(()),
        other => bail!("the reply {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    /// Each cut finds its line in today's script, and each variant differs from the one before it.
    #[test]
    fn every_cut_replaces_a_line_of_the_script() {
        let variants = super::variants().unwrap();
        assert_eq!(variants.len(), 1 + super::CUTS.len() + super::LOGS.len());
        for pair in variants[..=super::CUTS.len()].windows(2) {
            assert_ne!(pair[0].1, pair[1].1, "{}", pair[1].0);
        }
    }
}
