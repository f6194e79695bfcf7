//! `PUT /admin/sales/{sale_id}` seeds a sale; `GET /admin/sales/{sale_id}` reports its state and
//! `GET /admin/sales` every sale's (what the live page polls). Reconciling is in `reconcile`,
//! retiring (`DELETE /admin/sales/{sale_id}`) in `retire`. All need
//! `Authorization: Bearer <SECKILL_ADMIN_TOKEN>`.

use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{FromRequest, HttpRequest, HttpResponse, web};
use secrecy::ExposeSecret;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use time::OffsetDateTime;
use utoipa::ToSchema;

use crate::db;
use crate::domain::SaleId;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::orders::streams::WorkerReport;
use crate::purchase::shards::MAX_SHARDS;
use crate::purchase::{SaleSpec, SaleState, SeedOutcome};
use crate::redis::connection::is_redis_outage;
use crate::reservations;
use crate::reservations::store::{self, LatePayment, Tally};

/// Largest stock one sale may hold (the buyer set grows to this many members).
pub const MAX_STOCK: i64 = 10_000_000;

/// Most sales `GET /admin/sales` lists (the first by sale id).
pub const MAX_LISTED_SALES: usize = 100;

/// Proof that the request carried the admin token. Extracted before the body, so an
/// unauthenticated request is refused with 401 whatever its body.
pub struct Admin;

impl FromRequest for Admin {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let expected = req.app_data::<web::Data<AppState>>().and_then(|s| s.admin_token.clone());
        let Some(expected) = expected else {
            return ready(Err(ApiError::AdminDisabled));
        };
        let presented = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or_default();
        // Compared as SHA-256 digests: equal lengths whatever was presented, so the time taken
        // tells nothing of the token's length either.
        let digest = |token: &str| Sha256::digest(token.as_bytes());
        let ok =
            constant_time_eq::constant_time_eq_32(&digest(presented).into(), &digest(expected.expose_secret()).into());
        ready(if ok { Ok(Admin) } else { Err(ApiError::Unauthorized) })
    }
}

/// The `{sale_id}` of the admin routes (documentation: the handlers validate it themselves).
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
pub struct SalePath {
    /// 1-64 characters of `[A-Za-z0-9_-]`.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    sale_id: String,
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
    /// `admin_disabled`: no admin token is configured
    #[response(status = 403)]
    AdminDisabled(ErrorBody<'static>),
    /// `internal`
    #[response(status = 500)]
    Internal(ErrorBody<'static>),
    /// `unavailable`: Redis or Postgres is unreachable
    #[response(status = 503)]
    Unavailable(ErrorBody<'static>),
}

/// A sale to create or re-seed. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SeedRequest {
    /// Items for sale, 0 to 10,000,000.
    #[schema(minimum = 0, maximum = 10_000_000)]
    #[serde(deserialize_with = "integral")]
    stock: i64,
    /// When the sale opens (RFC 3339); unset: at once.
    #[serde(default, with = "time::serde::rfc3339::option")]
    starts_at: Option<OffsetDateTime>,
    /// When the sale ends (RFC 3339), after `starts_at` and in the future (a sale that has
    /// ended before it is seeded is refused: the janitor would retire it); unset: never.
    #[serde(default, with = "time::serde::rfc3339::option")]
    ends_at: Option<OffsetDateTime>,
    /// Shards to split the stock over, 1 to 16 (docs/stock-sharding.md): more than one lets one
    /// hot sale use several Redis Cluster masters. Fixed by the sale's first seed: omit it (or
    /// repeat it) when re-seeding. Default 1.
    #[schema(minimum = 1, maximum = 16)]
    #[serde(default)]
    shards: Option<u32>,
    /// How long a win may wait for its payment (a duration, 1s to 7d: `"15m"`, `"3s"`): each
    /// order is then a reservation, paid by its deadline or its unit goes back to the sale
    /// (docs/reservations.md). Unset: `SECKILL_PAYMENT_WINDOW`, and without it orders are final
    /// at once. Not with more than one shard.
    #[serde(default)]
    #[schema(example = "15m")]
    payment_window: Option<String>,
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
    /// Reservations the buyer gave back.
    #[serde(default)]
    pub cancelled: Option<i64>,
    /// Reservations not paid by their deadline.
    #[serde(default)]
    pub expired: Option<i64>,
    /// Payments to refund: arrived after their order expired or was cancelled, or paid an order
    /// twice (`GET /admin/late-payments` lists them).
    #[serde(default)]
    pub late_payments: Option<i64>,
}

/// An integer, also when written with a zero fraction (`2326.0`): JSON Schema's `integer`
/// allows that, so a client generated from the document may send it.
fn integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    let number = serde_json::Number::deserialize(deserializer)?;
    match (number.as_i64(), number.as_f64()) {
        (Some(n), _) => Ok(n),
        (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(serde::de::Error::custom(format!("expected an integer, got {number}"))),
    }
}

pub(super) fn sale_from_path(path: &str) -> Result<SaleId, ApiError> {
    SaleId::parse(path).map_err(ApiError::InvalidRequest)
}

/// Creates or re-seeds a sale. The Postgres record and the Redis seed succeed together: the
/// Postgres transaction commits only after Redis accepted the seed. A sale with buyers is never
/// re-seeded (409), so nobody's purchase is erased; nor is a sale with orders in Postgres that
/// Redis lost (409 `sale_has_orders`: reconciliation's repair restores it with its buyers), nor
/// a retired sale (409 `sale_retired`: its row is locked in the transaction, so a retirement and
/// a seed of one sale never interleave).
#[utoipa::path(
    put,
    path = "/admin/sales/{sale_id}",
    tag = "admin",
    params(SalePath),
    security(("bearer" = [])),
    request_body = SeedRequest,
    responses(
        (status = 200, description = "Seeded; the sale's state", body = SaleStatus),
        (status = 409, description = "`sale_in_progress`: the sale has buyers and cannot be re-seeded; `sale_has_orders`: Postgres holds orders of the sale that Redis lost (repair it with the reconcile route instead); `sale_started`: a sharded sale that has started cannot be re-seeded; `shards_fixed`: the sale exists with another shard count; `sale_retired`: the sale was retired and has no second life (seed another sale id)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn seed(
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<SeedRequest>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_from_path(&path)?;
    let SeedRequest { stock, starts_at, ends_at, shards, payment_window } = body.into_inner();
    if !(0..=MAX_STOCK).contains(&stock) {
        return Err(ApiError::InvalidRequest(format!("stock must be between 0 and {MAX_STOCK}")));
    }
    if shards.is_some_and(|k| !(1..=MAX_SHARDS).contains(&k)) {
        return Err(ApiError::InvalidRequest(format!("shards must be between 1 and {MAX_SHARDS}")));
    }
    if let (Some(start), Some(end)) = (starts_at, ends_at)
        && start >= end
    {
        return Err(ApiError::InvalidRequest("starts_at must be before ends_at".into()));
    }
    // A sale that has ended before it is seeded is a typo; seeded, the janitor would retire it
    // and burn its id.
    if ends_at.is_some_and(|end| end <= OffsetDateTime::now_utc()) {
        return Err(ApiError::InvalidRequest("ends_at must be in the future".into()));
    }
    let asked_window = match payment_window.as_deref() {
        Some(raw) => Some(
            reservations::payment_window(raw).map_err(|e| ApiError::InvalidRequest(format!("payment_window: {e}")))?,
        ),
        None => None,
    };
    // A shard never gets stock back (docs/stock-sharding.md), which a window's releases would
    // break: a sharded sale has no window, and asking for both is refused.
    let sharded = shards.unwrap_or(1) > 1
        || (shards.is_none() && state.sales.layout(&sale).await?.is_some_and(|layout| layout.is_sharded()));
    if sharded && asked_window.is_some() {
        return Err(ApiError::InvalidRequest("payment_window cannot be used with more than one shard".into()));
    }
    let window = if sharded { None } else { asked_window.or(state.default_payment_window) };
    let payment_window_ms = window.map(|w| w.as_millis() as i64);
    let to_ms = |t: Option<OffsetDateTime>| t.map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
    let spec =
        SaleSpec { stock, starts_at_ms: to_ms(starts_at), ends_at_ms: to_ms(ends_at), shards, payment_window_ms };

    // Checked first without a lock (a retired sale has orders Redis forgot: that is not what to
    // say), then again under the row's lock, without holding a connection across other queries.
    if db::sale_retired(&state.pool, sale.as_str()).await? == Some(true) {
        return Err(ApiError::SeedRetired);
    }
    refuse_if_redis_forgot_orders(&state, &sale).await?;
    let mut tx = state.pool.begin().await?;
    if db::lock_retired(&mut tx, sale.as_str()).await? {
        return Err(ApiError::SeedRetired);
    }
    db::upsert_sale(&mut tx, &sale, stock, starts_at, ends_at, payment_window_ms).await?;
    match state.sales.seed(&sale, spec).await? {
        SeedOutcome::Seeded => {
            state.sold_out.clear(sale.as_str());
            tx.commit().await?
        }
        SeedOutcome::InProgress => return Err(ApiError::SaleInProgress),
        SeedOutcome::Started => return Err(ApiError::SaleStarted),
        SeedOutcome::ShardsFixed { shards } => return Err(ApiError::ShardsFixed { shards }),
    }
    tracing::info!(sale_id = %sale, stock, shards, payment_window_ms, "sale seeded");
    let status = sale_status(&state, &sale).await?;
    Ok(HttpResponse::Ok().json(status))
}

/// A seed must not start a second life over the orders Postgres holds: if the sale has orders
/// there, it is refused, as `sale_in_progress` while Redis still knows buyers of it, else as
/// `sale_has_orders` (Redis lost them; a seed would let them buy again and oversell). No buyer
/// can appear in between: orders come only from buyers.
async fn refuse_if_redis_forgot_orders(state: &AppState, sale: &SaleId) -> Result<(), ApiError> {
    let orders = db::count_orders(&state.pool, sale).await?;
    if orders == 0 {
        return Ok(());
    }
    match state.sales.sale_state(sale).await? {
        Some(redis) if redis.sold > 0 => Err(ApiError::SaleInProgress),
        _ => Err(ApiError::SaleHasOrders { orders }),
    }
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
        (status = 404, description = "`unknown_sale`", body = ErrorBody),
        (status = 410, description = "`sale_retired`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn status(
    _admin: Admin,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_from_path(&path)?;
    Ok(HttpResponse::Ok().json(sale_status(&state, &sale).await?))
}

async fn sale_status(state: &AppState, sale: &SaleId) -> Result<SaleStatus, ApiError> {
    let Some(redis) = state.sales.sale_state(sale).await? else {
        return Err(if state.retired.check(sale).await { ApiError::SaleRetired } else { ApiError::UnknownSale });
    };
    let persisted = db::count_orders(&state.pool, sale).await.inspect_err(warn_without_persisted).ok();
    let tally = state.reservations.tally(sale).await.inspect_err(warn_without_persisted).ok();
    Ok(status_of(sale, redis, persisted, tally))
}

fn warn_without_persisted(err: &sqlx::Error) {
    tracing::warn!(error = %err, "sale status without the persisted count");
}

fn status_of(sale: &SaleId, redis: SaleState, persisted: Option<i64>, tally: Option<Tally>) -> SaleStatus {
    let SaleState {
        stock_initial,
        stock_left,
        sold,
        released,
        queued,
        starts_at_ms,
        ends_at_ms,
        shards,
        payment_window_ms,
    } = redis;
    SaleStatus {
        sale_id: sale.to_string(),
        stock_initial,
        stock_left,
        sold,
        persisted,
        queued,
        shards,
        starts_at: starts_at_ms.map(db::ms_to_time),
        ends_at: ends_at_ms.map(db::ms_to_time),
        payment_window_ms,
        released,
        reserved: tally.map(|t| t.reserved),
        paid: tally.map(|t| t.paid),
        cancelled: tally.map(|t| t.cancelled),
        expired: tally.map(|t| t.expired),
        late_payments: tally.map(|t| t.late_payments),
    }
}

/// Every sale's state and this instance's limiter refusals, as the live page shows them.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SalesOverview {
    /// The first sales by id, at most 100, each read as `GET /admin/sales/{sale_id}` reads it.
    pub sales: Vec<SaleStatus>,
    /// Listed sales whose Redis state could not be read (a key of the wrong type): the others
    /// are listed all the same.
    #[serde(default)]
    pub unreadable: Vec<UnreadableSale>,
    /// This instance's worker: `ok`, or `degraded` with the order streams it skips (absent
    /// with `--no-worker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<WorkerReport>,
    /// How many sales are registered in all.
    pub sales_total: usize,
    pub limiter: LimiterRefusals,
    /// When this instance read the state (for rates between two samples).
    #[serde(with = "time::serde::rfc3339")]
    pub sampled_at: OffsetDateTime,
}

/// A sale `GET /admin/sales` could not read.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct UnreadableSale {
    pub sale_id: String,
    /// Redis's error.
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
pub async fn list(_admin: Admin, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let sampled_at = OffsetDateTime::now_utc();
    let mut ids = state.sales.sale_ids().await?;
    ids.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
    let sales_total = ids.len();
    ids.truncate(MAX_LISTED_SALES);
    // One sale's broken key (a wrong type) is reported, not a 500 for the whole list; an outage is a 503.
    let mut redis = Vec::with_capacity(ids.len());
    let mut unreadable = Vec::new();
    for (id, read) in ids.iter().zip(futures::future::join_all(ids.iter().map(|id| state.sales.sale_state(id))).await) {
        match read {
            Ok(read) => redis.push(read),
            Err(err) if is_redis_outage(&err) => return Err(err.into()),
            Err(err) => {
                unreadable.push(UnreadableSale { sale_id: id.to_string(), error: err.to_string() });
                redis.push(None);
            }
        }
    }
    let persisted = db::count_orders_by_sale(&state.pool, &ids).await.inspect_err(warn_without_persisted).ok();
    let tallies = store::tally_by_sale(&state.pool, &ids).await.inspect_err(warn_without_persisted).ok();
    let sales = ids
        .iter()
        .zip(redis)
        .filter_map(|(id, redis)| {
            let count = persisted.as_ref().map(|counts| counts.get(id.as_str()).copied().unwrap_or(0));
            let tally = tallies.as_ref().map(|t| t.get(id.as_str()).copied().unwrap_or_default());
            Some(status_of(id, redis?, count, tally))
        })
        .collect();
    let worker = state.worker_health.as_ref().map(|h| h.report());
    let refusals = |decision| state.metrics.limiter_decisions.with_label_values(&[decision]).get();
    let limiter =
        LimiterRefusals { refused: refusals("refused"), refused_from_memory: refusals("refused_from_memory") };
    Ok(HttpResponse::Ok().json(SalesOverview { sales, unreadable, worker, sales_total, limiter, sampled_at }))
}

/// Most late payments one answer lists.
pub const MAX_LISTED_LATE_PAYMENTS: i64 = 1000;

/// Which sale's payments to refund.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LatePaymentsQuery {
    /// Only this sale's (1-64 characters of `[A-Za-z0-9_-]`); unset: every sale's.
    #[param(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    sale_id: Option<String>,
}

/// The payments to refund, oldest first (at most 1,000): events that arrived after their order
/// expired or was cancelled (`late`), or paid an order already paid (`duplicate`). Also those of
/// retired sales: a late payment may arrive after the sale is over.
#[utoipa::path(
    get,
    path = "/admin/late-payments",
    tag = "admin",
    params(LatePaymentsQuery),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The payments to refund", body = Vec<LatePayment>),
        AdminErrors,
    )
)]
pub async fn late_payments(
    _admin: Admin,
    query: web::Query<LatePaymentsQuery>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = query.into_inner().sale_id.map(|id| sale_from_path(&id)).transpose()?;
    let listed = store::late_payments(&state.pool, sale.as_ref(), MAX_LISTED_LATE_PAYMENTS).await?;
    Ok(HttpResponse::Ok().json(listed))
}
