//! The HTTP API, everything actix-web: the routes (`routes`), the one error type and its mapping
//! to status codes (`error`), the middleware (`middleware`), the client's address behind proxies
//! (`client_ip`), who is buying (`buyer`, from the bearer token: `bearer`), who operates
//! (`operators`: the admin routes' `Viewer` and `Operator`), the rate limits'
//! header fields (`rate_limit`), the bounds on what a connection may hold before a handler runs
//! (`edge`), the answers' types built from the layers' own (`views`), and [`AppState`], what every
//! handler can reach. Handlers extract, call one use case of [`crate::shop`] and turn its outcome
//! into an answer; the layers below know nothing of HTTP.

pub mod bearer;
pub mod buyer;
pub mod client_ip;
pub mod edge;
pub mod error;
pub mod middleware;
pub mod operators;
pub mod rate_limit;
pub mod routes;
pub mod views;

use std::sync::Arc;

use self::client_ip::ClientKeys;
use self::rate_limit::RateLimitFields;
use crate::shop::Operators;
use crate::shop::{Shop, Verifier};

/// What every handler can reach. Cheap to clone: the clients inside are shared handles.
#[derive(Clone)]
pub struct AppState {
    /// The use cases.
    pub shop: Shop,
    /// `SECKILL_AUTH=jwt`: the verifier of the buyer's bearer token; `None`: the request names
    /// the buyer.
    pub verifier: Option<Arc<Verifier>>,
    /// The key a request's client is limited by.
    pub clients: ClientKeys,
    /// The `RateLimit-Policy` values, formatted once.
    pub rate_limit: RateLimitFields,
    /// Every admin credential (the admin token and the named operators); empty: admin routes
    /// are disabled and answer 403.
    pub operators: Operators,
}
