//! The rows of a bench run, in order: the main HTTP rows, the polling and repeat storms
//! (`rows_storms`), the rate-limited row, each limiter algorithm's HTTP rows, the Redis
//! ceilings and the worker drain, the concurrency sweep (`rows_sweep`), then the flatness rows
//! (`rows_flat`).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use seckill::domain::SaleId;
use seckill::limiter::Algorithm;
use seckill::redis::keys::sale_rate_limit_key;

use super::model::script;
use super::queue::{Sampler, drain};
use super::runner::{Bench, HIGH_RATE_LIMIT, keys, warm_up};
use crate::measure::checks::drained;
use crate::measure::cpu::wait_quiet;
use crate::measure::host::{machine, version};
use crate::measure::wrk::Mode;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

pub fn all(b: &mut Bench) -> anyhow::Result<()> {
    settings(b);
    match b.args.only {
        Some(super::Only::Flat) => return super::rows_flat::flat_rows(b),
        Some(super::Only::Sweep) => return super::rows_sweep::sweep_rows(b),
        None => {}
    }
    let peak = main_rows(b)?;
    jwt_row(b, peak)?;
    super::rows_storms::storm_rows(b)?;
    limited_row(b)?;
    for alg in b.args.algorithms() {
        algorithm_rows(b, alg)?;
    }
    redis_rows_and_drain(b)?;
    super::rows_sweep::sweep_rows(b)?;
    super::rows_flat::flat_rows(b)
}

fn settings(b: &mut Bench) {
    let (cpu, nproc, kernel, load) = machine();
    let a = &b.args;
    let (duration, batch) = (a.duration(), a.worker_batch.map_or("2000 (default)".into(), |n| n.to_string()));
    let algs: Vec<&str> = a.algorithms().iter().map(|x| x.name()).collect();
    let generator = format!(
        "wrk -t{} -c{} --latency --timeout 5s -s load-tests/lib/wrk-bench.lua (closed loop)",
        a.threads, a.connections
    );
    let app = format!(
        "main rows: the default limiter algorithm (sliding-log), SECKILL_RATE_LIMIT={HIGH_RATE_LIMIT} except the rate-limited row ({lim}); per-algorithm rows: SECKILL_RATE_LIMIT_ALGORITHM=<algorithm>, SECKILL_RATE_LIMIT={HIGH_RATE_LIMIT} (in stock) or {lim} (rate limited), burst the default (= REQUESTS); SECKILL_WORKER_BATCH={batch}; SECKILL_KEY_PREFIX={prefix}; RUST_LOG=info,sqlx=warn; Redis appendonly yes + appendfsync everysec; Postgres fsync=off (throwaway servers of the testbed crate); {profile:?} build",
        lim = a.limited_rate_limit,
        prefix = a.key_prefix,
        profile = a.profile,
    );
    let versions = format!("{}; {}; {}", version("wrk", 2), version("redis-server", 3), version("psql", 3));
    let (duration_alg, limited, only) = (a.duration_alg(), a.limited_rate_limit.clone(), a.only);
    let r = &mut b.results;
    r.set("machine.nproc", nproc);
    r.set("machine.cpu", cpu);
    r.set("machine.kernel", kernel);
    r.set("machine.versions", versions);
    r.set("machine.loadavg", load);
    r.set("machine.busy_before", format!("{:.2}", wait_quiet(Duration::ZERO, 0.3).0));
    if let Some(only) = only {
        r.set("setting.only", format!("{only:?}").to_lowercase());
    }
    r.set("setting.duration", format!("{duration} s"));
    r.set("setting.duration_alg", format!("{duration_alg} s"));
    r.set("setting.duration_flat", format!("{} s", duration.max(super::rows_flat::MIN_SECONDS)));
    r.set("setting.high_rate_limit", HIGH_RATE_LIMIT);
    r.set("setting.limited_rate_limit", limited);
    r.set("setting.generator", generator);
    r.set("setting.redis_generator", "redis-benchmark -c 50 -P 1 (one thread), EVALSHA");
    r.set("setting.app", app);
    r.set("algorithms", algs.join(" "));
    r.set("worker.batch", a.worker_batch.unwrap_or(2000));
}

/// Redis's `total_forks` so far (`INFO stats`).
fn redis_forks(b: &Bench) -> anyhow::Result<u64> {
    let info: String = b.redis(redis::cmd("INFO").arg("stats"))?;
    let line = info.lines().find_map(|l| l.strip_prefix("total_forks:")).context("no total_forks in INFO stats")?;
    Ok(line.trim().parse()?)
}

/// Healthz, in stock (with the queue sampler), paced 80% and light, sold out, healthz again; the
/// in-stock rate.
fn main_rows(b: &mut Bench) -> anyhow::Result<f64> {
    let (d, c) = (b.args.duration(), b.args.connections);
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT)])?;
    b.seed(&app, "bench-instock", 10_000_000)?;
    b.seed(&app, "bench-soldout", 100)?;
    warm_up(b, &app, "main")?;
    b.wrk("http-healthz", &app, d, c, Mode::Healthz, None)?;
    b.results.set("http-healthz.detail", "no I/O: the cost of HTTP in this process");

    let stream = keys(b, "bench-instock").orders;
    let sampler =
        Sampler::start(&b.services.redis.url(), &stream, Duration::from_millis(100), Duration::from_secs(d + 60))?;
    let instock = b.wrk("http-buy-instock", &app, d, c, Mode::Buy { sale: "bench-instock", prefix: "u" }, None);
    std::thread::sleep(Duration::from_secs(1)); // the queue's tail drains after the last request
    b.results.queue = Some(sampler.stop()?);
    let peak = instock?.rate();
    b.results.set(
        "http-buy-instock.detail",
        format!(
            "stock 10,000,000, worker in the app; limiter (sliding-log, the default, {HIGH_RATE_LIMIT}) admits every request (one hot key)"
        ),
    );

    let paced = (peak * 0.8) as u64;
    b.results.set("paced.target_rate", paced);
    b.results.set("paced.connections", b.args.paced_connections);
    eprintln!("==> paced run at 80% of the in-stock peak ({peak:.0} req/s): {paced} req/s");
    let pc = b.args.paced_connections;
    // Redis forks for its AOF rewrites (every 100 % of growth past 64 MB, the defaults): a fork
    // pauses Redis and its child competes for the cores, so the row says how many it met.
    let forks_before = redis_forks(b)?;
    b.wrk("http-buy-instock-paced", &app, d, pc, Mode::Buy { sale: "bench-instock", prefix: "p" }, Some(paced.max(1)))?;
    b.results.set("paced.redis_forks", redis_forks(b)? - forks_before);
    let light = b.args.light_rate;
    b.results.set("light.target_rate", light);
    b.results.set("light.connections", c);
    b.wrk("http-buy-instock-light", &app, d, c, Mode::Buy { sale: "bench-instock", prefix: "q" }, Some(light))?;

    b.wrk("http-buy-soldout", &app, d, c, Mode::Buy { sale: "bench-soldout", prefix: "s" }, None)?;
    b.results.set("http-buy-soldout.detail", "stock 100, sold out by the first requests");
    // The ceiling again, so a burst of other load during one /healthz run does not skew every
    // ratio: the report takes the better of the two.
    b.wrk("http-healthz-2", &app, d, c, Mode::Healthz, None)?;

    b.check(&app, "bench-instock")?;
    b.check(&app, "bench-soldout")?;
    let lag = b.psql(
        "select json_build_object('orders', count(*), \
         'p50_ms', percentile_cont(0.5) within group (order by extract(epoch from persisted_at - created_at) * 1000), \
         'p99_ms', percentile_cont(0.99) within group (order by extract(epoch from persisted_at - created_at) * 1000), \
         'max_ms', max(extract(epoch from persisted_at - created_at) * 1000)) \
         from orders where sale_id = 'bench-instock' and user_id like 'u-%'",
    )?;
    b.results.lag = serde_json::from_str(&lag).ok();
    b.stop_app(app);
    Ok(peak)
}

/// In stock with `SECKILL_AUTH=jwt`: every request a distinct user with its own HS256 token,
/// signed beforehand (half again as many as the in-stock row's `peak` rate would need).
fn jwt_row(b: &mut Bench, peak: f64) -> anyhow::Result<()> {
    let (d, c) = (b.args.duration(), b.args.connections);
    let secret: String = (0..64).map(|_| fastrand::alphanumeric()).collect();
    let app = b.start_app(&[
        ("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT),
        ("SECKILL_AUTH", "jwt"),
        ("SECKILL_JWT_SECRET", &secret),
    ])?;
    b.seed(&app, "bench-instock-jwt", 10_000_000)?;
    warm_up(b, &app, "jwt")?;
    let count = (peak * d as f64 * 1.5) as usize + 10_000;
    let tokens = std::env::temp_dir().join(format!("seckill-bench-tokens-{}", std::process::id()));
    let secret = secrecy::SecretString::from(secret);
    let mut text = String::with_capacity(count * 160);
    for n in 0..count {
        let user = seckill::domain::UserId::parse(&format!("j-{n}")).map_err(anyhow::Error::msg)?;
        let token = seckill::identity::sign_hs256(&secret, &user, "sub", Duration::from_secs(3600), None, None);
        text.push_str(&token.map_err(anyhow::Error::msg)?);
        text.push('\n');
    }
    std::fs::write(&tokens, text)?;
    let run =
        b.wrk("http-buy-instock-jwt", &app, d, c, Mode::BuyJwt { sale: "bench-instock-jwt", tokens: &tokens }, None);
    std::fs::remove_file(&tokens)?;
    run?;
    b.results.set(
        "http-buy-instock-jwt.detail",
        format!("as in stock, with SECKILL_AUTH=jwt (HS256): each request a bearer token of its own, {count} signed beforehand"),
    );
    b.check(&app, "bench-instock-jwt")?;
    b.stop_app(app);
    Ok(())
}

fn limited_row(b: &mut Bench) -> anyhow::Result<()> {
    let limit = b.args.limited_rate_limit.clone();
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", &limit)])?;
    b.seed(&app, "bench-limited", 1_000_000)?;
    b.wrk(
        "http-buy-limited",
        &app,
        b.args.duration(),
        b.args.connections,
        Mode::Buy { sale: "bench-limited", prefix: "l" },
        None,
    )?;
    b.results.set(
        "http-buy-limited.detail",
        format!(
            "app with SECKILL_RATE_LIMIT={limit} (default algorithm, sliding-log), all requests from 127.0.0.1; sale in stock"
        ),
    );
    b.check(&app, "bench-limited")?;
    b.stop_app(app);
    Ok(())
}

/// An app that admits everything (in stock), then one at the limited rate, on one sale; the
/// client's limiter key is deleted before each app so neither starts with the other's state.
fn algorithm_rows(b: &mut Bench, alg: Algorithm) -> anyhow::Result<()> {
    let (name, sale) = (alg.name(), format!("bench-alg-{}", alg.name()));
    let key =
        sale_rate_limit_key(&b.args.key_prefix, &SaleId::parse(&sale).map_err(anyhow::Error::msg)?, name, LOCALHOST);
    let (d, c) = (b.args.duration_alg(), b.args.connections);
    let del = |b: &Bench| b.redis::<i64>(redis::cmd("DEL").arg(&key));
    del(b)?;
    let app = b.start_app(&[("SECKILL_RATE_LIMIT_ALGORITHM", name), ("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT)])?;
    b.seed(&app, &sale, 10_000_000)?;
    warm_up(b, &app, &format!("{name}-instock"))?;
    b.wrk(&format!("alg-{name}-instock"), &app, d, c, Mode::Buy { sale: &sale, prefix: "i" }, None)?;
    // Which state the script kept: a zset (sliding-log), a hash (sliding-counter, fixed-window);
    // the token-bucket and gcra keys expire about 1 ms after the last request at this limit.
    let key_type = match b.redis::<String>(redis::cmd("TYPE").arg(&key))?.as_str() {
        "none" => "none (expired)".to_string(),
        other => other.to_string(),
    };
    b.results.set(
        format!("alg-{name}-instock.detail"),
        format!("app with SECKILL_RATE_LIMIT_ALGORITHM={name}, SECKILL_RATE_LIMIT={HIGH_RATE_LIMIT}: the limiter admits every request (one hot key, {key}, Redis TYPE right after the row: {key_type}); sale {sale}, stock 10,000,000"),
    );
    drained(&app, &sale);
    b.stop_app(app);

    del(b)?;
    let limit = b.args.limited_rate_limit.clone();
    let app = b.start_app(&[("SECKILL_RATE_LIMIT_ALGORITHM", name), ("SECKILL_RATE_LIMIT", &limit)])?;
    warm_up(b, &app, &format!("{name}-limited"))?;
    b.wrk(&format!("alg-{name}-limited"), &app, d, c, Mode::Buy { sale: &sale, prefix: "l" }, None)?;
    b.results.set(
        format!("alg-{name}-limited.detail"),
        format!("app with SECKILL_RATE_LIMIT_ALGORITHM={name}, SECKILL_RATE_LIMIT={limit}, all requests from 127.0.0.1; sale {sale} in stock"),
    );
    b.check(&app, &sale)?;
    b.stop_app(app);
    del(b)?;
    Ok(())
}

/// `SCRIPT LOAD` of `lua/<name>.lua` (`path`) assembled with the pieces it names, as the app
/// loads it; its SHA.
fn script_load(b: &Bench, path: &str) -> anyhow::Result<String> {
    let name = path.strip_prefix("lua/").unwrap_or(path);
    let source = crate::measure::lua::assembled(name)?;
    b.redis(redis::cmd("SCRIPT").arg("LOAD").arg(source))
}

/// buy.lua and every limiter script under redis-benchmark, then the worker drain of the
/// orders buy.lua queued (the app runs without a worker).
fn redis_rows_and_drain(b: &mut Bench) -> anyhow::Result<()> {
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT), ("SECKILL_NO_WORKER", "true")])?;
    b.seed(&app, "bench-drain", 10_000_000)?;
    let drain_keys = keys(b, "bench-drain");
    let buy = script_load(b, "lua/buy.lua")?;
    let orders = b.args.drain_orders();
    // buy.lua's KEYS and ARGV (see its header): the sale's keys; sale id, user id, order id,
    // shard count (1: unsharded). User id and order id each from two independent 12-digit
    // placeholders: no repeats in practice; the order id is 32 digits (a UUID in its simple
    // form, as the worker parses it).
    let (keys, numkeys) = (drain_keys.all(), drain_keys.all().len().to_string());
    let mut args = vec!["EVALSHA", &buy, &numkeys];
    args.extend(keys);
    args.extend(["bench-drain", "rb-__rand_int__-__rand_int__", "0190b7a2__rand_int____rand_int__", "1"]);
    b.rbench("redis-buy", orders, 2_147_483_647, &args, Some(&app))?;
    let queued: u64 = b.redis(redis::cmd("XLEN").arg(&drain_keys.orders))?;
    // A stale argument list once made every call answer wrong_shards: stop rather than report.
    anyhow::ensure!(
        queued * 100 >= orders * 99,
        "buy.lua appended {queued} orders for {orders} calls: the script refused them"
    );
    b.results.set("drain.orders", queued);
    b.results.set("redis-buy.ok", queued);
    b.results.set(
        "redis-buy.detail",
        format!("{orders} calls on sale bench-drain: {queued} orders appended (ok), {} not (repeats)", orders - queued),
    );

    for alg in b.args.algorithms() {
        super::rows_redis::limiter_rows(b, alg, &script_load(b, &script(alg.name()))?, &app)?;
    }

    b.wait_quiet();
    eprintln!("==> worker drain: {queued} orders queued in {}; seckill worker drains them", drain_keys.orders);
    let mut worker = Command::new(&app.binary);
    worker.arg("worker").envs(app.env.iter().map(|(k, v)| (k, v)));
    let watch = b.watch(None);
    let result = drain(&b.services.redis.url(), &drain_keys.orders, worker, Duration::from_secs(120), &watch, b.raw());
    match result {
        Ok(d) => b.results.drain = Some(d),
        Err(err) => eprintln!("bench: the drain did not finish: {err:#}"),
    }
    let rows = b.psql("select count(*) from orders where sale_id = 'bench-drain'")?;
    b.results.set("drain.pg_rows", rows);
    b.check(&app, "bench-drain")?;
    b.stop_app(app);
    Ok(())
}
