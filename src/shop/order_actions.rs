//! An operator's actions on one order (`crate::reservations::actions`): voiding a reservation and
//! recording a paid order's refund. Each is audited with the operator (`actor`, `None` for an
//! unnamed credential) and reason, and reported as an order event.

use uuid::Uuid;

use super::controls::checked_reason;
use super::{Error, Shop};
use crate::reservations::actions::{Acted, Note, Outcome};

pub use crate::reservations::actions::Acted as OrderActed;

impl Shop {
    /// Voids the reservation `order_id` before its deadline: it becomes `cancelled` and its units
    /// go back to the sale exactly once, as a buyer's cancel's. Refused (`not_reserved`) for an
    /// order paid, cancelled, expired, refunded or past its deadline (expiring); `unknown_order`
    /// for an id Postgres does not hold among the orders of sales with a payment window.
    pub async fn cancel_order(
        &self,
        order_id: Uuid,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<Acted, Error> {
        let note = Note { actor, reason: checked_reason(reason)? };
        let outcome = self.reservations.operator_cancel(order_id, note).await?;
        let acted = acted(outcome, Error::NotReserved)?;
        self.board.invalidate(&acted.sale_id).await;
        let reason = note.reason;
        tracing::info!(sale_id = %acted.sale_id, %order_id, actor, reason, "order cancelled by an operator");
        Ok(acted)
    }

    /// Records the refund of the paid order `order_id`: it becomes `refunded`; with `restock` its
    /// units go back to the sale exactly once (refused for a retired sale's order), without it
    /// they stay sold. Refused (`not_paid`) for an order not paid (or refunded before).
    pub async fn refund_order(
        &self,
        order_id: Uuid,
        restock: bool,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<Acted, Error> {
        let note = Note { actor, reason: checked_reason(reason)? };
        let outcome = self.reservations.refund(order_id, restock, note).await?;
        let acted = acted(outcome, Error::NotPaid)?;
        if restock {
            self.board.invalidate(&acted.sale_id).await;
        }
        tracing::info!(sale_id = %acted.sale_id, %order_id, restock, actor, reason = note.reason, "order refunded");
        Ok(acted)
    }
}

fn acted(outcome: Outcome, not: fn(crate::domain::Standing) -> Error) -> Result<Acted, Error> {
    match outcome {
        Outcome::Done(acted) => Ok(acted),
        Outcome::Not(standing) => Err(not(standing)),
        Outcome::Missing => Err(Error::UnknownOrderId),
        Outcome::Retired => Err(Error::RestockRetired),
    }
}
