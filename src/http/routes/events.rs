//! The order events out (`crate::shop::Shop::events`, `retry_event`): `GET /admin/events` (in
//! order after a cursor, or only those with a failed delivery) and `POST
//! /admin/events/{id}/retry`. Admin token, as every admin route.

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

use super::admin::AdminErrors;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::shop::lower::webhooks::{Delivery, Event, shown};

/// `?after=&limit=&status=` of the listing.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// The cursor: events with a greater `id` (the last `id` read; default 0: from the first kept).
    #[param(minimum = 0)]
    after: Option<i64>,
    /// Events to return, 1 to 500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<i64>,
    /// `failed`: only events with a delivery that failed for good.
    #[param(pattern = "^failed$")]
    status: Option<String>,
}

/// Events in order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    pub events: Vec<EventView>,
    /// The cursor to ask from next (`after`): the last event's `id`, or the one asked with.
    pub next_after: i64,
}

/// One event, with its body as every attempt sends it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    /// The cursor.
    pub id: i64,
    /// The `webhook-id` of every attempt.
    pub webhook_id: String,
    /// `order.created`, `order.paid`, `order.cancelled`, `order.expired`, `order.late_payment`,
    /// `order.refunded`, `sale.sold_out`, `draw.offered`, `draw.lost`.
    #[serde(rename = "type")]
    pub kind: String,
    pub sale_id: String,
    pub order_id: Option<Uuid>,
    /// The body sent: `{"type", "timestamp", "data"}`.
    #[schema(value_type = Object)]
    pub body: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    pub deliveries: Vec<DeliveryView>,
}

/// The event's delivery to one endpoint.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryView {
    /// The endpoint's URL without its user, password, query and fragment (as the endpoint
    /// listing shows it).
    pub endpoint: String,
    pub attempts: i32,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub next_attempt_at: Option<OffsetDateTime>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
}

impl From<Delivery> for DeliveryView {
    fn from(d: Delivery) -> Self {
        let status = match (d.delivered_at, d.failed_at) {
            (Some(_), _) => "delivered",
            (None, Some(_)) => "failed",
            (None, None) => "pending",
        };
        Self {
            endpoint: shown(&d.endpoint),
            attempts: d.attempts,
            next_attempt_at: (status == "pending").then_some(d.next_attempt_at),
            status: status.to_owned(),
            last_status: d.last_status,
            last_error: d.last_error,
        }
    }
}

impl From<Event> for EventView {
    fn from(e: Event) -> Self {
        Self {
            id: e.id,
            webhook_id: e.message_id,
            kind: e.kind,
            sale_id: e.sale_id,
            order_id: e.order_id,
            body: serde_json::from_str(&e.body).unwrap_or(serde_json::Value::String(e.body)),
            created_at: e.created_at,
            deliveries: e.deliveries.into_iter().map(DeliveryView::from).collect(),
        }
    }
}

/// The order events, oldest first after the cursor `after` (a consumer that missed deliveries
/// reads from its last `id` to catch up), or with `status=failed` those with a failed delivery.
/// Events are kept for `SECKILL_WEBHOOK_RETENTION` once settled.
#[utoipa::path(
    get,
    path = "/admin/events",
    tag = "admin",
    params(EventsQuery),
    security(("bearer" = [])),
    responses(
        // First: an entry below with the same status replaces its generic one.
        AdminErrors,
        (status = 200, description = "The events", body = EventList),
        (status = 400, description = "`invalid_request`: a bad limit or status", body = ErrorBody),
    )
)]
pub async fn list(
    _viewer: Viewer,
    query: web::Query<EventsQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let query = query.into_inner();
    let failed = match query.status.as_deref() {
        None => false,
        Some("failed") => true,
        Some(_) => return Err(ApiError::InvalidRequest("status must be \"failed\"".into())),
    };
    let after = query.after.unwrap_or(0);
    let events = state.shop.events(Some(after), query.limit, failed).await?;
    let next_after = events.last().map_or(after, |e| e.id);
    Ok(HttpResponse::Ok().json(EventList { events: events.into_iter().map(EventView::from).collect(), next_after }))
}

/// What a retry reopened.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Retried {
    pub id: i64,
    /// Deliveries due again at once (those already pending are left as they are).
    pub reopened: u64,
}

/// Sends the event again to every endpoint it was delivered to or failed for that is still
/// registered and enabled, at once and with a fresh schedule (the same `webhook-id` and body:
/// receivers drop a duplicate).
#[utoipa::path(
    post,
    path = "/admin/events/{id}/retry",
    tag = "admin",
    params(("id" = i64, Path, description = "The event's id (the cursor)")),
    security(("bearer" = [])),
    responses(
        // First: an entry below with the same status replaces its generic one.
        AdminErrors,
        (status = 200, description = "Reopened", body = Retried),
        (status = 400, description = "`invalid_request`: the id is not an integer", body = ErrorBody),
        (status = 404, description = "`unknown_event`", body = ErrorBody),
    )
)]
pub async fn retry(
    operator: Operator,
    path: web::Path<i64>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let id = path.into_inner();
    let reopened = state.shop.retry_event(id, operator.actor()).await?;
    Ok(HttpResponse::Ok().json(Retried { id, reopened }))
}
