//! "Did my purchase go through?": one buyer's order in one sale, from Redis while it is queued and
//! from Postgres once it is committed.

use time::OffsetDateTime;
use uuid::Uuid;

use crate::db;
use crate::domain::{SaleId, UserId};
use crate::purchase::{OrderStatus, Purchase, Sales};

/// A buyer's order, as [`lookup`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Neither Redis nor Postgres knows the sale.
    UnknownSale,
    /// The user has not bought in the sale.
    NotBought,
    /// The user's order; its id and time are unknown only for a buyer without a receipt whose
    /// order Postgres does not hold yet (one bought before receipts were kept).
    Found { status: OrderStatus, order_id: Option<Uuid>, created_at: Option<OffsetDateTime> },
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

/// Finds `user`'s order in `sale`. Redis answers first: an order whose entry is still in the
/// stream is `queued`, and Postgres is not asked. Otherwise Postgres has the last word: its row
/// is the order, `confirmed`. A buyer Postgres does not know yet (the worker lags, or the order
/// is being re-enqueued) is still `queued`; a sale Redis lost answers from Postgres alone.
pub async fn lookup(sales: &Sales, pool: &sqlx::PgPool, sale: &SaleId, user: &UserId) -> Result<Lookup, LookupError> {
    let in_redis = sales.purchase_of(sale, user).await?;
    if let Purchase::Bought(Some(receipt)) = in_redis
        && receipt.status == OrderStatus::Queued
    {
        return Ok(found(receipt.order_id, db::ms_to_time(receipt.created_at_ms), OrderStatus::Queued));
    }
    if let Some((order_id, created_at)) = db::order_of(pool, sale, user).await? {
        return Ok(found(order_id, created_at, OrderStatus::Confirmed));
    }
    Ok(match in_redis {
        Purchase::Bought(Some(receipt)) => {
            found(receipt.order_id, db::ms_to_time(receipt.created_at_ms), OrderStatus::Queued)
        }
        Purchase::Bought(None) => Lookup::Found { status: OrderStatus::Queued, order_id: None, created_at: None },
        Purchase::NotBought => Lookup::NotBought,
        Purchase::UnknownSale => Lookup::UnknownSale,
    })
}

fn found(order_id: Uuid, created_at: OffsetDateTime, status: OrderStatus) -> Lookup {
    Lookup::Found { status, order_id: Some(order_id), created_at: Some(created_at) }
}
