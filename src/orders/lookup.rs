//! "Did my purchase go through?": one buyer's order in one sale, from Redis while it is queued and
//! from Postgres once it is committed.

use time::OffsetDateTime;
use tracing::Instrument;
use uuid::Uuid;

use crate::db;
use crate::domain::{SaleId, Standing, UserId};
use crate::purchase::{OrderStatus, Purchase, Sales};
use crate::telemetry::traces;

/// Where a found order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Bought, still in the sale's stream (a reservation too, in a sale with a payment window,
    /// once stored).
    Queued,
    /// In Postgres, standing so.
    Stored(Standing),
}

/// A buyer's order, as [`lookup`] found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// Neither Redis nor Postgres knows the sale.
    UnknownSale,
    /// The user has not bought in the sale.
    NotBought,
    /// The user's order; its id and time are unknown only for a buyer without a receipt whose
    /// order Postgres does not hold yet (one bought before receipts were kept).
    Found {
        place: Place,
        order_id: Option<Uuid>,
        created_at: Option<OffsetDateTime>,
        /// A reservation's deadline (stored orders of a sale with a payment window).
        pay_by: Option<OffsetDateTime>,
    },
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
/// is the order, standing as it says (`confirmed`, or a reservation's state). A buyer Postgres does not know yet (the worker lags, or the order
/// is being re-enqueued) is still `queued`; a sale Redis lost answers from Postgres alone.
pub async fn lookup(sales: &Sales, pool: &sqlx::PgPool, sale: &SaleId, user: &UserId) -> Result<Lookup, LookupError> {
    let in_redis = sales.purchase_of(sale, user).instrument(client_span("redis", "read receipt")).await?;
    if let Purchase::Bought(Some(receipt)) = in_redis
        && receipt.status == OrderStatus::Queued
    {
        return Ok(queued(receipt.order_id, db::ms_to_time(receipt.created_at_ms)));
    }
    if let Some(order) = db::order_of(pool, sale, user).instrument(client_span("postgresql", "SELECT orders")).await? {
        return Ok(Lookup::Found {
            place: Place::Stored(order.standing),
            order_id: Some(order.order_id),
            created_at: Some(order.created_at),
            pay_by: order.pay_by,
        });
    }
    Ok(match in_redis {
        Purchase::Bought(Some(receipt)) => queued(receipt.order_id, db::ms_to_time(receipt.created_at_ms)),
        Purchase::Bought(None) => {
            Lookup::Found { place: Place::Queued, order_id: None, created_at: None, pay_by: None }
        }
        Purchase::NotBought => Lookup::NotBought,
        Purchase::UnknownSale => Lookup::UnknownSale,
    })
}

fn queued(order_id: Uuid, created_at: OffsetDateTime) -> Lookup {
    Lookup::Found { place: Place::Queued, order_id: Some(order_id), created_at: Some(created_at), pay_by: None }
}

/// A client span of the lookup's reads when traces are on (`crate::telemetry::traces`).
fn client_span(system: &'static str, operation: &'static str) -> tracing::Span {
    match traces::on() {
        true => tracing::info_span!(
            "order.lookup",
            otel.kind = "client",
            db.system.name = system,
            db.operation.name = operation
        ),
        false => tracing::Span::none(),
    }
}
