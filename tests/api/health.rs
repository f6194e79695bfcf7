//! Liveness and readiness.

use serde_json::Value;

use crate::helpers::{assert_error, new_sale_id, spawn_app, spawn_app_with};

#[tokio::test]
async fn healthz_answers_without_dependencies() {
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    let response = app.client.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn readyz_is_200_when_redis_and_postgres_answer() {
    let app = spawn_app().await;
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!((body["redis"].as_str(), body["postgres"].as_str()), (Some("ok"), Some("ok")));
}

#[tokio::test]
async fn readyz_is_503_and_names_redis_when_redis_is_down() {
    let app = spawn_app_with(|c| c.redis_url = "redis://127.0.0.1:1".to_owned().into(), false).await;
    let response = app.client.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "unavailable");
    assert_eq!((body["redis"].as_str(), body["postgres"].as_str()), (Some("down"), Some("ok")));
}

#[tokio::test]
async fn head_answers_wherever_get_does_without_a_body() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 1).await;
    let paths = [
        "/healthz".to_owned(),
        "/readyz".into(),
        "/metrics".into(),
        "/openapi.json".into(),
        format!("/sales/{sale}"),
        format!("/sales/{sale}/order?user_id=alice"),
        "/".into(),
        format!("/sale/{sale}"),
        "/admin".into(),
    ];
    for path in &paths {
        let get = app.client.get(app.url(path)).send().await.unwrap();
        let head = app.client.head(app.url(path)).send().await.unwrap();
        assert_eq!((path, head.status()), (path, get.status()));
        assert_eq!(head.headers().get("content-type"), get.headers().get("content-type"), "{path}");
        assert!(head.bytes().await.unwrap().is_empty(), "{path}: a HEAD answer has no body");
    }
    let patch = app.client.patch(app.url("/healthz")).send().await.unwrap();
    assert_eq!(patch.headers().get("allow").unwrap(), "GET, HEAD");
    assert_error(patch, 405, "method_not_allowed").await;
}

#[tokio::test]
async fn with_a_metrics_listener_only_it_serves_metrics_and_readiness() {
    let app = spawn_app_with(|c| c.edge.metrics_listen = Some("127.0.0.1:0".parse().unwrap()), false).await;
    let operations = app.metrics_address.clone().expect("a metrics listener");
    for path in ["/metrics", "/readyz"] {
        let public = app.client.get(app.url(path)).send().await.unwrap();
        assert_error(public, 404, "not_found").await;
        let private = app.client.get(format!("{operations}{path}")).send().await.unwrap();
        assert_eq!(private.status(), 200, "{path} on the metrics listener");
    }
    let metrics = app.client.get(format!("{operations}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("seckill_http_requests_total"), "{metrics}");
    for path in ["/healthz"] {
        assert_eq!(app.client.get(app.url(path)).send().await.unwrap().status(), 200);
        assert_eq!(app.client.get(format!("{operations}{path}")).send().await.unwrap().status(), 200);
    }
    let buy = app.client.post(format!("{operations}/buy")).json(&serde_json::json!({"sale_id": "x", "user_id": "a"}));
    assert_error(buy.send().await.unwrap(), 404, "not_found").await;
    assert_error(app.client.get(format!("{operations}/admin")).send().await.unwrap(), 404, "not_found").await;
}
