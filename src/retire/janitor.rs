//! Automatic retirement: every `SECKILL_RETIRE_INTERVAL`, one instance of the deployment (the one
//! that takes the Redis lock, `SET NX PX`, a lease kept while its round runs) retires every
//! registered sale that ended or sold out more than `SECKILL_RETIRE_AFTER` ago, and was last
//! seeded more than that ago too. A sold-out sale's time is its last order's (else its row's last
//! change); an ended one's, its end. Sales that are not retirable yet (queued orders, differences
//! to reconcile) are tried again at the next round. The round also finishes the retirements that
//! stopped after their mark (an error, a shutdown during the grace), marked between
//! [`FINISH_WITHIN`] and [`FINISH_AFTER`] ago: an unregistered sale is no longer among those it
//! looks at.

use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::{RetireError, RetireOutcome, Retirer};
use crate::controls::audit;
use crate::db;
use crate::domain::SaleId;
use crate::redis::keys::retire_lock_key;
use crate::redis::lua;

/// Sales retired at once by one round (each waits its grace meanwhile).
const CONCURRENT_RETIREMENTS: usize = 16;
/// The longest lease of the round's lock: a lock Redis forgot (a failover) is noticed within a
/// third of it, and a dead instance's lets the next round in within it.
const LEASE: Duration = Duration::from_secs(30);
/// A retirement marked this long ago and not finished has stopped (one takes its grace, seconds).
pub const FINISH_AFTER: Duration = Duration::from_secs(300);
/// Retirements that stopped longer ago than this are left to `seckill retire`.
pub const FINISH_WITHIN: Duration = Duration::from_secs(86_400);

/// The janitor of one instance.
pub struct Janitor {
    retirer: Retirer,
    after: Duration,
    interval: Duration,
    /// This instance's name in the lock (for an operator reading it).
    owner: String,
}

impl Janitor {
    /// Retires sales `after` they ended or sold out, looking every `interval`.
    pub fn new(retirer: Retirer, after: Duration, interval: Duration, owner: String) -> Self {
        Self { retirer, after, interval, owner }
    }

    /// Rounds every `interval` until `shutdown` (none at all when `after` is 0). A failed round
    /// is logged and the next one tries again.
    pub async fn run(self, shutdown: CancellationToken) {
        if self.after.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                _ = shutdown.cancelled() => return,
            }
            tokio::select! {
                result = self.round() => match result {
                    Ok(0) => {}
                    Ok(retired) => tracing::info!(retired, "janitor retired sales"),
                    Err(err) => {
                        tracing::warn!(error = format!("{:#}", anyhow::Error::new(err)), "janitor round failed")
                    }
                },
                // An interrupted retirement is harmless: the sale stays marked, and `seckill retire`
                // or a later round finishes it (`finish_stopped`).
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round, if this instance takes the lock: the number of sales it retired. The lock is a
    /// short lease ([`LEASE`] at most), kept while the round runs (a round outlasts the interval:
    /// each batch waits its grace); at its end it is kept for the rest of the interval, so the
    /// deployment runs one round per interval, or given up if the round took longer. A round
    /// whose lock was lost meanwhile (Redis forgot it) finishes the batch in flight and stops, so
    /// no two instances' rounds retire, nor audit, the same sales.
    pub async fn round(&self) -> Result<usize, RetireError> {
        let started = tokio::time::Instant::now();
        let keyspace = self.retirer.sales.keyspace();
        let lock = redis::cmd("SET")
            .arg(retire_lock_key(keyspace.prefix()))
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(self.lease_ms())
            .query_async::<Option<String>>(&mut keyspace.conn())
            .await?;
        if lock.is_none() {
            return Ok(0);
        }
        let (lost, done) = (CancellationToken::new(), CancellationToken::new());
        let keeper = async {
            tokio::select! {
                () = self.keep_lock() => lost.cancel(),
                () = done.cancelled() => {}
            }
        };
        let work = async {
            let retired = self.retire_due(&lost).await;
            done.cancel();
            retired
        };
        let ((), retired) = tokio::join!(keeper, work);
        if lost.is_cancelled() {
            tracing::warn!("janitor: the round's lock was lost (Redis forgot it); the round stopped after its batch");
        } else {
            let rest = self.interval.saturating_sub(started.elapsed()).as_millis() as u64;
            let _ = self.lock_call(rest).await; // 0: given up, the next round need not wait
        }
        retired
    }

    /// The lock's lease: the interval, between 1 s and [`LEASE`], so a dead instance's lock goes
    /// soon and a lost one is noticed soon.
    fn lease_ms(&self) -> u64 {
        self.interval.clamp(Duration::from_secs(1), LEASE).as_millis() as u64
    }

    /// Keeps the lock for another lease, every third of it; returns once it is not this instance's
    /// any more. A failed call is logged and tried again at the next turn (two missed turns in a
    /// row may let the lease run out).
    async fn keep_lock(&self) {
        let every = Duration::from_millis(self.lease_ms() / 3);
        loop {
            tokio::time::sleep(every).await;
            match self.lock_call(self.lease_ms()).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(err) => tracing::warn!(error = %err, "janitor: the round's lock could not be kept; trying again"),
            }
        }
    }

    /// `lua/lock_keep.lua` on the round's lock: kept `ttl_ms` longer, or given up with 0; whether
    /// it was still this instance's.
    async fn lock_call(&self, ttl_ms: u64) -> redis::RedisResult<bool> {
        let keyspace = self.retirer.sales.keyspace();
        let mut call = lua::LOCK_KEEP.key(retire_lock_key(keyspace.prefix()));
        call.arg(&self.owner).arg(ttl_ms);
        let held: i64 = lua::run(&call, &mut keyspace.conn()).await?;
        Ok(held == 1)
    }

    /// The round's work, under the lock: retires the sales due, finishes stopped retirements;
    /// once `lost` is cancelled, no batch starts.
    async fn retire_due(&self, lost: &CancellationToken) -> Result<usize, RetireError> {
        // A sale that cannot be read or retired (a shard lost, a damaged field, a failed call) is
        // skipped with a warning, this round: it holds back none of the others.
        let mut due = vec![];
        for sale in self.retirer.sales.sale_ids().await? {
            match self.is_due(&sale).await {
                Ok(true) => due.push(sale),
                Ok(false) => {}
                Err(err) => skipped(&sale, "cannot tell whether it is due", err),
            }
        }
        let mut retired = 0;
        for batch in due.chunks(CONCURRENT_RETIREMENTS) {
            if lost.is_cancelled() {
                return Ok(retired); // another instance's round may have begun: it takes the rest
            }
            let retirements: Vec<_> = batch.iter().map(|sale| Box::pin(self.retire(sale))).collect();
            for (sale, outcome) in batch.iter().zip(futures::future::join_all(retirements).await) {
                match outcome {
                    Ok(done) => retired += usize::from(done),
                    Err(err) => skipped(sale, "retirement failed", err),
                }
            }
        }
        if lost.is_cancelled() {
            return Ok(retired);
        }
        Ok(retired + self.finish_stopped().await)
    }

    /// Finishes the retirements marked between [`FINISH_WITHIN`] and [`FINISH_AFTER`] ago that
    /// left something in Redis (`Retirer::finish` answers `AlreadyRetired` for one with nothing
    /// left); how many it finished.
    async fn finish_stopped(&self) -> usize {
        let marked = match db::retired_between(&self.retirer.pool, FINISH_WITHIN, FINISH_AFTER).await {
            Ok(marked) => marked,
            Err(err) => {
                skipped_all("cannot list the retirements marked", err.into());
                return 0;
            }
        };
        let mut finished = 0;
        for sale in marked.iter().filter_map(|sale| SaleId::parse(sale).ok()) {
            match self.retirer.finish(&sale).await {
                Ok(outcome) => finished += usize::from(self.record(&sale, outcome).await),
                Err(err) => skipped(&sale, "finishing its retirement failed", err),
            }
        }
        finished
    }

    async fn retire(&self, sale: &SaleId) -> Result<bool, RetireError> {
        let outcome = self.retirer.retire(sale).await?;
        Ok(self.record(sale, outcome).await)
    }

    /// Audits a retirement the janitor made, logs a refusal; whether the sale was retired.
    async fn record(&self, sale: &SaleId, outcome: RetireOutcome) -> bool {
        match outcome {
            RetireOutcome::Retired(report) => {
                audit::record_retirement(&self.retirer.pool, sale, &report, Some("janitor")).await;
                true
            }
            RetireOutcome::Refused(reasons) => {
                tracing::info!(sale_id = %sale, ?reasons, "janitor: sale due but not retirable yet");
                false
            }
            RetireOutcome::UnknownSale | RetireOutcome::AlreadyRetired => false,
        }
    }

    /// Whether the sale is [`due`]: what it takes from Redis and Postgres.
    async fn is_due(&self, sale: &SaleId) -> Result<bool, RetireError> {
        let Some(state) = self.retirer.sales.sale_state(sale).await? else {
            return Ok(false);
        };
        let pool = &self.retirer.pool;
        let seeded = db::last_seeded(pool, sale.as_str()).await?;
        let sold_out = if state.stock_left > 0 { None } else { db::last_activity(pool, sale.as_str()).await? };
        let ends = state.ends_at_ms.map(db::ms_to_time);
        Ok(due(OffsetDateTime::now_utc(), self.after, seeded, ends, sold_out))
    }
}

/// Logs a sale the round skips, and why.
fn skipped(sale: &SaleId, why: &str, err: RetireError) {
    let error = format!("{:#}", anyhow::Error::new(err));
    tracing::warn!(sale_id = %sale, error, "janitor: {why}; skipped this round");
}

/// Logs a step of the round skipped, and why.
fn skipped_all(why: &str, err: RetireError) {
    let error = format!("{:#}", anyhow::Error::new(err));
    tracing::warn!(error, "janitor: {why}; skipped this round");
}

/// A sale is due for retirement `after` it ended (`ends`) or sold out (`sold_out`: its last
/// order, else its row's last change), and never sooner than `after` its last seed (`seeded`):
/// a sale seeded with a mistaken schedule is not retired before an operator could notice and
/// seed it again.
fn due(
    now: OffsetDateTime,
    after: Duration,
    seeded: Option<OffsetDateTime>,
    ends: Option<OffsetDateTime>,
    sold_out: Option<OffsetDateTime>,
) -> bool {
    let after = time::Duration::try_from(after).unwrap_or(time::Duration::MAX);
    let passed = |at: Option<OffsetDateTime>| at.is_some_and(|at| at.checked_add(after).is_some_and(|due| due <= now));
    (seeded.is_none() || passed(seeded)) && (passed(ends) || passed(sold_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_is_due_after_its_end_or_sell_out_and_never_sooner_than_after_its_seed() {
        let now = OffsetDateTime::now_utc();
        let after = Duration::from_secs(3600);
        let ago = |minutes: i64| Some(now - time::Duration::minutes(minutes));
        assert!(due(now, after, ago(300), ago(120), None), "ended two hours ago");
        assert!(due(now, after, ago(300), None, ago(61)), "sold out 61 minutes ago");
        assert!(!due(now, after, ago(300), ago(59), None), "ended within the grace");
        assert!(!due(now, after, ago(300), None, None), "neither ended nor sold out");
        assert!(!due(now, after, ago(10), ago(120), ago(120)), "re-seeded ten minutes ago: its grace runs again");
        assert!(due(now, after, None, ago(120), None), "a sale without a row: by its end alone");
        assert!(!due(now, Duration::MAX, ago(300), ago(120), None), "an endless grace never passes");
    }
}
