//! The reservations' transitions in Postgres, the authority: each is one compare-and-set from
//! `reserved` (an `update … where status = 'reserved'`), so of a payment, a cancel and an expiry
//! racing for one order exactly one wins; and the outbox of releases still owed (an order that
//! gives its units back, [`RETURNS_UNITS`], whose `restocked_at` is null). A payment event's
//! transition and the payments to refund are in `payment`, a sale's orders by standing in `tally`.

mod payment;
mod tally;

use sqlx::PgPool;
use time::OffsetDateTime;
use uuid::Uuid;

pub use self::payment::{LatePayment, PaymentError, PaymentOutcome, Settled, late_payments, pay};
pub use self::tally::{Tally, tally, tally_by_sale};
use crate::db::{self, RETURNS_UNITS};
use crate::domain::{SaleId, Standing, UserId};

/// An order whose unit is owed back to its sale's stock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owed {
    pub sale_id: String,
    pub order_id: Uuid,
}

/// Expires up to `limit` reservations whose deadline has passed (oldest deadline first), rows
/// another sweeper holds skipped, each with its `order.expired` in the same statement. Returns
/// them with how late each expired, in seconds.
pub async fn expire_due(pool: &PgPool, limit: i64) -> Result<Vec<(Owed, f64)>, sqlx::Error> {
    let event = db::order_event("'order.expired'", "", "o");
    let rows: Vec<(String, Uuid, f64, Option<i64>)> = sqlx::query_as(&format!(
        "update orders o set status = 'expired', resolved_at = now(), resolved_by = 'deadline'
         from (select sale_id, user_id from orders
               where status = 'reserved' and pay_by <= now()
               order by pay_by limit $1 for update skip locked) due
         where o.sale_id = due.sale_id and o.user_id = due.user_id and o.status = 'reserved'
         returning o.sale_id, o.order_id, extract(epoch from (now() - o.pay_by))::float8, {event}"
    ))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(sale_id, order_id, lag, _)| (Owed { sale_id, order_id }, lag)).collect())
}

/// The earliest deadline of an open reservation, if any, and whether it has passed on
/// Postgres's clock. A read (one step down the partial index), so the sweeper writes, and locks,
/// nothing unless a reservation is due.
pub async fn next_deadline(pool: &PgPool) -> Result<Option<(OffsetDateTime, bool)>, sqlx::Error> {
    let (deadline, due): (Option<OffsetDateTime>, Option<bool>) =
        sqlx::query_as("select min(pay_by), min(pay_by) <= now() from orders where status = 'reserved'")
            .fetch_one(pool)
            .await?;
    Ok(deadline.map(|deadline| (deadline, due.unwrap_or(false))))
}

/// Where a walk through the owed releases stands: the last one read (its `resolved_at` and id).
pub type OwedCursor = (OffsetDateTime, Uuid);

/// Up to `limit` releases still owed that were resolved at least `grace` seconds ago (a
/// transition in flight releases its own unit; the outbox is for those whose releaser died or
/// failed), in the order they were resolved, from just after `after`. Returns them with where
/// the next page starts: `None` once this page was the last, so the walk starts over. Paged so
/// that releases Redis keeps refusing (a sale it does not know) cannot hold back the others.
pub async fn owed_releases(
    pool: &PgPool,
    grace_secs: f64,
    limit: i64,
    after: Option<OwedCursor>,
) -> Result<(Vec<Owed>, Option<OwedCursor>), sqlx::Error> {
    let (after_time, after_id) = after.unzip();
    let rows: Vec<(String, Uuid, OffsetDateTime)> = sqlx::query_as(&format!(
        "select sale_id, order_id, resolved_at from orders
         where restocked_at is null and {RETURNS_UNITS}
           and coalesce(refunded_at, resolved_at) <= now() - make_interval(secs => $1)
           and ($3::timestamptz is null or (resolved_at, order_id) > ($3, $4))
         order by resolved_at, order_id limit $2"
    ))
    .bind(grace_secs)
    .bind(limit)
    .bind(after_time)
    .bind(after_id)
    .fetch_all(pool)
    .await?;
    let next = match rows.len() as i64 == limit {
        true => rows.last().map(|(_, order_id, resolved_at)| (*resolved_at, *order_id)),
        false => None,
    };
    Ok((rows.into_iter().map(|(sale_id, order_id, _)| Owed { sale_id, order_id }).collect(), next))
}

/// Every order of the sale that gives its units back ([`RETURNS_UNITS`]; reconciliation's repair
/// releases them all again: the release's gate makes that harmless).
pub async fn released_orders(pool: &PgPool, sale: &SaleId) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(&format!("select order_id from orders where sale_id = $1 and {RETURNS_UNITS}"))
        .bind(sale.as_str())
        .fetch_all(pool)
        .await
}

/// How many of the sale's orders are recorded as given back (`restocked_at` set).
pub async fn restocked_count(pool: &PgPool, sale: &SaleId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from orders where sale_id = $1 and restocked_at is not null")
        .bind(sale.as_str())
        .fetch_one(pool)
        .await
}

/// The quantity of each of `orders` of `sale` that Postgres holds.
pub async fn quantities(
    pool: &PgPool,
    sale: &str,
    orders: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, i32>, sqlx::Error> {
    let rows: Vec<(Uuid, i32)> =
        sqlx::query_as("select order_id, quantity from orders where order_id = any($1) and sale_id = $2")
            .bind(orders)
            .bind(sale)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().collect())
}

/// Records that the units of `orders` (of `sale`) are back in the stock.
pub async fn mark_restocked(pool: &PgPool, sale: &str, orders: &[Uuid]) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "update orders set restocked_at = now()
         where order_id = any($1) and pay_by is not null and sale_id = $2 and restocked_at is null",
    )
    .bind(orders)
    .bind(sale)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// What a buyer's cancel found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// Cancelled: this order's unit is owed back.
    Cancelled(Uuid),
    /// The order is not (or no longer) a reservation that can be cancelled: where it stands
    /// (`Reserved` past its deadline: the sweeper is about to expire it).
    Not(Standing),
    /// Postgres has no order of this buyer.
    Missing,
}

/// The buyer's cancel: `reserved` → `cancelled`, while its deadline has not passed. When the
/// update changes nothing, the row is read to say why; a reservation found open then was
/// committed by the worker between the two statements, and the update is tried again. The
/// cancel writes its `order.cancelled` (`by: buyer`) in the same statement.
pub async fn cancel(pool: &PgPool, sale: &SaleId, user: &UserId) -> Result<Cancel, sqlx::Error> {
    let event = db::order_event("'order.cancelled'", r#" || '{"by": "buyer"}'::jsonb"#, "");
    for _ in 0..3 {
        let cancelled: Option<(Uuid, Option<i64>)> = sqlx::query_as(&format!(
            "update orders set status = 'cancelled', resolved_at = now(), resolved_by = 'buyer'
             where sale_id = $1 and user_id = $2 and status = 'reserved' and pay_by > now()
             returning order_id, {event}"
        ))
        .bind(sale.as_str())
        .bind(user.as_str())
        .fetch_optional(pool)
        .await?;
        if let Some((order, _)) = cancelled {
            return Ok(Cancel::Cancelled(order));
        }
        let row: Option<(String, bool)> = sqlx::query_as(
            "select status, coalesce(pay_by > now(), false) from orders where sale_id = $1 and user_id = $2",
        )
        .bind(sale.as_str())
        .bind(user.as_str())
        .fetch_optional(pool)
        .await?;
        match row {
            None => return Ok(Cancel::Missing),
            Some((status, open)) => match Standing::parse(&status) {
                Some(Standing::Reserved) if open => continue,
                Some(standing) => return Ok(Cancel::Not(standing)),
                None => return Err(sqlx::Error::Decode(format!("status {status:?}").into())),
            },
        }
    }
    Ok(Cancel::Not(Standing::Reserved))
}
