//! The flash crowd with k6: `MODE=crowd` from `--local-ips` (many users, few per address), then
//! `MODE=too_fast` from 127.0.0.1 only (one address far over the limit: 429s). Two invocations,
//! as `--local-ips` applies to every VU of a process. The flash sales are seeded to open
//! `--countdown` after seeding, so the crowd polls their status first; its buyers then poll
//! their orders. With `--payment-window` (5 s by default) every win is a reservation: k6 pays for
//! a share (`--pay-ratio`, a signed payment event), cancels a share (`--cancel-ratio`) and lets the
//! rest expire; the driver waits until none is open and checks that every unit ended with exactly
//! one paying buyer or back in the stock. Afterwards the invariants per sale, and every 201's
//! order (k6 prints them to its console file, and the payments and cancels) in Postgres and on
//! `GET /sales/{id}/order`, with the status its buyer left it in.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use secrecy::SecretString;
use serde_json::json;

use super::{Load, orders, reservations, secs};
use crate::measure::clock::rfc3339;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// New users per second at the peak (each polls its sale's status, buys if it is open, 1 +
    /// --retry-ratio requests, and a buyer polls its order until confirmed).
    #[arg(long, default_value_t = 1500)]
    peak_rps: u32,
    /// Ramp from 50/s up to the peak.
    #[arg(long, default_value = "10s")]
    ramp: String,
    /// Then hold the peak this long.
    #[arg(long, default_value = "20s")]
    hold: String,
    /// Sales flash-1..N.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    sales: u32,
    /// Stock of each flash sale.
    #[arg(long, default_value_t = 2000)]
    stock: u64,
    /// The flash sales open this long after they are seeded: the crowd's first users poll their
    /// status until then.
    #[arg(long, default_value = "5s")]
    countdown: String,
    /// Share of users who send their purchase twice.
    #[arg(long, default_value_t = 0.1)]
    retry_ratio: f64,
    /// The flash sales' payment window (1s to 7d, e.g. 5s, 2m): every win is a reservation, paid,
    /// cancelled or left to expire, and the unit of an unpaid one goes back to the crowd. `off`:
    /// no window, every order is final at once (`confirmed`).
    #[arg(long, default_value = "5s")]
    payment_window: String,
    /// With a window: share of the buyers who pay (a signed payment event after the 201).
    #[arg(long, default_value_t = 0.5)]
    pay_ratio: f64,
    /// With a window: share of the buyers who cancel their reservation (the rest let it expire).
    #[arg(long, default_value_t = 0.2)]
    cancel_ratio: f64,
    /// With a window: a buyer pays or cancels a random 0..N ms after its 201 (0: at once, often
    /// before the worker has stored the order).
    #[arg(long, default_value_t = 0)]
    think_ms: u32,
    /// The http_req_duration p99 threshold, ms: a stall, not slowness (it holds on 2 cores with a
    /// cargo build running).
    #[arg(long, default_value_t = 2000)]
    p99_ms: u32,
    /// Every latency threshold (the p99 and each step's p95) times this: below 1 on a quiet
    /// dedicated host (0.125 gives p99 250 ms), 4 in the test command's quick run (the debug
    /// build). Checks and invariants are unchanged.
    #[arg(long, default_value_t = 1.0)]
    latency_scale: f64,
    /// Requests per second of the single-address run.
    #[arg(long, default_value_t = 100)]
    too_fast_rps: u32,
    /// How long the single-address run lasts.
    #[arg(long, default_value = "10s")]
    too_fast_duration: String,
    /// Stock of the `limiter` sale.
    #[arg(long, default_value_t = 1000)]
    limiter_stock: u64,
    /// SECKILL_RATE_LIMIT of the app (and k6's cap on the too-fast 201s).
    #[arg(long, default_value = "20/1s")]
    rate_limit: String,
    /// The crowd's source addresses.
    #[arg(long, default_value = "127.0.0.2-127.0.0.250")]
    local_ips: String,
    /// The app's SECKILL_AUTH: with jwt, it gets a fresh random secret and k6 signs an HS256
    /// token per user with it.
    #[arg(long, default_value = "none", value_parser = ["none", "jwt"])]
    auth: String,
    /// Orders checked one by one through GET /sales/{id}/order after a run (a random sample
    /// beyond; Postgres is checked for every one).
    #[arg(long, default_value_t = 10_000)]
    verify_orders: usize,
}

impl Args {
    /// The payment window in milliseconds; `None` for `off`.
    fn window_ms(&self) -> anyhow::Result<Option<u64>> {
        if ["off", "none", "0"].contains(&self.payment_window.as_str()) {
            return Ok(None);
        }
        let window = humantime::parse_duration(&self.payment_window)
            .map_err(|e| anyhow::anyhow!("--payment-window {}: {e} (use e.g. 5s, 2m or off)", self.payment_window))?;
        Ok(Some(window.as_millis() as u64))
    }
}

const TOO_FAST_SALE: &str = "limiter";
/// How long after the load the reservations may take to settle, beyond the window.
const SETTLE_SLACK: Duration = Duration::from_secs(30);
/// The limit of the app that checks the orders afterwards: every check comes from 127.0.0.1.
const OPEN_LIMIT: &str = "100000/1s";

/// One bounded k6 run of flash-crowd.js; its exit code (99 = thresholds failed).
fn run_k6(
    load: &Load,
    a: &Args,
    url: &str,
    run_id: &str,
    mode: &str,
    limit: u64,
    extra: &[String],
) -> anyhow::Result<i32> {
    let name = if mode == "crowd" { "k6".to_string() } else { format!("k6-{}", mode.replace('_', "-")) };
    let env = [
        ("MODE", mode.to_string()),
        ("BASE_URL", url.to_string()),
        ("RUN_ID", run_id.to_string()),
        ("SECKILL_RATE_LIMIT", a.rate_limit.clone()),
        ("P99_MS", a.p99_ms.to_string()),
        ("LATENCY_SCALE", a.latency_scale.to_string()),
        ("AUTH", a.auth.clone()),
    ];
    run_script(load, &name, "flash-crowd.js", &env, extra, limit)
}

/// One bounded k6 run of `load-tests/k6/<script>` with `-e` settings `env`, its summary, console
/// and HTML report under the results as `<name>-…`; its exit code (99 = thresholds failed). The
/// console's lines other than orders, payments, cancels and admissions are logged (20 at most).
pub fn run_script(
    load: &Load,
    name: &str,
    script: &str,
    env: &[(&str, String)],
    extra: &[String],
    limit: u64,
) -> anyhow::Result<i32> {
    let rc = load.run_bounded(command(load, name, script, env, extra)?, limit)?;
    report(load, name, rc)?;
    Ok(rc)
}

/// The k6 command of `run_script`, for a caller that spawns it itself (two k6 beside each other).
pub fn command(
    load: &Load,
    name: &str,
    script: &str,
    env: &[(&str, String)],
    extra: &[String],
) -> anyhow::Result<Command> {
    let mut cmd = Command::new(testbed::python::ensure(testbed::python::K6, None)?);
    // Web dashboard: no HTTP server (port -1), only the HTML report written at the end.
    cmd.env("K6_WEB_DASHBOARD", "true")
        .env("K6_WEB_DASHBOARD_HOST", "127.0.0.1")
        .env("K6_WEB_DASHBOARD_PORT", "-1")
        .env("K6_WEB_DASHBOARD_PERIOD", "1s")
        .env("K6_WEB_DASHBOARD_EXPORT", load.results.join(format!("{name}-report.html")))
        .args(["run", "--quiet", "--no-usage-report", "--log-format", "raw", "--console-output"])
        .arg(load.results.join(format!("{name}-console.log")))
        .args(extra);
    for (k, v) in env {
        cmd.arg("-e").arg(format!("{k}={v}"));
    }
    cmd.arg("-e").arg(format!("SUMMARY_JSON={}", load.results.join(format!("{name}-summary.json")).display()));
    cmd.arg(testbed::workspace_root().join("load-tests/k6").join(script));
    Ok(cmd)
}

/// After a k6 run: its failure, and the first 20 of its console's other lines (its warnings).
pub fn report(load: &Load, name: &str, rc: i32) -> anyhow::Result<()> {
    if rc != 0 {
        load.log(&format!("k6 {name} failed (exit {rc}; 99 = thresholds crossed)"));
    }
    let console = load.results.join(format!("{name}-console.log"));
    let warnings = orders::read(&console)?.other;
    for line in warnings.iter().take(20) {
        load.log(&format!("k6 {name}: {line}"));
    }
    if warnings.len() > 20 {
        load.log(&format!("k6 {name}: {} more lines in {}", warnings.len() - 20, console.display()));
    }
    Ok(())
}

/// The 201s a k6 run counted, from its summary.
pub fn created(load: &Load, name: &str) -> i64 {
    let text = std::fs::read_to_string(load.results.join(format!("{name}-summary.json"))).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["metrics"]["status_201_created"]["values"]["count"].as_i64().unwrap_or(0)
}

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    for entry in std::fs::read_dir(&load.results)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("k6-") && [".json", ".html", "-console.log"].iter().any(|end| name.ends_with(end)) {
            std::fs::remove_file(entry.path())?;
        }
    }
    let window_ms = a.window_ms()?;
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.pay_ratio)
            && (0.0..=1.0).contains(&a.cancel_ratio)
            && a.pay_ratio + a.cancel_ratio <= 1.0,
        "--pay-ratio and --cancel-ratio must be shares from 0 to 1 that add up to at most 1"
    );
    anyhow::ensure!(
        window_ms.is_none_or(|ms| u64::from(a.think_ms) < ms),
        "--think-ms must be shorter than the payment window"
    );
    let secret: String = (0..64).map(|_| fastrand::alphanumeric()).collect();
    let payment_secret: String = (0..64).map(|_| fastrand::alphanumeric()).collect();
    // The app's settings, with this rate limit.
    let settings = |limit: &str| -> Vec<(&'static str, String)> {
        vec![
            ("SECKILL_RATE_LIMIT", limit.to_string()),
            ("SECKILL_AUTH", a.auth.clone()),
            ("SECKILL_JWT_SECRET", secret.clone()),
            ("SECKILL_PAYMENT_SECRET", payment_secret.clone()),
        ]
    };
    let env = settings(&a.rate_limit);
    let app = load.app(&env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())?;
    // On whole seconds, at least --countdown ahead.
    let starts = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis().div_ceil(1000) as u64 + secs(&a.countdown)?;
    let flash: Vec<String> = (1..=a.sales).map(|i| format!("flash-{i}")).collect();
    for sale in &flash {
        let mut body = json!({"stock": a.stock, "starts_at": rfc3339(starts as i64)});
        if window_ms.is_some() {
            body["payment_window"] = json!(a.payment_window);
        }
        app.put_sale(sale, &body)?;
    }
    app.seed(TOO_FAST_SALE, a.limiter_stock, None)?;
    load.log(&format!(
        "seeded flash-1..flash-{} ({} each, opening at {}, {}) and {TOO_FAST_SALE} ({}, open, no payment window)",
        a.sales,
        a.stock,
        rfc3339(starts as i64),
        match window_ms {
            Some(_) => format!(
                "payment window {}: {} paid, {} cancelled, the rest left to expire",
                a.payment_window, a.pay_ratio, a.cancel_ratio
            ),
            None => "no payment window".into(),
        },
        a.limiter_stock
    ));
    // k6 signs with the app's secrets (throwaways, made for this run: the logged command shows them).
    let auth: Vec<String> = if a.auth == "jwt" { vec!["-e".into(), format!("JWT_SECRET={secret}")] } else { vec![] };
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs().to_string();

    load.log(&format!("crowd: up to {} users/s over {}, held {}, from {}", a.peak_rps, a.ramp, a.hold, a.local_ips));
    let crowd: Vec<String> = ["--local-ips", &a.local_ips]
        .iter()
        .map(|s| s.to_string())
        .chain(
            [
                ("SALES", a.sales.to_string()),
                ("STOCK", a.stock.to_string()),
                ("STARTS_AT_MS", (starts * 1000).to_string()),
                ("PEAK_RPS", a.peak_rps.to_string()),
                ("RAMP", a.ramp.clone()),
                ("HOLD", a.hold.clone()),
                ("RETRY_RATIO", a.retry_ratio.to_string()),
                ("PAYMENT_WINDOW_MS", window_ms.unwrap_or(0).to_string()),
                ("PAY_RATIO", a.pay_ratio.to_string()),
                ("CANCEL_RATIO", a.cancel_ratio.to_string()),
                ("THINK_MS", a.think_ms.to_string()),
                ("PAYMENT_SECRET", payment_secret.clone()),
            ]
            .into_iter()
            .flat_map(|(k, v)| ["-e".to_string(), format!("{k}={v}")]),
        )
        .chain(auth.iter().cloned())
        .collect();
    let limit = secs(&a.countdown)? + secs(&a.ramp)? + secs(&a.hold)? + 80;
    load.failures += u32::from(run_k6(&load, a, &app.url, &run_id, "crowd", limit, &crowd)? != 0);

    load.log(&format!(
        "too_fast: {} req/s for {} from 127.0.0.1 (limit {} per IP)",
        a.too_fast_rps, a.too_fast_duration, a.rate_limit
    ));
    let too_fast: Vec<String> = [
        ("TOO_FAST_SALE", TOO_FAST_SALE.to_string()),
        ("TOO_FAST_RPS", a.too_fast_rps.to_string()),
        ("TOO_FAST_DURATION", a.too_fast_duration.clone()),
    ]
    .into_iter()
    .flat_map(|(k, v)| ["-e".to_string(), format!("{k}={v}")])
    .chain(auth.iter().cloned())
    .collect();
    let limit = secs(&a.too_fast_duration)? + 60;
    load.failures += u32::from(run_k6(&load, a, &app.url, &run_id, "too_fast", limit, &too_fast)? != 0);

    // Every reservation paid, cancelled or expired (the last ones fall due a window after the
    // crowd's last purchase), the queues drained and the units released.
    if let Some(ms) = window_ms {
        reservations::wait_settled(&load, &app, &flash, Duration::from_millis(ms) + SETTLE_SLACK);
    }
    let mut crowd_orders = 0;
    for sale in &flash {
        crowd_orders += load.check_sale(&app, sale)?;
    }
    load.expect_created("crowd (k6)", created(&load, "k6"), crowd_orders);
    let orders = load.check_sale(&app, TOO_FAST_SALE)?;
    load.expect_created("too_fast (k6)", created(&load, "k6-too-fast"), orders);
    let crowd = orders::read(&load.results.join("k6-console.log"))?;
    if let Some(ms) = window_ms {
        let mut totals = reservations::Totals::default();
        for sale in &flash {
            reservations::check(&mut load, &app, sale, ms, &crowd, &mut totals)?;
        }
        reservations::print_totals(flash.len(), &totals);
    }
    drop(app);

    // Each order on its own, through an app with the same settings but an open limit.
    let env = settings(OPEN_LIMIT);
    let checker = load.app(&env.iter().map(|(k, v)| (*k, v.as_str())).collect::<Vec<_>>())?;
    let secret = (a.auth == "jwt").then(|| SecretString::from(secret.clone()));
    let too_fast = orders::read(&load.results.join("k6-too-fast-console.log"))?;
    for (run, name, console, windowed) in
        [("crowd (k6)", "k6", &crowd, window_ms.is_some()), ("too_fast (k6)", "k6-too-fast", &too_fast, false)]
    {
        let expected = created(&load, name);
        orders::verify(&mut load, run, console, windowed, expected, &checker, secret.as_ref(), a.verify_orders)?;
    }
    Ok(load)
}
