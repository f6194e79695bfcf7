//! A draw's rows in Postgres (migration `20261203100000_draws.sql`): the `draws` row, written in
//! the transaction of the drop's seed (its seed drawn once and kept), and the entries the worker
//! copies from the entry streams, each once.

use sqlx::{PgConnection, PgPool};
use time::OffsetDateTime;

use super::stream::StoredEntry;
use crate::domain::DropId;

/// A draw as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawRow {
    /// 64 hex digits, secret until revealed.
    pub seed: String,
    /// SHA-256 of the seed's hex digits, hex.
    pub commitment: String,
    pub opens_at: OffsetDateTime,
    pub closes_at: OffsetDateTime,
    pub waitlist_places: i64,
}

/// Creates the draw's row or updates its window and waitlist; a row that exists keeps its seed
/// and commitment. Answers the commitment the row keeps: another first seed of the drop, racing
/// this one, may have drawn the seed, and Redis must publish its commitment, not this call's.
pub async fn upsert(tx: &mut PgConnection, drop: &DropId, row: &DrawRow) -> Result<String, sqlx::Error> {
    sqlx::query_scalar(
        "insert into draws (drop_id, seed, commitment, opens_at, closes_at, waitlist_places)
         values ($1, $2, $3, $4, $5, $6)
         on conflict (drop_id) do update
         set opens_at = excluded.opens_at, closes_at = excluded.closes_at,
             waitlist_places = excluded.waitlist_places
         returning commitment",
    )
    .bind(drop.as_str())
    .bind(&row.seed)
    .bind(&row.commitment)
    .bind(row.opens_at)
    .bind(row.closes_at)
    .bind(row.waitlist_places.clamp(0, i64::from(i32::MAX)) as i32)
    .fetch_one(tx)
    .await
}

/// The draw's row, `None` if the drop has none.
pub async fn row(pool: &PgPool, drop: &DropId) -> Result<Option<DrawRow>, sqlx::Error> {
    let row: Option<(String, String, OffsetDateTime, OffsetDateTime, i32)> =
        sqlx::query_as("select seed, commitment, opens_at, closes_at, waitlist_places from draws where drop_id = $1")
            .bind(drop.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(seed, commitment, opens_at, closes_at, places)| DrawRow {
        seed,
        commitment,
        opens_at,
        closes_at,
        waitlist_places: i64::from(places),
    }))
}

/// Inserts the entries in one statement; one already stored (a redelivery) is skipped. Answers
/// how many were written.
pub async fn insert(pool: &PgPool, entries: &[StoredEntry]) -> Result<u64, sqlx::Error> {
    if entries.is_empty() {
        return Ok(0);
    }
    let drops: Vec<&str> = entries.iter().map(|e| e.drop.as_str()).collect();
    let users: Vec<&str> = entries.iter().map(|e| e.user.as_str()).collect();
    let sizes: Vec<String> = entries.iter().map(|e| e.sizes.join(",")).collect();
    let quantities: Vec<i32> = entries.iter().map(|e| e.quantity as i32).collect();
    let times: Vec<i64> = entries.iter().map(|e| e.entered_at_ms).collect();
    let done = sqlx::query(
        "insert into draw_entries (drop_id, user_id, sizes, quantity, entered_at)
         select d, u, string_to_array(s, ','), q, to_timestamp(ms / 1000.0)
         from unnest($1::text[], $2::text[], $3::text[], $4::int4[], $5::int8[]) as t(d, u, s, q, ms)
         on conflict (drop_id, user_id) do nothing",
    )
    .bind(&drops)
    .bind(&users)
    .bind(&sizes)
    .bind(&quantities)
    .bind(&times)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The draw's entries stored so far.
pub async fn count(pool: &PgPool, drop: &DropId) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("select count(*) from draw_entries where drop_id = $1").bind(drop.as_str()).fetch_one(pool).await
}
