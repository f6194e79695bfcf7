//! The retired sales this instance knows of. A retired sale has no Redis keys left, so Redis
//! alone would answer 404 `unknown_sale`; Postgres remembers it (`sales.retired_at`), and this
//! keeps the answer (410 `sale_retired`) in memory.
//!
//! Postgres is asked only when Redis does not know a sale, and then at most
//! [`MAX_CONCURRENT_LOOKUPS`] at once for the whole instance, one per sale id at a time (askers
//! of the same id wait for the one query), and its answer is kept: a storm of buys on an unknown
//! or retired sale never becomes a storm of Postgres queries. A lookup that cannot get its turn
//! within [`LOOKUP_WAIT`] answers "not retired" (the caller then answers 404). The retirement's
//! event (`retired:<id>` on the events channel) marks a sale retired on every instance at once.
//! Both caches are bounded in count and time.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::sync::Semaphore;

use crate::db;
use crate::domain::SaleId;

/// Postgres lookups in flight at once, per instance.
pub const MAX_CONCURRENT_LOOKUPS: usize = 2;

/// How long a lookup waits for its turn before it gives up.
pub const LOOKUP_WAIT: Duration = Duration::from_millis(200);

/// How long an answer "not retired" is kept (a retirement whose event this instance missed is
/// seen within this time).
pub const NOT_RETIRED_TTL: Duration = Duration::from_secs(2);

/// Retired sales remembered at most, each dropped after an hour nobody asked (and looked up again).
const MAX_REMEMBERED: u64 = 100_000;
const REMEMBERED_IDLE: Duration = Duration::from_secs(3600);

/// Why a lookup did not answer.
#[derive(Debug)]
enum LookupFailed {
    /// It did not get its turn within [`LOOKUP_WAIT`].
    Busy,
    Postgres(sqlx::Error),
}

/// The retired sales of this instance's knowledge.
#[derive(Clone)]
pub struct RetiredSales {
    /// Sales known retired (retirement is final).
    retired: moka::sync::Cache<Box<str>, ()>,
    /// Recent answers of Postgres, `true` for retired; one query per id at a time.
    answers: moka::future::Cache<Box<str>, bool>,
    lookups: Arc<Semaphore>,
    pool: PgPool,
}

impl RetiredSales {
    /// Asks `pool` about sales Redis does not know.
    pub fn new(pool: PgPool) -> Self {
        Self {
            retired: moka::sync::Cache::builder().max_capacity(MAX_REMEMBERED).time_to_idle(REMEMBERED_IDLE).build(),
            answers: moka::future::Cache::builder().max_capacity(10_000).time_to_live(NOT_RETIRED_TTL).build(),
            lookups: Arc::new(Semaphore::new(MAX_CONCURRENT_LOOKUPS)),
            pool,
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

    /// Whether the sale is retired, for a sale Redis does not know: from memory, else from one
    /// bounded Postgres lookup. A failed or refused lookup answers false (logged).
    pub async fn check(&self, sale: &SaleId) -> bool {
        if self.known(sale) {
            return true;
        }
        let lookup = async {
            let _turn = tokio::time::timeout(LOOKUP_WAIT, self.lookups.acquire())
                .await
                .map_err(|_| LookupFailed::Busy)?
                .expect("the semaphore is never closed");
            db::sale_retired(&self.pool, sale.as_str())
                .await
                .map(|row| row == Some(true))
                .map_err(LookupFailed::Postgres)
        };
        match self.answers.try_get_with(sale.as_str().into(), lookup).await {
            Ok(true) => {
                self.mark(sale.as_str());
                true
            }
            Ok(false) => false,
            Err(err) => {
                match &*err {
                    LookupFailed::Postgres(pg) => {
                        tracing::warn!(sale_id = %sale, error = %pg, "retired sale lookup failed")
                    }
                    LookupFailed::Busy => tracing::debug!(sale_id = %sale, "retired sale lookup skipped: lookups busy"),
                }
                false
            }
        }
    }
}
