//! "Did my purchase go through?": one buyer's order in one sale, from Redis while it is queued and
//! from Postgres once it is committed. In a sale with a payment window the read says what the
//! buyer did at once, on every instance: `reserved` with its `pay_by` right after the 201 (the
//! order's stream entry carries the deadline), and `paid` or `cancelled` right after the payment
//! or the cancel answered, since those commit to Postgres before they answer (storing a queued
//! order from its entry first), and a queued reservation's read asks Postgres too. The 409 of a
//! repeat purchase names the same state ([`repeat_status`]).

use time::OffsetDateTime;
use tracing::Instrument;
use uuid::Uuid;

use crate::db;
use crate::domain::{SaleId, Standing, UserId};
use crate::purchase::{OrderStatus, Purchase, Receipt, Sales};
use crate::telemetry::{self, traces};

/// Where a found order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Bought, still in the sale's stream (a sale without a payment window).
    Queued,
    /// A reservation still in the sale's stream, neither paid nor cancelled: reserved until its
    /// `pay_by` (a sale with a payment window, before the worker stored it).
    Reserved,
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
    /// The user's order.
    Found(Found),
}

/// A buyer's order: its id and time are unknown only for a buyer without a receipt whose order
/// Postgres does not hold yet (one bought before receipts were kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub place: Place,
    pub order_id: Option<Uuid>,
    pub created_at: Option<OffsetDateTime>,
    /// A reservation's deadline (stored orders of a sale with a payment window).
    pub pay_by: Option<OffsetDateTime>,
    /// Units bought (1 when not known).
    pub quantity: u32,
}

/// Why a lookup failed.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

/// Finds `user`'s order in `sale`. Redis answers first: an order of a sale without a payment
/// window whose entry is still in the stream is `queued`, and Postgres is not asked. Otherwise
/// Postgres has the last word: its row is the order, standing as it says (`confirmed`, or a
/// reservation's state; a payment or a cancel may have stored and moved a queued reservation
/// before the worker did). A buyer Postgres does not know yet (the worker lags, or the order is
/// being re-enqueued) is still `queued`, or `reserved` with its entry's `pay_by`; a sale Redis
/// lost answers from Postgres alone.
pub async fn lookup(sales: &Sales, pool: &sqlx::PgPool, sale: &SaleId, user: &UserId) -> Result<Lookup, LookupError> {
    let in_redis = sales.purchase_of(sale, user).instrument(client_span("redis", "read receipt")).await?;
    if let Purchase::Bought(Some(receipt)) = in_redis
        && receipt.status == OrderStatus::Queued
        && receipt.pay_by_ms.is_none()
    {
        return Ok(queued(&receipt));
    }
    if let Some(order) = db::order_of(pool, sale, user).instrument(client_span("postgresql", "SELECT orders")).await? {
        return Ok(Lookup::Found(Found {
            place: Place::Stored(order.standing),
            order_id: Some(order.order_id),
            created_at: Some(order.created_at),
            pay_by: order.pay_by,
            quantity: order.quantity,
        }));
    }
    Ok(match in_redis {
        Purchase::Bought(Some(receipt)) => match receipt.pay_by_ms {
            None => queued(&receipt),
            Some(pay_by_ms) => Lookup::Found(Found {
                place: Place::Reserved,
                order_id: Some(receipt.order_id),
                created_at: Some(db::ms_to_time(receipt.created_at_ms)),
                pay_by: Some(db::ms_to_time(pay_by_ms)),
                quantity: receipt.quantity,
            }),
        },
        Purchase::Bought(None) => {
            Lookup::Found(Found { place: Place::Queued, order_id: None, created_at: None, pay_by: None, quantity: 1 })
        }
        Purchase::NotBought => Lookup::NotBought,
        Purchase::UnknownSale => Lookup::UnknownSale,
    })
}

/// The status the 409 of a repeat purchase names, as [`lookup`] would read it: in a sale with a
/// payment window (`windowed`) the order's standing in Postgres (one primary-key read), or
/// `reserved` for a queued order Postgres does not hold yet; otherwise the script's `queued` or
/// `confirmed`, unchanged and without a query. If Postgres cannot be read, the receipt as the
/// script gave it: the buyer did buy, and a 503 would tell them nothing was bought.
pub async fn repeat_status(
    pool: &sqlx::PgPool,
    sale: &SaleId,
    user: &UserId,
    receipt: Receipt,
    windowed: bool,
) -> Receipt {
    if !windowed {
        return receipt;
    }
    let status = match db::order_of(pool, sale, user).instrument(client_span("postgresql", "SELECT orders")).await {
        Ok(Some(order)) => order.standing.into(),
        Ok(None) if receipt.status == OrderStatus::Queued => OrderStatus::Reserved,
        Ok(None) => receipt.status,
        Err(err) => {
            if let Some(suppressed) = telemetry::dependency_failure_line(Some("postgres")) {
                tracing::warn!(error = %err, suppressed, "a repeat purchase's order could not be read: its receipt \
                    answers");
            }
            receipt.status
        }
    };
    Receipt { status, ..receipt }
}

fn queued(receipt: &Receipt) -> Lookup {
    Lookup::Found(Found {
        place: Place::Queued,
        order_id: Some(receipt.order_id),
        created_at: Some(db::ms_to_time(receipt.created_at_ms)),
        pay_by: None,
        quantity: receipt.quantity,
    })
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
