//! Four bounded oha runs (oha sends everything from 127.0.0.1): app 1 with `--open-limit` (the
//! limiter runs but never refuses): in stock (a random user per request from a file of distinct
//! users, `-Z`), sold out, /healthz; app 2 with `--rate-limit`: one address far over it (429s).
//! The sold-out answers have an in-process limit of their own (`SECKILL_SOLD_OUT_RATE_LIMIT`),
//! set to `--open-limit` too: one address faster than that gets 429 for the rest of a window, so
//! the sold-out run expects 410 and 429, and never more 410s than that limit lets through.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::{Load, secs};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// -z of the sold-out, healthz and limited runs.
    #[arg(long, default_value = "10s")]
    duration: String,
    /// -c of every run.
    #[arg(long, default_value_t = 50)]
    connections: u32,
    /// -n of the in-stock run, and the stock of oha-stock.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    in_stock_requests: u64,
    /// The app's limit for the first three runs.
    #[arg(long, default_value = "100000/1s")]
    open_limit: String,
    /// The app's limit for the limited run.
    #[arg(long, default_value = "20/1s")]
    rate_limit: String,
}

/// The -Z file holds this many users per request: oha picks a line at random (with replacement),
/// so about 1/(2 × 20) of the requests repeat a user (→ 409).
const USERS_PER_REQUEST: u64 = 20;

/// One bounded oha run, JSON to `oha-NAME.json`; its one-line summary, and whether every answer
/// had one of `allowed` and no request failed. Returns the status counts.
fn oha(
    load: &mut Load,
    a: &Args,
    name: &str,
    limit: u64,
    args: &[&str],
    allowed: &[&str],
) -> anyhow::Result<BTreeMap<String, u64>> {
    let out = load.results.join(format!("oha-{name}.json"));
    let mut cmd = Command::new("oha");
    cmd.args(["--no-tui", "--output-format", "json", "-o"])
        .arg(&out)
        .args(["-c", &a.connections.to_string(), "-t", "5s"])
        .args(args);
    if load.run_bounded(cmd, limit)? != 0 {
        load.log(&format!("oha {name} failed or did not finish within {limit} s"));
        load.failures += 1;
        return Ok(BTreeMap::new());
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out)?)?;
    let statuses: BTreeMap<String, u64> =
        serde_json::from_value(v["statusCodeDistribution"].clone()).unwrap_or_default();
    let errors = v["errorDistribution"].as_object().map_or(0, |e| e.len());
    let ms = |p: &str| v["metrics"]["latency_ms"][p].as_f64().unwrap_or(0.0);
    let codes: Vec<String> = statuses.iter().map(|(k, n)| format!("{k}={n}")).collect();
    println!(
        "oha {name:<9} {:.0} req/s  p50 {:.2}ms  p99 {:.2}ms  statuses {}{}",
        v["summary"]["requestsPerSec"].as_f64().unwrap_or(0.0),
        ms("p50"),
        ms("p99"),
        codes.join(" "),
        if errors > 0 { format!("  errors {}", v["errorDistribution"]) } else { String::new() }
    );
    if errors > 0 || !statuses.keys().all(|k| allowed.contains(&k.as_str())) {
        load.log(&format!("oha {name}: expected only statuses {allowed:?} and no errors"));
        load.failures += 1;
    }
    Ok(statuses)
}

/// The most answers an in-process limit of `limit` (`REQUESTS/WINDOW`, as the service reads it)
/// lets through to one address in a run of `seconds`: REQUESTS per window begun, one more window
/// for the run's edges.
fn most_let_through(limit: &str, seconds: u64) -> anyhow::Result<u64> {
    let limit = seckill::config::rate_limit(limit).map_err(anyhow::Error::msg)?;
    let windows = (seconds as f64 / limit.window.as_secs_f64()).ceil() as u64;
    Ok(u64::from(limit.limit) * (windows + 1))
}

#[cfg(test)]
#[test]
fn the_sold_out_run_expects_what_the_services_limit_lets_through() {
    // The default --open-limit over the default 10 s: the 1.19 M requests of one run the
    // newcomer saw could not all be answered 410.
    assert_eq!(most_let_through("100000/1s", 10).unwrap(), 1_100_000);
    assert_eq!(most_let_through("20/500ms", 3).unwrap(), 140);
    assert!(most_let_through("fast", 10).is_err());
}

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    for entry in std::fs::read_dir(&load.results)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("oha-") && name.ends_with(".json") {
            std::fs::remove_file(entry.path())?;
        }
    }
    let limit = secs(&a.duration)? + 60;
    let app = load.app(&[("SECKILL_RATE_LIMIT", &a.open_limit), ("SECKILL_SOLD_OUT_RATE_LIMIT", &a.open_limit)])?;
    app.seed("oha-stock", a.in_stock_requests, None)?;
    app.seed("oha-soldout", 0, None)?;
    let run_id = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let bodies = load.services.dir().join("oha-bodies.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&bodies)?);
    for i in 1..=a.in_stock_requests * USERS_PER_REQUEST {
        writeln!(file, "{{\"sale_id\":\"oha-stock\",\"user_id\":\"oha-{run_id}-{i}\"}}")?;
    }
    file.flush()?;
    let (buy, healthz) = (format!("{}/buy", app.url), format!("{}/healthz", app.url));
    let n = a.in_stock_requests.to_string();
    let json = ["-m", "POST", "-T", "application/json"];
    let bodies = bodies.display().to_string();
    let in_stock = [&["-n", &n][..], &json, &["-Z", &bodies, &buy]].concat();
    let seen = oha(&mut load, a, "in-stock", 120, &in_stock, &["201", "409"])?;
    let sold_out =
        [&["-z", &a.duration, "-w"][..], &json, &["-d", r#"{"sale_id":"oha-soldout","user_id":"late-user"}"#, &buy]]
            .concat();
    let seen_soldout = oha(&mut load, a, "sold-out", limit, &sold_out, &["410", "429"])?;
    let most = most_let_through(&a.open_limit, secs(&a.duration)?)?;
    let answered_410 = seen_soldout.get("410").copied().unwrap_or(0);
    if answered_410 > most {
        load.log(&format!("oha sold-out: {answered_410} answers 410, over the {most} the sold-out limit lets through"));
        load.failures += 1;
    }
    oha(&mut load, a, "healthz", limit, &["-z", &a.duration, "-w", &healthz], &["200"])?;
    let mut created = vec![("oha-stock", seen), ("oha-soldout", seen_soldout)];
    let mut checks = vec![];
    for (sale, seen) in created.drain(..) {
        checks.push((sale, seen, load.check_sale(&app, sale)?));
    }
    drop(app);

    let app = load.app(&[("SECKILL_RATE_LIMIT", &a.rate_limit)])?;
    app.seed("oha-limited", 1_000_000, None)?;
    let buy = format!("{}/buy", app.url);
    let limited =
        [&["-z", &a.duration, "-w"][..], &json, &["-d", r#"{"sale_id":"oha-limited","user_id":"greedy-user"}"#, &buy]]
            .concat();
    let seen = oha(&mut load, a, "limited", limit, &limited, &["201", "409", "429"])?;
    if seen.get("429").copied().unwrap_or(0) == 0 {
        load.log("oha limited: no 429 at all");
        load.failures += 1;
    }
    checks.push(("oha-limited", seen, load.check_sale(&app, "oha-limited")?));
    for (sale, seen, orders) in checks {
        load.expect_created(&format!("{sale} (oha)"), seen.get("201").copied().unwrap_or(0) as i64, orders);
    }
    Ok(load)
}
