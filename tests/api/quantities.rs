//! Quantities and groups: a sale's `per_buyer`, `POST /buy`'s `quantity` (all or none), the
//! limit one buyer shares across a group's sales (a product's sizes), and the units each
//! promise is counted in: sold, released, restored after a Redis loss.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, spawn_app};

/// A sale id of a new group, `<group>.<size>`: `size(group, "42")`.
fn group_id() -> String {
    format!("g{}", Uuid::now_v7().simple())
}

fn size(group: &str, name: &str) -> String {
    format!("{group}.{name}")
}

async fn buy_units(app: &TestApp, sale: &str, user: &str, quantity: Value) -> reqwest::Response {
    let body = json!({"sale_id": sale, "user_id": user, "quantity": quantity});
    app.client.post(app.url("/buy")).json(&body).send().await.unwrap()
}

/// Buys `quantity` as `user`, asserting 201 with that quantity; the order id.
async fn bought(app: &TestApp, sale: &str, user: &str, quantity: u32) -> Uuid {
    let response = buy_units(app, sale, user, json!(quantity)).await;
    assert_eq!(response.status(), 201, "{user} buys {quantity} of {sale}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["quantity"], quantity, "{body}");
    body["order_id"].as_str().unwrap().parse().unwrap()
}

async fn seeded(app: &TestApp, sale: &str, body: Value) {
    let response = app.seed(sale, body).await;
    assert_eq!(response.status(), 200, "seeding {sale}: {}", response.text().await.unwrap());
}

async fn public(app: &TestApp, sale: &str) -> Value {
    app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn a_buyer_takes_up_to_per_buyer_units_in_one_order_and_the_stock_moves_by_them() {
    let app = spawn_app().await;
    let sale = crate::helpers::new_sale_id();
    seeded(&app, &sale, json!({"stock": 5, "per_buyer": 3})).await;
    assert_eq!(public(&app, &sale).await["per_buyer"], 3);

    let alice = bought(&app, &sale, "alice", 3).await;
    assert_eq!(app.status(&sale).await.stock_left, 2, "the stock moved by the quantity");

    // Over the limit: refused whole, nothing bought, the limit and what the buyer holds said.
    let over = buy_units(&app, &sale, "bob", json!(4)).await;
    assert_eq!(over.status(), 409);
    let body: Value = over.json().await.unwrap();
    assert_eq!(
        (body["error"].as_str(), body["per_buyer"].as_u64(), body["held"].as_u64()),
        (Some("limit_reached"), Some(3), Some(0)),
        "{body}"
    );
    assert_eq!(body["orders"], json!([]), "no group: no other orders");

    // More than is left: refused whole, never partly filled.
    let short = buy_units(&app, &sale, "bob", json!(3)).await;
    assert_eq!(short.status(), 409);
    let body: Value = short.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["stock_left"].as_i64()), (Some("insufficient_stock"), Some(2)), "{body}");
    assert_eq!(app.status(&sale).await.stock_left, 2, "nothing was bought");

    // One order per buyer per sale: a second purchase names the first, with its units.
    let again = buy_units(&app, &sale, "alice", json!(1)).await;
    assert_eq!(again.status(), 409);
    let body: Value = again.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["quantity"].as_u64()), (Some("already_purchased"), Some(3)), "{body}");
    assert_eq!(body["order_id"].as_str(), Some(alice.to_string().as_str()));

    bought(&app, &sale, "bob", 2).await;
    assert_error(buy_units(&app, &sale, "carol", json!(1)).await, 410, "sold_out").await;

    let status = app.assert_invariants(&sale, &BTreeSet::from([alice])).await;
    assert_eq!((status.sold, status.units_sold, status.stock_left), (2, 5, 0), "{status:?}");
    let order = app.get_as(&format!("/sales/{sale}/order"), "alice").await;
    assert_eq!((order["status"].as_str(), order["quantity"].as_u64()), (Some("confirmed"), Some(3)), "{order}");
}

#[tokio::test]
async fn a_quantity_is_refused_clearly_when_malformed_or_over_a_one_unit_sale() {
    let app = spawn_app().await;
    let sale = crate::helpers::new_sale_id();
    app.seed_stock(&sale, 5).await;
    for bad in [json!(0), json!(101), json!(-1), json!(1.5), json!("2")] {
        let response = buy_units(&app, &sale, "u", bad.clone()).await;
        assert_eq!(response.status(), 400, "quantity {bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "invalid_request", "quantity {bad}: {body}");
    }
    let body: Value = buy_units(&app, &sale, "u", json!(2)).await.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["per_buyer"].as_u64()), (Some("limit_reached"), Some(1)), "{body}");
    for per_buyer in [0, 101] {
        let response = app.seed(&crate::helpers::new_sale_id(), json!({"stock": 1, "per_buyer": per_buyer})).await;
        assert_error(response, 400, "invalid_request").await;
    }
    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.sold), (5, 0), "nothing bought by a refused request: {status:?}");
    let plain: Value = app.buy(&sale, "v").await.json().await.unwrap();
    assert_eq!(plain["quantity"], 1, "the default is one unit: {plain}");
}

#[tokio::test]
async fn a_groups_sales_share_each_buyers_limit_and_one_slot() {
    let app = spawn_app().await;
    let group = group_id();
    let sizes: Vec<String> = ["41", "42", "43"].iter().map(|s| size(&group, s)).collect();
    for sale in &sizes {
        seeded(&app, sale, json!({"stock": 3, "group": group, "per_buyer": 2})).await;
    }
    let view: Value = public(&app, &sizes[1]).await;
    assert_eq!(view["group"], json!({"name": group, "sales": sizes}), "{view}");
    let status = app.status(&sizes[0]).await;
    assert_eq!((status.per_buyer, status.group.as_deref()), (2, Some(group.as_str())), "{status:?}");

    let first = bought(&app, &sizes[0], "ann", 1).await;
    // Two sizes within the limit of 2, then the limit across them.
    bought(&app, &sizes[1], "ann", 1).await;
    let over = buy_units(&app, &sizes[2], "ann", json!(1)).await;
    assert_eq!(over.status(), 409);
    let body: Value = over.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["held"].as_u64()), (Some("limit_reached"), Some(2)), "{body}");
    let held: Vec<(String, String)> = body["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["sale_id"].as_str().unwrap().to_owned(), o["quantity"].to_string()))
        .collect();
    assert_eq!(held, [(sizes[0].clone(), "1".into()), (sizes[1].clone(), "1".into())], "{body}");
    assert!(body["orders"][0]["order_id"] == first.to_string(), "{body}");
    // A second buyer's two units in one size leave no room in another.
    bought(&app, &sizes[2], "ben", 2).await;
    assert_error(buy_units(&app, &sizes[0], "ben", json!(1)).await, 409, "limit_reached").await;

    // Seeds that disagree on the group's limit, or on the group, are refused.
    let other = size(&group, "44");
    let differs = app.seed(&other, json!({"stock": 3, "group": group, "per_buyer": 1})).await;
    assert_eq!(differs.status(), 409);
    let body: Value = differs.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["per_buyer"].as_u64()), (Some("group_limit_differs"), Some(2)), "{body}");
    let named = app.seed(&crate::helpers::new_sale_id(), json!({"stock": 3, "group": group})).await;
    assert_error(named, 400, "invalid_request").await;
    let sharded = app.seed(&size(&group_id(), "1"), json!({"stock": 3, "shards": 2})).await;
    assert_error(sharded, 400, "invalid_request").await;

    for sale in &sizes {
        let status = app.assert_invariants(sale, &BTreeSet::new()).await;
        assert!(status.units_sold <= status.stock_initial, "{status:?}");
    }
    // On one slot: every key of the group's sales carries the group's hash tag.
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sizes[0]).unwrap());
    assert!(keys.all().iter().all(|k| k.contains(&format!("{{group:{group}}}"))), "{keys:?}");
}

#[tokio::test]
async fn a_released_reservation_gives_back_all_its_units_once() {
    let app = spawn_app().await;
    let sale = crate::helpers::new_sale_id();
    // A window no loaded host outlasts before the cancel; the other's expiry is brought forward
    // in Postgres after it, where the sweeper finds due reservations.
    seeded(&app, &sale, json!({"stock": 4, "per_buyer": 3, "payment_window": "1h"})).await;
    bought(&app, &sale, "kept", 1).await;
    bought(&app, &sale, "cancels", 3).await;
    assert_eq!(app.status(&sale).await.stock_left, 0);
    // The cancel gives 3 units back; the sweeper finds the order released and gives nothing more.
    let cancelled = app.cancel(&sale, "cancels").await;
    assert_eq!(cancelled.status(), 200, "{}", cancelled.text().await.unwrap());
    let (status, standings) = app.assert_released(&sale, Duration::from_secs(10)).await;
    assert_eq!((status.stock_left, status.units_released, standings.released_units), (3, 3, 3), "{status:?}");
    // The one left unpaid expires: its unit back too, once.
    sqlx::query("update orders set pay_by = now() where sale_id = $1 and user_id = 'kept'")
        .bind(&sale)
        .execute(&app.pool)
        .await
        .unwrap();
    let (status, standings) = app.assert_settled(&sale, Duration::from_secs(20)).await;
    assert_eq!((status.stock_left, status.units_sold, status.units_released), (4, 4, 4), "{status:?}");
    assert_eq!((standings.cancelled, standings.expired, standings.live_units), (1, 1, 0), "{standings:?}");
}

#[tokio::test]
async fn a_lost_sale_is_restored_with_its_units_and_sells_no_more_than_is_left() {
    let app = spawn_app().await;
    let group = group_id();
    let (sale, sibling) = (size(&group, "a"), size(&group, "b"));
    for id in [&sale, &sibling] {
        seeded(&app, id, json!({"stock": 5, "group": group, "per_buyer": 3})).await;
    }
    bought(&app, &sale, "dora", 3).await;
    app.wait_for_drain(&sale).await;
    crate::redis_loss::lose_sale(&app, &sale).await;

    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let repaired = app.client.post(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(repaired.status(), 200, "{}", repaired.text().await.unwrap());
    let status = app.status(&sale).await;
    assert_eq!((status.stock_initial, status.stock_left, status.units_sold), (5, 2, 3), "{status:?}");
    let body: Value = buy_units(&app, &sale, "eve", json!(3)).await.json().await.unwrap();
    assert_eq!(body["error"], "insufficient_stock", "{body}");
    // Dora holds her 3 units of the group again: no room in the other size.
    let body: Value = buy_units(&app, &sibling, "dora", json!(1)).await.json().await.unwrap();
    assert_eq!((body["error"].as_str(), body["held"].as_u64()), (Some("limit_reached"), Some(3)), "{body}");
    app.assert_invariants(&sale, &BTreeSet::new()).await;
}

#[tokio::test]
async fn a_groups_keys_go_with_its_last_retired_sale() {
    let app = spawn_app().await;
    let group = group_id();
    let sizes = [size(&group, "a"), size(&group, "b")];
    for sale in &sizes {
        seeded(&app, sale, json!({"stock": 1, "group": group, "per_buyer": 2})).await;
        bought(&app, sale, "fay", 1).await; // sold out: retirable once drained
        app.wait_for_drain(sale).await;
    }
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sizes[0]).unwrap());
    let exists = async |key: &str| -> bool { redis::AsyncCommands::exists(&mut app.redis.clone(), key).await.unwrap() };
    let retire = async |sale: &str| {
        let url = app.url(&format!("/admin/sales/{sale}"));
        let response = app.client.delete(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
        assert_eq!(response.status(), 200, "retire {sale}: {}", response.text().await.unwrap());
    };
    retire(&sizes[0]).await;
    assert!(exists(&keys.held).await && exists(&keys.group_meta).await, "the group lives on with its other sale");
    retire(&sizes[1]).await;
    for key in [&keys.held, &keys.group_meta, &keys.group_sales] {
        assert!(!exists(key).await, "{key} outlived the group's last sale");
    }
}

/// A group's sales have one payment window: a size seeded with another (or with one where the
/// others have none, as when `SECKILL_PAYMENT_WINDOW` differs between the instances that seed
/// them) is refused 409 `group_window_differs` with nothing changed; a sale alone in its group
/// may change its window on a re-seed.
#[tokio::test]
async fn a_groups_sales_have_one_payment_window() {
    let app = spawn_app().await;
    let group = group_id();
    let (first, second) = (size(&group, "42"), size(&group, "43"));
    seeded(&app, &first, json!({"stock": 3, "group": group, "payment_window": "2m"})).await;
    seeded(&app, &first, json!({"stock": 3, "group": group, "payment_window": "5m"})).await;
    seeded(&app, &second, json!({"stock": 4, "group": group, "payment_window": "300s"})).await;
    for (body, why) in [
        (json!({"stock": 4, "group": group, "payment_window": "2m"}), "another window"),
        (json!({"stock": 4, "group": group}), "none where the others have one"),
    ] {
        let refused = app.seed(&size(&group, "44"), body).await;
        assert_eq!(refused.status(), 409, "{why}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(body["error"], "group_window_differs", "{why}: {body}");
        assert!(body["message"].as_str().unwrap().contains("with a payment window of 5m"), "{why}: {body}");
        let again = app.seed(&first, json!({"stock": 3, "group": group, "payment_window": "2m"})).await;
        assert_error(again, 409, "group_window_differs").await;
    }
    let unknown = app.client.get(app.url(&format!("/admin/sales/{}", size(&group, "44")))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(unknown.send().await.unwrap().status(), 404, "nothing was seeded");
    for sale in [&first, &second] {
        let status = app.status(sale).await;
        assert_eq!(status.payment_window_ms, Some(300_000), "{sale}: {status:?}");
    }

    let finals = group_id();
    seeded(&app, &size(&finals, "a"), json!({"stock": 1, "group": finals})).await;
    let refused = app.seed(&size(&finals, "b"), json!({"stock": 1, "group": finals, "payment_window": "1m"})).await;
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "group_window_differs", "{body}");
    assert!(body["message"].as_str().unwrap().contains("without a payment window"), "{body}");
}
