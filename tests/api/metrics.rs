//! `GET /metrics`: the Prometheus exposition counts exactly what this app did.

use std::collections::HashMap;
use std::time::Duration;

use seckill::limiter::{RateLimit, Scope};

use crate::helpers::{new_sale_id, spawn_app_with};

/// The samples of the exposition: `name{labels}` → value.
pub(crate) fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let (name, value) = line.rsplit_once(' ').expect("name value");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_requests_limiter_decisions_purchases_and_the_worker() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = RateLimit { limit: 4, window: Duration::from_secs(3600) };
            c.rate_limit_scope = Scope::Global; // one count over both sales
        },
        true,
    )
    .await;
    let (sale, other) = (new_sale_id(), new_sale_id());
    app.seed_stock(&sale, 2).await;
    app.seed_stock(&other, 10).await;

    let mut statuses = vec![];
    for (s, user) in
        [(&sale, "u1"), (&sale, "u2"), (&sale, "u1"), (&sale, "u3"), (&sale, "u4"), (&other, "u5"), (&other, "u6")]
    {
        statuses.push(app.buy(s, user).await.status().as_u16());
    }
    // u4 is answered by the sold-out flag, before the limiter; u5 is the fifth request the limiter
    // sees (refused by Redis), u6 is refused from memory.
    assert_eq!(statuses, [201, 201, 409, 410, 410, 429, 429]);
    // Bodies the JSON extractor refuses, each counted as a refused purchase too.
    for (body, content_type, status) in
        [("{", "application/json", 400), ("[]", "application/json", 400), ("{}", "text/plain", 415)]
    {
        let response =
            app.client.post(app.url("/buy")).body(body).header("content-type", content_type).send().await.unwrap();
        assert_eq!(response.status(), status, "{body} as {content_type}");
    }
    app.wait_for_drain(&sale).await;

    // The worker samples the queue once a second: the scrape that shows its sample after the drain.
    let (queue, lag) =
        (format!(r#"seckill_queue_length{{sale="{sale}"}}"#), format!(r#"seckill_queue_lag_seconds{{sale="{sale}"}}"#));
    let until = std::time::Instant::now() + Duration::from_secs(20);
    let m = loop {
        let response = app.client.get(app.url("/metrics")).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
        let m = samples(&response.text().await.unwrap());
        if m.get(&queue) == Some(&0.0) && m.get(&lag) == Some(&0.0) {
            break m;
        }
        assert!(
            std::time::Instant::now() < until,
            "no queue sample of 0 after the drain: {:?} {:?}",
            m.get(&queue),
            m.get(&lag)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let get = |name: &str| m.get(name).copied().unwrap_or_else(|| panic!("no sample {name}"));

    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="201"}"#), 2.0);
    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="409"}"#), 1.0);
    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="410"}"#), 2.0);
    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="429"}"#), 2.0);
    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="400"}"#), 2.0);
    assert_eq!(get(r#"seckill_http_requests_total{method="POST",route="/buy",status="415"}"#), 1.0);
    assert_eq!(get(r#"seckill_http_request_duration_seconds_count{route="/buy"}"#), 10.0);
    assert_eq!(get(r#"seckill_limiter_decisions_total{decision="allowed"}"#), 4.0);
    assert_eq!(get(r#"seckill_limiter_decisions_total{decision="refused"}"#), 1.0);
    assert_eq!(get(r#"seckill_limiter_decisions_total{decision="refused_from_memory"}"#), 1.0);
    assert_eq!(get(r#"seckill_purchases_total{outcome="created"}"#), 2.0);
    assert_eq!(get(r#"seckill_purchases_total{outcome="already_purchased"}"#), 1.0);
    assert_eq!(get(r#"seckill_purchases_total{outcome="sold_out"}"#), 2.0);
    assert_eq!(get(r#"seckill_purchases_total{outcome="rate_limited"}"#), 2.0);
    assert_eq!(get(r#"seckill_purchases_total{outcome="invalid_request"}"#), 3.0, "every refused /buy counted");
    assert_eq!(get(r#"seckill_worker_orders_total{result="inserted"}"#), 2.0);
    assert!(get("seckill_worker_batch_size_count") >= 1.0);
    assert_eq!(get("seckill_worker_batch_size_sum"), 2.0);
    assert!(get("seckill_worker_insert_duration_seconds_count") >= 1.0);
}

#[tokio::test]
async fn metrics_count_the_redis_failures_behind_503s() {
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    let sale = new_sale_id();
    assert_eq!(app.buy(&sale, "u").await.status(), 503);
    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let m = samples(&text);
    assert_eq!(m[r#"seckill_dependency_errors_total{dependency="redis",source="http"}"#], 1.0);
    assert_eq!(m[r#"seckill_limiter_decisions_total{decision="error"}"#], 1.0);
    assert_eq!(m[r#"seckill_http_requests_total{method="POST",route="/buy",status="503"}"#], 1.0);
}

#[tokio::test]
async fn invented_methods_and_unmatched_paths_share_one_series_each() {
    let app = spawn_app_with(|_| {}, false).await;
    for method in ["FOO", "BAR", "BAZ", "QUX"] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = app.client.request(method, app.url("/healthz")).send().await.unwrap();
        assert_eq!(response.status(), 405);
    }
    for path in ["/nope", "/nope/1", "/x/y/z"] {
        assert_eq!(app.client.get(app.url(path)).send().await.unwrap().status(), 404);
    }
    // A route with a parameter counts under its pattern, whatever the value.
    for sale in ["a", "b"] {
        let url = app.url(&format!("/admin/sales/{sale}/audit"));
        assert_eq!(app.client.post(url).send().await.unwrap().status(), 405);
    }

    let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let m = samples(&text);
    let series = |prefix: &str| m.keys().filter(|k| k.starts_with(prefix)).count();
    assert_eq!(m[r#"seckill_http_requests_total{method="_OTHER",route="/healthz",status="405"}"#], 4.0);
    assert_eq!(series(r#"seckill_http_requests_total{method="_OTHER""#), 1, "{text}");
    for invented in ["FOO", "BAR", "BAZ", "QUX"] {
        assert!(!text.contains(invented), "{invented} made a series of its own");
    }
    assert_eq!(m[r#"seckill_http_requests_total{method="GET",route="unmatched",status="404"}"#], 3.0);
    assert_eq!(series(r#"seckill_http_requests_total{method="GET",route="unmatched""#), 1);
    assert_eq!(
        m[r#"seckill_http_requests_total{method="POST",route="/admin/sales/{sale_id}/audit",status="405"}"#],
        2.0
    );
}
