//! A drop's row in Postgres (`drops`, migration `20261202100000_drops.sql`): its own settings,
//! written in the transaction of its seed; its sizes' `sales` rows stay the unit of record.

use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::domain::DropId;

/// A drop's settings as its row keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropRow {
    pub per_buyer: u32,
    pub starts_at: Option<OffsetDateTime>,
    pub ends_at: Option<OffsetDateTime>,
    pub payment_window_ms: Option<i64>,
    /// The line: when it opens and buyers admitted per second.
    pub line: Option<(OffsetDateTime, u32)>,
    pub challenge_cost: Option<u32>,
}

/// Creates or updates the drop's row.
pub async fn upsert(tx: &mut PgConnection, drop: &DropId, row: &DropRow) -> Result<(), sqlx::Error> {
    sqlx::query(
        "insert into drops (drop_id, per_buyer, starts_at, ends_at, payment_window_ms, line_opens_at, line_rate,
                            challenge_cost)
         values ($1, $2, $3, $4, $5, $6, $7, $8)
         on conflict (drop_id) do update
         set per_buyer = excluded.per_buyer, starts_at = excluded.starts_at, ends_at = excluded.ends_at,
             payment_window_ms = excluded.payment_window_ms, line_opens_at = excluded.line_opens_at,
             line_rate = excluded.line_rate, challenge_cost = excluded.challenge_cost, updated_at = now()",
    )
    .bind(drop.as_str())
    .bind(row.per_buyer as i32)
    .bind(row.starts_at)
    .bind(row.ends_at)
    .bind(row.payment_window_ms)
    .bind(row.line.map(|(opens_at, _)| opens_at))
    .bind(row.line.map(|(_, rate)| rate as i32))
    .bind(row.challenge_cost.map(|c| c as i32))
    .execute(tx)
    .await
    .map(|_| ())
}

/// Moves the drop's end (and its sizes' rows) to `at` unless they end earlier; a start at or after
/// the end moves to 1 ms before it, as `lua/drop_control.lua` does in Redis.
pub async fn end(tx: &mut PgConnection, drop: &DropId, sizes: &[&str], at: OffsetDateTime) -> Result<(), sqlx::Error> {
    for table in [("drops", "drop_id"), ("sales", "sale_id")] {
        let sql = format!(
            "update {0} set ends_at = least(coalesce(ends_at, $2), $2), updated_at = now(),
                 starts_at = case when starts_at >= least(coalesce(ends_at, $2), $2)
                                  then least(coalesce(ends_at, $2), $2) - interval '1 millisecond' else starts_at end
             where {1} = any($1)",
            table.0, table.1
        );
        let ids: Vec<&str> = if table.0 == "drops" { vec![drop.as_str()] } else { sizes.to_vec() };
        sqlx::query(&sql).bind(&ids).bind(at).execute(&mut *tx).await?;
    }
    Ok(())
}

/// Whether Postgres holds a row of the drop.
pub async fn exists(pool: &sqlx::PgPool, drop: &DropId) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from drops where drop_id = $1)")
        .bind(drop.as_str())
        .fetch_one(pool)
        .await
}
