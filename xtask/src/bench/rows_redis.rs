//! The three redis-benchmark rows of one limiter script: one hot key admitted, a key per client,
//! one hot key refused; each hot-key run is followed by one probe call showing its state.

use seckill::limiter::Algorithm;

use super::runner::Bench;

/// Every limiter script takes `limit window_ms burst nonce` (ARGV[5], the tests' fake clock, is
/// never passed). The nonce is `n-__rand_int__`: redis-benchmark draws it from `-r`, so it can
/// repeat; only sliding-log uses it (log member `<now_us>-<nonce>`).
pub fn limiter_rows(b: &mut Bench, alg: Algorithm, sha: &str, app: &testbed::App) -> anyhow::Result<()> {
    let (name, prefix, n) = (alg.name(), b.args.key_prefix.clone(), b.args.limiter_requests());
    let nonce_note = if alg == Algorithm::SlidingLog {
        "nonce n-__rand_int__: it can repeat under -r, and two calls on the same key in the same microsecond with the same nonce would collapse into one log member (practically never with -r 2147483647, rarely with -r 1000000; at worst the log undercounts by one)"
    } else {
        "nonce n-__rand_int__ (unused by this script; repeats under -r are harmless)"
    };
    let hot_admit = format!("{prefix}:ratelimit:{name}:{{bench-hot-admit}}");
    let hot = format!("{prefix}:ratelimit:{name}:{{bench-hot}}");
    b.redis::<i64>(redis::cmd("DEL").arg(&hot_admit).arg(&hot))?;

    let row = format!("redis-{name}-hot-admit");
    b.rbench(
        &row,
        n,
        2_147_483_647,
        &["EVALSHA", sha, "1", &hot_admit, "100000", "1000", "100000", "n-__rand_int__"],
        Some(app),
    )?;
    probe(b, &row, sha, &hot_admit, ["100000", "1000", "100000"])?;
    b.results.set(
        format!("{row}.detail"),
        format!("one key {hot_admit}, limit 100000 per 1000 ms, burst 100000: every call admitted (as in the in-stock HTTP rows), -r 2147483647; {nonce_note}"),
    );

    let row = format!("redis-{name}-perclient");
    let per_client = format!("{prefix}:ratelimit:{name}:{{c__rand_int__}}");
    b.rbench(&row, n, 1_000_000, &["EVALSHA", sha, "1", &per_client, "20", "1000", "20", "n-__rand_int__"], Some(app))?;
    b.results.set(
        format!("{row}.detail"),
        format!("key per client {per_client}, -r 1000000 random clients (so most calls meet a new or expired key), limit 20 per 1000 ms, burst 20: admitted; {nonce_note}"),
    );

    let row = format!("redis-{name}-hot-refused");
    b.rbench(&row, n, 2_147_483_647, &["EVALSHA", sha, "1", &hot, "10", "1000", "10", "n-__rand_int__"], Some(app))?;
    probe(b, &row, sha, &hot, ["10", "1000", "10"])?;
    b.results.set(
        format!("{row}.detail"),
        format!("one key {hot}, limit 10 per 1000 ms, burst 10: all but ~10 per second refused (what the app sends to Redis for a refused client is far less: it answers 429 from memory until the retry time), -r 2147483647; {nonce_note}"),
    );
    b.redis::<i64>(redis::cmd("DEL").arg(&hot_admit).arg(&hot))?;
    Ok(())
}

/// One more call right after a run, recorded as `<row>.probe` "allowed remaining
/// retry_after_us reset_us" (the state the run left behind).
fn probe(b: &mut Bench, row: &str, sha: &str, key: &str, args: [&str; 3]) -> anyhow::Result<()> {
    let answer: Vec<i64> =
        b.redis(redis::cmd("EVALSHA").arg(sha).arg(1).arg(key).arg(&args[..]).arg(format!("probe-{row}")))?;
    let text: Vec<String> = answer.iter().map(i64::to_string).collect();
    b.results.set(format!("{row}.probe"), text.join(" "));
    Ok(())
}
