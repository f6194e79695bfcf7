//! Order events out across a `kill -9` (issue 42): the instance is killed right after the
//! purchases, with every `order.created` written and none delivered yet (some refused once); a
//! new instance sends them. Then payments, cancels and expiries: every order gets exactly one
//! `order.created` and one outcome event, each delivered to a receiver that refuses every first
//! attempt, signed, with the same `webhook-id` and bytes on every attempt, one order's events in
//! order, and none accepted twice unless the killed instance's answer was lost.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::common::receiver::{Attempt, Mode, Receiver, WEBHOOK_SECRET, signature_valid};
use crate::common::{self, PAYMENT_SECRET};
use crate::harness::Deployment;

/// Buyers of the sale, as many as its stock (the last one sells it out: one `sale.sold_out`).
const BUYERS: usize = 45;
/// The pauses before each attempt: the first at once, the second 2 s later (the receiver refuses
/// every first attempt: the kill strikes inside those 2 s), then every 500 ms, 20 attempts in all
/// (none fails for good here).
fn schedule() -> String {
    let mut pauses = vec!["0s", "2s"];
    pauses.resize(20, "500ms");
    pauses.join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_the_purchases_and_the_payments_loses_no_order_event() {
    sigkill_between_purchases_and_payments(&common::redis_url()).await;
}

/// The same on the Redis Cluster (the purchases, releases and the worker's stream in the sale's slot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_the_purchases_and_the_payments_loses_no_order_event_on_the_cluster() {
    sigkill_between_purchases_and_payments(&common::cluster().url()).await;
}

/// What became of an order after the restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Paid,
    Cancelled,
    Expired,
}

impl Fate {
    fn of(i: usize) -> Self {
        [Fate::Paid, Fate::Cancelled, Fate::Expired][i % 3]
    }

    fn event(self) -> &'static str {
        match self {
            Fate::Paid => "order.paid",
            Fate::Cancelled => "order.cancelled",
            Fate::Expired => "order.expired",
        }
    }
}

/// An event of the outbox: its type, order and exact body.
#[derive(Debug)]
struct Stored {
    /// The outbox's order (its row id).
    row: i64,
    kind: String,
    order: Option<String>,
    body: String,
}

async fn sigkill_between_purchases_and_payments(redis_url: &str) {
    let receiver = Receiver::start(Mode::FailFirst).await;
    let schedule = schedule();
    let env = [
        ("SECKILL_PAYMENT_SECRET", PAYMENT_SECRET),
        ("SECKILL_WEBHOOK_URL", receiver.url.as_str()),
        ("SECKILL_WEBHOOK_SECRET", WEBHOOK_SECRET),
        ("SECKILL_WEBHOOK_SCHEDULE", schedule.as_str()),
        // A claim's lease is twice this plus 5 s: an attempt the kill cut off is due again 7 s later.
        ("SECKILL_WEBHOOK_TIMEOUT", "1s"),
        ("SECKILL_WORKER_CLAIM_TIMEOUT", "1s"),
    ];
    let mut deployment = Deployment::on_redis(redis_url, &env).await;
    let mut first = deployment.start().await;
    let sale = common::new_sale_id();
    // Longer than any loaded host takes for the restart and the payments; the rest's expiry is
    // brought forward in Postgres after them, where the sweeper finds due reservations.
    let seeded = deployment.seed(&sale, json!({"stock": BUYERS, "payment_window": "1h"})).await;
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());

    let users: Vec<String> = (0..BUYERS).map(|i| format!("buyer-{i}")).collect();
    let bought: Vec<(String, String)> = futures::stream::iter(users.iter())
        .map(|user| {
            let (deployment, sale) = (&deployment, &sale);
            async move {
                let response = deployment.buy(sale, user).await;
                assert_eq!(response.status(), 201, "{user}");
                let body: Value = response.json().await.unwrap();
                (user.clone(), body["order_id"].as_str().unwrap().to_owned())
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    // The kill strikes once the worker has stored every order (so every order.created is in the
    // outbox) and the dispatcher has sent some (refused: the next attempt is 2 s later).
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let created: i64 = sqlx::query_scalar("select count(*) from webhook_events where type = 'order.created'")
            .fetch_one(&deployment.pool)
            .await
            .unwrap();
        if created == BUYERS as i64 && !receiver.attempts().is_empty() {
            break;
        }
        assert!(Instant::now() < until, "{created} created events written, {} attempts", receiver.attempts().len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await;

    let delivered_at_kill: i64 = sqlx::query_scalar(
        "select count(*) from webhook_deliveries d join webhook_events e on e.id = d.event_id
         where e.type = 'order.created' and d.delivered_at is not null",
    )
    .fetch_one(&deployment.pool)
    .await
    .unwrap();
    assert!(delivered_at_kill < BUYERS as i64, "the kill must strike with created events undelivered");
    // The attempts the receiver recorded from the killed instance. (A request it had sent whole
    // may still be read after this; every attempt it made was a first one, refused, so no 2xx of
    // it can be counted as the new instance's.)
    let attempts_before_restart = receiver.attempts().len();

    // A consumer name of its own: it claims what the dead one left pending.
    let second = deployment.start_with(&[("SECKILL_WORKER_CONSUMER", "second-process")]).await;
    deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    let mut fates: BTreeMap<String, Fate> = BTreeMap::new();
    for (i, (user, order)) in bought.iter().enumerate() {
        let fate = Fate::of(i);
        match fate {
            Fate::Paid => {
                let response = deployment.pay(&sale, order, &format!("pay-{user}")).await;
                let body: Value = response.json().await.unwrap();
                assert_eq!((body["status"].as_str(), &body["late_payment"]), (Some("paid"), &json!(false)), "{body}");
            }
            Fate::Cancelled => assert_eq!(deployment.cancel(&sale, user).await.status(), 200, "{user}"),
            Fate::Expired => {}
        }
        fates.insert(order.clone(), fate);
    }
    let expiring: Vec<uuid::Uuid> = fates
        .iter()
        .filter(|(_, fate)| matches!(fate, Fate::Expired))
        .map(|(order, _)| order.parse().unwrap())
        .collect();
    sqlx::query("update orders set pay_by = now() where order_id = any($1)")
        .bind(&expiring)
        .execute(&deployment.pool)
        .await
        .unwrap();
    let (_, standings) = deployment.assert_settled(&sale, Duration::from_secs(40)).await;
    let third = BUYERS as i64 / 3;
    assert_eq!((standings.paid, standings.cancelled, standings.expired), (third, third, third), "{standings:?}");

    // Every order's two events and the sale's sold-out, every delivery closed.
    let expected = 2 * BUYERS as i64 + 1;
    let events = settled_events(&deployment, expected).await;
    let attempts = receiver.attempts();
    let lost_answers = check_deliveries(&attempts, &events, attempts_before_restart);

    let mut by_order: BTreeMap<&str, Vec<(i64, &str)>> = BTreeMap::new();
    for event in events.values() {
        if let Some(order) = &event.order {
            by_order.entry(order).or_default().push((event.row, &event.kind));
        }
    }
    assert_eq!(by_order.len(), BUYERS, "an order of every buyer, no other");
    for (order, fate) in &fates {
        let mut written = by_order.get(order.as_str()).unwrap_or_else(|| panic!("no event of order {order}")).clone();
        written.sort_unstable();
        let kinds: Vec<&str> = written.into_iter().map(|(_, kind)| kind).collect();
        assert_eq!(kinds, ["order.created", fate.event()], "order {order}");
    }
    let sold_out = events.values().filter(|e| e.kind == "sale.sold_out").count();
    assert_eq!(sold_out, 1, "one sale.sold_out");
    drop(second);
    eprintln!(
        "figures webhooks sigkill ({redis_url}): orders={BUYERS} created_written_at_kill={BUYERS} created_delivered_at_kill={delivered_at_kill} attempts_before_restart={attempts_before_restart} events={} attempts={} lost_answers_resent={lost_answers}",
        events.len(),
        attempts.len()
    );
}

/// The outbox's events by `webhook-id` once `expected` are written and every delivery is closed
/// (within 40 s); none may have failed for good.
async fn settled_events(deployment: &Deployment, expected: i64) -> BTreeMap<String, Stored> {
    let until = Instant::now() + Duration::from_secs(40);
    loop {
        let (events, open, failed): (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from webhook_events),
                    (select count(*) from webhook_deliveries where delivered_at is null and failed_at is null),
                    (select count(*) from webhook_deliveries where failed_at is not null)",
        )
        .fetch_one(&deployment.pool)
        .await
        .unwrap();
        assert_eq!(failed, 0, "a delivery failed for good");
        assert!(events <= expected, "{events} events written, {expected} expected");
        if events == expected && open == 0 {
            break;
        }
        assert!(Instant::now() < until, "{events} of {expected} events written, {open} deliveries open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows: Vec<(i64, String, String, Option<uuid::Uuid>, String)> =
        sqlx::query_as("select id, event_id, type, order_id, body from webhook_events")
            .fetch_all(&deployment.pool)
            .await
            .unwrap();
    rows.into_iter()
        .map(|(row, id, kind, order, body)| (id, Stored { row, kind, order: order.map(|o| o.to_string()), body }))
        .collect()
}

/// Checks what the receiver saw against the outbox; returns how many events were accepted twice.
///
/// Each attempt carries its event's stored bytes and a valid signature; each event's first
/// attempt was refused (500) and a later one accepted (200). An event accepted twice is allowed
/// only as at-least-once allows it: a first acceptance before the restart (the killed instance
/// sent it and died before recording the 2xx) and one re-send by the new instance. Per order, no
/// attempt of a later event comes before the earlier one's first acceptance.
fn check_deliveries(attempts: &[Attempt], events: &BTreeMap<String, Stored>, before_restart: usize) -> usize {
    for attempt in attempts {
        let event = events.get(&attempt.id).unwrap_or_else(|| panic!("unknown webhook-id {}", attempt.id));
        assert_eq!(attempt.body, event.body, "every attempt of {} sends the stored bytes", attempt.id);
        assert!(signature_valid(WEBHOOK_SECRET, attempt), "signature of {attempt:?}");
    }
    let mut tries: HashMap<&str, Vec<(usize, u16)>> = HashMap::new();
    for (i, attempt) in attempts.iter().enumerate() {
        tries.entry(attempt.id.as_str()).or_default().push((i, attempt.answered));
    }
    let mut lost_answers = 0;
    let mut first_accepted: HashMap<&str, usize> = HashMap::new();
    for id in events.keys() {
        let tries = tries.get(id.as_str()).unwrap_or_else(|| panic!("{id} never attempted"));
        assert_eq!(tries[0].1, 500, "{id}: the first attempt is refused: {tries:?}");
        let accepted: Vec<usize> = tries.iter().filter(|(_, answer)| *answer == 200).map(|(i, _)| *i).collect();
        match accepted[..] {
            [] => panic!("{id} never accepted: {tries:?}"),
            [_] => {}
            [killed, resent] if killed < before_restart && resent >= before_restart => lost_answers += 1,
            _ => panic!("{id} accepted more than once without a lost answer to explain it: {tries:?}"),
        }
        first_accepted.insert(id, accepted[0]);
    }
    let mut by_order: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, event) in events {
        if let Some(order) = &event.order {
            by_order.entry(order).or_default().push(id);
        }
    }
    for ids in by_order.values_mut() {
        // One order's events in the outbox's order (the order the dispatcher keeps).
        ids.sort_by_key(|id| events[*id].row);
        for pair in ids.windows(2) {
            let later_first_try = tries[pair[1]][0].0;
            assert!(first_accepted[pair[0]] < later_first_try, "{} attempted before {} was accepted", pair[1], pair[0]);
        }
    }
    lost_answers
}
