//! The composition root: builds the service from its configuration and runs it until told to
//! stop ([`Application`]), with the ordered shutdown; the bodies of the other commands
//! (`seckill worker`, `migrate`, `reconcile`, `retire`, `token`, `pay`, `solve`) are in `commands`,
//! `seckill draw verify` in `draw`; the order worker and the webhook dispatcher both build, on
//! connections of their own, in `background`.

mod background;
mod commands;
mod descriptors;
mod draw;
mod server;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use actix_web::dev::Server;
use anyhow::Context;
use secrecy::{ExposeSecret, SecretString};
use tokio_util::sync::CancellationToken;

use self::background::{build_dispatcher, build_worker, register_endpoints};
use self::commands::connect_and_migrate;
use crate::admission::Admission;
use crate::challenge::Challenges;
use crate::config::Config;
use crate::draw::run::runner::Runner as DrawRunner;
use crate::http::AppState;
use crate::http::client_ip::{ClientKeys, TrustedProxies};
use crate::http::edge::Edge;
use crate::http::rate_limit::RateLimitFields;
use crate::limiter::Limiter;
use crate::limiter::local::LocalLimiter;
use crate::metrics::Metrics;
use crate::orders::worker::Worker;
use crate::purchase::Sales;
use crate::purchase::events::{self, SaleEvent};
use crate::purchase::retired::RetiredSales;
use crate::purchase::sold_out::SoldOutFlags;
use crate::redis::Keyspace;
use crate::redis::confirm::ConfirmPool;
use crate::redis::connection::{self, RedisTarget};
use crate::reservations::Reservations;
use crate::retire::Retirer;
use crate::retire::janitor::Janitor;
use crate::shop::{Limits, Parts, Settings, Shop};
use crate::webhooks::{Changes, Dispatcher};

pub use commands::{
    EXIT_CONFIG_REFUSED, migrate, print_operator_token, print_token, run_reconcile, run_retire, run_worker,
    send_payment, solve,
};
pub use draw::verify_draw;

/// A built service: the HTTP server bound to its port, the listener that keeps its sold-out flags
/// and retired sales fresh, the retirement janitor, and optionally the worker with the
/// reservations' sweeper.
pub struct Application {
    server: Server,
    local_addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
    worker: Option<Worker>,
    /// The reservations' sweeper, run with the worker.
    sweeper: Option<Reservations>,
    janitor: Janitor,
    /// Runs the draws whose entries have closed (every instance; one run per draw at a time).
    draws: DrawRunner,
    /// The webhook dispatcher, when `SECKILL_WEBHOOK_SECRET` is set.
    dispatcher: Option<Dispatcher>,
    events: SaleEvents,
    redis_url: SecretString,
    events_channel: String,
}

impl Application {
    /// Connects (lazily) to Redis and Postgres, applies migrations, binds the listener.
    pub async fn build(config: &Config, run_worker: bool) -> anyhow::Result<Self> {
        config.validate().map_err(anyhow::Error::msg).context("configuration")?;
        let policy = config.rate_limit_policy().map_err(anyhow::Error::msg).context("rate limit")?;
        let limits = Limits {
            address: Limiter::new(policy),
            buyer: config.user_rate_limit_policy().map_err(anyhow::Error::msg)?.map(Limiter::new),
            scope: config.rate_limit_scope,
            from_memory: LocalLimiter::new(config.sold_out_rate_limit()),
            proof_checks: LocalLimiter::new(config.rate_limit),
            unknown_sales: LocalLimiter::new(config.rate_limit),
        };
        let rate_limit = RateLimitFields::new(&limits).context("rate limit policies")?;
        let verifier = config.auth.verifier().map_err(anyhow::Error::msg).context("SECKILL_AUTH")?;
        if verifier.is_none() {
            tracing::warn!("SECKILL_AUTH=none: POST /buy trusts the body's user_id (for a trusted gateway only)");
        } else if config.auth.jwt_audience.is_none() {
            tracing::warn!(
                "SECKILL_JWT_AUDIENCE is not set: tokens that name no audience are accepted, so any token your \
                 identity provider signs without one buys here; set it to this service's audience"
            );
        }
        // The Redis URL first: a malformed one is refused before Postgres is reached (or migrated).
        let redis = connection::connect(&config.redis_url, config.redis_timeout).context("redis url")?;
        let pool = connect_and_migrate(config).await?;
        register_endpoints(config, &pool).await?;
        let operators = config.operators.roster(config.admin_token.as_ref()).map_err(anyhow::Error::msg)?;
        if operators.is_empty() {
            tracing::warn!("neither SECKILL_ADMIN_TOKEN nor named operators are set: admin routes will answer 403");
        } else {
            tracing::info!(named = operators.named(), admin_token = config.admin_token.is_some(), "admin credentials");
        }
        let redis = Keyspace::new(redis, config.key_prefix.clone());
        let events_channel = redis.events_channel();
        let sold_out = Arc::new(SoldOutFlags::with_ttl(config.sold_out_flag_ttl));
        let metrics = Arc::new(Metrics::new());
        let cpus = server::default_workers();
        let workers = config.http_workers.map_or(cpus, usize::from);
        let sizes = Some(metrics.purchase_batch_size.clone());
        let sales = Sales::new(redis.clone()).batching(config.purchase_batch, sizes, workers, cpus);
        let sales = confirmed(sales, config)?;
        let nofile = server::raise_open_files_limit();
        let listener = bind(config.listen).with_context(|| format!("binding {}", config.listen))?;
        let local_addr = listener.local_addr()?;
        let metrics_listener = match config.edge.metrics_listen {
            Some(addr) => Some(bind(addr).with_context(|| format!("binding the metrics listener {addr}"))?),
            None => None,
        };
        let metrics_addr = metrics_listener.as_ref().map(TcpListener::local_addr).transpose()?;
        let worker = if run_worker {
            Some(build_worker(config, &local_addr.port().to_string(), metrics.clone())?)
        } else {
            None
        };
        let retired = RetiredSales::new(pool.clone());
        let retirer = Retirer::new(sales.clone(), pool.clone(), metrics.clone(), config.worker_block);
        let janitor = Janitor::new(
            retirer.clone(),
            config.retire.retire_after,
            config.retire.retire_interval,
            config.consumer_name(&local_addr.port().to_string()),
        );
        let draws = DrawRunner::new(sales.keyspace().clone(), pool.clone());
        let admission_key = config.admission.key(config.admin_token.as_ref());
        let challenges =
            Challenges::new(redis.clone(), admission_key.as_deref(), config.challenge.settings(), config.ipv6_prefix);
        let events = SaleEvents {
            sold_out: sold_out.clone(),
            retired: retired.clone(),
            sales: sales.clone(),
            challenges: challenges.clone(),
        };
        let reservations = Reservations::new(sales.clone(), pool.clone(), metrics.clone());
        let endpoint_changes = Changes::default();
        let dispatcher = build_dispatcher(config, metrics.clone(), endpoint_changes.clone())?;
        // The sweeper runs where the worker runs: the processes that write orders to Postgres.
        let sweeper = run_worker.then(|| reservations.clone());
        let admission = Admission::new(redis.clone(), admission_key.as_deref());
        let clients = ClientKeys {
            proxies: TrustedProxies::new(config.trusted_proxies.clone()),
            ipv6_prefix: config.ipv6_prefix,
        };
        let descriptors = descriptors::plan(config, workers, run_worker, nofile, descriptors::open_now());
        descriptors.log(config.edge.max_connections_per_client);
        let edge = Edge::new(
            config.edge.settings(),
            descriptors.budget,
            config.ipv6_prefix,
            clients.proxies.clone(),
            &metrics,
        );
        let shop = Shop::new(Parts {
            sales,
            sold_out,
            retired,
            retirer,
            pool: pool.clone(),
            limits,
            metrics: metrics.clone(),
            worker_health: worker.as_ref().map(Worker::health),
            reservations,
            settings: Settings {
                payment_secret: config.payments.payment_secret.clone(),
                default_payment_window: config.payments.payment_window,
                admission_ttl: config.admission.admission_ttl,
                challenge_cost: config.challenge.challenge_cost,
            },
            admission,
            challenges,
            endpoint_changes,
        });
        let state = AppState { shop, verifier: verifier.map(Arc::new), clients, rate_limit, operators };
        let listeners = server::Listeners { public: listener, metrics: metrics_listener };
        let server = server::build(listeners, state, edge, workers, config.shutdown_timeout)?;
        tracing::info!(%local_addr, metrics = ?metrics_addr, worker = run_worker, "listening");
        Ok(Self {
            server,
            local_addr,
            metrics_addr,
            worker,
            sweeper,
            janitor,
            draws,
            dispatcher,
            events,
            redis_url: config.redis_url.clone(),
            events_channel,
        })
    }

    /// The address the server actually bound (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address of the metrics listener, if `SECKILL_METRICS_LISTEN` set one.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Serves until `shutdown` fires (or the server fails): then stops accepting and lets
    /// in-flight requests finish; the worker keeps draining orders meanwhile, and stops only
    /// after the server has, finishing its last batch (committed and acknowledged).
    pub async fn run_until_stopped(self, shutdown: CancellationToken) -> anyhow::Result<()> {
        let handle = self.server.handle();
        let worker_stop = CancellationToken::new();
        let worker = self.worker.map(|w| tokio::spawn(w.run(worker_stop.clone())));
        let events = tokio::spawn({
            let (url, channel, events, stop) = (self.redis_url, self.events_channel, self.events, worker_stop.clone());
            async move { events::listen(url, channel, &|event| events.apply(event), stop).await }
        });
        let janitor = tokio::spawn(self.janitor.run(worker_stop.clone()));
        let draws = tokio::spawn(self.draws.run(worker_stop.clone()));
        let sweeper = self.sweeper.map(|s| tokio::spawn(s.sweep(worker_stop.clone())));
        let dispatcher_stop = CancellationToken::new();
        let dispatcher = self.dispatcher.map(|d| tokio::spawn(d.run(dispatcher_stop.clone())));
        let stopper = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                shutdown.cancelled().await;
                handle.stop(true).await;
            }
        });
        let served = self.server.await.context("http server");
        shutdown.cancel();
        worker_stop.cancel();
        stopper.await.context("stopping the http server")?;
        events.await.context("seed events listener")?;
        janitor.await.context("retirement janitor")?;
        draws.await.context("draw runner")?;
        if let Some(sweeper) = sweeper {
            sweeper.await.context("reservation sweeper")?;
        }
        if let Some(worker) = worker {
            worker.await.context("worker task")?;
        }
        // Last: the worker's last batch and the sweeper's last round may have written events.
        dispatcher_stop.cancel();
        if let Some(dispatcher) = dispatcher {
            dispatcher.await.context("webhook dispatcher")?;
        }
        served
    }
}

/// The sales, whose purchases wait for `SECKILL_CONFIRM_REPLICAS` replicas if set. Refused on a
/// Redis Cluster: a purchase and its `WAIT` must share one connection, which redis-rs's cluster
/// client does not give, and each master has replicas of its own (docs/durability.md).
fn confirmed(sales: Sales, config: &Config) -> anyhow::Result<Sales> {
    let durability = &config.durability;
    if !durability.enabled() {
        return Ok(sales);
    }
    let url = match RedisTarget::parse(config.redis_url.expose_secret()).map_err(anyhow::Error::msg)? {
        RedisTarget::Single(url) => url,
        RedisTarget::Cluster(_) => anyhow::bail!(
            "SECKILL_CONFIRM_REPLICAS={} needs one Redis server with replicas, not a Redis Cluster: a purchase and \
             its WAIT must run on one connection, which the cluster client cannot promise (docs/durability.md)",
            durability.confirm_replicas
        ),
    };
    let pool = ConfirmPool::new(
        &url,
        durability.confirm_connections as usize,
        config.redis_timeout,
        durability.confirm_replicas,
        durability.confirm_timeout,
    )
    .context("redis url")?;
    tracing::info!(replicas = durability.confirm_replicas, wait = ?durability.confirm_timeout, "a 201 waits for Redis \
        replicas");
    Ok(sales.confirmed_by(Arc::new(pool)))
}

/// What an instance holds about sales, kept fresh by the events channel.
struct SaleEvents {
    sold_out: Arc<SoldOutFlags>,
    retired: RetiredSales,
    sales: Sales,
    challenges: Challenges,
}

impl SaleEvents {
    fn apply(&self, event: SaleEvent<'_>) {
        match event {
            SaleEvent::Seeded(sale) => {
                self.sold_out.clear(sale);
                self.challenges.forget_asked(sale);
            }
            SaleEvent::Retired(sale) => {
                self.retired.mark(sale);
                self.sold_out.clear(sale);
                self.sales.forget_layout(sale);
                self.challenges.forget_asked(sale);
            }
            SaleEvent::Missed => {
                self.sold_out.clear_all();
                self.challenges.forget_all_asked();
            }
        }
    }
}

/// A token cancelled on Ctrl-C or SIGTERM.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let ctrl_c = tokio::signal::ctrl_c();
        #[cfg(unix)]
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let term = std::future::pending::<()>();
        tokio::select! {
            _ = ctrl_c => tracing::info!("Ctrl-C: shutting down"),
            _ = term => tracing::info!("SIGTERM: shutting down"),
        }
        cancel.cancel();
    });
    token
}

/// Connections the kernel queues for `accept` (capped by `net.core.somaxconn`): actix-web's own
/// default. `std`'s `TcpListener::bind` asks for 128, which a flash crowd opening thousands of
/// connections at once overflows (SYN cookies, retransmitted SYNs, seconds of connect latency).
const LISTEN_BACKLOG: i32 = 2048;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`] and `SO_REUSEADDR` (a restart may bind
/// while the old process's connections are in TIME_WAIT), as actix-web's own `bind` makes it.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;
    use crate::config::Cli;

    #[tokio::test]
    async fn confirmed_purchases_need_one_server_not_a_cluster() {
        let config = |url: &str| {
            Cli::try_parse_from(["seckill", "serve", "--confirm-replicas", "1", "--redis-url", url])
                .unwrap()
                .config()
                .unwrap()
        };
        let url = SecretString::from("redis://127.0.0.1:1".to_owned());
        let sales = || Sales::new(Keyspace::new(connection::connect(&url, Duration::from_secs(1)).unwrap(), "t"));
        let refused = confirmed(sales(), &config("redis+cluster://127.0.0.1:7000")).err().unwrap().to_string();
        assert!(refused.contains("not a Redis Cluster"), "{refused}");
        assert!(confirmed(sales(), &config("redis://127.0.0.1:1")).is_ok());
    }
}
