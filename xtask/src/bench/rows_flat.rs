//! The flatness rows (issue 17, "How cost grows with the work"): on one app, the in-stock purchase
//! on one fresh sale (the reference), then the same purchase on a sale whose buyer set already
//! holds `--flat-buyers` synthetic members, spread over `--flat-sales` open sales at once, and
//! over `--flat-connections` keep-alive connections, and the reference once more (the drift
//! meanwhile). The report gives each as a ratio to the first reference row (`flat`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testbed::App;

use super::runner::{Bench, HIGH_RATE_LIMIT, keys, warm_up};
use crate::measure::checks::{drained, reconcile};
use crate::measure::cpu::{Snapshot, Watch};
use crate::measure::http;
use crate::measure::wrk::Mode;

/// The reference sale, also the sale of the many-connections row.
pub const REF_SALE: &str = "bench-flat";
/// The sale with the prefilled buyer set.
pub const BIG_SALE: &str = "bench-flat-big";
/// The many sales: `bench-flat-s-0` .. `bench-flat-s-<n - 1>`.
pub const MANY_PREFIX: &str = "bench-flat-s";
/// Stock left for the run's own buyers in every flat sale: never sold out in a row.
const STOCK: u64 = 10_000_000;
/// Synthetic buyers added per EVALSHA of `load-tests/lib/fill-buyers.lua`: about 0.2 s of Redis
/// each, well below the app's Redis timeout (1 s), so its worker and janitor keep working meanwhile.
const FILL_CHUNK: u64 = 20_000;
/// The fill, and the AOF rewrite after it, each give up after this long.
const FILL_LIMIT: Duration = Duration::from_secs(300);

/// Each flat row runs at least this long (also with `--quick`): 10,000 connections take about
/// two seconds to open on a busy two-core machine, and the steady window starts a third in.
pub const MIN_SECONDS: u64 = 6;

pub fn flat_rows(b: &mut Bench) -> anyhow::Result<()> {
    let c = b.args.connections;
    let (buyers, sales, conns) = (b.args.flat_buyers(), b.args.flat_sales, b.args.flat_connections);
    b.results.set("flat.buyers", buyers);
    b.results.set("flat.sales", sales);
    b.results.set("flat.connections", conns);
    b.results.set("flat.nofile", nofile_limit());
    // wrk's connections all come from 127.0.0.1: no per-client cap in these rows.
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT), ("SECKILL_MAX_CONNECTIONS_PER_CLIENT", "0")])?;
    b.seed(&app, REF_SALE, STOCK)?;
    b.seed(&app, BIG_SALE, STOCK)?;
    fill(b, buyers)?;
    eprintln!("==> seed {sales} sales {MANY_PREFIX}-0 .. {MANY_PREFIX}-{} (stock {STOCK} each)", sales - 1);
    for k in 0..sales {
        app.seed(&format!("{MANY_PREFIX}-{k}"), STOCK, None)?;
    }
    warm_up(b, &app, "flat")?;

    let one = Mode::Buy { sale: REF_SALE, prefix: "u" };
    row(b, &app, "flat-ref", c, one, &[REF_SALE])?;
    let detail = format!("one sale, stock {STOCK}, {c} connections: the reference of the rows below");
    b.results.set("flat-ref.detail", detail);

    row(b, &app, "flat-buyers", c, Mode::Buy { sale: BIG_SALE, prefix: "u" }, &[BIG_SALE])?;
    b.results.set(
        "flat-buyers.detail",
        format!("sale {BIG_SALE}: its buyer set and receipts hash held {} synthetic buyers before the row (load-tests/lib/fill-buyers.lua), stock {STOCK} left; {c} connections", super::model::group(buyers as f64)),
    );

    let names: Vec<String> = (0..sales).map(|k| format!("{MANY_PREFIX}-{k}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    row(b, &app, "flat-sales", c, Mode::BuySales { sales: MANY_PREFIX, count: sales, prefix: "u" }, &refs)?;
    b.results.set(
        "flat-sales.detail",
        format!("{sales} sales open at once ({MANY_PREFIX}-0 .. -{}), requests taking turns over them, so the worker reads {sales} streams (plus the other flat sales'); {c} connections", sales - 1),
    );

    row(b, &app, "flat-conns", conns, Mode::Buy { sale: REF_SALE, prefix: "k" }, &[REF_SALE])?;
    b.results.set(
        "flat-conns.detail",
        format!("sale {REF_SALE} as the reference, over {conns} keep-alive connections (wrk -c{conns}; open files limit {})", nofile_limit()),
    );

    // The reference once more: how far the machine drifted while the rows ran.
    row(b, &app, "flat-ref-again", c, Mode::Buy { sale: REF_SALE, prefix: "v" }, &[REF_SALE])?;
    let detail = "the reference row again, last (new buyers, same sale): the drift of the machine over the rows";
    b.results.set("flat-ref-again.detail", detail);

    b.check(&app, REF_SALE)?;
    check_big(b, &app, buyers)?;
    check_many(b, &app, &refs)?;
    b.stop_app(app);
    Ok(())
}

/// One measured row; afterwards the sales' queues drain, so the worker's Postgres work for this
/// row's orders is not charged to the next one. Meanwhile [`steady`] measures its steady part;
/// and from before the row until the queues drained, Postgres's CPU and the created purchases
/// (`<row>.drained`: the worker's whole share, also when it lagged behind the window).
fn row(b: &mut Bench, app: &App, name: &str, connections: u32, mode: Mode, sales: &[&str]) -> anyhow::Result<()> {
    let seconds = b.args.duration().max(MIN_SECONDS);
    let (watch, port) = (b.watch(Some(app)), app.port);
    let (whole, first) = (Snapshot::take(&watch), created(port)?);
    let window = std::thread::spawn(move || steady(port, &watch, seconds));
    let run = b.wrk(name, app, seconds, connections, mode, None);
    let window = window.join().map_err(|_| anyhow::anyhow!("{name}: the window thread panicked"))?;
    run?;
    match window {
        Ok(w) => b.results.set(format!("{name}.window"), w),
        Err(err) => eprintln!("bench: {name}: no steady window: {err:#}"),
    }
    for sale in sales {
        drained(app, sale);
    }
    let (usage, purchases) = (whole.usage(), created(port)? - first);
    let text = json!({"wall_s": usage.wall_s, "purchases": purchases, "cpu_s": usage.watched_cpu_s});
    b.results.set(format!("{name}.drained"), text);
    Ok(())
}

/// The app's `seckill_purchases_total{outcome="created"}` (its 201s so far).
fn created(port: u16) -> anyhow::Result<u64> {
    Ok(http::metric(port, "seckill_purchases_total{outcome=\"created\"}")? as u64)
}

/// The steady part of a row of `seconds`: once the first purchase of the row is counted, wait a
/// third of it (wrk has opened every connection by then), then measure for half of it the CPU of
/// the watched processes and the app's created purchases. Returns them as JSON text
/// (`wall_s`, `purchases`, `cpu_s` by label).
fn steady(port: u16, watch: &[Watch], seconds: u64) -> anyhow::Result<String> {
    let first = created(port)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    while created(port)? == first {
        anyhow::ensure!(Instant::now() < deadline, "no purchase within 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs_f64(seconds as f64 / 3.0));
    let (before, start) = (Snapshot::take(watch), created(port)?);
    std::thread::sleep(Duration::from_secs_f64(seconds as f64 / 2.0));
    let (usage, end) = (before.usage(), created(port)?);
    Ok(json!({"wall_s": usage.wall_s, "purchases": end - start, "cpu_s": usage.watched_cpu_s}).to_string())
}

/// The open files limit this process (and so the app and wrk it starts) runs with.
pub fn nofile_limit() -> u64 {
    // SAFETY: getrlimit only writes the struct it is given.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    lim.rlim_cur
}

/// Raises the soft open files limit to the hard one (inherited by the app and wrk); fails when
/// even that leaves no room for `connections` sockets on each side.
pub fn raise_nofile(connections: u32) -> anyhow::Result<()> {
    // SAFETY: getrlimit/setrlimit only read and write the struct they are given.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) };
    }
    let need = u64::from(connections) + 1024;
    anyhow::ensure!(
        nofile_limit() >= need,
        "--flat-connections {connections} needs an open files limit of at least {need} (ulimit -n is {}; raise the hard limit or lower --flat-connections)",
        nofile_limit()
    );
    Ok(())
}

/// `buyers` synthetic members into the big sale's buyer set (and receipts), its stock_initial
/// raised by as many in Redis and Postgres (the stock left untouched); with the AOF off meanwhile
/// (its rewrite afterwards, awaited, keeps the row's Redis settings those of every other row
/// without logging millions of SADDs).
fn fill(b: &mut Bench, buyers: u64) -> anyhow::Result<()> {
    let k = keys(b, BIG_SALE);
    let source = std::fs::read_to_string(b.repo.join("load-tests/lib/fill-buyers.lua"))?;
    let sha: String = b.redis(redis::cmd("SCRIPT").arg("LOAD").arg(source))?;
    eprintln!("==> fill {BIG_SALE} with {buyers} synthetic buyers ({FILL_CHUNK} per EVALSHA)");
    let started = Instant::now();
    b.redis::<String>(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("no"))?;
    let mut from = 0;
    while from < buyers {
        anyhow::ensure!(started.elapsed() < FILL_LIMIT, "the fill took over {} s", FILL_LIMIT.as_secs());
        let to = (from + FILL_CHUNK).min(buyers);
        let (keys, range) = ([&k.buyers, &k.receipts, &k.meta], [from, to]);
        b.redis::<i64>(redis::cmd("EVALSHA").arg(&sha).arg(3).arg(&keys).arg(&range))?;
        from = to;
    }
    b.psql(&format!(
        "update sales set stock_initial = stock_initial + {buyers}, updated_at = now() where sale_id = '{BIG_SALE}'"
    ))?;
    let filled = started.elapsed().as_secs_f64();
    b.redis::<String>(redis::cmd("CONFIG").arg("SET").arg("appendonly").arg("yes"))?;
    let rewrite = Instant::now();
    let rewritten = b.services.redis.wait_aof_rewritten(FILL_LIMIT);
    anyhow::ensure!(rewritten, "the AOF rewrite took over {} s", FILL_LIMIT.as_secs());
    let memory: String = b
        .redis(redis::cmd("MEMORY").arg("USAGE").arg(&k.buyers).arg("SAMPLES").arg(1000))
        .map(|n: u64| format!("{:.0} MB", n as f64 / 1e6))
        .unwrap_or_else(|_| "?".into());
    let text = format!(
        "{buyers} synthetic buyers in {filled:.1} s, AOF rewrite after it {:.1} s; buyer set about {memory}",
        rewrite.elapsed().as_secs_f64()
    );
    eprintln!("    {text}");
    b.results.set("flat.fill", text);
    Ok(())
}

/// The big sale's invariants, without `seckill reconcile` (which would list every synthetic buyer
/// as missing in Postgres): stock_initial = stock_left + SCARD(buyers), the same stock_initial in
/// the `sales` row; the run's own buyers
/// (SCARD − the synthetic ones) are as many as its Postgres orders, each of whose users is in the
/// buyer set; no synthetic buyer has an order; the queue is empty.
fn check_big(b: &mut Bench, app: &App, synthetic: u64) -> anyhow::Result<()> {
    eprintln!("==> check invariants of {BIG_SALE} (its run's buyers; the synthetic ones only counted)");
    drained(app, BIG_SALE);
    let k = keys(b, BIG_SALE);
    let initial: i64 = b.redis(redis::cmd("HGET").arg(&k.meta).arg("stock_initial"))?;
    let left: i64 = b.redis(redis::cmd("GET").arg(&k.stock))?;
    let buyers: i64 = b.redis(redis::cmd("SCARD").arg(&k.buyers))?;
    let queued: i64 = b.redis(redis::cmd("XLEN").arg(&k.orders))?;
    let row: i64 = b.psql(&format!("select stock_initial from sales where sale_id = '{BIG_SALE}'"))?.parse()?;
    let users = b.psql(&format!("select user_id from orders where sale_id = '{BIG_SALE}'"))?;
    let users: Vec<&str> = users.lines().filter(|l| !l.is_empty()).collect();
    let synthetic_orders = users.iter().filter(|u| u.starts_with("f-")).count();
    let mut unknown = vec![];
    for chunk in users.chunks(1000) {
        let found: Vec<i64> = b.redis(redis::cmd("SMISMEMBER").arg(&k.buyers).arg(chunk))?;
        unknown.extend(chunk.iter().zip(found).filter(|(_, f)| *f == 0).map(|(u, _)| u.to_string()));
    }
    let run_buyers = buyers - synthetic as i64;
    let persisted = users.len() as i64;
    let balanced = initial == left + buyers && left >= 0;
    let consistent = balanced && run_buyers == persisted && unknown.is_empty() && synthetic_orders == 0 && queued == 0;
    let report = json!({
        "sale_id": BIG_SALE,
        "stock_initial": initial,
        "stock_left": left,
        "buyers": buyers,
        "persisted": persisted,
        "queued": queued,
        "stock_balanced": balanced,
        "sales_row_stock": row,
        "missing_in_postgres": Value::Array(vec![]),
        "missing_in_postgres_count": run_buyers - persisted,
        "unknown_to_redis": unknown,
        "synthetic_buyers": synthetic,
        "note": format!("checked by the bench, not seckill reconcile: {synthetic} synthetic buyers without orders (stock_initial raised by as many in Redis and the sales row); run buyers (SCARD − synthetic) {run_buyers} vs Postgres orders {persisted}, every Postgres user in the buyer set (SMISMEMBER), {synthetic_orders} orders of synthetic users"),
    });
    std::fs::write(b.raw().join(format!("check-{BIG_SALE}.out")), report.to_string())?;
    b.results.checks.push((BIG_SALE.into(), i32::from(!consistent), Some(report)));
    Ok(())
}

/// `seckill reconcile` of each of the many sales, reported as one entry (their sums) unless one
/// fails, which is then reported on its own.
fn check_many(b: &mut Bench, app: &App, sales: &[&str]) -> anyhow::Result<()> {
    eprintln!("==> check invariants of the {} sales {MANY_PREFIX}-*", sales.len());
    let mut sum = json!({"stock_initial": 0, "stock_left": 0, "buyers": 0, "persisted": 0, "queued": 0});
    let mut all_ok = true;
    for sale in sales {
        let (rc, stdout, report) = reconcile(app, sale)?;
        if rc != 0 {
            all_ok = false;
            std::fs::write(b.raw().join(format!("check-{sale}.out")), stdout)?;
            b.results.checks.push((sale.to_string(), rc, report));
            continue;
        }
        for key in ["stock_initial", "stock_left", "buyers", "persisted", "queued"] {
            let add = report.as_ref().and_then(|r| r[key].as_i64()).unwrap_or(0);
            sum[key] = json!(sum[key].as_i64().unwrap_or(0) + add);
        }
    }
    if all_ok {
        sum["missing_in_postgres"] = json!([]);
        sum["unknown_to_redis"] = json!([]);
        sum["note"] = json!(format!("sums over the {} sales, each consistent", sales.len()));
        let name = format!("{MANY_PREFIX}-0 .. {MANY_PREFIX}-{}", sales.len() - 1);
        b.results.checks.push((name, 0, Some(sum)));
    }
    Ok(())
}
