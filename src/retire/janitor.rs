//! Automatic retirement: every `SECKILL_RETIRE_INTERVAL`, one instance of the deployment (the one
//! that takes the Redis lock, `SET NX PX`) retires every registered sale that ended or sold out
//! more than `SECKILL_RETIRE_AFTER` ago. A sold-out sale's time is its last order's (else its
//! row's last change); an ended one's, its end. Sales that are not retirable yet (queued orders,
//! differences to reconcile) are tried again at the next round.

use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::{RetireError, RetireOutcome, Retirer};
use crate::db;
use crate::domain::SaleId;
use crate::redis::keys::retire_lock_key;

/// Sales retired at once by one round (each waits its grace meanwhile).
const CONCURRENT_RETIREMENTS: usize = 16;

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
                    Err(err) => tracing::warn!(error = format!("{:#}", anyhow::Error::new(err)), "janitor round failed"),
                },
                // An interrupted retirement is harmless: the sale stays marked and unregistered, and
                // `seckill retire` (or the next round's check) finishes it.
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round, if this instance takes the lock: the number of sales it retired.
    pub async fn round(&self) -> Result<usize, RetireError> {
        let keyspace = self.retirer.sales.keyspace();
        let lock = redis::cmd("SET")
            .arg(retire_lock_key(keyspace.prefix()))
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(self.interval.as_millis() as u64)
            .query_async::<Option<String>>(&mut keyspace.conn())
            .await?;
        if lock.is_none() {
            return Ok(0);
        }
        let mut due = vec![];
        for sale in self.retirer.sales.sale_ids().await? {
            if self.is_due(&sale).await? {
                due.push(sale);
            }
        }
        let mut retired = 0;
        for batch in due.chunks(CONCURRENT_RETIREMENTS) {
            let retirements: Vec<_> = batch.iter().map(|sale| Box::pin(self.retire(sale))).collect();
            for outcome in futures::future::join_all(retirements).await {
                retired += usize::from(outcome?);
            }
        }
        Ok(retired)
    }

    async fn retire(&self, sale: &SaleId) -> Result<bool, RetireError> {
        match self.retirer.retire(sale).await? {
            RetireOutcome::Retired(_) => Ok(true),
            RetireOutcome::Refused(reasons) => {
                tracing::info!(sale_id = %sale, ?reasons, "janitor: sale due but not retirable yet");
                Ok(false)
            }
            RetireOutcome::UnknownSale | RetireOutcome::AlreadyRetired => Ok(false),
        }
    }

    /// Ended or sold out more than `after` ago.
    async fn is_due(&self, sale: &SaleId) -> Result<bool, RetireError> {
        let Some(state) = self.retirer.sales.sale_state(sale).await? else {
            return Ok(false);
        };
        let now = OffsetDateTime::now_utc();
        let after = time::Duration::try_from(self.after).unwrap_or(time::Duration::MAX);
        if let Some(end) = state.ends_at_ms.map(db::ms_to_time)
            && end.checked_add(after).is_some_and(|due| due <= now)
        {
            return Ok(true);
        }
        if state.stock_left > 0 {
            return Ok(false);
        }
        let last = db::last_activity(&self.retirer.pool, sale.as_str()).await?;
        Ok(last.is_some_and(|last| last.checked_add(after).is_some_and(|due| due <= now)))
    }
}
