//! What reconciling one sale found, and what a repair did: [`ReconcileReport`].

use serde::{Deserialize, Serialize};

/// What reconciling one sale found (and, after [`super::repair`], did).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileReport {
    pub sale_id: String,
    /// From the Redis meta hash.
    pub stock_initial: i64,
    pub stock_left: i64,
    /// Users in the buyer set, read atomically with `stock_left`.
    pub buyers: i64,
    /// Orders whose unit went back into the stock (cancelled or expired reservations), read
    /// atomically with `stock_left`.
    #[serde(default)]
    pub released: i64,
    /// Cancelled or expired orders in Postgres whose unit is not yet back (the sweeper
    /// re-drives them; the repair releases them at once).
    #[serde(default)]
    pub releases_owed: i64,
    /// Orders Postgres records as given back (`restocked_at` set) beyond those in the released
    /// set: releases Redis lost (a restart within its fsync interval, a failover), their units
    /// missing from the stock. Postgres is read first, so a release in flight is never counted.
    #[serde(default)]
    pub releases_lost: i64,
    /// Orders of the sale in Postgres.
    pub persisted: i64,
    /// Orders in the sale's stream, not yet committed to Postgres.
    pub queued: i64,
    /// Units the buyers bought (`buyers` when every order is of one unit), read atomically with
    /// `stock_left`.
    #[serde(default)]
    pub units_sold: i64,
    /// Units the released orders gave back (`released` when every order is of one unit).
    #[serde(default)]
    pub units_returned: i64,
    /// `stock_initial == stock_left + units_sold - units_returned && stock_left >= 0`.
    pub stock_balanced: bool,
    /// `stock_initial` of the Postgres `sales` row; `None` if the row is missing.
    pub sales_row_stock: Option<i64>,
    /// Buyers with neither a Postgres order nor a queued order (sorted).
    pub missing_in_postgres: Vec<String>,
    /// Users with a Postgres order who are not in the buyer set (sorted).
    pub unknown_to_redis: Vec<String>,
    /// Orders the repair appended to the stream (0 for a check).
    pub reenqueued: usize,
    /// The repair wrote the missing `sales` row.
    pub sales_row_restored: bool,
    /// Redis had lost the sale: the repair seeded it again from its `sales` row, paused until
    /// the repair's last step.
    #[serde(default)]
    pub sale_restored: bool,
    /// Users of `unknown_to_redis` the repair put back into the buyer set (stock lowered to match).
    #[serde(default)]
    pub buyers_restored: u64,
    /// Released orders of the restored buyers that the repair put back into the released set:
    /// releases a lost sale's released set forgot, whose units its new stock never lost (they
    /// count against `releases_lost` as given back).
    #[serde(default)]
    pub releases_restored: u64,
    /// Restored buyers beyond the stock left: the stock stopped at 0 and the sale has sold more
    /// than its `stock_initial` (it was re-seeded with less stock than Postgres has orders).
    #[serde(default)]
    pub overdrawn: u64,
    /// Units the repair gave back for cancelled or expired orders Redis had not released (each
    /// at most once: `lua/release.lua`).
    #[serde(default)]
    pub units_released: u64,
    /// Stock balanced, `sales` row present with the same `stock_initial`, both lists empty, no
    /// release lost.
    pub consistent: bool,
}

impl ReconcileReport {
    /// Nothing is left to fix: the sale was consistent, or the repair re-enqueued every missing
    /// order, restored every buyer Redis lost without overdrawing the stock, restored the missing
    /// `sales` row, and nothing else differs.
    pub fn resolved(&self) -> bool {
        let row_ok = self.sales_row_restored || self.sales_row_stock == Some(self.stock_initial);
        self.stock_balanced
            && row_ok
            && self.buyers_restored == self.unknown_to_redis.len() as u64
            && self.overdrawn == 0
            && self.reenqueued == self.missing_in_postgres.len()
            && self.units_released + self.releases_restored >= self.releases_lost as u64
    }
}
