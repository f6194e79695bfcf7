//! The one error type of the HTTP API, mapped once to a status code and a JSON body
//! `{"error": "<code>", "message": "<sentence>"}`: the request's own faults (its shape, its
//! credentials, its route) and every use case's ([`crate::shop::Error`]). Infrastructure failures
//! are logged with their cause chain and never shown to the client.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};

use crate::shop::Error as E;

mod body;
mod from;

pub use self::body::ErrorBody;

/// Every answer but a success: each variant has its status code, its stable `error` code
/// ([`ApiError::code`]) and its message (the `#[error]` text).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `invalid_request`: the body, the path or the query does not hold a valid request.
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
    #[error("a valid admin bearer token is required (SECKILL_ADMIN_TOKEN or an operator's token)")]
    Unauthorized,
    /// 403 `forbidden_role`: the operator's role may not do this (a viewer on a write route).
    #[error("operator {name:?} has the role {role}: this route needs the role operator")]
    ForbiddenRole {
        /// The operator's name.
        name: String,
        /// The operator's role.
        role: &'static str,
    },
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
    /// 403 `admin_disabled`: no admin credential is configured.
    #[error("admin routes are disabled: neither SECKILL_ADMIN_TOKEN nor named operators are configured")]
    AdminDisabled,
    /// A use case's refusal or failure, with its own code and message.
    #[error(transparent)]
    Shop(#[from] E),
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
            Self::ForbiddenRole { .. } => "forbidden_role",
            Self::Unauthenticated => "unauthenticated",
            Self::InvalidToken(_) => "invalid_token",
            Self::UserMismatch => "user_mismatch",
            Self::AdminDisabled => "admin_disabled",
            Self::Shop(err) => err.code(),
        }
    }
}

/// `Retry-After` of `sale_paused`: a pause lasts as long as the operator needs (a price fixed, a
/// question answered), so a crowd is asked to look again in a few seconds, not to hammer.
pub const PAUSED_RETRY_AFTER_SECS: u64 = 5;

/// A use case's error's status code. `sale_paused` is 403, beside `sale_not_started` and
/// `sale_ended`: the sale's own state refuses the purchase, with nothing bought (a 503 would say
/// the service failed, which it did not, and count in every outage alert; a 409 names a conflict
/// with the buyer's own request, as `already_purchased` does).
fn status_of(err: &E) -> StatusCode {
    match err {
        E::Invalid(_) => StatusCode::BAD_REQUEST,
        E::UnknownSale
        | E::UnknownOrder
        | E::UnknownOrderId
        | E::UnknownDrop
        | E::UnknownEvent
        | E::UnknownEndpoint
        | E::NoOrder
        | E::NoEntry
        | E::NotInQueue => StatusCode::NOT_FOUND,
        E::InvalidSignature(_) => StatusCode::UNAUTHORIZED,
        E::SaleNotStarted
        | E::SaleEnded
        | E::SalePaused
        | E::NotAdmitted(_)
        | E::QueueNotOpen
        | E::ChallengeRequired
        | E::ChallengeFailed(_) => StatusCode::FORBIDDEN,
        E::AlreadyPurchased(_)
        | E::LimitReached { .. }
        | E::InsufficientStock { .. }
        | E::GroupLimitDiffers { .. }
        | E::GroupWindowDiffers { .. }
        | E::SaleInProgress
        | E::NotADrop
        | E::TooManySizes
        | E::DropInProgress(_)
        | E::DropSizeMissing(_)
        | E::DropSize
        | E::DropStock { .. }
        | E::SaleHasOrders { .. }
        | E::GroupHasOrders { .. }
        | E::SaleStarted
        | E::ShardsFixed { .. }
        | E::SeedRetired
        | E::NotRetirable(_)
        | E::NotReserved(_)
        | E::NotPaid(_)
        | E::RestockRetired
        | E::SaleRestoring
        | E::NotQueued
        | E::DropLine { .. }
        | E::DrawOnly
        | E::NotADraw
        | E::EntriesNotOpen
        | E::EntriesClosed
        | E::DrawNotRevealed
        | E::AwardRefused(_)
        | E::AlreadyEntered(_)
        | E::NoChallenge
        | E::StockBelowZero { .. }
        | E::StockTooLarge { .. }
        | E::Sharded
        | E::DrawStockFixed
        | E::TooManyEndpoints { .. }
        | E::EventReused => StatusCode::CONFLICT,
        E::SoldOut | E::SaleRetired => StatusCode::GONE,
        E::RateLimited { .. } | E::TooManyExports | E::TooManyDrawRecords => StatusCode::TOO_MANY_REQUESTS,
        E::Unavailable(_)
        | E::EntriesQueued { .. }
        | E::OrdersQueued { .. }
        | E::OutcomeUnknown { .. }
        | E::NotDurable { .. }
        | E::PaymentsDisabled
        | E::AdmissionDisabled => StatusCode::SERVICE_UNAVAILABLE,
        E::NotRecorded(_) | E::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::Unauthorized | Self::Unauthenticated | Self::InvalidToken(_) => StatusCode::UNAUTHORIZED,
            Self::AdminDisabled | Self::UserMismatch | Self::ForbiddenRole { .. } => StatusCode::FORBIDDEN,
            Self::Shop(err) => status_of(err),
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            // One line per dependency every few seconds, however many requests fail
            // (`suppressed`: those not logged since the previous line).
            Self::Shop(E::Unavailable(cause)) => {
                let dependency = crate::metrics::dependency_of(cause);
                if let Some(suppressed) = crate::telemetry::dependency_failure_line(dependency) {
                    tracing::warn!(dependency, suppressed, error = format!("{cause:#}"), "dependency unavailable");
                }
            }
            Self::Shop(E::OutcomeUnknown { order_id, sale_id, cause }) => {
                let dependency = crate::metrics::dependency_of(cause);
                if let Some(suppressed) = crate::telemetry::dependency_failure_line(dependency) {
                    tracing::warn!(%order_id, sale_id, dependency, suppressed, error = format!("{cause:#}"),
                        "purchase outcome unknown");
                }
            }
            Self::Shop(E::Internal(cause)) => {
                if let Some(suppressed) = crate::telemetry::internal_error_line() {
                    tracing::error!(suppressed, error = format!("{cause:#}"), "internal error");
                }
            }
            _ => {}
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::Shop(E::RateLimited { retry_after_secs }) => {
                response.insert_header((header::RETRY_AFTER, *retry_after_secs));
            }
            Self::Shop(E::TooManyExports | E::TooManyDrawRecords) => {
                response.insert_header((header::RETRY_AFTER, 5));
            }
            Self::Shop(E::SalePaused) => {
                response.insert_header((header::RETRY_AFTER, PAUSED_RETRY_AFTER_SECS));
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
            Self::Shop(E::EntriesQueued { .. } | E::OrdersQueued { .. }) => {
                response.insert_header((header::RETRY_AFTER, 5));
            }
            Self::Shop(E::Unavailable(_) | E::OutcomeUnknown { .. } | E::NotDurable { .. }) => {
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
