//! The order worker: reads every sale's order stream with a consumer group, writes each batch to
//! Postgres in one idempotent statement, and acknowledges (XACK + XDEL) only after the commit.
//!
//! Nothing is acknowledged early, so a crash at any point leaves the batch pending: this consumer
//! re-reads its own pending entries when it restarts (or after an error), and any other consumer
//! claims entries that stayed pending longer than the claim timeout (XAUTOCLAIM). Redelivered
//! orders are no-ops thanks to the order id primary key and the (sale_id, user_id) unique key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::streams::{
    StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamRangeReply, StreamReadOptions, StreamReadReply,
};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::queue;
use crate::db;
use crate::domain::SaleId;
use crate::metrics::Metrics;
use crate::purchase::Sales;
use crate::redis::Keyspace;
use crate::redis::connection::RedisConnection;
use crate::redis::lua;
use crate::redis::order_stream::{self, CONSUMER_GROUP};

/// How often the worker re-reads the registry of sales.
const SALES_REFRESH: Duration = Duration::from_millis(500);

/// How often the worker samples each sale's queue for `/metrics`.
const QUEUE_SAMPLE: Duration = Duration::from_secs(1);
/// On a Redis Cluster, how long the worker waits before reading again when no stream had orders.
pub const CLUSTER_POLL: Duration = Duration::from_millis(25);

/// First and largest pause after a failed step (doubling in between).
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Settings of one worker.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// The deployment's key prefix.
    pub key_prefix: String,
    /// This worker's name in the consumer group.
    pub consumer: String,
    /// Orders read and inserted per batch.
    pub batch: usize,
    /// How long one read waits for new orders.
    pub block: Duration,
    /// Orders pending this long with another consumer are claimed.
    pub claim_timeout: Duration,
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepOutcome {
    /// A batch was written and acknowledged.
    Processed {
        /// Stream entries handled (malformed ones included).
        entries: usize,
    },
    /// Nothing to do within the block time.
    Idle,
}

/// Running totals, for logs and tests.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WorkerStats {
    /// Orders written to Postgres.
    pub inserted: u64,
    /// Orders already stored (a redelivery): nothing written.
    pub redelivered: u64,
    /// Orders refused: the user has another order in the sale.
    pub conflicts: u64,
    /// Entries that are no order, dropped.
    pub malformed: u64,
    /// Entries claimed from a consumer presumed dead.
    pub reclaimed: u64,
}

/// One consumer of the order streams.
pub struct Worker {
    redis: RedisConnection,
    /// The same connection, for the registries of sales and shards.
    sales: Sales,
    pool: PgPool,
    settings: WorkerSettings,
    /// Stream key -> sale, for every registered sale and shard.
    streams: HashMap<String, SaleId>,
    sales_refreshed_at: Option<Instant>,
    /// Re-read this consumer's own pending entries before new ones (at start and after errors).
    read_own_pending: bool,
    /// Create the consumer group again on every known stream before the next read (after
    /// errors: [`order_stream::create_group`]).
    recreate_groups: bool,
    next_claim_at: Instant,
    stats: WorkerStats,
    metrics: Arc<Metrics>,
    queues_sampled_at: Option<Instant>,
}

impl Worker {
    /// `redis` must be a connection of its own: the worker's blocking reads would stall requests
    /// multiplexed on a shared one. Its response timeout must exceed `settings.block`.
    pub fn new(redis: RedisConnection, pool: PgPool, settings: WorkerSettings, metrics: Arc<Metrics>) -> Self {
        let sales = Sales::new(Keyspace::new(redis.clone(), settings.key_prefix.clone()));
        Self {
            redis,
            sales,
            pool,
            settings,
            streams: HashMap::new(),
            sales_refreshed_at: None,
            read_own_pending: true,
            recreate_groups: false,
            next_claim_at: Instant::now(),
            stats: WorkerStats::default(),
            metrics,
            queues_sampled_at: None,
        }
    }

    /// What this worker has done so far.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// Runs steps until `shutdown` fires. A step in progress always finishes (its batch is
    /// committed and acknowledged, or left pending); failures back off exponentially.
    pub async fn run(mut self, shutdown: CancellationToken) {
        tracing::info!(consumer = %self.settings.consumer, "worker started");
        let mut backoff = BACKOFF_MIN;
        while !shutdown.is_cancelled() {
            match self.step().await {
                Ok(_) => backoff = BACKOFF_MIN,
                Err(err) => {
                    self.metrics.dependency_error(&err, "worker");
                    tracing::warn!(
                        error = format!("{err:#}"),
                        retry_in_ms = backoff.as_millis() as u64,
                        "worker step failed"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.cancelled() => {}
                    }
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
        tracing::info!(stats = ?self.stats, "worker stopped");
    }

    /// One unit of work: claim stale entries of dead consumers if it is time, else read this
    /// consumer's own pending entries, else wait up to the block time for new ones; then write
    /// what was read to Postgres and acknowledge it.
    pub async fn step(&mut self) -> anyhow::Result<StepOutcome> {
        let result = self.step_inner().await;
        if result.is_err() {
            self.read_own_pending = true;
            self.recreate_groups = true;
        }
        result
    }

    async fn step_inner(&mut self) -> anyhow::Result<StepOutcome> {
        self.refresh_sales().await?;
        self.sample_queues().await;
        if self.streams.is_empty() {
            tokio::time::sleep(self.settings.block).await;
            return Ok(StepOutcome::Idle);
        }
        if Instant::now() >= self.next_claim_at {
            let claimed = self.claim_stale().await?;
            if !claimed.is_empty() {
                let reclaimed = claimed.iter().map(|(_, e)| e.len() as u64).sum::<u64>();
                self.stats.reclaimed += reclaimed;
                self.metrics.worker_orders.with_label_values(&["reclaimed"]).inc_by(reclaimed);
                return self.persist(claimed).await;
            }
        }
        if self.read_own_pending {
            let pending = self.read("0", None).await?;
            if !pending.is_empty() {
                return self.persist(pending).await;
            }
            self.read_own_pending = false;
        }
        let fresh = self.read(">", Some(self.settings.block)).await?;
        if fresh.is_empty() {
            return Ok(StepOutcome::Idle);
        }
        self.persist(fresh).await
    }

    /// Every [`QUEUE_SAMPLE`]: each sale's queue length and the age of its oldest order, for
    /// `/metrics`. A failed sample is skipped: the step's own commands report the outage.
    async fn sample_queues(&mut self) {
        if self.queues_sampled_at.is_some_and(|t| t.elapsed() < QUEUE_SAMPLE) {
            return;
        }
        self.queues_sampled_at = Some(Instant::now());
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        // Per sale: orders queued in all its shards, and the age of the oldest.
        let mut queues: HashMap<&SaleId, (i64, f64)> = HashMap::new();
        for (stream, sale) in &self.streams {
            let mut con = self.redis.clone();
            let Ok(length) = redis::cmd("XLEN").arg(stream).query_async::<i64>(&mut con).await else { return };
            let Ok(oldest) = redis::cmd("XRANGE")
                .arg(stream)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async::<StreamRangeReply>(&mut con)
                .await
            else {
                return;
            };
            // Entry ids start with the Redis time of the XADD, in milliseconds.
            let added_ms = oldest.ids.first().and_then(|e| e.id.split('-').next()?.parse::<u128>().ok());
            let lag = added_ms.map_or(0.0, |ms| now_ms.saturating_sub(ms) as f64 / 1000.0);
            let queue = queues.entry(sale).or_default();
            *queue = (queue.0 + length, queue.1.max(lag));
        }
        for (sale, (length, lag)) in queues {
            self.metrics.queue_length.with_label_values(&[sale.as_str()]).set(length);
            self.metrics.queue_lag_seconds.with_label_values(&[sale.as_str()]).set(lag);
        }
    }

    /// Follows the registry of sales and shards: adds the streams registered since the last
    /// refresh (a seed registers them before seeding), with their consumer group, and drops the
    /// streams of sales and shards no longer registered (a retired sale), with the sale's metric
    /// series once none of its streams is left. After a failed step, first creates the group
    /// again on every stream it knows.
    async fn refresh_sales(&mut self) -> anyhow::Result<()> {
        if self.recreate_groups {
            for key in self.streams.keys() {
                order_stream::create_group(&mut self.redis, key).await.context("creating consumer group")?;
            }
            self.recreate_groups = false;
        }
        let due = self.sales_refreshed_at.is_none_or(|t| t.elapsed() >= SALES_REFRESH);
        if !due {
            return Ok(());
        }
        let listed: HashMap<String, SaleId> =
            queue::streams(&self.sales).await.context("listing sales")?.into_iter().collect();
        let mut dropped = Vec::new();
        self.streams.retain(|key, sale| {
            let keep = listed.contains_key(key);
            if !keep {
                dropped.push(sale.clone());
            }
            keep
        });
        for sale in dropped {
            if !self.streams.values().any(|s| *s == sale) {
                self.metrics.forget_sale(sale.as_str());
            }
        }
        for (key, sale) in listed {
            if !self.streams.contains_key(&key) {
                order_stream::create_group(&mut self.redis, &key).await.context("creating consumer group")?;
                self.streams.insert(key, sale);
            }
        }
        self.metrics.worker_streams.with_label_values(&["ready"]).set(self.streams.len() as i64);
        self.sales_refreshed_at = Some(Instant::now());
        Ok(())
    }

    /// XAUTOCLAIM on every stream: entries idle longer than the claim timeout become ours.
    async fn claim_stale(&mut self) -> anyhow::Result<Vec<(String, Vec<StreamId>)>> {
        let min_idle = self.settings.claim_timeout.as_millis() as u64;
        let mut claimed = Vec::new();
        let mut more = false;
        let streams: Vec<String> = self.streams.keys().cloned().collect();
        for stream in streams {
            let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(&stream)
                .arg(CONSUMER_GROUP)
                .arg(&self.settings.consumer)
                .arg(min_idle)
                .arg("0-0")
                .arg(StreamAutoClaimOptions::default().count(self.settings.batch))
                .query_async(&mut self.redis)
                .await
                .context("claiming stale orders")?;
            more |= reply.claimed.len() >= self.settings.batch;
            if !reply.claimed.is_empty() {
                tracing::info!(
                    stream,
                    entries = reply.claimed.len(),
                    "claimed orders left pending by another consumer"
                );
                claimed.push((stream, reply.claimed));
            }
        }
        let interval = (self.settings.claim_timeout / 2).max(Duration::from_millis(100));
        self.next_claim_at = if more { Instant::now() } else { Instant::now() + interval };
        Ok(claimed)
    }

    /// XREADGROUP over every stream from `id` ("0": own pending entries; ">": new entries).
    async fn read(&mut self, id: &str, block: Option<Duration>) -> anyhow::Result<Vec<(String, Vec<StreamId>)>> {
        if self.redis.is_cluster() {
            return self.read_each(id, block).await;
        }
        let keys: Vec<&String> = self.streams.keys().collect();
        let ids = vec![id; keys.len()];
        let mut options =
            StreamReadOptions::default().group(CONSUMER_GROUP, &self.settings.consumer).count(self.settings.batch);
        if let Some(block) = block {
            options = options.block(block.as_millis() as usize);
        }
        let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg(&options)
            .arg("STREAMS")
            .arg(&keys)
            .arg(&ids)
            .query_async(&mut self.redis.clone())
            .await
            .context("reading orders")?;
        Ok(reply
            .map(|r| r.keys.into_iter().filter(|k| !k.ids.is_empty()).map(|k| (k.key, k.ids)).collect())
            .unwrap_or_default())
    }

    /// On a cluster each sale's stream has a slot of its own, and one XREADGROUP may not span
    /// slots: one read per stream, all at once, without BLOCK (a blocking read would hold the
    /// node's shared connection). When every stream is empty and the caller would have blocked,
    /// it waits [`CLUSTER_POLL`] instead, so orders wait at most that long to be read.
    async fn read_each(&mut self, id: &str, block: Option<Duration>) -> anyhow::Result<Vec<(String, Vec<StreamId>)>> {
        let options =
            StreamReadOptions::default().group(CONSUMER_GROUP, &self.settings.consumer).count(self.settings.batch);
        let reads = self.streams.keys().map(|stream| {
            let (mut con, mut cmd) = (self.redis.clone(), redis::cmd("XREADGROUP"));
            cmd.arg(&options).arg("STREAMS").arg(stream).arg(id);
            async move { cmd.query_async::<Option<StreamReadReply>>(&mut con).await }
        });
        let replies = futures::future::try_join_all(reads).await.context("reading orders")?;
        let batches: Vec<_> = replies
            .into_iter()
            .flatten()
            .flat_map(|r| r.keys)
            .filter(|k| !k.ids.is_empty())
            .map(|k| (k.key, k.ids))
            .collect();
        if batches.is_empty()
            && let Some(block) = block
        {
            tokio::time::sleep(block.min(CLUSTER_POLL)).await;
        }
        Ok(batches)
    }

    /// Writes the entries to Postgres in one statement, then acknowledges them stream by stream.
    async fn persist(&mut self, batches: Vec<(String, Vec<StreamId>)>) -> anyhow::Result<StepOutcome> {
        let mut orders = Vec::new();
        let mut entries = 0;
        for (stream, ids) in &batches {
            entries += ids.len();
            for entry in ids {
                match order_stream::decode(entry) {
                    Ok(order) => orders.push(order),
                    Err(why) => {
                        self.stats.malformed += 1;
                        self.metrics.worker_orders.with_label_values(&["malformed"]).inc();
                        tracing::error!(stream, entry_id = entry.id, fields = ?entry.map, why, "malformed order entry dropped");
                    }
                }
            }
        }
        let timer = self.metrics.worker_insert_seconds.start_timer();
        let report = db::insert_orders(&self.pool, &orders).await.context("inserting orders")?;
        timer.observe_duration();
        self.metrics.worker_batch_size.observe(entries as f64);
        for conflict in &report.conflicts {
            tracing::warn!(order_id = %conflict.order_id, sale_id = %conflict.sale_id, user_id = %conflict.user_id,
                "order refused: the user already has another order in this sale");
        }
        self.stats.inserted += report.inserted as u64;
        self.stats.redelivered += report.already_stored as u64;
        self.stats.conflicts += report.conflicts.len() as u64;
        let counted = [
            ("inserted", report.inserted),
            ("redelivered", report.already_stored),
            ("conflict", report.conflicts.len()),
        ];
        for (result, n) in counted {
            self.metrics.worker_orders.with_label_values(&[result]).inc_by(n as u64);
        }

        for (stream, ids) in &batches {
            let ids: Vec<&str> = ids.iter().map(|e| e.id.as_str()).collect();
            let _acked: i64 = lua::run(lua::ACK.key(stream).arg(CONSUMER_GROUP).arg(&ids), &mut self.redis)
                .await
                .context("acknowledging orders")?;
        }
        Ok(StepOutcome::Processed { entries })
    }
}
