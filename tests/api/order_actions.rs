//! An operator's actions on an order (issue 52): `POST /admin/orders/{id}/cancel` voids a
//! reservation (its units back exactly once), `POST /admin/orders/{id}/refund` records a paid
//! order's refund (its units back only with restock, exactly once); both audited, both reported as
//! order events. Racing the buyer's cancel, a payment or the expiry, exactly one transition wins.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::common::receiver::{Mode, Receiver};
use crate::common::{ADMIN_TOKEN, assert_error};
use crate::helpers::{TestApp, new_sale_id, spawn_app, spawn_app_with};
use crate::reservations::seed_window;
use crate::webhooks::webhooks_to;

/// Buys, expecting a reservation: its order id.
async fn reserve(app: &TestApp, sale: &str, user: &str) -> String {
    crate::reservations::reserve(app, sale, user).await.0
}

/// `POST /admin/orders/{order}/{action}` with `body` (none: an empty body).
async fn act(app: &TestApp, order: &str, action: &str, body: Option<Value>) -> reqwest::Response {
    let request = app.client.post(app.url(&format!("/admin/orders/{order}/{action}"))).bearer_auth(ADMIN_TOKEN);
    let request = match body {
        Some(body) => request.json(&body),
        None => request,
    };
    request.send().await.unwrap()
}

async fn ok(response: reqwest::Response) -> Value {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

/// The stored status of an order.
async fn status_of(app: &TestApp, order: &str) -> String {
    sqlx::query_scalar("select status from orders where order_id = $1")
        .bind(Uuid::parse_str(order).unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// The data of the order's event of type `kind` (exactly one).
async fn event_data(app: &TestApp, order: &str, kind: &str) -> Value {
    let bodies: Vec<String> = sqlx::query_scalar("select body from webhook_events where order_id = $1 and type = $2")
        .bind(Uuid::parse_str(order).unwrap())
        .bind(kind)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(bodies.len(), 1, "{kind} of {order}: {bodies:?}");
    serde_json::from_str::<Value>(&bodies[0]).unwrap()["data"].clone()
}

async fn audit(app: &TestApp, sale: &str) -> Vec<Value> {
    let response =
        app.client.get(app.url(&format!("/admin/sales/{sale}/audit"))).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    ok(response).await["entries"].as_array().unwrap().clone()
}

#[tokio::test]
async fn an_operator_cancel_voids_a_reservation_once_with_its_event_and_audit_entry() {
    let receiver = Receiver::start(Mode::Accept).await;
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 3), true).await;
    let sale = seed_window(&app, 3, "1h").await;
    let alice = reserve(&app, &sale, "alice").await;
    let bob = reserve(&app, &sale, "bob").await;
    app.wait_for_drain(&sale).await;

    let body = ok(act(&app, &alice, "cancel", Some(json!({"reason": "ordered by mistake"}))).await).await;
    assert_eq!(body["status"], "cancelled");
    assert_eq!((body["sale_id"].as_str(), body["user_id"].as_str()), (Some(sale.as_str()), Some("alice")));
    assert_eq!((body["quantity"].as_i64(), body["restock"].as_bool()), (Some(1), Some(true)), "{body}");
    let (status, standings) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.released, standings.cancelled), (2, 1, 1), "{status:?}");

    // Once: a second cancel is refused and gives nothing back; the buyer cannot buy again.
    assert_error(act(&app, &alice, "cancel", None).await, 409, "not_reserved").await;
    assert_error(app.buy(&sale, "alice").await, 409, "already_purchased").await;
    assert_eq!(app.status(&sale).await.stock_left, 2);
    assert_eq!(app.get_as(&format!("/sales/{sale}/order"), "alice").await["status"], "cancelled");

    let data = event_data(&app, &alice, "order.cancelled").await;
    assert_eq!((data["by"].as_str(), data["reason"].as_str()), (Some("operator"), Some("ordered by mistake")));
    // The shared admin token is an unnamed operator: its actor is `admin-token` (docs/operators.md).
    assert_eq!((data["status"].as_str(), data["actor"].as_str()), (Some("cancelled"), Some("admin-token")), "{data}");
    let entries = audit(&app, &sale).await;
    let entry = &entries[0];
    assert_eq!(
        (entry["action"].as_str(), entry["reason"].as_str()),
        (Some("order_cancel"), Some("ordered by mistake"))
    );
    assert_eq!(entry["effect"]["order_id"].as_str(), Some(alice.as_str()), "{entry}");
    assert_eq!(entry["effect"]["restock"], true);
    assert_eq!(entry["actor"], "admin-token", "{entry}");

    // Paid: not a reservation any more.
    assert_eq!(app.pay(&sale, &bob, "pay-bob").await.status(), 200);
    assert_error(act(&app, &bob, "cancel", None).await, 409, "not_reserved").await;
    assert_eq!(status_of(&app, &bob).await, "paid");
    // The buyer's own cancel now says by whom, too.
    reserve(&app, &sale, "carol").await;
    assert_eq!(app.cancel(&sale, "carol").await.status(), 200);
    let carol: Uuid = sqlx::query_scalar("select order_id from orders where sale_id = $1 and user_id = 'carol'")
        .bind(&sale)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(event_data(&app, &carol.to_string(), "order.cancelled").await["by"], "buyer");
    app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!(audit(&app, &sale).await.len(), entries.len(), "refusals record nothing");
}

#[tokio::test]
async fn bad_order_actions_get_a_clear_4xx_and_change_nothing() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 2, "1h").await;
    let order = reserve(&app, &sale, "alice").await;
    app.wait_for_drain(&sale).await;
    let unknown = Uuid::now_v7().to_string();
    assert_error(act(&app, &unknown, "cancel", None).await, 404, "unknown_order").await;
    assert_error(act(&app, &unknown, "refund", None).await, 404, "unknown_order").await;
    assert_error(act(&app, "not-a-uuid", "cancel", None).await, 400, "invalid_request").await;
    for body in [
        json!({"reason": "x".repeat(201)}),
        json!({"reason": "two\nlines"}),
        json!({"restock": true}),
        json!(["reason"]),
        json!("reason"),
    ] {
        assert_error(act(&app, &order, "cancel", Some(body)).await, 400, "invalid_request").await;
    }
    assert_error(act(&app, &order, "refund", Some(json!({"restock": "yes"}))).await, 400, "invalid_request").await;
    // A reservation is not a paid order.
    assert_error(act(&app, &order, "refund", Some(json!({"restock": true}))).await, 409, "not_paid").await;
    let unauthenticated = app.client.post(app.url(&format!("/admin/orders/{order}/cancel"))).send().await.unwrap();
    assert_error(unauthenticated, 401, "unauthorized").await;
    let get = app.client.get(app.url(&format!("/admin/orders/{order}/cancel"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(get.send().await.unwrap().status(), 405);

    // An order of a sale without a payment window is final: no order an action can name.
    let plain = new_sale_id();
    app.seed_stock(&plain, 1).await;
    let response = app.buy(&plain, "bob").await;
    let confirmed: Value = response.json().await.unwrap();
    app.wait_for_drain(&plain).await;
    let confirmed = confirmed["order_id"].as_str().unwrap();
    assert_error(act(&app, confirmed, "cancel", None).await, 404, "unknown_order").await;

    assert_eq!(status_of(&app, &order).await, "reserved");
    assert_eq!(app.status(&sale).await.stock_left, 1);
    assert!(audit(&app, &sale).await.iter().all(|e| e["action"] == "seed"));
}

#[tokio::test]
async fn a_refund_marks_a_paid_order_refunded_and_restocks_only_when_asked_once() {
    let receiver = Receiver::start(Mode::Accept).await;
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 3), true).await;
    let sale = seed_window(&app, 3, "1h").await;
    let kept = reserve(&app, &sale, "kept").await;
    let back = reserve(&app, &sale, "back").await;
    for (order, event) in [(&kept, "pay-kept"), (&back, "pay-back")] {
        assert_eq!(app.pay(&sale, order, event).await.status(), 200);
    }
    let (before, _) = app.assert_settled(&sale, Duration::from_secs(10)).await;
    assert_eq!(before.stock_left, 1);

    let body = ok(act(&app, &kept, "refund", Some(json!({"reason": "damaged"}))).await).await;
    assert_eq!((body["status"].as_str(), body["restock"].as_bool()), (Some("refunded"), Some(false)), "{body}");
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.released, standings.refunded), (1, 0, 1), "the unit stays sold");

    let body = ok(act(&app, &back, "refund", Some(json!({"restock": true}))).await).await;
    assert_eq!(body["restock"], true);
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.released, standings.refunded), (2, 1, 2), "one unit back");

    // Once: a second refund, with restock or not, is refused and gives nothing back.
    for order in [&kept, &back] {
        assert_error(act(&app, order, "refund", Some(json!({"restock": true}))).await, 409, "not_paid").await;
        assert_error(act(&app, order, "cancel", None).await, 409, "not_reserved").await;
    }
    // A payment event repeated after the refund answers as before and changes nothing.
    let repeat: Value = app.pay(&sale, &kept, "pay-kept").await.json().await.unwrap();
    assert_eq!(repeat["status"], "paid", "{repeat}");
    let (status, _) = app.assert_settled(&sale, Duration::from_secs(10)).await;
    assert_eq!(status.stock_left, 2);
    assert_eq!(app.get_as(&format!("/sales/{sale}/order"), "kept").await["status"], "refunded");

    let data = event_data(&app, &kept, "order.refunded").await;
    assert_eq!((data["by"].as_str(), data["reason"].as_str()), (Some("operator"), Some("damaged")), "{data}");
    assert_eq!((data["restock"].as_bool(), data["status"].as_str()), (Some(false), Some("refunded")));
    assert_eq!(event_data(&app, &back, "order.refunded").await["restock"], true);
    let refunds: Vec<Value> = audit(&app, &sale).await.into_iter().filter(|e| e["action"] == "order_refund").collect();
    assert_eq!(refunds.len(), 2, "{refunds:?}");
    assert_eq!(refunds[1]["effect"]["order_id"].as_str(), Some(kept.as_str()));
    let report = ok(app
        .client
        .get(app.url(&format!("/admin/sales/{sale}/reconcile")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap())
    .await;
    assert_eq!(report["consistent"], true, "{report}");
}

/// Runs `a` and `b` together, released at once by a barrier, on tasks of their own; the `i`th
/// race lets one side yield `i % 7` times first, `a` or `b` by turns, so neither always leads.
async fn together<A, B>(i: usize, a: A, b: B) -> (A::Output, B::Output)
where
    A: std::future::Future + Send + 'static,
    B: std::future::Future + Send + 'static,
    A::Output: Send + 'static,
    B::Output: Send + 'static,
{
    let barrier = Arc::new(Barrier::new(2));
    let start = |lag: usize| {
        let barrier = barrier.clone();
        async move {
            barrier.wait().await;
            for _ in 0..lag {
                tokio::task::yield_now().await;
            }
        }
    };
    let (lag_a, lag_b) = if i.is_multiple_of(2) { (i % 7, 0) } else { (0, i % 7) };
    let (start_a, start_b) = (start(lag_a), start(lag_b));
    let a = tokio::spawn(async move {
        start_a.await;
        a.await
    });
    let b = tokio::spawn(async move {
        start_b.await;
        b.await
    });
    (a.await.unwrap(), b.await.unwrap())
}

/// Races run this many at a time: the pool of Postgres connections must not pick the winner.
const RACES_AT_ONCE: usize = 4;

/// Reserves `n` orders of a fresh sale with `stock` n, stored: their (user, order id).
async fn reservations(app: &TestApp, n: usize, window: &str) -> (String, Vec<(String, String)>) {
    let sale = seed_window(app, n as i64, window).await;
    let mut orders = vec![];
    for i in 0..n {
        let user = format!("u{i}");
        let order = reserve(app, &sale, &user).await;
        orders.push((user, order));
    }
    app.wait_for_drain(&sale).await;
    (sale, orders)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_cancel_racing_the_buyers_cancel_wins_exactly_once() {
    let app = Arc::new(spawn_app().await);
    const N: usize = 60;
    let (sale, orders) = reservations(&app, N, "1h").await;
    let races = orders.iter().cloned().enumerate().map(|(i, (user, order))| {
        let (app, sale) = (app.clone(), sale.clone());
        async move {
            let operator = {
                let app = app.clone();
                async move { act(&app, &order, "cancel", None).await.status().as_u16() }
            };
            let buyer = async move { app.cancel(&sale, &user).await.status().as_u16() };
            together(i, operator, buyer).await
        }
    });
    let outcomes: Vec<(u16, u16)> = futures::stream::iter(races).buffer_unordered(RACES_AT_ONCE).collect().await;
    let operator_won = outcomes.iter().filter(|o| **o == (200, 409)).count();
    let buyer_won = outcomes.iter().filter(|o| **o == (409, 200)).count();
    assert_eq!(operator_won + buyer_won, N, "exactly one 200 per order: {outcomes:?}");
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((status.stock_left, status.released, standings.cancelled), (N as i64, N as i64, N as i64));
    let by_operator: i64 =
        sqlx::query_scalar("select count(*) from orders where sale_id = $1 and resolved_by = 'operator'")
            .bind(&sale)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(by_operator, operator_won as i64);
    eprintln!("figures operator-vs-buyer-cancel: orders={N} operator={operator_won} buyer={buyer_won}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_cancel_racing_a_payment_wins_exactly_once() {
    let app = Arc::new(spawn_app().await);
    const N: usize = 60;
    let (sale, orders) = reservations(&app, N, "1h").await;
    let races = orders.iter().cloned().enumerate().map(|(i, (_, order))| {
        let (app, sale) = (app.clone(), sale.clone());
        async move {
            let cancel = {
                let (app, order) = (app.clone(), order.clone());
                async move { act(&app, &order, "cancel", None).await.status().as_u16() }
            };
            let payment = {
                let order = order.clone();
                async move { app.pay(&sale, &order, &format!("evt-{i}")).await.json::<Value>().await.unwrap() }
            };
            let (cancel, payment) = together(i, cancel, payment).await;
            (order, cancel, payment)
        }
    });
    let outcomes: Vec<(String, u16, Value)> =
        futures::stream::iter(races).buffer_unordered(RACES_AT_ONCE).collect().await;
    let mut cancelled = 0;
    for (order, cancel, payment) in &outcomes {
        let stored = status_of(&app, order).await;
        match stored.as_str() {
            "cancelled" => {
                assert_eq!((*cancel, payment["late_payment"].as_bool()), (200, Some(true)), "{order}: {payment}");
                assert_eq!(payment["status"], "cancelled");
                cancelled += 1;
            }
            "paid" => {
                assert_eq!((*cancel, payment["late_payment"].as_bool()), (409, Some(false)), "{order}: {payment}")
            }
            other => panic!("{order} ended {other}"),
        }
    }
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((status.stock_left, status.released, standings.cancelled), (cancelled, cancelled, cancelled));
    assert_eq!(standings.paid, N as i64 - cancelled);
    eprintln!("figures operator-cancel-vs-payment: orders={N} cancelled={cancelled} paid={}", standings.paid);
}

/// The deadlines of `orders` moved to `now + step * i` (Postgres's clock), so the expiry comes due
/// order after order while the cancels run.
async fn due_in_turn(app: &TestApp, orders: &[(String, String)], step_ms: i64) {
    let ids: Vec<Uuid> = orders.iter().map(|(_, order)| Uuid::parse_str(order).unwrap()).collect();
    sqlx::query(
        "update orders o set pay_by = now() + make_interval(secs => (t.i * $2)::float8 / 1000)
         from unnest($1::uuid[]) with ordinality as t(id, i) where o.order_id = t.id",
    )
    .bind(&ids)
    .bind(step_ms)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_cancel_racing_the_expiry_wins_exactly_once() {
    let app = Arc::new(spawn_app().await);
    const N: usize = 120;
    let (sale, orders) = reservations(&app, N, "1h").await;
    // Deadlines 5 ms apart from now on; every cancel is sent at once, and a second sweeper (this
    // test) expires what is due as fast as it can, beside the app's own.
    due_in_turn(&app, &orders, 5).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sweeper = {
        let (pool, done) = (app.pool.clone(), done.clone());
        tokio::spawn(async move {
            let mut expired = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                expired += seckill::reservations::store::expire_due(&pool, 10).await.unwrap().len();
            }
            expired
        })
    };
    let cancels = orders.iter().map(|(_, order)| {
        let app = app.clone();
        async move { (order.clone(), act(&app, order, "cancel", None).await) }
    });
    let answers = futures::future::join_all(cancels).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let swept = sweeper.await.unwrap();
    let mut cancelled = 0;
    for (order, answer) in answers {
        let code = answer.status().as_u16();
        let body: Value = answer.json().await.unwrap();
        // A cancel that found the deadline passed before the sweeper got there is refused too:
        // the order is expiring, and expires.
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        let stored = loop {
            match status_of(&app, &order).await.as_str() {
                "reserved" => assert!(tokio::time::Instant::now() < until, "{order} never expired"),
                stored => break stored.to_owned(),
            }
        };
        match (code, stored.as_str()) {
            (200, "cancelled") => cancelled += 1,
            (409, "expired") => assert_eq!(body["error"], "not_reserved", "{body}"),
            other => panic!("{order}: {other:?} {body}"),
        }
    }
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((status.stock_left, status.released), (N as i64, N as i64), "every unit back once");
    assert_eq!((standings.cancelled, standings.expired), (cancelled, N as i64 - cancelled));
    eprintln!(
        "figures operator-cancel-vs-expiry: orders={N} cancelled={cancelled} expired={} test_swept={swept}",
        standings.expired
    );
}

/// A refund's restock is a release like any other to reconciliation: a release Redis lost is
/// reported and given back once, and a sale Redis lost entirely comes back with the refunded
/// buyers restored, the restocked units in the stock and the others sold.
#[tokio::test]
async fn reconciliation_repairs_refunds_as_it_repairs_releases() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 4, "1h").await;
    let back = reserve(&app, &sale, "back").await;
    let kept = reserve(&app, &sale, "kept").await;
    reserve(&app, &sale, "open").await;
    for order in [&back, &kept] {
        assert_eq!(app.pay(&sale, order, &format!("pay-{order}")).await.status(), 200);
    }
    ok(act(&app, &back, "refund", Some(json!({"restock": true}))).await).await;
    ok(act(&app, &kept, "refund", Some(json!({"restock": false}))).await).await;
    let (status, _) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.released), (2, 1));

    // The loss of the release's last second: neither the gate's entry nor the unit.
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sale).unwrap());
    let _: () = redis::pipe()
        .atomic()
        .srem(&keys.released, &back)
        .decr(&keys.stock, 1)
        .query_async(&mut app.redis.clone())
        .await
        .unwrap();
    let reconcile = |method: reqwest::Method| {
        let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
        app.client.request(method, url).bearer_auth(ADMIN_TOKEN).send()
    };
    let check = ok(reconcile(reqwest::Method::GET).await.unwrap()).await;
    assert_eq!((check["releases_lost"].as_i64(), check["consistent"].as_bool()), (Some(1), Some(false)), "{check}");
    let repaired = ok(reconcile(reqwest::Method::POST).await.unwrap()).await;
    assert_eq!(repaired["units_released"], 1, "{repaired}");
    let (status, _) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!(status.stock_left, 2, "the refund's unit is back once");

    crate::redis_loss::lose_sale(&app, &sale).await;
    let repaired = ok(reconcile(reqwest::Method::POST).await.unwrap()).await;
    assert_eq!((repaired["sale_restored"].as_bool(), repaired["buyers_restored"].as_u64()), (Some(true), Some(3)));
    let again = ok(reconcile(reqwest::Method::POST).await.unwrap()).await;
    assert_eq!(again["consistent"], true, "{again}");
    let (status, standings) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.released, standings.refunded), (2, 1, 2), "{status:?}");
}

/// The actor a route passes (the operator's name) reaches the audit entry and the event: here
/// through the use case's Postgres step itself, as the route calls it.
#[tokio::test]
async fn a_named_actor_is_kept_in_the_audit_entry_and_the_event() {
    use seckill::reservations::actions::{self, Note, Outcome};
    let receiver = Receiver::start(Mode::Accept).await;
    let app = spawn_app_with(|c| webhooks_to(c, &receiver.url, 3), true).await;
    let sale = seed_window(&app, 3, "1h").await;
    let voided = reserve(&app, &sale, "voided").await;
    let refunded = reserve(&app, &sale, "refunded").await;
    let restocked = reserve(&app, &sale, "restocked").await;
    for order in [&refunded, &restocked] {
        assert_eq!(app.pay(&sale, order, &format!("pay-{order}")).await.status(), 200);
    }
    app.wait_for_drain(&sale).await;
    let note = Note { actor: Some("alice"), reason: Some("chargeback") };
    let id = |order: &str| Uuid::parse_str(order).unwrap();
    let cancelled = actions::cancel(&app.pool, id(&voided), note).await.unwrap();
    assert!(matches!(cancelled, Outcome::Done(ref acted) if acted.restock), "{cancelled:?}");
    let done = actions::refund(&app.pool, id(&refunded), false, note).await.unwrap();
    assert!(matches!(done, Outcome::Done(ref acted) if !acted.restock), "{done:?}");
    assert_eq!(
        actions::refund(&app.pool, id(&refunded), true, note).await.unwrap(),
        Outcome::Not(seckill::domain::Standing::Refunded)
    );
    for (order, kind) in [(&voided, "order.cancelled"), (&refunded, "order.refunded")] {
        let data = event_data(&app, order, kind).await;
        assert_eq!((data["actor"].as_str(), data["reason"].as_str()), (Some("alice"), Some("chargeback")), "{data}");
    }
    let entries = audit(&app, &sale).await;
    let actors: Vec<_> = entries.iter().take(2).map(|e| (e["action"].as_str(), e["actor"].as_str())).collect();
    assert_eq!(actors, [(Some("order_refund"), Some("alice")), (Some("order_cancel"), Some("alice"))]);
    let done = actions::refund(&app.pool, id(&restocked), true, Note::default()).await.unwrap();
    assert!(matches!(done, Outcome::Done(ref acted) if acted.restock), "{done:?}");
    // The releases these Postgres steps owe are re-driven by the sweeper: each unit back once.
    let (status, _) = app.assert_released(&sale, Duration::from_secs(20)).await;
    assert_eq!((status.stock_left, status.released), (2, 2));
}

/// A retired sale's stock is gone: a refund of its order with restock is refused and changes
/// nothing; without restock it is recorded.
#[tokio::test]
async fn a_retired_sales_order_is_refunded_only_without_restock() {
    let app = spawn_app().await;
    let sale = seed_window(&app, 1, "1h").await;
    let order = reserve(&app, &sale, "alice").await;
    assert_eq!(app.pay(&sale, &order, "pay-alice").await.status(), 200);
    app.wait_for_drain(&sale).await;
    // The mark a retirement sets first (its Redis keys go after it).
    sqlx::query("update sales set retired_at = now() where sale_id = $1").bind(&sale).execute(&app.pool).await.unwrap();
    assert_error(act(&app, &order, "refund", Some(json!({"restock": true}))).await, 409, "sale_retired").await;
    assert_eq!(status_of(&app, &order).await, "paid", "nothing changed");
    let body = ok(act(&app, &order, "refund", None).await).await;
    assert_eq!((body["status"].as_str(), body["restock"].as_bool()), (Some("refunded"), Some(false)));
}
