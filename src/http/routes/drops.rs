//! Drops (`crate::shop::Shop::seed_drop` and the rest): `PUT /admin/drops/{drop_id}` seeds or
//! updates a drop whole, `GET /admin/drops/{drop_id}` and the public `GET /drops/{drop_id}` read
//! it, `POST /admin/drops/{drop_id}/pause|resume|end` is its one switch, `POST
//! /admin/drops/{drop_id}/stock` its stock, `GET /admin/drops/{drop_id}/audit` its own actions.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::AdminErrors;
use super::controls::{AuditQuery, ControlRequest, checked_limit, reason_of, records};
use super::draw_entries::DrawRequest;
use super::drop_answers::{DropAuditTrail, DropStatus, PublicDrop};
use super::object::Object;
use super::seed::{ChallengeRequest, QueueRequest, integral};
use super::small_body::SmallBody;
use crate::domain::DropId;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::shop::{DropOrder, Switch};

/// The `{drop_id}` of the drop routes (documentation: the handlers validate it themselves).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct DropPath {
    /// 1-64 characters of `[A-Za-z0-9_-]`: its sizes are the sales `<drop_id>.<size>`.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    drop_id: String,
}

/// 404 `unknown_drop`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum UnknownDrop {
    /// `unknown_drop`: no sale of the drop is known
    #[response(status = 404)]
    UnknownDrop(ErrorBody<'static>),
}

/// 409 `not_a_drop` of a drop's switch.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum NotADrop {
    /// `not_a_drop`: the group holds more than 64 sales, seeded one by one: switch them one by one
    /// (`/admin/sales/{sale_id}/...`)
    #[response(status = 409)]
    NotADrop(ErrorBody<'static>),
}

/// A drop to create or update, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DropRequest {
    /// Each size (or variant) by name, 1 to 64 of them: the sale `<drop_id>.<size>` (the name: 1+
    /// characters of `[A-Za-z0-9_-]`, the id at most 64). An update must list every size the drop
    /// has (a size is never removed; give it stock 0) and may add sizes.
    #[schema(example = json!({"40": {"stock": 30}, "41": {"stock": 30}}))]
    #[serde(deserialize_with = "once_each")]
    sizes: BTreeMap<String, Object<SizeRequest>>,
    /// Units one buyer may buy across the drop's sizes (1 to 100; default 1).
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100)]
    #[serde(default, deserialize_with = "super::seed::integral_opt")]
    per_buyer: Option<i64>,
    /// When the drop opens (RFC 3339); unset: at once.
    #[serde(default, deserialize_with = "super::seed::instant_opt")]
    starts_at: Option<OffsetDateTime>,
    /// When it ends (RFC 3339), after `starts_at` and in the future; unset: never.
    #[serde(default, deserialize_with = "super::seed::instant_opt")]
    ends_at: Option<OffsetDateTime>,
    /// How long a win may wait for its payment (`"15m"`, 1s to 7d), as a sale's; unset:
    /// `SECKILL_PAYMENT_WINDOW`.
    #[serde(default)]
    #[schema(example = "10m")]
    payment_window: Option<String>,
    /// The drop's one waiting room, in front of every size (as a sale's `queue`): a buyer joins it
    /// once (`POST /drops/{drop_id}/queue`) and buys sizes with the one admission. Needs `starts_at`.
    #[serde(default)]
    #[schema(value_type = Option<QueueRequest>)]
    waiting_room: Option<Object<QueueRequest>>,
    /// A proof of work: with a waiting room, once per join; without, before each purchase. Unset:
    /// `SECKILL_CHALLENGE_COST`'s; `{"cost": 0}`: none.
    #[serde(default)]
    #[schema(value_type = Option<ChallengeRequest>)]
    challenge: Option<Object<ChallengeRequest>>,
    /// Draw mode: buyers enter (`POST /drops/{drop_id}/entries`) from `opens_at` to `closes_at`
    /// instead of buying (`POST /buy` of a size answers 409 `draw_only`). Needs a payment window;
    /// no `waiting_room`. The draw's secret seed is drawn at the first seed and kept.
    #[serde(default)]
    #[schema(value_type = Option<DrawRequest>)]
    draw: Option<Object<DrawRequest>>,
}

/// One size of a drop, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SizeRequest {
    /// Units of the size, 0 to 10,000,000.
    #[schema(minimum = 0, maximum = 10_000_000)]
    #[serde(deserialize_with = "integral")]
    stock: i64,
}

/// A drop's stock change, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DropStockRequest {
    /// Size name -> units to add (> 0) or unsold units to take back (< 0), 1 to 64 sizes: all or
    /// nothing.
    #[schema(example = json!({"40": 10, "42": -5}))]
    #[serde(deserialize_with = "once_each")]
    add: BTreeMap<String, i64>,
    /// Why (one line, at most 200 characters), kept in the audit trail.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$")]
    reason: Option<String>,
}

/// The path's drop id, or 400 `invalid_request`.
pub(super) fn drop_of(raw: &str) -> Result<DropId, ApiError> {
    DropId::parse(raw).map_err(ApiError::InvalidRequest)
}

/// A JSON object whose keys each appear once: serde's maps keep the last of a repeated key, so a
/// size named twice would be taken without a word (serde_with's check refuses it: 400).
fn once_each<'de, D, V>(deserializer: D) -> Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    use serde_with::{As, MapPreventDuplicates, Same};
    As::<MapPreventDuplicates<Same, Same>>::deserialize(deserializer)
}

/// Seeds or updates the whole drop: every size, the shared limit, times, payment window, waiting
/// room and proof of work, in one Redis call and one Postgres transaction (one audit entry). Until
/// the drop has a buyer, an update may add sizes and change every stock and setting (in draw mode,
/// not the draw's terms); it may not remove a size.
#[utoipa::path(
    put,
    path = "/admin/drops/{drop_id}",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    request_body = DropRequest,
    responses(
        (status = 200, description = "Seeded; the drop's state", body = DropStatus),
        (status = 409, description = "`drop_in_progress`: a size has buyers (`sale_id` names it), the drop cannot be \
            re-seeded; `drop_size_missing`: a size of the drop is not in the body (`sale_id`); `not_a_drop`: the \
            group's sales were seeded one by one; `sale_has_orders`: Postgres holds orders of a size Redis lost (or of \
            any, the group lost: repair them first); \
            `sale_retired`: a size was retired; `draw_stock_fixed`: the drop is in draw mode and the body \
            changes its terms (a size, its stock, `per_buyer`, `draw.waitlist`)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn seed(
    operator: Operator,
    path: web::Path<String>,
    body: web::Json<Object<DropRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let DropRequest { sizes, per_buyer, starts_at, ends_at, payment_window, waiting_room, challenge, draw } =
        body.into_inner().0;
    let order = DropOrder {
        sizes: sizes.into_iter().map(|(size, Object(SizeRequest { stock }))| (size, stock)).collect(),
        per_buyer: per_buyer.map(|n| u32::try_from(n).unwrap_or(0)),
        starts_at,
        ends_at,
        payment_window,
        waiting_room: waiting_room.map(QueueRequest::pair),
        challenge: challenge.map(ChallengeRequest::cost),
        draw: draw.map(DrawRequest::order),
    };
    let report = state.shop.seed_drop(&drop, order, operator.actor()).await?;
    Ok(HttpResponse::Ok().json(DropStatus::from(report)))
}

/// The drop whole, read afresh: each size's state and counts, and their totals.
#[utoipa::path(
    get,
    path = "/admin/drops/{drop_id}",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    responses((status = 200, description = "The drop's state", body = DropStatus), UnknownDrop, AdminErrors)
)]
pub async fn status(
    _viewer: Viewer,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    Ok(HttpResponse::Ok().json(DropStatus::from(state.shop.drop_report(&drop).await?)))
}

/// The drop's public state: each size's state and stock, from this instance's snapshots (at most
/// 200 ms old), and a drop's line's shuffle seed (committed to, then shown), from this instance's
/// read of the line (at most once per 200 ms; left out while it cannot be read). A made-up drop
/// id costs no Redis read and counts against the client's quota of requests naming unknown sales
/// (429 beyond it).
#[utoipa::path(
    get,
    path = "/drops/{drop_id}",
    tag = "purchase",
    params(DropPath),
    responses(
        (status = 200, description = "The drop's state", body = PublicDrop,
            headers(("Cache-Control" = String, description = "`public, max-age=1`"))),
        (status = 400, description = "`invalid_request`: the drop id is malformed", body = ErrorBody),
        UnknownDrop,
        (status = 429, description = "`rate_limited`: too many requests naming unknown sales", body = ErrorBody),
        (status = 503, description = "`unavailable`: Redis is unreachable", body = ErrorBody),
    )
)]
pub async fn public(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let view = state.shop.drop_view(&drop, state.clients.of(&req)).await?;
    Ok(HttpResponse::Ok().insert_header(("Cache-Control", "public, max-age=1")).json(PublicDrop::from(view)))
}

async fn switch(
    operator: &Operator,
    path: &str,
    body: &web::Bytes,
    state: &AppState,
    switch: Switch,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(path)?;
    let reason = reason_of(body)?;
    let report = state.shop.switch_drop(&drop, switch, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(DropStatus::from(report)))
}

/// Pauses every size of the drop and its waiting room in one Redis call: from the answer on, no
/// purchase of any size is made, on any instance (the purchase script reads the pause in its own
/// call). One audit entry.
#[utoipa::path(
    post,
    path = "/admin/drops/{drop_id}/pause",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Paused; the drop's state", body = DropStatus), UnknownDrop, NotADrop, AdminErrors
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

/// Resumes every size of the drop and its waiting room in one Redis call. One audit entry.
#[utoipa::path(
    post,
    path = "/admin/drops/{drop_id}/resume",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Resumed; the drop's state", body = DropStatus), UnknownDrop, NotADrop, AdminErrors
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

/// Ends every size of the drop and its waiting room now (Redis time; an earlier end is kept), in
/// Redis and in Postgres. One audit entry.
#[utoipa::path(
    post,
    path = "/admin/drops/{drop_id}/end",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    request_body(content = Option<ControlRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Ended; the drop's state", body = DropStatus), UnknownDrop, NotADrop, AdminErrors
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

/// Changes several sizes' stock in one Redis call, all or nothing: if one size would go below 0
/// left or beyond 10,000,000, no size changes (409 naming it in `sale_id`). Sold-out sizes sell
/// again on every instance. One audit entry.
#[utoipa::path(
    post,
    path = "/admin/drops/{drop_id}/stock",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    request_body = DropStockRequest,
    responses(
        (status = 200, description = "Changed; the drop's state", body = DropStatus),
        UnknownDrop,
        (status = 409, description = "`stock_below_zero` or `stock_too_large` for the size in `sale_id`, or \
            `sale_retired` / `sale_restoring`: that size is retired / being repaired; `draw_stock_fixed`: the \
            drop is in draw mode, its sizes' stock is the draw's terms (docs/draw.md). Nothing changed in any \
            size", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn stock(
    operator: Operator,
    path: web::Path<String>,
    body: web::Json<Object<DropStockRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let DropStockRequest { add, reason } = body.into_inner().0;
    let report = state.shop.restock_drop(&drop, add, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(DropStatus::from(report)))
}

/// The operators' actions on the drop as a whole (`drop_seed`, `drop_pause`, `drop_resume`,
/// `drop_end`, `drop_stock`), newest first; each size's own trail lists them too.
#[utoipa::path(
    get,
    path = "/admin/drops/{drop_id}/audit",
    tag = "admin",
    params(DropPath, AuditQuery),
    security(("bearer" = [])),
    responses((status = 200, description = "The drop's audit trail, newest first", body = DropAuditTrail),
        UnknownDrop, AdminErrors)
)]
pub async fn audit(
    _viewer: Viewer,
    path: web::Path<String>,
    query: web::Query<AuditQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let limit = checked_limit(&query)?;
    let entries = records(state.shop.drop_audit(&drop, limit).await?);
    Ok(HttpResponse::Ok().json(DropAuditTrail { drop_id: drop.to_string(), entries }))
}
