//! The HTTP server of `seckill serve`: actix-web's `App` on an `actix-server` server assembled
//! as `actix_web::HttpServer` assembles it, with one difference: every accepted stream passes
//! the edge first (`crate::http::edge`: the connection budget and each client's share, head size,
//! read deadline), which `HttpServer` has no hook for. The optional metrics listener
//! (`SECKILL_METRICS_LISTEN`) is a second listener of the same server (same workers), with only
//! the operations routes and a budget of its own.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use actix_http::error::DispatchError;
use actix_http::{HttpService, KeepAlive, Protocol};
use actix_server::{Server, ServerBuilder};
use actix_service::{IntoServiceFactory, ServiceFactoryExt, fn_service, map_config};
use actix_web::App;
use actix_web::dev::AppConfig;
use actix_web::middleware::Condition;
use actix_web::rt::net::TcpStream;

use crate::http::edge::{Edge, QUEUED_CONNECTIONS};
use crate::http::routes::{self, Listener};
use crate::http::{AppState, middleware};
use crate::telemetry::traces;

/// How long a connection may stay idle between requests (actix-web's default).
const KEEP_ALIVE: Duration = Duration::from_secs(5);
/// actix-http's own bound on the first request's head, a backstop behind the edge's read
/// deadline, which answers first with the JSON error (actix-http's answer has no body).
const FIRST_HEAD_BACKSTOP: Duration = Duration::from_secs(1);
/// How long a closing connection may take to be shut down (actix-web's default).
const DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The bound listeners and what they serve.
pub struct Listeners {
    /// `SECKILL_LISTEN`: the API and the pages (and the operations routes without `metrics`).
    pub public: TcpListener,
    /// `SECKILL_METRICS_LISTEN`, if set: `/metrics`, `/readyz`, `/healthz` only.
    pub metrics: Option<TcpListener>,
}

/// The server over `listeners`, not yet running: stopped by its handle (no signal handling of
/// its own), letting in-flight requests finish for up to `shutdown_timeout`.
///
/// The edge refuses a connection over its budget at once; behind it, each worker holds at most its
/// part of what the edge may hold plus [`QUEUED_CONNECTIONS`] waiting to be admitted or refused,
/// past which actix-server's accept loop waits for a connection to close: the process never runs
/// out of descriptors for its clients' connections.
pub fn build(
    listeners: Listeners,
    state: AppState,
    edge: Arc<Edge>,
    workers: usize,
    shutdown_timeout: Duration,
) -> std::io::Result<Server> {
    let per_worker = (edge.most_held() + QUEUED_CONNECTIONS).div_ceil(workers.max(1) as u32);
    let builder = Server::build()
        .workers(workers)
        .max_concurrent_connections(per_worker as usize)
        .disable_signals()
        // actix takes whole seconds: rounded up, so that 500ms is not 0 (no grace at all).
        .shutdown_timeout(shutdown_timeout.as_secs() + u64::from(shutdown_timeout.subsec_nanos() > 0));
    let public = if listeners.metrics.is_some() { Listener::Public } else { Listener::All };
    let mut builder = listen(builder, "seckill-api", listeners.public, state.clone(), edge.clone(), public)?;
    if let Some(metrics) = listeners.metrics {
        builder = listen(builder, "seckill-metrics", metrics, state, edge, Listener::Operations)?;
    }
    Ok(builder.run())
}

/// The HTTP workers when `SECKILL_HTTP_WORKERS` is unset: the CPUs this process may use, which
/// the standard library reads from its affinity mask and cgroup CPU quota (1 if unknown).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Raises this process's soft limit of open files (sockets included) to its hard limit and
/// returns it, the connection budget's start (`None`: unknown).
pub fn raise_open_files_limit() -> Option<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
        .inspect_err(|err| tracing::warn!(%err, "the open files limit could not be read or raised"))
        .ok()
}

/// Adds `listener` to `builder`, serving the routes of `routes` behind the edge.
fn listen(
    builder: ServerBuilder,
    name: &str,
    listener: TcpListener,
    state: AppState,
    edge: Arc<Edge>,
    routes: Listener,
) -> std::io::Result<ServerBuilder> {
    let local: SocketAddr = listener.local_addr()?;
    let signal = builder.graceful_shutdown_signal();
    builder.listen(name, listener, move || {
        let (state, edge, signal) = (state.clone(), edge.clone(), signal.clone());
        let app = App::new()
            .wrap_fn(middleware::close_after_large_answers)
            .wrap_fn(middleware::record_http)
            .wrap_fn(middleware::request_id)
            // A span per request only for traces (its cost: `middleware::request_id`).
            .wrap(Condition::new(traces::on(), tracing_actix_web::TracingLogger::<middleware::RequestSpan>::new()))
            .configure(routes::configure(state, routes))
            .into_factory()
            .map_err(|err| err.error_response());
        let http = HttpService::build()
            .graceful_shutdown_signal(move || {
                let signal = signal.clone();
                async move { signal.notified().await }
            })
            .keep_alive(KeepAlive::Timeout(KEEP_ALIVE))
            .client_request_timeout(edge.settings().read_timeout + FIRST_HEAD_BACKSTOP)
            .client_disconnect_timeout(DISCONNECT_TIMEOUT)
            .local_addr(local)
            // The default AppConfig: its host and address serve only URL generation, unused here.
            .finish(map_config(app, |_| AppConfig::default()));
        let operations = routes == Listener::Operations;
        fn_service(move |io: TcpStream| {
            let edge = edge.clone();
            async move {
                let peer = io.peer_addr().ok();
                Ok::<_, DispatchError>((edge.accept(io, peer, operations), Protocol::Http1, peer))
            }
        })
        .and_then(http)
    })
}
