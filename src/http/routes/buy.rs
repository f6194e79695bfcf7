//! `POST /buy`: validate, rate-limit the client, then one atomic purchase in Redis.

use std::time::Instant;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use super::limits::{self, Decided};
use super::object::Object;
use super::responses::{JsonBody, UnknownSale};
use super::user_id;
use crate::admission::token::{ADMISSION_HEADER, Refused};
use crate::domain::{SaleId, Standing, UserId};
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::orders::lookup;
use crate::purchase::sold_out::{self, Flagged};
use crate::purchase::{BuyError, BuyOutcome, Purchase, Receipt};
use crate::redis::connection::is_redis_outage;

/// A purchase: one user, one sale, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuyRequest {
    /// 1-64 characters of `[A-Za-z0-9_-]`.
    #[schema(min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$")]
    sale_id: String,
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
        (status = 403, description = "`sale_not_started`, `sale_ended`, or `user_mismatch`: the body's user_id is not \
            the token's buyer; `not_admitted`: the sale has a waiting room and the request carries no valid \
            `Seckill-Admission` token of this buyer for this sale (missing, malformed, forged, another buyer's or \
            sale's, or expired); nothing is bought", body = ErrorBody),
        UnknownSale,
        (status = 409, description = "`already_purchased`: this user already bought in this sale. The body carries \
            the order it was given (`order_id`, `status`, `created_at`), so a retry after a lost 201 learns its \
            order; `status` is what `GET /sales/{sale_id}/order` reads: `queued` or `confirmed`, where the order is \
            on its way to Postgres, and in a sale with a payment window its payment state (`reserved`, `paid`, \
            `cancelled` or `expired`: a cancelled or expired buyer cannot buy again either)", body = ErrorBody),
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
            the `sale_id`). Retry the same buy (until it answers other than 429 or 503): 409 `already_purchased` with \
            that `order_id` means it was made; a 201 (with another `order_id`), a 409 with another `order_id` or a \
            refusal (403, 404, 410) means it was not, and it will not be (one purchase per buyer). On a Redis \
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
    body: Result<web::Json<Object<BuyRequest>>, actix_web::Error>,
    state: web::Data<AppState>,
) -> HttpResponse {
    // A body the JSON extractor refused (malformed, too large, not JSON) is counted here too:
    // its answer is the extractor's error handler's (`crate::http::routes::configure`).
    let body = match body {
        Ok(body) => body,
        Err(refused) => {
            state.metrics.purchase("invalid_request");
            return refused.error_response();
        }
    };
    let mut decided = None;
    let outcome = purchase(&req, body.into_inner().0, &state, &mut decided).await;
    state.metrics.purchase(outcome_label(&outcome));
    limits::respond(&state, decided, outcome)
}

/// Input is validated first, so malformed requests touch no state: the buyer is the bearer
/// token's under `SECKILL_AUTH=jwt` (verified from the token alone, before any limiter), else
/// the body's `user_id`. A sale this instance knows to be sold out is answered from memory: 410,
/// or 409 to one of its buyers, held only to the in-process per-client limit (cheaper than the
/// Redis limiter, and it keeps anyone from probing at an unlimited rate who bought). Then the
/// limiters run before the purchase, so an abusive client costs one script call, not a purchase
/// attempt: the client's address limit, then the buyer's; once refused, a client or buyer is
/// answered 429 from memory until that limiter could admit it again. If a limiter cannot answer,
/// the request is refused with 503 and nothing is bought (fail closed). A retired sale is
/// answered 410 `sale_retired`, from memory once this instance knows it
/// (`crate::purchase::retired`), held to the same in-process limit as a sold-out one.
async fn purchase(
    req: &HttpRequest,
    BuyRequest { sale_id, user_id }: BuyRequest,
    state: &AppState,
    decided: &mut Option<Decided>,
) -> Result<HttpResponse, ApiError> {
    let user = limits::buyer(req, state, user_id)?;
    let sale = SaleId::parse(&sale_id).map_err(ApiError::InvalidRequest)?;
    let client = state.client_key(req);
    if state.retired.known(&sale) {
        limit_answer_from_memory(state, client)?;
        return Err(ApiError::SaleRetired);
    }
    let place = admitted_place(req, state, &sale, &user)?;
    if let Some(flagged) = state.sold_out.check(&sale, &user) {
        limit_answer_from_memory(state, client)?;
        return Err(match flagged {
            Flagged::SoldOut => ApiError::SoldOut,
            Flagged::AlreadyPurchased(receipt) => already_purchased(state, &sale, &user, receipt).await?,
            Flagged::AskRedis => match state.sales.purchase_of(&sale, &user).await? {
                Purchase::Bought(receipt) => already_purchased(state, &sale, &user, receipt).await?,
                Purchase::NotBought | Purchase::UnknownSale => ApiError::SoldOut,
            },
        });
    }

    let gates = limits::gates(state, client, &user, &sale, decided)?;
    let (asked, order_id) = (Instant::now(), Uuid::now_v7());
    let verdict = state.sales.buy(&sale, &user, order_id, place, &gates).await.map_err(|err| {
        // The limits ran in the failed call, or were to: they could not decide (fail closed).
        state.metrics.limiter_decision("error");
        match err {
            BuyError::NotRun(err) if is_redis_outage(&err) => ApiError::from(err),
            BuyError::NotRun(err) => {
                ApiError::Unavailable(anyhow::Error::new(err).context("the purchase and its rate limits"))
            }
            BuyError::OutcomeUnknown(err) => ApiError::OutcomeUnknown {
                order_id,
                sale_id: sale_id.clone(),
                cause: anyhow::Error::new(err).context("the purchase and its rate limits"),
            },
        }
    })?;
    limits::settle(state, &gates, asked, &verdict.limits, decided)?;
    let Some(outcome) = verdict.outcome else {
        return Err(ApiError::Unavailable(anyhow::anyhow!("the limits admitted the purchase but it did not run")));
    };
    match outcome {
        BuyOutcome::Purchased { pay_by_ms } => Ok(HttpResponse::Created().json(BuyResponse {
            order_id,
            sale_id,
            user_id: user.as_str().to_owned(),
            status: pay_by_ms.map(|_| Standing::Reserved),
            pay_by: pay_by_ms.map(crate::db::ms_to_time),
        })),
        BuyOutcome::NotDurable { replicas } => {
            tracing::warn!(%order_id, replicas, "purchase not confirmed by enough replicas: 503 not_durable");
            Err(ApiError::NotDurable { order_id })
        }
        BuyOutcome::UnknownSale if state.retired.check(&sale).await => Err(ApiError::SaleRetired),
        BuyOutcome::UnknownSale => Err(ApiError::UnknownSale),
        BuyOutcome::NotStarted => Err(ApiError::SaleNotStarted),
        BuyOutcome::Ended => Err(ApiError::SaleEnded),
        BuyOutcome::AlreadyPurchased(receipt) => Err(already_purchased(state, &sale, &user, receipt).await?),
        BuyOutcome::NotAdmitted => {
            state.admission.learn_queued(&sale);
            Err(ApiError::NotAdmitted(Refused::Missing))
        }
        BuyOutcome::SoldOut => {
            if state.sold_out.set(&sale) {
                state.board.invalidate(&sale).await;
                tokio::spawn(sold_out::load_buyers(state.sold_out.clone(), state.sales.clone(), sale));
            }
            Err(ApiError::SoldOut)
        }
    }
}

/// The 409 of a repeat purchase, naming the order as `GET /sales/{sale_id}/order` reads it: in a
/// sale with a payment window (this instance's snapshot of the sale says so) its payment state
/// (`crate::orders::lookup::repeat_status`: one primary-key read in Postgres, the receipt's own
/// status if Postgres cannot answer), otherwise the
/// receipt as the script or the sold-out copy gave it, at no further cost than the snapshot.
async fn already_purchased(
    state: &AppState,
    sale: &SaleId,
    user: &UserId,
    receipt: Option<Receipt>,
) -> Result<ApiError, ApiError> {
    let Some(receipt) = receipt else {
        return Ok(ApiError::AlreadyPurchased(None));
    };
    let window = match state.board.snapshot(sale).await? {
        Some(snapshot) => snapshot.state.payment_window_ms,
        // Seeded since this instance last read the registry of sales.
        None => state.sales.sale_state(sale).await?.and_then(|sale| sale.payment_window_ms),
    };
    let receipt = lookup::repeat_status(&state.pool, sale, user, receipt, window.is_some()).await;
    Ok(ApiError::AlreadyPurchased(Some(receipt)))
}

/// The buyer's place from its `Seckill-Admission` token, checked in-process (no Redis call):
/// `None` without a token for a sale this instance does not know to be queued (`lua/buy.lua`
/// then refuses it if it is). A token that is present is always checked: a forged, expired or
/// misdirected one is refused whatever the sale.
fn admitted_place(req: &HttpRequest, state: &AppState, sale: &SaleId, user: &UserId) -> Result<Option<u64>, ApiError> {
    let token = match req.headers().get(ADMISSION_HEADER) {
        None => None,
        Some(value) => Some(value.to_str().map_err(|_| ApiError::NotAdmitted(Refused::Malformed))?),
    };
    state.admission.admitted(sale, user, token).map_err(ApiError::NotAdmitted)
}

/// The in-process per-client limit on answers from memory (a sale known sold out or retired).
fn limit_answer_from_memory(state: &AppState, client: std::net::IpAddr) -> Result<(), ApiError> {
    state.sold_out_limiter.check(client).map_err(|wait| {
        state.metrics.limiter_decision("sold_out_refused");
        limits::rate_limited(wait)
    })
}

/// The `outcome` label of `seckill_purchases_total`.
fn outcome_label(outcome: &Result<HttpResponse, ApiError>) -> &'static str {
    match outcome {
        Ok(_) => "created",
        Err(ApiError::AlreadyPurchased(_)) => "already_purchased",
        Err(ApiError::SoldOut) => "sold_out",
        Err(ApiError::UnknownSale) => "unknown_sale",
        Err(ApiError::SaleNotStarted) => "not_started",
        Err(ApiError::SaleEnded) => "ended",
        Err(ApiError::RateLimited { .. }) => "rate_limited",
        Err(ApiError::Unavailable(_)) => "unavailable",
        Err(ApiError::OutcomeUnknown { .. }) => "outcome_unknown",
        Err(ApiError::NotDurable { .. }) => "not_durable",
        Err(ApiError::Unauthenticated) => "unauthenticated",
        Err(ApiError::InvalidToken(_)) => "invalid_token",
        Err(ApiError::UserMismatch) => "user_mismatch",
        Err(ApiError::SaleRetired) => "sale_retired",
        Err(ApiError::NotAdmitted(_)) => "not_admitted",
        Err(_) => "invalid_request",
    }
}
