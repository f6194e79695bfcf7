//! `POST /buy`: the buyer and the sale from the request, then the purchase use case
//! ([`crate::shop::Shop::buy`]: the limits, then one atomic purchase in Redis).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::object::Object;
use super::responses::{JsonBody, UnknownSale};
use super::{sale_of, user_id};
use crate::domain::{MAX_PER_BUYER, Standing, ms_to_time};
use crate::http::AppState;
use crate::http::buyer::Buyer;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{ADMISSION_HEADER, AdmissionToken, Bought, Limited};

/// A purchase: one user, one sale, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuyRequest {
    /// 1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>` for a sale of a group.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$")]
    sale_id: String,
    /// Units to buy, all or none: 1 (the default) up to the sale's `per_buyer` (at most 100).
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100, default = 1)]
    #[serde(default, deserialize_with = "super::seed::integral_opt")]
    quantity: Option<i64>,
    /// The buyer: described in the document by [`user_id_schema`].
    #[schema(schema_with = user_id_schema)]
    #[serde(default)]
    user_id: Option<String>,
}

/// `BuyRequest.user_id`'s schema: a user id's, with its description (a field's doc comment is not
/// read under `schema_with`).
fn user_id_schema() -> utoipa::openapi::Object {
    let mut schema = user_id::schema();
    schema.description = Some(
        "1-128 printable characters: no control, format (zero-width, bidi controls) or\n\
         default-ignorable characters (variation selectors, Hangul fillers; the pattern lists those\n\
         of the Basic Multilingual Plane, the few beyond it are refused too), no whitespace at either\n\
         end, and in Unicode NFC (composed: `é` as U+00E9, not `e` and U+0301; a pattern cannot say\n\
         this, a decomposed spelling is refused, not rewritten). Required with `SECKILL_AUTH=none`\n\
         (this document then lists it as required); with `jwt` it may be left out, the buyer is the\n\
         token's, and a `user_id` other than it is refused (403 `user_mismatch`)."
            .into(),
    );
    schema
}

/// The 201 body: the order the worker will store in Postgres under the same id.
#[derive(Debug, Serialize, ToSchema)]
pub struct BuyResponse {
    pub order_id: Uuid,
    pub sale_id: String,
    pub user_id: String,
    /// Units bought.
    pub quantity: u32,
    /// `reserved`, in a sale with a payment window only: the order must be paid by `pay_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "reserved")]
    pub status: Option<Standing>,
    /// In a sale with a payment window only: the reservation's deadline (the Redis server's
    /// clock); unpaid by then, the unit goes back to the sale.
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_by: Option<time::OffsetDateTime>,
}

/// Every answer carries `RateLimit-Policy`, and `RateLimit` whenever the limiter decided (a
/// sale known to be sold out is answered before the limiter, so without it). With a per-buyer
/// limit set, both fields describe the limit closer to refusing: the one that refused, or the
/// one with fewer requests remaining (policy `"buyer"`).
#[utoipa::path(
    post,
    path = "/buy",
    tag = "purchase",
    request_body = BuyRequest,
    params(("Seckill-Admission" = Option<String>, Header, description = "A queued sale only: the buyer's admission \
        token, from `GET /sales/{sale_id}/queue` once admitted (`<place>.<expires_ms>.<hex>`)")),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 201, description = "Bought: the order is queued and will be in Postgres under this id; in a sale \
            with a payment window it is a reservation (`status`: `reserved`), to be paid by `pay_by`",
            body = BuyResponse,
            headers(("RateLimit-Policy" = String, description = "The quota policy, e.g. `\"buy\";q=20;w=1`"),
                    ("RateLimit" = String, description = "Remaining quota and seconds to reset, e.g. \
                        `\"buy\";r=19;t=1`"))),
        (status = 400, description = "`invalid_request`: bad JSON or not an object, missing, extra or mistyped \
            fields, ids out of bounds", body = ErrorBody),
        (status = 401, description = "`unauthenticated`: no or a malformed `Authorization: Bearer` header; \
            `invalid_token`: the token is refused (signature, algorithm, expired, not yet valid, issuer, audience, \
            user claim). `SECKILL_AUTH=jwt` only", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "`Bearer`, or `Bearer error=\"invalid_token\"`"))),
        (status = 403, description = "`sale_not_started`, `sale_ended`, `sale_paused` (an operator paused the sale; \
            `Retry-After`), or `user_mismatch`: the body's user_id is not the token's buyer; `not_admitted`: the \
            sale has a waiting room and the request carries no valid `Seckill-Admission` token of this buyer for \
            this sale (missing, malformed, forged, another buyer's or sale's, or expired); `challenge_required`: \
            the sale (without a waiting room) asks a proof of work and the request has no `Seckill-Challenge` header; \
            `challenge_failed`: its solution is refused (malformed, forged, expired, another sale's, buyer's or client \
            address's, wrong, or used before); nothing is bought",
            body = ErrorBody),
        UnknownSale,
        (status = 409, description = "`already_purchased`: this user already bought in this sale. The body carries \
            the order it was given (`order_id`, `status`, `created_at`), so a retry after a lost 201 learns its \
            order; `status` is what `GET /sales/{sale_id}/order` reads: `queued` or `confirmed`, where the order is \
            on its way to Postgres, and in a sale with a payment window its payment state (`reserved`, `paid`, \
            `cancelled` or `expired`: a cancelled or expired buyer cannot buy again either; `quantity` when over 1). \
            `limit_reached`: the quantity would take the buyer over the units one buyer may buy in the sale, or \
            across its group's sales (`per_buyer`; `held`: the units the buyer holds in the group, `orders`: its \
            orders there). `insufficient_stock`: fewer units are left (`stock_left`) than the quantity asked; \
            nothing is bought, never part of it", body = ErrorBody),
        (status = 410, description = "`sold_out`; `sale_retired`: the sale is over and was retired (`GET \
            /sales/{sale_id}/order` still answers its buyers)", body = ErrorBody),
        JsonBody,
        (status = 429, description = "`rate_limited`: this client (address or IPv6 network), or this buyer, is over \
            its limit; or it asked about a sold-out sale too often", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds until a request can be admitted"))),
        (status = 503, description = "`unavailable`: the purchase never ran (Redis refused the connection or the call \
            before running it, or a limit checked on its own could not decide); nothing is bought. `outcome_unknown`: \
            the purchase was sent to Redis and no verdict came back (a timeout, a connection reset; or an error the \
            script raised, a limit's included); it may have been made, under the body's `order_id` (the body also has \
            the `sale_id`). Retry the same buy with the same headers (until it answers other than 429 or 503): 409 \
            `already_purchased` with that `order_id` means it was made (a buyer hears of their order before the \
            sale's gates: its hours, the line, the proof of work the first attempt spent); a 201 (with another \
            `order_id`), a 409 with another `order_id` or a refusal (403, 404, 410) means it was not, and it will not \
            be (one purchase per buyer), unless the refusal is of an admission token or proof of work expired since, \
            or of a sale retired since: then ask `GET /sales/{sale_id}/order`. On a Redis \
            Cluster, whose client retries by itself, every failure of the purchase call is `outcome_unknown`. \
            `not_durable` (`SECKILL_CONFIRM_REPLICAS` only): bought under the body's `order_id`, but fewer Redis \
            replicas than asked acknowledged it in time. The purchase stands and is stored like any other: ask `GET \
            /sales/{sale_id}/order` (its `status` is `confirmed` once the order is in Postgres), or retry the buy and \
            get 409 `already_purchased` with the same `order_id`", body = ErrorBody,
            headers(("Retry-After" = u64, description = "1"))),
    )
)]
pub async fn buy(
    req: HttpRequest,
    buyer: Buyer,
    body: Result<web::Json<Object<BuyRequest>>, actix_web::Error>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let metrics = state.shop.metrics();
    // A body the JSON extractor refused (malformed, too large, not JSON) is counted here too:
    // its answer is the extractor's error handler's (`crate::http::routes::configure`).
    let body = match body {
        Ok(body) => body,
        Err(refused) => {
            metrics.purchase("invalid_request");
            return refused.error_response();
        }
    };
    let BuyRequest { sale_id, user_id, quantity } = body.into_inner().0;
    let asked = buyer.named(user_id).and_then(|user| Ok((sale_of(&sale_id)?, user, quantity_of(quantity)?)));
    let (outcome, reported) = match asked {
        Err(refused) => (Err(refused), None),
        Ok((sale, user, quantity)) => {
            let token = match req.headers().get(ADMISSION_HEADER) {
                None => AdmissionToken::None,
                Some(value) => value.to_str().map_or(AdmissionToken::Malformed, AdmissionToken::Presented),
            };
            let client = state.clients.of(&req);
            let proof = super::challenge::solution_of(&req);
            let Limited { outcome, reported } = state.shop.buy(&sale, (&user, quantity), client, (token, proof)).await;
            let created = |Bought { order_id, quantity, pay_by_ms }| {
                HttpResponse::Created().json(BuyResponse {
                    order_id,
                    sale_id,
                    user_id: user.as_str().to_owned(),
                    quantity,
                    status: pay_by_ms.map(|_| Standing::Reserved),
                    pay_by: pay_by_ms.map(ms_to_time),
                })
            };
            (outcome.map(created).map_err(ApiError::from), reported)
        }
    };
    metrics.purchase(outcome_label(&outcome));
    state.rate_limit.respond(reported, outcome)
}

/// The request's quantity: 1 when absent, else 1 to [`MAX_PER_BUYER`].
fn quantity_of(quantity: Option<i64>) -> Result<u32, ApiError> {
    match quantity.unwrap_or(1) {
        q @ 1..=100 if q <= i64::from(MAX_PER_BUYER) => Ok(q as u32),
        _ => Err(ApiError::InvalidRequest(format!("quantity must be 1-{MAX_PER_BUYER}"))),
    }
}

/// The `outcome` label of `seckill_purchases_total`.
fn outcome_label(outcome: &Result<HttpResponse, ApiError>) -> &'static str {
    use crate::shop::Error as E;
    match outcome {
        Ok(_) => "created",
        Err(ApiError::Shop(E::AlreadyPurchased(_))) => "already_purchased",
        Err(ApiError::Shop(E::SoldOut)) => "sold_out",
        Err(ApiError::Shop(E::LimitReached { .. })) => "limit_reached",
        Err(ApiError::Shop(E::InsufficientStock { .. })) => "insufficient_stock",
        Err(ApiError::Shop(E::UnknownSale)) => "unknown_sale",
        Err(ApiError::Shop(E::SaleNotStarted)) => "not_started",
        Err(ApiError::Shop(E::SaleEnded)) => "ended",
        Err(ApiError::Shop(E::SalePaused)) => "paused",
        Err(ApiError::Shop(E::DrawOnly)) => "draw_only",
        Err(ApiError::Shop(E::RateLimited { .. })) => "rate_limited",
        Err(ApiError::Shop(E::Unavailable(_))) => "unavailable",
        Err(ApiError::Shop(E::OutcomeUnknown { .. })) => "outcome_unknown",
        Err(ApiError::Shop(E::NotDurable { .. })) => "not_durable",
        Err(ApiError::Unauthenticated) => "unauthenticated",
        Err(ApiError::InvalidToken(_)) => "invalid_token",
        Err(ApiError::UserMismatch) => "user_mismatch",
        Err(ApiError::Shop(E::SaleRetired)) => "sale_retired",
        Err(ApiError::Shop(E::NotAdmitted(_))) => "not_admitted",
        Err(ApiError::Shop(E::ChallengeRequired)) => "challenge_required",
        Err(ApiError::Shop(E::ChallengeFailed(_))) => "challenge_failed",
        Err(_) => "invalid_request",
    }
}
