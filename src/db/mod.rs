//! Everything the service asks of Postgres: migrations, the sale record, and orders.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{Order, SaleId};

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

/// What one batch insert did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InsertReport {
    /// New rows written.
    pub inserted: usize,
    /// Entries whose order id was already stored (a redelivery): nothing to do.
    pub already_stored: usize,
    /// Entries refused because the user already has a *different* order in that sale.
    pub conflicts: Vec<Order>,
}

/// Inserts a batch of orders in one statement (idempotent: redeliveries are no-ops), then sorts
/// the entries that were not inserted into redeliveries and (sale, user) conflicts.
pub async fn insert_orders(pool: &PgPool, orders: &[Order]) -> Result<InsertReport, sqlx::Error> {
    if orders.is_empty() {
        return Ok(InsertReport::default());
    }
    let ids: Vec<Uuid> = orders.iter().map(|o| o.order_id).collect();
    let sales: Vec<&str> = orders.iter().map(|o| o.sale_id.as_str()).collect();
    let users: Vec<&str> = orders.iter().map(|o| o.user_id.as_str()).collect();
    let times: Vec<OffsetDateTime> = orders.iter().map(|o| ms_to_time(o.created_at_ms)).collect();

    let inserted: Vec<Uuid> = sqlx::query_scalar(
        "insert into orders (order_id, sale_id, user_id, created_at)
         select * from unnest($1::uuid[], $2::text[], $3::text[], $4::timestamptz[])
         on conflict do nothing
         returning order_id",
    )
    .bind(&ids)
    .bind(&sales)
    .bind(&users)
    .bind(&times)
    .fetch_all(pool)
    .await?;

    let inserted: HashSet<Uuid> = inserted.into_iter().collect();
    let missing: Vec<Uuid> = ids.iter().copied().filter(|id| !inserted.contains(id)).collect();
    if missing.is_empty() {
        return Ok(InsertReport { inserted: inserted.len(), ..Default::default() });
    }
    let stored: HashSet<Uuid> = sqlx::query_scalar("select order_id from orders where order_id = any($1)")
        .bind(&missing)
        .fetch_all(pool)
        .await?
        .into_iter()
        .collect();
    let conflicts =
        orders.iter().filter(|o| !inserted.contains(&o.order_id) && !stored.contains(&o.order_id)).cloned().collect();
    Ok(InsertReport { inserted: inserted.len(), already_stored: stored.len(), conflicts })
}

/// Records the sale's configuration (inside the admin seed's transaction).
pub async fn upsert_sale(
    tx: &mut sqlx::PgConnection,
    sale: &SaleId,
    stock: i64,
    starts_at: Option<OffsetDateTime>,
    ends_at: Option<OffsetDateTime>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at) values ($1, $2, $3, $4)
         on conflict (sale_id) do update
         set stock_initial = excluded.stock_initial, starts_at = excluded.starts_at,
             ends_at = excluded.ends_at, updated_at = now()",
    )
    .bind(sale.as_str())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
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
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at) values ($1, $2, $3, $4)
         on conflict (sale_id) do nothing",
    )
    .bind(sale.as_str())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
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

/// The users with an order in the sale (one each: `unique (sale_id, user_id)`).
pub async fn order_users(pool: &PgPool, sale: &SaleId) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("select user_id from orders where sale_id = $1").bind(sale.as_str()).fetch_all(pool).await
}

/// Orders committed for a sale.
pub async fn count_orders(pool: &PgPool, sale: &SaleId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from orders where sale_id = $1").bind(sale.as_str()).fetch_one(pool).await
}

/// Orders committed per sale, for the given sales (a sale without orders is absent).
pub async fn count_orders_by_sale(pool: &PgPool, sales: &[SaleId]) -> Result<HashMap<String, i64>, sqlx::Error> {
    let ids: Vec<&str> = sales.iter().map(SaleId::as_str).collect();
    let rows: Vec<(String, i64)> =
        sqlx::query_as("select sale_id, count(*) from orders where sale_id = any($1) group by sale_id")
            .bind(ids)
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().collect())
}

/// `select 1`, for readiness.
pub async fn ping(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("select 1").execute(pool).await.map(drop)
}

/// Unix milliseconds to a timestamp (clamped into the representable range).
pub fn ms_to_time(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}
