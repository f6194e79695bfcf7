//! A drop's row in Postgres (`drops`, migration `20261202100000_drops.sql`): its own settings,
//! written in the transaction of its seed; its sizes' `sales` rows stay the unit of record.

use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::domain::{DropId, QueueSpec, ms_to_time};

/// A drop's settings as its row keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropRow {
    pub per_buyer: u32,
    pub starts_at: Option<OffsetDateTime>,
    pub ends_at: Option<OffsetDateTime>,
    pub payment_window_ms: Option<i64>,
    /// The line whole: when it opens, buyers admitted per second, the admission window and the
    /// shuffle seed (kept while the drop keeps a line, as Redis keeps it).
    pub line: Option<QueueSpec>,
    pub challenge_cost: Option<u32>,
}

/// Creates or updates the drop's row. The line's shuffle seed, once recorded, is kept, with the
/// line or without it (as Redis keeps it in the line's state): the answer is the seed the row
/// keeps, for the seed to give Redis, so that the two keep the same one.
pub async fn upsert(tx: &mut PgConnection, drop: &DropId, row: &DropRow) -> Result<Option<[u8; 32]>, sqlx::Error> {
    let kept: Option<Vec<u8>> = sqlx::query_scalar(
        "insert into drops (drop_id, per_buyer, starts_at, ends_at, payment_window_ms, line_opens_at, line_rate,
                            challenge_cost, line_ttl_ms, line_seed)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         on conflict (drop_id) do update
         set per_buyer = excluded.per_buyer, starts_at = excluded.starts_at, ends_at = excluded.ends_at,
             payment_window_ms = excluded.payment_window_ms, line_opens_at = excluded.line_opens_at,
             line_rate = excluded.line_rate, challenge_cost = excluded.challenge_cost,
             line_ttl_ms = excluded.line_ttl_ms, line_seed = coalesce(drops.line_seed, excluded.line_seed),
             updated_at = now()
         returning line_seed",
    )
    .bind(drop.as_str())
    .bind(row.per_buyer as i32)
    .bind(row.starts_at)
    .bind(row.ends_at)
    .bind(row.payment_window_ms)
    .bind(row.line.map(|line| ms_to_time(line.opens_at_ms)))
    .bind(row.line.map(|line| line.rate as i32))
    .bind(row.challenge_cost.map(|c| c as i32))
    .bind(row.line.map(|line| line.ttl_ms))
    .bind(row.line.map(|line| line.seed.to_vec()))
    .fetch_one(tx)
    .await?;
    Ok(kept.and_then(|seed| <[u8; 32]>::try_from(seed).ok()))
}

/// Records `seed` as the drop's line's shuffle seed (inside the seed's transaction): the one
/// Redis keeps, when it kept another than the row's (as `crate::db::set_queue_seed` for a sale).
pub async fn set_line_seed(tx: &mut PgConnection, drop: &DropId, seed: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query("update drops set line_seed = $2 where drop_id = $1")
        .bind(drop.as_str())
        .bind(seed.to_vec())
        .execute(tx)
        .await
        .map(|_| ())
}

/// Locks the drop's row to the transaction's end (nothing if it has none yet). A drop's seed and
/// its switches take it first, before any size's row and before their Redis call, so one drop's
/// seeds and switches run one after another, in Redis and in Postgres alike, and never wait on
/// each other in a circle.
pub async fn lock(tx: &mut PgConnection, drop: &DropId) -> Result<(), sqlx::Error> {
    sqlx::query("select 1 from drops where drop_id = $1 for update").bind(drop.as_str()).execute(tx).await.map(|_| ())
}

/// Moves the drop's end (and its sizes' rows) to `at` unless they end earlier; a start at or after
/// the end moves to 1 ms before it, as `lua/drop_control.lua` does in Redis. The caller holds the
/// drop's row ([`lock`]); the sizes' rows are locked in id order, as a stock change locks them.
pub async fn end(tx: &mut PgConnection, drop: &DropId, sizes: &[&str], at: OffsetDateTime) -> Result<(), sqlx::Error> {
    sqlx::query("select 1 from sales where sale_id = any($1) order by sale_id collate \"C\" for update")
        .bind(sizes)
        .execute(&mut *tx)
        .await?;
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

/// The drop's row, `None` if Postgres has none.
pub async fn row(pool: &sqlx::PgPool, drop: &DropId) -> Result<Option<DropRow>, sqlx::Error> {
    type Row = (
        i32,
        Option<OffsetDateTime>,
        Option<OffsetDateTime>,
        Option<i64>,
        Option<OffsetDateTime>,
        Option<i32>,
        Option<i32>,
        Option<i64>,
        Option<Vec<u8>>,
    );
    let row: Option<Row> = sqlx::query_as(
        "select per_buyer, starts_at, ends_at, payment_window_ms, line_opens_at, line_rate, challenge_cost,
                line_ttl_ms, line_seed
         from drops where drop_id = $1",
    )
    .bind(drop.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(per_buyer, starts_at, ends_at, payment_window_ms, opens_at, rate, cost, ttl_ms, seed)| {
        // The table's check keeps the line's four columns all set or all null.
        let seed = seed.and_then(|s| <[u8; 32]>::try_from(s).ok());
        let line = match (opens_at, rate, ttl_ms, seed) {
            (Some(opens_at), Some(rate), Some(ttl_ms), Some(seed)) => Some(QueueSpec {
                opens_at_ms: (opens_at.unix_timestamp_nanos() / 1_000_000) as i64,
                rate: rate.max(1) as u32,
                ttl_ms,
                seed,
            }),
            _ => None,
        };
        DropRow {
            per_buyer: per_buyer.max(1) as u32,
            starts_at,
            ends_at,
            payment_window_ms,
            line,
            challenge_cost: cost.and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0),
        }
    }))
}

/// The stock the drop's sizes were seeded with, all sizes together, as their `sales` rows hold it.
pub async fn stock(pool: &sqlx::PgPool, drop: &DropId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "select coalesce(sum(stock_initial), 0)::bigint from sales where left(sale_id, length($1) + 1) = $1 || '.'",
    )
    .bind(drop.as_str())
    .fetch_one(pool)
    .await
}
