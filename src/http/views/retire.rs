//! Why a sale cannot be retired ([`Refusal`]) and what a retirement removed ([`RetireReport`]).

use serde::Serialize;
use utoipa::ToSchema;

use crate::shop::lower::retire;

/// Why a sale cannot be retired (several may apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Not ended and not sold out: it can still sell.
    Open,
    /// Orders are still queued in its streams (not yet in Postgres).
    Queued,
    /// Its consumer group has orders read but not yet acknowledged.
    Pending,
    /// `stock_initial != stock_left + sold - released` in Redis.
    StockUnbalanced,
    /// Reservations are still open (not yet paid, cancelled or expired), or a released unit is
    /// not yet back in the stock: the sale's stock can still change.
    Reserved,
    /// Buyers with no order in Postgres nor queued (reconcile --repair re-enqueues them).
    MissingInPostgres,
    /// Postgres orders of users Redis does not know (reconcile --repair restores them).
    UnknownToRedis,
    /// No `sales` row in Postgres, or one with another `stock_initial`.
    SalesRow,
    /// A size of a drop in draw mode whose draw has not been drawn: its awards need the size
    /// (retired, it could never be awarded, and the draw would fail at every run).
    DrawPending,
}

impl From<retire::Refusal> for Refusal {
    fn from(refusal: retire::Refusal) -> Self {
        use retire::Refusal as Lower;
        match refusal {
            Lower::Open => Self::Open,
            Lower::Queued => Self::Queued,
            Lower::Pending => Self::Pending,
            Lower::StockUnbalanced => Self::StockUnbalanced,
            Lower::Reserved => Self::Reserved,
            Lower::MissingInPostgres => Self::MissingInPostgres,
            Lower::UnknownToRedis => Self::UnknownToRedis,
            Lower::SalesRow => Self::SalesRow,
            Lower::DrawPending => Self::DrawPending,
        }
    }
}

/// What a retirement removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct RetireReport {
    pub sale_id: String,
    /// Shards the sale had (1: unsharded).
    pub shards: u32,
    pub stock_initial: i64,
    /// Buyers in Redis before the removal (as many orders as Postgres keeps).
    pub sold: i64,
    /// Orders of the sale in Postgres (kept).
    pub persisted: i64,
    /// Members removed from the buyer sets.
    pub buyers_removed: u64,
    /// Receipts removed.
    pub receipts_removed: u64,
    /// Redis keys removed.
    pub keys_removed: u64,
    /// How long the retirement waited for the workers to stop reading the sale's streams.
    pub grace_ms: u64,
}

moved_from!(retire::RetireReport => RetireReport {
    sale_id, shards, stock_initial, sold, persisted, buyers_removed, receipts_removed, keys_removed, grace_ms,
});
