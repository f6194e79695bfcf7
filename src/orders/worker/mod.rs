//! The order worker: reads every sale's order stream with a consumer group, writes each batch to
//! Postgres in one idempotent statement, and acknowledges (XACK, then `lua/trim.lua`) only after the commit.
//! Every draw's entry stream (`crate::draw::entries`) is read, claimed and acknowledged alike, its
//! entries written to `draw_entries` once (`entries`).
//!
//! Nothing is acknowledged early, so a crash at any point leaves the batch pending: this consumer
//! re-reads its own pending entries when it restarts (or after an error), and any other consumer
//! claims entries that stayed pending longer than the claim timeout (XAUTOCLAIM). Redelivered
//! orders are no-ops thanks to the order id primary key and the (sale_id, user_id) unique key.
//!
//! One sale's broken stream never stalls the others: each stream has a state
//! ([`super::streams`]), surveyed about once a second (`survey`); only readable streams are read
//! (`reads`), and a read, claim or acknowledgement that fails on one stream takes that stream out
//! until the next survey instead of failing the step. Consumers idle past the claim timeout with
//! nothing pending are removed (`lua/prune_consumers.lua`).

mod entries;
mod insert;
mod reads;
mod survey;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::streams::StreamId;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::streams::{StreamHealth, StreamState};
use crate::domain::{DropId, SaleId};
use crate::metrics::Metrics;
use crate::purchase::Sales;
use crate::redis::Keyspace;
use crate::redis::connection::RedisConnection;
use crate::redis::connection::is_redis_outage;
use crate::redis::order_stream;
use crate::telemetry::traces;

/// How often the worker re-reads the registry of sales (a retirement waits this long, among
/// other things, before it deletes a sale's keys).
pub const SALES_REFRESH: Duration = Duration::from_millis(500);
/// How often the worker surveys every stream (and right after a stream failed).
const SURVEY: Duration = Duration::from_secs(1);

/// How often the worker samples each sale's queue for `/metrics`.
const QUEUE_SAMPLE: Duration = Duration::from_secs(1);
/// On a Redis Cluster, how long the worker waits before reading again when no stream had orders.
pub const CLUSTER_POLL: Duration = Duration::from_millis(25);

/// How long the worker waits after a step that wrote orders before it reads again, so that under
/// load each step carries what arrived meanwhile: fuller steps, fewer reads, inserts, `XACK`s
/// and `XTRIM`s per order (one stream entry already carries a whole purchase call's orders). An
/// order then reaches Postgres at most this much later; the first after a quiet spell as soon as
/// a read finds it. Measured with `cargo xtask ab`, 8 paired rounds: 105-150 orders a step became
/// 285-350; app CPU per purchase 0.92x (paired median; 0.965x the ratio of the medians), Postgres
/// 0.86x (docs/benchmarks.md).
const LINGER: Duration = Duration::from_millis(5);

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
    /// Orders pending this long with another consumer are claimed; consumers idle this long
    /// with nothing pending are removed.
    pub claim_timeout: Duration,
    /// Longest one batch insert may take before the step gives up (its orders stay pending).
    pub insert_timeout: Duration,
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
    /// Draw entries written to Postgres (a redelivered one is not counted).
    pub draw_entries: u64,
}

/// One consumer of the order streams.
pub struct Worker {
    redis: RedisConnection,
    /// The same connection, for the registries of sales and shards.
    sales: Sales,
    pool: PgPool,
    settings: WorkerSettings,
    /// Stream key -> its sale and state, for every registered sale and shard.
    streams: HashMap<String, Tracked>,
    sales_refreshed_at: Option<Instant>,
    /// Re-read this consumer's own pending entries before new ones (at start and after errors).
    read_own_pending: bool,
    next_survey_at: Instant,
    next_claim_at: Instant,
    next_prune_at: Instant,
    health: Arc<StreamHealth>,
    stats: WorkerStats,
    metrics: Arc<Metrics>,
    queues_sampled_at: Option<Instant>,
    /// The last insert wrote events (a webhook endpoint is registered): the next one writes
    /// them too, and the batch's sales are checked in Redis for `sale.sold_out` (a hint:
    /// Postgres decides what is written, `db::Hint`).
    hooked: bool,
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
            next_survey_at: Instant::now(),
            next_claim_at: Instant::now(),
            next_prune_at: Instant::now(),
            health: Arc::default(),
            stats: WorkerStats::default(),
            metrics,
            queues_sampled_at: None,
            hooked: false,
        }
    }

    /// The worker's report of its streams, for `/readyz` and the admin overview.
    pub fn health(&self) -> Arc<StreamHealth> {
        self.health.clone()
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
                Ok(StepOutcome::Processed { .. }) => {
                    backoff = BACKOFF_MIN;
                    tokio::select! {
                        _ = tokio::time::sleep(LINGER) => {}
                        _ = shutdown.cancelled() => {}
                    }
                }
                Ok(StepOutcome::Idle) => backoff = BACKOFF_MIN,
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
            self.next_survey_at = Instant::now();
        }
        result
    }

    async fn step_inner(&mut self) -> anyhow::Result<StepOutcome> {
        self.refresh_sales().await?;
        self.survey_streams().await?;
        self.prune_consumers().await;
        self.sample_queues().await;
        if self.readable().is_empty() {
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

    /// Writes the entries to Postgres in one statement, then acknowledges them stream by stream.
    /// With traces on, the batch is a span linked to each purchase that wrote an entry (its
    /// `traceparent`), and the insert a span inside it.
    async fn persist(&mut self, batches: Vec<(String, Vec<StreamId>)>) -> anyhow::Result<StepOutcome> {
        if !traces::on() {
            return self.persist_batch(batches).await;
        }
        let entries: usize = batches.iter().map(|(_, ids)| ids.len()).sum();
        let span = tracing::info_span!(
            "worker.batch",
            otel.kind = "consumer",
            messaging.system = "redis",
            messaging.operation.type = "process",
            messaging.batch.message_count = entries,
        );
        for entry in batches.iter().flat_map(|(_, ids)| ids) {
            for traceparent in order_stream::traceparents(entry) {
                traces::link(&span, &traceparent);
            }
        }
        self.persist_batch(batches).instrument(span).await
    }

    async fn persist_batch(&mut self, batches: Vec<(String, Vec<StreamId>)>) -> anyhow::Result<StepOutcome> {
        let (entries, mut batches): (Vec<_>, Vec<_>) =
            batches.into_iter().partition(|(stream, _)| self.streams.get(stream).is_some_and(|t| t.draw.is_some()));
        let entered = self.persist_entries(entries).await?;
        if batches.is_empty() {
            return Ok(StepOutcome::Processed { entries: entered });
        }
        // An entry's sale is its stream's. Entries of a stream not tracked (none are read) stay
        // pending, never acknowledged.
        batches.retain(|(stream, ids)| {
            let tracked = self.streams.contains_key(stream);
            if !tracked {
                tracing::error!(
                    stream,
                    entries = ids.len(),
                    "entries of a stream the worker does not track left pending"
                );
            }
            tracked
        });
        let mut orders = Vec::new();
        let mut entries = 0;
        for (stream, ids) in &batches {
            entries += ids.len();
            let sale = &self.streams[stream].sale;
            for entry in ids {
                // A malformed order is dropped (acknowledged with its entry); the others of its
                // entry are stored.
                let decoded = order_stream::decode_each(entry, sale).unwrap_or_else(|why| vec![Err(why)]);
                for order in decoded {
                    match order {
                        Ok(order) => orders.push(order),
                        Err(why) => {
                            self.stats.malformed += 1;
                            self.metrics.worker_orders.with_label_values(&["malformed"]).inc();
                            tracing::error!(stream, entry_id = entry.id, fields = ?entry.map, why, "malformed order \
                                dropped");
                        }
                    }
                }
            }
        }
        let timer = self.metrics.worker_insert_seconds.start_timer();
        let span = match traces::on() {
            true => tracing::info_span!(
                "postgres.insert",
                otel.kind = "client",
                db.system.name = "postgresql",
                db.operation.name = "INSERT",
                db.collection.name = "orders",
                seckill.orders = orders.len(),
            ),
            false => tracing::Span::none(),
        };
        let report = self.insert(&orders, span).await?;
        timer.observe_duration();
        self.hooked = report.hooked;
        // Orders, not entries: since issue 54 an entry carries every order of its call.
        self.metrics.worker_batch_size.observe(orders.len() as f64);
        for conflict in &report.conflicts {
            tracing::warn!(order_id = %conflict.order_id, sale_id = %conflict.sale_id,
                user_id = conflict.user_id.as_str(),
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

        // A stream that fails its acknowledgement keeps its entries pending (redelivered as
        // no-ops once it is readable again); the others are acknowledged all the same.
        for (stream, ids) in &batches {
            let ids: Vec<&str> = ids.iter().map(|e| e.id.as_str()).collect();
            let acked = order_stream::acknowledge(&mut self.redis, stream, &ids).await;
            match acked {
                Ok(_) => {}
                Err(err) if is_redis_outage(&err) => return Err(err).context("acknowledging orders"),
                Err(err) => self.suspect(stream, &err),
            }
        }
        Ok(StepOutcome::Processed { entries: entries + entered })
    }
}

/// One registered stream as the worker knows it.
#[derive(Debug, Clone)]
struct Tracked {
    /// The stream's sale; a draw's entry stream's: its drop's id, as the reports name it.
    sale: SaleId,
    /// A draw's entry stream: its drop.
    draw: Option<DropId>,
    /// The sale's meta key (shard 0's for every shard): gone means the sale is lost.
    meta: String,
    /// `None` until the first survey.
    state: Option<StreamState>,
    detail: String,
    readable: bool,
    /// The error a read, claim or acknowledgement met since the last survey.
    suspect: Option<String>,
}

impl Tracked {
    fn new(sale: SaleId, meta: String) -> Self {
        Self { sale, draw: None, meta, state: None, detail: String::new(), readable: false, suspect: None }
    }
}
