//! The automatic run: every instance, every few seconds, runs each draw whose entries have closed
//! and that is not drawn yet ([`super::run`]; the advisory lock keeps it to one run per draw, and
//! a draw drawn meanwhile answers at once). A draw that cannot run yet (entries still queued, an
//! outage) is tried again next round.

use std::time::Duration;

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{DRAIN_WAIT, run};
use crate::domain::DropId;
use crate::redis::Keyspace;

/// How often the runner looks for draws to run.
pub const INTERVAL: Duration = Duration::from_secs(2);

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
        loop {
            tokio::select! {
                _ = tokio::time::sleep(INTERVAL) => {}
                _ = shutdown.cancelled() => return,
            }
            tokio::select! {
                result = self.round() => match result {
                    Ok(0) => {}
                    Ok(drawn) => tracing::info!(drawn, "draws run"),
                    Err(err) => tracing::warn!(error = %err, "the draw runner's round failed"),
                },
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// One round: each due draw run; answers how many are drawn by it.
    pub async fn round(&self) -> Result<usize, sqlx::Error> {
        let due: Vec<String> =
            sqlx::query_scalar("select drop_id from draws where closes_at <= now() and state <> 'drawn'")
                .fetch_all(&self.pool)
                .await?;
        let mut drawn = 0;
        for drop in due.iter().filter_map(|drop| DropId::parse(drop).ok()) {
            match run(&self.redis, &self.pool, &drop, DRAIN_WAIT).await {
                Ok(_) => drawn += 1,
                Err(err) => tracing::warn!(drop_id = %drop, error = %err, "the draw cannot run yet"),
            }
        }
        Ok(drawn)
    }
}
