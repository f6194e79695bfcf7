//! A bought order's status ([`OrderStatus`]) and a payment to refund ([`LatePayment`]).

use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::shop::lower::{purchase, reservations};

/// Where a bought order is: `queued` or `confirmed` as Redis knows it (the purchase scripts'
/// words), or, in a sale with a payment window, the reservation's state as `GET
/// /sales/{id}/order` reads it (`crate::orders::lookup::repeat_status`, for the 409 of a repeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    /// Bought; its entry is still in the sale's stream, not yet committed to Postgres.
    Queued,
    /// Committed to Postgres (its entry left the stream, which happens only after the commit).
    Confirmed,
    /// A reservation, to be paid by its deadline.
    Reserved,
    /// A reservation paid in time.
    Paid,
    /// A reservation given back by the buyer.
    Cancelled,
    /// A reservation not paid in time.
    Expired,
    /// A paid order an operator refunded.
    Refunded,
}

impl From<purchase::OrderStatus> for OrderStatus {
    fn from(status: purchase::OrderStatus) -> Self {
        use purchase::OrderStatus as Lower;
        match status {
            Lower::Queued => Self::Queued,
            Lower::Confirmed => Self::Confirmed,
            Lower::Reserved => Self::Reserved,
            Lower::Paid => Self::Paid,
            Lower::Cancelled => Self::Cancelled,
            Lower::Expired => Self::Expired,
            Lower::Refunded => Self::Refunded,
        }
    }
}

/// One of a buyer's orders in a group's sales (a `limit_reached` refusal lists them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct HeldOrder {
    pub sale_id: String,
    pub order_id: Uuid,
    /// Units bought.
    pub quantity: u32,
    /// When it was bought (the Redis server's clock).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created_at: OffsetDateTime,
}

impl From<&(crate::domain::SaleId, purchase::Receipt)> for HeldOrder {
    fn from((sale, receipt): &(crate::domain::SaleId, purchase::Receipt)) -> Self {
        Self {
            sale_id: sale.to_string(),
            order_id: receipt.order_id,
            quantity: receipt.quantity,
            created_at: crate::domain::ms_to_time(receipt.created_at_ms),
        }
    }
}

/// A payment to refund.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LatePayment {
    pub event_id: String,
    pub sale_id: String,
    pub order_id: Uuid,
    /// `late` (the order had expired or been cancelled) or `duplicate` (already paid).
    pub outcome: String,
    /// The order's standing when the event arrived.
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub received_at: OffsetDateTime,
}

moved_from!(reservations::LatePayment => LatePayment {
    event_id, sale_id, order_id, outcome, status, received_at,
});
