//! `GET /admin/sales/{sale_id}/reconcile` compares the sale's Redis buyers with its Postgres
//! orders; `POST` to the same path repairs what it can. Both need the admin token.

use actix_web::{HttpResponse, web};

use super::admin::{AdminErrors, SalePath};
use super::responses::UnknownSale;
use super::sale_of;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::http::views::ReconcileReport;

/// Reports the differences between the sale's Redis buyers and its Postgres orders.
#[utoipa::path(
    get,
    path = "/admin/sales/{sale_id}/reconcile",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The report", body = ReconcileReport),
        UnknownSale,
        AdminErrors,
    )
)]
pub async fn reconcile_check(
    _viewer: Viewer,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok().json(ReconcileReport::from(state.shop.reconcile(&sale_of(&path)?, false, None).await?)))
}

/// Repairs what Redis can repair (missing orders, a missing `sales` row) and reports.
#[utoipa::path(
    post,
    path = "/admin/sales/{sale_id}/reconcile",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    responses(
        // First: an entry below with the same status replaces its generic one.
        AdminErrors,
        (status = 200, description = "The report after the repair", body = ReconcileReport),
        UnknownSale,
        (status = 410, description = "`sale_retired`: the sale is retired, or being retired (its row is marked \
            first): nothing was repaired, since a repair would write back what the retirement removes",
            body = ErrorBody),
        (status = 503, description = "`orders_queued`: Redis lost the shard 0 of a sharded sale, and orders of the \
            shards it kept are still on their way to Postgres: those shards are ended, nothing was seeded; repair \
            again shortly (`Retry-After`); `unavailable`", body = ErrorBody),
    )
)]
pub async fn reconcile_repair(
    operator: Operator,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .json(ReconcileReport::from(state.shop.reconcile(&sale_of(&path)?, true, operator.actor()).await?)))
}
