//! The sale-day controls (`crate::shop::Shop::switch`, `restock`, `audit`): `POST
//! /admin/sales/{sale_id}/pause`, `/resume` and `/end` (the kill switch, each with an optional
//! `{"reason"}`), `POST /admin/sales/{sale_id}/stock` (`{"add": N}`) and `GET
//! /admin/sales/{sale_id}/audit` (the operators' actions, newest first). Admin token, as every
//! admin route.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::{AdminErrors, SalePath, SaleStatus};
use super::object::{self, Object};
use super::responses::UnknownSale;
use super::sale_of;
use super::seed::integral;
use super::small_body::SmallBody;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::shop::{AuditEntry, MAX_AUDIT_LISTED, Switch};

/// An operator's reason, as an optional JSON object (the body may be empty). Unknown fields are
/// refused.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// Why (one line, at most 200 characters): kept in the audit trail, and shown with a pause.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$", example = "price typo")]
    reason: Option<String>,
}

/// A stock change, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StockRequest {
    /// Units to add (> 0), or unsold units to take back (< 0, never below 0 left); 0 changes nothing.
    #[schema(minimum = -10_000_000, maximum = 10_000_000, example = 200)]
    #[serde(deserialize_with = "integral")]
    add: i64,
    /// Why (one line, at most 200 characters), kept in the audit trail.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")]
    reason: Option<String>,
}

/// The operators' actions on a sale, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditTrail {
    pub sale_id: String,
    /// At most `limit` (default and most: 100) entries.
    pub entries: Vec<AuditRecord>,
}

/// One operator action.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct AuditRecord {
    /// `seed`, `pause`, `resume`, `end`, `stock` or `retire`; a drop's own (listed with each of its
    /// sizes' too): `drop_seed`, `drop_pause`, `drop_resume`, `drop_end` or `drop_stock`.
    pub action: String,
    pub reason: Option<String>,
    /// What it did: a seed's settings, a switch's `was_paused`, `paused` and `ends_at`, a stock
    /// change's `add`, `stock_initial` and `stock_left`, a retirement's report. Its instants are
    /// RFC 3339 in UTC, its durations milliseconds (`…_ms`).
    #[schema(value_type = Object)]
    pub effect: serde_json::Value,
    /// Who did it, when known (`janitor` or `seckill retire` for their retirements; the admin token
    /// names nobody).
    pub actor: Option<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
}

/// `?limit=` of the audit listing (any other parameter is 400).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Entries to return, 1 to 100 (default 100).
    #[param(minimum = 1, maximum = 100)]
    pub(super) limit: Option<i64>,
}

/// The reason of an optional `{"reason"}` body (an empty body or `null`: none).
pub(super) fn reason_of(body: &web::Bytes) -> Result<Option<String>, ApiError> {
    Ok(object::optional::<ControlRequest>(body)?.reason)
}

async fn switch(
    operator: &Operator,
    path: &str,
    body: &web::Bytes,
    state: &AppState,
    switch: Switch,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(path)?;
    let reason = reason_of(body)?;
    let report = state.shop.switch(&sale, switch, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(SaleStatus::from(report)))
}

/// Pauses the sale: every purchase is refused (403 `sale_paused`, with `Retry-After`, nothing
/// bought) by the purchase script itself, so every instance obeys from the next purchase on; its
/// public state is `paused`; its waiting room admits nobody more. Reservations and admissions keep
/// their deadlines. Pausing a paused sale replaces its reason. Recorded in the audit trail.
#[utoipa::path(
    post,
    path = "/admin/sales/{sale_id}/pause",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Paused; the sale's state", body = SaleStatus),
        UnknownSale,
        (status = 410, description = "`sale_retired`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn pause(
    operator: Operator,
    path: web::Path<String>,
    SmallBody(body): SmallBody,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    switch(&operator, &path, &body, &state, Switch::Pause).await
}

/// Resumes a paused sale: purchases and admission go on from the next call (resuming a sale
/// that is not paused changes nothing). Recorded in the audit trail.
#[utoipa::path(
    post,
    path = "/admin/sales/{sale_id}/resume",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Resumed; the sale's state", body = SaleStatus),
        UnknownSale,
        (status = 410, description = "`sale_retired`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn resume(
    operator: Operator,
    path: web::Path<String>,
    SmallBody(body): SmallBody,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    switch(&operator, &path, &body, &state, Switch::Resume).await
}

/// Ends the sale now: `ends_at` becomes the Redis server's time (an earlier end is kept), in
/// Redis and in Postgres; purchases answer `sale_ended` from then on, and the janitor retires the
/// sale once it is due. Recorded in the audit trail.
#[utoipa::path(
    post,
    path = "/admin/sales/{sale_id}/end",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Ended; the sale's state", body = SaleStatus),
        UnknownSale,
        (status = 410, description = "`sale_retired`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn end(
    operator: Operator,
    path: web::Path<String>,
    SmallBody(body): SmallBody,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    switch(&operator, &path, &body, &state, Switch::End).await
}

/// Adds units to the sale's stock, or takes unsold ones back (`add` < 0), atomically with its
/// purchases: `stock_initial` follows, in Redis and Postgres; a sold-out sale sells again on every
/// instance (within a second) and a queued sale's admission moves again. Recorded in the audit
/// trail.
#[utoipa::path(
    post,
    path = "/admin/sales/{sale_id}/stock",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    request_body = StockRequest,
    responses(
        (status = 200, description = "Changed; the sale's state", body = SaleStatus),
        UnknownSale,
        (status = 409, description = "`stock_below_zero`: fewer units are left unsold than `add` takes back; \
            `stock_too_large`: the sale would hold more than 10,000,000 units in all; `sale_sharded`: a sharded \
            sale's stock cannot change (docs/stock-sharding.md); `draw_stock_fixed`: a size of a drop in draw mode \
            keeps its stock, the draw's terms (docs/draw.md); `sale_restoring`: the repair is restoring the sale's \
            buyers (docs/reconciliation.md). Nothing changed",
            body = ErrorBody),
        (status = 410, description = "`sale_retired`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn stock(
    operator: Operator,
    path: web::Path<String>,
    body: web::Json<Object<StockRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&path)?;
    let StockRequest { add, reason } = body.into_inner().0;
    let report = state.shop.restock(&sale, add, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(SaleStatus::from(report)))
}

/// The operators' actions on the sale (seed, pause, resume, end, stock, retire), newest first.
#[utoipa::path(
    get,
    path = "/admin/sales/{sale_id}/audit",
    tag = "admin",
    params(SalePath, AuditQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The audit trail, newest first", body = AuditTrail),
        UnknownSale,
        (status = 410, description = "`sale_retired`: a retired sale without entries", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn audit(
    _viewer: Viewer,
    path: web::Path<String>,
    query: web::Query<AuditQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&path)?;
    let limit = checked_limit(&query)?;
    let entries = records(state.shop.audit(&sale, limit).await?);
    Ok(HttpResponse::Ok().json(AuditTrail { sale_id: sale.to_string(), entries }))
}

/// `?limit=`, within 1 to 100.
pub(super) fn checked_limit(query: &AuditQuery) -> Result<Option<i64>, ApiError> {
    if query.limit.is_some_and(|limit| !(1..=MAX_AUDIT_LISTED).contains(&limit)) {
        return Err(ApiError::InvalidRequest(format!("limit must be between 1 and {MAX_AUDIT_LISTED}")));
    }
    Ok(query.limit)
}

/// The entries as the API shows them.
pub(super) fn records(entries: Vec<AuditEntry>) -> Vec<AuditRecord> {
    entries
        .into_iter()
        .map(|AuditEntry { action, reason, effect, actor, at }| AuditRecord { action, reason, effect, actor, at })
        .collect()
}
