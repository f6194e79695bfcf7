//! An operator's actions on one order, named by its id: voiding a reservation (`reserved` →
//! `cancelled`, as a buyer's cancel, its units back exactly once) and recording the refund of a
//! paid order (`paid` → `refunded`, its units back only when asked, exactly once). Each is one
//! compare-and-set in Postgres, the authority, so of an operator's cancel, a buyer's cancel, an
//! expiry and a payment racing for one reservation exactly one wins; each writes its order event
//! (`order.cancelled` with `by: operator`, `order.refunded`) and its audit entry (`order_cancel`,
//! `order_refund`) in the transaction of its change. The units go back through
//! [`super::release`], whose gate admits each order once; a failed release stays owed (the
//! outbox: [`crate::db::RETURNS_UNITS`] with `restocked_at` null) for the sweeper's re-drive.

use serde_json::json;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::Reservations;
use crate::controls::audit;
use crate::db;
use crate::domain::{SaleId, Standing};

/// Who acts and why: the operator's name when known (`None`: an unnamed credential) and its
/// reason, both kept in the audit entry and the order event.
#[derive(Debug, Clone, Copy, Default)]
pub struct Note<'a> {
    pub actor: Option<&'a str>,
    pub reason: Option<&'a str>,
}

/// The order an action changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acted {
    pub sale_id: SaleId,
    pub order_id: Uuid,
    pub user_id: String,
    /// Units the order holds.
    pub quantity: i32,
    /// Its units go back to the stock (always for a cancel; for a refund when asked).
    pub restock: bool,
}

/// What an action found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the order's new standing is committed with its event and audit entry.
    Done(Acted),
    /// The order does not stand where the action starts from: where it stands (`Reserved` to a
    /// cancel: its deadline has passed, it is expiring).
    Not(Standing),
    /// No order of a sale with a payment window has that id in Postgres.
    Missing,
    /// A refund with restock of an order whose sale was retired: its stock is gone.
    Retired,
}

/// Columns an action's `returning` reads, then its event's id.
type Changed = (String, String, i32, Option<i64>);

/// The event data an action adds to the order's: who and why.
fn by_operator(extra: &str) -> String {
    format!(" || jsonb_build_object('by', 'operator', 'actor', $2::text, 'reason', $3::text{extra})")
}

/// Voids the reservation `order_id` while its deadline has not passed (Postgres's clock), with
/// its `order.cancelled` and its `order_cancel` audit entry in one transaction. A reservation the
/// update missed and found open (inserted by the worker in between) is tried again.
pub async fn cancel(pool: &PgPool, order_id: Uuid, note: Note<'_>) -> Result<Outcome, sqlx::Error> {
    let event = db::order_event("'order.cancelled'", &by_operator(""), "");
    for _ in 0..3 {
        let mut tx = pool.begin().await?;
        let changed: Option<Changed> = sqlx::query_as(&format!(
            "update orders set status = 'cancelled', resolved_at = now(), resolved_by = 'operator'
             where order_id = $1 and pay_by is not null and status = 'reserved' and pay_by > now()
             returning sale_id, user_id, quantity, {event}"
        ))
        .bind(order_id)
        .bind(note.actor)
        .bind(note.reason)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(changed) = changed {
            let acted = acted(order_id, changed, true)?;
            record(&mut tx, "order_cancel", &acted, note).await?;
            tx.commit().await?;
            return Ok(Outcome::Done(acted));
        }
        tx.rollback().await?;
        match standing(pool, order_id).await? {
            None => return Ok(Outcome::Missing),
            Some((Standing::Reserved, true)) => continue,
            Some((standing, _)) => return Ok(Outcome::Not(standing)),
        }
    }
    Ok(Outcome::Not(Standing::Reserved))
}

/// Records the refund of the paid order `order_id`: `refunded`, its units back to the stock only
/// with `restock` (refused for a retired sale's order: [`Outcome::Retired`], nothing changed),
/// with its `order.refunded` and its `order_refund` audit entry in one transaction. The sale's
/// row is held (`for share`) to the commit, so a retirement marks it only after this refund.
pub async fn refund(pool: &PgPool, order_id: Uuid, restock: bool, note: Note<'_>) -> Result<Outcome, sqlx::Error> {
    let event = db::order_event("'order.refunded'", &by_operator(", 'restock', $4::bool"), "");
    let mut tx = pool.begin().await?;
    let changed: Option<Changed> = sqlx::query_as(&format!(
        "update orders set status = 'refunded', refunded_at = now(), refund_restock = $4
         where order_id = $1 and pay_by is not null and status = 'paid'
         returning sale_id, user_id, quantity, {event}"
    ))
    .bind(order_id)
    .bind(note.actor)
    .bind(note.reason)
    .bind(restock)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(changed) = changed else {
        tx.rollback().await?;
        return Ok(match standing(pool, order_id).await? {
            None => Outcome::Missing,
            Some((standing, _)) => Outcome::Not(standing),
        });
    };
    let acted = acted(order_id, changed, restock)?;
    let retired: Option<bool> =
        sqlx::query_scalar("select retired_at is not null from sales where sale_id = $1 for share")
            .bind(acted.sale_id.as_str())
            .fetch_optional(&mut *tx)
            .await?;
    if restock && retired == Some(true) {
        tx.rollback().await?;
        return Ok(Outcome::Retired);
    }
    record(&mut tx, "order_refund", &acted, note).await?;
    tx.commit().await?;
    Ok(Outcome::Done(acted))
}

fn acted(order_id: Uuid, (sale, user_id, quantity, _event): Changed, restock: bool) -> Result<Acted, sqlx::Error> {
    let sale_id =
        SaleId::parse(&sale).map_err(|why| sqlx::Error::Decode(format!("order's sale {sale:?}: {why}").into()))?;
    Ok(Acted { sale_id, order_id, user_id, quantity, restock })
}

/// The audit entry of an action, in its transaction.
async fn record(
    tx: &mut Transaction<'_, Postgres>,
    action: &str,
    acted: &Acted,
    note: Note<'_>,
) -> Result<(), sqlx::Error> {
    let effect = json!({
        "order_id": acted.order_id,
        "user_id": acted.user_id,
        "quantity": acted.quantity,
        "restock": acted.restock,
    });
    audit::record(tx, &acted.sale_id, action, note.reason, &effect, note.actor).await
}

/// Where the order stands, and whether its deadline is still ahead; `None`: no such order (of a
/// sale with a payment window: only those are indexed by id).
async fn standing(pool: &PgPool, order_id: Uuid) -> Result<Option<(Standing, bool)>, sqlx::Error> {
    let row: Option<(String, bool)> =
        sqlx::query_as("select status, pay_by > now() from orders where order_id = $1 and pay_by is not null")
            .bind(order_id)
            .fetch_optional(pool)
            .await?;
    row.map(|(status, open)| {
        Standing::parse(&status)
            .map(|standing| (standing, open))
            .ok_or_else(|| sqlx::Error::Decode(format!("status {status:?}").into()))
    })
    .transpose()
}

impl Reservations {
    /// An operator voids the reservation `order_id` ([`cancel`]) and its units go back at once
    /// (a failed release stays owed, for the sweeper).
    pub async fn operator_cancel(&self, order_id: Uuid, note: Note<'_>) -> Result<Outcome, sqlx::Error> {
        let outcome = cancel(&self.pool, order_id, note).await?;
        if let Outcome::Done(acted) = &outcome {
            self.metrics.reservations.with_label_values(&["cancelled"]).inc();
            self.release_now(acted.sale_id.as_str(), &[order_id]).await;
        }
        Ok(outcome)
    }

    /// An operator records the refund of the paid order `order_id` ([`refund`]); with `restock`
    /// its units go back at once (a failed release stays owed, for the sweeper).
    pub async fn refund(&self, order_id: Uuid, restock: bool, note: Note<'_>) -> Result<Outcome, sqlx::Error> {
        let outcome = refund(&self.pool, order_id, restock, note).await?;
        if let Outcome::Done(acted) = &outcome {
            self.metrics.reservations.with_label_values(&["refunded"]).inc();
            if acted.restock {
                self.release_now(acted.sale_id.as_str(), &[order_id]).await;
            }
        }
        Ok(outcome)
    }
}
