//! A group whose slot Redis lost (its meta and its buyers' holdings with it): a sale of the group
//! seeded before the lost sales are repaired would start the holdings from nothing, and a buyer at
//! the group's limit could buy past it. Such a seed is refused (409 `sale_has_orders`) until the
//! repair brings the group back.

use redis::AsyncCommands;
use serde_json::json;

use crate::helpers::{assert_error, new_sale_id, spawn_app};
use crate::redis_loss::repair;

#[tokio::test]
async fn a_sale_of_a_group_redis_lost_is_not_seeded_over_its_other_sales_orders() {
    let app = spawn_app().await;
    let group = new_sale_id();
    let [a, c] = ["a", "c"].map(|size| format!("{group}.{size}"));
    assert_eq!(app.seed(&a, json!({"stock": 5, "per_buyer": 1})).await.status(), 200);
    assert_eq!(app.buy(&a, "u").await.status(), 201);
    app.wait_for_drain(&a).await;
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
