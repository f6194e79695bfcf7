//! A sharded sale whose shard 0 alone Redis lost (a failover of its master to an empty replica),
//! while its other shards kept their buyers and orders not yet in Postgres. Shard 0's meta holds
//! the layout, so the sale is lost; the repair seeds it again, unsharded, from its `sales` row.
//! It must not do so over orders still queued in the kept shards (their buyers could buy again,
//! and one order of each pair would be dropped, a 201 lost), nor let those shards sell meanwhile.

use std::collections::BTreeSet;

use redis::AsyncCommands;
use seckill::domain::UserId;
use seckill::purchase::shards::home_shard;
use seckill::redis::keys::{SaleKeys, shards_registry_key};
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, spawn_app_with};
use crate::redis_loss::repair;
use crate::retire::retire;
use crate::shards::{seed_sharded, shard_keys};

/// Buyers whose home shard of 3 is `shard`.
fn homed_on(shard: usize) -> impl Iterator<Item = String> {
    (0..).map(move |i| format!("s{shard}-{i}")).filter(move |u| home_shard(&UserId::parse(u).unwrap(), 3) == shard)
}

/// Buys as `user`, asserting 201; the order id.
async fn buy(app: &TestApp, sale: &str, user: &str) -> Uuid {
    let response = app.buy(sale, user).await;
    assert_eq!(response.status(), 201, "{user} buys");
    let body: Value = response.json().await.unwrap();
    body["order_id"].as_str().unwrap().parse().unwrap()
}

/// Runs a worker until the streams of `shards` are empty: every order in them is in Postgres.
async fn copy_orders_of(app: &TestApp, shards: &[SaleKeys]) {
    let mut worker = app.manual_worker("w", std::time::Duration::from_secs(30));
    for _ in 0..50 {
        worker.step().await.unwrap();
        let mut left = 0;
        for keys in shards {
            left += app.redis.clone().xlen::<_, u64>(&keys.orders).await.unwrap();
        }
        if left == 0 {
            return;
        }
    }
    panic!("the worker did not copy the kept shards' orders");
}

#[tokio::test]
async fn a_repair_after_shard_0_alone_was_lost_waits_for_the_kept_shards_orders_and_sells_nothing_twice() {
    // No worker of its own: the test decides when orders reach Postgres.
    let app = spawn_app_with(|_| {}, false).await;
    let sale = seed_sharded(&app, 9, 3).await; // 3 units a shard
    let shards = shard_keys(&app, &sale).await;
    let mut confirmed = BTreeSet::new();
    let early: Vec<String> = homed_on(0).take(2).chain(homed_on(1).take(1)).collect();
    for user in &early {
        confirmed.insert(buy(&app, &sale, user).await);
    }
    app.commit_by_hand(&sale).await;
    // Bought on shards 1 and 2, still queued there when Redis loses shard 0.
    let late: Vec<String> = homed_on(1).skip(1).take(1).chain(homed_on(2).take(2)).collect();
    for user in &late {
        confirmed.insert(buy(&app, &sale, user).await);
    }
    let _: () = app.redis.clone().del(&shards[0].every()).await.unwrap();

    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let refused = app.client.post(&url).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(refused.headers()["retry-after"], "5");
    assert_error(refused, 503, "orders_queued").await;
    // The kept shards are ended, so an instance that still keeps the layout sells nothing there.
    for keys in &shards[1..] {
        let ends: Option<i64> = app.redis.clone().hget(&keys.meta, "ends_at_ms").await.unwrap();
        assert!(ends.is_some(), "{} is ended by the repair", keys.meta);
    }
    let newcomer = homed_on(2).nth(2).unwrap();
    assert_ne!(app.buy(&sale, &newcomer).await.status(), 201, "nothing sells while the sale is lost");
    let sold: i64 = app.redis.clone().scard(&shards[2].buyers).await.unwrap();
    assert_eq!(sold, 2, "nothing more sold on shard 2");

    copy_orders_of(&app, &shards[1..]).await;
    let report = repair(&app, &sale).await;
    assert!(report.sale_restored, "{report:?}");
    assert_eq!(report.buyers_restored, 6, "every buyer of every shard, from Postgres: {report:?}");
    for user in early.iter().chain(&late) {
        assert_error(app.buy(&sale, user).await, 409, "already_purchased").await;
    }
    for user in homed_on(0).skip(10).take(3) {
        confirmed.insert(buy(&app, &sale, &user).await);
    }
    assert_error(app.buy(&sale, &newcomer).await, 410, "sold_out").await;
    app.commit_by_hand(&sale).await;
    let status = app.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.stock_initial, status.sold), (9, 9), "{status:?}");
    assert_eq!(app.order_ids(&sale).await, confirmed, "9 orders for a stock of 9, each a 201");

    // The retirement takes the ended shards with the sale: nothing of them is left.
    assert_eq!(retire(&app, &sale).await.status(), 200);
    for keys in &shards {
        let left: u64 = app.redis.clone().exists(&keys.every()).await.unwrap();
        assert_eq!(left, 0, "keys of {} left", keys.meta);
    }
    let registered: Vec<String> =
        app.redis.clone().smembers(shards_registry_key(&app.config.key_prefix)).await.unwrap();
    assert!(!registered.iter().any(|member| member.starts_with(&format!("{sale}:"))), "{registered:?}");
}
