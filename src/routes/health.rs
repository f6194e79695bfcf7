//! `GET /healthz` (the process answers; no I/O) and `GET /readyz` (Redis and Postgres answer).

use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde_json::json;

use super::AppState;
use crate::db;

/// How long readiness waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let redis = tokio::time::timeout(PROBE_TIMEOUT, state.redis.ping());
    let postgres = tokio::time::timeout(PROBE_TIMEOUT, db::ping(&state.pool));
    let (redis, postgres) = tokio::join!(redis, postgres);
    let redis_up = matches!(redis, Ok(Ok(())));
    let postgres_up = matches!(postgres, Ok(Ok(())));
    let word = |up: bool| if up { "ok" } else { "down" };
    if redis_up && postgres_up {
        return HttpResponse::Ok().json(json!({"status": "ok", "redis": "ok", "postgres": "ok"}));
    }
    let down: Vec<&str> = [("redis", redis_up), ("postgres", postgres_up)]
        .into_iter()
        .filter(|(_, up)| !up)
        .map(|(name, _)| name)
        .collect();
    HttpResponse::ServiceUnavailable().json(json!({
        "error": "unavailable",
        "message": format!("unreachable: {}", down.join(", ")),
        "redis": word(redis_up),
        "postgres": word(postgres_up),
    }))
}
