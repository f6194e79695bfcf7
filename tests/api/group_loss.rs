//! A group whose slot Redis lost (its meta and its buyers' holdings with it): a sale of the group
//! seeded before the lost sales are repaired would start the holdings from nothing, and a buyer at
//! the group's limit could buy past it. Such a seed is refused (409 `sale_has_orders`) until the
//! repair brings the group back.

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{TestApp, assert_error, new_sale_id, spawn_app};
use crate::redis_loss::repair;

/// A group of one buyer per group: its sale `a` sold to `u` and drained; `c` a sale not seeded yet.
async fn group_with_a_buyer(app: &TestApp) -> (String, String, String) {
    let group = new_sale_id();
    let [a, c] = ["a", "c"].map(|size| format!("{group}.{size}"));
    assert_eq!(app.seed(&a, json!({"stock": 5, "per_buyer": 1})).await.status(), 200);
    assert_eq!(app.buy(&a, "u").await.status(), 201);
    app.wait_for_drain(&a).await;
    (group, a, c)
}

#[tokio::test]
async fn a_sale_of_a_group_redis_lost_is_not_seeded_over_its_other_sales_orders() {
    let app = spawn_app().await;
    let (group, a, c) = group_with_a_buyer(&app).await;
    let mut redis = app.redis.clone();
    let slot: Vec<String> = redis.keys(format!("{}:{{group:{group}}}:*", app.config.key_prefix)).await.unwrap();
    assert!(slot.len() > 3, "{slot:?}");
    let _: () = redis.del(&slot).await.unwrap();

    assert_error(app.seed(&c, json!({"stock": 5, "per_buyer": 1})).await, 409, "sale_has_orders").await;
    assert!(repair(&app, &a).await.sale_restored);
    assert_eq!(app.seed(&c, json!({"stock": 5, "per_buyer": 1})).await.status(), 200, "the group is back");
    assert_error(app.buy(&c, "u").await, 409, "limit_reached").await;
    assert_eq!(app.buy(&c, "v").await.status(), 201);
}

/// A group that lost only its meta (an eviction, a clean-up by hand) keeps its buyers' holdings:
/// a new sale of it is seeded (the seed writes the meta back) and the group's limit still holds.
#[tokio::test]
async fn a_group_that_lost_only_its_meta_takes_a_new_sale_and_keeps_its_limit() {
    let app = spawn_app().await;
    let (_, _, c) = group_with_a_buyer(&app).await;
    let meta = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&c).unwrap()).group_meta;
    let _: () = app.redis.clone().del(&meta).await.unwrap();

    assert_eq!(app.seed(&c, json!({"stock": 5, "per_buyer": 1})).await.status(), 200);
    assert_error(app.buy(&c, "u").await, 409, "limit_reached").await;
    assert_eq!(app.buy(&c, "v").await.status(), 201);
}
