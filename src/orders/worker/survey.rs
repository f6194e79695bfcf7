//! The worker's view of its streams: following the registry of sales, surveying each stream
//! about once a second, taking a failing stream out until the next survey, reporting (log on
//! each change of state, gauge, [`StreamHealth`](crate::orders::streams::StreamHealth)), and
//! pruning dead consumers.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::{SALES_REFRESH, SURVEY, Tracked, Worker};
use crate::domain::SaleId;
use crate::orders::queue;
use crate::orders::streams::{self, Finding, StreamProblem, StreamState};
use crate::redis::connection::is_redis_outage;
use crate::redis::lua;
use crate::redis::order_stream::CONSUMER_GROUP;

/// Shortest pause between two prunings of the consumers.
const PRUNE_MIN_INTERVAL: Duration = Duration::from_millis(100);

impl Worker {
    /// The keys of the streams read this step.
    pub(super) fn readable(&self) -> Vec<String> {
        self.streams.iter().filter(|(_, t)| t.readable).map(|(key, _)| key.clone()).collect()
    }

    /// Follows the registry of sales and shards: adds the streams registered since the last
    /// refresh (surveyed before they are read), and drops the streams of sales and shards no
    /// longer registered (a retired sale), with the sale's metric series once none of its
    /// streams is left.
    pub(super) async fn refresh_sales(&mut self) -> anyhow::Result<()> {
        let due = self.sales_refreshed_at.is_none_or(|t| t.elapsed() >= SALES_REFRESH);
        if !due {
            return Ok(());
        }
        let listed: HashMap<String, SaleId> =
            queue::streams(&self.sales).await.context("listing sales")?.into_iter().collect();
        let draws = self.draw_streams().await?;
        let mut dropped = Vec::new();
        self.streams.retain(|key, tracked| {
            let keep = listed.contains_key(key) || draws.contains_key(key);
            if !keep {
                dropped.push(tracked.sale.clone());
            }
            keep
        });
        for sale in &dropped {
            if !self.streams.values().any(|t| t.sale == *sale) {
                self.metrics.forget_sale(sale.as_str());
            }
        }
        for (key, sale) in listed {
            if !self.streams.contains_key(&key) {
                let meta = self.sales.keyspace().sale_keys(&sale).meta;
                self.streams.insert(key, Tracked::new(sale, meta));
                self.next_survey_at = Instant::now();
            }
        }
        for (key, tracked) in draws {
            if let Entry::Vacant(slot) = self.streams.entry(key) {
                slot.insert(tracked);
                self.next_survey_at = Instant::now();
            }
        }
        if !dropped.is_empty() {
            self.publish();
        }
        self.sales_refreshed_at = Some(Instant::now());
        Ok(())
    }

    /// Every [`SURVEY`] (and right after a stream failed): surveys every stream at once
    /// ([`streams::survey`]). Fails only on a Redis outage.
    pub(super) async fn survey_streams(&mut self) -> anyhow::Result<()> {
        if Instant::now() < self.next_survey_at {
            return Ok(());
        }
        let surveys = self.streams.iter().map(|(key, tracked)| {
            let (mut con, key, meta) = (self.redis.clone(), key.clone(), tracked.meta.clone());
            async move {
                let finding = streams::survey(&mut con, &key, &meta).await;
                (key, finding)
            }
        });
        let findings = futures::future::join_all(surveys).await;
        for (key, finding) in findings {
            let finding = match finding {
                Ok(finding) => finding,
                Err(err) if is_redis_outage(&err) => return Err(err).context("surveying the order streams"),
                Err(err) => Finding {
                    state: StreamState::Unreadable,
                    detail: err.to_string(),
                    readable: false,
                    group_restored: false,
                },
            };
            self.apply(&key, finding);
        }
        self.publish();
        self.next_survey_at = Instant::now() + SURVEY;
        Ok(())
    }

    /// Records a survey's finding, logging a change of state once. A stream found ready whose
    /// read failed since the last survey (and whose group was not just restored) stays out.
    fn apply(&mut self, key: &str, mut finding: Finding) {
        let Some(tracked) = self.streams.get_mut(key) else { return };
        if let Some(error) = tracked.suspect.take()
            && finding.state == StreamState::Ready
            && !finding.group_restored
        {
            finding = Finding { state: StreamState::Unreadable, detail: error, readable: false, group_restored: false };
        }
        // Back in the reads: first its entries delivered to this consumer before it went out.
        let reread = finding.readable && !tracked.readable;
        let changed = tracked.state != Some(finding.state);
        let first = tracked.state.is_none();
        tracked.state = Some(finding.state);
        tracked.readable = finding.readable;
        tracked.detail = finding.detail;
        let (sale, state, detail) = (&tracked.sale, finding.state.as_str(), &tracked.detail);
        match finding.state {
            StreamState::Ready if changed && !first => {
                tracing::info!(sale_id = %sale, stream = key, detail, "order stream ready again")
            }
            StreamState::Ready if finding.group_restored => {
                tracing::info!(sale_id = %sale, stream = key, "consumer group restored")
            }
            StreamState::Ready => {}
            _ if changed => tracing::warn!(sale_id = %sale, stream = key, state, detail,
                "order stream skipped: the other sales' orders still drain"),
            _ => {}
        }
        self.read_own_pending |= reread;
    }

    /// A read, claim or acknowledgement failed on `stream` alone: it is not read again until
    /// the next survey, which comes at once.
    pub(super) fn suspect(&mut self, stream: &str, err: &redis::RedisError) {
        if let Some(tracked) = self.streams.get_mut(stream) {
            tracing::debug!(stream, error = %err, "order stream failed: surveying it");
            tracked.readable = false;
            tracked.suspect = Some(err.to_string());
        }
        self.next_survey_at = Instant::now();
    }

    /// The gauge `seckill_worker_streams{state}` (every state, zero included) and the report.
    fn publish(&self) {
        for state in StreamState::ALL {
            let count = self.streams.values().filter(|t| t.state == Some(state)).count();
            self.metrics.worker_streams.with_label_values(&[state.as_str()]).set(count as i64);
        }
        let problems = self
            .streams
            .iter()
            .filter_map(|(key, t)| {
                let state = t.state.filter(|s| *s != StreamState::Ready)?;
                Some(StreamProblem { sale: t.sale.to_string(), stream: key.clone(), state, detail: t.detail.clone() })
            })
            .collect();
        self.health.publish(problems);
    }

    /// Every claim timeout: on each readable stream, removes the consumers idle longer than the
    /// claim timeout with nothing pending (`lua/prune_consumers.lua`), never this one. A failure
    /// is logged and left for the next round.
    pub(super) async fn prune_consumers(&mut self) {
        if Instant::now() < self.next_prune_at {
            return;
        }
        self.next_prune_at = Instant::now() + self.settings.claim_timeout.max(PRUNE_MIN_INTERVAL);
        let idle_ms = self.settings.claim_timeout.as_millis() as u64;
        for stream in self.readable() {
            let mut script = lua::PRUNE_CONSUMERS.prepare_invoke();
            script.key(&stream).arg(CONSUMER_GROUP).arg(idle_ms).arg(&self.settings.consumer);
            match lua::run::<Vec<String>>(&script, &mut self.redis).await {
                Ok(removed) if !removed.is_empty() => {
                    tracing::info!(
                        stream,
                        ?removed,
                        "removed consumers idle past the claim timeout with nothing pending"
                    )
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(stream, error = %err, "pruning consumers failed");
                    if is_redis_outage(&err) {
                        return;
                    }
                }
            }
        }
    }
}
