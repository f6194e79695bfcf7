//! POST /buy: every outcome of the purchase path.

use std::collections::BTreeSet;

use serde_json::json;
use time::{Duration as TimeDelta, OffsetDateTime, format_description::well_known::Rfc3339};
use uuid::Uuid;

use crate::helpers::{PrivateRedis, assert_error, new_sale_id, spawn_app, spawn_app_with};

#[tokio::test]
async fn a_purchase_answers_201_with_a_v7_order_id_and_the_order_reaches_postgres() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;

    let response = app.buy(&sale, "alice").await;

    assert_eq!(response.status(), 201);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["sale_id"], sale.as_str());
    assert_eq!(body["user_id"], "alice");
    let order_id: Uuid = body["order_id"].as_str().unwrap().parse().unwrap();
    assert_eq!(order_id.get_version_num(), 7);
    let status = app.assert_invariants(&sale, &BTreeSet::from([order_id])).await;
    assert_eq!((status.stock_left, status.sold, status.persisted), (9, 1, Some(1)));
    let stored: (String, String) = sqlx::query_as("select sale_id, user_id from orders where order_id = $1")
        .bind(order_id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, (sale.clone(), "alice".to_owned()));
}

#[tokio::test]
async fn a_second_purchase_by_the_same_user_is_409_and_takes_no_stock() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    assert_eq!(app.buy(&sale, "bob").await.status(), 201);

    assert_error(app.buy(&sale, "bob").await, 409, "already_purchased").await;

    let status = app.assert_invariants(&sale, &BTreeSet::new()).await;
    assert_eq!((status.stock_left, status.sold), (4, 1));
}

/// A buyer whose answer was lost (a 503 `outcome_unknown`) retries after the sale ended: they
/// hear of their order, not `sale_ended`, which would say that nothing was bought.
#[tokio::test]
async fn a_buyer_asking_again_after_the_end_hears_of_their_order() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    let bought = app.buy(&sale, "bob").await;
    assert_eq!(bought.status(), 201);
    let order: serde_json::Value = bought.json().await.unwrap();
    // The sale's end, as Redis reads it, moved into the past.
    let keys =
        seckill::redis::keys::SaleKeys::new(&app.config.key_prefix, &seckill::domain::SaleId::parse(&sale).unwrap());
    let _: () = redis::AsyncCommands::hset(&mut app.redis.clone(), &keys.meta, "ends_at_ms", 1).await.unwrap();

    let again = app.buy(&sale, "bob").await;
    assert_eq!(again.status(), 409);
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!((&again["error"], &again["order_id"]), (&json!("already_purchased"), &order["order_id"]), "{again}");
    assert_error(app.buy(&sale, "carol").await, 403, "sale_ended").await;
}

#[tokio::test]
async fn buying_when_stock_is_gone_is_410_and_stock_never_goes_negative() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(app.buy(&sale, "first").await.status(), 201);

    assert_error(app.buy(&sale, "second").await, 410, "sold_out").await;
    assert_error(app.buy(&sale, "third").await, 410, "sold_out").await;
    // The buyer who got the last item is told "already purchased", not "sold out".
    assert_error(app.buy(&sale, "first").await, 409, "already_purchased").await;

    let status = app.assert_invariants(&sale, &BTreeSet::new()).await;
    assert_eq!((status.stock_left, status.sold), (0, 1));
}

#[tokio::test]
async fn a_sale_seeded_with_zero_stock_is_sold_out() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 0).await;
    assert_error(app.buy(&sale, "u").await, 410, "sold_out").await;
}

#[tokio::test]
async fn an_unknown_sale_is_404() {
    let app = spawn_app().await;
    assert_error(app.buy(&new_sale_id(), "alice").await, 404, "unknown_sale").await;
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap()
}

#[tokio::test]
async fn a_sale_outside_its_window_is_403_and_sells_nothing() {
    let app = spawn_app().await;
    let now = OffsetDateTime::now_utc();
    let future = new_sale_id();
    let past = new_sale_id();
    let seeded = app.seed(&future, json!({"stock": 3, "starts_at": rfc3339(now + TimeDelta::hours(1))})).await;
    assert_eq!(seeded.status(), 200);
    // Long enough for the seed to arrive before it on a loaded host (500 ms did not at load 8),
    // counted from just before that seed.
    let ended_at = OffsetDateTime::now_utc() + TimeDelta::milliseconds(3_000);
    let seeded = app
        .seed(&past, json!({"stock": 3, "starts_at": rfc3339(now - TimeDelta::hours(2)), "ends_at": rfc3339(ended_at)}))
        .await;
    assert_eq!(seeded.status(), 200);
    let already_ended = json!({"stock": 3, "starts_at": rfc3339(now - TimeDelta::hours(2)), "ends_at": rfc3339(now - TimeDelta::hours(1))});
    assert_error(app.seed(&new_sale_id(), already_ended).await, 400, "invalid_request").await;
    tokio::time::sleep((ended_at - OffsetDateTime::now_utc()).try_into().unwrap_or_default()).await;

    assert_error(app.buy(&future, "alice").await, 403, "sale_not_started").await;
    assert_error(app.buy(&past, "alice").await, 403, "sale_ended").await;

    for sale in [&future, &past] {
        let status = app.status(sale).await;
        assert_eq!((status.stock_left, status.sold), (3, 0), "{sale}");
    }
}

#[tokio::test]
async fn a_sale_that_has_started_and_not_ended_sells() {
    let app = spawn_app().await;
    let now = OffsetDateTime::now_utc();
    let sale = new_sale_id();
    let body = json!({"stock": 1, "starts_at": rfc3339(now - TimeDelta::minutes(1)), "ends_at": rfc3339(now + TimeDelta::hours(1))});
    assert_eq!(app.seed(&sale, body).await.status(), 200);
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);
}

#[tokio::test]
async fn malformed_purchases_are_4xx_json_and_change_nothing() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    let long_user = "u".repeat(129);
    let long_sale = "s".repeat(65);
    let huge = format!(r#"{{"sale_id":"{sale}","user_id":"{}"}}"#, "x".repeat(8 * 1024));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("not json", "buy me".into(), 400, "invalid_request"),
        ("truncated", format!(r#"{{"sale_id":"{sale}","user_id":"#), 400, "invalid_request"),
        ("empty body", String::new(), 400, "invalid_request"),
        ("array", "[]".into(), 400, "invalid_request"),
        // Issue 39: serde reads a struct from a sequence of its fields; a body is an object.
        ("array of the fields", format!(r#"["{sale}","mallory"]"#), 400, "invalid_request"),
        ("string", r#""mallory""#.into(), 400, "invalid_request"),
        ("missing user", format!(r#"{{"sale_id":"{sale}"}}"#), 400, "invalid_request"),
        ("missing sale", r#"{"user_id":"a"}"#.into(), 400, "invalid_request"),
        ("number user", format!(r#"{{"sale_id":"{sale}","user_id":42}}"#), 400, "invalid_request"),
        ("null sale", r#"{"sale_id":null,"user_id":"a"}"#.into(), 400, "invalid_request"),
        ("unknown field", format!(r#"{{"sale_id":"{sale}","user_id":"a","qty":2}}"#), 400, "invalid_request"),
        ("empty user", format!(r#"{{"sale_id":"{sale}","user_id":""}}"#), 400, "invalid_request"),
        ("user too long", format!(r#"{{"sale_id":"{sale}","user_id":"{long_user}"}}"#), 400, "invalid_request"),
        ("control char", format!(r#"{{"sale_id":"{sale}","user_id":"a\u0007b"}}"#), 400, "invalid_request"),
        ("braces in sale", r#"{"sale_id":"{x}","user_id":"a"}"#.into(), 400, "invalid_request"),
        ("sale too long", format!(r#"{{"sale_id":"{long_sale}","user_id":"a"}}"#), 400, "invalid_request"),
        ("empty sale", r#"{"sale_id":"","user_id":"a"}"#.into(), 400, "invalid_request"),
        ("huge body", huge, 413, "payload_too_large"),
    ];
    for (name, body, status, code) in cases {
        let response = app
            .client
            .post(app.url("/buy"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), status, "case {name:?}");
        assert_error(response, status, code).await;
    }

    let wrong_type =
        app.client.post(app.url("/buy")).header("content-type", "text/plain").body("{}").send().await.unwrap();
    assert_error(wrong_type, 415, "unsupported_media_type").await;
    assert_error(app.client.get(app.url("/buy")).send().await.unwrap(), 405, "method_not_allowed").await;
    assert_error(app.client.post(app.url("/nope")).send().await.unwrap(), 404, "not_found").await;

    let status = app.status(&sale).await;
    assert_eq!((status.stock_left, status.sold, status.queued), (5, 0, 0));
    assert!(app.buyers(&sale).await.is_empty());
}

/// Issue 39: `alice` followed by an invisible character that is not a format character (a
/// combining grapheme joiner, a variation selector, a Hangul filler, a supplementary variation
/// selector: Default_Ignorable_Code_Point), and `zoé` spelled decomposed (NFD), were each
/// another buyer. They are refused and buy nothing; the NFC spelling buys once.
#[tokio::test]
async fn invisible_and_decomposed_spellings_of_a_buyer_are_refused_and_buy_nothing() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);
    assert_eq!(app.buy(&sale, "zo\u{e9}").await.status(), 201);
    for user in ["alice\u{34f}", "alice\u{fe0f}", "alice\u{3164}", "alice\u{e0100}", "zoe\u{301}"] {
        let response = app.buy(&sale, user).await;
        assert_eq!(response.status(), 400, "{user:?}");
        assert_error(response, 400, "invalid_request").await;
    }
    let status = app.wait_for_drain(&sale).await;
    assert_eq!((status.stock_left, status.sold), (8, 2), "{status:?}");
    let both = BTreeSet::from(["alice".to_owned(), "zo\u{e9}".to_owned()]);
    assert_eq!(app.buyers(&sale).await, both);
    let stored: BTreeSet<String> = app.order_users(&sale).await.into_iter().map(|(user, _)| user).collect();
    assert_eq!(stored, both);
}

#[tokio::test]
async fn purchases_answer_503_when_redis_is_unreachable() {
    // A port nothing listens on: the TCP connect is refused at once.
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    assert_error(app.buy(&new_sale_id(), "alice").await, 503, "unavailable").await;
}

#[tokio::test]
async fn purchases_and_limiting_survive_a_script_cache_flush() {
    // A Redis of its own: the flush would take the scripts of every test running beside it.
    let private = PrivateRedis::start();
    let app = spawn_app_with(
        |c| {
            c.redis_url = private.url().into();
            c.rate_limit = seckill::limiter::RateLimit { limit: 100, window: std::time::Duration::from_secs(1) };
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    assert_eq!(app.buy(&sale, "before").await.status(), 201);

    let mut redis = redis::Client::open(private.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut redis).await.unwrap();

    assert_eq!(app.buy(&sale, "after").await.status(), 201);
    let status = app.status(&sale).await;
    assert_eq!((status.sold, status.stock_left), (2, 3));
}

/// `buy.lua` writes nothing when a key it would write is damaged: the receipts key of another
/// type (the order entry it had just added is deleted again) or a stock DECR could not take.
#[tokio::test]
async fn a_purchase_into_a_damaged_receipts_key_or_stock_writes_nothing() {
    use redis::AsyncCommands;
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    assert_eq!(app.buy(&sale, "before").await.status(), 201);
    let keys = app.store.keyspace().sale_keys(&seckill::domain::SaleId::parse(&sale).unwrap());
    let mut redis = app.redis.clone();
    let receipts: std::collections::HashMap<String, String> = redis.hgetall(&keys.receipts).await.unwrap();

    let _: () = redis.set(&keys.receipts, "not a hash").await.unwrap();
    let refused = app.buy(&sale, "into-damaged-receipts").await;
    assert!(refused.status().is_server_error(), "{}", refused.status());
    let _: i64 = redis.del(&keys.receipts).await.unwrap();
    let _: () = redis.hset_multiple(&keys.receipts, &receipts.into_iter().collect::<Vec<_>>()).await.unwrap();

    for damaged in ["009", "9.5", "1234567890123456789"] {
        let _: () = redis.set(&keys.stock, damaged).await.unwrap();
        let refused = app.buy(&sale, "into-damaged-stock").await;
        assert!(refused.status().is_server_error(), "stock {damaged}: {}", refused.status());
        let stock: String = redis.get(&keys.stock).await.unwrap();
        assert_eq!(stock, damaged, "the stock is left as it was");
    }
    let _: () = redis.set(&keys.stock, 9).await.unwrap();

    assert_eq!(app.buy(&sale, "after").await.status(), 201);
    app.wait_for_drain(&sale).await;
    let buyers: BTreeSet<String> = redis.smembers(&keys.buyers).await.unwrap();
    let ordered: Vec<String> = sqlx::query_scalar("select user_id from orders where sale_id = $1")
        .bind(&sale)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    let ordered: BTreeSet<String> = ordered.into_iter().collect();
    let expected: BTreeSet<String> = ["before", "after"].map(String::from).into();
    assert_eq!((buyers, ordered), (expected.clone(), expected), "no buyer, entry or order of the refused");
    let stock: i64 = redis.get(&keys.stock).await.unwrap();
    assert_eq!(stock, 8);
}
