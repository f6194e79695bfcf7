//! `/buy` under each algorithm: the IETF RateLimit header fields, Retry-After, and failing closed.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;
use seckill::domain::SaleId;
use seckill::limiter::{Algorithm, RateLimit};
use seckill::redis::keys::sale_rate_limit_key;

use crate::helpers::{assert_error, new_sale_id, spawn_app_with};

/// Parses a one-member structured-field List (RFC 9651) whose item is a String with Integer
/// parameters, as both RateLimit fields are: `"buy";q=3;w=3600`.
fn parse_field(value: &str) -> (String, HashMap<String, i64>) {
    let list: sfv::List = sfv::Parser::new(value).parse().unwrap_or_else(|e| panic!("{value:?}: {e}"));
    assert_eq!(list.len(), 1, "{value:?}: one policy");
    let sfv::ListEntry::Item(item) = &list[0] else { panic!("{value:?}: an item, not an inner list") };
    let sfv::BareItem::String(name) = &item.bare_item else { panic!("{value:?}: the policy name is a String") };
    let params = item
        .params
        .iter()
        .map(|(key, value)| match value {
            sfv::BareItem::Integer(i) => (key.as_str().to_owned(), i64::from(*i)),
            other => panic!("{key:?} is not an Integer: {other:?}"),
        })
        .collect();
    (name.as_str().to_owned(), params)
}

fn header(response: &reqwest::Response, name: &str) -> (String, HashMap<String, i64>) {
    let value = response.headers().get(name).unwrap_or_else(|| panic!("no {name} header"));
    parse_field(value.to_str().expect("ASCII"))
}

#[tokio::test]
async fn every_algorithm_answers_with_the_ratelimit_fields_and_retry_after() {
    for algorithm in Algorithm::ALL {
        let app = spawn_app_with(
            |c| {
                // An hour's window: no window edge can fall inside this test.
                c.rate_limit = RateLimit { limit: 3, window: Duration::from_secs(3600) };
                c.rate_limit_algorithm = algorithm;
            },
            false,
        )
        .await;
        let sale = new_sale_id();
        app.seed_stock(&sale, 100).await;

        // The sliding counter's count weighs in the next window too: up to two windows.
        let longest = if algorithm == Algorithm::SlidingCounter { 7200 } else { 3600 };
        for i in 0..3 {
            let response = app.buy(&sale, &format!("u{i}")).await;
            assert_eq!(response.status(), 201, "{algorithm}");
            let policy = header(&response, "ratelimit-policy");
            assert_eq!(policy, ("buy".into(), HashMap::from([("q".into(), 3), ("w".into(), 3600)])), "{algorithm}");
            let (name, state) = header(&response, "ratelimit");
            assert_eq!((name.as_str(), state["r"]), ("buy", 2 - i), "{algorithm}: remaining after request {i}");
            assert!((1..=longest).contains(&state["t"]), "{algorithm}: reset {} s", state["t"]);
        }

        // Refused by Redis, then answered from memory: both carry the same fields.
        for source in ["redis", "memory"] {
            let refused = app.buy(&sale, &format!("refused-{source}")).await;
            let retry_after: i64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
            let (_, state) = header(&refused, "ratelimit");
            assert_eq!(state["r"], 0, "{algorithm} ({source})");
            assert!(
                (1..=longest).contains(&retry_after) && state["t"] >= retry_after,
                "{algorithm} ({source}): Retry-After {retry_after}, reset {}",
                state["t"]
            );
            assert!(refused.headers().contains_key("ratelimit-policy"));
            assert_error(refused, 429, "rate_limited").await;
        }
        assert_eq!(app.status(&sale).await.sold, 3, "{algorithm}");
    }
}

#[tokio::test]
async fn a_limiter_that_cannot_decide_fails_closed_and_nothing_is_bought() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    // The limiter's key holds a string where its script expects a sorted set: the script fails.
    let id = SaleId::parse(&sale).unwrap();
    let key =
        sale_rate_limit_key(&app.config.key_prefix, &id, Algorithm::SlidingLog.name(), "127.0.0.1".parse().unwrap());
    let _: () = app.redis.clone().set(&key, "not a sorted set").await.unwrap();

    let refused = app.buy(&sale, "u1").await;
    assert!(refused.headers().contains_key("ratelimit-policy"));
    assert!(!refused.headers().contains_key("ratelimit"), "no decision, no state to report");
    // The limiter runs in the purchase's own call, whose error reply does not say which part
    // failed: the purchase may have run, as far as the app knows.
    assert_error(refused, 503, "outcome_unknown").await;
    assert_eq!(app.status(&sale).await.sold, 0, "nothing bought while the limiter could not decide");

    let _: () = app.redis.clone().del(&key).await.unwrap();
    assert_eq!(app.buy(&sale, "u1").await.status(), 201);
}
