//! The in-process sold-out flag. Once Redis has answered "sold out" for a sale, this instance
//! answers 410 itself: no limiter call, no purchase script, no Redis round trip. That is the path
//! most of a flash crowd takes once the stock is gone.
//!
//! A sold-out sale can come back only by a re-seed (possible while it has no buyers, e.g. after a
//! seed with stock 0). Seeding publishes the sale id on the deployment's events channel, and every
//! instance's [`listen`] clears its flag at once. A flag also lapses after its time to live, so an
//! instance that missed the event (a dropped subscription) catches up within that time.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use futures::StreamExt;
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

use crate::domain::SaleId;

/// How long a flag holds without being confirmed by Redis again.
pub const FLAG_TTL: Duration = Duration::from_secs(5);

/// The sales this instance knows to be sold out, each until its flag lapses.
#[derive(Debug)]
pub struct SoldOutFlags {
    until: RwLock<HashMap<Box<str>, Instant>>,
    ttl: Duration,
}

impl Default for SoldOutFlags {
    fn default() -> Self {
        Self::with_ttl(FLAG_TTL)
    }
}

impl SoldOutFlags {
    pub fn with_ttl(ttl: Duration) -> Self {
        Self { until: RwLock::default(), ttl }
    }

    /// True while the sale's flag is set and has not lapsed.
    pub fn is_set(&self, sale: &SaleId) -> bool {
        let until = self.until.read().unwrap_or_else(|e| e.into_inner());
        until.get(sale.as_str()).is_some_and(|t| Instant::now() < *t)
    }

    /// Redis said the sale is sold out.
    pub fn set(&self, sale: &SaleId) {
        let mut until = self.until.write().unwrap_or_else(|e| e.into_inner());
        until.insert(sale.as_str().into(), Instant::now() + self.ttl);
    }

    /// The sale was re-seeded.
    pub fn clear(&self, sale: &str) {
        self.until.write().unwrap_or_else(|e| e.into_inner()).remove(sale);
    }

    /// Events may have been missed: forget every flag.
    pub fn clear_all(&self) {
        self.until.write().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Pause before subscribing again after the subscription was lost.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

/// Clears flags as seed events arrive on `channel`, until `shutdown`. Subscribes again after a
/// failure, and clears every flag on each (re)subscription, since events sent while it was away
/// are lost.
pub async fn listen(redis_url: SecretString, channel: String, flags: &SoldOutFlags, shutdown: CancellationToken) {
    while !shutdown.is_cancelled() {
        let result = tokio::select! {
            result = subscribe_and_apply(&redis_url, &channel, flags) => result,
            _ = shutdown.cancelled() => return,
        };
        if let Err(err) = result {
            tracing::warn!(error = %err, "seed events subscription lost; subscribing again in 1 s");
        }
        flags.clear_all();
        tokio::select! {
            _ = tokio::time::sleep(RESUBSCRIBE_PAUSE) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn subscribe_and_apply(redis_url: &SecretString, channel: &str, flags: &SoldOutFlags) -> redis::RedisResult<()> {
    let client = redis::Client::open(redis_url.expose_secret())?;
    let connecting = tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub());
    let mut pubsub = connecting.await.map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    pubsub.subscribe(channel).await?;
    flags.clear_all();
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let sale: String = message.get_payload()?;
        flags.clear(&sale);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sale(id: &str) -> SaleId {
        SaleId::parse(id).unwrap()
    }

    #[test]
    fn a_flag_holds_until_cleared() {
        let flags = SoldOutFlags::default();
        assert!(!flags.is_set(&sale("a")));
        flags.set(&sale("a"));
        assert!(flags.is_set(&sale("a")));
        assert!(!flags.is_set(&sale("b")));
        flags.clear("a");
        assert!(!flags.is_set(&sale("a")));
        flags.set(&sale("b"));
        flags.clear_all();
        assert!(!flags.is_set(&sale("b")));
    }

    #[test]
    fn a_flag_lapses_after_its_time_to_live() {
        let flags = SoldOutFlags::with_ttl(Duration::from_millis(20));
        flags.set(&sale("a"));
        assert!(flags.is_set(&sale("a")));
        std::thread::sleep(Duration::from_millis(30));
        assert!(!flags.is_set(&sale("a")));
    }
}
