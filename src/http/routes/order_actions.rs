//! An operator's actions on one order (`crate::shop::Shop::cancel_order`, `refund_order`):
//! `POST /admin/orders/{order_id}/cancel` (`{"reason"}`, optional) voids a reservation and `POST
//! /admin/orders/{order_id}/refund` (`{"reason", "restock"}`, optional) records a paid order's
//! refund. An operator's token (a viewer's is refused); both audited (the sale's `GET …/audit`).

use actix_web::{HttpResponse, web};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::admin::AdminErrors;
use super::object;
use super::small_body::SmallBody;
use crate::domain::Standing;
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::Operator;
use crate::shop::OrderActed;

/// The order an action names.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct OrderPath {
    /// The order's id (the `order_id` of its 201).
    order_id: Uuid,
}

/// A cancel's optional body. Unknown fields are refused.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Why (one line, at most 200 characters): kept in the audit trail and the `order.cancelled` event.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$", example = "buyer asked by phone")]
    reason: Option<String>,
}

/// A refund's optional body. Unknown fields are refused.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequest {
    /// Why (one line, at most 200 characters): kept in the audit trail and the `order.refunded` event.
    #[serde(default)]
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001F\\u007F-\\u009F]*$", example = "returned damaged")]
    reason: Option<String>,
    /// Give the order's units back to the sale's stock (once); default `false`: they stay sold.
    #[serde(default)]
    restock: bool,
}

/// The order after an operator's action.
#[derive(Debug, Serialize, ToSchema)]
pub struct OrderAction {
    pub order_id: Uuid,
    pub sale_id: String,
    pub user_id: String,
    /// `cancelled` or `refunded`.
    #[schema(value_type = String, example = "cancelled")]
    pub status: Standing,
    /// Units the order holds.
    pub quantity: i32,
    /// Its units go back to the sale's stock, once: always for a cancel, when asked for a refund.
    pub restock: bool,
}

impl OrderAction {
    fn of(acted: OrderActed, status: Standing) -> Self {
        let OrderActed { sale_id, order_id, user_id, quantity, restock } = acted;
        Self { order_id, sale_id: sale_id.to_string(), user_id, status, quantity, restock }
    }
}

/// Voids a reservation before its deadline: the order becomes `cancelled` and its units go back to
/// the sale exactly once, as a buyer's cancel's (racing the buyer's cancel, a payment or the
/// expiry, exactly one wins). Writes `order.cancelled` (`by: operator`, the actor, the reason) and
/// an `order_cancel` audit entry of the order's sale.
#[utoipa::path(
    post,
    path = "/admin/orders/{order_id}/cancel",
    tag = "admin",
    params(OrderPath),
    security(("bearer" = [])),
    request_body(content = Option<CancelRequest>, description = "Optional: the reason"),
    responses(
        (status = 200, description = "Cancelled; its units are back in the sale", body = OrderAction),
        (status = 404, description = "`unknown_order`: no order of a sale with a payment window has that id",
            body = ErrorBody),
        (status = 409, description = "`not_reserved`: the order is paid, cancelled, expired, refunded, or past its \
            deadline (expiring); the message says which. Nothing changed", body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn cancel(
    operator: Operator,
    path: web::Path<OrderPath>,
    SmallBody(body): SmallBody,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let CancelRequest { reason } = object::optional(&body)?;
    let acted = state.shop.cancel_order(path.order_id, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(OrderAction::of(acted, Standing::Cancelled)))
}

/// Records the refund of a paid order: it becomes `refunded`; with `"restock": true` its units go
/// back to the sale's stock exactly once, else they stay sold. Writes `order.refunded` (`by:
/// operator`, the actor, the reason, `restock`) and an `order_refund` audit entry of the order's
/// sale.
#[utoipa::path(
    post,
    path = "/admin/orders/{order_id}/refund",
    tag = "admin",
    params(OrderPath),
    security(("bearer" = [])),
    request_body(content = Option<RefundRequest>, description = "Optional: the reason and `restock`"),
    responses(
        (status = 200, description = "Refunded", body = OrderAction),
        (status = 404, description = "`unknown_order`: no order of a sale with a payment window has that id",
            body = ErrorBody),
        (status = 409, description = "`not_paid`: the order is a reservation, cancelled, expired, or refunded \
            before; `sale_retired`: a restock of a retired sale's order (refund it without). Nothing changed",
            body = ErrorBody),
        AdminErrors,
    )
)]
pub async fn refund(
    operator: Operator,
    path: web::Path<OrderPath>,
    SmallBody(body): SmallBody,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let RefundRequest { reason, restock } = object::optional(&body)?;
    let acted = state.shop.refund_order(path.order_id, restock, reason.as_deref(), operator.actor()).await?;
    Ok(HttpResponse::Ok().json(OrderAction::of(acted, Standing::Refunded)))
}
