//! The draw's run (docs/draw.md): once a drop's entries close (or an operator runs it early), it
//! closes the entries, waits until every accepted entry is in Postgres, ranks and allocates them
//! with the draw's seed (the pure core: [`crate::draw::ranking`], [`crate::draw::allocate`]),
//! keeps every result in one transaction, makes each winner's reservation in Redis
//! (`lua/draw_award.lua`, in chunks) and reveals the seed.
//!
//! ```text
//!  lock (Postgres advisory, one run per drop) ─► close: Redis draw meta state "drawing", draws.state
//!  ─► drain: count(draw_entries) = HLEN(entries), waited for ─► results: draw_results if any, else
//!  rank + allocate + insert (one transaction, order ids chosen) ─► waitlist: draw_waitlist.lua,
//!  each place once ─► award: draw_award.lua per size, ≤ 250 winners a call ─► reveal: draws.state
//!  'drawn', revealed_at; the meta's state "drawn"
//! ```
//!
//! Every step can be redone: a crash anywhere and a re-run ends with the same results (never
//! allocated twice: the rows are read back) and each winner awarded once (`buy()` answers
//! `already_purchased` to a winner awarded before).

pub mod award;
pub mod publish;
pub mod readers;
pub mod runner;
pub mod store;

use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::DropId;
use crate::draw::{Outcome, allocate, ranking};
use crate::redis::Keyspace;

pub use award::{Awarded, CHUNK};

/// How long a run waits for the worker to bring every accepted entry to Postgres.
pub const DRAIN_WAIT: Duration = Duration::from_secs(30);

/// What a run did, as the operator reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Entries drawn.
    pub entries: u64,
    pub won: u64,
    pub waitlisted: u64,
    pub lost: u64,
    /// Units the winners were given.
    pub units_awarded: u64,
}

impl Summary {
    /// The counts of `results`.
    pub fn of(results: &[store::Result]) -> Self {
        let mut summary = Self { entries: results.len() as u64, ..Self::default() };
        for result in results {
            match result.outcome {
                Outcome::Won { quantity, .. } => {
                    summary.won += 1;
                    summary.units_awarded += u64::from(quantity);
                }
                Outcome::Waitlisted { .. } => summary.waitlisted += 1,
                Outcome::Lost => summary.lost += 1,
            }
        }
        summary
    }
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The drop has no draw.
    #[error("the drop is not in draw mode")]
    NotADraw,
    /// Accepted entries have not all reached Postgres yet: run again later.
    #[error("{stored} of {accepted} accepted entries are in Postgres: the worker has not copied them all yet")]
    EntriesQueued { stored: i64, accepted: u64 },
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("postgres: {0}")]
    Postgres(#[from] sqlx::Error),
    /// A winner's reservation was refused by the purchase's rules.
    #[error("award: {0}")]
    Award(String),
    /// The allocation's thread panicked (a bug): nothing was written.
    #[error("the allocation failed: {0}")]
    Allocation(String),
}

impl From<award::AwardError> for RunError {
    fn from(err: award::AwardError) -> Self {
        match err {
            award::AwardError::Redis(err) => Self::Redis(err),
            refused => Self::Award(refused.to_string()),
        }
    }
}

/// Runs the drop's draw to its end (see the module's steps), one run per drop at a time over
/// every instance; a drawn draw answers its summary and changes nothing.
/// A run that awarded logs its calls and the longest (`slowest_award_ms`, the round trip: an
/// upper bound of the time it held Redis).
pub async fn run(redis: &Keyspace, pool: &PgPool, drop: &DropId, drain: Duration) -> Result<Summary, RunError> {
    let (summary, awarded) = run_until(redis, pool, drop, drain, None).await?;
    if awarded.calls > 0 {
        let slowest_award_ms = awarded.slowest.as_secs_f64() * 1_000.0;
        let (award_calls, winners) = (awarded.calls, awarded.made);
        tracing::info!(drop_id = %drop, award_calls, winners, slowest_award_ms, "draw awarded");
    }
    Ok(summary)
}

/// [`run`], stopping after `max_calls` award calls (`None`: all) before the reveal when winners
/// remain: what a crash mid-award leaves. Answers the summary and how far the award got.
pub async fn run_until(
    redis: &Keyspace,
    pool: &PgPool,
    drop: &DropId,
    drain: Duration,
    max_calls: Option<usize>,
) -> Result<(Summary, Awarded), RunError> {
    let lock = store::Lock::take(pool, drop).await?;
    let outcome = locked((redis, pool), drop, drain, max_calls).await;
    lock.release().await;
    outcome
}

/// The run's steps, under the drop's lock.
async fn locked(
    (redis, pool): (&Keyspace, &PgPool),
    drop: &DropId,
    drain: Duration,
    max_calls: Option<usize>,
) -> Result<(Summary, Awarded), RunError> {
    let draw = store::draw(pool, drop).await?.ok_or(RunError::NotADraw)?;
    if draw.state == "drawn" {
        // A run that stopped between the two reveals finishes Redis's.
        award::set_state(redis, drop, "drawn").await?;
        let results = store::results(pool, drop).await?;
        return Ok((Summary::of(&results), Awarded { done: true, ..Awarded::default() }));
    }
    award::set_state(redis, drop, "drawing").await?;
    store::set_state(pool, drop, "drawing").await?;
    drained(redis, pool, drop, drain).await?;
    let mut results = store::results(pool, drop).await?;
    if results.is_empty() {
        let drawn = allocated(pool, drop, &draw).await?;
        // Written in full under the lock: what Postgres holds is `drawn`, no need to read it back.
        results = if store::insert(pool, drop, &drawn).await? == drawn.len() {
            drawn
        } else {
            store::results(pool, drop).await?
        };
    }
    // Before any winner holds a reservation that could come back.
    crate::draw::offers::put_waitlist(redis, drop, &store::waitlist(pool, drop).await?).await?;
    let awarded = award::award(redis, drop, &results, max_calls).await?;
    if awarded.done {
        // Redis first: a run that fails between the two is drawn again (Postgres still says
        // `drawing`, which the runner picks up) and finishes both. The other way round, a Redis
        // write that failed after Postgres's was never retried by the runner, which picks only
        // draws Postgres has not drawn: the drop's page never showed the seed.
        award::set_state(redis, drop, "drawn").await?;
        store::set_state(pool, drop, "drawn").await?;
    }
    Ok((Summary::of(&results), awarded))
}

/// Waits, up to `wait`, until Postgres holds as many entries as Redis accepted.
async fn drained(redis: &Keyspace, pool: &PgPool, drop: &DropId, wait: Duration) -> Result<(), RunError> {
    let deadline = Instant::now() + wait;
    loop {
        let (_, accepted) = award::state(redis, drop).await?;
        let stored = crate::draw::entries::store::count(pool, drop).await?;
        if u64::try_from(stored).is_ok_and(|stored| stored >= accepted) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(RunError::EntriesQueued { stored, accepted });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The draw done from the stored entries: every entrant's result, each winner with a new order id.
/// The pseudonyms, the ranking and the allocation (seconds of CPU for 200,000 entries) run on a
/// blocking thread, so the instance's requests are not held while they run.
async fn allocated(pool: &PgPool, drop: &DropId, draw: &store::Draw) -> Result<Vec<store::Result>, RunError> {
    let terms = store::terms(pool, drop, draw.waitlist_places).await?;
    let rows = store::entry_rows(pool, drop).await?;
    let (seed, drop) = (draw.seed.clone(), drop.clone());
    tokio::task::spawn_blocking(move || draw_from(&drop, &seed, &terms, rows))
        .await
        .map_err(|err| RunError::Allocation(err.to_string()))?
}

/// [`allocated`]'s work on the stored entries `rows`: ranked with `seed`, allocated by `terms`.
fn draw_from(
    drop: &DropId,
    seed: &str,
    terms: &crate::draw::Terms,
    rows: Vec<store::EntryRow>,
) -> Result<Vec<store::Result>, RunError> {
    let mut quantities = std::collections::HashMap::new();
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let (id, entry) = store::entry_of(drop, row)?;
        quantities.insert(entry.entrant.clone(), (id, entry.quantity));
        entries.push(entry);
    }
    let ranked = ranking(seed, entries);
    let allocation = allocate(terms, &ranked);
    Ok(allocation
        .results
        .into_iter()
        .filter_map(|(entrant, outcome)| {
            let (user, quantity) = quantities.get(&entrant)?.clone();
            let order_id = matches!(outcome, Outcome::Won { .. }).then(Uuid::now_v7);
            Some(store::Result { user, entrant, outcome, quantity: quantity.max(1), order_id })
        })
        .collect())
}
