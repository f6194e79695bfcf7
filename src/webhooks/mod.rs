//! Order events out (docs/webhooks.md): every change of an order (`order.created`, `order.paid`,
//! `order.cancelled`, `order.expired`, `order.late_payment`) and a sale's `sale.sold_out` is
//! written to the outbox in Postgres with the change itself (`crate::db::outbox`); the
//! [`dispatcher`] posts each one to every endpoint, signed the Standard Webhooks way
//! ([`signature`]), at least once, one order's events in order; [`store`] holds its statements
//! and the operators' (list, retry).

pub mod dispatcher;
pub mod signature;
pub mod store;

use std::time::Duration;

pub use dispatcher::Dispatcher;
pub use signature::Signer;

/// The Standard Webhooks retry schedule: the pause before each attempt after the first
/// (at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h).
pub const SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

/// What the dispatcher needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The endpoints, each event to every one.
    pub endpoints: Vec<String>,
    /// The keys events are signed with.
    pub signer: Signer,
    /// Longest one attempt may take (connecting, sending and the answer's head).
    pub timeout: Duration,
    /// How long settled events are kept.
    pub retention: Duration,
    /// The pause before each attempt; an event has `schedule.len()` attempts in all, the first
    /// at once.
    pub schedule: Vec<Duration>,
}
