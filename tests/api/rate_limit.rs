//! The per-client limiter in front of POST /buy (the tests' algorithm: sliding log, see helpers); what differs
//! between the algorithms is in `limiters`.

use std::time::Duration;

use redis::AsyncCommands;
use seckill::domain::SaleId;
use seckill::limiter::{Algorithm, RateLimit, Scope};
use seckill::redis::keys::{hash_tag, rate_limit_key, sale_rate_limit_key};

use crate::helpers::{assert_error, new_sale_id, spawn_app_with};

fn limit(n: u32, window_ms: u64) -> RateLimit {
    RateLimit { limit: n, window: Duration::from_millis(window_ms) }
}

#[tokio::test]
async fn a_client_over_its_limit_gets_429_with_retry_after_and_buys_nothing() {
    let app = spawn_app_with(|c| c.rate_limit = limit(3, 60_000), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    for i in 0..3 {
        assert_eq!(app.buy(&sale, &format!("u{i}")).await.status(), 201);
    }

    let refused = app.buy(&sale, "u3").await;

    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after} lies within the window");
    assert_error(refused, 429, "rate_limited").await;
    assert_eq!(app.status(&sale).await.sold, 3);
}

#[tokio::test]
async fn a_refused_client_is_answered_from_memory_until_the_limiter_would_admit_it() {
    // A window wide enough that a loaded host asks again well within it.
    let app = spawn_app_with(|c| c.rate_limit = limit(1, 4_000), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    assert_eq!(app.buy(&sale, "u0").await.status(), 201);
    assert_error(app.buy(&sale, "u1").await, 429, "rate_limited").await;

    // Empty the limiter's key behind the service's back: asking Redis would admit the next one.
    let id = SaleId::parse(&sale).unwrap();
    let key =
        sale_rate_limit_key(&app.config.key_prefix, &id, Algorithm::SlidingLog.name(), "127.0.0.1".parse().unwrap());
    assert!(app.redis.clone().exists::<_, bool>(&key).await.unwrap(), "the limit counts on {key}");
    let _: i64 = app.redis.clone().del(&key).await.unwrap();
    let refused = app.buy(&sale, "u2").await;
    assert!(refused.headers().contains_key("retry-after"));
    assert_error(refused, 429, "rate_limited").await;

    tokio::time::sleep(Duration::from_millis(4_100)).await;
    assert_eq!(app.buy(&sale, "u3").await.status(), 201, "admitted again once the window has passed");
}

#[tokio::test]
async fn refused_requests_are_not_recorded_and_the_window_slides() {
    // A window wide enough that five sequential requests surely fit in it, even on a loaded machine.
    let app = spawn_app_with(|c| c.rate_limit = limit(2, 3_000), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let statuses = |n: usize, tag: &'static str| {
        let app = &app;
        let sale = &sale;
        async move {
            let mut out = vec![];
            for i in 0..n {
                out.push(app.buy(sale, &format!("{tag}{i}")).await.status().as_u16());
            }
            out
        }
    };
    assert_eq!(statuses(5, "a").await, [201, 201, 429, 429, 429]);
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    // Had the refused requests been recorded, this window would still be full.
    assert_eq!(statuses(3, "b").await, [201, 201, 429]);
}

#[tokio::test]
async fn the_limiter_key_expires_with_its_window() {
    let app = spawn_app_with(|c| c.rate_limit = limit(5, 2_000), false).await;
    let sale = new_sale_id();
    let _ = app.buy(&sale, "u").await;
    let sale = SaleId::parse(&sale).unwrap();
    let key =
        sale_rate_limit_key(&app.config.key_prefix, &sale, Algorithm::SlidingLog.name(), "127.0.0.1".parse().unwrap());
    let ttl: i64 = app.redis.clone().pttl(&key).await.unwrap();
    assert!((1..=2_000).contains(&ttl), "pttl {ttl}");
}

#[tokio::test]
async fn forwarded_for_headers_are_ignored_from_untrusted_peers() {
    let app = spawn_app_with(|c| c.rate_limit = limit(2, 60_000), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let mut codes = vec![];
    for i in 0..6 {
        let response = app
            .client
            .post(app.url("/buy"))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .json(&serde_json::json!({"sale_id": sale, "user_id": format!("u{i}")}))
            .send()
            .await
            .unwrap();
        codes.push(response.status().as_u16());
    }
    assert_eq!(codes, [201, 201, 429, 429, 429, 429], "spoofed addresses do not escape the limit");
}

#[tokio::test]
async fn behind_a_trusted_proxy_the_forwarded_client_is_the_one_limited() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = limit(2, 60_000);
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let buy_as = |client: &'static str, user: String| {
        let app = &app;
        let sale = &sale;
        async move {
            app.client
                .post(app.url("/buy"))
                .header("x-forwarded-for", client)
                .json(&serde_json::json!({"sale_id": sale, "user_id": user}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    };
    let mut first = vec![];
    for i in 0..3 {
        first.push(buy_as("203.0.113.1", format!("a{i}")).await);
    }
    assert_eq!(first, [201, 201, 429]);
    // Another client behind the same proxy has its own quota.
    assert_eq!(buy_as("203.0.113.2", "b0".into()).await, 201);
}

#[tokio::test]
async fn with_the_sale_scope_a_client_and_a_buyer_count_per_sale() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = limit(2, 60_000);
            c.user_rate_limit = Some(limit(1, 60_000));
            c.rate_limit_scope = Scope::Sale;
        },
        false,
    )
    .await;
    let (a, b) = (new_sale_id(), new_sale_id());
    app.seed_stock(&a, 100).await;
    app.seed_stock(&b, 100).await;
    let status = |sale: &str, user: &str| {
        let (app, sale, user) = (&app, sale.to_owned(), user.to_owned());
        async move { app.buy(&sale, &user).await.status().as_u16() }
    };

    assert_eq!(status(&a, "u1").await, 201);
    assert_eq!(status(&a, "u1").await, 429, "the buyer's one request for sale a is spent");
    assert_eq!(status(&b, "u1").await, 201, "sale b counts the buyer apart");
    assert_eq!(status(&a, "u2").await, 429, "the client's two requests for sale a are spent");
    assert_eq!(status(&b, "u3").await, 201, "sale b counts the client apart, also after a refusal on a");
    assert_eq!(status(&b, "u4").await, 429);

    // The keys share the sale's hash slot, so on a Cluster too the limits ran with the purchase.
    let key = sale_rate_limit_key(
        &app.config.key_prefix,
        &SaleId::parse(&a).unwrap(),
        "sliding-log",
        "127.0.0.1".parse().unwrap(),
    );
    assert_eq!(hash_tag(&key), format!("sale:{a}"));
    let recorded: i64 = app.redis.clone().zcard(&key).await.unwrap();
    assert_eq!(recorded, 2, "sale a's count holds the two admitted requests, not the refused ones");
    assert_eq!((app.status(&a).await.sold, app.status(&b).await.sold), (1, 2));
}

/// The default scope on a sharded sale: each buyer's first call goes to its home shard, and the
/// limits count there, in that shard's slot, so they ride in that one call on a Cluster too.
#[tokio::test]
async fn by_default_the_limits_count_on_the_shard_the_purchase_goes_to() {
    let app = spawn_app_with(|c| c.rate_limit_scope = Scope::default(), false).await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, serde_json::json!({"stock": 60, "shards": 3})).await.status(), 200);
    // The instance's first purchase assumes an unsharded sale and counts on shard 0 (the script
    // then answers wrong_shards, the layout is read and the purchase asked again, not counted twice).
    assert_eq!(app.buy(&sale, "first").await.status(), 201);
    let id = SaleId::parse(&sale).unwrap();
    let layout = app.store.read_layout(&id).await.unwrap().expect("seeded");
    let prefix = &app.config.key_prefix;
    let counts = || async {
        let mut counts = vec![];
        for keys in layout.keys(prefix, &id) {
            let key = format!("{prefix}:{{{}}}:ratelimit:sliding-log:127.0.0.1", hash_tag(&keys.meta));
            counts.push(app.redis.clone().zcard::<_, usize>(&key).await.unwrap());
        }
        counts
    };
    let before = counts().await;
    assert_eq!(before.iter().sum::<usize>(), 1, "the first purchase counted once: {before:?}");

    let users: Vec<String> = (0..12).map(|i| format!("u{i}")).collect();
    for user in &users {
        assert_eq!(app.buy(&sale, user).await.status(), 201);
    }
    let after = counts().await;
    for (shard, (before, after)) in before.iter().zip(&after).enumerate() {
        let homed = users
            .iter()
            .filter(|u| layout.visit_order(&seckill::domain::UserId::parse(u).unwrap()).next() == Some(shard))
            .count();
        assert_eq!(after - before, homed, "shard {shard} counts the requests of the buyers at home there");
    }
    assert!(after[1..].iter().sum::<usize>() > 0, "some buyers are at home on shards 1 and 2: {after:?}");
    let global = rate_limit_key(prefix, "sliding-log", "127.0.0.1".parse().unwrap());
    assert!(!app.redis.clone().exists::<_, bool>(&global).await.unwrap(), "nothing counted across sales");
}
