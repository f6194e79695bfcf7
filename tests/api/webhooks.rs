//! Order events out (issue 42): every order's events reach a receiver that refuses each first
//! attempt or is down for a while, each retried with the same `webhook-id` and bytes, signed, one
//! order's events in order.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::common::receiver::{Attempt, Mode, Receiver, WEBHOOK_SECRET, signature_valid};
use crate::helpers::{TestApp, new_sale_id, spawn_app_with};

/// Webhooks to `url`, retried every 200 ms (`attempts` in all).
pub(crate) fn webhooks_to(config: &mut seckill::config::Config, url: &str, attempts: usize) {
    config.webhooks.webhook_url = vec![url.to_owned()];
    config.webhooks.webhook_secret = Some(WEBHOOK_SECRET.to_owned().into());
    config.webhooks.webhook_timeout = Duration::from_secs(2);
    let mut schedule = vec![Duration::ZERO];
    schedule.resize(attempts, Duration::from_millis(200));
    config.webhooks.webhook_schedule = seckill::config::Schedule(schedule);
}

async fn seed(app: &TestApp, stock: i64, window: &str) -> String {
    let sale = new_sale_id();
    let response = app.seed(&sale, json!({"stock": stock, "payment_window": window})).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    sale
}

async fn reserve(app: &TestApp, sale: &str, user: &str) -> String {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 201, "{user}");
    let body: Value = response.json().await.unwrap();
    body["order_id"].as_str().unwrap().to_owned()
}

/// Waits until Postgres holds `count` orders of the sale.
async fn stored(app: &TestApp, sale: &str, count: i64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let stored: i64 = sqlx::query_scalar("select count(*) from orders where sale_id = $1")
            .bind(sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
        if stored == count {
            return;
        }
        assert!(Instant::now() < until, "{stored} of {count} orders stored");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The outbox's events (message id -> (type, order id, body)), once `expected` are written and
/// every delivery is closed (within 30 s).
async fn settled_events(app: &TestApp, expected: i64) -> BTreeMap<String, (String, Option<String>, String)> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let (events, open): (i64, i64) = sqlx::query_as(
            "select (select count(*) from webhook_events),
                    (select count(*) from webhook_deliveries where delivered_at is null)",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if events == expected && open == 0 {
            break;
        }
        assert!(events <= expected, "{events} events written, {expected} expected");
        assert!(Instant::now() < until, "{events} of {expected} events written, {open} deliveries open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows: Vec<(String, String, Option<uuid::Uuid>, String)> =
        sqlx::query_as("select event_id, type, order_id, body from webhook_events order by id")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    rows.into_iter().map(|(id, kind, order, body)| (id, (kind, order.map(|o| o.to_string()), body))).collect()
}

/// What every test checks: each event's attempts carry its stored bytes and a valid signature, it
/// was answered 200 exactly once, and one order's events were delivered in the order written.
fn check_deliveries(attempts: &[Attempt], events: &BTreeMap<String, (String, Option<String>, String)>) {
    for attempt in attempts {
        let (_, _, body) = events.get(&attempt.id).unwrap_or_else(|| panic!("unknown webhook-id {}", attempt.id));
        assert_eq!(&attempt.body, body, "every attempt sends the stored bytes");
        assert!(signature_valid(WEBHOOK_SECRET, attempt), "signature of {attempt:?}");
    }
    for id in events.keys() {
        let accepted = attempts.iter().filter(|a| &a.id == id && a.answered == 200).count();
        assert_eq!(accepted, 1, "{id} accepted once");
    }
    // Per order: the order's events are written in order (created first); no attempt of a later
    // event comes before the earlier one was accepted.
    let mut accepted_at: HashMap<&str, usize> = HashMap::new();
    for (i, a) in attempts.iter().enumerate() {
        if a.answered == 200 {
            accepted_at.insert(a.id.as_str(), i);
        }
    }
    let mut by_order: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (id, (_, order, _)) in events {
        if let Some(order) = order {
            by_order.entry(order).or_default().push(id);
        }
    }
    let rank: HashMap<&str, usize> = events.keys().enumerate().map(|(i, id)| (id.as_str(), i)).collect();
    for ids in by_order.values_mut() {
        ids.sort_by_key(|id| rank[id]);
        for pair in ids.windows(2) {
            let first_try = attempts.iter().position(|a| a.id == pair[1]).unwrap();
            assert!(accepted_at[pair[0]] < first_try, "{} attempted before {} was delivered", pair[1], pair[0]);
        }
    }
}

#[tokio::test]
async fn every_order_event_arrives_signed_after_a_500_with_the_same_id_and_bytes() {
    let receiver = Receiver::start(Mode::FailFirst).await;
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 8), true).await;
    let open = seed(&app, 4, "1h").await;
    // Reservations that expire once brought forward in Postgres (below), not while a loaded host
    // is still buying.
    let short = seed(&app, 2, "1h").await;
    let plan = [("u0", "order.paid"), ("u1", "order.paid"), ("u2", "order.cancelled"), ("u3", "order.cancelled")];
    let mut orders = vec![];
    for (user, _) in plan {
        orders.push(reserve(&app, &open, user).await);
    }
    // Every unit sold (one sale.sold_out) before any comes back.
    stored(&app, &open, 4).await;
    let mut expected_outcome = BTreeMap::new();
    for ((user, outcome), order) in plan.into_iter().zip(orders) {
        if outcome == "order.paid" {
            let response = app.pay(&open, &order, &format!("pay-{user}")).await;
            assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
        } else {
            assert_eq!(app.cancel(&open, user).await.status(), 200);
        }
        expected_outcome.insert(order, outcome);
    }
    for user in ["u4", "u5"] {
        expected_outcome.insert(reserve(&app, &short, user).await, "order.expired");
    }
    stored(&app, &short, 2).await;
    sqlx::query("update orders set pay_by = now() where sale_id = $1").bind(&short).execute(&app.pool).await.unwrap();

    // 6 created, 6 outcomes, and each sale's sold_out once: 14.
    let events = settled_events(&app, 14).await;
    let attempts = receiver.attempts();
    check_deliveries(&attempts, &events);
    for id in events.keys() {
        let tries: Vec<u16> = attempts.iter().filter(|a| &a.id == id).map(|a| a.answered).collect();
        assert_eq!(tries, [500, 200], "{id}: refused once, then delivered");
    }
    for (order, outcome) in &expected_outcome {
        let kinds: Vec<&str> =
            events.values().filter(|(_, o, _)| o.as_deref() == Some(order)).map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(kinds, ["order.created", *outcome], "order {order}");
    }
    let sold_out: Vec<Value> = events
        .values()
        .filter(|(k, _, _)| k == "sale.sold_out")
        .map(|(_, _, body)| serde_json::from_str(body).unwrap())
        .collect();
    let mut sales: Vec<&str> = sold_out.iter().map(|b| b["data"]["sale_id"].as_str().unwrap()).collect();
    sales.sort_unstable();
    let mut seeded = [open.as_str(), short.as_str()];
    seeded.sort_unstable();
    assert_eq!(sales, seeded);
    let created: Value = serde_json::from_str(
        &events.values().find(|(k, _, _)| k == "order.created").map(|(_, _, b)| b.clone()).unwrap(),
    )
    .unwrap();
    assert_eq!(created["data"]["status"], "reserved");
    assert_eq!(created["data"]["quantity"], 1);
    assert!(created["data"]["pay_by"].is_string() && created["timestamp"].is_string(), "{created}");
}

#[tokio::test]
async fn a_receiver_down_for_a_while_then_back_gets_every_event_in_order() {
    let receiver = Receiver::start(Mode::Down).await;
    // Attempts enough (40 s of them) that no event fails for good while a loaded host is slow
    // to get through the purchases below.
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 200), true).await;
    let sale = seed(&app, 10, "1h").await;
    for i in 0..6 {
        let order = reserve(&app, &sale, &format!("buyer{i}")).await;
        if i % 2 == 0 {
            assert_eq!(app.pay(&sale, &order, &format!("pay-{i}")).await.status(), 200);
        }
    }
    // Down until every created event was refused at least twice.
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let retried: i64 = sqlx::query_scalar(
            "select count(*) from webhook_deliveries d join webhook_events e on e.id = d.event_id
             where e.type = 'order.created' and d.attempts >= 2",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if retried == 6 {
            break;
        }
        assert!(Instant::now() < until, "only {retried} created events retried");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let paid_tried = receiver.attempts().iter().filter(|a| a.body.contains("order.paid")).count();
    assert_eq!(paid_tried, 0, "no order.paid is attempted before its order.created is delivered");
    receiver.set_mode(Mode::Accept);
    let events = settled_events(&app, 9).await;
    let attempts = receiver.attempts();
    check_deliveries(&attempts, &events);
    let metrics = reqwest::get(app.url("/metrics")).await.unwrap().text().await.unwrap();
    assert!(metrics.contains("seckill_webhook_deliveries_total{outcome=\"delivered\"} 9"), "{metrics}");
}

/// An admin route's answer: its status and JSON body.
async fn admin(app: &TestApp, method: reqwest::Method, path: &str) -> (u16, Value) {
    let response =
        app.client.request(method, app.url(path)).bearer_auth(crate::common::ADMIN_TOKEN).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn failed_deliveries_are_listed_and_sent_again_on_demand() {
    let receiver = Receiver::start(Mode::Down).await;
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 2), true).await;
    let sale = seed(&app, 5, "1h").await;
    let order = reserve(&app, &sale, "late-receiver").await;
    let until = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let (status, listed) = admin(&app, reqwest::Method::GET, "/admin/events?status=failed").await;
        assert_eq!(status, 200, "{listed}");
        if listed["events"].as_array().unwrap().len() == 1 {
            break listed["events"][0].clone();
        }
        assert!(Instant::now() < until, "no failed delivery listed: {listed}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!((failed["type"].as_str(), failed["order_id"].as_str()), (Some("order.created"), Some(order.as_str())));
    assert_eq!(failed["deliveries"][0]["status"], "failed");
    assert_eq!(failed["deliveries"][0]["attempts"], 2);
    assert_eq!(receiver.attempts().len(), 2, "two attempts in all, then failed");
    // The live page's overview says it too.
    let (_, overview) = admin(&app, reqwest::Method::GET, "/admin/sales").await;
    assert_eq!((overview["webhooks"]["failed"].as_i64(), overview["webhooks"]["open"].as_i64()), (Some(1), Some(0)));

    receiver.set_mode(Mode::Accept);
    let id = failed["id"].as_i64().unwrap();
    let (status, retried) = admin(&app, reqwest::Method::POST, &format!("/admin/events/{id}/retry")).await;
    assert_eq!((status, retried["reopened"].as_u64()), (200, Some(1)), "{retried}");
    let events = settled_events(&app, 1).await;
    check_deliveries(&receiver.attempts(), &events);
    let (_, all) = admin(&app, reqwest::Method::GET, &format!("/admin/events?after={}", id - 1)).await;
    assert_eq!(
        (all["events"][0]["deliveries"][0]["status"].as_str(), all["next_after"].as_i64()),
        (Some("delivered"), Some(id))
    );
    let (status, unknown) = admin(&app, reqwest::Method::POST, "/admin/events/999999/retry").await;
    assert_eq!((status, unknown["error"].as_str()), (404, Some("unknown_event")));
}
