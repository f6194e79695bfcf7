//! The in-process sold-out flag: sold-out answers cost no Redis call, and a re-seed clears the
//! flag on every instance.

use std::time::Duration;

use redis::AsyncCommands;
use seckill::domain::SaleId;
use seckill::limiter::RateLimit;
use serde_json::json;

use crate::helpers::{assert_error, new_sale_id, spawn_app_with, spawn_instance_of};

#[tokio::test]
async fn once_redis_said_sold_out_the_instance_answers_from_memory_410_or_409_to_a_buyer() {
    let app = spawn_app_with(|c| c.rate_limit = RateLimit { limit: 2, window: Duration::from_secs(60) }, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(app.buy(&sale, "first").await.status(), 201);
    assert_error(app.buy(&sale, "second").await, 410, "sold_out").await;
    app.wait_for_sold_out_held(2.0).await; // the instance copies the buyers: the flag and one buyer

    // Remove the sale from Redis behind the service's back: asking Redis would now answer 404,
    // and the limiter (2 per minute, both used) would answer 429.
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let _: i64 = app.redis.clone().del(&keys.all()[..]).await.unwrap();
    for i in 0..5 {
        assert_error(app.buy(&sale, &format!("late-{i}")).await, 410, "sold_out").await;
    }
    assert_error(app.buy(&sale, "first").await, 409, "already_purchased").await;
}

#[tokio::test]
async fn a_re_seed_clears_the_flag_on_the_instance_that_seeded() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 0).await;
    assert_error(app.buy(&sale, "early").await, 410, "sold_out").await;

    app.seed_stock(&sale, 3).await;

    assert_eq!(app.buy(&sale, "early").await.status(), 201);
}

#[tokio::test]
async fn a_re_seed_on_another_instance_clears_the_flag_here_by_its_event() {
    // Flags that never lapse in the test: only the seed's event can clear this one.
    let here = spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_secs(3600), false).await;
    let there = spawn_instance_of(&here).await;
    let sale = new_sale_id();
    here.seed_stock(&sale, 0).await;
    assert_error(here.buy(&sale, "u").await, 410, "sold_out").await;
    assert_error(here.buy(&sale, "u").await, 410, "sold_out").await;

    let seeded = there.seed(&sale, json!({"stock": 2})).await;
    assert_eq!(seeded.status(), 200);

    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let response = here.buy(&sale, "u").await;
        if response.status() == 201 {
            break;
        }
        assert_error(response, 410, "sold_out").await;
        assert!(tokio::time::Instant::now() < until, "the other instance's seed did not clear the flag");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A flag that lapsed and is set again starts without its old copy of the buyers. The sale's stock
/// rises behind the instance's back (a top-up whose event it missed); once its flag lapses carol
/// buys, dave hears sold out, and carol asking again hears 409 with her order: the renewed flag
/// answered 410 from the copy made before carol bought.
#[tokio::test]
async fn a_flag_set_again_after_it_lapsed_copies_the_buyers_afresh() {
    let app = spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_millis(200), true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);
    app.wait_for_drain(&sale).await; // alice's order confirmed: the copy is final
    assert_error(app.buy(&sale, "bob").await, 410, "sold_out").await;
    app.wait_for_sold_out_held(2.0).await;
    let keys = app.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap());
    let mut redis = app.redis.clone();
    let _: () = redis::pipe()
        .atomic()
        .incr(&keys.stock, 1)
        .ignore()
        .hincr(&keys.meta, "stock_initial", 1)
        .ignore()
        .query_async(&mut redis)
        .await
        .unwrap();
    // Refused from memory until the flag lapses, then bought in Redis.
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while app.buy(&sale, "carol").await.status() != 201 {
        assert!(std::time::Instant::now() < until, "carol never reached Redis");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_error(app.buy(&sale, "dave").await, 410, "sold_out").await;
    assert_error(app.buy(&sale, "carol").await, 409, "already_purchased").await;
}
