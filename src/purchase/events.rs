//! The deployment's events channel (`<prefix>:events`, pub/sub: a channel, not a key, so no hash
//! slot): how every instance learns that a sale was seeded, got stock back or was retired, and
//! drops what it holds in memory about it ([`super::sold_out`], [`super::retired`]).
//! [`Sales::announce`] publishes a seed's or a restock's message; `crate::retire` a retirement's.

use std::time::Duration;

use futures::StreamExt;
use redis::RedisResult;
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

use super::Sales;
use crate::domain::SaleId;
use crate::redis::connection::RedisTarget;

impl Sales {
    /// Every instance drops its sold-out flag for the sale ([`SaleEvent::Seeded`], the sale id on
    /// the events channel): it was seeded, or its stock rose (`what` the log says). Should the
    /// publish fail, the flags lapse by themselves within `super::sold_out::FLAG_TTL`.
    pub async fn announce(&self, sale: &SaleId, what: &str) {
        let published: RedisResult<i64> =
            redis::AsyncCommands::publish(&mut self.redis.conn(), self.redis.events_channel(), sale.as_str()).await;
        if let Err(err) = published {
            tracing::warn!(sale_id = %sale, error = %err, "{what} not announced; sold-out flags lapse by themselves");
        }
    }
}

/// Pause before subscribing again after the subscription was lost.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);

/// Prefix of a retirement's message on the events channel: `retired:<sale id>` (a seed's message
/// is the bare sale id, which never holds a `:`).
pub const RETIRED_EVENT: &str = "retired:";

/// One message of the deployment's events channel, as [`listen`] hands it on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaleEvent<'a> {
    /// The sale was seeded: drop its sold-out flag.
    Seeded(&'a str),
    /// The sale was retired (`crate::retire`): drop everything held about it.
    Retired(&'a str),
    /// (Re)subscribed: events may have been missed, forget every flag.
    Missed,
}

impl<'a> SaleEvent<'a> {
    /// The event a message's payload carries.
    pub fn parse(payload: &'a str) -> Self {
        match payload.strip_prefix(RETIRED_EVENT) {
            Some(sale) => Self::Retired(sale),
            None => Self::Seeded(payload),
        }
    }
}

/// Hands each event arriving on `channel` to `on_event`, until `shutdown`. Subscribes again after
/// a failure, and reports [`SaleEvent::Missed`] on each (re)subscription, since events sent while
/// it was away are lost. On a cluster it subscribes on one seed node, the next one after each
/// failure: a cluster delivers every PUBLISH to subscribers on all nodes.
pub async fn listen(
    redis_url: SecretString,
    channel: String,
    on_event: &(dyn Fn(SaleEvent<'_>) + Send + Sync),
    shutdown: CancellationToken,
) {
    let urls = match RedisTarget::parse(redis_url.expose_secret()) {
        Ok(target) => target.urls().to_vec(),
        Err(err) => return tracing::error!(error = %err, "no seed events: SECKILL_REDIS_URL is invalid"),
    };
    for attempt in 0.. {
        if shutdown.is_cancelled() {
            return;
        }
        let url = &urls[attempt % urls.len()];
        let result = tokio::select! {
            result = subscribe_and_apply(url, &channel, on_event) => result,
            _ = shutdown.cancelled() => return,
        };
        if let Err(err) = result {
            tracing::warn!(error = %err, "seed events subscription lost; subscribing again in 1 s");
        }
        on_event(SaleEvent::Missed);
        tokio::select! {
            _ = tokio::time::sleep(RESUBSCRIBE_PAUSE) => {}
            _ = shutdown.cancelled() => return,
        }
    }
}

async fn subscribe_and_apply(
    redis_url: &str,
    channel: &str,
    on_event: &(dyn Fn(SaleEvent<'_>) + Send + Sync),
) -> redis::RedisResult<()> {
    let client = redis::Client::open(redis_url)?;
    let connecting = tokio::time::timeout(Duration::from_secs(5), client.get_async_pubsub());
    let mut pubsub = connecting.await.map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    pubsub.subscribe(channel).await?;
    on_event(SaleEvent::Missed);
    let mut messages = pubsub.on_message();
    while let Some(message) = messages.next().await {
        let payload: String = message.get_payload()?;
        on_event(SaleEvent::parse(&payload));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_tell_a_seed_from_a_retirement() {
        assert_eq!(SaleEvent::parse("demo"), SaleEvent::Seeded("demo"));
        assert_eq!(SaleEvent::parse("retired:demo"), SaleEvent::Retired("demo"));
    }
}
