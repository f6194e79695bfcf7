//! Everything the service asks of Postgres: the pool and the migrations (here), orders
//! (`orders`), the sale records (`sales`) and their retirement mark (`retired`).

mod orders;
mod retired;
mod sales;

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use time::OffsetDateTime;

pub use orders::{
    InsertReport, count_orders, count_orders_by_sale, insert_orders, order_of, order_users, orders_of_users,
};
pub use retired::{last_activity, lock_retired, mark_retired, sale_retired, unmark_retired};
pub use sales::{SaleRow, insert_sale_if_missing, sale_row, sales_row_stock, upsert_sale};

/// The migrations in `migrations/`, compiled into the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// A lazily connected pool: the process starts even while Postgres is down, and each call fails
/// after `acquire_timeout` instead of hanging.
pub fn connect_lazy(url: &SecretString, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy(url.expose_secret())
}

/// Applies pending migrations.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// `select 1`, for readiness.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("select 1").execute(pool).await.map(drop)
}

/// Unix milliseconds to a timestamp (clamped into the representable range).
pub fn ms_to_time(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
