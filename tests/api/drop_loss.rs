//! A drop Redis lost (a size's keys, or the whole group slot) comes back from Postgres as its seed
//! wrote it: each size still asks the drop's admission, the group's limit holds over every buyer's
//! units, the line keeps its shuffle seed, and stock adds up (reconciliation's repair).

use std::collections::HashMap;

use redis::AsyncCommands;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::drop_line::{admitted, buy_with, refused_with};
use crate::helpers::{ADMIN_TOKEN, TestApp, spawn_app};
use crate::redis_loss::{lose_sale, repair};

const SIZES: [&str; 3] = ["40", "41", "42"];

/// A drop of three sizes of 4 pairs, at most 2 per buyer, a 10-minute payment window and a
/// waiting room that opened before the drop (both in the past: open now).
async fn seed_drop(app: &TestApp) -> String {
    let drop = format!("drop-{}", &uuid::Uuid::now_v7().simple().to_string()[..20]);
    let at = |secs: i64| (OffsetDateTime::now_utc() + time::Duration::seconds(secs)).format(&Rfc3339).unwrap();
    let body = json!({
        "sizes": {"40": {"stock": 4}, "41": {"stock": 4}, "42": {"stock": 4}},
        "per_buyer": 2,
        "starts_at": at(-1),
        "payment_window": "10m",
        "waiting_room": {"opens_at": at(-2), "rate": 1000},
    });
    let url = app.url(&format!("/admin/drops/{drop}"));
    let response = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    drop
}

/// The admission token of `user`, admitted through the drop's line.
async fn token(app: &TestApp, drop: &str, user: &str) -> String {
    admitted(app, drop, user).await["admission"].as_str().unwrap().to_owned()
}

async fn buys(app: &TestApp, sale: &str, user: &str, token: &str) {
    let response = buy_with(app, sale, user, Some(token)).await;
    assert_eq!(response.status(), 201, "{user} buys {sale}: {}", response.text().await.unwrap());
}

async fn hash(app: &TestApp, key: &str) -> HashMap<String, String> {
    app.redis.clone().hgetall(key).await.unwrap()
}

/// Every size drained into Postgres and consistent: stock adds up in units, Redis and Postgres
/// name the same buyers.
async fn every_size_adds_up(app: &TestApp, drop: &str) {
    for size in SIZES {
        let sale = format!("{drop}.{size}");
        app.wait_for_drain(&sale).await;
        let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
        let check: Value = app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
        assert_eq!(check["consistent"], true, "{sale}: {check}");
    }
}

/// What a repaired size of the drop must be: it asks the drop's admission and nobody buys past
/// the limit or twice; a token of the drop's line buys it.
async fn sells_only_through_the_line(app: &TestApp, drop: &str, sale: &str, newcomer: &str) {
    let meta = hash(app, &app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(sale).unwrap()).meta).await;
    assert_eq!(meta.get("line").map(String::as_str), Some("drop"), "{sale}: {meta:?}");
    assert_eq!(meta.get("queue_rate").map(String::as_str), Some("1000"), "{sale}: {meta:?}");
    refused_with(buy_with(app, sale, newcomer, None).await, 403, "not_admitted", "no token").await;
    let token = token(app, drop, newcomer).await;
    buys(app, sale, newcomer, &token).await;
}

#[tokio::test]
async fn a_drop_redis_lost_comes_back_with_its_line_its_limit_and_its_stock() {
    let app = spawn_app().await;
    let drop = seed_drop(&app).await;
    let prefix = app.config.key_prefix.clone();
    let line_meta = format!("{prefix}:{{group:{drop}}}:line:meta");
    let seed = hash(&app, &line_meta).await["queue_seed"].clone();
    let alice = token(&app, &drop, "alice").await;
    let bob = token(&app, &drop, "bob").await;
    buys(&app, &format!("{drop}.40"), "alice", &alice).await;
    buys(&app, &format!("{drop}.41"), "alice", &alice).await;
    buys(&app, &format!("{drop}.40"), "bob", &bob).await;
    every_size_adds_up(&app, &drop).await;

    // A size's keys (and the group's holdings, which lose_sale takes with them), gone.
    let size = format!("{drop}.40");
    lose_sale(&app, &size).await;
    let report = repair(&app, &size).await;
    assert!(report.sale_restored && report.buyers_restored == 2, "{report:?}");
    sells_only_through_the_line(&app, &drop, &size, "carol").await;
    refused_with(buy_with(&app, &size, "bob", Some(&bob)).await, 409, "already_purchased", "bob again").await;
    let over = buy_with(&app, &format!("{drop}.42"), "alice", Some(&alice)).await;
    refused_with(over, 409, "limit_reached", "alice holds 40 and 41: a third unit").await;
    every_size_adds_up(&app, &drop).await;

    // The whole slot, gone: every size, the group's meta and holdings, the line.
    let mut redis = app.redis.clone();
    let keys: Vec<String> = redis.keys(format!("{prefix}:{{group:{drop}}}:*")).await.unwrap();
    assert!(keys.len() > 10, "{keys:?}");
    let _: () = redis.del(&keys).await.unwrap();
    for (size, newcomer) in [("42", "dave"), ("40", "erin")] {
        let sale = format!("{drop}.{size}");
        let report = repair(&app, &sale).await;
        assert!(report.sale_restored, "{report:?}");
        sells_only_through_the_line(&app, &drop, &sale, newcomer).await;
    }
    // 41 is not repaired yet, yet alice's unit of it counts: the group's limit reads Postgres.
    let over = buy_with(&app, &format!("{drop}.42"), "alice", Some(&alice)).await;
    refused_with(over, 409, "limit_reached", "alice after the slot's loss").await;
    let group = hash(&app, &format!("{prefix}:{{group:{drop}}}:meta")).await;
    assert_eq!(
        (group.get("drop").map(String::as_str), group.get("per_buyer").map(String::as_str)),
        (Some("1"), Some("2"))
    );
    let line = hash(&app, &line_meta).await;
    assert_eq!(line.get("queue_seed"), Some(&seed), "the line's shuffle seed, as seeded: {line:?}");
    assert_eq!(line.get("stock_initial").map(String::as_str), Some("12"), "{line:?}");
    let report = repair(&app, &format!("{drop}.41")).await;
    assert!(report.sale_restored && report.buyers_restored == 1, "{report:?}");
    refused_with(buy_with(&app, &size, "carol", None).await, 403, "not_admitted", "no token after").await;
    for (sale, user, token) in [("40", "bob", &bob), ("41", "alice", &alice)] {
        let again = buy_with(&app, &format!("{drop}.{sale}"), user, Some(token)).await;
        refused_with(again, 409, "already_purchased", user).await;
    }
    every_size_adds_up(&app, &drop).await;
    let mut sold = vec![];
    for size in SIZES {
        sold.push(app.status(&format!("{drop}.{size}")).await.sold);
    }
    assert_eq!(sold, [4, 1, 1], "40: alice, bob, carol, erin; 41: alice; 42: dave");
}

/// A size whose meta alone Redis lost (an eviction, a clean-up by hand) while its stock and buyers
/// stayed: the repair writes the meta back over the stock its buyers left, never the whole stock
/// again under them (which sold every unit of theirs a second time).
#[tokio::test]
async fn a_size_whose_meta_alone_was_lost_is_repaired_over_the_stock_its_buyers_left() {
    let app = spawn_app().await;
    let drop = seed_drop(&app).await;
    let size = format!("{drop}.40");
    for user in ["alice", "bob"] {
        let token = token(&app, &drop, user).await;
        buys(&app, &size, user, &token).await;
    }
    every_size_adds_up(&app, &drop).await;
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&size).unwrap());
    let _: () = app.redis.clone().del(&keys.meta).await.unwrap();

    let report = repair(&app, &size).await;
    assert!(report.sale_restored, "{report:?}");
    for user in ["carol", "dave"] {
        let token = token(&app, &drop, user).await;
        buys(&app, &size, user, &token).await;
    }
    let erin = token(&app, &drop, "erin").await;
    refused_with(buy_with(&app, &size, "erin", Some(&erin)).await, 410, "sold_out", "a fifth pair of 4").await;
    every_size_adds_up(&app, &drop).await;
}
