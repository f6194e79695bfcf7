//! The automatic run: every instance, every few seconds, runs each draw whose entries have closed
//! and that is not drawn yet ([`super::run`]; the advisory lock keeps it to one run per draw, and
//! a draw drawn meanwhile answers at once). A draw that cannot run yet (entries still queued, an
//! outage, an award refused until an operator mends the size) is tried again later: after
//! [`INTERVAL`] the first time, then twice as long each time it fails again, up to [`MOST_BACKOFF`],
//! so a draw stuck for hours costs a run and a log line every few minutes, not every 2 s.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{DRAIN_WAIT, run};
use crate::domain::DropId;
use crate::redis::Keyspace;

/// How often the runner looks for draws to run.
pub const INTERVAL: Duration = Duration::from_secs(2);
/// The longest wait before a draw that failed is tried again.
pub const MOST_BACKOFF: Duration = Duration::from_secs(300);

/// When each draw that failed may be tried again, and the wait after its next failure. Holds
/// only due draws that failed: a draw drawn, or no longer due, leaves it.
type Backoff = HashMap<String, (Instant, Duration)>;

/// The background runner of due draws.
#[derive(Clone)]
pub struct Runner {
    redis: Keyspace,
    pool: PgPool,
}

impl Runner {
    /// A runner over these stores.
    pub fn new(redis: Keyspace, pool: PgPool) -> Self {
        Self { redis, pool }
    }

    /// Runs a round every [`INTERVAL`] until `shutdown` fires (a run cut short is finished by the
    /// next one: every step can be redone).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Backoff::new();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(INTERVAL) => {}
                _ = shutdown.cancelled() => return,
            }
            tokio::select! {
                result = self.round(&mut backoff) => match result {
                    Ok(0) => {}
                    Ok(drawn) => tracing::info!(drawn, "draws run"),
                    Err(err) => tracing::warn!(error = %err, "the draw runner's round failed"),
                },
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round: each due draw run, but a draw that failed before only once its wait in
    /// `backoff` is over; answers how many are drawn by it.
    async fn round(&self, backoff: &mut Backoff) -> Result<usize, sqlx::Error> {
        let due: Vec<String> =
            sqlx::query_scalar("select drop_id from draws where closes_at <= now() and state <> 'drawn'")
                .fetch_all(&self.pool)
                .await?;
        backoff.retain(|drop, _| due.contains(drop));
        let mut drawn = 0;
        for drop in due.iter().filter_map(|drop| DropId::parse(drop).ok()) {
            let waiting = backoff.get(drop.as_str()).copied();
            if waiting.is_some_and(|(next, _)| Instant::now() < next) {
                continue;
            }
            match run(&self.redis, &self.pool, &drop, DRAIN_WAIT).await {
                Ok(_) => {
                    backoff.remove(drop.as_str());
                    drawn += 1;
                }
                Err(err) => {
                    let wait = waiting.map_or(INTERVAL, |(_, wait)| wait);
                    let retry_in_s = wait.as_secs();
                    tracing::warn!(drop_id = %drop, error = %err, retry_in_s, "the draw cannot run yet");
                    backoff.insert(drop.to_string(), (Instant::now() + wait, (wait * 2).min(MOST_BACKOFF)));
                }
            }
        }
        Ok(drawn)
    }
}
