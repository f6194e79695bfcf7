//! `cargo xtask load webhooks`: does the webhook dispatcher keep up with the worker (issue 42)?
//! The app runs with webhooks on, pointed at a fast receiver in this process (127.0.0.1, keep-alive,
//! answers 200 at once and records when each event arrived); wrk buys in stock at a paced rate
//! for a bounded time (one `order.created` per order); then the delivery lag of every event,
//! arrival − the event's `timestamp` (written by the worker's insert transaction), as p50 / p99 /
//! max, and the time the last events took to arrive once the load stopped.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::Load;
use crate::measure::checks::{drained, psql};
use crate::measure::clock::rfc3339_micros;
use crate::measure::cpu::Watch;
use crate::measure::process;
use crate::measure::stats::group;
use crate::measure::wrk::{Mode, Wrk, WrkOut};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Purchases per second (wrk, paced), each one order and one `order.created`.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    rate: u64,
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=120))]
    seconds: u64,
    /// wrk connections (enough idle ones that the schedule sets the rate).
    #[arg(long, default_value_t = 32)]
    connections: u32,
    /// The lag p99 the dispatcher must stay under, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    p99_limit_ms: u64,
    /// How long after the load the last event may take to arrive, in seconds.
    #[arg(long, default_value_t = 10)]
    catch_up_limit: u64,
}

/// One event as it first arrived.
struct Arrival {
    /// Unix µs when its request was read.
    at_us: i64,
    /// Its body's `timestamp`, in Unix µs.
    written_us: i64,
}

#[derive(Default)]
struct Seen {
    first: HashMap<String, Arrival>,
    /// Requests in all (a repeat of a `webhook-id` counts here, not in `first`).
    requests: u64,
    /// Requests that were not an event this tool can read.
    unreadable: u64,
}

fn now_us() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// The receiver: one thread per connection (the dispatcher keeps at most 32 open), keep-alive,
/// 200 with no body to every request. Its threads end with this process.
fn start_receiver() -> anyhow::Result<(String, Arc<Mutex<Seen>>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen = shared.clone();
            std::thread::spawn(move || serve(stream, &seen));
        }
    });
    Ok((url, seen))
}

/// Reads requests off one connection until it closes.
fn serve(stream: TcpStream, seen: &Mutex<Seen>) {
    let _ = stream.set_nodelay(true);
    let Ok(mut writer) = stream.try_clone() else { return };
    let mut reader = BufReader::new(stream);
    loop {
        let (mut id, mut length, mut line) = (String::new(), 0usize, String::new());
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "webhook-id" => id = value.trim().to_owned(),
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let at_us = now_us();
        let written_us = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["timestamp"].as_str().and_then(rfc3339_micros));
        {
            let mut seen = seen.lock().unwrap();
            seen.requests += 1;
            match written_us {
                Some(written_us) if !id.is_empty() => {
                    seen.first.entry(id).or_insert(Arrival { at_us, written_us });
                }
                _ => seen.unreadable += 1,
            }
        }
        if writer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_err() {
            return;
        }
    }
}

/// The value at quantile `q` of sorted `xs`.
fn quantile(xs: &[i64], q: f64) -> i64 {
    xs[((xs.len() as f64 * q).ceil() as usize).clamp(1, xs.len()) - 1]
}

fn ms(us: i64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    let (url, seen) = start_receiver()?;
    let secret: String = format!("whsec_{}", (0..48).map(|_| fastrand::alphanumeric()).collect::<String>());
    let app = load.app(&[
        ("SECKILL_RATE_LIMIT", "100000/1s"),
        ("SECKILL_WEBHOOK_URL", &url),
        ("SECKILL_WEBHOOK_SECRET", &secret),
    ])?;
    let sale = "webhooks";
    app.seed(sale, a.rate * a.seconds * 2 + 1_000, None)?;
    load.log(&format!("receiver {url}; {} purchases/s for {} s", a.rate, a.seconds));

    let wrk = Wrk {
        threads: 2,
        connections: a.connections,
        seconds: a.seconds,
        url: &app.url,
        mode: Mode::Buy { sale, prefix: "w" },
        rate: Some(a.rate),
    };
    let watch = [Watch::process("app", app.pid()), Watch::tree("postgres", load.services.postgres.pid().unwrap_or(0))];
    let repo = testbed::workspace_root();
    let done =
        process::run("webhooks-wrk", wrk.command(&repo), Duration::from_secs(a.seconds + 30), &watch, &load.results)?;
    let load_end_us = now_us();
    let out = WrkOut::parse(&done.stdout).ok_or_else(|| anyhow::anyhow!("no BENCH_WRK line from wrk"))?;
    drained(&app, sale);

    // Until every stored order's event has arrived (or the bound).
    let orders: i64 =
        psql(&load.services, &format!("select count(*) from orders where sale_id = '{sale}'"))?.parse()?;
    let until = Instant::now() + Duration::from_secs(a.catch_up_limit);
    while (seen.lock().unwrap().first.len() as i64) < orders && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let undelivered: i64 =
        psql(&load.services, "select count(*) from webhook_deliveries where delivered_at is null")?.parse()?;
    let seen = seen.lock().unwrap();
    let mut lags: Vec<i64> = seen.first.values().map(|e| e.at_us - e.written_us).collect();
    lags.sort_unstable();
    anyhow::ensure!(!lags.is_empty(), "no event arrived");
    let last_us = seen.first.values().map(|e| e.at_us).max().unwrap_or(load_end_us);
    // The lag over the run's first and second half of events, by write time: a dispatcher that
    // falls behind shows a lag that grows.
    let mut by_write: Vec<&Arrival> = seen.first.values().collect();
    by_write.sort_by_key(|e| e.written_us);
    let half = |part: &[&Arrival]| {
        let mut l: Vec<i64> = part.iter().map(|e| e.at_us - e.written_us).collect();
        l.sort_unstable();
        quantile(&l, 0.99)
    };
    let (early, late) = by_write.split_at(by_write.len() / 2);
    let app_cpu = done.usage.per_wall("app").unwrap_or(0.0);
    let pg_cpu = done.usage.per_wall("postgres").unwrap_or(0.0);
    println!(
        "webhooks: wrk {:.0} req/s for {:.1} s (201: {}), orders {}, events arrived {} ({} requests, {} repeats, {} unreadable)",
        out.rate(),
        out.seconds(),
        group(out.status("201") as f64),
        group(orders as f64),
        group(seen.first.len() as f64),
        group(seen.requests as f64),
        group((seen.requests - seen.unreadable).saturating_sub(seen.first.len() as u64) as f64),
        seen.unreadable
    );
    let p99 = quantile(&lags, 0.99);
    println!(
        "webhooks: delivery lag p50 {}  p99 {}  max {}  (p99 first half {}, second half {}); last event {} after the load; undelivered at the end {}; CPU app {:.0} %, postgres {:.0} %",
        ms(quantile(&lags, 0.5)),
        ms(p99),
        ms(lags[lags.len() - 1]),
        ms(half(early)),
        ms(half(late)),
        ms((last_us - load_end_us).max(0)),
        undelivered,
        app_cpu * 100.0,
        pg_cpu * 100.0
    );
    // The lag's median for each second of the run (by write time): a steady dispatcher is flat,
    // one that falls behind climbs, a stall shows where it was.
    let start_us = by_write[0].written_us;
    let mut seconds: Vec<Vec<i64>> = vec![];
    for e in &by_write {
        let second = ((e.written_us - start_us) / 1_000_000) as usize;
        seconds.resize(seconds.len().max(second + 1), vec![]);
        seconds[second].push(e.at_us - e.written_us);
    }
    let medians: Vec<String> = seconds
        .iter_mut()
        .map(|lags| {
            lags.sort_unstable();
            if lags.is_empty() { "-".into() } else { format!("{:.2}", quantile(lags, 0.5) as f64 / 1e6) }
        })
        .collect();
    println!("webhooks: lag p50 (s) by second of the run: {}", medians.join(" "));
    let kept_up = (seen.first.len() as i64) == orders && undelivered == 0;
    let fast = p99 <= a.p99_limit_ms as i64 * 1000;
    println!(
        "invariant webhooks: every order's event arrived within {} s of the load's end [{}], lag p99 <= {} ms [{}]",
        a.catch_up_limit,
        if kept_up { "ok" } else { "BROKEN" },
        a.p99_limit_ms,
        if fast { "ok" } else { "BROKEN" }
    );
    load.failures += u32::from(!kept_up) + u32::from(!fast);
    drop(seen);
    let persisted = load.check_sale(&app, sale)?;
    // wrk does not count the answers of requests in flight when its time is up: at most one
    // per connection.
    let created = out.status("201") as i64;
    let ok = persisted >= created && persisted - created <= i64::from(a.connections);
    load.failures += u32::from(!ok);
    println!(
        "invariant webhooks: 201s seen {created} <= Postgres orders {persisted} <= 201s + connections [{}]",
        if ok { "ok" } else { "BROKEN" }
    );
    let kept = load.results.join("webhooks-app.log");
    std::fs::copy(&app.log, &kept)?;
    load.log(&format!("the app's log: {}", kept.display()));
    Ok(load)
}
