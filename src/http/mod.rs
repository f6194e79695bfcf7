//! The HTTP API, everything actix-web: the routes (`routes`), the one error type and its mapping
//! to status codes (`error`), the middleware (`middleware`), the client's address behind proxies
//! (`client_ip`), the buyer's bearer token (`bearer`), the bounds on what a connection may hold
//! before a handler runs (`edge`), the answers' types built from the layers' own (`views`), and [`AppState`],
//! what every handler can reach. The layers below know nothing of HTTP: handlers turn their outcomes and errors
//! into answers here.

pub mod bearer;
pub mod client_ip;
pub mod edge;
pub mod error;
pub mod middleware;
pub mod routes;
pub mod views;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use actix_web::HttpRequest;
use actix_web::http::header::HeaderValue;
use secrecy::SecretString;
use sqlx::PgPool;

use self::client_ip::TrustedProxies;
use crate::admission::Admission;
use crate::identity::Verifier;
use crate::limiter::local::LocalLimiter;
use crate::limiter::{Limiter, Scope, client_key};
use crate::metrics::Metrics;
use crate::orders::streams::StreamHealth;
use crate::purchase::Sales;
use crate::purchase::board::SaleBoard;
use crate::purchase::retired::RetiredSales;
use crate::purchase::sold_out::SoldOutFlags;
use crate::redis::Keyspace;
use crate::reservations::Reservations;
use crate::retire::Retirer;

/// What every handler can reach. Cheap to clone: the clients inside are shared handles.
#[derive(Clone)]
pub struct AppState {
    /// The shared Redis connection and the deployment's key prefix (the limiter, readiness).
    pub redis: Keyspace,
    /// The sales in Redis (on the same connection).
    pub sales: Sales,
    /// The sales' public snapshots (`GET /sales/{id}`).
    pub board: SaleBoard,
    /// Sales this instance knows to be sold out (answered without Redis).
    pub sold_out: Arc<SoldOutFlags>,
    /// Retired sales this instance knows of (410 `sale_retired`), and the bounded lookups.
    pub retired: RetiredSales,
    /// Retires sales (`DELETE /admin/sales/{sale_id}`).
    pub retirer: Retirer,
    /// The Postgres pool (sale records, order counts, reconciliation, readiness).
    pub pool: PgPool,
    /// The rate limiter's policy and the clients it recently refused.
    pub limiter: Arc<Limiter>,
    /// The `RateLimit-Policy` value every `/buy` answer carries: the policy's, formatted once.
    pub rate_limit_policy: HeaderValue,
    /// Where the limits count (`SECKILL_RATE_LIMIT_SCOPE`).
    pub rate_limit_scope: Scope,
    /// The per-buyer limiter and its `RateLimit-Policy` value, if a per-buyer limit is set.
    pub buyer_limiter: Option<(Arc<Limiter>, HeaderValue)>,
    /// The in-process limit on answers to a sale known sold out.
    pub sold_out_limiter: Arc<LocalLimiter>,
    /// IPv6 clients are limited by their network of this many bits.
    pub ipv6_prefix: u8,
    /// This process's metrics (shared with its worker).
    pub metrics: Arc<Metrics>,
    /// The proxies whose `X-Forwarded-For` names the client.
    pub proxies: TrustedProxies,
    /// `None`: admin routes are disabled and answer 403.
    pub admin_token: Option<SecretString>,
    /// `SECKILL_AUTH=jwt`: the verifier of the buyer's bearer token; `None`: the body names the buyer.
    pub verifier: Option<Arc<Verifier>>,
    /// The report of this process's worker on its streams; `None` without a worker (`--no-worker`).
    pub worker_health: Option<Arc<StreamHealth>>,
    /// Reservations: payments, cancels, their counts.
    pub reservations: Reservations,
    /// `SECKILL_PAYMENT_SECRET`: the key of the payment events' signatures (`None`: refused).
    pub payment_secret: Option<SecretString>,
    /// `SECKILL_PAYMENT_WINDOW`: the window of sales seeded without one.
    pub default_payment_window: Option<std::time::Duration>,
    /// The waiting rooms of queued sales: their lines, the admission tokens `/buy` checks.
    pub admission: Admission,
    /// `SECKILL_ADMISSION_TTL`: how long an admission lasts, for sales seeded from now on.
    pub admission_ttl: std::time::Duration,
}

impl AppState {
    /// The key `req`'s client is limited by: its address behind the trusted proxies, an IPv6
    /// address grouped by its network (`crate::limiter::client_key`).
    pub fn client_key(&self, req: &HttpRequest) -> IpAddr {
        let ip = self.proxies.client_ip(req).unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        client_key(ip, self.ipv6_prefix)
    }
}
