//! `PUT /admin/sales/{sale_id}`: seeding a sale (creating it, or re-seeding one without buyers),
//! in Redis and Postgres together. Needs the admin token.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::{Admin, AdminErrors, SalePath, SaleStatus, sale_from_path, sale_status};
use super::object::Object;
use crate::admission::{self, MAX_RATE};
use crate::db;
use crate::domain::{QueueSpec, SaleId};
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::purchase::shards::MAX_SHARDS;
use crate::purchase::{SaleSpec, SeedOutcome};
use crate::reservations;

/// Largest stock one sale may hold (the buyer set grows to this many members).
pub const MAX_STOCK: i64 = 10_000_000;

/// A sale to create or re-seed, as a JSON object. Unknown fields are refused.
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
    /// A waiting room in front of the sale (docs/waiting-room.md): buyers join from `opens_at`,
    /// are put in a shuffled order at `starts_at` (later ones behind, in arrival order), and
    /// only admitted buyers can buy. Needs `starts_at`; not with more than one shard. A re-seed
    /// keeps the sale's shuffle seed. Unset: anyone may buy from the start.
    #[serde(default)]
    #[schema(value_type = Option<QueueRequest>)]
    queue: Option<Object<QueueRequest>>,
}

/// A sale's waiting room, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueRequest {
    /// When buyers can start joining (RFC 3339), before `starts_at`.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    opens_at: OffsetDateTime,
    /// Buyers admitted per second, 1 to 100,000: what the shop can serve. Admission also stops
    /// while the admitted buyers who have not bought could take twice the stock left.
    #[schema(minimum = 1, maximum = 100_000)]
    rate: u32,
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
        (status = 409, description = "`sale_in_progress`: the sale has buyers and cannot be re-seeded; \
            `sale_has_orders`: Postgres holds orders of the sale that Redis lost (repair it with the reconcile route \
            instead); `sale_started`: a sharded sale that has started cannot be re-seeded; `shards_fixed`: the sale \
            exists with another shard count; `sale_retired`: the sale was retired and has no second life (seed \
            another sale id)", body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn seed(
    _admin: Admin,
    path: web::Path<String>,
    body: web::Json<Object<SeedRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_from_path(&path)?;
    let SeedRequest { stock, starts_at, ends_at, shards, payment_window, queue } = body.into_inner().0;
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
    let to_ms = |t: OffsetDateTime| (t.unix_timestamp_nanos() / 1_000_000) as i64;
    let queue = match queue {
        None => None,
        Some(Object(QueueRequest { opens_at, rate })) => {
            // A queued sale's purchases arrive at its rate: it never needs shards, and a shard's
            // purchases would not see the line, which lives in the sale's own slot.
            if sharded {
                return Err(ApiError::InvalidRequest("queue cannot be used with more than one shard".into()));
            }
            if !(1..=MAX_RATE).contains(&rate) {
                return Err(ApiError::InvalidRequest(format!("queue.rate must be between 1 and {MAX_RATE}")));
            }
            if starts_at.is_none_or(|start| opens_at >= start) {
                return Err(ApiError::InvalidRequest("a queue needs starts_at, after queue.opens_at".into()));
            }
            Some(QueueSpec {
                opens_at_ms: to_ms(opens_at),
                rate,
                ttl_ms: state.admission_ttl.as_millis() as i64,
                seed: admission::draw_seed(),
            })
        }
    };
    let spec = SaleSpec {
        stock,
        starts_at_ms: starts_at.map(to_ms),
        ends_at_ms: ends_at.map(to_ms),
        shards,
        payment_window_ms,
        queue,
    };

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
    db::upsert_sale(&mut tx, &sale, stock, starts_at, ends_at, payment_window_ms, queue.as_ref()).await?;
    match state.sales.seed(&sale, spec).await? {
        SeedOutcome::Seeded => {
            state.sold_out.clear(sale.as_str());
            tx.commit().await?
        }
        SeedOutcome::InProgress => return Err(ApiError::SaleInProgress),
        SeedOutcome::Started => return Err(ApiError::SaleStarted),
        SeedOutcome::ShardsFixed { shards } => return Err(ApiError::ShardsFixed { shards }),
    }
    tracing::info!(sale_id = %sale, stock, shards, payment_window_ms, queue_rate = queue.map(|q| q.rate),
        "sale seeded");
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
