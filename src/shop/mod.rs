//! The sale's use cases, one method of [`Shop`] each: buy (`buy`), read a sale (`sales`), read
//! and cancel an order (`orders`), join and ask a waiting room (`queue`), take a payment event
//! (`payments`), seed (`seed`), watch, retire and reconcile (`admin`), pause, resume, end, change
//! the stock and list the audit trail (`controls`), seed, read, switch and restock a drop whole
//! (`drops`), list and re-send the order events (`events`),
//! list, register, remove and re-enable the webhook endpoints (`webhooks`), and readiness. Each takes
//! validated ids and plain values and returns a typed outcome (with the rate limits' decision,
//! for the limited ones: `limits`) or an [`Error`]; `http` only extracts, calls one method and
//! turns the outcome into an answer. The types of the layers below that `http` names (in its
//! answers' bodies) are re-exported here, so `http` needs no module below this one but the ids.

mod admin;
mod buy;
mod challenge;
mod controls;
mod draw_entries;
mod draw_run;
mod drops;
mod error;
mod error_code;
mod error_from;
mod events;
mod exports;
pub mod limits;
mod order_actions;
mod orders;
mod payments;
mod queue;
mod sales;
mod seed;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use secrecy::SecretString;
use sqlx::PgPool;

use crate::admission::Admission;
use crate::challenge::Challenges;
use crate::metrics::Metrics;
use crate::orders::streams::StreamHealth;
use crate::purchase::Sales;
use crate::purchase::board::SaleBoard;
use crate::purchase::retired::RetiredSales;
use crate::purchase::sold_out::SoldOutFlags;
use crate::reservations::Reservations;
use crate::retire::Retirer;
use crate::webhooks::Changes;

pub use self::admin::{Readiness, SaleReport, SalesReport, WebhooksReport};
pub use self::buy::{AdmissionToken, Bought};
pub use self::draw_entries::{DrawOrder, EntryOrder};
pub use self::draw_run::{DrawResult, RecordChunks};
pub use self::drops::{DropOrder, DropReport, DropView};
pub use self::error::Error;
pub use self::exports::Lines as ExportLines;
pub use self::limits::{Limit, Limited, Limits, Reported};
pub use self::order_actions::OrderActed;
pub use self::orders::Cancelled;
pub use self::seed::SeedOrder;
pub use self::webhooks::RemovedEndpoint;
pub use crate::admission::token::ADMISSION_HEADER;
pub use crate::admission::{Answer as QueueAnswer, LineId, commitment as seed_commitment, line::Stand};
pub use crate::challenge::{CHALLENGE_HEADER, DEFAULT_COST as DEFAULT_CHALLENGE_COST, Issued as IssuedChallenge};
pub use crate::controls::Switch;
pub use crate::controls::audit::{Entry as AuditEntry, MAX_LISTED as MAX_AUDIT_LISTED, MAX_REASON_CHARS};
pub use crate::draw::entries::{DrawInfo, Entry as DrawEntry};
pub use crate::draw::run::Summary as DrawSummary;
pub use crate::draw::stats::{Stats as DrawStats, Winners as DrawWinners};
pub use crate::exports::{Format as ExportFormat, STATUSES as ORDER_STATUSES};
pub use crate::identity::Verifier;
pub use crate::limiter::client_key;
pub use crate::operators::{Operators, Role, Signed};
pub use crate::orders::lookup::{Found as FoundOrder, Place};
pub use crate::purchase::SaleState;
pub use crate::purchase::board::Snapshot;
pub use crate::redis::connection::Reach;
pub use crate::reservations::signature::HEADER as SIGNATURE_HEADER;
pub use crate::reservations::store::PaymentOutcome;

/// The types of the layers below that `http` builds its answers from (`crate::http::views`),
/// grouped by the module that owns them.
pub mod lower {
    /// The worker's report on its streams.
    pub mod streams {
        pub use crate::orders::streams::{StreamProblem, StreamState, WorkerReport};
    }
    /// A bought order's status.
    pub mod purchase {
        pub use crate::purchase::{OrderStatus, Receipt};
    }
    /// What reconciling a sale found.
    pub mod reconcile {
        pub use crate::reconcile::ReconcileReport;
    }
    /// A payment to refund.
    pub mod reservations {
        pub use crate::reservations::store::LatePayment;
    }
    /// The order events out and their deliveries.
    pub mod webhooks {
        pub use crate::webhooks::endpoints::{Endpoint, MAX_ENDPOINTS, MAX_URL_BYTES, shown};
        pub use crate::webhooks::store::{Delivery, Event, MAX_LISTED, Summary};
    }
    /// Why a sale cannot be retired, and what a retirement removed.
    pub mod retire {
        pub use crate::retire::{Refusal, RetireReport};
    }
}

/// Everything the use cases need, each a shared handle: cheap to clone.
#[derive(Clone)]
pub struct Shop {
    /// The sales in Redis (and the shared connection, `Sales::keyspace`).
    sales: Sales,
    /// The sales' public snapshots.
    board: SaleBoard,
    /// Sales this instance knows to be sold out (answered without Redis).
    sold_out: Arc<SoldOutFlags>,
    /// Retired sales this instance knows of, and the bounded lookups.
    retired: RetiredSales,
    /// Retires sales.
    retirer: Retirer,
    /// The Postgres pool.
    pool: PgPool,
    /// The buyer routes' rate limits.
    limits: Arc<Limits>,
    /// This process's metrics.
    metrics: Arc<Metrics>,
    /// The report of this process's worker on its streams; `None` without a worker.
    worker_health: Option<Arc<StreamHealth>>,
    /// Reservations: payments, cancels, their counts.
    reservations: Reservations,
    /// What a seed takes by default and what payment events need.
    settings: Arc<Settings>,
    /// The waiting rooms of queued sales.
    admission: Admission,
    /// The proofs of work at the door.
    challenges: Challenges,
    /// Wakes this process's webhook dispatcher when an admin route changed the endpoints.
    endpoint_changes: Changes,
    /// The order exports streaming now (at most `exports::MAX_CONCURRENT`).
    exports: Arc<tokio::sync::Semaphore>,
    /// The draw records streaming now, and to whom (`draw::run::readers`).
    draw_readers: crate::draw::run::readers::Readers,
    /// The runtime of the process's background tasks (the one that built the shop), where long
    /// operator work runs instead of on the HTTP worker that received it (a draw's run).
    background: tokio::runtime::Handle,
}

/// The settings the use cases read.
pub struct Settings {
    /// `SECKILL_PAYMENT_SECRET`: the key of the payment events' signatures (`None`: refused).
    pub payment_secret: Option<SecretString>,
    /// `SECKILL_PAYMENT_WINDOW`: the window of sales seeded without one.
    pub default_payment_window: Option<Duration>,
    /// `SECKILL_ADMISSION_TTL`: how long an admission lasts, for sales seeded from now on.
    pub admission_ttl: Duration,
    /// `SECKILL_CHALLENGE_COST`: the proof of work of sales seeded without one (0: none).
    pub challenge_cost: u32,
}

/// The parts a [`Shop`] is made of, built by the composition root (`crate::app`).
pub struct Parts {
    pub sales: Sales,
    pub sold_out: Arc<SoldOutFlags>,
    pub retired: RetiredSales,
    pub retirer: Retirer,
    pub pool: PgPool,
    pub limits: Limits,
    pub metrics: Arc<Metrics>,
    pub worker_health: Option<Arc<StreamHealth>>,
    pub reservations: Reservations,
    pub settings: Settings,
    pub admission: Admission,
    pub challenges: Challenges,
    pub endpoint_changes: Changes,
}

impl Shop {
    /// The shop of these parts (the public snapshots are read through `parts.sales`); made inside
    /// the runtime that runs the process's background tasks.
    pub fn new(parts: Parts) -> Self {
        Self {
            board: SaleBoard::new(parts.sales.clone()),
            sales: parts.sales,
            sold_out: parts.sold_out,
            retired: parts.retired,
            retirer: parts.retirer,
            pool: parts.pool,
            limits: Arc::new(parts.limits),
            metrics: parts.metrics,
            worker_health: parts.worker_health,
            reservations: parts.reservations,
            settings: Arc::new(parts.settings),
            admission: parts.admission,
            challenges: parts.challenges,
            endpoint_changes: parts.endpoint_changes,
            exports: Arc::new(tokio::sync::Semaphore::new(crate::exports::MAX_CONCURRENT)),
            draw_readers: crate::draw::run::readers::Readers::default(),
            background: tokio::runtime::Handle::current(),
        }
    }

    /// The buyer routes' rate limits (their `RateLimit-Policy` fields).
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// This process's metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The metrics in the text exposition, with the gauges read when scraped.
    pub fn render_metrics(&self) -> String {
        self.metrics.sold_out_held.set(i64::try_from(self.sold_out.held_buyers()).unwrap_or(i64::MAX));
        self.metrics.render()
    }
}
