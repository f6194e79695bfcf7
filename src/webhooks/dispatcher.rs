//! The dispatcher: every few seconds (and at once after an admin change) it reads the endpoints
//! and keeps one sender (`super::sender`) running per enabled endpoint, each with its own claims
//! and concurrency, so an endpoint that hangs or refuses delays no other's events. Every instance
//! with the signing secret runs one; they share each endpoint's work through Postgres (`for
//! update skip locked`). It also samples the age of the oldest open event, deletes settled events
//! past the retention and settles deliveries written to an endpoint just removed or disabled.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::sender::{self, Shared};
use super::{Changes, Settings, endpoints, store};
use crate::metrics::Metrics;

/// How often the endpoints are read again (an admin change on another instance shows within it).
const REFRESH_EVERY: Duration = Duration::from_secs(5);
/// How often the oldest open event's age is sampled and settled events are purged.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// Events deleted per purge.
const PURGE_BATCH: i64 = 10_000;

/// The dispatcher of one instance.
pub struct Dispatcher {
    shared: Arc<Shared>,
}

/// A running sender and how to stop it.
/// How long a connection to an endpoint's host stays open unused (reqwest's default is 90 s).
const IDLE_CONNECTION: std::time::Duration = std::time::Duration::from_secs(10);

struct Running {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Dispatcher {
    /// A dispatcher posting with a client of its own (no redirects followed, the settings'
    /// timeout; idle connections closed after [`IDLE_CONNECTION`], so the hosts of endpoints an
    /// operator removed do not hold descriptors beyond the reserve for long), reading the
    /// endpoints again at once when `changes` says so.
    pub fn new(pool: PgPool, settings: Settings, metrics: Arc<Metrics>, changes: Changes) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("seckill/", env!("CARGO_PKG_VERSION")))
            .pool_max_idle_per_host(super::sender::CONCURRENCY)
            .pool_idle_timeout(IDLE_CONNECTION)
            .build()?;
        Ok(Self { shared: Arc::new(Shared { pool, settings, client, metrics, changes }) })
    }

    /// Runs until `stop`; then each sender finishes the attempts it has in flight (each bounded by
    /// the timeout) and gives back the claims it had not attempted yet.
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!("webhook dispatcher started");
        let mut senders: HashMap<String, Running> = HashMap::new();
        let mut stopping: Vec<JoinHandle<()>> = Vec::new();
        let (mut sampled_at, mut purged_at, mut refreshed_at) = (None::<Instant>, None::<Instant>, None::<Instant>);
        let mut changed = false;
        while !stop.is_cancelled() {
            let due = |at: Option<Instant>, every| at.is_none_or(|at: Instant| at.elapsed() >= every);
            if due(sampled_at, SAMPLE_EVERY) {
                sampled_at = Some(Instant::now());
                self.sample().await;
            }
            if due(purged_at, PURGE_EVERY) {
                purged_at = Some(Instant::now());
                self.purge().await;
            }
            if changed || due(refreshed_at, REFRESH_EVERY) {
                refreshed_at = Some(Instant::now());
                self.refresh(&mut senders, &mut stopping, &stop).await;
            }
            changed = tokio::select! {
                _ = tokio::time::sleep(SAMPLE_EVERY) => false,
                _ = self.shared.changes.notified() => true,
                _ = stop.cancelled() => false,
            };
        }
        for running in senders.values() {
            running.stop.cancel();
        }
        let tasks = senders.into_values().map(|r| r.task).chain(stopping);
        for finished in futures::future::join_all(tasks).await {
            if let Err(err) = finished {
                tracing::error!(error = %err, "webhook sender failed");
            }
        }
        tracing::info!("webhook dispatcher stopped");
    }

    /// Reads the endpoints: starts a sender for each enabled one without, stops those of
    /// endpoints removed or disabled (and forgets a sender that ended by itself, having disabled
    /// its endpoint), and settles deliveries written to an endpoint just removed or disabled.
    async fn refresh(
        &self,
        senders: &mut HashMap<String, Running>,
        stopping: &mut Vec<JoinHandle<()>>,
        stop: &CancellationToken,
    ) {
        let states = match endpoints::states(&self.shared.pool).await {
            Ok(states) => states,
            Err(err) => {
                tracing::debug!(error = %err, "webhook endpoints not read; the senders go on");
                return;
            }
        };
        let enabled: HashMap<&str, bool> = states.iter().map(|(url, enabled)| (url.as_str(), *enabled)).collect();
        let count = |state: bool| enabled.values().filter(|e| **e == state).count() as i64;
        let gauge = &self.shared.metrics.webhook_endpoints;
        gauge.with_label_values(&["enabled"]).set(count(true));
        gauge.with_label_values(&["disabled"]).set(count(false));
        let gone: Vec<String> = senders
            .iter()
            .filter(|(url, running)| enabled.get(url.as_str()) != Some(&true) || running.task.is_finished())
            .map(|(url, _)| url.clone())
            .collect();
        stopping.retain(|task| !task.is_finished());
        for url in gone {
            if let Some(running) = senders.remove(&url) {
                running.stop.cancel();
                stopping.push(running.task);
            }
        }
        for (url, _) in states.iter().filter(|(_, enabled)| *enabled) {
            if !senders.contains_key(url) {
                let stop = stop.child_token();
                let task = tokio::spawn(sender::serve(self.shared.clone(), url.clone(), stop.clone()));
                senders.insert(url.clone(), Running { stop, task });
            }
        }
        match endpoints::settle_strays(&self.shared.pool).await {
            Ok((0, 0)) => {}
            Ok((dropped, closed)) => {
                tracing::info!(dropped, closed, "deliveries to endpoints removed or disabled settled")
            }
            Err(err) => tracing::debug!(error = %err, "stray deliveries not settled; again at the next refresh"),
        }
    }

    async fn sample(&self) {
        match store::oldest_open_age(&self.shared.pool).await {
            Ok(age) => self.shared.metrics.webhook_oldest_undelivered_seconds.set(age),
            Err(err) => tracing::debug!(error = %err, "oldest undelivered event not sampled"),
        }
    }

    async fn purge(&self) {
        let retention = self.shared.settings.retention.as_secs_f64();
        match store::purge(&self.shared.pool, retention, PURGE_BATCH).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "webhook events past their retention deleted"),
            Err(err) => tracing::warn!(error = %err, "webhook events not purged; again in a minute"),
        }
    }
}
