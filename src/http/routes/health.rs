//! `GET /healthz` (the process answers; no I/O) and `GET /readyz` (Redis answers, so purchases
//! can run; with Postgres's state and the report of this process's worker on its order streams).

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::AppState;
use crate::http::views::WorkerReport;

/// `{"status": "ok"}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Readiness: `status: "ok"` when both answer, `"degraded"` (and a `message`) when only Redis
/// does; otherwise `error` and `message`, and which is down.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `ok` or `down`.
    pub redis: &'static str,
    /// `ok` or `down`.
    pub postgres: &'static str,
    /// This process's worker (absent with `--no-worker`): `ok`, or `degraded` with the streams
    /// it skips (a broken, missing or lost sale's). Still ready: the other sales sell and drain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerReport>,
}

#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process answers (no I/O)", body = Health)))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(Health { status: "ok" })
}

#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "Redis answers: purchases run (`status` `degraded` while Postgres does not \
        answer: orders wait in Redis; `worker.status` may be `degraded`: some sales' orders are not drained)",
        body = Readiness),
    (status = 503, description = "`unavailable`: Redis does not answer", body = Readiness),
))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let crate::shop::Readiness { redis_up, postgres_up, worker } = state.shop.readiness().await;
    let word = |up: bool| if up { "ok" } else { "down" };
    let worker = worker.map(WorkerReport::from);
    let mut body = Readiness {
        status: None,
        error: None,
        message: None,
        redis: word(redis_up),
        postgres: word(postgres_up),
        worker,
    };
    // Ready while Redis answers: a purchase needs only Redis. Postgres down on every pod at once
    // (its failover) must not take them all out of service while they still sell.
    if redis_up {
        body.status = Some(if postgres_up { "ok" } else { "degraded" });
        if !postgres_up {
            body.message = Some("unreachable: postgres (purchases go on; their orders wait in Redis)".into());
        }
        return HttpResponse::Ok().json(body);
    }
    let down: Vec<&str> = [("redis", redis_up), ("postgres", postgres_up)]
        .into_iter()
        .filter(|(_, up)| !up)
        .map(|(name, _)| name)
        .collect();
    body.error = Some("unavailable");
    body.message = Some(format!("unreachable: {}", down.join(", ")));
    HttpResponse::ServiceUnavailable().json(body)
}
