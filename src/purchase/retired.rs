//! The retired sales this instance knows of, and what Postgres holds of any sale Redis does not
//! know ([`Stored`]). A retired sale has no Redis keys left, so Redis alone would answer 404
//! `unknown_sale`; Postgres remembers it (`sales.retired_at`), and this keeps the answer (410
//! `sale_retired`) in memory. The same lookup tells a made-up id (no row: the routes answer 404
//! without reading anything else of it in Postgres) from a sale Redis lost (a row kept).
//!
//! Postgres is asked only when Redis does not know a sale (every caller asks Redis first), and
//! never at the pace of the requests, however many distinct ids they name: the ids this instance
//! must look up wait together, and one query (`where sale_id = any($1)`) answers up to
//! [`MAX_BATCH`] of them, at most once per [`TICK`]. So a storm of made-up ids costs Postgres at
//! most `1 s / TICK` queries a second per instance (10), not one per id. The first look after a
//! quiet [`TICK`] is not delayed; under a storm an id waits at most a tick for its batch. Askers of
//! the same id share one place in the batch. An id that finds [`MAX_BATCH`] ids already waiting,
//! or whose batch is not answered within [`LOOKUP_WAIT`] (Postgres slow or down), is not answered
//! ([`Unanswered`]; [`RetiredSales::check`] returns it, and the caller answers 503 `unavailable`:
//! it cannot tell a retired sale from a made-up id, and an outage must not pass for either),
//! unkept, so waiting ids and memory stay bounded.
//!
//! Answers are kept, both caches bounded in count and time: "retired" for an hour after the last
//! ask (retirement is final), any other for [`ANSWER_TTL`], the negative cache that answers a
//! repeated unknown id from memory. The retirement's event (`retired:<id>` on the
//! events channel) marks a sale retired on every instance at once; an instance that missed it
//! learns it within [`ANSWER_TTL`].
//!
//! What the negative cache cannot hide: a sale seeded after its id was kept as "not retired" is in
//! Redis, which is asked first, so it is found (and sold) at once. A sale Redis lost while Postgres
//! holds its orders answers 404 here, never a sale: nothing is sold without its Redis keys, and a
//! seed of it again is refused over its orders (409 `sale_has_orders`) by the seed route, which
//! asks Postgres itself, not this cache (`tests/api/retire.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::db;
use crate::domain::SaleId;

/// The least time between two lookups' queries, per instance.
pub const TICK: Duration = Duration::from_millis(100);

/// Most ids one query asks about; also the most ids waiting for the next query.
pub const MAX_BATCH: usize = 1_000;

/// How long a lookup waits for its batch's answer before it gives up (a tick and the query, with
/// room for a loaded host: 200 ms answered 12 of 2,000 lookups late on a 2-core host at load 12).
pub const LOOKUP_WAIT: Duration = Duration::from_secs(1);

/// How long an answer other than "retired" is kept (a retirement whose event this instance missed
/// is seen within this time).
pub const ANSWER_TTL: Duration = Duration::from_secs(2);

/// Answers other than "retired" kept at most (the negative cache).
const MAX_ANSWERS: u64 = 10_000;

/// Retired sales remembered at most, each dropped after an hour nobody asked (and looked up again).
const MAX_REMEMBERED: u64 = 100_000;
const REMEMBERED_IDLE: Duration = Duration::from_secs(3600);

/// What Postgres holds of a sale Redis does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// No row: an id never seeded (made up).
    Absent,
    /// A row, not retired: a sale Redis lost, or one seeded since this instance last read
    /// Redis's registry of sales.
    Kept,
    /// A row marked retired.
    Retired,
}

/// Why a lookup did not answer.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// [`MAX_BATCH`] ids were waiting already, or the batch was not answered within [`LOOKUP_WAIT`].
    #[error("the lookups of sales Redis does not know are busy")]
    Busy,
    #[error(transparent)]
    Postgres(Arc<sqlx::Error>),
}

/// One batch's answer for one id, or the query's error.
type Answer = Result<Stored, Arc<sqlx::Error>>;

/// The ids waiting for the next query, each with its askers.
#[derive(Default)]
struct Waiting {
    ids: HashMap<Box<str>, Vec<oneshot::Sender<Answer>>>,
    /// A task is asking Postgres (or waiting for its next tick): it takes the waiting ids.
    asking: bool,
}

/// The batched lookups of one instance.
struct Lookups {
    waiting: Mutex<Waiting>,
    pool: PgPool,
}

impl Lookups {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What Postgres holds of `sale`, answered with the batch it joins.
    async fn ask(self: &Arc<Self>, sale: &str) -> Result<Stored, Unanswered> {
        let answer = {
            let mut waiting = self.waiting();
            if waiting.ids.len() >= MAX_BATCH && !waiting.ids.contains_key(sale) {
                return Err(Unanswered::Busy);
            }
            let (tell, answer) = oneshot::channel();
            waiting.ids.entry(sale.into()).or_default().push(tell);
            if !waiting.asking {
                waiting.asking = true;
                tokio::spawn(Asking { lookups: self.clone(), done: false }.run());
            }
            answer
        };
        match tokio::time::timeout(LOOKUP_WAIT, answer).await {
            Ok(Ok(answer)) => answer.map_err(Unanswered::Postgres),
            // Not answered in time, or the asking task was dropped (the runtime stops).
            Err(_) | Ok(Err(_)) => Err(Unanswered::Busy),
        }
    }
}

/// The task that asks Postgres for the waiting ids, a batch per [`TICK`] at most, until none
/// wait; it says so in the same step that finds none, and if dropped before (the runtime stops),
/// on drop, so the next ask starts another.
struct Asking {
    lookups: Arc<Lookups>,
    /// It found none waiting and said so.
    done: bool,
}

impl Asking {
    async fn run(mut self) {
        loop {
            let batch: Vec<(Box<str>, Vec<oneshot::Sender<Answer>>)> = {
                let mut waiting = self.lookups.waiting();
                let ids: Vec<Box<str>> = waiting.ids.keys().take(MAX_BATCH).cloned().collect();
                if ids.is_empty() {
                    waiting.asking = false;
                    drop(waiting);
                    self.done = true;
                    return;
                }
                ids.into_iter().filter_map(|id| waiting.ids.remove_entry(&id)).collect()
            };
            let next = Instant::now() + TICK;
            let names: Vec<&str> = batch.iter().map(|(id, _)| &**id).collect();
            match db::rows_among(&self.lookups.pool, &names).await {
                Ok(rows) => {
                    let rows: HashMap<String, bool> = rows.into_iter().collect();
                    for (id, askers) in batch {
                        let answer = match rows.get(&*id) {
                            None => Stored::Absent,
                            Some(false) => Stored::Kept,
                            Some(true) => Stored::Retired,
                        };
                        askers.into_iter().for_each(|tell| drop(tell.send(Ok(answer))));
                    }
                }
                Err(err) => {
                    let err = Arc::new(err);
                    for tell in batch.into_iter().flat_map(|(_, askers)| askers) {
                        drop(tell.send(Err(err.clone())));
                    }
                }
            }
            tokio::time::sleep_until(next).await;
        }
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        if !self.done {
            self.lookups.waiting().asking = false;
        }
    }
}

/// The retired sales of this instance's knowledge.
#[derive(Clone)]
pub struct RetiredSales {
    /// Sales known retired (retirement is final).
    retired: moka::sync::Cache<Box<str>, ()>,
    /// Recent answers of Postgres; one place in a batch per id at a time.
    answers: moka::future::Cache<Box<str>, Stored>,
    lookups: Arc<Lookups>,
}

impl RetiredSales {
    /// Asks `pool` about sales Redis does not know.
    pub fn new(pool: PgPool) -> Self {
        Self {
            retired: moka::sync::Cache::builder().max_capacity(MAX_REMEMBERED).time_to_idle(REMEMBERED_IDLE).build(),
            answers: moka::future::Cache::builder().max_capacity(MAX_ANSWERS).time_to_live(ANSWER_TTL).build(),
            lookups: Arc::new(Lookups { waiting: Mutex::default(), pool }),
        }
    }

    /// Whether this instance already knows the sale is retired (memory only: the hot path).
    pub fn known(&self, sale: &SaleId) -> bool {
        self.retired.contains_key(sale.as_str())
    }

    /// The sale was retired (here, or by another instance's event).
    pub fn mark(&self, sale: &str) {
        self.retired.insert(sale.into(), ());
    }

    /// Whether the sale is retired, for a sale Redis does not know: from memory, else from its
    /// batch's Postgres query. A failed or refused lookup is logged and returned: the caller
    /// answers 503, as it cannot tell a retired sale from one that never was.
    pub async fn check(&self, sale: &SaleId) -> Result<bool, Unanswered> {
        match self.stored(sale).await {
            Ok(stored) => Ok(stored == Stored::Retired),
            Err(err) => {
                match &err {
                    Unanswered::Postgres(pg) => {
                        if let Some(suppressed) = crate::telemetry::dependency_failure_line(Some("postgres")) {
                            tracing::warn!(sale_id = %sale, error = %pg, suppressed, "retired sale lookup failed")
                        }
                    }
                    Unanswered::Busy => tracing::debug!(sale_id = %sale, "retired sale lookup skipped: lookups busy"),
                }
                Err(err)
            }
        }
    }

    /// What Postgres holds of a sale Redis does not know: from memory (an answer at most
    /// [`ANSWER_TTL`] old), else from its batch's query.
    pub async fn stored(&self, sale: &SaleId) -> Result<Stored, Unanswered> {
        if self.known(sale) {
            return Ok(Stored::Retired);
        }
        let stored = self.answers.try_get_with(sale.as_str().into(), self.lookups.ask(sale.as_str())).await;
        self.remember(sale, stored.map_err(unshared))
    }

    /// The same, never from the negative cache (an operator's route: the sale may have been
    /// seeded a moment ago on another instance); still in a batch.
    pub async fn stored_now(&self, sale: &SaleId) -> Result<Stored, Unanswered> {
        if self.known(sale) {
            return Ok(Stored::Retired);
        }
        let stored = self.lookups.ask(sale.as_str()).await;
        self.remember(sale, stored)
    }

    fn remember(&self, sale: &SaleId, stored: Result<Stored, Unanswered>) -> Result<Stored, Unanswered> {
        if let Ok(Stored::Retired) = stored {
            self.mark(sale.as_str());
        }
        stored
    }
}

/// A shared lookup's error, for one asker.
fn unshared(err: Arc<Unanswered>) -> Unanswered {
    match &*err {
        Unanswered::Busy => Unanswered::Busy,
        Unanswered::Postgres(pg) => Unanswered::Postgres(pg.clone()),
    }
}
