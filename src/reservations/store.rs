//! The reservations' transitions in Postgres, the authority: each is one compare-and-set from
//! `reserved` (an `update … where status = 'reserved'`), so of a payment, a cancel and an expiry
//! racing for one order exactly one wins; and the outbox of releases still owed (an order that
//! gives its units back, [`RETURNS_UNITS`], whose `restocked_at` is null).

use std::collections::HashMap;

use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

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

/// Up to `limit` releases still owed that were resolved at least `grace` seconds ago (a
/// transition in flight releases its own unit; the outbox is for those whose releaser died or
/// failed).
pub async fn owed_releases(pool: &PgPool, grace_secs: f64, limit: i64) -> Result<Vec<Owed>, sqlx::Error> {
    let rows: Vec<(String, Uuid)> = sqlx::query_as(&format!(
        "select sale_id, order_id from orders
         where restocked_at is null and {RETURNS_UNITS}
           and coalesce(refunded_at, resolved_at) <= now() - make_interval(secs => $1)
         order by resolved_at limit $2"
    ))
    .bind(grace_secs)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(sale_id, order_id)| Owed { sale_id, order_id }).collect())
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

/// What became of a payment event, as stored and answered (the same again for a repeat).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub order_id: Uuid,
    /// The order's standing after the event.
    pub standing: Standing,
    /// `paid`, `late` (the order had expired or been cancelled) or `duplicate` (already paid).
    pub outcome: PaymentOutcome,
    /// The event expired the order itself (its deadline had passed and no sweeper had got to
    /// it yet): its unit is owed back.
    pub expired_now: bool,
    /// The event was applied before: this is its stored answer, nothing changed.
    pub repeat: bool,
}

/// What a payment event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentOutcome {
    Paid,
    Late,
    Duplicate,
}

impl PaymentOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Paid => "paid",
            Self::Late => "late",
            Self::Duplicate => "duplicate",
        }
    }

    fn parse(word: &str) -> Option<Self> {
        [Self::Paid, Self::Late, Self::Duplicate].into_iter().find(|o| o.as_str() == word)
    }
}

/// Why a payment event was not applied.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// Postgres has no order of the sale with that id (yet: it may still be queued).
    #[error("no such order")]
    UnknownOrder,
    /// The event id was used before for another order.
    #[error("event id reused for another order")]
    EventReused,
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

/// Applies the payment event `event_id` for `order_id` of `sale`, in one transaction: a repeat
/// of a stored event answers what it answered; otherwise the order's row is locked and a
/// reservation still before its deadline (Postgres's clock) becomes `paid`; one past it is
/// expired here (cause `deadline`) and the payment is late; a cancelled or expired order's
/// payment is late; an already paid order's is a duplicate. The event is stored with its outcome,
/// and the order's events written in the same transaction: `order.paid`, or `order.expired` for
/// an expiry here, and `order.late_payment` for a payment to refund (late or duplicate).
pub async fn pay(pool: &PgPool, event_id: &str, sale: &SaleId, order_id: Uuid) -> Result<Settled, PaymentError> {
    let mut tx = pool.begin().await?;
    if let Some(stored) = stored_event(&mut tx, event_id, sale, order_id).await? {
        return Ok(stored);
    }
    let row: Option<(String, bool)> = sqlx::query_as(
        "select status, pay_by > now() from orders
         where order_id = $1 and pay_by is not null and sale_id = $2 for update",
    )
    .bind(order_id)
    .bind(sale.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    let Some((status, in_time)) = row else {
        return Err(PaymentError::UnknownOrder);
    };
    let standing = Standing::parse(&status).ok_or_else(|| sqlx::Error::Decode(format!("status {status:?}").into()))?;
    let (outcome, standing, expired_now) = match standing {
        Standing::Reserved if in_time => {
            transition(&mut tx, order_id, sale, Standing::Paid, &format!("payment:{event_id}")).await?;
            (PaymentOutcome::Paid, Standing::Paid, false)
        }
        Standing::Reserved => {
            transition(&mut tx, order_id, sale, Standing::Expired, "deadline").await?;
            (PaymentOutcome::Late, Standing::Expired, true)
        }
        Standing::Paid => (PaymentOutcome::Duplicate, Standing::Paid, false),
        other => (PaymentOutcome::Late, other, false),
    };
    let sale_id = sale.as_str();
    if expired_now {
        db::emit_order(&mut tx, "order.expired", sale_id, order_id, json!({})).await?;
    }
    let (kind, extra) = match outcome {
        PaymentOutcome::Paid => ("order.paid", json!({ "payment_id": event_id })),
        late => ("order.late_payment", json!({ "payment_id": event_id, "outcome": late.as_str() })),
    };
    db::emit_order(&mut tx, kind, sale_id, order_id, extra).await?;
    let inserted = sqlx::query(
        "insert into payment_events (event_id, sale_id, order_id, outcome, status) values ($1, $2, $3, $4, $5)
         on conflict (event_id) do nothing",
    )
    .bind(event_id)
    .bind(sale.as_str())
    .bind(order_id)
    .bind(outcome.as_str())
    .bind(standing.as_str())
    .execute(&mut *tx)
    .await?;
    if inserted.rows_affected() == 0 {
        // The same event, applied concurrently and committed first: its answer stands.
        tx.rollback().await?;
        let mut tx = pool.begin().await?;
        return stored_event(&mut tx, event_id, sale, order_id).await?.ok_or(PaymentError::EventReused);
    }
    tx.commit().await?;
    Ok(Settled { order_id, standing, outcome, expired_now, repeat: false })
}

async fn transition(
    tx: &mut Transaction<'_, Postgres>,
    order_id: Uuid,
    sale: &SaleId,
    to: Standing,
    cause: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update orders set status = $3, resolved_at = now(), resolved_by = $4
         where order_id = $1 and pay_by is not null and sale_id = $2 and status = 'reserved'",
    )
    .bind(order_id)
    .bind(sale.as_str())
    .bind(to.as_str())
    .bind(cause)
    .execute(&mut **tx)
    .await
    .map(drop)
}

async fn stored_event(
    tx: &mut Transaction<'_, Postgres>,
    event_id: &str,
    sale: &SaleId,
    order_id: Uuid,
) -> Result<Option<Settled>, PaymentError> {
    let row: Option<(String, Uuid, String, String)> =
        sqlx::query_as("select sale_id, order_id, outcome, status from payment_events where event_id = $1")
            .bind(event_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Some((stored_sale, stored_order, outcome, status)) = row else {
        return Ok(None);
    };
    if stored_sale != sale.as_str() || stored_order != order_id {
        return Err(PaymentError::EventReused);
    }
    let decode = |what: &str| sqlx::Error::Decode(format!("payment event {what}").into());
    Ok(Some(Settled {
        order_id,
        standing: Standing::parse(&status).ok_or_else(|| decode("status"))?,
        outcome: PaymentOutcome::parse(&outcome).ok_or_else(|| decode("outcome"))?,
        expired_now: false,
        repeat: true,
    }))
}

/// A sale's orders by standing, and its payments to refund.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Tally {
    pub confirmed: i64,
    pub reserved: i64,
    pub paid: i64,
    pub cancelled: i64,
    pub expired: i64,
    /// Payment events to refund (late or duplicate).
    pub late_payments: i64,
    /// Refunded orders (an operator recorded the refund of a paid order).
    pub refunded: i64,
    /// Orders that give their units back (cancelled, expired, refunded with restock) whose units
    /// are not yet back in the stock.
    pub releases_owed: i64,
    /// Units of the live orders: confirmed, reserved and paid (an order may hold several).
    pub units_confirmed: i64,
    pub units_reserved: i64,
    pub units_paid: i64,
    /// Units of the orders refunded without restock: they stay out of the stock.
    pub units_refunded_held: i64,
}

/// The sale's [`Tally`].
pub async fn tally(pool: &PgPool, sale: &SaleId) -> Result<Tally, sqlx::Error> {
    let mut tallies = tally_by_sale(pool, std::slice::from_ref(sale)).await?;
    Ok(tallies.remove(sale.as_str()).unwrap_or_default())
}

/// The [`Tally`] of each of `sales` that has orders or payments.
pub async fn tally_by_sale(pool: &PgPool, sales: &[SaleId]) -> Result<HashMap<String, Tally>, sqlx::Error> {
    let ids: Vec<&str> = sales.iter().map(SaleId::as_str).collect();
    let rows: Vec<(String, String, i64, i64, i64, i64)> = sqlx::query_as(&format!(
        "select sale_id, status, count(*),
                count(*) filter (where {RETURNS_UNITS} and restocked_at is null),
                sum(quantity)::int8,
                coalesce(sum(quantity) filter (where status = 'refunded' and not refund_restock), 0)::int8
         from orders where sale_id = any($1) group by sale_id, status"
    ))
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    let mut tallies: HashMap<String, Tally> = HashMap::new();
    for (sale, status, count, owed, units, held) in rows {
        let tally = tallies.entry(sale).or_default();
        tally.releases_owed += owed;
        match Standing::parse(&status) {
            Some(Standing::Confirmed) => (tally.confirmed, tally.units_confirmed) = (count, units),
            Some(Standing::Reserved) => (tally.reserved, tally.units_reserved) = (count, units),
            Some(Standing::Paid) => (tally.paid, tally.units_paid) = (count, units),
            Some(Standing::Cancelled) => tally.cancelled = count,
            Some(Standing::Expired) => tally.expired = count,
            Some(Standing::Refunded) => (tally.refunded, tally.units_refunded_held) = (count, held),
            None => {}
        }
    }
    let late: Vec<(String, i64)> = sqlx::query_as(
        "select sale_id, count(*) from payment_events where sale_id = any($1) and outcome <> 'paid' group by sale_id",
    )
    .bind(&ids)
    .fetch_all(pool)
    .await?;
    for (sale, count) in late {
        tallies.entry(sale).or_default().late_payments = count;
    }
    Ok(tallies)
}

/// A payment to refund.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LatePayment {
    pub event_id: String,
    pub sale_id: String,
    pub order_id: Uuid,
    /// `late` (the order had expired or been cancelled) or `duplicate` (already paid).
    pub outcome: String,
    /// The order's standing when the event arrived.
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: OffsetDateTime,
}

/// The payments to refund (of `sale`, or of every sale), oldest first, at most `limit`.
pub async fn late_payments(pool: &PgPool, sale: Option<&SaleId>, limit: i64) -> Result<Vec<LatePayment>, sqlx::Error> {
    let rows: Vec<(String, String, Uuid, String, String, OffsetDateTime)> = sqlx::query_as(
        "select event_id, sale_id, order_id, outcome, status, received_at from payment_events
         where outcome <> 'paid' and ($1::text is null or sale_id = $1)
         order by received_at, event_id limit $2",
    )
    .bind(sale.map(SaleId::as_str))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(event_id, sale_id, order_id, outcome, status, received_at)| LatePayment {
            event_id,
            sale_id,
            order_id,
            outcome,
            status,
            received_at,
        })
        .collect())
}
