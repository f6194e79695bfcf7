//! Part A, the Redis ceiling: per K, K redis-benchmark processes at once, one per shard,
//! straight at the shard's master (no cluster mode, no redirects), then per-shard checks.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};
use seckill::domain::SaleId;
use seckill::redis::keys::SaleKeys;
use testbed::{App, Services};

use super::Args;
use super::masters::Masters;
use crate::measure::cpu::{Snapshot, Usage};
use crate::measure::process::{spawn_logged, wait_bounded};
use crate::measure::wrk::RedisBench;

const PREFIX: &str = "ceiling";
const USER_RANGE: u64 = 100_000_000;
const ORDER_ID: &str = "0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69";

/// One shard's run and checks.
pub struct Shard {
    pub tag: String,
    pub slot: u16,
    pub port: u16,
    pub calls: u64,
    pub clients: u64,
    pub bench: RedisBench,
    /// stock_initial, stock, SCARD buyers, XLEN orders.
    pub counts: [i64; 4],
    pub ok: bool,
}

/// One K's result.
pub struct Ceiling {
    pub k: u32,
    pub shards: Vec<Shard>,
    pub usage: Usage,
    pub ok: bool,
}

/// The shards of `sale` as the app laid them out: shard 0's keys and each `shard_suffixes` one.
fn layout(masters: &Masters, sale: &SaleId) -> anyhow::Result<Vec<(String, SaleKeys)>> {
    let zero = SaleKeys::new(PREFIX, sale);
    let (_, port) = masters.owner(&zero.meta)?;
    let suffixes: Option<String> =
        masters.node(port).query(redis::cmd("HGET").arg(&zero.meta).arg("shard_suffixes"))?;
    let mut shards = vec![(sale.to_string(), zero)];
    for suffix in suffixes.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
        shards.push((format!("{sale}:{suffix}"), SaleKeys::of_shard(PREFIX, sale, suffix.parse()?)));
    }
    Ok(shards)
}

fn one_k(args: &Args, app: &App, masters: &Masters, work: &Path, k: u32) -> anyhow::Result<Ceiling> {
    let sale = SaleId::parse(&format!("ceiling-k{k}")).map_err(anyhow::Error::msg)?;
    let (calls, clients) = (args.total_requests / k as u64, args.total_clients / k as u64);
    app.seed(sale.as_str(), args.stock_total, Some(k)).with_context(|| format!("seeding {sale}"))?;
    let shards = layout(masters, &sale)?;
    ensure!(shards.len() == k as usize, "{sale}: expected {k} shards, shard 0 records {}", shards.len());
    let mut placed = vec![];
    for (tag, keys) in &shards {
        let (slot, port) = masters.owner(&keys.meta)?;
        // A plain read on the shard's own port: MOVED here would mean a wrong owner.
        let count: Option<u32> = masters.node(port).query(redis::cmd("HGET").arg(&keys.meta).arg("shards"))?;
        ensure!(count == Some(k), "{tag} is not a shard of {k} on {port}");
        placed.push((slot, port));
    }
    let used: std::collections::BTreeSet<u16> = placed.iter().map(|p| p.1).collect();
    ensure!(used.len() == k as usize, "K={k}: the app put the shards on {} masters, not {k}", used.len());
    eprintln!(
        "shard-ceiling: K={k}: shards on ports {placed:?} (slot, port), {calls} calls and {clients} clients each"
    );

    // The measured window: K redis-benchmark processes started together.
    let before = Snapshot::take(&masters.watch());
    let mut children = vec![];
    for (i, (_, keys)) in shards.iter().enumerate() {
        let mut cmd = Command::new("redis-benchmark");
        cmd.args([
            "-h",
            "127.0.0.1",
            "-p",
            &placed[i].1.to_string(),
            "-c",
            &clients.to_string(),
            "-n",
            &calls.to_string(),
        ])
        .args(["-r", &USER_RANGE.to_string(), "--csv", "EVALSHA", &masters.buy_sha])
        .arg(keys.all().len().to_string())
        .args(keys.all())
        .args([sale.as_str(), "u-__rand_int__", ORDER_ID, &k.to_string()]);
        children.push(spawn_logged(&mut cmd, work, &format!("k{k}-{i}"))?);
    }
    let mut failed = false;
    for child in &mut children {
        failed |= wait_bounded(child, Duration::from_secs(120))?.0 != 0;
    }
    let usage = before.usage();
    let read = |i: usize, ext: &str| std::fs::read_to_string(work.join(format!("k{k}-{i}.{ext}"))).unwrap_or_default();
    ensure!(
        !failed,
        "K={k}: a redis-benchmark run failed: {}",
        (0..shards.len()).map(|i| read(i, "err")).collect::<String>()
    );

    let mut result = Ceiling { k, shards: vec![], usage, ok: true };
    for (i, (tag, keys)) in shards.into_iter().enumerate() {
        let bench = RedisBench::parse(&read(i, "out"))
            .with_context(|| format!("K={k} shard {i}: cannot parse redis-benchmark output"))?;
        let node = masters.node(placed[i].1);
        let counts = [
            node.query::<Option<i64>>(redis::cmd("HGET").arg(&keys.meta).arg("stock_initial"))?.unwrap_or(-1),
            node.query::<Option<i64>>(redis::cmd("GET").arg(&keys.stock))?.unwrap_or(-1),
            node.query(redis::cmd("SCARD").arg(&keys.buyers))?,
            node.query(redis::cmd("XLEN").arg(&keys.orders))?,
        ];
        let [initial, stock, buyers, xlen] = counts;
        let ok = initial >= 0
            && stock >= 0
            && initial == stock + buyers
            && xlen == buyers
            && buyers as u64 * 100 >= calls * 99;
        eprintln!(
            "shard-ceiling: K={k} {tag} @{}: {:.0} ops/s; stock_initial {initial} = stock {stock} + buyers {buyers}, XLEN {xlen} -> {}",
            placed[i].1,
            bench.rate,
            if ok { "ok" } else { "FAIL" }
        );
        result.ok &= ok;
        // Free the memory before the next K (the AOF is rewritten below).
        node.query::<i64>(redis::cmd("UNLINK").arg(&keys.all()[..]))?;
        result.shards.push(Shard { tag, slot: placed[i].0, port: placed[i].1, calls, clients, bench, counts, ok });
    }
    masters.aof_rewrite_and_wait();
    Ok(result)
}

/// Every K of `--k` through an app that only seeds (the calls go straight to the masters).
pub fn run(
    args: &Args,
    services: &Services,
    binary: &Path,
    masters: &Masters,
    work: &Path,
) -> anyhow::Result<Vec<Ceiling>> {
    let app = App::start(
        services,
        binary,
        &[("SECKILL_KEY_PREFIX", PREFIX), ("SECKILL_NO_WORKER", "true"), ("RUST_LOG", "warn")],
    )?;
    args.k.iter().map(|k| one_k(args, &app, masters, work, *k)).collect()
}
