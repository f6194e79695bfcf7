//! The buyer's side under a storm, on one app: a polling storm of `GET /sales/{id}` on an upcoming
//! sale, with the Redis commands the app ran meanwhile (`INFO commandstats` of the bench's own
//! Redis, before and after: the row's Redis calls, whatever the request rate); and a repeat
//! storm, `POST /buy` by 500 buyers who already bought (every answer a 409 with the order id);
//! then a queued sale's waiting room: a join storm (every request a new buyer), a ticket polling
//! storm, both with their Redis commands, and the Redis calls of `POST /buy` with an admission
//! against a sale without a queue (`queue-buy.calls`).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use testbed::App;

use super::model::{COMPARED_BUYS, POLLERS, REASKED, REPEAT_BUYERS, RedisCalls};
use super::runner::{Bench, HIGH_RATE_LIMIT, warm_up};
use crate::measure::checks::drained;
use crate::measure::clock::rfc3339;
use crate::measure::commandstats::CommandStats;
use crate::measure::http;
use crate::measure::wrk::Mode;

const POLL_SALE: &str = "bench-poll";
const REPEAT_SALE: &str = "bench-repeat";
const QUEUE_SALE: &str = "bench-queue";

/// Calls per command so far, INFO itself left out.
fn commandstats(b: &Bench) -> anyhow::Result<BTreeMap<String, u64>> {
    let info: String = b.redis(redis::cmd("INFO").arg("commandstats"))?;
    Ok(CommandStats::parse(&info).calls().filter(|(name, _)| name != "info").collect())
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
    queue_rows(b, &app)?;
    b.check(&app, POLL_SALE)?;
    b.check(&app, REPEAT_SALE)?;
    b.check(&app, QUEUE_SALE)?;
    b.stop_app(app);
    Ok(())
}

/// `request` to the app from the driver: (status, JSON body).
fn call(
    app: &App,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> anyhow::Result<(u16, serde_json::Value)> {
    let answer = http::request(app.port, method, path, headers, body)?;
    Ok((answer.status, answer.json()))
}

/// The waiting room's rows on a queued sale that started a second before its seed (every join
/// gets a place at once) and admits up to 100,000 buyers a second.
fn queue_rows(b: &mut Bench, app: &App) -> anyhow::Result<()> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() as i64;
    eprintln!("==> seed queued sale {QUEUE_SALE} (stock 10,000,000, started, admitting 100,000/s)");
    let body = json!({"stock": 10_000_000, "starts_at": rfc3339(now - 1), "queue": {"opens_at": rfc3339(now - 2), "rate": 100_000}});
    app.put_sale(QUEUE_SALE, &body)?;
    std::thread::sleep(std::time::Duration::from_millis(500)); // the instance's snapshot learns the sale
    counted(b, "http-queue-join", app, Mode::QueueJoin { sale: QUEUE_SALE, prefix: "j" })?;
    b.results.set(
        "http-queue-join.detail",
        format!("sale {QUEUE_SALE}, queued and started: every request a new buyer j-<n>-<thread> joins the end of the line (POST /sales/{{id}}/queue, rate limit checked as for /buy)"),
    );

    eprintln!("==> {POLLERS} buyers join {QUEUE_SALE} for the ticket polling storm");
    let mut lines = String::new();
    for i in 0..POLLERS {
        let (status, answer) = call(app, "POST", &format!("/sales/{QUEUE_SALE}/queue?user_id=p-{i}"), &[], None)?;
        anyhow::ensure!(status == 200, "p-{i} joining {QUEUE_SALE}: {status} {answer}");
        lines += &format!("p-{i} {}\n", answer["ticket"].as_str().unwrap_or_default());
    }
    let tickets = std::env::temp_dir().join(format!("seckill-bench-tickets-{}", std::process::id()));
    std::fs::write(&tickets, lines)?;
    let polled = counted(b, "http-queue-poll", app, Mode::QueuePoll { sale: QUEUE_SALE, tickets: &tickets });
    std::fs::remove_file(&tickets)?;
    polled?;
    b.results.set(
        "http-queue-poll.detail",
        format!("sale {QUEUE_SALE}: {POLLERS} buyers p-0..p-{} who joined (and were admitted) poll GET /sales/{{id}}/queue with their tickets, in turn: answered from the instance's view of the line", POLLERS - 1),
    );
    compare_buy_calls(b, app)
}

/// Redis calls of `COMPARED_BUYS` purchases with an admission on the queued sale against as many
/// on a sale without a queue, one at a time from the driver: `queue-buy.calls` =
/// {"queued": {command: calls}, "plain": {…}, "purchases": n}.
fn compare_buy_calls(b: &mut Bench, app: &App) -> anyhow::Result<()> {
    const PLAIN: &str = "bench-queue-plain";
    b.seed(app, PLAIN, 10_000_000)?;
    let mut admissions = vec![];
    for i in 0..COMPARED_BUYS {
        let (status, answer) = call(app, "GET", &format!("/sales/{QUEUE_SALE}/queue?user_id=p-{i}"), &[], None)?;
        let admission = answer["admission"].as_str().map(str::to_owned);
        anyhow::ensure!(status == 200 && admission.is_some(), "p-{i} not admitted in {QUEUE_SALE}: {status} {answer}");
        admissions.push(admission.unwrap_or_default());
    }
    let mut calls = serde_json::Map::new();
    for (label, sale) in [("queued", QUEUE_SALE), ("plain", PLAIN)] {
        let before = commandstats(b)?;
        for (i, admission) in admissions.iter().enumerate() {
            let body = json!({"sale_id": sale, "user_id": format!("p-{i}")}).to_string();
            let headers: &[(&str, &str)] = if sale == QUEUE_SALE { &[("Seckill-Admission", admission)] } else { &[] };
            let (status, answer) = call(app, "POST", "/buy", headers, Some(&body))?;
            anyhow::ensure!(status == 201, "p-{i} buying in {sale}: {status} {answer}");
        }
        let delta: BTreeMap<String, u64> = commandstats(b)?
            .into_iter()
            .map(|(command, n)| (command.clone(), n - before.get(&command).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        calls.insert(label.into(), json!(delta));
        drained(app, sale);
    }
    calls.insert("purchases".into(), json!(COMPARED_BUYS));
    b.results.set("queue-buy.calls", serde_json::Value::Object(calls).to_string());
    b.check(app, PLAIN)
}
