//! Payment windows: a win is a reservation, paid by its deadline, cancelled, or expired with its
//! unit back in the stock exactly once (issue 26).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use tokio::time::Instant;

use crate::common::{PAYMENT_SECRET, Standings};
use crate::helpers::{TestApp, assert_error, new_sale_id, spawn_app, spawn_app_with, spawn_instance_of};

/// Seeds a sale open now with `stock` and a payment window.
pub(crate) async fn seed_window(app: &TestApp, stock: i64, window: &str) -> String {
    let sale = new_sale_id();
    let response = app.seed(&sale, json!({"stock": stock, "payment_window": window})).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    sale
}

/// Buys, expecting a reservation: its order id and deadline.
pub(crate) async fn reserve(app: &TestApp, sale: &str, user: &str) -> (String, OffsetDateTime) {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 201, "{user}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "reserved", "{body}");
    let pay_by = OffsetDateTime::parse(body["pay_by"].as_str().unwrap(), &Rfc3339).unwrap();
    (body["order_id"].as_str().unwrap().to_owned(), pay_by)
}

/// An admin route's 200 answer.
async fn admin(app: &TestApp, method: reqwest::Method, path: &str) -> Value {
    let response =
        app.client.request(method, app.url(path)).bearer_auth(crate::common::ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    response.json().await.unwrap()
}

async fn order_of(app: &TestApp, sale: &str, user: &str) -> Value {
    let url = app.url(&format!("/sales/{sale}/order"));
    app.client.get(url).query(&[("user_id", user)]).send().await.unwrap().json().await.unwrap()
}

/// Waits until `user`'s order reads `status`.
async fn wait_for_status(app: &TestApp, sale: &str, user: &str, status: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let order = order_of(app, sale, user).await;
        if order["status"] == status {
            return order;
        }
        assert!(Instant::now() < until, "{user}'s order never became {status}: {order}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_win_is_a_reservation_with_a_deadline_and_a_sale_without_a_window_is_unchanged() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 3, "30s").await;
    let before = OffsetDateTime::now_utc();
    let (order_id, pay_by) = reserve(&app, &sale, "alice").await;
    let after = OffsetDateTime::now_utc();
    // The window from the purchase, which ran between the two readings (and a clock's ms).
    let ms = time::Duration::milliseconds(1);
    assert!(
        pay_by >= before + time::Duration::seconds(30) - ms && pay_by <= after + time::Duration::seconds(30) + ms,
        "{pay_by} not 30 s after {before}..{after}"
    );
    let order = wait_for_status(&app, &sale, "alice", "reserved").await;
    assert_eq!(order["order_id"], order_id.as_str());
    assert_eq!(OffsetDateTime::parse(order["pay_by"].as_str().unwrap(), &Rfc3339).unwrap(), pay_by);
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.payment_window_ms, status.reserved, status.paid), (Some(30_000), Some(1), Some(0)));

    let plain = new_sale_id();
    app.seed_stock(&plain, 1).await;
    let body: Value = app.buy(&plain, "alice").await.json().await.unwrap();
    assert!(body.get("status").is_none() && body.get("pay_by").is_none(), "{body}");
    assert_eq!(wait_for_status(&app, &plain, "alice", "confirmed").await.get("pay_by"), None);
    assert_error(app.cancel(&plain, "alice").await, 409, "not_reserved").await;
    assert_eq!(app.status(&plain).await.payment_window_ms, None);
}

#[tokio::test]
async fn the_default_window_applies_and_windows_are_refused_with_shards_or_out_of_bounds() {
    let app = spawn_app_with(|c| c.payments.payment_window = Some(Duration::from_secs(60)), true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(app.status(&sale).await.payment_window_ms, Some(60_000));
    for (body, why) in [
        (json!({"stock": 4, "shards": 2, "payment_window": "1m"}), "shard"),
        (json!({"stock": 4, "payment_window": "500ms"}), "between"),
        (json!({"stock": 4, "payment_window": "8d"}), "between"),
        (json!({"stock": 4, "payment_window": "soon"}), "duration"),
        (json!({"stock": 4, "payment_window": 15}), "string"),
    ] {
        let response = app.seed(&new_sale_id(), body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let text = response.text().await.unwrap();
        assert!(text.contains("invalid_request") && text.contains(why), "{body}: {text}");
    }
    // A sharded sale has no window, even under the default.
    let sharded = new_sale_id();
    assert_eq!(app.seed(&sharded, json!({"stock": 4, "shards": 2})).await.status(), 200);
    assert_eq!(app.status(&sharded).await.payment_window_ms, None);
}

#[tokio::test]
async fn a_payment_in_time_pays_a_repeat_changes_nothing_and_a_second_payment_is_to_refund() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 2, "30s").await;
    let (order_id, _) = reserve(&app, &sale, "alice").await;

    let paid = app.pay(&sale, &order_id, "evt-1").await;
    assert_eq!(paid.status(), 200);
    let paid: Value = paid.json().await.unwrap();
    assert_eq!(paid, json!({"order_id": order_id, "status": "paid", "late_payment": false}));
    let again: Value = app.pay(&sale, &order_id, "evt-1").await.json().await.unwrap();
    assert_eq!(again, paid, "the same event, the same answer");
    let second: Value = app.pay(&sale, &order_id, "evt-2").await.json().await.unwrap();
    assert_eq!(second, json!({"order_id": order_id, "status": "paid", "late_payment": true}));
    assert_error(app.cancel(&sale, "alice").await, 409, "not_reserved").await;

    assert_eq!(wait_for_status(&app, &sale, "alice", "paid").await["order_id"], order_id.as_str());
    let status = app.status(&sale).await;
    assert_eq!((status.paid, status.reserved, status.late_payments), (Some(1), Some(0), Some(1)));
    let refunds = admin(&app, reqwest::Method::GET, &format!("/admin/late-payments?sale_id={sale}")).await;
    let refunds = refunds.as_array().unwrap();
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!((refunds[0]["event_id"].as_str(), refunds[0]["outcome"].as_str()), (Some("evt-2"), Some("duplicate")));
    // An event id names one order for good.
    let (bob_order, _) = reserve(&app, &sale, "bob").await;
    assert_error(app.pay(&sale, &bob_order, "evt-1").await, 409, "event_reused").await;
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("seckill_late_payments_total{outcome=\"duplicate\"} 1"), "{metrics}");
    assert!(metrics.contains("seckill_reservations_total{outcome=\"paid\"} 1"), "{metrics}");
}

#[tokio::test]
async fn forged_stale_malformed_and_misdirected_events_are_refused_and_change_nothing() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 1, "30s").await;
    let (order_id, _) = reserve(&app, &sale, "alice").await;
    let body = json!({"id": "evt-x", "type": "order.paid", "sale_id": sale, "order_id": order_id}).to_string();
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let post = |signature: Option<String>, body: String, content_type: &'static str| {
        let mut request = app.client.post(app.url("/payments/events")).header("content-type", content_type).body(body);
        if let Some(signature) = signature {
            request = request.header("Seckill-Signature", signature);
        }
        request.send()
    };
    let sign = |body: &str, secret: &str, at: i64| {
        seckill::reservations::signature::sign(body.as_bytes(), secret.as_bytes(), at)
    };

    assert_error(post(None, body.clone(), "application/json").await.unwrap(), 401, "invalid_signature").await;
    let forged = sign(&body, "another-secret-of-at-least-32-bytes!!", now);
    assert_error(post(Some(forged), body.clone(), "application/json").await.unwrap(), 401, "invalid_signature").await;
    let stale = sign(&body, PAYMENT_SECRET, now - 301);
    assert_error(post(Some(stale), body.clone(), "application/json").await.unwrap(), 401, "invalid_signature").await;
    // Issue 39: 2^63 s ago, where `now - t` overflowed.
    let ancient = sign(&body, PAYMENT_SECRET, now - (1 << 62) - (1 << 62));
    assert_error(post(Some(ancient), body.clone(), "application/json").await.unwrap(), 401, "invalid_signature").await;
    let tampered = body.replace("evt-x", "evt-y");
    let signed = sign(&body, PAYMENT_SECRET, now);
    assert_error(post(Some(signed.clone()), tampered, "application/json").await.unwrap(), 401, "invalid_signature")
        .await;
    assert_error(post(Some("t=abc".into()), body.clone(), "application/json").await.unwrap(), 401, "invalid_signature")
        .await;
    assert_error(post(Some(signed.clone()), body.clone(), "text/plain").await.unwrap(), 415, "unsupported_media_type")
        .await;
    let huge = format!("{{\"pad\": \"{}\"}}", "x".repeat(5000));
    assert_error(
        post(Some(sign(&huge, PAYMENT_SECRET, now)), huge, "application/json").await.unwrap(),
        413,
        "payload_too_large",
    )
    .await;
    for bad in [
        "not json".to_owned(),
        json!({"id": "e", "type": "order.refunded", "sale_id": sale, "order_id": order_id}).to_string(),
        json!({"id": "e", "type": "order.paid", "sale_id": sale, "order_id": "nope"}).to_string(),
        json!({"id": "", "type": "order.paid", "sale_id": sale, "order_id": order_id}).to_string(),
        json!({"id": "e", "type": "order.paid", "sale_id": "a b", "order_id": order_id}).to_string(),
        json!({"id": "e", "type": "order.paid", "sale_id": sale, "order_id": order_id, "extra": 1}).to_string(),
        // Issue 39: serde reads a struct from a sequence of its fields; an event is an object.
        json!(["e", "order.paid", sale, order_id]).to_string(),
    ] {
        assert_error(app.payment_event(bad.clone(), None).await, 400, "invalid_request").await;
    }
    let unknown = json!({"id": "e", "type": "order.paid", "sale_id": sale, "order_id": uuid::Uuid::now_v7()});
    assert_error(app.payment_event(unknown.to_string(), None).await, 404, "unknown_order").await;
    let elsewhere = json!({"id": "e", "type": "order.paid", "sale_id": new_sale_id(), "order_id": order_id});
    assert_error(app.payment_event(elsewhere.to_string(), None).await, 404, "unknown_order").await;

    assert_eq!(wait_for_status(&app, &sale, "alice", "reserved").await["order_id"], order_id.as_str());
    // The signed event, replayed within the tolerance, applies once.
    for _ in 0..3 {
        let replay = post(Some(signed.clone()), body.clone(), "application/json").await.unwrap();
        assert_eq!(replay.status(), 200);
    }
    let count: i64 = sqlx::query_scalar("select count(*) from payment_events").fetch_one(&app.pool).await.unwrap();
    assert_eq!(count, 1);
}

#[tokio::test]
async fn payments_are_refused_without_a_secret() {
    let app = spawn_app_with(|c| c.payments.payment_secret = None, true).await;
    let sale = seed_window(&app, 1, "30s").await;
    let (order_id, _) = reserve(&app, &sale, "alice").await;
    assert_error(app.pay(&sale, &order_id, "evt").await, 503, "payments_disabled").await;
}

/// A buyer's cancel in a sale without a payment window: the order is no reservation, 409
/// `not_reserved`, while it is still queued (no worker here) as once it is stored; never 404
/// `no_order` for an order the buyer's own order page shows.
#[tokio::test]
async fn a_queued_order_that_is_no_reservation_is_not_cancelled_and_not_missing() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 2).await;
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);
    assert_eq!(order_of(&app, &sale, "alice").await["status"], "queued");
    assert_error(app.cancel(&sale, "alice").await, 409, "not_reserved").await;
    assert_eq!(order_of(&app, &sale, "alice").await["status"], "queued", "nothing changed");
    assert_error(app.cancel(&sale, "bob").await, 404, "no_order").await;
}

#[tokio::test]
async fn a_cancel_gives_the_unit_to_the_next_buyer_on_every_instance_and_the_canceller_cannot_buy_again() {
    // Sold-out flags that outlive the test: only the restock event can lift the other's.
    let app = spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_secs(3600), true).await;
    let other = spawn_instance_of(&app).await;
    let sale = seed_window(&app, 1, "30s").await;
    let (order_id, _) = reserve(&app, &sale, "alice").await;
    // Both instances learn the sale is sold out (their in-process flags).
    assert_error(app.buy(&sale, "bob").await, 410, "sold_out").await;
    assert_error(other.buy(&sale, "bob").await, 410, "sold_out").await;

    assert_error(app.cancel(&sale, "carol").await, 404, "no_order").await;
    let cancelled = app.cancel(&sale, "alice").await;
    assert_eq!(cancelled.status(), 200);
    let cancelled: Value = cancelled.json().await.unwrap();
    assert_eq!(cancelled, json!({"status": "cancelled", "order_id": order_id}));
    assert_error(app.cancel(&sale, "alice").await, 409, "not_reserved").await;

    // The other instance sells the unit again once the restock event reached it.
    let started = Instant::now();
    let reopened = loop {
        let response = other.buy(&sale, "bob").await;
        if response.status() == 201 {
            break started.elapsed();
        }
        assert_eq!(response.status(), 410);
        assert!(started.elapsed() < Duration::from_secs(20), "the other instance never sold again");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    eprintln!("figures reopen-on-other-instance: {} ms", reopened.as_millis());
    let again = app.buy(&sale, "alice").await;
    assert_error(again, 409, "already_purchased").await;
    assert_eq!(wait_for_status(&app, &sale, "alice", "cancelled").await["order_id"], order_id.as_str());
    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.released, status.cancelled), (0, 1, Some(1)));
}

#[tokio::test]
async fn an_event_or_a_cancel_that_overtakes_the_worker_is_applied_to_the_queued_order() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = seed_window(&app, 2, "30s").await;
    let (alice_order, _) = reserve(&app, &sale, "alice").await;
    let (_, _) = reserve(&app, &sale, "bob").await;
    assert_eq!(app.status(&sale).await.queued, 2, "no worker: both orders are queued");

    let paid: Value = app.pay(&sale, &alice_order, "evt-early").await.json().await.unwrap();
    assert_eq!(paid["status"], "paid");
    assert_eq!(app.cancel(&sale, "bob").await.status(), 200);
    // The worker's own insert later is a redelivery: nothing changes.
    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    let until = Instant::now() + Duration::from_secs(10);
    while app.status(&sale).await.queued > 0 {
        worker.step().await.unwrap();
        assert!(Instant::now() < until, "the queue did not drain");
    }
    let standings = app.standings(&sale).await;
    assert_eq!(
        standings,
        Standings { paid: 1, cancelled: 1, released: 1, live_units: 1, released_units: 1, ..Default::default() }
    );
    app.assert_settled(&sale, Duration::from_secs(5)).await;
}

/// A repeat purchase's 409 body (`already_purchased`).
async fn repeat(app: &TestApp, sale: &str, user: &str) -> Value {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 409, "{user} buys again");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "already_purchased", "{body}");
    body
}

/// `user`'s order as both the order read and a repeat's 409 name it, on `app`: its status, and
/// the order id and deadline they agree on.
async fn told(app: &TestApp, sale: &str, user: &str) -> (String, Value, Value) {
    let (order, again) = (order_of(app, sale, user).await, repeat(app, sale, user).await);
    assert_eq!(order["status"], again["status"], "the read and the 409 agree: {order} / {again}");
    assert_eq!(order["order_id"], again["order_id"], "{order} / {again}");
    (order["status"].as_str().unwrap().to_owned(), order["order_id"].clone(), order["pay_by"].clone())
}

/// Read-your-writes (issue 39): with no worker draining the queue, right after the 201, the
/// payment or the cancel answered, the order read on either instance says what the buyer did
/// (`reserved` with its `pay_by`, `paid`, `cancelled`), and a repeat's 409 names the same state.
/// Before, both said `queued` until the worker stored the order, and the 409 after a cancel said
/// `confirmed` once it had.
#[tokio::test]
async fn the_order_read_and_the_409_say_at_once_what_the_buyer_did_while_the_worker_lags() {
    let app = spawn_app_with(|_| {}, false).await;
    let other = spawn_instance_of(&app).await;
    let sale = seed_window(&app, 3, "30s").await;
    let (alice, alice_pay_by) = reserve(&app, &sale, "alice").await;
    let (bob, _) = reserve(&app, &sale, "bob").await;
    let (carol, carol_pay_by) = reserve(&app, &sale, "carol").await;
    let pay_by = |at: OffsetDateTime| Value::String(at.format(&Rfc3339).unwrap());
    for instance in [&app, &other] {
        assert_eq!(told(instance, &sale, "alice").await, ("reserved".into(), json!(alice), pay_by(alice_pay_by)));
    }

    assert_eq!(app.pay(&sale, &alice, "evt-ryw").await.json::<Value>().await.unwrap()["status"], "paid");
    assert_eq!(app.cancel(&sale, "bob").await.status(), 200);
    assert_eq!(app.status(&sale).await.queued, 3, "no worker: every order is still queued");
    for instance in [&app, &other] {
        assert_eq!(told(instance, &sale, "alice").await.0, "paid");
        assert_eq!(told(instance, &sale, "bob").await.0, "cancelled");
        assert_eq!(told(instance, &sale, "carol").await, ("reserved".into(), json!(carol), pay_by(carol_pay_by)));
    }

    // Stored by the worker (Redis then calls each order confirmed): the same answers.
    let mut worker = app.manual_worker("w", Duration::from_secs(60));
    let until = Instant::now() + Duration::from_secs(10);
    while app.status(&sale).await.queued > 0 {
        worker.step().await.unwrap();
        assert!(Instant::now() < until, "the queue did not drain");
    }
    for instance in [&app, &other] {
        assert_eq!(told(instance, &sale, "alice").await.0, "paid");
        let (status, order_id, _) = told(instance, &sale, "bob").await;
        assert_eq!((status.as_str(), order_id), ("cancelled", json!(bob)));
        assert_eq!(told(instance, &sale, "carol").await.0, "reserved");
    }
}

/// An expired reservation's buyer is told `expired` by the read and by the 409 alike; a sale
/// without a window still says `queued` or `confirmed` in both.
#[tokio::test]
async fn an_expired_buyer_and_a_buyer_in_a_sale_without_a_window_are_told_alike_by_the_read_and_the_409() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 1, "1s").await;
    reserve(&app, &sale, "dave").await;
    wait_for_status(&app, &sale, "dave", "expired").await;
    assert_eq!(told(&app, &sale, "dave").await.0, "expired");

    let plain = new_sale_id();
    app.seed_stock(&plain, 1).await;
    assert_eq!(app.buy(&plain, "erin").await.status(), 201);
    app.wait_for_drain(&plain).await;
    assert_eq!(told(&app, &plain, "erin").await.0, "confirmed");
}

/// A release owed (the process died between the cancel's commit and the release, or Redis
/// failed) is re-driven by the sweeper; repeated releases, from two sweepers or the repair,
/// return the unit once.
#[tokio::test]
async fn an_owed_release_is_re_driven_and_repeated_releases_return_one_unit() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 3, "30s").await;
    for user in ["a", "b", "c"] {
        reserve(&app, &sale, user).await;
    }
    app.wait_for_drain(&sale).await;
    // What a crash right after the transition's commit leaves: cancelled, its unit not back.
    sqlx::query(
        "update orders set status = 'cancelled', resolved_at = now() - interval '1 minute', resolved_by = 'buyer'
         where sale_id = $1 and user_id in ('a', 'b')",
    )
    .bind(&sale)
    .execute(&app.pool)
    .await
    .unwrap();
    let (status, standings) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, standings.cancelled, standings.reserved), (2, 2, 1), "{status:?}");

    // Released again, by hand and by a repair: the gate lets no unit in twice.
    let ids: Vec<uuid::Uuid> =
        sqlx::query_scalar("select order_id from orders where sale_id = $1 and status = 'cancelled'")
            .bind(&sale)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let releases =
        futures::future::join_all((0..8).map(|_| seckill::reservations::release(&app.store, &app.pool, &sale, &ids)))
            .await;
    assert!(releases.iter().all(|r| matches!(r, Ok(0))), "{releases:?}");
    let report = admin(&app, reqwest::Method::POST, &format!("/admin/sales/{sale}/reconcile")).await;
    assert_eq!((report["units_released"].as_u64(), report["consistent"].as_bool()), (Some(0), Some(true)), "{report}");
    assert_eq!(app.status(&sale).await.stock_left, 2);
}

/// Releases Redis keeps refusing (owed to a sale it does not know) are more than the sweeper's
/// page of 1,000 and older than every other: a release owed after them is still re-driven, since
/// the sweeper walks the owed releases a page a round rather than reading the oldest page again.
#[tokio::test]
async fn owed_releases_redis_keeps_refusing_hold_back_none_of_the_others() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 1, "30s").await;
    reserve(&app, &sale, "a").await;
    app.wait_for_drain(&sale).await;
    // 1,001 cancelled orders of a sale Redis does not know, owed for two minutes: copies of a's
    // row with another id, sale and buyer.
    let ghost = new_sale_id();
    let copied = sqlx::query(
        "insert into orders
         select (jsonb_populate_record(o, jsonb_build_object(
             'order_id', gen_random_uuid(), 'sale_id', $2::text, 'user_id', 'ghost-' || g,
             'status', 'cancelled', 'resolved_by', 'buyer', 'resolved_at', now() - interval '2 minutes'))).*
         from orders o, generate_series(1, 1001) g where o.sale_id = $1",
    )
    .bind(&sale)
    .bind(&ghost)
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(copied.rows_affected(), 1001);
    // a's cancel, its release lost (as after a crash): owed for a minute, behind every ghost.
    sqlx::query(
        "update orders set status = 'cancelled', resolved_at = now() - interval '1 minute', resolved_by = 'buyer'
         where sale_id = $1 and user_id = 'a'",
    )
    .bind(&sale)
    .execute(&app.pool)
    .await
    .unwrap();
    let (status, standings) = app.assert_released(&sale, Duration::from_secs(30)).await;
    assert_eq!((status.stock_left, standings.cancelled), (1, 1), "{status:?}");
    let still_owed: i64 = sqlx::query_scalar("select count(*) from orders where sale_id = $1 and restocked_at is null")
        .bind(&ghost)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(still_owed, 1001, "Redis knows no ghost sale: nothing of it was given back");
}

#[tokio::test]
async fn retirement_waits_until_no_reservation_is_open() {
    let app = spawn_app().await;
    // A window no loaded host outlasts before the refusal below; the expiry is then brought
    // forward in Postgres, where the sweeper finds due reservations.
    let sale = seed_window(&app, 1, "1h").await;
    reserve(&app, &sale, "alice").await;
    app.wait_for_drain(&sale).await;
    let refused = app
        .client
        .delete(app.url(&format!("/admin/sales/{sale}")))
        .bearer_auth(crate::common::ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 409);
    let body: Value = refused.json().await.unwrap();
    assert!(body["reasons"].as_array().unwrap().contains(&json!("reserved")), "{body}");
    sqlx::query("update orders set pay_by = now() where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();
    // Expired, the unit is back: the sale is open again, not retirable for that reason.
    app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!(wait_for_status(&app, &sale, "alice", "expired").await["status"], "expired");
}

/// The expiry storm: 10,000 reservations with a 2 s window, none paid. Every unit comes back
/// once, is bought again by new buyers, comes back again; the expiry lag's p99 is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expiry_storm_returns_every_unit_once_and_on_time() {
    let app = spawn_app_with(|c| c.worker_batch = 2000, true).await;
    const STOCK: i64 = 10_000;
    let sale = seed_window(&app, STOCK, "2s").await;
    for wave in ["first", "second"] {
        let app = &app;
        let sale = &sale;
        let created = futures::stream::iter(0..STOCK)
            .map(|i| async move { app.buy(sale, &format!("{wave}-{i}")).await.status().as_u16() })
            .buffer_unordered(64)
            .fold(BTreeMap::<u16, i64>::new(), |mut seen, status| async move {
                *seen.entry(status).or_default() += 1;
                seen
            })
            .await;
        assert_eq!(created.get(&201).copied(), Some(STOCK), "{wave} wave: {created:?}");
        let (status, standings) = app.assert_settled(sale, Duration::from_secs(60)).await;
        assert_eq!(status.stock_left, STOCK, "{wave} wave: every unit back");
        assert_eq!(standings.expired, status.released);
    }
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((standings.expired, status.released, status.sold), (2 * STOCK, 2 * STOCK, 2 * STOCK));
    let (p50, p99, max): (f64, f64, f64) = sqlx::query_as(
        "select percentile_cont(0.5) within group (order by lag), percentile_cont(0.99) within group (order by lag), max(lag)
         from (select extract(epoch from resolved_at - pay_by)::float8 as lag from orders where sale_id = $1) l",
    )
    .bind(&sale)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    eprintln!(
        "figures expiry-storm: reservations={} lag_p50_ms={:.0} lag_p99_ms={:.0} lag_max_ms={:.0}",
        2 * STOCK,
        p50 * 1e3,
        p99 * 1e3,
        max * 1e3
    );
    assert!(p50 >= 0.0, "nothing expired before its deadline");
    // Not a speed target: a design that polls minutes apart fails it, any sound one passes.
    assert!(p99 < 60.0, "expiry lag p99 {p99:.2} s");
}

/// Payments racing the deadline: 1,000 orders, each paid within ±50 ms of its `pay_by`. Each
/// order ends in exactly one state; the units that came back are the expired ones; the late
/// payments are exactly the events that lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn payments_against_the_deadline_each_end_in_exactly_one_state() {
    // The payment system is one client sending a thousand events at once.
    let app = Arc::new(
        spawn_app_with(
            |c| {
                c.edge.max_connections_per_client = 0;
                c.database_max_connections = 32;
            },
            true,
        )
        .await,
    );
    const ORDERS: i64 = 1_000;
    let sale = seed_window(&app, ORDERS, "2s").await;
    let reservations: Vec<(String, OffsetDateTime)> = futures::stream::iter(0..ORDERS)
        .map(|i| {
            let (app, sale) = (app.clone(), sale.clone());
            async move {
                // One purchase every 4 ms: the deadlines, hence the events, spread over 4 s
                // instead of one burst the (debug) server would answer late.
                tokio::time::sleep(Duration::from_millis(4 * i as u64)).await;
                reserve(&app, &sale, &format!("payer-{i}")).await
            }
        })
        .buffer_unordered(ORDERS as usize)
        .collect()
        .await;
    let answers: Vec<(String, Value)> =
        futures::future::join_all(reservations.into_iter().enumerate().map(|(i, (order, pay_by))| {
            let (app, sale) = (app.clone(), sale.clone());
            async move {
                let offset = time::Duration::milliseconds((i as i64 * 37) % 101 - 50);
                let wait = (pay_by + offset) - OffsetDateTime::now_utc();
                tokio::time::sleep(Duration::try_from(wait).unwrap_or_default()).await;
                // As a payment system does: a 503 (nothing done) is sent again, same event id,
                // until an answer (a loaded host's pool may stay busy for seconds).
                let until = tokio::time::Instant::now() + Duration::from_secs(60);
                while tokio::time::Instant::now() < until {
                    let response = app.pay(&sale, &order, &format!("evt-{i}")).await;
                    if response.status() != 503 {
                        return (order, response.json::<Value>().await.unwrap());
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                panic!("{order}: 503 for 60 s")
            }
        }))
        .await;
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    let mut paid = 0;
    for (order, answer) in &answers {
        let stored: (String,) = sqlx::query_as("select status from orders where order_id = $1")
            .bind(uuid::Uuid::parse_str(order).unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
        assert_eq!(answer["status"].as_str(), Some(stored.0.as_str()), "{order}: {answer}");
        match stored.0.as_str() {
            "paid" => {
                assert_eq!(answer["late_payment"], false);
                paid += 1;
            }
            "expired" => assert_eq!(answer["late_payment"], true, "{answer}"),
            other => panic!("{order} ended {other}"),
        }
    }
    let late: i64 = sqlx::query_scalar("select count(*) from payment_events where sale_id = $1 and outcome = 'late'")
        .bind(&sale)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!((standings.paid, standings.expired, late), (paid, ORDERS - paid, ORDERS - paid));
    assert_eq!(status.stock_left, ORDERS - paid, "exactly the expired units came back");
    // How many won depends on how late this machine answers (about 19 % on a quiet 2-core host,
    // none on a loaded one): printed, not asserted; what is asserted holds for any split.
    eprintln!("figures pay-against-deadline: orders={ORDERS} paid={paid} late={late}");
}

/// `seckill pay` signs and sends an event as the shop's payment system would: paid (exit 0),
/// the same event id again answered the same, a wrong secret refused (exit 1).
#[tokio::test]
async fn seckill_pay_sends_a_signed_event() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 2, "30s").await;
    let (order_id, _) = reserve(&app, &sale, "alice").await;
    let pay = |secret: &'static str, event: &'static str| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
        command
            .args(["pay", "--sale", &sale, "--order", &order_id, "--url", &app.address, "--event-id", event])
            .env("SECKILL_PAYMENT_SECRET", secret);
        crate::common::output_within(command, Duration::from_secs(60))
    };
    let paid = pay(PAYMENT_SECRET, "evt-cli").await;
    assert!(paid.status.success(), "{}", String::from_utf8_lossy(&paid.stderr));
    let answer: Value = serde_json::from_slice(&paid.stdout).unwrap();
    assert_eq!(answer, json!({"order_id": order_id, "status": "paid", "late_payment": false}));
    let again = pay(PAYMENT_SECRET, "evt-cli").await;
    assert_eq!(serde_json::from_slice::<Value>(&again.stdout).unwrap(), answer, "the same event, the same answer");
    let forged = pay("another-secret-of-at-least-32-bytes!!", "evt-forged").await;
    assert_eq!(forged.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&forged.stdout).contains("invalid_signature"));
}

/// A pay or a cancel sent the moment the 201 arrives races the worker: the order may be
/// committed between the handler's look in Postgres and its look in the queue (whose entry is
/// removed after the commit), or between the cancel's update and its read. Each must still
/// succeed: 300 buyers, each paying or cancelling at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pay_or_a_cancel_right_after_the_201_races_the_worker_and_still_succeeds() {
    let app = Arc::new(spawn_app_with(|c| c.database_max_connections = 16, true).await);
    const BUYERS: i64 = 300;
    let sale = seed_window(&app, BUYERS, "1m").await;
    let outcomes: Vec<(bool, u16)> = futures::stream::iter(0..BUYERS)
        .map(|i| {
            let (app, sale) = (app.clone(), sale.clone());
            async move {
                let user = format!("racer-{i}");
                let (order, _) = reserve(&app, &sale, &user).await;
                let pays = i % 2 == 0;
                let answer = if pays {
                    app.pay(&sale, &order, &format!("evt-{i}")).await
                } else {
                    app.cancel(&sale, &user).await
                };
                (pays, answer.status().as_u16())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let refused: Vec<&(bool, u16)> = outcomes.iter().filter(|(_, status)| *status != 200).collect();
    assert!(refused.is_empty(), "refused (pays?, status): {refused:?}");
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((standings.paid, standings.cancelled), (BUYERS / 2, BUYERS / 2));
    assert_eq!(status.stock_left, BUYERS / 2, "every cancelled unit back once");
}

/// A release Redis lost (AOF everysec, a restart within the second; a failover) leaves Redis
/// consistent with itself but short of a unit Postgres says went back: the check reports it,
/// the repair gives it back, once.
#[tokio::test]
async fn a_release_redis_lost_is_reported_and_repaired_once() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 2, "1m").await;
    let (order, _) = reserve(&app, &sale, "alice").await;
    reserve(&app, &sale, "bob").await;
    assert_eq!(app.cancel(&sale, "alice").await.status(), 200);
    app.assert_released(&sale, Duration::from_secs(10)).await;
    // What the loss of the release's last second leaves: neither the gate's entry nor the unit.
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sale).unwrap());
    let mut redis = app.redis.clone();
    let _: () =
        redis::pipe().atomic().srem(&keys.released, &order).decr(&keys.stock, 1).query_async(&mut redis).await.unwrap();

    let check = admin(&app, reqwest::Method::GET, &format!("/admin/sales/{sale}/reconcile")).await;
    assert_eq!((check["releases_lost"].as_i64(), check["stock_balanced"].as_bool()), (Some(1), Some(true)), "{check}");
    assert_eq!(check["consistent"], false, "{check}");
    let repaired = admin(&app, reqwest::Method::POST, &format!("/admin/sales/{sale}/reconcile")).await;
    assert_eq!(repaired["units_released"], 1, "{repaired}");
    let again = admin(&app, reqwest::Method::POST, &format!("/admin/sales/{sale}/reconcile")).await;
    assert_eq!((again["units_released"].as_u64(), again["consistent"].as_bool()), (Some(0), Some(true)), "{again}");
    let (status, _) = app.assert_released(&sale, Duration::from_secs(20)).await;
    assert_eq!(status.stock_left, 1, "the unit is back once");
}
