//! A payment event's transition of its order, stored with its outcome so a repeat answers the
//! same, and the payments to refund.

use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};
use time::OffsetDateTime;
use uuid::Uuid;

use crate::db;
use crate::domain::{SaleId, Standing};

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
