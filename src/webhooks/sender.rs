//! One endpoint's sender: claims the endpoint's due deliveries (`store::claim`), posts each signed
//! event, at most [`CONCURRENCY`] at once, and records the outcome: a 2xx is delivered; anything
//! else (another status, a timeout, a refused connection) is tried again after the schedule's
//! next pause, and after its last attempt the delivery has failed for good. A round in which
//! every attempt failed starts or continues the endpoint's run of failures; one accepted attempt
//! ends it; a run that lasts `disable_after` disables the endpoint (`endpoints::failed`) and ends
//! the sender. Each endpoint has its own, so a slow one spends only its own claims and slots.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use sqlx::PgPool;

use super::store::{self, Claimed};
use super::{Changes, Settings, endpoints};
use crate::metrics::Metrics;

/// Deliveries one sender claims per round.
const BATCH: i64 = 200;
/// One sender's attempts in flight at once (the client keeps at most as many idle connections to
/// an endpoint; the connection budget reserves them for every endpoint there may be,
/// `crate::app::descriptors`).
pub const CONCURRENCY: usize = 32;
/// Pause between two rounds that found nothing due.
const POLL: Duration = Duration::from_millis(100);
/// Pause after a failed round.
const BACKOFF: Duration = Duration::from_secs(1);
/// Most bytes of a refusing receiver's answer read (kept as its last error); the rest is never read.
const MAX_ERROR_BODY: usize = 512;

/// What the senders share: the pool, the settings, the HTTP client, the metrics and the word
/// that the endpoints changed.
pub(super) struct Shared {
    pub pool: PgPool,
    pub settings: Settings,
    pub client: reqwest::Client,
    pub metrics: Arc<Metrics>,
    pub changes: Changes,
}

/// What came of one attempt.
enum Outcome {
    Delivered,
    /// Refused or unanswered, with why.
    Failed(String),
}

/// What one round did.
struct Round {
    claimed: usize,
    /// The round disabled the endpoint.
    disabled: bool,
}

/// Sends to `url` until `stop`, or until it disables the endpoint.
pub(super) async fn serve(shared: Arc<Shared>, url: String, stop: CancellationToken) {
    tracing::debug!(url = endpoints::shown(&url), "webhook sender started");
    while !stop.is_cancelled() {
        let pause = match round(&shared, &url, &stop).await {
            Ok(Round { disabled: true, .. }) => return,
            Ok(Round { claimed, .. }) if claimed as i64 == BATCH => Duration::ZERO,
            Ok(_) => POLL,
            Err(err) => {
                let err = anyhow::Error::new(err);
                shared.metrics.dependency_error(&err, "webhooks");
                tracing::warn!(error = format!("{err:#}"), "webhook round failed; again in 1 s");
                BACKOFF
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => {}
        }
    }
}

/// One round: claims what is due to `url` and attempts it (none started after `stop`: those are
/// given back), then records whether the endpoint is failing.
async fn round(shared: &Shared, url: &str, stop: &CancellationToken) -> Result<Round, sqlx::Error> {
    // The lease covers the whole round: its attempts go CONCURRENCY at a time, each at most the
    // timeout, so a slow receiver cannot make a claim lapse (and another instance send it again)
    // while this one still holds it.
    let waves = (BATCH as u32).div_ceil(CONCURRENCY as u32);
    let lease = (shared.settings.timeout * (waves + 1) + Duration::from_secs(5)).as_secs_f64();
    let claimed = store::claim(&shared.pool, url, BATCH, lease).await?;
    let count = claimed.len();
    let mut pending = claimed.into_iter();
    let mut in_flight = FuturesUnordered::new();
    let (mut accepted, mut refused, mut last_error, mut failure) = (0, 0, String::new(), None);
    loop {
        while in_flight.len() < CONCURRENCY && !stop.is_cancelled() {
            match pending.next() {
                Some(claim) => in_flight.push(attempt(shared, claim)),
                None => break,
            }
        }
        match in_flight.next().await {
            Some(Ok(Outcome::Delivered)) => accepted += 1,
            Some(Ok(Outcome::Failed(error))) => (refused, last_error) = (refused + 1, error),
            Some(Err(err)) => failure = failure.or(Some(err)),
            None => break,
        }
    }
    let unstarted: Vec<Claimed> = pending.collect();
    if !unstarted.is_empty() {
        store::release(&shared.pool, &unstarted).await?;
    }
    let mut disabled = false;
    if accepted > 0 {
        endpoints::succeeded(&shared.pool, url).await?;
    } else if refused > 0 {
        let run = (shared.settings.disable_after, shared.settings.longest_silence());
        if let Some(gone) = endpoints::failed(&shared.pool, url, run, &last_error).await? {
            shared.metrics.webhook_endpoints_disabled.inc();
            shared.changes.notify();
            tracing::warn!(
                url = endpoints::shown(url),
                failing_since = %gone.failing_since,
                closed = gone.closed,
                last_error,
                "webhook endpoint disabled: every attempt failed for SECKILL_WEBHOOK_DISABLE_AFTER; its open \
                 deliveries failed; POST /admin/webhooks/{{id}}/enable re-enables it"
            );
            disabled = true;
        }
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(Round { claimed: count, disabled }),
    }
}

/// Posts one delivery and records what came of it.
async fn attempt(shared: &Shared, claimed: Claimed) -> Result<Outcome, sqlx::Error> {
    let settings = &shared.settings;
    let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let signature = settings.signer.sign(&claimed.message_id, timestamp, &claimed.body);
    let sent = shared
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
            shared.metrics.webhook_deliveries.with_label_values(&["delivered"]).inc();
            store::delivered(&shared.pool, &claimed, response.status().as_u16()).await?;
            return Ok(Outcome::Delivered);
        }
        Ok(response) => (Some(response.status().as_u16()), head_of(response).await),
        Err(err) => (None, error_text(&err)),
    };
    let retry_in = settings.schedule.get(claimed.attempts.max(0) as usize).map(Duration::as_secs_f64);
    let outcome = if retry_in.is_some() { "retried" } else { "failed" };
    shared.metrics.webhook_deliveries.with_label_values(&[outcome]).inc();
    if retry_in.is_none() {
        tracing::warn!(
            webhook_id = claimed.message_id,
            endpoint = endpoints::shown(&claimed.endpoint),
            status,
            error,
            "webhook delivery failed after its last attempt"
        );
    }
    store::attempt_failed(&shared.pool, &claimed, status, &error, retry_in).await?;
    Ok(Outcome::Failed(error))
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
    storable(format!("HTTP {}: {}", response.status().as_u16(), String::from_utf8_lossy(&head)))
}

/// `text` as Postgres can store it: a NUL (which its text refuses) becomes U+FFFD. A receiver
/// chooses its refusal's body: with a NUL in it, recording the attempt failed, so the endpoint was
/// never counted failing nor disabled, and its deliveries were retried for ever.
fn storable(text: String) -> String {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}") } else { text }
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
    storable(format!("{kind}: {cause}"))
}
