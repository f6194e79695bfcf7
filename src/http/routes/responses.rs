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

/// 401 of the buyer's routes under `SECKILL_AUTH=jwt`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum BuyerToken {
    /// `unauthenticated` or `invalid_token` (`SECKILL_AUTH=jwt` only)
    #[response(status = 401)]
    Refused(ErrorBody<'static>),
}
