//! Order events out (docs/webhooks.md): every change of an order (`order.created`, `order.paid`,
//! `order.cancelled`, `order.expired`, `order.late_payment`) and a sale's `sale.sold_out` is
//! written to the outbox in Postgres with the change itself (`crate::db::outbox`), one delivery
//! to every enabled endpoint of the table [`endpoints`] reads and writes; the [`dispatcher`]
//! gives each endpoint a claim loop of its own ([`sender`]: its own claims and concurrency, so a
//! hung endpoint delays no other) that posts each event signed the Standard Webhooks way
//! ([`signature`]), at least once, one order's events in order, and disables an endpoint that
//! fails for too long; [`store`] holds the deliveries' statements and the operators' (list, retry).

pub mod dispatcher;
pub mod endpoints;
pub mod sender;
pub mod signature;
pub mod store;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

pub use dispatcher::Dispatcher;
pub use signature::Signer;

/// The Standard Webhooks retry schedule: the pause before each attempt after the first
/// (at once, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h).
pub const SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

/// What the dispatcher needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The keys events are signed with.
    pub signer: Signer,
    /// Longest one attempt may take (connecting, sending and the answer's head).
    pub timeout: Duration,
    /// How long settled events are kept.
    pub retention: Duration,
    /// The pause before each attempt; an event has `schedule.len()` attempts in all, the first
    /// at once.
    pub schedule: Vec<Duration>,
    /// How long an endpoint may fail every attempt before it is disabled (`None`: never).
    pub disable_after: Option<Duration>,
}

impl Settings {
    /// The longest time between two failed rounds of one run of failures: the schedule's longest
    /// pause, and an hour for rounds that start late (an instance restarting, a backlog). A
    /// longer silence means nothing was attempted, so the next failure starts a new run.
    pub fn longest_silence(&self) -> Duration {
        self.schedule.iter().max().copied().unwrap_or_default() + Duration::from_secs(3600)
    }
}

/// Word that the endpoints changed (an admin route registered, removed or re-enabled one, or a
/// sender disabled its own): this process's dispatcher reads them again at once instead of at
/// its next refresh. Cheap to clone; without a dispatcher, nobody listens.
#[derive(Debug, Clone, Default)]
pub struct Changes(Arc<Notify>);

impl Changes {
    pub fn notify(&self) {
        self.0.notify_one();
    }

    async fn notified(&self) {
        self.0.notified().await;
    }
}
