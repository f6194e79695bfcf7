//! The one error type of the HTTP API, mapped once to a status code and a JSON body
//! `{"error": "<code>", "message": "<sentence>"}`. Infrastructure failures are logged with their
//! cause chain and never shown to the client.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use uuid::Uuid;

use crate::purchase::Receipt;
use crate::retire::Refusal;

mod body;
mod from;

pub use self::body::ErrorBody;

fn reasons_text(reasons: &[Refusal]) -> String {
    let words: Vec<String> = reasons
        .iter()
        .map(|r| serde_json::to_value(r).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default())
        .collect();
    words.join(", ")
}

/// Why an order cannot be cancelled, for 409 `not_reserved`.
fn not_reserved_text(standing: crate::domain::Standing) -> &'static str {
    use crate::domain::Standing;
    match standing {
        Standing::Confirmed => "the order is final: the sale has no payment window",
        Standing::Reserved => "the reservation's deadline has passed; it is expiring",
        Standing::Paid => "the order is paid",
        Standing::Cancelled => "the reservation was cancelled",
        Standing::Expired => "the reservation expired",
    }
}

/// Every answer but a success: each variant has its status code, its stable `error` code
/// ([`ApiError::code`]) and its message (the `#[error]` text).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid_request`: the body or the path does not hold a valid request.
    #[error("{0}")]
    InvalidRequest(String),
    /// 413 `payload_too_large`: the body exceeds the limit (in bytes).
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// 415 `unsupported_media_type`: the body is not declared as JSON.
    #[error("the request body must be JSON (content-type: application/json)")]
    UnsupportedMediaType,
    /// 404 `not_found`: no route has this path.
    #[error("no such route")]
    NotFound,
    /// 405 `method_not_allowed`, with the methods the route accepts in `Allow`.
    #[error("this route does not accept that method")]
    MethodNotAllowed {
        /// The `Allow` header's value.
        allow: &'static str,
    },
    /// 401 `unauthorized`: no or a wrong admin bearer token.
    #[error("a valid admin bearer token is required")]
    Unauthorized,
    /// 401 `unauthenticated` (`SECKILL_AUTH=jwt`): no `Authorization: Bearer` header, or a
    /// malformed one.
    #[error("a bearer token naming the buyer is required (Authorization: Bearer <JWT>)")]
    Unauthenticated,
    /// 401 `invalid_token` (`SECKILL_AUTH=jwt`): the bearer token is not accepted; why.
    #[error("the bearer token is not accepted: {0}")]
    InvalidToken(&'static str),
    /// 403 `user_mismatch`: the body's `user_id` is not the token's buyer.
    #[error("user_id is not the buyer the bearer token names")]
    UserMismatch,
    /// 403 `admin_disabled`: no admin token is configured.
    #[error("admin routes are disabled: no admin token is configured")]
    AdminDisabled,
    /// 404 `unknown_sale`.
    #[error("no sale with that id")]
    UnknownSale,
    /// 403 `sale_not_started`.
    #[error("the sale has not started yet")]
    SaleNotStarted,
    /// 403 `sale_ended`.
    #[error("the sale has ended")]
    SaleEnded,
    /// 409 `already_purchased`, with the buyer's order when Redis holds its receipt.
    #[error("this user has already bought in this sale")]
    AlreadyPurchased(Option<Receipt>),
    /// 410 `sold_out`.
    #[error("the sale is sold out")]
    SoldOut,
    /// 409 `sale_in_progress`: a re-seed of a sale with buyers.
    #[error("the sale already has buyers; it cannot be re-seeded")]
    SaleInProgress,
    /// 409 `sale_has_orders`: a seed of a sale whose orders Postgres holds but Redis lost.
    #[error(
        "Postgres holds {orders} order(s) of this sale that Redis does not know (Redis lost the sale's state): \
         restore it with `seckill reconcile <sale_id> --repair` or POST /admin/sales/{{sale_id}}/reconcile instead"
    )]
    SaleHasOrders {
        /// Orders of the sale in Postgres.
        orders: i64,
    },
    /// 409 `sale_started`: a re-seed of a sharded sale that has started.
    #[error("the sale is sharded and has started; it cannot be re-seeded")]
    SaleStarted,
    /// 409 `shards_fixed`: a seed asking another shard count than the sale has.
    #[error("the sale exists with {shards} shard(s); its shard count cannot change")]
    ShardsFixed {
        /// The sale's shard count.
        shards: u32,
    },
    /// 410 `sale_retired`: the sale was retired (Postgres keeps its orders; `GET
    /// /sales/{sale_id}/order` still answers a buyer).
    #[error("the sale is over and was retired")]
    SaleRetired,
    /// 409 `sale_retired`: a seed of a retired sale (a retired sale has no second life; seed it
    /// under another id).
    #[error("the sale was retired; it cannot be seeded again (use another sale id)")]
    SeedRetired,
    /// 409 `not_retirable`, with every reason in `reasons`.
    #[error("the sale cannot be retired yet: {}", reasons_text(.0))]
    NotRetirable(Vec<Refusal>),
    /// 401 `invalid_signature`: a payment event's `Seckill-Signature` is missing, malformed,
    /// stale or wrong.
    #[error("the payment event's signature is refused: {0}")]
    InvalidSignature(crate::reservations::signature::SignatureError),
    /// 404 `unknown_order`: a payment event names no order of the sale.
    #[error("no order of this sale has that id")]
    UnknownOrder,
    /// 404 `no_order`: the buyer has no order in the sale (nothing to cancel).
    #[error("this buyer has no order in this sale")]
    NoOrder,
    /// 409 `not_reserved`: the order is not (or no longer) a reservation that can be cancelled.
    #[error("the order is not a reservation that can be cancelled: {}", not_reserved_text(*.0))]
    NotReserved(crate::domain::Standing),
    /// 409 `event_reused`: a payment event id was used before for another order.
    #[error("this event id was used before for another order")]
    EventReused,
    /// 403 `not_admitted`: a queued sale, and no valid admission token of this buyer for it.
    #[error("not admitted: {0}")]
    NotAdmitted(crate::admission::token::Refused),
    /// 403 `queue_not_open`: the sale's waiting room opens later (`GET /sales/{id}` says when).
    #[error("the waiting room of this sale is not open yet")]
    QueueNotOpen,
    /// 404 `not_in_queue`: the buyer has not joined the sale's waiting room.
    #[error("this buyer has not joined the waiting room of this sale (POST /sales/{{sale_id}}/queue)")]
    NotInQueue,
    /// 409 `not_queued`: the sale has no waiting room (buy at once).
    #[error("this sale has no waiting room: buy with POST /buy")]
    NotQueued,
    /// 503 `admission_disabled`: neither `SECKILL_ADMISSION_SECRET` nor `SECKILL_ADMIN_TOKEN` is set.
    #[error("waiting rooms are disabled: set SECKILL_ADMISSION_SECRET (or SECKILL_ADMIN_TOKEN)")]
    AdmissionDisabled,
    /// 503 `payments_disabled`: no `SECKILL_PAYMENT_SECRET` is configured.
    #[error("payment events are disabled: no SECKILL_PAYMENT_SECRET is configured")]
    PaymentsDisabled,
    /// 429 `rate_limited`, with `Retry-After` in whole seconds.
    #[error("too many requests from this client; retry after {retry_after_secs} s")]
    RateLimited {
        /// Whole seconds until a request can be admitted.
        retry_after_secs: u64,
    },
    /// 503 `not_durable` (`SECKILL_CONFIRM_REPLICAS`): bought, with this order id, but fewer
    /// replicas than asked acknowledged it in time. The purchase stands: a retry answers 409
    /// `already_purchased` with the same order, `GET /sales/{id}/order` shows it.
    #[error(
        "the purchase is recorded but not yet confirmed on enough Redis replicas; it stands: ask \
         GET /sales/{{sale_id}}/order, or retry and get 409 already_purchased with this order_id"
    )]
    NotDurable {
        /// The order the purchase made.
        order_id: Uuid,
    },
    /// 503 `unavailable`: Redis or Postgres cannot be reached (the cause is logged, not shown).
    /// For a purchase: it never ran, nothing was bought.
    #[error("a service this request needs is unavailable; retry shortly")]
    Unavailable(#[source] anyhow::Error),
    /// 503 `outcome_unknown`: the purchase was sent to Redis and no verdict came back (a timeout,
    /// a connection reset); it may have bought, under `order_id`. A retry answers 409
    /// `already_purchased` with this `order_id` if it did, else buys anew or refuses as usual.
    #[error(
        "no verdict came back for this purchase: it may have been made under this order_id; retry it: 409 \
         already_purchased with this order_id means it was made, a 201 or another refusal that it was not"
    )]
    OutcomeUnknown {
        /// The order id the purchase was sent with.
        order_id: Uuid,
        /// The sale.
        sale_id: String,
        /// Why no verdict came back (logged, not shown).
        #[source]
        cause: anyhow::Error,
    },
    /// 500 `internal`: anything else (the cause is logged, not shown).
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

impl ApiError {
    /// The stable machine-readable code in the `error` field.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::PayloadTooLarge(_) => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed { .. } => "method_not_allowed",
            Self::Unauthorized => "unauthorized",
            Self::Unauthenticated => "unauthenticated",
            Self::InvalidToken(_) => "invalid_token",
            Self::UserMismatch => "user_mismatch",
            Self::AdminDisabled => "admin_disabled",
            Self::UnknownSale => "unknown_sale",
            Self::SaleNotStarted => "sale_not_started",
            Self::SaleEnded => "sale_ended",
            Self::AlreadyPurchased(_) => "already_purchased",
            Self::SoldOut => "sold_out",
            Self::SaleInProgress => "sale_in_progress",
            Self::SaleHasOrders { .. } => "sale_has_orders",
            Self::SaleStarted => "sale_started",
            Self::ShardsFixed { .. } => "shards_fixed",
            Self::SaleRetired | Self::SeedRetired => "sale_retired",
            Self::NotRetirable(_) => "not_retirable",
            Self::RateLimited { .. } => "rate_limited",
            Self::InvalidSignature(_) => "invalid_signature",
            Self::UnknownOrder => "unknown_order",
            Self::NoOrder => "no_order",
            Self::NotReserved(_) => "not_reserved",
            Self::EventReused => "event_reused",
            Self::PaymentsDisabled => "payments_disabled",
            Self::NotAdmitted(_) => "not_admitted",
            Self::QueueNotOpen => "queue_not_open",
            Self::NotInQueue => "not_in_queue",
            Self::NotQueued => "not_queued",
            Self::AdmissionDisabled => "admission_disabled",
            Self::NotDurable { .. } => "not_durable",
            Self::Unavailable(_) => "unavailable",
            Self::OutcomeUnknown { .. } => "outcome_unknown",
            Self::Internal(_) => "internal",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NotFound | Self::UnknownSale | Self::UnknownOrder | Self::NoOrder | Self::NotInQueue => {
                StatusCode::NOT_FOUND
            }
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthorized | Self::Unauthenticated | Self::InvalidToken(_) | Self::InvalidSignature(_) => {
                StatusCode::UNAUTHORIZED
            }
            Self::AdminDisabled
            | Self::UserMismatch
            | Self::SaleNotStarted
            | Self::SaleEnded
            | Self::NotAdmitted(_)
            | Self::QueueNotOpen => StatusCode::FORBIDDEN,
            Self::AlreadyPurchased(_)
            | Self::SaleInProgress
            | Self::SaleHasOrders { .. }
            | Self::SaleStarted
            | Self::ShardsFixed { .. }
            | Self::SeedRetired
            | Self::NotRetirable(_)
            | Self::NotReserved(_)
            | Self::NotQueued
            | Self::EventReused => StatusCode::CONFLICT,
            Self::SoldOut | Self::SaleRetired => StatusCode::GONE,
            Self::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable(_)
            | Self::OutcomeUnknown { .. }
            | Self::NotDurable { .. }
            | Self::PaymentsDisabled
            | Self::AdmissionDisabled => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            // One line per dependency every few seconds, however many requests fail
            // (`suppressed`: those not logged since the previous line).
            Self::Unavailable(cause) => {
                let dependency = crate::metrics::dependency_of(cause);
                if let Some(suppressed) = crate::telemetry::dependency_failure_line(dependency) {
                    tracing::warn!(dependency, suppressed, error = format!("{cause:#}"), "dependency unavailable");
                }
            }
            Self::OutcomeUnknown { order_id, sale_id, cause } => {
                let dependency = crate::metrics::dependency_of(cause);
                if let Some(suppressed) = crate::telemetry::dependency_failure_line(dependency) {
                    tracing::warn!(%order_id, sale_id, dependency, suppressed, error = format!("{cause:#}"),
                        "purchase outcome unknown");
                }
            }
            Self::Internal(cause) => tracing::error!(error = format!("{cause:#}"), "internal error"),
            _ => {}
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::RateLimited { retry_after_secs } => {
                response.insert_header((header::RETRY_AFTER, *retry_after_secs));
            }
            Self::MethodNotAllowed { allow } => {
                response.insert_header((header::ALLOW, *allow));
            }
            Self::Unauthorized | Self::Unauthenticated => {
                response.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
            }
            Self::InvalidToken(_) => {
                response.insert_header((
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                ));
            }
            Self::Unavailable(_) | Self::OutcomeUnknown { .. } | Self::NotDurable { .. } => {
                response.insert_header((header::RETRY_AFTER, 1));
            }
            _ => {}
        }
        if let Some(body) = self.constant_body() {
            return response.content_type(header::ContentType::json()).body(body);
        }
        response.json(self.body())
    }
}
