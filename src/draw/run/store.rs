//! The run's Postgres side: the draw's row and state, the one run at a time (an advisory lock),
//! the terms and entries it ranks, and its results (`draw_results`, written once in one
//! transaction).

use std::collections::BTreeMap;

use sqlx::pool::PoolConnection;
use sqlx::{PgPool, Postgres};
use uuid::Uuid;

use crate::db;
use crate::domain::{DropId, UserId};
use crate::draw::offers::Place;
use crate::draw::{Entry, Outcome, Terms};

/// A draw's row as the run reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Draw {
    /// 64 hex digits.
    pub seed: String,
    pub commitment: String,
    /// `open`, `drawing` or `drawn`.
    pub state: String,
    pub waitlist_places: u32,
}

/// One entrant's result, as `draw_results` keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Result {
    pub user: UserId,
    /// The pseudonym ([`crate::draw::entrant`]).
    pub entrant: String,
    pub outcome: Outcome,
    /// Units of the entry (won: the units awarded).
    pub quantity: u32,
    /// The winner's order id.
    pub order_id: Option<Uuid>,
}

/// The lock that keeps a drop's draw to one run at a time, over every instance: a session
/// advisory lock held on a connection of its own until [`Lock::release`]. Dropped unreleased (a run
/// cancelled midway), its connection is closed, not returned to the pool, which unlocks too.
pub struct Lock(Option<PoolConnection<Postgres>>, DropId);

/// The advisory lock's key of a drop's draw.
const LOCK_KEY: &str = "hashtextextended('seckill draw ' || $1, 0)";

impl Lock {
    /// Waits for the drop's lock (another run of the same draw holds it until it ends).
    pub async fn take(pool: &PgPool, drop: &DropId) -> std::result::Result<Self, sqlx::Error> {
        let mut conn = pool.acquire().await?;
        sqlx::query(&format!("select pg_advisory_lock({LOCK_KEY})")).bind(drop.as_str()).execute(&mut *conn).await?;
        Ok(Self(Some(conn), drop.clone()))
    }

    /// Lets the next run in; a connection that cannot unlock is closed (which unlocks).
    pub async fn release(mut self) {
        let Some(mut conn) = self.0.take() else { return };
        let unlocked = sqlx::query(&format!("select pg_advisory_unlock({LOCK_KEY})"))
            .bind(self.1.as_str())
            .execute(&mut *conn)
            .await;
        if unlocked.is_err() {
            drop(conn.detach());
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

/// The drop's draw, `None` when it has none.
pub async fn draw(pool: &PgPool, drop: &DropId) -> std::result::Result<Option<Draw>, sqlx::Error> {
    let row: Option<(String, String, String, i32)> =
        sqlx::query_as("select seed, commitment, state, waitlist_places from draws where drop_id = $1")
            .bind(drop.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(seed, commitment, state, places)| Draw {
        seed,
        commitment,
        state,
        waitlist_places: u32::try_from(places).unwrap_or(0),
    }))
}

/// Moves the draw's state on: `drawing` from `open`, `drawn` (with `revealed_at`) from either.
pub async fn set_state(pool: &PgPool, drop: &DropId, state: &str) -> std::result::Result<(), sqlx::Error> {
    sqlx::query(
        "update draws set state = $2, revealed_at = case when $2 = 'drawn' then now() else revealed_at end
         where drop_id = $1 and state <> 'drawn' and state <> $2",
    )
    .bind(drop.as_str())
    .bind(state)
    .execute(pool)
    .await
    .map(|_| ())
}

/// The draw's terms: each size's `stock_initial` (the `sales` rows of `<drop>.<size>`), the
/// drop's per-buyer limit and the waitlist's places.
pub async fn terms(pool: &PgPool, drop: &DropId, waitlist_places: u32) -> std::result::Result<Terms, sqlx::Error> {
    let sizes: Vec<(String, i64)> = sqlx::query_as(
        "select substr(sale_id, length($1) + 2), stock_initial from sales
         where left(sale_id, length($1) + 1) = $1 || '.'",
    )
    .bind(drop.as_str())
    .fetch_all(pool)
    .await?;
    let limit: Option<i32> = sqlx::query_scalar("select per_buyer from drops where drop_id = $1")
        .bind(drop.as_str())
        .fetch_optional(pool)
        .await?;
    let stock: BTreeMap<String, u32> =
        sizes.into_iter().map(|(size, units)| (size, u32::try_from(units).unwrap_or(u32::MAX))).collect();
    Ok(Terms { stock, limit: limit.map_or(1, |l| u32::try_from(l).unwrap_or(1)), waitlist_places })
}

/// An entry as stored: the buyer's id, the ranked sizes, the quantity.
pub type EntryRow = (String, Vec<String>, i32);

/// Every entry of the draw as stored, in user id order; [`entry_of`] makes each an [`Entry`] (the
/// run does so on a blocking thread: a pseudonym is a SHA-256).
pub async fn entry_rows(pool: &PgPool, drop: &DropId) -> std::result::Result<Vec<EntryRow>, sqlx::Error> {
    page(pool, "select user_id, sizes, quantity from draw_entries", drop, (None, i64::MAX)).await
}

/// The stored entry `row` of the drop's draw, with its buyer's id.
pub fn entry_of(drop: &DropId, (user, sizes, quantity): EntryRow) -> std::result::Result<(UserId, Entry), sqlx::Error> {
    let id = UserId::stored(&user).map_err(|why| sqlx::Error::Decode(why.into()))?;
    let entry = Entry { entrant: crate::draw::entrant(drop, &id), sizes, quantity: quantity.max(0) as u32 };
    Ok((id, entry))
}

/// At most `rows` entries of the draw after the user id `after`, in user id order, with their
/// buyers' ids.
pub async fn entries_page(
    pool: &PgPool,
    drop: &DropId,
    after: Option<&str>,
    rows: i64,
) -> std::result::Result<Vec<(String, Entry)>, sqlx::Error> {
    let rows: Vec<EntryRow> =
        page(pool, "select user_id, sizes, quantity from draw_entries", drop, (after, rows)).await?;
    rows.into_iter().map(|row| entry_of(drop, row).map(|(id, entry)| (id.to_string(), entry))).collect()
}

/// The draw's results, in user id order (none before the draw).
pub async fn results(pool: &PgPool, drop: &DropId) -> std::result::Result<Vec<Result>, sqlx::Error> {
    results_page(pool, drop, None, i64::MAX).await
}

/// At most `rows` results of the draw after the user id `after`, in user id order.
pub async fn results_page(
    pool: &PgPool,
    drop: &DropId,
    after: Option<&str>,
    rows: i64,
) -> std::result::Result<Vec<Result>, sqlx::Error> {
    let select = "select user_id, entrant, outcome, size, quantity, position, order_id from draw_results";
    let rows: Vec<ResultRow> = page(pool, select, drop, (after, rows)).await?;
    Ok(rows.into_iter().filter_map(result_of).collect())
}

/// `select` (columns of a table keyed by drop and user) of the drop's rows after the user id
/// `after`, at most `rows` of them, in user id order.
async fn page<O>(
    pool: &PgPool,
    select: &str,
    drop: &DropId,
    (after, rows): (Option<&str>, i64),
) -> std::result::Result<Vec<O>, sqlx::Error>
where
    O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let sql = format!("{select} where drop_id = $1 and ($2::text is null or user_id > $2) order by user_id limit $3");
    sqlx::query_as(&sql).bind(drop.as_str()).bind(after).bind(rows).fetch_all(pool).await
}

/// One buyer's result, `None` before the draw (or without an entry).
pub async fn result(pool: &PgPool, drop: &DropId, user: &UserId) -> std::result::Result<Option<Result>, sqlx::Error> {
    let row = sqlx::query_as(
        "select user_id, entrant, outcome, size, quantity, position, order_id from draw_results
         where drop_id = $1 and user_id = $2",
    )
    .bind(drop.as_str())
    .bind(user.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.and_then(result_of))
}

type ResultRow = (String, String, String, Option<String>, i32, Option<i32>, Option<Uuid>);

fn result_of((user, entrant, outcome, size, quantity, position, order_id): ResultRow) -> Option<Result> {
    let quantity = u32::try_from(quantity).ok()?;
    let outcome = match (outcome.as_str(), size, position) {
        ("won", Some(size), _) => Outcome::Won { size, quantity },
        ("waitlisted", _, Some(position)) => Outcome::Waitlisted { position: u32::try_from(position).ok()? },
        _ => Outcome::Lost,
    };
    Some(Result { user: UserId::stored(&user).ok()?, entrant, outcome, quantity, order_id })
}

/// Results written per statement: each statement stays well inside the statement timeout
/// (`SECKILL_DATABASE_STATEMENT_TIMEOUT`, 10 s by default; one statement of 208,000 results took
/// 6.2 s on a loaded 2-core host, and 10.1 s, cancelled, at 227,000).
const RESULTS_PER_STATEMENT: usize = 10_000;

/// Writes every result in one transaction, [`RESULTS_PER_STATEMENT`] at a time (arrays unnested),
/// with each lost entrant's `draw.lost` (once: its dedup key); a drop that has results already
/// keeps them. Answers how many rows it wrote (fewer than `results`: the caller reads them back).
pub async fn insert(pool: &PgPool, drop: &DropId, results: &[Result]) -> std::result::Result<usize, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let mut written = 0;
    for page in results.chunks(RESULTS_PER_STATEMENT) {
        written += insert_page(&mut tx, drop, page).await?;
    }
    tx.commit().await?;
    Ok(written)
}

/// One statement of [`insert`], then the `draw.lost` of the page's lost entrants; answers the
/// results written.
async fn insert_page(
    tx: &mut sqlx::Transaction<'_, Postgres>,
    drop: &DropId,
    results: &[Result],
) -> std::result::Result<usize, sqlx::Error> {
    let users: Vec<&str> = results.iter().map(|r| r.user.as_str()).collect();
    let entrants: Vec<&str> = results.iter().map(|r| r.entrant.as_str()).collect();
    let (mut outcomes, mut sizes, mut positions) = (vec![], vec![], vec![]);
    for result in results {
        let (outcome, size, position) = match &result.outcome {
            Outcome::Won { size, .. } => ("won", Some(size.as_str()), None),
            Outcome::Waitlisted { position } => {
                ("waitlisted", None, Some(i32::try_from(*position).unwrap_or(i32::MAX)))
            }
            Outcome::Lost => ("lost", None, None),
        };
        outcomes.push(outcome);
        sizes.push(size);
        positions.push(position);
    }
    let quantities: Vec<i32> = results.iter().map(|r| i32::try_from(r.quantity).unwrap_or(i32::MAX)).collect();
    let orders: Vec<Option<Uuid>> = results.iter().map(|r| r.order_id).collect();
    let written = sqlx::query(
        "insert into draw_results (drop_id, user_id, entrant, outcome, size, quantity, position, order_id)
         select $1, u, e, o, s, q, p, id
         from unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::int4[], $7::int4[], $8::uuid[])
              as t(u, e, o, s, q, p, id)
         on conflict (drop_id, user_id) do nothing",
    )
    .bind(drop.as_str())
    .bind(&users)
    .bind(&entrants)
    .bind(&outcomes)
    .bind(&sizes)
    .bind(&quantities)
    .bind(&positions)
    .bind(&orders)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    sqlx::query(&db::lost_events()).bind(drop.as_str()).bind(&users).execute(&mut **tx).await?;
    Ok(usize::try_from(written).unwrap_or(usize::MAX))
}

/// The waitlist's places in order, each with its entry's sizes (none before the draw).
pub async fn waitlist(pool: &PgPool, drop: &DropId) -> std::result::Result<Vec<Place>, sqlx::Error> {
    let rows: Vec<(i32, String, i32, Vec<String>)> = sqlx::query_as(
        "select r.position, r.user_id, r.quantity, e.sizes from draw_results r
         join draw_entries e using (drop_id, user_id)
         where r.drop_id = $1 and r.outcome = 'waitlisted' order by r.position",
    )
    .bind(drop.as_str())
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(position, user, quantity, sizes)| {
            let user = UserId::stored(&user).map_err(|why| sqlx::Error::Decode(why.into()))?;
            let (position, quantity) = (position.max(1) as u32, quantity.max(1) as u32);
            Ok(Place { position, user, quantity, sizes })
        })
        .collect()
}

/// Whether the drop has a draw (in any state).
pub async fn is_draw(pool: &PgPool, drop: &DropId) -> std::result::Result<bool, sqlx::Error> {
    sqlx::query_scalar("select exists (select 1 from draws where drop_id = $1)")
        .bind(drop.as_str())
        .fetch_one(pool)
        .await
}
