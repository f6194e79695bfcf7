//! The caller's own order in a sale: `GET /sales/{sale_id}/order` reads it, `DELETE` gives a
//! reservation back.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::responses::{BadBuyerQuery, BuyerToken, RateLimited, StoresUnreachable, UnknownSale, UserMismatch};
use super::sale_of;
use super::user_id::UserIdParam;
use crate::domain::{SaleId, Standing, UserId};
use crate::http::AppState;
use crate::http::buyer::Buyer;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{Cancelled as Given, FoundOrder, Limited, Place};

/// Whose order: the buyer, when the bearer token does not name it.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderQuery {
    /// 1-128 printable characters, no format or default-ignorable characters, no whitespace at
    /// either end, in NFC (as `POST /buy`'s). Required with `SECKILL_AUTH=none` (this document then lists it
    /// as required); with `jwt` it may be left out, the buyer is the token's, and another user is
    /// refused (403 `user_mismatch`).
    #[param(value_type = Option<UserIdParam>, inline)]
    pub(super) user_id: Option<String>,
}

/// Where the caller's order is.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OrderState {
    /// No purchase by this buyer in this sale.
    None,
    /// Bought; not yet in Postgres (a sale without a payment window: in one with a window the
    /// order reads `reserved` from the 201 on).
    Queued,
    /// In Postgres, final (a sale without a payment window).
    Confirmed,
    /// A reservation, to be paid by `pay_by`.
    Reserved,
    /// Paid in time.
    Paid,
    /// Given back by the buyer, or voided by an operator; the unit went back to the sale.
    Cancelled,
    /// Not paid by `pay_by`; the unit went back to the sale.
    Expired,
    /// Paid, then refunded by an operator.
    Refunded,
}

impl From<Place> for OrderState {
    fn from(place: Place) -> Self {
        match place {
            Place::Queued => Self::Queued,
            Place::Reserved => Self::Reserved,
            Place::Stored(Standing::Confirmed) => Self::Confirmed,
            Place::Stored(Standing::Reserved) => Self::Reserved,
            Place::Stored(Standing::Paid) => Self::Paid,
            Place::Stored(Standing::Cancelled) => Self::Cancelled,
            Place::Stored(Standing::Expired) => Self::Expired,
            Place::Stored(Standing::Refunded) => Self::Refunded,
        }
    }
}

/// The caller's order in a sale.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderView {
    pub status: OrderState,
    /// Absent for `none` (and for a buyer Redis holds no receipt of, until Postgres has its order).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<Uuid>,
    /// When it was bought (the Redis server's clock).
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<OffsetDateTime>,
    /// A reservation's deadline (in a sale with a payment window): pay before it.
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_by: Option<OffsetDateTime>,
    /// Units bought; absent for `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<u32>,
}

/// The caller's own order: `queued` (bought, in Redis, on its way to Postgres), `confirmed` (in
/// Postgres), in a sale with a payment window `reserved` (with `pay_by`) from the 201 on, `paid`,
/// `cancelled` or `expired`, each as soon as the payment, the cancel or the expiry was made,
/// whichever instance answers and however far the worker lags; or `none`. Under
/// `SECKILL_AUTH=jwt` the buyer is the token's, so nobody can read
/// another buyer's order. Shares `POST /buy`'s rate limits (the same per-address and per-buyer
/// quotas), so polling it spends the same budget as buying. A queued order costs one Redis read
/// and no Postgres query (a queued reservation one primary-key read in Postgres too, where a
/// payment or a cancel that overtook the worker is). A retired sale's buyers still get their
/// order (from Postgres).
#[utoipa::path(
    get,
    path = "/sales/{sale_id}/order",
    tag = "purchase",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "The caller's order", body = OrderView,
            headers(("RateLimit-Policy" = String, description = "The quota policy"),
                    ("RateLimit" = String, description = "Remaining quota and seconds to reset"))),
        BadBuyerQuery,
        BuyerToken,
        UserMismatch,
        UnknownSale,
        (status = 410, description = "`sale_retired`: the sale was retired and this user has no order in it (a \
            buyer's order is still answered, from Postgres)", body = ErrorBody),
        RateLimited,
        StoresUnreachable,
    )
)]
pub async fn order(
    req: HttpRequest,
    buyer: Buyer,
    sale_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (outcome, reported) = match buyer_in_sale(buyer, &sale_id, query.into_inner()) {
        Err(refused) => (Err(refused), None),
        Ok((sale, user)) => {
            let Limited { outcome, reported } = state.shop.order(&sale, &user, state.clients.of(&req)).await;
            let view = |found: Option<FoundOrder>| match found {
                None => OrderView {
                    status: OrderState::None,
                    order_id: None,
                    created_at: None,
                    pay_by: None,
                    quantity: None,
                },
                Some(FoundOrder { place, order_id, created_at, pay_by, quantity }) => {
                    OrderView { status: place.into(), order_id, created_at, pay_by, quantity: Some(quantity) }
                }
            };
            let answer =
                |found| HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(view(found));
            (outcome.map(answer).map_err(ApiError::from), reported)
        }
    };
    state.rate_limit.respond(reported, outcome)
}

/// The cancel's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cancelled {
    /// `cancelled`.
    #[schema(value_type = String, example = "cancelled")]
    pub status: Standing,
    pub order_id: Uuid,
}

/// The caller gives its reservation back before its deadline: the order becomes `cancelled` and
/// its unit goes back to the sale (for another buyer). The buyer as for `GET …/order`; shares
/// `POST /buy`'s rate limits. The buyer cannot buy again in this sale.
#[utoipa::path(
    delete,
    path = "/sales/{sale_id}/order",
    tag = "purchase",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "Cancelled; its unit goes back to the sale (at once, or by the sweeper \
            within seconds if Redis failed meanwhile; a draw's size offers it to its waitlist)", body = Cancelled),
        BadBuyerQuery,
        BuyerToken,
        UserMismatch,
        (status = 404, description = "`no_order`: this buyer has no order in this sale", body = ErrorBody),
        (status = 409, description = "`not_reserved`: the order is no longer a reservation (paid, cancelled, expired, \
            past its deadline) or the sale has no payment window", body = ErrorBody),
        RateLimited,
        StoresUnreachable,
    )
)]
pub async fn cancel(
    req: HttpRequest,
    buyer: Buyer,
    sale_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (outcome, reported) = match buyer_in_sale(buyer, &sale_id, query.into_inner()) {
        Err(refused) => (Err(refused), None),
        Ok((sale, user)) => {
            let Limited { outcome, reported } = state.shop.cancel(&sale, &user, state.clients.of(&req)).await;
            let answer = |Given { order_id }| {
                HttpResponse::Ok()
                    .insert_header((header::CACHE_CONTROL, "no-store"))
                    .json(Cancelled { status: Standing::Cancelled, order_id })
            };
            (outcome.map(answer).map_err(ApiError::from), reported)
        }
    };
    state.rate_limit.respond(reported, outcome)
}

/// The sale and the buyer an order route names (the token's under jwt, else the query's
/// `user_id`).
fn buyer_in_sale(
    buyer: Buyer,
    sale_id: &str,
    OrderQuery { user_id }: OrderQuery,
) -> Result<(SaleId, UserId), ApiError> {
    let sale = sale_of(sale_id)?;
    Ok((sale, buyer.named(user_id)?))
}
