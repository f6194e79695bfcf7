//! The process's file descriptors: its `nofile` soft limit (raised to the hard limit), what needs
//! descriptors besides the clients' connections (the reserve, by part), and the connection
//! budget left for the listeners, said in the log at start (docs/operations.md, "The connection
//! budget").

use secrecy::ExposeSecret;

use super::background::{DISPATCHER_DATABASE_CONNECTIONS, WORKER_DATABASE_CONNECTIONS};
use crate::config::Config;
use crate::http::edge::{Budget, LINGERING_REFUSALS, MAX_BUDGET, QUEUED_CONNECTIONS};
use crate::redis::connection::RedisTarget;
use crate::webhooks::endpoints::MAX_ENDPOINTS;
use crate::webhooks::sender::CONCURRENCY as WEBHOOK_CONCURRENCY;

/// The nodes a Redis Cluster connection is taken to reach (one connection to each master and
/// replica), unless `SECKILL_REDIS_URL` names more seed nodes.
pub const CLUSTER_NODES: u64 = 12;
/// Descriptors of each HTTP worker's runtime (its poll and wakers: 3 measured).
const FILES_PER_HTTP_WORKER: u64 = 4;
/// The budget of the metrics listener (`SECKILL_METRICS_LISTEN`): its probes and scrapes.
pub const METRICS_CONNECTIONS: u32 = 16;
/// Descriptors opened for a moment: a pool's connection replaced while the old one closes, a
/// DNS lookup of the webhook client, the trace exporter's connections.
const TRANSIENT: u64 = 16;
/// The descriptors counted open at start where `/proc/self/fd` cannot be read.
const OPEN_AT_START_UNKNOWN: u64 = 32;
/// Below this budget the log warns that `nofile` is too low for the service.
const LOW_BUDGET: u64 = 64;

/// What needs descriptors besides the public listener's connections, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reserve {
    /// Every Redis connection at its most: the shared one, one per HTTP worker, the worker's,
    /// the events listener's, the confirming pool's (on a cluster, each once per node).
    pub redis: u64,
    /// The Postgres pools at their maxima: the requests', the worker's, the dispatcher's.
    pub postgres: u64,
    /// The webhook client's connections: as many per endpoint as attempts in flight.
    pub webhooks: u64,
    /// The metrics listener's own connections.
    pub metrics: u64,
    /// What is open at start (standard streams, the log, the listeners, the main runtime) and
    /// the HTTP workers' runtimes.
    pub files: u64,
    /// Connections refused at once while they are answered, linger or wait for a worker, and
    /// what is open for a moment.
    pub headroom: u64,
}

impl Reserve {
    /// Every part together.
    pub fn total(&self) -> u64 {
        self.redis + self.postgres + self.webhooks + self.metrics + self.files + self.headroom
    }
}

/// The figures the budget comes from, and the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptors {
    /// The soft limit after raising it (`None`: unknown).
    pub nofile: Option<u64>,
    pub reserve: Reserve,
    pub budget: Budget,
}

/// The descriptors of `serve` under `config`, with `workers` HTTP workers (`run_worker`: the
/// worker runs in the process too), `nofile` its soft limit and `open_at_start` the descriptors
/// already open (`None`: unknown).
pub fn plan(
    config: &Config,
    workers: usize,
    run_worker: bool,
    nofile: Option<u64>,
    open_at_start: Option<u64>,
) -> Descriptors {
    let workers = workers as u64;
    let nodes = match RedisTarget::parse(config.redis_url.expose_secret()) {
        Ok(RedisTarget::Cluster(seeds)) => CLUSTER_NODES.max(seeds.len() as u64),
        _ => 1,
    };
    let durability = &config.durability;
    let confirming = if durability.enabled() { u64::from(durability.confirm_connections) } else { 0 };
    // The shared connection, one per HTTP worker, the events listener's, the worker's.
    let redis = (1 + workers + 1 + u64::from(run_worker) + confirming) * nodes;
    // Endpoints are data (any instance may register one), so a sending instance (one with the
    // signing secret) reserves for as many as there may be.
    let sending = config.webhooks.webhook_secret.is_some();
    let endpoints = if sending { MAX_ENDPOINTS as u64 } else { 0 };
    let postgres = u64::from(config.database_max_connections)
        + if run_worker { u64::from(WORKER_DATABASE_CONNECTIONS) } else { 0 }
        + if sending { u64::from(DISPATCHER_DATABASE_CONNECTIONS) } else { 0 };
    let metrics = config.edge.metrics_listen.map_or(0, |_| u64::from(METRICS_CONNECTIONS));
    let reserve = Reserve {
        redis,
        postgres,
        webhooks: endpoints * WEBHOOK_CONCURRENCY as u64,
        metrics,
        files: open_at_start.unwrap_or(OPEN_AT_START_UNKNOWN) + FILES_PER_HTTP_WORKER * workers,
        headroom: u64::from(LINGERING_REFUSALS + QUEUED_CONNECTIONS) + TRANSIENT,
    };
    let public = nofile.map_or(u64::from(MAX_BUDGET), |n| n.saturating_sub(reserve.total()));
    let public = public.clamp(1, u64::from(MAX_BUDGET)) as u32;
    let operations = config.edge.metrics_listen.map(|_| METRICS_CONNECTIONS);
    Descriptors { nofile, reserve, budget: Budget { public, operations } }
}

/// The descriptors open now, from `/proc/self/fd` (`None` elsewhere).
pub fn open_now() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd").ok().map(|dir| dir.count() as u64)
}

impl Descriptors {
    /// Says the figures in the log (a warning when the budget is small or `nofile` unknown).
    pub fn log(&self, per_client_cap: u32) {
        let Reserve { redis, postgres, webhooks, metrics, files, headroom } = self.reserve;
        let (budget, reserve) = (self.budget.public, self.reserve.total());
        let nofile = self.nofile.map_or_else(|| "unknown".to_owned(), |n| n.to_string());
        tracing::info!(
            nofile = %nofile,
            reserve,
            redis,
            postgres,
            webhooks,
            metrics,
            files,
            headroom,
            budget,
            per_client_cap,
            "connection budget"
        );
        if self.nofile.is_none_or(|n| n < reserve + LOW_BUDGET) {
            tracing::warn!(
                nofile = %nofile,
                reserve,
                budget,
                "the open files limit leaves few or unknown descriptors for connections: raise nofile (LimitNOFILE=, \
                 the container's ulimits)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    fn config(args: &[&str]) -> Config {
        Cli::try_parse_from([&["seckill", "serve"], args].concat()).unwrap().config().unwrap()
    }

    #[test]
    fn the_budget_is_nofile_less_the_pools_the_files_and_the_headroom() {
        let plan = plan(&config(&[]), 2, true, Some(1024), Some(20));
        let reserve = Reserve { redis: 5, postgres: 12, webhooks: 0, metrics: 0, files: 28, headroom: 64 };
        assert_eq!(plan.reserve, reserve);
        assert_eq!(plan.budget, Budget { public: 1024 - 109, operations: None });
    }

    #[test]
    fn every_part_grows_with_what_the_settings_open() {
        let busy = config(&[
            "--redis-url",
            "redis://a:1,redis://b:2",
            "--confirm-replicas",
            "1",
            "--database-max-connections",
            "50",
            "--webhook-url",
            "http://127.0.0.1:1/a,http://127.0.0.1:1/b",
            "--webhook-secret",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "--metrics-listen",
            "127.0.0.1:9091",
        ]);
        let plan = plan(&busy, 4, false, Some(65_536), None);
        // The cluster's connections: shared, 4 per HTTP worker, events, 16 confirming; 12 nodes each.
        assert_eq!(plan.reserve.redis, (1 + 4 + 1 + 16) * CLUSTER_NODES);
        assert_eq!((plan.reserve.postgres, plan.reserve.webhooks), (50 + 4, 16 * 32));
        assert_eq!((plan.reserve.metrics, plan.reserve.files), (16, 32 + 16));
        assert_eq!(plan.budget.operations, Some(METRICS_CONNECTIONS));
        assert_eq!(u64::from(plan.budget.public), 65_536 - plan.reserve.total());
    }

    #[test]
    fn a_limit_below_the_reserve_or_unknown_still_gives_a_budget() {
        assert_eq!(plan(&config(&[]), 2, true, Some(50), Some(20)).budget.public, 1);
        assert_eq!(plan(&config(&[]), 2, true, None, None).budget.public, MAX_BUDGET);
    }
}
