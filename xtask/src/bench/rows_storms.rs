//! The buyer's side under a storm, on one app: a polling storm of `GET /sales/{id}` on an upcoming
//! sale, with the Redis commands the app ran meanwhile (`INFO commandstats` of the bench's own
//! Redis, before and after: the row's Redis calls, whatever the request rate); and a repeat
//! storm, `POST /buy` by 500 buyers who already bought (every answer a 409 with the order id).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::json;
use testbed::App;

use super::driver::{Bench, drained, rfc3339};
use super::http;
use super::rows::{HIGH_RATE_LIMIT, warm_up};
use super::wrk::Mode;

/// The buyers of the repeat storm.
pub const REPEAT_BUYERS: u32 = 500;
/// Of them, how many ask once more after the storm (their 409 must name their 201's order).
pub const REASKED: usize = 50;
const POLL_SALE: &str = "bench-poll";
const REPEAT_SALE: &str = "bench-repeat";

/// The Redis commands run while a row ran, by command (`INFO commandstats`, INFO itself left out).
#[derive(Debug, Clone, Default, Serialize)]
pub struct RedisCalls {
    pub by_command: BTreeMap<String, u64>,
}

impl RedisCalls {
    pub fn total(&self) -> u64 {
        self.by_command.values().sum()
    }
}

/// Calls per command so far: the `cmdstat_<name>:calls=N,...` lines.
fn commandstats(b: &Bench) -> anyhow::Result<BTreeMap<String, u64>> {
    let info: String = b.redis(redis::cmd("INFO").arg("commandstats"))?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (name, fields) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = fields.split(',').find_map(|f| f.strip_prefix("calls="))?.parse().ok()?;
            Some((name.to_string(), calls))
        })
        .filter(|(name, _)| name != "info")
        .collect())
}

/// One measured wrk row of `--duration` s, and the Redis commands run meanwhile.
fn counted(b: &mut Bench, name: &str, app: &App, mode: Mode) -> anyhow::Result<()> {
    let before = commandstats(b)?;
    b.wrk(name, app, b.args.duration(), b.args.connections, mode, None)?;
    let by_command = commandstats(b)?
        .into_iter()
        .map(|(command, n)| (n - before.get(&command).copied().unwrap_or(0), command))
        .filter(|(n, _)| *n > 0)
        .map(|(n, command)| (command, n))
        .collect();
    b.results.redis_calls.insert(name.into(), RedisCalls { by_command });
    Ok(())
}

/// `POST /buy` for `user` in `sale` from the driver: (status, the body's order_id).
fn buy(app: &App, sale: &str, user: &str) -> anyhow::Result<(u16, String)> {
    let body = json!({"sale_id": sale, "user_id": user}).to_string();
    let answer = http::request(app.port, "POST", "/buy", &[], Some(&body))?;
    Ok((answer.status, answer.json()["order_id"].as_str().unwrap_or("").to_string()))
}

pub fn storm_rows(b: &mut Bench) -> anyhow::Result<()> {
    let app = b.start_app(&[("SECKILL_RATE_LIMIT", HIGH_RATE_LIMIT)])?;
    let starts = rfc3339(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64 + 3600);
    eprintln!("==> seed sale {POLL_SALE} (stock 1000, starts at {starts})");
    app.put_sale(POLL_SALE, &json!({"stock": 1000, "starts_at": starts}))?;
    b.seed(&app, REPEAT_SALE, 1000)?;
    warm_up(b, &app, "storms")?;
    counted(b, "http-sale-poll", &app, Mode::Sale { sale: POLL_SALE })?;
    b.results.set(
        "http-sale-poll.detail",
        format!("sale {POLL_SALE}, upcoming (starts_at {starts}), stock 1,000; no If-None-Match, so every answer is a 200 with its body"),
    );

    eprintln!("==> {REPEAT_BUYERS} buyers buy once in {REPEAT_SALE}");
    let mut orders = vec![];
    for i in 0..REPEAT_BUYERS {
        let (status, order_id) = buy(&app, REPEAT_SALE, &format!("r-{i}"))?;
        anyhow::ensure!(status == 201, "r-{i} buying in {REPEAT_SALE} before the repeat storm: {status}");
        orders.push(order_id);
    }
    drained(&app, REPEAT_SALE);
    let mode = Mode::Repeat { sale: REPEAT_SALE, prefix: "r", users: REPEAT_BUYERS };
    counted(b, "http-buy-repeat", &app, mode)?;
    let mut same = 0;
    for _ in 0..REASKED {
        let i = fastrand::usize(..orders.len());
        let (status, order_id) = buy(&app, REPEAT_SALE, &format!("r-{i}"))?;
        same += usize::from(status == 409 && order_id == orders[i]);
    }
    b.results.set("http-buy-repeat.same_order", same);
    b.results.set(
        "http-buy-repeat.detail",
        format!("sale {REPEAT_SALE} in stock (1,000): {REPEAT_BUYERS} buyers r-0..r-{} each bought once before the row (their orders confirmed), then wrk cycles over them, so every request repeats a purchase", REPEAT_BUYERS - 1),
    );
    b.check(&app, POLL_SALE)?;
    b.check(&app, REPEAT_SALE)?;
    b.stop_app(app);
    Ok(())
}
