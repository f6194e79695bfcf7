//! A queued sale's crowd with k6 (`load-tests/k6/waiting-room.js`): users join the waiting room
//! before and after the start, poll with their tickets, buy once admitted; bots that never joined
//! fire `POST /buy` from the start. Afterwards the sale's invariants, every 201 in Postgres and on
//! the order route, and no buyer without an admission: every Postgres order's buyer was printed
//! admitted, and no bot has one.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::{Load, k6, orders, secs};
use crate::measure::clock::rfc3339;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// New users a second joining the waiting room (from the seed on, for --arrive).
    #[arg(long, default_value_t = 40)]
    arrival_rps: u32,
    /// How long users keep arriving; those after --countdown join the end of the line.
    #[arg(long, default_value = "15s")]
    arrive: String,
    /// The sale starts this long after its seed; its pre-queue is open from the seed on.
    #[arg(long, default_value = "10s")]
    countdown: String,
    /// The sale's stock.
    #[arg(long, default_value_t = 300)]
    stock: u64,
    /// The waiting room's outflow, buyers admitted a second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Bots a second firing POST /buy without joining, from the start, for --bot-duration.
    #[arg(long, default_value_t = 20)]
    bot_rps: u32,
    #[arg(long, default_value = "10s")]
    bot_duration: String,
    /// The http_req_duration p99 threshold, ms: a stall, not slowness (it holds on 2 cores with a
    /// cargo build running).
    #[arg(long, default_value_t = 2000)]
    p99_ms: u32,
    /// The crowd's source addresses.
    #[arg(long, default_value = "127.0.0.2-127.0.0.250")]
    local_ips: String,
}

const SALE: &str = "queued-1";
/// The app that checks the orders afterwards: every check comes from 127.0.0.1.
const OPEN_LIMIT: &str = "100000/1s";

pub fn run(a: &Args, mut load: Load) -> anyhow::Result<Load> {
    let app = load.app(&[])?;
    let now_s = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis().div_ceil(1000) as u64;
    let starts = now_s + secs(&a.countdown)?;
    let body = json!({"stock": a.stock, "starts_at": rfc3339(starts as i64),
                      "queue": {"opens_at": rfc3339(now_s as i64 - 1), "rate": a.rate}});
    app.put_sale(SALE, &body)?;
    load.log(&format!(
        "seeded {SALE} ({} units, starting at {}, admitting {}/s); {} users/s join for {}, {} bots/s buy without joining for {}",
        a.stock,
        rfc3339(starts as i64),
        a.rate,
        a.arrival_rps,
        a.arrive,
        a.bot_rps,
        a.bot_duration
    ));
    let env = [
        ("BASE_URL", app.url.clone()),
        ("RUN_ID", SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs().to_string()),
        ("SALE", SALE.to_string()),
        ("STARTS_AT_MS", (starts * 1000).to_string()),
        ("ARRIVAL_RPS", a.arrival_rps.to_string()),
        ("ARRIVE_S", secs(&a.arrive)?.to_string()),
        ("BOT_RPS", a.bot_rps.to_string()),
        ("BOT_S", secs(&a.bot_duration)?.to_string()),
        ("P99_MS", a.p99_ms.to_string()),
    ];
    let extra = ["--local-ips".to_string(), a.local_ips.clone()];
    let limit = secs(&a.arrive)?.max(secs(&a.countdown)? + secs(&a.bot_duration)?) + 120;
    let name = "k6-queue";
    load.failures += u32::from(k6::run_script(&load, name, "waiting-room.js", &env, &extra, limit)? != 0);

    let persisted = load.check_sale(&app, SALE)?;
    load.expect_created("waiting room (k6)", k6::created(&load, name), persisted);
    let console = orders::read(&load.results.join(format!("{name}-console.log")))?;
    let stored = orders::postgres_orders(&load, &[SALE])?;
    let unadmitted: Vec<&String> = stored
        .keys()
        .filter(|(sale, user)| !console.admitted.contains(&(sale.clone(), user.clone())))
        .map(|k| &k.1)
        .collect();
    let bots = stored.keys().filter(|(_, user)| user.starts_with("bot-")).count();
    let ok = unadmitted.is_empty() && bots == 0 && !console.admitted.is_empty();
    println!(
        "invariant waiting room: Postgres orders {} all by admitted buyers ({} admitted; {} not) and none by a bot ({bots}) [{}]",
        stored.len(),
        console.admitted.len(),
        unadmitted.len(),
        if ok { "ok" } else { "BROKEN" }
    );
    if !unadmitted.is_empty() {
        load.log(&format!("bought without an admission: {:?}", &unadmitted[..unadmitted.len().min(5)]));
    }
    load.failures += u32::from(!ok);
    drop(app);

    let checker = load.app(&[("SECKILL_RATE_LIMIT", OPEN_LIMIT)])?;
    let expected = k6::created(&load, name);
    orders::verify(&mut load, "waiting room (k6)", &console, false, expected, &checker, None, 10_000)?;
    Ok(load)
}
