//! The sweeper: expires reservations on time and re-drives the releases still owed. Every
//! instance that runs a worker runs one; they share the work through Postgres (`for update skip
//! locked`), and a release repeated by two of them still returns one unit (`lua/release.lua`).
//!
//! Expiry is on time without polling minutes apart: the sweeper sleeps until the earliest open
//! deadline, [`TICK`] (the shortest window) at most, since a reservation made meanwhile is due
//! no sooner than a window after it, and expires in batches of [`BATCH`] until none is due. Each look is a read of the
//! partial index on open
//! reservations; nothing is written (or locked) unless one is due, so a deployment without
//! payment windows pays one index read per tick. The outbox, orders cancelled or expired whose unit is
//! not yet back (the releaser died or Redis failed), is re-driven every [`REDRIVE_EVERY`], a page
//! of [`BATCH`] a round in the order they were resolved, so releases Redis keeps refusing (a sale
//! it does not know, a drawn drop paused) hold back none of the others.

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

use super::Reservations;
use super::store::{self, Owed, OwedCursor};
use crate::telemetry::{LimitedLines, traces};

/// Longest sleep between two looks for due reservations: the shortest payment window
/// (`super::payment_window`), so a reservation made just after a look is seen before it is due,
/// and the sweeper then sleeps until its deadline exactly.
pub const TICK: Duration = Duration::from_secs(1);
/// Reservations expired per statement.
const BATCH: i64 = 1000;
/// How often the outbox of owed releases is re-driven.
pub const REDRIVE_EVERY: Duration = Duration::from_secs(1);
/// A release is re-driven once it has been owed this long (the transition that owes it releases
/// it itself right after its commit).
const REDRIVE_GRACE_SECS: f64 = 2.0;
/// Pause after a failed round.
const BACKOFF: Duration = Duration::from_secs(1);

impl Reservations {
    /// Runs the sweeper until `stop`.
    pub async fn sweep(self, stop: CancellationToken) {
        let mut next_redrive = tokio::time::Instant::now();
        // Where the walk through the owed releases stands (a page a round).
        let mut owed_page: Option<OwedCursor> = None;
        loop {
            let redrive = tokio::time::Instant::now() >= next_redrive;
            if redrive {
                next_redrive = tokio::time::Instant::now() + REDRIVE_EVERY;
            }
            let page = redrive.then_some(&mut owed_page);
            let pause = match self.sweep_once(page).await {
                Ok(pause) => pause,
                Err(err) => {
                    self.metrics.dependency_error(&err, "sweeper");
                    tracing::warn!(error = %err, "reservation sweep failed; again in 1 s");
                    BACKOFF
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => return,
            }
        }
    }

    /// One round: expires every due reservation (releasing their units), re-drives the next page
    /// of owed releases if given where the walk stands (`redrive`, moved on to the next page);
    /// returns how long to sleep before the next round.
    pub async fn sweep_once(&self, redrive: Option<&mut Option<OwedCursor>>) -> anyhow::Result<Duration> {
        while let Some((_, true)) = store::next_deadline(&self.pool).await? {
            let expired = store::expire_due(&self.pool, BATCH).await?;
            let full = expired.len() as i64 == BATCH;
            let mut owed = Vec::with_capacity(expired.len());
            for (order, lag) in expired {
                self.metrics.expiry_lag_seconds.observe(lag.max(0.0));
                owed.push(order);
            }
            self.metrics.reservations.with_label_values(&["expired"]).inc_by(owed.len() as u64);
            // With traces on, each round that expired something is a trace: the releases inside.
            let span = match traces::on() && !owed.is_empty() {
                true => tracing::info_span!("reservations.expire", seckill.expired = owed.len()),
                false => tracing::Span::none(),
            };
            self.release_by_sale(owed).instrument(span).await;
            if !full {
                break;
            }
        }
        if let Some(page) = redrive {
            let (owed, next) = store::owed_releases(&self.pool, REDRIVE_GRACE_SECS, BATCH, *page).await?;
            *page = next;
            // Every second while one is owed: one line a minute.
            static LINES: LazyLock<LimitedLines> = LazyLock::new(|| LimitedLines::every(Duration::from_secs(60)));
            if !owed.is_empty()
                && let Some(suppressed) = LINES.admit()
            {
                tracing::info!(orders = owed.len(), suppressed, "re-driving owed releases");
            }
            self.release_by_sale(owed).await;
        }
        let pause = match store::next_deadline(&self.pool).await? {
            // Not below 10 ms: a due row another sweeper holds must not spin this one.
            Some((deadline, _)) => until(deadline).clamp(Duration::from_millis(10), TICK),
            None => TICK,
        };
        Ok(pause)
    }

    /// Releases `owed`, one sale at a time; a sale whose release fails keeps it owed.
    async fn release_by_sale(&self, owed: Vec<Owed>) {
        let mut by_sale: HashMap<String, Vec<Uuid>> = HashMap::new();
        for Owed { sale_id, order_id } in owed {
            by_sale.entry(sale_id).or_default().push(order_id);
        }
        for (sale, orders) in by_sale {
            self.release_now(&sale, &orders).await;
        }
    }
}

/// Time from now to `deadline` (zero if it has passed).
fn until(deadline: OffsetDateTime) -> Duration {
    let left = deadline - OffsetDateTime::now_utc();
    Duration::try_from(left).unwrap_or(Duration::ZERO)
}
