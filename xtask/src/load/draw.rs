//! A storm of draw entries with k6 (`load-tests/k6/draw.js`, issue 53): a drop in draw mode, two
//! instances, distinct entrants through both, and with `--kill-at` a `kill -9` of the second
//! mid-storm, restarted `--restart-after` seconds later (its worker's pending entries read again).
//! Then: every accepted entry in Postgres once, the draw run (`POST /admin/drops/{drop}/draw`, its wall
//! time printed), its record (`GET /drops/{drop}/draw`) through `seckill draw verify`, and each
//! size's invariants once the winners' reservations are stored.

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use testbed::{App, Signal};

use super::{Load, k6, orders, secs};
use crate::measure::checks::psql;
use crate::measure::clock::rfc3339;
use crate::measure::http;

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
}

const DROP: &str = "draw";

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    let first = load.app(&[])?;
    let mut second = load.app(&[])?;
    let sizes: Vec<String> = (0..a.sizes).map(|s| (38 + s).to_string()).collect();
    let each: serde_json::Map<String, serde_json::Value> =
        sizes.iter().map(|size| (size.clone(), json!({"stock": a.stock}))).collect();
    // Entries open now and close well after the storm: the run below draws early, not the loop.
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    let storm = secs(&a.duration)?;
    let draw = json!({"opens_at": rfc3339(now - 2), "closes_at": rfc3339(now + storm as i64 + 900)});
    let body = json!({"sizes": each, "per_buyer": a.per_buyer, "payment_window": "10m", "challenge": {"cost": 0},
        "draw": draw});
    first.put_drop(DROP, &body)?;
    let kill = if a.kill_at > 0 { format!(", instance 2 killed at {} s", a.kill_at) } else { String::new() };
    load.log(&format!(
        "seeded the draw {DROP}: {} sizes of {} units, {} per entrant; {} entrants/s for {}{kill}",
        a.sizes, a.stock, a.per_buyer, a.rate, a.duration
    ));

    let env = [
        ("BASE_URLS", format!("{},{}", first.url, second.url)),
        ("RUN_ID", now.to_string()),
        ("DROP", DROP.to_owned()),
        ("SIZES", sizes.join(",")),
        ("PER_BUYER", a.per_buyer.to_string()),
        ("RATE", a.rate.to_string()),
        ("DURATION_S", storm.to_string()),
        ("QTY_MULTI", a.qty_multi.to_string()),
        ("REPEAT", a.repeat.to_string()),
        ("KILL_AT_S", a.kill_at.to_string()),
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
    let (rc, restarted) = std::thread::scope(|scope| -> anyhow::Result<(i32, Option<App>)> {
        let shared = &load;
        let (pid, at, after) = (second.pid(), Duration::from_secs(a.kill_at), Duration::from_secs(a.restart_after));
        let killer = (a.kill_at > 0).then(|| {
            scope.spawn(move || {
                std::thread::sleep(at);
                let killed = testbed::signal_pid(pid, Signal::SIGKILL);
                shared.log(&format!("instance 2 (pid {pid}) SIGKILLed: {killed}; restarting it in {after:?}"));
                std::thread::sleep(after);
                shared.app(&[])
            })
        });
        let rc = k6::run_script(shared, name, "draw.js", &env, &extra, storm + 120)?;
        let restarted = match killer.map(|k| k.join()) {
            Some(Ok(app)) => Some(app?),
            Some(Err(_)) => anyhow::bail!("the kill's thread panicked"),
            None => None,
        };
        Ok((rc, restarted))
    })?;
    load.failures += u32::from(rc != 0);
    if let Some(app) = restarted {
        second.stop();
        second = app;
    }

    // Every accepted entry in Postgres: as many rows as the entries hash holds (bounded poll).
    let stored = || -> anyhow::Result<i64> {
        Ok(psql(&load.services, &format!("select count(*) from draw_entries where drop_id = '{DROP}'"))?.parse()?)
    };
    let accepted = || admin_get(&first, &format!("/admin/drops/{DROP}")).map(|v| v["draw"]["entries"].as_i64());
    let started = Instant::now();
    let (mut rows, mut hash) = (stored()?, accepted()?);
    while Some(rows) != hash && started.elapsed() < Duration::from_secs(120) {
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

    // The draw, timed, and its record verified.
    let started = Instant::now();
    let ran = curl(&["-X", "POST", "-H", &format!("Authorization: Bearer {}", first.admin_token)], &first, "draw")?;
    let took = started.elapsed();
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

    // Each size once the worker stored the winners' reservations.
    for size in &sizes {
        load.check_sale(&first, &format!("{DROP}.{size}"))?;
    }
    drop(second);
    Ok(load)
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
