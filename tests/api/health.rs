//! Liveness and readiness.

use serde_json::Value;

use crate::helpers::{spawn_app, spawn_app_with};

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
