//! `PUT /admin/sales/{sale_id}`: seeding a sale (creating it, or re-seeding one without buyers),
//! in Redis and Postgres together (`crate::shop::Shop::seed`). Needs the admin token.

use actix_web::{HttpResponse, web};
use serde::Deserialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::{AdminErrors, SalePath, SaleStatus};
use super::object::Object;
use super::sale_of;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Operator;
use crate::shop::{DEFAULT_CHALLENGE_COST, SeedOrder};

/// A sale to create or re-seed, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SeedRequest {
    /// Items for sale, 0 to 10,000,000.
    #[schema(minimum = 0, maximum = 10_000_000)]
    #[serde(deserialize_with = "integral")]
    stock: i64,
    /// When the sale opens (RFC 3339); unset: at once.
    #[serde(default, deserialize_with = "instant_opt")]
    starts_at: Option<OffsetDateTime>,
    /// When the sale ends (RFC 3339), after `starts_at` and in the future (a sale that has
    /// ended before it is seeded is refused: the janitor would retire it); unset: never.
    #[serde(default, deserialize_with = "instant_opt")]
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
    /// at once. Not with more than one shard. The sales of a group have one window (409
    /// `group_window_differs` for another than its other sales').
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
    /// Units one buyer may buy in the sale, over its orders (1 to 100; default 1): `POST /buy`'s
    /// `quantity` is taken against it. In a group, the units one buyer may buy across the group's
    /// sales: every sale of a group must seed the same value (409 `group_limit_differs`). Over
    /// 1 not with more than one shard.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100)]
    #[serde(default, deserialize_with = "integral_opt")]
    per_buyer: Option<i64>,
    /// The group the sale belongs to: sales of one group (a product's sizes) share each buyer's
    /// `per_buyer`. A sale of group `G` is named `G.<name>` (e.g. `sneaker.42`), so every
    /// instance finds the group's Redis Cluster slot from the id alone (docs/stock-sharding.md);
    /// this field, if given, must agree with the id. Not with more than one shard.
    #[schema(min_length = 1, max_length = 62, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$", example = "sneaker")]
    #[serde(default)]
    group: Option<String>,
    /// A proof of work before each join of the waiting room (or, without one, each purchase):
    /// docs/waiting-room.md, "Proof of work". Unset: `SECKILL_CHALLENGE_COST`'s (0 by default:
    /// none); `{"cost": 0}`: none.
    #[serde(default)]
    #[schema(value_type = Option<ChallengeRequest>)]
    challenge: Option<Object<ChallengeRequest>>,
}

/// A sale's proof of work, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChallengeRequest {
    /// The tries (PBKDF2-SHA-256 derivations of `SECKILL_CHALLENGE_ITERATIONS` iterations) a
    /// person's solve takes on average, 0 to 1,000,000 (0: none); default 1,000, about a quarter of
    /// a second in a browser. A client address that asks often is asked up to
    /// `SECKILL_CHALLENGE_MAX_FACTOR` times more.
    #[schema(minimum = 0, maximum = 1_000_000, example = 1000)]
    #[serde(default)]
    cost: Option<u32>,
}

/// A sale's waiting room, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueRequest {
    /// When buyers can start joining (RFC 3339), before `starts_at`.
    #[serde(deserialize_with = "instant")]
    #[schema(value_type = String, format = DateTime)]
    opens_at: OffsetDateTime,
    /// Buyers admitted per second, 1 to 100,000: what the shop can serve. Admission also stops
    /// while the admitted buyers who have not bought could take twice the stock left.
    #[schema(minimum = 1, maximum = 100_000)]
    rate: u32,
}

impl ChallengeRequest {
    /// The cost asked (unset: the default proof of work's).
    pub(super) fn cost(Object(request): Object<Self>) -> u32 {
        request.cost.unwrap_or(DEFAULT_CHALLENGE_COST)
    }
}

impl QueueRequest {
    /// When the line opens, and its rate.
    pub(super) fn pair(Object(request): Object<Self>) -> (OffsetDateTime, u32) {
        (request.opens_at, request.rate)
    }
}

/// An instant in RFC 3339, as UTC. One whose UTC date is past the year 9999 (`9999-12-31T23:59:59-01:00`)
/// is refused: `time` without its large dates cannot convert it, and Postgres's encoding of it
/// would panic.
pub(super) fn instant<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<OffsetDateTime, D::Error> {
    time::serde::rfc3339::deserialize(deserializer)?
        .checked_to_offset(time::UtcOffset::UTC)
        .ok_or_else(|| serde::de::Error::custom("the instant is past the year 9999 in UTC"))
}

/// [`instant`] for an optional field (absent or `null`: `None`).
pub(super) fn instant_opt<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<OffsetDateTime>, D::Error> {
    #[derive(Deserialize)]
    struct Instant(#[serde(deserialize_with = "instant")] OffsetDateTime);
    Ok(Option::<Instant>::deserialize(deserializer)?.map(|Instant(t)| t))
}

/// [`integral`] for an optional field (absent or `null`: `None`).
pub(super) fn integral_opt<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    struct Integral(#[serde(deserialize_with = "integral")] i64);
    Ok(Option::<Integral>::deserialize(deserializer)?.map(|Integral(n)| n))
}

/// An integer, also when written with a zero fraction (`2326.0`): JSON Schema's `integer`
/// allows that, so a client generated from the document may send it.
pub(super) fn integral<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
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
            instead), or of its group's other sales while Redis lost the group (repair them first); \
            `sale_started`: a sharded sale that has started cannot be re-seeded; `shards_fixed`: the sale exists \
            with another shard count; `sale_retired`: the sale was retired and has no second life (seed \
            another sale id); `group_limit_differs`: the sale's group allows another `per_buyer` (the body's \
            `per_buyer`); `group_window_differs`: the sale's group has other sales with another payment window",
            body = ErrorBody),
        (status = 413, description = "`payload_too_large`", body = ErrorBody),
        (status = 415, description = "`unsupported_media_type`", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn seed(
    operator: Operator,
    path: web::Path<String>,
    body: web::Json<Object<SeedRequest>>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&path)?;
    let SeedRequest { stock, starts_at, ends_at, shards, payment_window, queue, per_buyer, group, challenge } =
        body.into_inner().0;
    let challenge = challenge.map(ChallengeRequest::cost);
    let queue = queue.map(QueueRequest::pair);
    // Out of u32's range reads as 0, which the seed refuses with the rest outside 1-100.
    let per_buyer = per_buyer.map(|n| u32::try_from(n).unwrap_or(0));
    let order = SeedOrder { stock, starts_at, ends_at, shards, payment_window, queue, per_buyer, group, challenge };
    let report = state.shop.seed(&sale, order, operator.actor()).await?;
    Ok(HttpResponse::Ok().json(SaleStatus::from(report)))
}
