//! `GET /healthz` (the process answers; no I/O) and `GET /readyz` (Redis answers, so purchases
//! can run; with Postgres's state and the report of this process's worker on its order streams).

use actix_web::{HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::AppState;
use crate::http::views::WorkerReport;
use crate::shop::Reach;

/// `{"status": "ok"}`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// Readiness: `status: "ok"` when both answer, `"degraded"` (and a `message`) when Redis answers
/// only in part (a cluster with a master down) or Postgres does not; otherwise `error` and `message`,
/// and which is down.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `ok`, `partial` (a cluster that says not every slot is served: a master is down) or `down`.
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
    (status = 200, description = "Redis answers: purchases run (`status` `degraded` while a cluster says not \
        every slot is served, `redis` `partial`: a master is down, and every sale answers 503 while the cluster \
        requires full coverage, else the sales in its slots; or \
        while Postgres does not answer: orders wait in Redis; `worker.status` may be `degraded`: some sales' \
        orders are not drained)",
        body = Readiness),
    (status = 503, description = "`unavailable`: no part of Redis answers", body = Readiness),
))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let crate::shop::Readiness { redis, postgres_up, worker } = state.shop.readiness().await;
    let worker = worker.map(WorkerReport::from);
    let mut body = Readiness {
        status: None,
        error: None,
        message: None,
        redis: match redis {
            Some(Reach::All) => "ok",
            Some(Reach::Some) => "partial",
            None => "down",
        },
        postgres: if postgres_up { "ok" } else { "down" },
        worker,
    };
    // Ready while Redis answers, in any part: a purchase needs only Redis, and what a pod cannot
    // reach every pod cannot. Postgres down on every pod at once (its failover), or one master of
    // a cluster, must not take them all out of service while they still sell.
    let mut troubles = Vec::new();
    if redis == Some(Reach::Some) {
        troubles.push(
            "a redis cluster master (not every slot is served: every sale answers 503 while the cluster requires \
             full coverage, its default; else the sales in those slots)",
        );
    }
    if !postgres_up {
        troubles.push("postgres (purchases go on; their orders wait in Redis)");
    }
    if redis.is_some() {
        body.status = Some(if troubles.is_empty() { "ok" } else { "degraded" });
        if !troubles.is_empty() {
            body.message = Some(format!("unreachable: {}", troubles.join("; ")));
        }
        return HttpResponse::Ok().json(body);
    }
    let down = if postgres_up { "redis" } else { "redis, postgres" };
    body.error = Some("unavailable");
    body.message = Some(format!("unreachable: {down}"));
    HttpResponse::ServiceUnavailable().json(body)
}
