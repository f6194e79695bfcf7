//! What runs beside the HTTP server on connections and pools of its own, built for `seckill
//! serve` and for `seckill worker` alike: the order worker, and the webhook dispatcher with the
//! endpoints `SECKILL_WEBHOOK_URL` names.

use std::sync::Arc;

use anyhow::Context;

use crate::config::Config;
use crate::db;
use crate::metrics::Metrics;
use crate::orders::worker::{Worker, WorkerSettings};
use crate::redis::connection;
use crate::webhooks::{self, Changes, Dispatcher};

/// Postgres connections of the worker's own pool: one batch insert at a time, plus one spare.
pub(super) const WORKER_DATABASE_CONNECTIONS: u32 = 2;

/// The worker gets its own Redis connection and Postgres pool, opened from the task that runs it:
/// a blocking XREADGROUP must not stall the requests' shared connection, and a connection opened
/// by an HTTP worker thread dies with that thread's runtime, which stops before the worker has
/// finished its last batch at shutdown.
/// `role` names the consumer when SECKILL_WORKER_CONSUMER does not ([`Config::consumer_name`]).
pub(super) fn build_worker(config: &Config, role: &str, metrics: Arc<Metrics>) -> anyhow::Result<Worker> {
    let redis =
        connection::connect(&config.redis_url, config.worker_block + config.redis_timeout).context("redis url")?;
    let pool = db::connect_with_timeouts(
        &config.database_url,
        WORKER_DATABASE_CONNECTIONS,
        &config.database.session_parameters(),
    )
    .context("database url")?;
    let settings = WorkerSettings {
        key_prefix: config.key_prefix.clone(),
        consumer: config.consumer_name(role),
        batch: config.worker_batch as usize,
        block: config.worker_block,
        claim_timeout: config.worker_claim_timeout,
        insert_timeout: config.database.worker_insert_timeout,
    };
    Ok(Worker::new(redis, pool, settings, metrics))
}

/// Registers the endpoints `SECKILL_WEBHOOK_URL` names (each once; a disabled one stays
/// disabled, and the log says so).
pub(super) async fn register_endpoints(config: &Config, pool: &sqlx::PgPool) -> anyhow::Result<()> {
    webhooks::endpoints::register_configured(pool, &config.webhooks.webhook_url)
        .await
        .context("registering the endpoints of SECKILL_WEBHOOK_URL (is Postgres reachable?)")
}

/// Postgres connections of the dispatcher's own pool (its claims and outcomes never wait behind
/// the requests', nor hold theirs).
pub(super) const DISPATCHER_DATABASE_CONNECTIONS: u32 = 4;

/// The webhook dispatcher, when `SECKILL_WEBHOOK_SECRET` is set, on a pool of its own; it reads
/// the endpoints again at once when `changes` says so.
pub(super) fn build_dispatcher(
    config: &Config,
    metrics: Arc<Metrics>,
    changes: Changes,
) -> anyhow::Result<Option<Dispatcher>> {
    let Some(settings) = config.webhooks.settings().map_err(anyhow::Error::msg).context("webhooks")? else {
        return Ok(None);
    };
    let pool = db::connect_with_timeouts(
        &config.database_url,
        DISPATCHER_DATABASE_CONNECTIONS,
        &config.database.session_parameters(),
    )
    .context("database url")?;
    Ok(Some(Dispatcher::new(pool, settings, metrics, changes).context("webhook client")?))
}
