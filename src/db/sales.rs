//! The `sales` table: each sale's configuration, as the admin seeded it.

use sqlx::PgPool;
use time::OffsetDateTime;

use crate::domain::{QueueSpec, SaleId};

/// Records the sale's configuration (inside the admin seed's transaction). A queued sale's
/// shuffle seed, once recorded, is kept (as Redis keeps it): the answer is the seed the row keeps,
/// for the seed to give Redis, so that the two keep the same one.
pub async fn upsert_sale(
    tx: &mut sqlx::PgConnection,
    sale: &SaleId,
    row: &SaleRow,
) -> Result<Option<[u8; 32]>, sqlx::Error> {
    let queue = row.queue.as_ref();
    let kept: Option<Vec<u8>> = sqlx::query_scalar(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at, payment_window_ms,
                            queue_opens_at, queue_rate, queue_ttl_ms, queue_seed, per_buyer, challenge_cost)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, nullif($10, 1), $11)
         on conflict (sale_id) do update
         set stock_initial = excluded.stock_initial, starts_at = excluded.starts_at,
             ends_at = excluded.ends_at, payment_window_ms = excluded.payment_window_ms,
             queue_opens_at = excluded.queue_opens_at, queue_rate = excluded.queue_rate,
             queue_ttl_ms = excluded.queue_ttl_ms, queue_seed = coalesce(sales.queue_seed, excluded.queue_seed),
             per_buyer = excluded.per_buyer, challenge_cost = excluded.challenge_cost, updated_at = now()
         returning queue_seed",
    )
    .bind(sale.as_str())
    .bind(row.stock_initial)
    .bind(row.starts_at)
    .bind(row.ends_at)
    .bind(row.payment_window_ms)
    .bind(queue.map(|q| crate::db::ms_to_time(q.opens_at_ms)))
    .bind(queue.map(|q| q.rate as i32))
    .bind(queue.map(|q| q.ttl_ms))
    .bind(queue.map(|q| q.seed.to_vec()))
    .bind(row.per_buyer as i32)
    .bind(row.challenge_cost.map(|cost| cost as i32))
    .fetch_one(tx)
    .await?;
    Ok(kept.and_then(|seed| <[u8; 32]>::try_from(seed).ok()))
}

/// Writes the end a sale took in Redis (`crate::controls`' end: Redis time) into its row, with its
/// start moved before it if it was not (the table's check): a sale Redis then loses is seeded
/// again ended by reconciliation's repair, not open. Nothing for a sale without a row.
pub async fn set_ended(tx: &mut sqlx::PgConnection, sale: &SaleId, ends_at: OffsetDateTime) -> Result<(), sqlx::Error> {
    sqlx::query(
        "update sales set ends_at = $2, updated_at = now(),
             starts_at = case when starts_at >= $2 then $2 - interval '1 millisecond' else starts_at end
         where sale_id = $1",
    )
    .bind(sale.as_str())
    .bind(ends_at)
    .execute(tx)
    .await
    .map(drop)
}

/// Records `seed` as the queued sale's shuffle seed (inside the seed's transaction): the one Redis
/// keeps, when it kept another than the row's. A seed whose transaction rolled back after its
/// Redis call (the audit's insert or the commit failed) left Redis a seed no row got; the seed
/// sent again drew a new one for the row, and the two would have differed for good.
pub async fn set_queue_seed(tx: &mut sqlx::PgConnection, sale: &SaleId, seed: &[u8; 32]) -> Result<(), sqlx::Error> {
    sqlx::query("update sales set queue_seed = $2 where sale_id = $1")
        .bind(sale.as_str())
        .bind(seed.to_vec())
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
    per_buyer: u32,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "insert into sales (sale_id, stock_initial, starts_at, ends_at, payment_window_ms, per_buyer)
         values ($1, $2, $3, $4, $5, nullif($6, 1))
         on conflict (sale_id) do nothing",
    )
    .bind(sale.as_str())
    .bind(stock)
    .bind(starts_at)
    .bind(ends_at)
    .bind(payment_window_ms)
    .bind(per_buyer as i32)
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

/// A sale's record, as the admin last seeded it (and as a seed writes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleRow {
    pub stock_initial: i64,
    pub starts_at: Option<OffsetDateTime>,
    pub ends_at: Option<OffsetDateTime>,
    /// Milliseconds a reservation has to be paid; `None`: orders are final at once.
    pub payment_window_ms: Option<i64>,
    /// A queued sale's waiting room.
    pub queue: Option<QueueSpec>,
    /// Units one buyer may buy (in the sale or across its group).
    pub per_buyer: u32,
    /// The proof of work's tries on average (`crate::challenge`); `None`: none.
    pub challenge_cost: Option<u32>,
}

/// The sale's `sales` row, if it has one.
pub async fn sale_row(pool: &PgPool, sale: &SaleId) -> Result<Option<SaleRow>, sqlx::Error> {
    type Row = (
        i64,
        Option<OffsetDateTime>,
        Option<OffsetDateTime>,
        Option<i64>,
        Option<OffsetDateTime>,
        Option<i32>,
        Option<i64>,
        Option<Vec<u8>>,
        Option<i32>,
        Option<i32>,
    );
    let row: Option<Row> = sqlx::query_as(
        "select stock_initial, starts_at, ends_at, payment_window_ms, queue_opens_at, queue_rate, queue_ttl_ms, \
            queue_seed, per_buyer, challenge_cost
         from sales where sale_id = $1",
    )
    .bind(sale.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(
        |(stock_initial, starts_at, ends_at, payment_window_ms, opens_at, rate, ttl_ms, seed, per_buyer, cost)| {
            let queue = match (opens_at, rate, ttl_ms, seed.and_then(|s| <[u8; 32]>::try_from(s).ok())) {
                (Some(opens_at), Some(rate), Some(ttl_ms), Some(seed)) => Some(QueueSpec {
                    opens_at_ms: (opens_at.unix_timestamp_nanos() / 1_000_000) as i64,
                    rate: rate.max(1) as u32,
                    ttl_ms,
                    seed,
                }),
                _ => None,
            };
            let per_buyer = per_buyer.map_or(1, |n| n.max(1) as u32);
            let challenge_cost = cost.and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0);
            SaleRow { stock_initial, starts_at, ends_at, payment_window_ms, queue, per_buyer, challenge_cost }
        },
    ))
}
