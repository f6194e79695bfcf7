//! The JSON body of every error answer ([`ErrorBody`]), and the bodies of a crowd's refusals,
//! built once per process.

use std::sync::OnceLock;

use actix_web::web::Bytes;
use serde::Serialize;
use time::OffsetDateTime;
use uuid::Uuid;

use super::ApiError;
use crate::domain::ms_to_time;
use crate::http::views::{HeldOrder, OrderStatus, Refusal};
use crate::shop::Error as E;

/// Every error answer's body.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ErrorBody<'a> {
    /// A stable machine-readable code, e.g. `sold_out`.
    pub error: &'a str,
    /// A sentence for humans.
    pub message: String,
    /// `already_purchased`: the order this buyer was given (absent for a buyer whose receipt
    /// Redis does not hold); `not_durable`: the order the purchase made; `outcome_unknown`: the
    /// order the purchase may have made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<Uuid>,
    /// `outcome_unknown`: the sale of that purchase; a drop's `drop_in_progress`,
    /// `drop_size_missing`, `stock_below_zero` and `stock_too_large`: the size (its sale id) refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sale_id: Option<String>,
    /// `already_purchased` only: as `GET /sales/{sale_id}/order` reads it, `queued` (bought, not
    /// yet in Postgres) or `confirmed` (stored); in a sale with a payment window `reserved`,
    /// `paid`, `cancelled` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<OrderStatus>,
    /// `already_purchased` only: when it was bought (the Redis server's clock).
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<OffsetDateTime>,
    /// `already_purchased` only: the units of that order, when more than one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantity: Option<u32>,
    /// `not_retirable` only: why the sale cannot be retired yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<Refusal>>,
    /// `limit_reached` and `group_limit_differs`: the units one buyer may buy in the sale (or
    /// across its group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_buyer: Option<u32>,
    /// `limit_reached` only: the units the buyer holds in the sale's group (0 without a group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held: Option<u32>,
    /// `limit_reached` only: the buyer's orders in the group's sales.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orders: Option<Vec<HeldOrder>>,
    /// `insufficient_stock` only: the units left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stock_left: Option<i64>,
    /// `already_entered` only: the buyer's entry in the draw, as it was accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryBody>,
}

/// A buyer's entry in a draw, in an `already_entered` answer.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EntryBody {
    /// The sizes wanted, best first.
    pub sizes: Vec<String>,
    pub quantity: u32,
    /// When it was accepted (the Redis server's clock).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub entered_at: OffsetDateTime,
}

/// The refusals a crowd gets by the thousand (a sold-out, not yet open, over or unknown sale),
/// whose body never varies: each built once, then shared.
static CONSTANT_BODIES: [OnceLock<Bytes>; 6] = [const { OnceLock::new() }; 6];

impl ApiError {
    /// The JSON body of this error.
    pub(super) fn body(&self) -> ErrorBody<'_> {
        let receipt = match self {
            Self::Shop(E::AlreadyPurchased(receipt)) => *receipt,
            _ => None,
        };
        let order_id = match self {
            Self::Shop(E::NotDurable { order_id } | E::OutcomeUnknown { order_id, .. }) => Some(*order_id),
            _ => receipt.map(|r| r.order_id),
        };
        ErrorBody {
            error: self.code(),
            message: self.to_string(),
            order_id,
            sale_id: match self {
                Self::Shop(
                    E::OutcomeUnknown { sale_id, .. }
                    | E::DropInProgress(sale_id)
                    | E::DropSizeMissing(sale_id)
                    | E::DropStock { size: sale_id, .. },
                ) => Some(sale_id.clone()),
                _ => None,
            },
            status: receipt.map(|r| r.status.into()),
            created_at: receipt.map(|r| ms_to_time(r.created_at_ms)),
            quantity: receipt.map(|r| r.quantity).filter(|&q| q > 1),
            reasons: match self {
                Self::Shop(E::NotRetirable(reasons)) => Some(reasons.iter().map(|&r| r.into()).collect()),
                _ => None,
            },
            per_buyer: match self {
                Self::Shop(E::LimitReached { per_buyer, .. } | E::GroupLimitDiffers { per_buyer }) => Some(*per_buyer),
                _ => None,
            },
            held: match self {
                Self::Shop(E::LimitReached { held, .. }) => Some(*held),
                _ => None,
            },
            orders: match self {
                Self::Shop(E::LimitReached { orders, .. }) => Some(orders.iter().map(HeldOrder::from).collect()),
                _ => None,
            },
            stock_left: match self {
                Self::Shop(E::InsufficientStock { stock_left }) => Some(*stock_left),
                Self::Shop(E::DropStock { refusal, .. }) => match **refusal {
                    E::StockBelowZero { stock_left } => Some(stock_left),
                    _ => None,
                },
                _ => None,
            },
            entry: match self {
                Self::Shop(E::AlreadyEntered(entry)) => Some(EntryBody {
                    sizes: entry.sizes.clone(),
                    quantity: entry.quantity,
                    entered_at: ms_to_time(entry.entered_at_ms),
                }),
                _ => None,
            },
        }
    }

    /// The body of a crowd's refusal ([`CONSTANT_BODIES`]), serialized once per process.
    pub(super) fn constant_body(&self) -> Option<Bytes> {
        let slot = match self {
            Self::Shop(E::SoldOut) => 0,
            Self::Shop(E::SaleNotStarted) => 1,
            Self::Shop(E::SaleEnded) => 2,
            Self::Shop(E::UnknownSale) => 3,
            Self::Shop(E::SaleRetired) => 4,
            Self::NotFound => 5,
            _ => return None,
        };
        let body = CONSTANT_BODIES[slot].get_or_init(|| serde_json::to_vec(&self.body()).unwrap_or_default().into());
        Some(body.clone())
    }
}

#[cfg(test)]
mod tests {
    use actix_web::ResponseError;
    use actix_web::body::MessageBody;
    use actix_web::http::header;

    use super::*;

    #[test]
    fn a_crowds_refusals_are_built_once_and_answer_as_every_other_error() {
        let constant = [
            ApiError::Shop(E::SoldOut),
            ApiError::Shop(E::SaleNotStarted),
            ApiError::Shop(E::SaleEnded),
            ApiError::Shop(E::UnknownSale),
            ApiError::Shop(E::SaleRetired),
            ApiError::NotFound,
        ];
        for error in constant {
            let built = serde_json::to_vec(&error.body()).unwrap();
            for _ in 0..2 {
                let response = error.error_response();
                assert_eq!(response.status(), error.status_code());
                assert_eq!(response.headers().get(header::CONTENT_TYPE).unwrap(), "application/json");
                let body = response.into_body().try_into_bytes().unwrap();
                assert_eq!(body, built, "{error:?}");
            }
        }
        assert!(
            ApiError::Shop(E::SeedRetired).constant_body().is_none(),
            "sale_retired's other message is built each time"
        );
    }
}
