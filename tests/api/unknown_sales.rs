//! Made-up sale ids (issue 51): every route that names a sale answers an id that names no sale
//! from Redis's registry and a batched, bounded Postgres lookup, so 2,000 made-up ids cost
//! Postgres a bounded number of transactions, not one (or four) per request; and a client's
//! requests for sales that do not exist count against one quota whatever the limit's scope, so
//! inventing ids buys no fresh quota.
//!
//! Postgres's own count is the measure (`crate::helpers::transactions_of`: the backends on the
//! service's database are ended before each reading, so each has reported its counts).

use std::time::Duration;

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::time::Instant;

use crate::common::{ADMIN_TOKEN, new_sale_id};
use crate::helpers::{TestApp, spawn_app_with, transactions_of};
use seckill::limiter::{RateLimit, Scope};

/// Made-up ids per route, and requests in flight at once.
const IDS: usize = 2_000;
const PARALLEL: usize = 100;

/// Most Postgres transactions 2,000 made-up ids may cost a route (the batched lookups: at most
/// ten a second; the pool's reconnections).
const MOST_TRANSACTIONS: i64 = 100;

/// One route that names a sale, as the attacker calls it: the method, the path of a sale id,
/// and the body.
struct Route {
    method: Method,
    path: fn(&str) -> String,
    body: Option<fn(&str) -> serde_json::Value>,
    admin: bool,
}

fn routes() -> Vec<(&'static str, Route)> {
    let buyer = |method, path, body| Route { method, path, body, admin: false };
    let admin = |method, path, body| Route { method, path, body, admin: true };
    vec![
        ("GET /sales/{id}", buyer(Method::GET, |s| format!("/sales/{s}"), None)),
        ("GET /sales/{id}/challenge", buyer(Method::GET, |s| format!("/sales/{s}/challenge?user_id=u"), None)),
        ("POST /sales/{id}/queue", buyer(Method::POST, |s| format!("/sales/{s}/queue?user_id=u"), None)),
        ("GET /sales/{id}/queue", buyer(Method::GET, |s| format!("/sales/{s}/queue?user_id=u"), None)),
        ("GET /sales/{id}/order", buyer(Method::GET, |s| format!("/sales/{s}/order?user_id=u"), None)),
        ("DELETE /sales/{id}/order", buyer(Method::DELETE, |s| format!("/sales/{s}/order?user_id=u"), None)),
        ("POST /buy", buyer(Method::POST, |_| "/buy".into(), Some(|s| json!({"sale_id": s, "user_id": "u"})))),
        ("GET /admin/sales/{id}", admin(Method::GET, |s| format!("/admin/sales/{s}"), None)),
        ("POST /admin/sales/{id}/pause", admin(Method::POST, |s| format!("/admin/sales/{s}/pause"), None)),
        ("POST /admin/sales/{id}/resume", admin(Method::POST, |s| format!("/admin/sales/{s}/resume"), None)),
        ("POST /admin/sales/{id}/end", admin(Method::POST, |s| format!("/admin/sales/{s}/end"), None)),
        (
            "POST /admin/sales/{id}/stock",
            admin(Method::POST, |s| format!("/admin/sales/{s}/stock"), Some(|_| json!({"add": 1}))),
        ),
        ("GET /admin/sales/{id}/audit", admin(Method::GET, |s| format!("/admin/sales/{s}/audit"), None)),
        ("GET /admin/sales/{id}/reconcile", admin(Method::GET, |s| format!("/admin/sales/{s}/reconcile"), None)),
        ("POST /admin/sales/{id}/reconcile", admin(Method::POST, |s| format!("/admin/sales/{s}/reconcile"), None)),
        ("DELETE /admin/sales/{id}", admin(Method::DELETE, |s| format!("/admin/sales/{s}"), None)),
    ]
}

/// Sends `IDS` requests to `route`, each naming a new made-up sale, `PARALLEL` at a time; answers
/// the statuses seen, with their counts.
async fn storm(app: &TestApp, route: &Route) -> Vec<(StatusCode, usize)> {
    let statuses: Vec<StatusCode> = futures::stream::iter(0..IDS)
        .map(|_| {
            let sale = new_sale_id();
            let mut request = app.client.request(route.method.clone(), app.url(&(route.path)(&sale)));
            if let Some(body) = route.body {
                request = request.json(&body(&sale));
            }
            if route.admin {
                request = request.bearer_auth(ADMIN_TOKEN);
            }
            async move { request.send().await.expect("an answer").status() }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut counts: Vec<(StatusCode, usize)> = Vec::new();
    for status in statuses {
        match counts.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => counts.push((status, 1)),
        }
    }
    counts.sort();
    counts
}

/// Each route on one service with no worker (and so no sweeper): only the requests reach Postgres.
/// The answers are 404 `unknown_sale`, or 503 where a batch was not answered within its wait on
/// a loaded host (honest: the sale may be a retired one); never another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_sale_ids_cost_postgres_a_bounded_number_of_transactions_on_every_route() {
    let app = spawn_app_with(|_| {}, false).await;
    let (mut report, mut over) = (vec![], vec![]);
    for (name, route) in routes() {
        let before = transactions_of(&app).await;
        let started = Instant::now();
        let statuses = storm(&app, &route).await;
        let took = started.elapsed();
        let spent = transactions_of(&app).await - before;
        report.push(format!("{name}: {spent} transactions for {IDS} made-up ids in {took:.1?}; answers {statuses:?}"));
        let unknown = statuses.iter().find(|(s, _)| *s == StatusCode::NOT_FOUND).map_or(0, |(_, n)| *n);
        assert!(unknown > IDS / 2, "{name}: made-up ids are unknown_sale: {statuses:?}");
        assert!(
            statuses.iter().all(|(s, _)| [StatusCode::NOT_FOUND, StatusCode::SERVICE_UNAVAILABLE].contains(s)),
            "{name}: 404, or 503 when a lookup waited too long: {statuses:?}"
        );
        if spent > MOST_TRANSACTIONS {
            over.push(name);
        }
    }
    eprintln!("{}", report.join("\n"));
    assert!(over.is_empty(), "over {MOST_TRANSACTIONS} transactions: {over:?}\n{}", report.join("\n"));
}

/// The address limit of the quota tests: [`LIMIT`] requests in 10 minutes.
const LIMIT: usize = 5;

/// A service with no worker whose address limit is [`LIMIT`] in 10 minutes, counted as `scope`
/// says, behind a trusted proxy on loopback (each test's clients are `X-Forwarded-For`).
async fn quota_app(scope: Scope) -> TestApp {
    spawn_app_with(
        |config| {
            config.rate_limit = RateLimit { limit: LIMIT as u32, window: Duration::from_secs(600) };
            config.rate_limit_scope = scope;
            config.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
        },
        false,
    )
    .await
}

/// With the limit counted per sale, a client that invents sale ids still has one quota for them:
/// past it, 429 on every buyer route (from memory after the first refusal); its purchase in a
/// real sale is still admitted (that sale's own quota), and another client is not refused.
#[tokio::test]
async fn inventing_sale_ids_buys_no_fresh_quota_whatever_the_scope() {
    let app = quota_app(Scope::Sale).await;
    let real = new_sale_id();
    app.seed_stock(&real, 10).await;
    let (attacker, other) = ("198.51.100.1", "198.51.100.2");
    let mut answers = vec![];
    for (name, route) in routes().into_iter().filter(|(_, r)| !r.admin) {
        for _ in 0..3 {
            let sale = new_sale_id();
            let mut request = app.client.request(route.method.clone(), app.url(&(route.path)(&sale)));
            if let Some(body) = route.body {
                request = request.json(&body(&sale));
            }
            let status = request.header("x-forwarded-for", attacker).send().await.unwrap().status().as_u16();
            answers.push((name, status));
        }
    }
    let first: Vec<u16> = answers[..LIMIT].iter().map(|(_, s)| *s).collect();
    assert_eq!(first, [404; LIMIT], "the first {LIMIT} made-up ids are unknown_sale: {answers:?}");
    assert!(answers[LIMIT..].iter().all(|(_, s)| *s == 429), "every one after is rate_limited: {answers:?}");

    let bought = app
        .client
        .post(app.url("/buy"))
        .header("x-forwarded-for", attacker)
        .json(&json!({"sale_id": real, "user_id": "a-real-buyer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bought.status(), 201, "a real sale keeps its own quota: {:?}", bought.text().await);
    let elsewhere = app
        .client
        .get(app.url(&format!("/sales/{}", new_sale_id())))
        .header("x-forwarded-for", other)
        .send()
        .await
        .unwrap();
    assert_eq!(elsewhere.status(), 404, "another client has a quota of its own");
}

/// The draw's public record (`GET /drops/{id}/draw`) of a drop that does not exist costs Postgres
/// two lookups (the record outlives the drop's Redis state), so it counts against the client's
/// quota of unknown ids too: past it, 429 from memory; another client still gets its 404.
#[tokio::test]
async fn made_up_drops_draw_records_count_against_the_quota_of_unknown_ids() {
    let app = quota_app(Scope::default()).await;
    let record = async |client: &str| {
        let url = app.url(&format!("/drops/{}/draw", new_sale_id()));
        app.client.get(url).header("x-forwarded-for", client).send().await.unwrap().status().as_u16()
    };
    let mut answers = vec![];
    for _ in 0..LIMIT + 3 {
        answers.push(record("198.51.100.1").await);
    }
    assert_eq!(answers[..LIMIT], [404; LIMIT], "{answers:?}");
    assert_eq!(answers[LIMIT..], [429; 3], "past the quota, rate_limited: {answers:?}");
    assert_eq!(record("198.51.100.2").await, 404, "another client has a quota of its own");
}
