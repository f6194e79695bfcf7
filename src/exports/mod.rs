//! Orders out: the orders of a sale, or of a drop's sales (`<drop>.<size>`), as CSV or
//! newline-delimited JSON, streamed from Postgres a page at a time (`pages`, keyset on the orders'
//! key `(sale_id, user_id)`), so memory stays bounded whatever the count and no connection waits
//! on a slow reader; each line formatted by `format`.

mod format;
mod pages;

pub use self::format::{CSV_HEADER, Format};
pub use self::pages::{PAGE_ROWS, drop_sales, stream};

/// The statuses an order may have, the export's filter's values.
pub const STATUSES: [&str; 6] = ["confirmed", "reserved", "paid", "cancelled", "expired", "refunded"];

/// Most exports one instance streams at once (each reads a page at a time; more answer 429).
pub const MAX_CONCURRENT: usize = 4;

/// One order as the export writes it (the `orders` row).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow, serde::Serialize)]
pub struct OrderLine {
    pub order_id: uuid::Uuid,
    pub sale_id: String,
    pub user_id: String,
    pub quantity: i32,
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub persisted_at: time::OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub pay_by: Option<time::OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub resolved_at: Option<time::OffsetDateTime>,
    pub resolved_by: Option<String>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub restocked_at: Option<time::OffsetDateTime>,
}

#[cfg(test)]
mod tests;
