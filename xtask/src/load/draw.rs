//! A storm of draw entries with k6 (`load-tests/k6/draw.js`, issue 53): a drop in draw mode, two
//! instances, distinct entrants through both, and with `--kill-at` a `kill -9` of the second
//! mid-storm, restarted `--restart-after` seconds later (its worker's pending entries read again).
//! Then: every accepted entry in Postgres once, the draw run (`POST /admin/drops/{drop}/draw`, its wall
//! time printed), its record (`GET /drops/{drop}/draw`) through `seckill draw verify`, and each
//! size's invariants once the winners' reservations are stored. Beside it all (`--buy-rate`, 0: off)
//! a plain sale sells to paced buyers through the same instances, from a baseline before the storm
//! until the draw has run: their p99 during the draw against the baseline's, and the CPU of each
//! phase (`beside.rs`, which states the pass rule).

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use testbed::{App, Signal};

use super::beside::{self, Buyers, Open, Phase};
use super::{Load, k6, orders, secs};
use crate::measure::checks::psql;
use crate::measure::clock::rfc3339;
use crate::measure::cpu::Watch;
use crate::measure::http;
use crate::measure::process::wait_bounded;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The drop's sizes (at most 6: an entry lists 1 to 6).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=6))]
    sizes: u32,
    /// Units per size.
    #[arg(long, default_value_t = 500)]
    stock: u64,
    /// Units one entrant may ask for.
    #[arg(long, default_value_t = 2)]
    per_buyer: u32,
    /// New entrants a second.
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// How long entrants keep arriving.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// Percent of entrants asking more than one unit.
    #[arg(long, default_value_t = 25)]
    qty_multi: u32,
    /// Percent of entrants entering twice on purpose (each must get 409 `already_entered`).
    #[arg(long, default_value_t = 2)]
    repeat: u32,
    /// SIGKILL the second instance this many seconds into the storm (0: no kill).
    #[arg(long, default_value_t = 0)]
    kill_at: u64,
    /// Restart it this many seconds after the kill.
    #[arg(long, default_value_t = 2)]
    restart_after: u64,
    /// The entry_duration p99 threshold, ms: a stall, not slowness.
    #[arg(long, default_value_t = 2000)]
    p99_ms: u32,
    /// The entrants' source addresses.
    #[arg(long, default_value = "127.0.0.2-127.0.0.250")]
    local_ips: String,
    /// Buyers a second of the plain sale `beside`, selling through the same instances before,
    /// during and after the storm and while the draw runs (0: no sale beside).
    #[arg(long, default_value_t = 200)]
    buy_rate: u32,
    /// How long the buyers buy before the storm: the baseline of their p99.
    #[arg(long, default_value = "20s")]
    baseline: String,
    /// The instances' Postgres statement timeout (SECKILL_DATABASE_STATEMENT_TIMEOUT; the worker's
    /// insert timeout is set 5 s above it): the service's default, 10s, cancels the draw's one
    /// insert of its results on this host from about 200,000 entries.
    #[arg(long, default_value = "10s")]
    statement_timeout: String,
    /// The buyers' source addresses (apart from the entrants').
    #[arg(long, default_value = "127.0.1.1-127.0.1.250")]
    buy_local_ips: String,
}

const DROP: &str = "draw";

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    // The buyers beside come from 250 addresses, but k6 reuses a VU (and its address) for many
    // buys: the per-address limit on /buy (20/1s by default) is set out of their way, still checked.
    let insert_timeout = format!("{}s", secs(&a.statement_timeout)? + 5);
    let app_env = [
        ("SECKILL_RATE_LIMIT", "1000000/1s"),
        ("SECKILL_DATABASE_STATEMENT_TIMEOUT", a.statement_timeout.as_str()),
        ("SECKILL_WORKER_INSERT_TIMEOUT", insert_timeout.as_str()),
    ];
    let first = load.app(&app_env)?;
    let mut second = load.app(&app_env)?;
    let sizes: Vec<String> = (0..a.sizes).map(|s| (38 + s).to_string()).collect();
    let each: serde_json::Map<String, serde_json::Value> =
        sizes.iter().map(|size| (size.clone(), json!({"stock": a.stock}))).collect();
    let baseline = if a.buy_rate > 0 { secs(&a.baseline)? } else { 0 };
    // Entries open now and close well after the storm: the run below draws early, not the loop.
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    let storm = secs(&a.duration)?;
    let draw = json!({"opens_at": rfc3339(now - 2), "closes_at": rfc3339(now + (baseline + storm) as i64 + 900)});
    let body = json!({"sizes": each, "per_buyer": a.per_buyer, "payment_window": "10m", "challenge": {"cost": 0},
        "draw": draw});
    first.put_drop(DROP, &body)?;
    let kill = if a.kill_at > 0 { format!(", instance 2 killed at {} s", a.kill_at) } else { String::new() };
    load.log(&format!(
        "seeded the draw {DROP}: {} sizes of {} units, {} per entrant; {} entrants/s for {}{kill}",
        a.sizes, a.stock, a.per_buyer, a.rate, a.duration
    ));

    // The sale beside, stocked for every buy the buyers' time bound allows (none sells out), and
    // its buyers: a warm-up, then the baseline, then the storm on the same clock.
    let urls = format!("{},{}", first.url, second.url);
    let buy_bound = WARMUP_S + baseline + storm + 120 + DRAIN_S + 300 + 60;
    let storm_at = beside::now_ms() + if a.buy_rate > 0 { (WARMUP_S + baseline) * 1000 } else { 0 };
    let kill_at_ms = if a.kill_at > 0 { storm_at + a.kill_at * 1000 } else { 0 };
    let mut buyers = None;
    let mut phases = Vec::new();
    if a.buy_rate > 0 {
        first.seed(beside::SALE, u64::from(a.buy_rate) * buy_bound, None)?;
        let started =
            Buyers::start(&load, &urls, a.buy_rate, buy_bound, kill_at_ms, &a.buy_local_ips, &now.to_string())?;
        let k6 = [("k6 buyers", started.pid())];
        buyers = Some(started);
        std::thread::sleep(Duration::from_secs(WARMUP_S));
        let open = Open::begin("baseline", &watch(&load, [&first, &second], &k6));
        std::thread::sleep(Duration::from_millis(storm_at.saturating_sub(beside::now_ms())));
        phases.push(open.end());
    }
    let buyers_pid = buyers.as_ref().map_or(0, Buyers::pid);

    let env = [
        ("BASE_URLS", urls.clone()),
        ("RUN_ID", now.to_string()),
        ("DROP", DROP.to_owned()),
        ("SIZES", sizes.join(",")),
        ("PER_BUYER", a.per_buyer.to_string()),
        ("RATE", a.rate.to_string()),
        ("DURATION_S", storm.to_string()),
        ("QTY_MULTI", a.qty_multi.to_string()),
        ("REPEAT", a.repeat.to_string()),
        ("KILL_AT_MS", kill_at_ms.to_string()),
        ("P99_MS", a.p99_ms.to_string()),
    ];
    let extra = ["--local-ips".to_string(), a.local_ips.clone()];
    let name = "k6-draw";
    // k6 appends to its console file: a previous run's entrants are not this one's.
    let console_file = load.results.join(format!("{name}-console.log"));
    if console_file.exists() {
        std::fs::remove_file(&console_file)?;
    }
    // The kill and the restart run beside k6: the restarted instance (on a new port: k6 keeps
    // retrying the old one elsewhere) reads its predecessor's pending entries mid-storm.
    let (rc, restarted, phase) = std::thread::scope(|scope| -> anyhow::Result<(i32, Option<App>, Phase)> {
        let shared = &load;
        let (pid, after) = (second.pid(), Duration::from_secs(a.restart_after));
        let killer = (a.kill_at > 0).then(|| {
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(kill_at_ms.saturating_sub(beside::now_ms())));
                let killed = testbed::signal_pid(pid, Signal::SIGKILL);
                shared.log(&format!("instance 2 (pid {pid}) SIGKILLed: {killed}; restarting it in {after:?}"));
                std::thread::sleep(after);
                shared.app(&app_env)
            })
        });
        let mut cmd = k6::command(shared, name, "draw.js", &env, &extra)?;
        let limit = storm + 120;
        shared.log(&format!("(at most {limit} s) k6 {name}: the storm"));
        let mut child = cmd.stdin(Stdio::null()).spawn()?;
        let open = Open::begin("storm", &watch(shared, [&first, &second], &[("k6 buyers", buyers_pid)]));
        let (rc, timed_out) = wait_bounded(&mut child, Duration::from_secs(limit))?;
        let phase = open.end();
        if timed_out {
            shared.log(&format!("k6 {name} did not finish within {limit} s and was stopped"));
        }
        k6::report(shared, name, rc)?;
        let restarted = match killer.map(|k| k.join()) {
            Some(Ok(app)) => Some(app?),
            Some(Err(_)) => anyhow::bail!("the kill's thread panicked"),
            None => None,
        };
        Ok((rc, restarted, phase))
    })?;
    if buyers.is_some() {
        phases.push(phase);
    }
    load.failures += u32::from(rc != 0);
    if let Some(app) = restarted {
        save_logs(&load, &[&second])?; // the killed one's, as k6-draw-app-2.log
        second.stop();
        second = app;
    }
    let k6 = [("k6 buyers", buyers_pid)];
    let drain = Open::begin("drain", &watch(&load, [&first, &second], &k6));

    // Every accepted entry in Postgres: as many rows as the entries hash holds (bounded poll).
    let stored = || -> anyhow::Result<i64> {
        Ok(psql(&load.services, &format!("select count(*) from draw_entries where drop_id = '{DROP}'"))?.parse()?)
    };
    let accepted = || admin_get(&first, &format!("/admin/drops/{DROP}")).map(|v| v["draw"]["entries"].as_i64());
    let started = Instant::now();
    let (mut rows, mut hash) = (stored()?, accepted()?);
    while Some(rows) != hash && started.elapsed() < Duration::from_secs(DRAIN_S) {
        std::thread::sleep(Duration::from_millis(500));
        (rows, hash) = (stored()?, accepted()?);
    }
    invariant(
        &mut load,
        "draw stored",
        &format!(
            "Postgres entries {rows} = entries hash {} after {:.1} s",
            hash.map_or("(unread)".to_owned(), |n| n.to_string()),
            started.elapsed().as_secs_f64()
        ),
        Some(rows) == hash,
    );

    // The k6 entrants printed as entered are Postgres's entries, each once.
    let console = orders::read(&console_file)?;
    let printed: Vec<&str> = console.entered.iter().filter(|(d, _)| d == DROP).map(|(_, u)| u.as_str()).collect();
    let seen: HashSet<&str> = printed.iter().copied().collect();
    let users = psql(&load.services, &format!("select user_id from draw_entries where drop_id = '{DROP}'"))?;
    let kept: HashSet<&str> = users.lines().filter(|l| !l.is_empty()).collect();
    let (lost, extra) = (seen.difference(&kept).count(), kept.difference(&seen).count());
    invariant(
        &mut load,
        "draw entries",
        &format!(
            "entered (k6) {} (printed {}) = Postgres's {}: lost {lost}, not printed {extra}",
            seen.len(),
            printed.len(),
            kept.len()
        ),
        lost == 0 && extra == 0 && printed.len() == seen.len(),
    );

    // The draw, timed (the buyers beside still buying), and its record verified.
    let drained = drain.end();
    let open = Open::begin("draw", &watch(&load, [&first, &second], &k6));
    let started = Instant::now();
    let ran = curl(&["-X", "POST", "-H", &format!("Authorization: Bearer {}", first.admin_token)], &first, "draw");
    let took = started.elapsed();
    let drawn = open.end();
    if let Some(mut buyers) = buyers.take() {
        // Paused, the sale sells nothing more: no purchase in flight when k6 stops goes unseen.
        let auth = format!("Bearer {}", first.admin_token);
        let paused_ms = beside::now_ms();
        let pause = http::request(
            first.port,
            "POST",
            &format!("/admin/sales/{}/pause", beside::SALE),
            &[("Authorization", &auth)],
            None,
        )?;
        anyhow::ensure!(pause.status == 200, "pausing {}: {} {}", beside::SALE, pause.status, pause.body);
        std::thread::sleep(Duration::from_secs(1));
        buyers.stop(&load)?;
        phases.extend([drained, drawn]);
        let (buys, other) = beside::read(&buyers.console)?;
        for line in other.iter().take(20) {
            load.log(&format!("k6 buyers: {line}"));
        }
        beside::report(&mut load, &phases, &buys, paused_ms);
    }
    let ran = match ran {
        Ok(ran) => ran,
        Err(err) => {
            println!("draw run: {:.3} s wall; {err:#}", took.as_secs_f64());
            invariant(&mut load, "draw run", "no answer 200", false);
            save_logs(&load, &[&first, &second])?;
            return Ok(load);
        }
    };
    let summary: serde_json::Value = serde_json::from_str(&ran).unwrap_or_default();
    println!("draw run: {:.3} s wall; {summary}", took.as_secs_f64());
    invariant(&mut load, "draw run", &format!("state {}", summary["state"]), summary["state"] == "drawn");
    // The run's longest award call, as the instance logged it (`draw awarded`): Redis is held for
    // at most that long at a time.
    let slowest = first.log_text().lines().filter(|line| line.contains("draw awarded")).find_map(|line| {
        let value = line.split("slowest_award_ms=").nth(1)?.split([' ', ',']).next()?;
        value.trim_matches('"').parse::<f64>().ok()
    });
    let said = slowest.map_or("not logged".to_owned(), |ms| format!("{ms:.1} ms (at most {MAX_AWARD_MS} ms)"));
    invariant(&mut load, "draw award calls", &said, slowest.is_some_and(|ms| ms <= MAX_AWARD_MS));
    let record = load.results.join(format!("{name}-record.ndjson"));
    std::fs::write(&record, curl(&[], &first, "draw-record")?)?;
    let verify = Command::new(&load.binary).args(["draw", "verify"]).arg(&record).output()?;
    let said =
        String::from_utf8_lossy(&verify.stdout).trim().to_owned() + String::from_utf8_lossy(&verify.stderr).trim();
    invariant(&mut load, "draw verify", &said, verify.status.success());
    let (entries, won) = count_record(&record)?;
    invariant(
        &mut load,
        "draw record",
        &format!("entries {entries} = Postgres's {}, won {won} = run's {}", kept.len(), summary["won"]),
        entries == kept.len() as u64 && Some(won) == summary["won"].as_u64(),
    );

    // Each size once the worker stored the winners' reservations; the sale beside, and its
    // buyers' orders in Postgres with the ids they were given.
    for size in &sizes {
        load.check_sale(&first, &format!("{DROP}.{size}"))?;
    }
    if a.buy_rate > 0 {
        first.wait_drained(beside::SALE, Duration::from_secs(DRAIN_S));
        load.check_sale(&first, beside::SALE)?;
        let console = orders::read(&load.results.join("k6-draw-buyers-console.log"))?;
        let stored = orders::postgres_orders(&load, &[beside::SALE])?;
        let created: Vec<_> = console.created.iter().filter(|o| o.sale == beside::SALE).collect();
        let missing = created
            .iter()
            .filter(|o| stored.get(&(o.sale.clone(), o.user.clone())).is_none_or(|(id, _)| *id != o.order_id))
            .count();
        invariant(
            &mut load,
            "beside orders",
            &format!(
                "orders the buyers hold {} = Postgres's {}: missing or another id {missing}",
                created.len(),
                stored.len()
            ),
            missing == 0 && created.len() == stored.len(),
        );
    }
    save_logs(&load, &[&first, &second])?;
    drop(second);
    Ok(load)
}

/// Keeps the instances' logs in the results, the services' directory going with the run:
/// `k6-draw-app-<port>.log`; prints how many warning and error lines each has, and the first.
fn save_logs(load: &Load, apps: &[&App]) -> anyhow::Result<()> {
    for app in apps {
        let text = app.log_text();
        let path = load.results.join(format!("k6-draw-app-{}.log", app.port));
        std::fs::write(&path, &text)?;
        let bad: Vec<&str> = text.lines().filter(|l| l.contains("WARN") || l.contains("ERROR")).collect();
        load.log(&format!(
            "{}: {} warning or error lines{}",
            path.display(),
            bad.len(),
            bad.first().map_or(String::new(), |l| format!(", the first: {l}"))
        ));
    }
    Ok(())
}

/// Seconds the buyers beside buy before the baseline starts (k6 starting, connections opening).
const WARMUP_S: u64 = 3;
/// The longest wait for Postgres to hold every accepted entry (and the sale beside to drain).
const DRAIN_S: u64 = 120;

/// The CPU to account for in a phase: both instances, Redis, Postgres and the k6 processes given
/// (a pid 0 left out).
fn watch(load: &Load, apps: [&App; 2], k6: &[(&'static str, u32)]) -> Vec<Watch> {
    let mut watch = vec![Watch::process("app 1", apps[0].pid()), Watch::process("app 2", apps[1].pid())];
    watch.extend(load.services.redis.pid().map(|p| Watch::process("redis", p)));
    watch.extend(load.services.postgres.pid().map(|p| Watch::tree("postgres", p)));
    watch.extend(k6.iter().filter(|(_, pid)| *pid != 0).map(|(label, pid)| Watch::tree(label, *pid)));
    watch
}

/// The longest a draw's award call may hold Redis (issue 53: a sale selling beside it keeps its p99).
const MAX_AWARD_MS: f64 = 50.0;

/// Prints one invariant line and counts a failure when it does not hold.
fn invariant(load: &mut Load, name: &str, what: &str, ok: bool) {
    println!("invariant {name}: {what} [{}]", if ok { "ok" } else { "FAILED" });
    load.failures += u32::from(!ok);
}

fn admin_get(app: &App, path: &str) -> anyhow::Result<serde_json::Value> {
    let auth = format!("Bearer {}", app.admin_token);
    Ok(http::request(app.port, "GET", path, &[("Authorization", &auth)], None)?.json())
}

/// `curl` of the drop's `/admin/drops/{drop}/draw` (`draw`) or `/drops/{drop}/draw` (`draw-record`,
/// NDJSON, maybe chunked): its body; fails unless 200.
fn curl(args: &[&str], app: &App, what: &str) -> anyhow::Result<String> {
    let path = if what == "draw" { format!("/admin/drops/{DROP}/draw") } else { format!("/drops/{DROP}/draw") };
    let out = Command::new("curl")
        .args(["-sS", "--fail-with-body", "--max-time", "300"])
        .args(args)
        .arg(format!("{}{path}", app.url))
        .output()?;
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(out.status.success(), "{path}: {} {body}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(body)
}

/// The record's entry lines and its winners.
fn count_record(path: &Path) -> anyhow::Result<(u64, u64)> {
    let text = std::fs::read_to_string(path)?;
    let kinds = text.lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    Ok(kinds.fold((0, 0), |(e, w), v| (e + u64::from(v["kind"] == "entry"), w + u64::from(v["kind"] == "won"))))
}
