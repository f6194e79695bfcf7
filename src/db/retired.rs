//! Retired sales: the `sales.retired_at` mark (`crate::retire` sets it before it removes the
//! sale's Redis keys; Postgres keeps the row and the orders).

use std::time::Duration;

use sqlx::PgPool;
use time::OffsetDateTime;

/// Whether the sale's row is marked retired: `None` if the sale has no row.
pub async fn sale_retired(pool: &PgPool, sale: &str) -> Result<Option<bool>, sqlx::Error> {
    sqlx::query_scalar("select retired_at is not null from sales where sale_id = $1")
        .bind(sale)
        .fetch_optional(pool)
        .await
}

/// Which of `sales` have a row, each with whether it is marked retired (one query for many ids:
/// `crate::purchase::retired` asks for a batch of the ids Redis does not know at once).
pub async fn rows_among(pool: &PgPool, sales: &[&str]) -> Result<Vec<(String, bool)>, sqlx::Error> {
    sqlx::query_as("select sale_id, retired_at is not null from sales where sale_id = any($1)")
        .bind(sales)
        .fetch_all(pool)
        .await
}

/// Inside the admin seed's transaction: locks the sale's row (if any) until the transaction
/// ends and says whether it is retired, so a seed and a retirement of one sale never interleave.
pub async fn lock_retired(tx: &mut sqlx::PgConnection, sale: &str) -> Result<bool, sqlx::Error> {
    let retired: Option<bool> =
        sqlx::query_scalar("select retired_at is not null from sales where sale_id = $1 for update")
            .bind(sale)
            .fetch_optional(tx)
            .await?;
    Ok(retired == Some(true))
}

/// Marks the sale retired now; false if it has no row or is already retired.
pub async fn mark_retired(pool: &PgPool, sale: &str) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("update sales set retired_at = now() where sale_id = $1 and retired_at is null")
        .bind(sale)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// The sales marked retired between `from` and `to` ago (the janitor's look for retirements that
/// stopped half-way).
pub async fn retired_between(pool: &PgPool, from: Duration, to: Duration) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "select sale_id from sales
         where retired_at between now() - make_interval(secs => $1) and now() - make_interval(secs => $2)
         order by retired_at",
    )
    .bind(from.as_secs_f64())
    .bind(to.as_secs_f64())
    .fetch_all(pool)
    .await
}

/// Takes the mark back (a retirement that found the sale busy after marking it).
pub async fn unmark_retired(pool: &PgPool, sale: &str) -> Result<(), sqlx::Error> {
    sqlx::query("update sales set retired_at = null where sale_id = $1").bind(sale).execute(pool).await.map(drop)
}

/// When the sale was last seeded (its row's last change), `None` if it has no row: the janitor
/// never retires a sale sooner than its grace after that.
pub async fn last_seeded(pool: &PgPool, sale: &str) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    sqlx::query_scalar("select updated_at from sales where sale_id = $1").bind(sale).fetch_optional(pool).await
}

/// The sale's last activity, for the janitor's grace period: its last order, else the last
/// change of its row (a sale sold out at stock 0). `None` if it has neither.
pub async fn last_activity(pool: &PgPool, sale: &str) -> Result<Option<OffsetDateTime>, sqlx::Error> {
    sqlx::query_scalar(
        "select coalesce((select max(created_at) from orders where sale_id = $1),
                         (select updated_at from sales where sale_id = $1))",
    )
    .bind(sale)
    .fetch_one(pool)
    .await
}
