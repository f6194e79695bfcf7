//! The `sales` table: each sale's configuration, as the admin seeded it.

use sqlx::PgPool;
use time::OffsetDateTime;

use crate::domain::SaleId;

/// Records the sale's configuration (inside the admin seed's transaction).
pub async fn upsert_sale(
    tx: &mut sqlx::PgConnection,
    sale: &SaleId,
    stock: i64,
    starts_at: Option<OffsetDateTime>,
    ends_at: Option<OffsetDateTime>,
    payment_window_ms: Option<i64>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at, payment_window_ms) values ($1, $2, $3, $4, $5)
         on conflict (sale_id) do update
         set stock_initial = excluded.stock_initial, starts_at = excluded.starts_at,
             ends_at = excluded.ends_at, payment_window_ms = excluded.payment_window_ms, updated_at = now()",
    )
    .bind(sale.as_str())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
    .bind(payment_window_ms)
    .execute(tx)
    .await
    .map(drop)
}

/// Records the sale only if it has no row yet (an existing row is never overwritten); true if
/// this call wrote it.
pub async fn insert_sale_if_missing(
    pool: &PgPool,
    sale: &SaleId,
    stock: i64,
    starts_at: Option<OffsetDateTime>,
    ends_at: Option<OffsetDateTime>,
    payment_window_ms: Option<i64>,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at, payment_window_ms) values ($1, $2, $3, $4, $5)
         on conflict (sale_id) do nothing",
    )
    .bind(sale.as_str())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
    .bind(payment_window_ms)
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// `stock_initial` of the sale's row, `None` if the sale has no row.
pub async fn sales_row_stock(pool: &PgPool, sale: &SaleId) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("select stock_initial from sales where sale_id = $1")
        .bind(sale.as_str())
        .fetch_optional(pool)
        .await
}

/// A sale's record, as the admin last seeded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct SaleRow {
    pub stock_initial: i64,
    pub starts_at: Option<OffsetDateTime>,
    pub ends_at: Option<OffsetDateTime>,
    /// Milliseconds a reservation has to be paid; `None`: orders are final at once.
    pub payment_window_ms: Option<i64>,
}

/// The sale's `sales` row, if it has one.
pub async fn sale_row(pool: &PgPool, sale: &SaleId) -> Result<Option<SaleRow>, sqlx::Error> {
    sqlx::query_as("select stock_initial, starts_at, ends_at, payment_window_ms from sales where sale_id = $1")
        .bind(sale.as_str())
        .fetch_optional(pool)
        .await
}
