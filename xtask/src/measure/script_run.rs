//! One purchase script alone on Redis: `lua/buy_batch.lua`'s call as `redis-benchmark` sends it
//! (every `__rand_int__` drawn anew: a new buyer, order and, unless one address, limiter key per
//! purchase), run on a fresh keyspace and AOF, with the Redis server's CPU meanwhile
//! (`script_ab`, `script_parts`).

use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, ensure};
use testbed::Redis;

use super::cpu::process_cpu;

/// The longest one run may take (10,000 calls of 14 purchases took about 5 s on this 2-core host,
/// so the most a run may ask, 200,000, about two minutes): then redis-benchmark is stopped and the
/// run fails.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The sale's keys the calls use (`buy.lua`'s KEYS[1..7], one throwaway sale).
pub fn sale_keys() -> Vec<String> {
    ["meta", "stock", "buyers", "orders", "receipts", "queue:bought", "held"]
        .iter()
        .map(|k| format!("script-ab:{{sale:sab}}:{k}"))
        .collect()
}

/// The shape of the calls: purchases per call, limits checked per purchase, one client address
/// for all or an address each.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub per_call: u32,
    pub checks: u32,
    pub one_address: bool,
}

/// `script`'s call (loaded as `sha`) as redis-benchmark's arguments: its keys, then the sale,
/// shards and n, then per purchase a new buyer, order (and, from issue 41 on, a quantity of 1;
/// from issue 44 on, no proof of work) and its limit keys. A revision's contract line says which:
/// `KEYS[1..7]` from issue 41.
pub fn batch_call(sha: &str, script: &str, shape: Shape) -> Vec<String> {
    let quantities = script.contains("-- KEYS[1..7]");
    // From issue 44 on, each purchase says whether its proof of work was proven ("": no).
    let proven = script.contains("proven (buy.lua's ARGV[8])");
    let keys = if quantities { 7 } else { 6 };
    let n = shape.per_call as usize;
    let client =
        if shape.one_address { "script-ab:{sale:sab}:limit:c1" } else { "script-ab:{sale:sab}:limit:c__rand_int__" };
    let mut limit_keys = vec![];
    for i in 0..n {
        limit_keys.extend(
            [client.to_string(), format!("script-ab:{{sale:sab}}:limit:u{i}-__rand_int__")]
                .into_iter()
                .take(shape.checks as usize),
        );
    }
    let mut call: Vec<String> = vec!["EVALSHA".into(), sha.into(), (keys + limit_keys.len()).to_string()];
    call.extend(sale_keys().into_iter().take(keys));
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
        call.push(shape.checks.to_string());
        for _ in 0..shape.checks {
            // A limit no purchase meets: each is admitted, each costs its limit's work.
            call.extend(["1000000", "1000", "1000000", "n__rand_int__", ""].map(String::from));
        }
    }
    call
}

/// Prepares `redis` for runs: no AOF rewrite during one (each starts from an emptied keyspace
/// and a rewritten AOF). Returns the server's pid.
pub fn prepare(redis: &Redis) -> anyhow::Result<i32> {
    redis.query::<()>(redis::cmd("CONFIG").arg("SET").arg("auto-aof-rewrite-percentage").arg(0))?;
    Ok(redis.pid().context("the Redis server's pid")? as i32)
}

/// One run: the keyspace emptied and the AOF rewritten, the sale seeded with stock no run sells
/// out, then `calls` of `call` by `clients` connections, within [`RUN_LIMIT`]. Returns the Redis
/// server's CPU seconds.
pub fn fresh_run(redis: &Redis, pid: i32, call: &[String], calls: u64, clients: u32) -> anyhow::Result<f64> {
    let keys = sale_keys();
    redis.query::<()>(&redis::cmd("FLUSHALL"))?;
    redis.query::<String>(&redis::cmd("BGREWRITEAOF"))?;
    ensure!(redis.wait_aof_rewritten(Duration::from_secs(60)), "the AOF rewrite took over 60 s");
    redis
        .query::<()>(redis::cmd("HSET").arg(&keys[0]).arg("stock_initial").arg(u64::MAX >> 12).arg("shards").arg(1))?;
    redis.query::<()>(redis::cmd("SET").arg(&keys[1]).arg(u64::MAX >> 12))?;
    let before = process_cpu(pid).context("the Redis server's CPU")?;
    let mut bench = Command::new("redis-benchmark");
    bench
        .args(["-h", "127.0.0.1", "-p", &redis.port.to_string(), "-c", &clients.to_string()])
        .args(["-n", &calls.to_string(), "-r", "2147483647", "-q"])
        .args(call)
        .stdout(Stdio::null());
    let status = crate::steps::run(&mut bench, std::time::Instant::now() + RUN_LIMIT)?;
    ensure!(status.success(), "redis-benchmark failed");
    Ok(process_cpu(pid).context("the Redis server's CPU")? - before)
}
