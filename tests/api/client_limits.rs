//! Limits that hold against one client with many names or addresses (issue 14): the address
//! limit against made-up user ids, IPv6 addresses grouped by /64, the per-buyer limit against
//! many addresses, the header fields of the tighter limit, and the in-process limit on sold-out
//! answers.

use std::time::Duration;

use futures::{StreamExt, stream};
use seckill::limiter::RateLimit;
use serde_json::json;

use crate::helpers::{TestApp, new_sale_id, spawn_app_with};

fn per_minute(n: u32) -> RateLimit {
    RateLimit { limit: n, window: Duration::from_secs(60) }
}

/// One purchase of `user` in `sale`, sent as if by `client` through the trusted proxy (or
/// from the peer itself when `client` is `None`); answers the status and the response.
async fn buy_from(app: &TestApp, sale: &str, user: &str, client: Option<&str>) -> reqwest::Response {
    let mut request = app.client.post(app.url("/buy")).json(&json!({"sale_id": sale, "user_id": user}));
    if let Some(client) = client {
        request = request.header("x-forwarded-for", client);
    }
    request.send().await.unwrap()
}

/// Sends the `(user, client)` requests, 32 at a time; answers how many were not refused 429.
async fn admitted(app: &TestApp, sale: &str, requests: Vec<(String, Option<String>)>) -> usize {
    stream::iter(requests)
        .map(|(user, client)| async move { buy_from(app, sale, &user, client.as_deref()).await.status().as_u16() })
        .buffer_unordered(32)
        .filter(|status| std::future::ready(*status != 429))
        .count()
        .await
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response.headers()[name].to_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_with_a_thousand_user_ids_from_one_address_is_held_to_the_address_limit() {
    let app = spawn_app_with(|c| c.rate_limit = per_minute(20), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 2_000).await;

    let requests = (0..1_000).map(|i| (format!("bot-{i}"), None)).collect();

    assert_eq!(admitted(&app, &sale, requests).await, 20);
    assert_eq!(app.status(&sale).await.sold, 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_addresses_of_one_ipv6_64_share_one_quota_and_another_64_has_its_own() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = per_minute(20);
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 2_000).await;

    let requests = (0..1_000u32)
        .map(|i| (format!("v6-{i}"), Some(format!("2001:db8:1:2:{:x}:{:x}::1", i >> 8, i & 0xff))))
        .collect();

    assert_eq!(admitted(&app, &sale, requests).await, 20, "one /64, one quota");
    let other = buy_from(&app, &sale, "neighbour", Some("2001:db8:1:3::1")).await;
    assert_eq!(other.status(), 201, "another /64 has its own bucket");
}

#[tokio::test]
async fn ipv4_clients_are_still_limited_per_address() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = per_minute(2);
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let mut first = vec![];
    for i in 0..3 {
        first.push(buy_from(&app, &sale, &format!("a{i}"), Some("198.51.100.1")).await.status().as_u16());
    }
    assert_eq!(first, [201, 201, 429]);
    assert_eq!(buy_from(&app, &sale, "b0", Some("198.51.100.2")).await.status(), 201, "the next address");
    let mapped = buy_from(&app, &sale, "a3", Some("::ffff:198.51.100.1")).await;
    assert_eq!(mapped.status(), 429, "IPv4-mapped IPv6 is the IPv4 address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_buyer_from_many_addresses_is_held_by_the_per_buyer_limit() {
    let app = spawn_app_with(
        |c| {
            c.user_rate_limit = Some(per_minute(5));
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;

    let requests =
        (0..200).map(|i| ("victim-or-bot".to_owned(), Some(format!("198.51.{}.{}", i / 100, i % 100)))).collect();

    assert_eq!(admitted(&app, &sale, requests).await, 5, "one buyer, five requests past the limiters");
    let refused = buy_from(&app, &sale, "victim-or-bot", Some("203.0.113.9")).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "ratelimit-policy"), "\"buyer\";q=5;w=60");
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(buy_from(&app, &sale, "someone-else", Some("203.0.113.9")).await.status(), 201);
}

#[tokio::test]
async fn the_headers_describe_the_limit_closer_to_refusing() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = per_minute(5);
            c.user_rate_limit = Some(per_minute(3));
        },
        false,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 100).await;
    let fields = |r: &reqwest::Response| (r.status().as_u16(), header(r, "ratelimit-policy"), header(r, "ratelimit"));
    let (buyer, address) = ("\"buyer\";q=3;w=60", "\"buy\";q=5;w=60");

    // Buyer A: 2 left of the buyer's 3 against 4 of the address's 5, and so on down.
    let mut seen = vec![];
    for _ in 0..4 {
        seen.push(fields(&app.buy(&sale, "a").await));
    }
    let r = |n: u32| format!("r={n};");
    assert_eq!((seen[0].0, seen[0].1.as_str()), (201, buyer));
    assert!(seen[0].2.starts_with("\"buyer\";") && seen[0].2.contains(&r(2)), "{:?}", seen[0]);
    assert_eq!((seen[1].0, seen[1].1.as_str()), (409, buyer));
    assert!(seen[1].2.contains(&r(1)), "{:?}", seen[1]);
    assert!(seen[2].2.contains(&r(0)), "{:?}", seen[2]);
    assert_eq!((seen[3].0, seen[3].1.as_str()), (429, buyer), "the buyer's limit refused");

    // Buyer B: the address has 1 left (A's four passed it), B's own limit 2 after this one.
    let (status, policy, state) = fields(&app.buy(&sale, "b").await);
    assert_eq!((status, policy.as_str()), (201, address));
    assert!(state.starts_with("\"buy\";r=0;"), "{state}");
    let refused = app.buy(&sale, "c").await;
    assert_eq!((refused.status().as_u16(), header(&refused, "ratelimit-policy")), (429, address.to_owned()));
}

#[tokio::test]
async fn probing_a_sold_out_sale_is_answered_429_after_the_in_process_limit() {
    let app = spawn_app_with(|c| c.sold_out_rate_limit = Some(per_minute(5)), false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    assert_eq!(app.buy(&sale, "winner").await.status(), 201);
    assert_eq!(app.buy(&sale, "second").await.status(), 410, "Redis says sold out: the flag is set");

    let mut statuses = vec![];
    for i in 0..20 {
        let user = if i % 2 == 0 { "winner".to_owned() } else { format!("probe-{i}") };
        statuses.push(app.buy(&sale, &user).await);
    }

    let codes: Vec<u16> = statuses.iter().map(|r| r.status().as_u16()).collect();
    assert_eq!(codes.iter().filter(|c| **c != 429).count(), 5, "{codes:?}");
    assert!(codes[..5].iter().all(|c| [409, 410].contains(c)), "{codes:?}");
    assert!(statuses[5..].iter().all(|r| r.headers().contains_key("retry-after")));
}
