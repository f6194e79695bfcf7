//! A sale's orders by standing, and its payments to refund, counted.

use std::collections::HashMap;

use sqlx::PgPool;

use crate::db::RETURNS_UNITS;
use crate::domain::{SaleId, Standing};

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
