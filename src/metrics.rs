//! Prometheus metrics of one process, served at `GET /metrics` in the text exposition format.
//!
//! One registry per [`Metrics`] (not the crate's global one), shared by the HTTP handlers and the
//! worker of the process; so in-process tests read exactly their own app's counts. The HTTP
//! middleware that counts requests is `crate::http::middleware::record_http`.

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// The dependency whose error is in `err`'s cause chain: `redis`, `postgres`, or `None`.
pub fn dependency_of(err: &anyhow::Error) -> Option<&'static str> {
    err.chain().find_map(|cause| {
        if cause.downcast_ref::<redis::RedisError>().is_some() {
            Some("redis")
        } else if cause.downcast_ref::<sqlx::Error>().is_some() {
            Some("postgres")
        } else {
            None
        }
    })
}

/// Purchase outcomes, in the order of [`Metrics::purchase`]'s labels.
pub const PURCHASE_OUTCOMES: [&str; 22] = [
    "created",
    "already_purchased",
    "sold_out",
    "unknown_sale",
    "not_started",
    "ended",
    "rate_limited",
    "unavailable",
    "outcome_unknown",
    "not_durable",
    "invalid_request",
    "unauthenticated",
    "invalid_token",
    "user_mismatch",
    "sale_retired",
    "not_admitted",
    "paused",
    "limit_reached",
    "insufficient_stock",
    "challenge_required",
    "challenge_failed",
    "draw_only",
];

/// Limiter decisions, in the order of [`Metrics::limiter_decision`]'s labels.
pub const LIMITER_DECISIONS: [&str; 9] = [
    "allowed",
    "refused",
    "refused_from_memory",
    "buyer_refused",
    "buyer_refused_from_memory",
    "sold_out_refused",
    "proof_check_refused",
    "unknown_sale_refused",
    "error",
];

/// Every metric of the service.
pub struct Metrics {
    registry: Registry,
    /// Requests by route pattern (`/buy`, `/admin/sales/{sale_id}`, …; `unmatched`), method and status.
    pub http_requests: IntCounterVec,
    /// Request latency by route pattern.
    pub http_duration: HistogramVec,
    /// Limiter decisions: `allowed` (by every limit), `refused` (the client's address, by
    /// Redis), `refused_from_memory`, `buyer_refused`, `buyer_refused_from_memory`,
    /// `sold_out_refused` (the in-process limit on sold-out answers), `error`.
    pub limiter_decisions: IntCounterVec,
    /// Purchase outcomes: the labels of [`PURCHASE_OUTCOMES`].
    pub purchases: IntCounterVec,
    /// Orders queued in a sale's stream (sampled by the worker).
    pub queue_length: IntGaugeVec,
    /// Age of a sale's oldest queued order, in seconds (sampled by the worker; 0 when empty).
    pub queue_lag_seconds: prometheus::GaugeVec,
    /// The order streams the worker knows, by `state` (`ready`: read each step).
    pub worker_streams: IntGaugeVec,
    /// Orders per batch the worker wrote.
    pub worker_batch_size: Histogram,
    /// Duration of the worker's batch inserts.
    pub worker_insert_seconds: Histogram,
    /// Purchases per Redis call: more than one when purchases queue up for a shard
    /// (`crate::purchase::batch`).
    pub purchase_batch_size: Histogram,
    /// Orders the worker handled: `inserted`, `redelivered` (already stored), `conflict`
    /// (another order of the same user and sale), `malformed`, `reclaimed` (from a dead consumer).
    pub worker_orders: IntCounterVec,
    /// Failed Redis or Postgres calls, by `dependency` and by `source` (`http`, `worker`).
    pub dependency_errors: IntCounterVec,
    /// Connections the edge closed, by `reason`: `too_many_connections`, `header_too_large`,
    /// `bad_request`, `length_required`, `request_timeout` (each with its answer), and
    /// `write_timeout` (answers not taken in time) (`crate::http::edge`).
    pub edge_refusals: IntCounterVec,
    /// Reservations that left `reserved`, by `outcome`: `paid`, `cancelled` (by the buyer or an
    /// operator), `expired`; and paid orders an operator refunded, `refunded`
    /// (`crate::reservations`).
    pub reservations: IntCounterVec,
    /// Waiting-room requests (`crate::admission`), by `kind` (`join`, `ask`) and `outcome`
    /// (`answered`, or the error code).
    pub queue_requests: IntCounterVec,
    /// Proofs of work (`crate::challenge`), by `event` (`issued`, `solved`: checked in process)
    /// and `cost`: the factor of the sale's cost it asked, rounded up to a power of two (1 to 1024).
    pub challenges: IntCounterVec,
    /// Proofs of work refused, by `reason`: `missing`, `malformed`, `forged`, `expired`,
    /// `other_sale`, `other_buyer`, `other_address`, `wrong`, `replayed`.
    pub challenge_refusals: IntCounterVec,
    /// Payment events that arrived after their order had expired or been cancelled
    /// (`outcome="late"`), or for an order already paid (`outcome="duplicate"`): to refund.
    pub late_payments: IntCounterVec,
    /// Units cancelled or expired reservations (and refunds with restock) gave back to their sale's stock.
    pub units_released: IntCounter,
    /// Seconds from a reservation's deadline to its expiry in Postgres.
    pub expiry_lag_seconds: Histogram,
    /// Webhook delivery attempts, by `outcome`: `delivered` (a 2xx), `retried` (another answer or
    /// none; tried again later), `failed` (its last attempt) (`crate::webhooks`).
    pub webhook_deliveries: IntCounterVec,
    /// Age of the oldest event with a delivery still open, in seconds (0: none; sampled by the
    /// dispatcher every second).
    pub webhook_oldest_undelivered_seconds: prometheus::Gauge,
    /// Registered webhook endpoints, by `state` (`enabled`, `disabled`), as this instance's
    /// dispatcher last read them (every 5 s).
    pub webhook_endpoints: IntGaugeVec,
    /// Webhook endpoints this instance's dispatcher disabled after failing for
    /// `SECKILL_WEBHOOK_DISABLE_AFTER`.
    pub webhook_endpoints_disabled: IntCounter,
    /// What the sold-out flags hold in memory: 1 per flag and 1 per buyer copied with it
    /// (bounded by `crate::purchase::sold_out::MAX_HELD_BUYERS`; read when scraped).
    pub sold_out_held: IntGauge,
    /// The purchase and limiter counters of every label, resolved once: looking a labelled
    /// child up per request (a hash and a shared lock) was a measurable cost on the hot path.
    purchase_counters: Vec<IntCounter>,
    limiter_counters: Vec<IntCounter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric, registered in a registry of its own.
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
            registry.register(Box::new(metric.clone())).expect("unique metric");
            metric
        };
        let histogram = |name: &str, help: &str, buckets: Vec<f64>| {
            let metric = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets)).expect("valid metric");
            registry.register(Box::new(metric.clone())).expect("unique metric");
            metric
        };
        let latency_buckets = vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
        let http_duration = HistogramVec::new(
            HistogramOpts::new("seckill_http_request_duration_seconds", "HTTP request latency by route")
                .buckets(latency_buckets.clone()),
            &["route"],
        )
        .expect("valid metric");
        registry.register(Box::new(http_duration.clone())).expect("unique metric");
        let queue_length = IntGaugeVec::new(
            Opts::new("seckill_queue_length", "Orders queued in the sale's stream, not yet in Postgres"),
            &["sale"],
        )
        .expect("valid metric");
        registry.register(Box::new(queue_length.clone())).expect("unique metric");
        let queue_lag_seconds = prometheus::GaugeVec::new(
            Opts::new("seckill_queue_lag_seconds", "Age of the sale's oldest queued order"),
            &["sale"],
        )
        .expect("valid metric");
        registry.register(Box::new(queue_lag_seconds.clone())).expect("unique metric");
        let worker_streams = IntGaugeVec::new(
            Opts::new("seckill_worker_streams", "Order streams the worker knows, by state"),
            &["state"],
        )
        .expect("valid metric");
        registry.register(Box::new(worker_streams.clone())).expect("unique metric");
        let webhook_endpoints = IntGaugeVec::new(
            Opts::new("seckill_webhook_endpoints", "Registered webhook endpoints, by state"),
            &["state"],
        )
        .expect("valid metric");
        registry.register(Box::new(webhook_endpoints.clone())).expect("unique metric");
        let purchases = counter("seckill_purchases_total", "Purchase outcomes", &["outcome"]);
        let limiter_decisions = counter("seckill_limiter_decisions_total", "Rate limiter decisions", &["decision"]);
        Self {
            purchase_counters: PURCHASE_OUTCOMES.iter().map(|o| purchases.with_label_values(&[o])).collect(),
            limiter_counters: LIMITER_DECISIONS.iter().map(|d| limiter_decisions.with_label_values(&[d])).collect(),
            http_requests: counter(
                "seckill_http_requests_total",
                "HTTP requests by route, method and status",
                &["route", "method", "status"],
            ),
            http_duration,
            limiter_decisions,
            purchases,
            queue_length,
            queue_lag_seconds,
            worker_streams,
            worker_batch_size: histogram(
                "seckill_worker_batch_size",
                "Orders per batch written to Postgres",
                vec![1.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0, 5000.0, 10000.0],
            ),
            worker_insert_seconds: histogram(
                "seckill_worker_insert_duration_seconds",
                "Duration of one batch insert",
                latency_buckets,
            ),
            purchase_batch_size: histogram(
                "seckill_purchase_batch_size",
                "Purchases per Redis call",
                vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0],
            ),
            worker_orders: counter("seckill_worker_orders_total", "Orders handled by the worker", &["result"]),
            dependency_errors: counter(
                "seckill_dependency_errors_total",
                "Failed Redis or Postgres calls",
                &["dependency", "source"],
            ),
            edge_refusals: counter(
                "seckill_edge_refusals_total",
                "Connections closed by the edge, by reason",
                &["reason"],
            ),
            reservations: counter("seckill_reservations_total", "Reservations resolved, by outcome", &["outcome"]),
            queue_requests: counter(
                "seckill_queue_requests_total",
                "Waiting-room joins and asks, by outcome",
                &["kind", "outcome"],
            ),
            challenges: counter(
                "seckill_challenges_total",
                "Proofs of work issued and solved, by the factor of the sale's cost asked",
                &["event", "cost"],
            ),
            challenge_refusals: counter(
                "seckill_challenge_refusals_total",
                "Proofs of work refused, by reason",
                &["reason"],
            ),
            late_payments: counter("seckill_late_payments_total", "Payments to refund, by outcome", &["outcome"]),
            units_released: {
                let metric = IntCounter::new("seckill_units_released_total", "Units released reservations gave back")
                    .expect("valid metric");
                registry.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            expiry_lag_seconds: histogram(
                "seckill_expiry_lag_seconds",
                "From a reservation's deadline to its expiry",
                vec![0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0],
            ),
            webhook_deliveries: counter(
                "seckill_webhook_deliveries_total",
                "Webhook delivery attempts, by outcome",
                &["outcome"],
            ),
            webhook_oldest_undelivered_seconds: {
                let metric = prometheus::Gauge::new(
                    "seckill_webhook_oldest_undelivered_seconds",
                    "Age of the oldest event not yet delivered to every endpoint",
                )
                .expect("valid metric");
                registry.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            webhook_endpoints,
            webhook_endpoints_disabled: {
                let metric = IntCounter::new(
                    "seckill_webhook_endpoints_disabled_total",
                    "Webhook endpoints disabled after failing for SECKILL_WEBHOOK_DISABLE_AFTER",
                )
                .expect("valid metric");
                registry.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            sold_out_held: {
                let metric = IntGauge::new(
                    "seckill_sold_out_held",
                    "Sold-out flags and the buyers copied with them, held in this process's memory",
                )
                .expect("valid metric");
                registry.register(Box::new(metric.clone())).expect("unique metric");
                metric
            },
            registry,
        }
    }

    /// Counts a purchase outcome, one of [`PURCHASE_OUTCOMES`].
    pub fn purchase(&self, outcome: &str) {
        let found = PURCHASE_OUTCOMES.iter().position(|o| *o == outcome);
        debug_assert!(found.is_some(), "{outcome:?} is not in PURCHASE_OUTCOMES: it would not be counted");
        if let Some(i) = found {
            self.purchase_counters[i].inc();
        }
    }

    /// Counts a waiting-room request.
    pub fn queue_request(&self, kind: &str, outcome: &str) {
        self.queue_requests.with_label_values(&[kind, outcome]).inc();
    }

    /// Counts a proof of work `issued` or `solved` at `factor` times its sale's cost.
    pub fn challenge(&self, event: &str, factor: u32) {
        self.challenges.with_label_values(&[event, &cost_label(factor).to_string()]).inc();
    }

    /// The proofs of work of this process so far: per `cost` label (ascending) the challenges
    /// issued and solved, and the refusals by reason (for the live page).
    pub fn challenge_tally(&self) -> ChallengeTally {
        let mut by_cost = std::collections::BTreeMap::<u32, (u64, u64)>::new();
        for metric in
            prometheus::core::Collector::collect(&self.challenges).iter().flat_map(|family| family.get_metric())
        {
            let label = |name: &str| metric.get_label().iter().find(|l| l.name() == name).map(|l| l.value().to_owned());
            let (Some(event), Some(cost)) = (label("event"), label("cost").and_then(|c| c.parse().ok())) else {
                continue;
            };
            let count = metric.get_counter().get_value() as u64;
            let entry = by_cost.entry(cost).or_default();
            if event == "issued" { entry.0 += count } else { entry.1 += count }
        }
        let refused = prometheus::core::Collector::collect(&self.challenge_refusals)
            .iter()
            .flat_map(|family| family.get_metric())
            .filter_map(|m| Some((m.get_label().first()?.value().to_owned(), m.get_counter().get_value() as u64)))
            .collect();
        (by_cost.into_iter().map(|(cost, (issued, solved))| (cost, issued, solved)).collect(), refused)
    }

    /// Counts a refused proof of work.
    pub fn challenge_refused(&self, reason: &str) {
        self.challenge_refusals.with_label_values(&[reason]).inc();
    }

    /// Counts a limiter decision, one of [`LIMITER_DECISIONS`].
    pub fn limiter_decision(&self, decision: &str) {
        let found = LIMITER_DECISIONS.iter().position(|d| *d == decision);
        debug_assert!(found.is_some(), "{decision:?} is not in LIMITER_DECISIONS: it would not be counted");
        if let Some(i) = found {
            self.limiter_counters[i].inc();
        }
    }

    /// Removes the sale's own series (its queue length and lag), once the worker reads none of
    /// its streams any more: a retired sale leaves nothing behind in `/metrics`.
    pub fn forget_sale(&self, sale: &str) {
        let _ = self.queue_length.remove_label_values(&[sale]);
        let _ = self.queue_lag_seconds.remove_label_values(&[sale]);
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding");
        String::from_utf8(out).expect("UTF-8 exposition")
    }

    /// Counts a failed call by the dependency in `err`'s cause chain, if it is Redis or Postgres.
    pub fn dependency_error(&self, err: &anyhow::Error, source: &str) {
        if let Some(dependency) = dependency_of(err) {
            self.dependency_errors.with_label_values(&[dependency, source]).inc();
        }
    }
}

/// The proofs of work of a process: `(cost label, issued, solved)` ascending, and
/// `(reason, refused)`.
pub type ChallengeTally = (Vec<(u32, u64, u64)>, Vec<(String, u64)>);

/// The `cost` label of a factor: rounded up to a power of two, so the series stay few (1 to 1024).
pub fn cost_label(factor: u32) -> u32 {
    factor.clamp(1, 1024).next_power_of_two()
}
