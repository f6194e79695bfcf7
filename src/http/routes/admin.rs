//! `GET /admin/sales/{sale_id}` reports a sale's state and
//! `GET /admin/sales` every sale's (what the live page polls). Seeding is in `seed`,
//! reconciling in `reconcile`, retiring (`DELETE /admin/sales/{sale_id}`) in `retire`, the
//! payments to refund in `payments`, who is signed in in `GET /admin/me`. All need an admin
//! credential (`crate::http::operators`: `Viewer` for reads, `Operator` for writes).

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::responses::{SaleRetired, UnknownSale};
use super::sale_of;
use crate::domain::ms_to_time;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Viewer;
use crate::http::views::{EndpointView, WorkerReport};
use crate::shop::{SaleReport, SaleState, SalesReport, WebhooksReport};

/// The `{sale_id}` of the admin routes (documentation: the handlers validate it themselves).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct SalePath {
    /// 1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$")]
    sale_id: String,
}

/// Who the request's credential signs in.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignedIn {
    /// The operator's name; `null` for `SECKILL_ADMIN_TOKEN`, which names nobody.
    pub name: Option<String>,
    /// `viewer` (reads, the live page, exports) or `operator` (everything).
    pub role: String,
    /// What the audit records for this credential's actions: the name, or `admin-token`.
    pub actor: String,
}

/// Who is signed in: the credential's operator and role (the live page shows them).
#[utoipa::path(
    get,
    path = "/admin/me",
    tag = "admin",
    security(("bearer" = [])),
    responses((status = 200, description = "Who is signed in", body = SignedIn), AdminErrors)
)]
pub async fn me(viewer: Viewer) -> HttpResponse {
    let Viewer(signed) = viewer;
    HttpResponse::Ok().json(SignedIn {
        actor: signed.actor().to_owned(),
        role: signed.role.as_str().to_owned(),
        name: signed.name,
    })
}

/// The errors every admin route can answer, for the OpenAPI document.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum AdminErrors {
    /// `invalid_request`: bad sale id or body
    #[response(status = 400)]
    InvalidRequest(ErrorBody<'static>),
    /// `unauthorized`: missing or wrong bearer token
    #[response(status = 401)]
    Unauthorized(ErrorBody<'static>),
    /// `admin_disabled`: no admin credential is configured; `forbidden_role`: a viewer on a write
    /// route
    #[response(status = 403)]
    AdminDisabled(ErrorBody<'static>),
    /// `internal`; `not_recorded` for a stock change made in Redis that Postgres did not record
    /// (do not send it again)
    #[response(status = 500)]
    Internal(ErrorBody<'static>),
    /// `unavailable`: Redis or Postgres is unreachable
    #[response(status = 503)]
    Unavailable(ErrorBody<'static>),
}

/// A sale's state: `sold` and `queued` from Redis, then `persisted` from Postgres (`null` while
/// Postgres is unreachable). Postgres is read after Redis, and an order leaves the queue only
/// after its commit, so `sold - queued <= persisted` unless confirmed orders were lost.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq, ToSchema)]
pub struct SaleStatus {
    pub sale_id: String,
    pub stock_initial: i64,
    pub stock_left: i64,
    pub sold: i64,
    pub persisted: Option<i64>,
    pub queued: i64,
    /// Shards the stock is split over (1: unsharded).
    pub shards: u32,
    #[serde(with = "time::serde::rfc3339::option")]
    pub starts_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub ends_at: Option<OffsetDateTime>,
    /// The payment window in milliseconds; `null`: orders are final at once.
    #[serde(default)]
    pub payment_window_ms: Option<i64>,
    /// Orders whose unit went back to the stock (cancelled or expired): `stock_initial =
    /// stock_left + sold - released` (Redis).
    #[serde(default)]
    pub released: i64,
    /// Orders by standing in Postgres (`null` while Postgres is unreachable): reservations open.
    #[serde(default)]
    pub reserved: Option<i64>,
    /// Reservations paid in time.
    #[serde(default)]
    pub paid: Option<i64>,
    /// Reservations the buyer gave back, or an operator voided.
    #[serde(default)]
    pub cancelled: Option<i64>,
    /// Reservations not paid by their deadline.
    #[serde(default)]
    pub expired: Option<i64>,
    /// Paid orders an operator refunded (`POST /admin/orders/{order_id}/refund`).
    #[serde(default)]
    pub refunded: Option<i64>,
    /// Payments to refund: arrived after their order expired or was cancelled, or paid an order
    /// twice (`GET /admin/late-payments` lists them).
    #[serde(default)]
    pub late_payments: Option<i64>,
    /// A queued sale's admission rate, buyers per second (`null`: no waiting room).
    #[serde(default)]
    pub queue_rate: Option<u32>,
    /// Paused by an operator (`POST /admin/sales/{sale_id}/pause`): purchases are refused with
    /// `sale_paused` and the waiting room admits nobody more. Absent when not paused.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// The pause's reason, as the operator gave it; absent when not paused or none was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_reason: Option<String>,
    /// Units the buyers bought (an order holds 1 to `per_buyer`): `stock_initial = stock_left +
    /// units_sold - units_released` (Redis). Without quantities, `sold`.
    #[serde(default)]
    pub units_sold: i64,
    /// Units the released orders gave back (without quantities, `released`).
    #[serde(default)]
    pub units_released: i64,
    /// Units of the reservations open and paid, in Postgres (`null` while it is unreachable):
    /// with a payment window, once settled, `stock_initial = stock_left + units_reserved +
    /// units_paid`.
    #[serde(default)]
    pub units_reserved: Option<i64>,
    #[serde(default)]
    pub units_paid: Option<i64>,
    /// Units of the orders refunded without restock: they stay out of the stock, so
    /// `stock_initial = stock_left + units_reserved + units_paid + units_refunded_held` (+ units
    /// of confirmed orders) once the queue has drained and no release is owed.
    #[serde(default)]
    pub units_refunded_held: Option<i64>,
    /// Units one buyer may buy in the sale, or across its group.
    #[serde(default = "one")]
    pub per_buyer: u32,
    /// The sale's group (the part of its id before the `.`), whose sales share `per_buyer`;
    /// absent for a sale without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The proof of work the sale asks (tries a solve takes on average); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_cost: Option<u32>,
}

fn one() -> u32 {
    1
}

/// The sale's state: `sold` and `queued` from Redis, `persisted` from Postgres.
#[utoipa::path(
    get,
    path = "/admin/sales/{sale_id}",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The sale's state", body = SaleStatus),
        UnknownSale,
        SaleRetired,
        AdminErrors,
    )
)]
pub async fn status(
    _viewer: Viewer,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&path)?;
    Ok(HttpResponse::Ok().json(SaleStatus::from(state.shop.sale_report(&sale).await?)))
}

impl From<SaleReport> for SaleStatus {
    fn from(SaleReport { sale, redis, persisted, tally }: SaleReport) -> Self {
        let SaleState {
            stock_initial,
            stock_left,
            sold,
            released,
            units_sold,
            units_released,
            per_buyer,
            queued,
            starts_at_ms,
            ends_at_ms,
            shards,
            payment_window_ms,
            queue,
            paused,
            challenge_cost,
            drop_line: _,
            draw: _,
        } = redis;
        Self {
            group: sale.group().map(str::to_owned),
            sale_id: sale.to_string(),
            stock_initial,
            stock_left,
            sold,
            persisted,
            queued,
            shards,
            starts_at: starts_at_ms.map(ms_to_time),
            ends_at: ends_at_ms.map(ms_to_time),
            payment_window_ms,
            released,
            reserved: tally.map(|t| t.reserved),
            paid: tally.map(|t| t.paid),
            cancelled: tally.map(|t| t.cancelled),
            expired: tally.map(|t| t.expired),
            refunded: tally.map(|t| t.refunded),
            late_payments: tally.map(|t| t.late_payments),
            queue_rate: queue.map(|q| q.rate),
            paused: paused.is_some(),
            paused_reason: paused.filter(|reason| !reason.is_empty()),
            units_sold,
            units_released,
            units_reserved: tally.map(|t| t.units_reserved),
            units_paid: tally.map(|t| t.units_paid),
            units_refunded_held: tally.map(|t| t.units_refunded_held),
            per_buyer,
            challenge_cost,
        }
    }
}

/// Every sale's state and this instance's limiter refusals, as the live page shows them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SalesOverview {
    /// The first sales by id, at most 100, each read as `GET /admin/sales/{sale_id}` reads it.
    pub sales: Vec<SaleStatus>,
    /// Listed sales whose Redis state could not be read (a key of the wrong type), or that Redis
    /// lost (registered, no state): the others are listed all the same.
    #[serde(default)]
    pub unreadable: Vec<UnreadableSale>,
    /// This instance's worker: `ok`, or `degraded` with the order streams it skips (absent
    /// with `--no-worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerReport>,
    /// How many sales are registered in all.
    pub sales_total: usize,
    pub limiter: LimiterRefusals,
    /// This instance's proofs of work since it started (docs/waiting-room.md, "Proof of work").
    #[serde(default)]
    pub challenges: ChallengeCounts,
    /// The order events' deliveries and endpoints (docs/webhooks.md); absent while no endpoint is
    /// registered and no delivery kept, or while Postgres cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<WebhookDeliveries>,
    /// When this instance read the state (for rates between two samples).
    #[serde(with = "time::serde::rfc3339")]
    pub sampled_at: OffsetDateTime,
}

/// Where the order events' deliveries stand, over every endpoint.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookDeliveries {
    /// Deliveries not yet accepted (due, in flight, or waiting for a retry).
    pub open: i64,
    /// Deliveries that failed for good (`GET /admin/events?status=failed`).
    pub failed: i64,
    /// Seconds since the oldest open delivery's event was written: the delivery lag (0: none open).
    pub lag_seconds: f64,
    /// Every registered endpoint, with its state (a disabled one says why) and counts.
    #[serde(default)]
    pub endpoints: Vec<EndpointView>,
}

/// A sale `GET /admin/sales` could not read.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UnreadableSale {
    pub sale_id: String,
    /// Redis's error, or that Redis has no state for the sale (lost, or being seeded).
    pub error: String,
}

/// Requests to `/buy` this instance's rate limiter refused since it started (all sales; the
/// limiter counts clients, not sales). Prometheus sums them over instances.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct LimiterRefusals {
    /// Refused by the limiter script in Redis.
    pub refused: u64,
    /// Refused from memory: the client was refused earlier and its wait is not over.
    pub refused_from_memory: u64,
}

/// This instance's proofs of work: issued and solved by cost, refused by reason.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct ChallengeCounts {
    /// By the factor of its sale's cost a challenge asked (rounded up to a power of two), ascending.
    pub by_cost: Vec<ChallengesAtCost>,
    /// Solutions refused, by reason (`missing`, `malformed`, `forged`, `expired`, `other_sale`,
    /// `other_buyer`, `other_address`, `wrong`, `replayed`).
    pub refused: std::collections::BTreeMap<String, u64>,
}

/// The challenges asked at one cost.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ChallengesAtCost {
    /// The factor of the sale's cost: 1, 2, 4, … 1024.
    pub cost: u32,
    pub issued: u64,
    /// Solutions spent: each let a buyer in.
    pub solved: u64,
}

/// Every registered sale's state (the first 100 by id) and this instance's limiter refusals.
#[utoipa::path(
    get,
    path = "/admin/sales",
    tag = "admin",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every sale's state", body = SalesOverview),
        AdminErrors,
    )
)]
pub async fn list(_viewer: Viewer, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let SalesReport { sales, unreadable, worker, sales_total, refused, refused_from_memory, webhooks, sampled_at } =
        state.shop.sales_report().await?;
    Ok(HttpResponse::Ok().json(SalesOverview {
        sales: sales.into_iter().map(SaleStatus::from).collect(),
        unreadable: unreadable
            .into_iter()
            .map(|(sale, error)| UnreadableSale { sale_id: sale.to_string(), error })
            .collect(),
        worker: worker.map(WorkerReport::from),
        sales_total,
        limiter: LimiterRefusals { refused, refused_from_memory },
        challenges: {
            let (by_cost, refused) = state.shop.metrics().challenge_tally();
            ChallengeCounts {
                by_cost: by_cost
                    .into_iter()
                    .map(|(cost, issued, solved)| ChallengesAtCost { cost, issued, solved })
                    .collect(),
                refused: refused.into_iter().collect(),
            }
        },
        webhooks: webhooks.map(|WebhooksReport { summary, endpoints }| WebhookDeliveries {
            open: summary.open,
            failed: summary.failed,
            lag_seconds: summary.oldest_open_age_secs,
            endpoints: endpoints.into_iter().map(EndpointView::from).collect(),
        }),
        sampled_at,
    }))
}
