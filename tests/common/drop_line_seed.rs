//! STAND-IN for part A's drop seed (`PUT /admin/drops/{drop}`): the lead replaces it at the merge.

use redis::AsyncCommands;
use serde_json::json;
use time::OffsetDateTime;

use seckill::redis::keys::LineKeys;

use super::Probe;

/// A fresh drop id (no `.`).
pub fn new_drop_id() -> String {
    format!("drop-{}", uuid::Uuid::now_v7().simple())
}

/// STAND-IN for part A's drop seed (`PUT /admin/drops/{drop}`, lua/drop_seed.lua), which the lead
/// puts here at the merge: seeds each size `<drop>.<size>` with today's group seed (open now,
/// `stock` each, `per_buyer` across the drop), then writes what the design's contract says a drop
/// with a waiting room holds: the line's meta (started a second ago, `rate` a second, a minute's
/// admissions, `challenge_cost` if any) and its queue state's seed, and in each size's meta
/// `queue_rate` (so lua/purchase.lua asks an admission) and `line` = `drop`.
pub async fn seed_drop_line(
    app: &Probe,
    sizes: &[&str],
    stock: i64,
    per_buyer: u32,
    (rate, challenge_cost): (u32, Option<u32>),
) -> String {
    let drop = seed_drop_sizes(app, sizes, stock, per_buyer).await;
    let prefix = app.store.keyspace().prefix();
    let line = LineKeys::of_drop(prefix, &drop);
    let now_ms = OffsetDateTime::now_utc().unix_timestamp() * 1000;
    let mut fields = vec![
        ("stock_initial", (stock * sizes.len() as i64).to_string()),
        ("starts_at_ms", (now_ms - 1000).to_string()),
        ("queue_opens_at_ms", (now_ms - 2000).to_string()),
        ("queue_rate", rate.to_string()),
        ("queue_ttl_ms", "60000".to_owned()),
    ];
    fields.extend(challenge_cost.map(|cost| ("challenge_cost", cost.to_string())));
    let mut redis = app.redis.clone();
    let _: () = redis.hset_multiple(&line.meta, &fields).await.unwrap();
    let _: () = redis.hset(&line.queue.state, "seed", "ab".repeat(32)).await.unwrap();
    for size in sizes {
        let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&format!("{drop}.{size}")).unwrap());
        let _: () = redis
            .hset_multiple(&keys.meta, &[("queue_rate", rate.to_string()), ("line", "drop".into())])
            .await
            .unwrap();
    }
    drop
}

/// The sizes alone, seeded with today's group seed: a drop without a line.
pub async fn seed_drop_sizes(app: &Probe, sizes: &[&str], stock: i64, per_buyer: u32) -> String {
    let drop = new_drop_id();
    for size in sizes {
        let response = app.seed(&format!("{drop}.{size}"), json!({"stock": stock, "per_buyer": per_buyer})).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    drop
}
