//! Response rows that several routes share, declared once for the OpenAPI document (each route's
//! attribute then lists only what is its own). The admin routes' common errors are
//! `admin::AdminErrors`.

use crate::http::error::ErrorBody;

/// 404 `unknown_sale`, for every route that names a sale Redis may not know.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum UnknownSale {
    /// `unknown_sale`
    #[response(status = 404)]
    UnknownSale(ErrorBody<'static>),
}

/// 410 `sale_retired`, where a retired sale needs no more words.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum SaleRetired {
    /// `sale_retired`
    #[response(status = 410)]
    SaleRetired(ErrorBody<'static>),
}

/// 401 of the buyer's routes under `SECKILL_AUTH=jwt`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum BuyerToken {
    /// `unauthenticated` or `invalid_token` (`SECKILL_AUTH=jwt` only)
    #[response(status = 401)]
    Refused(ErrorBody<'static>),
}

/// 400 of the routes that read a sale id and the buyer's `user_id` from the path and the query.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum BadBuyerQuery {
    /// `invalid_request`: a malformed sale id or user_id, or no user_id under `SECKILL_AUTH=none`
    #[response(status = 400)]
    Invalid(ErrorBody<'static>),
}

/// 403 of the order routes: the query names another buyer than the token.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum UserMismatch {
    /// `user_mismatch`: user_id is not the token's buyer
    #[response(status = 403)]
    UserMismatch(ErrorBody<'static>),
}

/// 429 of the routes that share `POST /buy`'s rate limits (`/buy` itself says more).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum RateLimited {
    /// `rate_limited`
    #[response(status = 429,
        headers(("Retry-After" = u64, description = "Whole seconds until a request can be admitted")))]
    RateLimited(ErrorBody<'static>),
}

/// 503 of the order routes, which read Redis and Postgres.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum StoresUnreachable {
    /// `unavailable`: Redis or Postgres is unreachable
    #[response(status = 503, headers(("Retry-After" = u64, description = "1")))]
    Unavailable(ErrorBody<'static>),
}

/// 413 and 415 of the routes that read a JSON body (with their own words for 400).
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum JsonBody {
    /// `payload_too_large`: body over 4 KiB
    #[response(status = 413)]
    PayloadTooLarge(ErrorBody<'static>),
    /// `unsupported_media_type`: not application/json
    #[response(status = 415)]
    UnsupportedMediaType(ErrorBody<'static>),
}
