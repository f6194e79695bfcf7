//! The dispatcher: claims due deliveries (`store::claim`), posts each signed event to its
//! endpoint, and records the outcome: a 2xx is delivered; anything else (another status, a
//! timeout, a refused connection) is tried again after the schedule's next pause, and after its
//! last attempt the delivery has failed for good. Every instance runs one; they share the work
//! through Postgres (`for update skip locked`). It also samples the age of the oldest open event
//! and deletes settled events past the retention.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use sqlx::PgPool;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Settings;
use super::store::{self, Claimed};
use crate::metrics::Metrics;

/// Deliveries claimed per round.
const BATCH: i64 = 200;
/// Attempts in flight at once (the client keeps as many connections to each endpoint: the
/// connection budget reserves them, `crate::app::descriptors`).
pub const CONCURRENCY: usize = 32;
/// Pause between two rounds that found nothing due.
const POLL: Duration = Duration::from_millis(100);
/// Pause after a failed round.
const BACKOFF: Duration = Duration::from_secs(1);
/// Most bytes of a refusing receiver's answer read (kept as its last error); the rest is never read.
const MAX_ERROR_BODY: usize = 512;
/// How often the oldest open event's age is sampled and settled events are purged.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// Events deleted per purge.
const PURGE_BATCH: i64 = 10_000;

/// The dispatcher of one instance.
pub struct Dispatcher {
    pool: PgPool,
    settings: Arc<Settings>,
    client: reqwest::Client,
    metrics: Arc<Metrics>,
}

impl Dispatcher {
    /// A dispatcher posting with a client of its own (no redirects followed, the settings' timeout).
    pub fn new(pool: PgPool, settings: Settings, metrics: Arc<Metrics>) -> anyhow::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("seckill/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self { pool, settings: Arc::new(settings), client, metrics })
    }

    /// Rounds until `stop`; a round in progress finishes (each attempt is bounded by the timeout).
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!(endpoints = self.settings.endpoints.len(), "webhook dispatcher started");
        let (mut sampled_at, mut purged_at) = (None::<Instant>, None::<Instant>);
        while !stop.is_cancelled() {
            if sampled_at.is_none_or(|at| at.elapsed() >= SAMPLE_EVERY) {
                sampled_at = Some(Instant::now());
                self.sample().await;
            }
            if purged_at.is_none_or(|at| at.elapsed() >= PURGE_EVERY) {
                purged_at = Some(Instant::now());
                self.purge().await;
            }
            let pause = match self.round().await {
                Ok(claimed) if claimed as i64 == BATCH => Duration::ZERO,
                Ok(_) => POLL,
                Err(err) => {
                    let err = anyhow::Error::new(err);
                    self.metrics.dependency_error(&err, "webhooks");
                    tracing::warn!(error = format!("{err:#}"), "webhook round failed; again in 1 s");
                    BACKOFF
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = stop.cancelled() => {}
            }
        }
        tracing::info!("webhook dispatcher stopped");
    }

    /// One round: claims what is due and attempts it; returns how many were claimed.
    pub async fn round(&self) -> Result<usize, sqlx::Error> {
        // The lease covers the whole round: its attempts go CONCURRENCY at a time, each at most
        // the timeout, so a slow receiver cannot make a claim lapse (and another instance send it
        // again) while this one still holds it.
        let waves = (BATCH as u32).div_ceil(CONCURRENCY as u32);
        let lease = (self.settings.timeout * (waves + 1) + Duration::from_secs(5)).as_secs_f64();
        let claimed = store::claim(&self.pool, &self.settings.endpoints, BATCH, lease).await?;
        let count = claimed.len();
        let attempts = futures::stream::iter(claimed).map(|c| self.attempt(c)).buffer_unordered(CONCURRENCY);
        let results: Vec<Result<(), sqlx::Error>> = attempts.collect().await;
        results.into_iter().collect::<Result<(), _>>()?;
        Ok(count)
    }

    /// Posts one delivery and records what came of it.
    async fn attempt(&self, claimed: Claimed) -> Result<(), sqlx::Error> {
        let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let signature = self.settings.signer.sign(&claimed.message_id, timestamp, &claimed.body);
        let sent = self
            .client
            .post(&claimed.endpoint)
            .header("content-type", "application/json")
            .header("webhook-id", &claimed.message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(claimed.body.clone())
            .send()
            .await;
        let (status, error) = match sent {
            Ok(response) if response.status().is_success() => {
                self.metrics.webhook_deliveries.with_label_values(&["delivered"]).inc();
                return store::delivered(&self.pool, &claimed, response.status().as_u16()).await;
            }
            Ok(response) => (Some(response.status().as_u16()), head_of(response).await),
            Err(err) => (None, error_text(&err)),
        };
        let retry_in = self.settings.schedule.get(claimed.attempts.max(0) as usize).map(Duration::as_secs_f64);
        let outcome = if retry_in.is_some() { "retried" } else { "failed" };
        self.metrics.webhook_deliveries.with_label_values(&[outcome]).inc();
        if retry_in.is_none() {
            tracing::warn!(
                webhook_id = claimed.message_id,
                endpoint = claimed.endpoint,
                status,
                error,
                "webhook delivery failed after its last attempt"
            );
        }
        store::attempt_failed(&self.pool, &claimed, status, &error, retry_in).await
    }

    async fn sample(&self) {
        match store::oldest_open_age(&self.pool).await {
            Ok(age) => self.metrics.webhook_oldest_undelivered_seconds.set(age),
            Err(err) => tracing::debug!(error = %err, "oldest undelivered event not sampled"),
        }
    }

    async fn purge(&self) {
        match store::purge(&self.pool, self.settings.retention.as_secs_f64(), PURGE_BATCH).await {
            Ok(0) => {}
            Ok(purged) => tracing::info!(purged, "webhook events past their retention deleted"),
            Err(err) => tracing::warn!(error = %err, "webhook events not purged; again in a minute"),
        }
    }
}

/// The first [`MAX_ERROR_BODY`] bytes of a refusal's body, as text (never more is read).
async fn head_of(mut response: reqwest::Response) -> String {
    let mut head = Vec::new();
    while head.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => head.extend_from_slice(&chunk[..chunk.len().min(MAX_ERROR_BODY - head.len())]),
            Ok(None) | Err(_) => break,
        }
    }
    format!("HTTP {}: {}", response.status().as_u16(), String::from_utf8_lossy(&head))
}

/// Why a request got no answer, without the URL (it may hold credentials).
fn error_text(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connect"
    } else if err.is_redirect() {
        "redirect"
    } else {
        "request"
    };
    let cause = std::error::Error::source(err).map(ToString::to_string).unwrap_or_default();
    format!("{kind}: {cause}")
}
