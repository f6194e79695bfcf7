//! The operator's use cases: a sale's state and every sale's, retiring and reconciling a sale,
//! and whether this process's dependencies answer.

use std::time::Duration;

use time::OffsetDateTime;

use super::{Error, Shop};
use crate::controls::audit;
use crate::db;
use crate::domain::SaleId;
use crate::orders::streams::WorkerReport;
use crate::purchase::SaleState;
use crate::reconcile::{self, ReconcileReport};
use crate::redis::connection::{Reach, is_redis_outage};
use crate::reservations::store::{self, Tally};
use crate::retire::{RetireOutcome, RetireReport};
use crate::webhooks::endpoints::{self, Endpoint};
use crate::webhooks::store::{self as webhook_store, Summary};

/// Most sales [`Shop::sales_report`] reads (the first by sale id).
pub const MAX_LISTED_SALES: usize = 100;

/// How long readiness waits for each dependency.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A sale's state: Redis's, then the orders Postgres holds (`None` while Postgres is
/// unreachable). Postgres is read after Redis, and an order leaves the queue only after its
/// commit, so `sold - queued <= persisted` unless confirmed orders were lost.
#[derive(Debug, Clone)]
pub struct SaleReport {
    pub sale: SaleId,
    pub redis: SaleState,
    /// Orders of the sale in Postgres.
    pub persisted: Option<i64>,
    /// Orders by standing in Postgres.
    pub tally: Option<Tally>,
}

/// Every registered sale's state (the first [`MAX_LISTED_SALES`] by id) and this instance's
/// limiter refusals.
#[derive(Debug)]
pub struct SalesReport {
    pub sales: Vec<SaleReport>,
    /// Listed sales whose Redis state could not be read (a key of the wrong type), with Redis's
    /// error: the others are listed all the same.
    pub unreadable: Vec<(SaleId, String)>,
    /// This instance's worker (`None` without one).
    pub worker: Option<WorkerReport>,
    /// How many sales are registered in all.
    pub sales_total: usize,
    /// Requests the limiter script refused since this process started.
    pub refused: u64,
    /// Requests refused from memory since this process started.
    pub refused_from_memory: u64,
    /// The order events' deliveries and the endpoints, when an endpoint is registered or a
    /// delivery kept (`None` otherwise, or while Postgres cannot be read).
    pub webhooks: Option<WebhooksReport>,
    /// When this instance read the state.
    pub sampled_at: OffsetDateTime,
}

/// The order events' deliveries over every endpoint, and each endpoint with its state.
#[derive(Debug, Clone)]
pub struct WebhooksReport {
    pub summary: Summary,
    pub endpoints: Vec<Endpoint>,
}

/// Whether this process's dependencies answer, and its worker's report.
#[derive(Debug)]
pub struct Readiness {
    /// Which part of Redis answers (`None`: none of it).
    pub redis: Option<Reach>,
    pub postgres_up: bool,
    /// This process's worker (`None` without one).
    pub worker: Option<WorkerReport>,
}

/// What the overview reports of a registered sale Redis has no state for.
const LOST: &str = "registered, but Redis has no state for it: lost (seckill reconcile SALE --repair restores it \
    from Postgres), or being seeded this moment";

impl Shop {
    /// The sale's state: Redis's, then Postgres's counts.
    pub async fn sale_report(&self, sale: &SaleId) -> Result<SaleReport, Error> {
        let Some(redis) = self.sales.sale_state(sale).await? else {
            return Err(self.unknown_or_retired(sale).await);
        };
        let persisted = db::count_orders(&self.pool, sale).await.inspect_err(warn_without_persisted).ok();
        let tally = self.reservations.tally(sale).await.inspect_err(warn_without_persisted).ok();
        Ok(SaleReport { sale: sale.clone(), redis, persisted, tally })
    }

    /// Every registered sale's state (the first [`MAX_LISTED_SALES`] by id): one sale's broken key
    /// (a wrong type), or its state lost, is reported, not a failure of the whole list (nor left
    /// out of it); an outage is one.
    pub async fn sales_report(&self) -> Result<SalesReport, Error> {
        let sampled_at = OffsetDateTime::now_utc();
        let mut ids = self.sales.sale_ids().await?;
        ids.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        let sales_total = ids.len();
        ids.truncate(MAX_LISTED_SALES);
        let mut redis = Vec::with_capacity(ids.len());
        let mut unreadable = Vec::new();
        let reads = futures::future::join_all(ids.iter().map(|id| self.sales.sale_state(id))).await;
        for (id, read) in ids.iter().zip(reads) {
            match read {
                Ok(None) => {
                    // Registered, so its stream is read; no meta: what a sale Redis lost looks like.
                    unreadable.push((id.clone(), LOST.to_owned()));
                    redis.push(None);
                }
                Ok(read) => redis.push(read),
                Err(err) if is_redis_outage(&err) => return Err(err.into()),
                Err(err) => {
                    unreadable.push((id.clone(), err.to_string()));
                    redis.push(None);
                }
            }
        }
        let persisted = db::count_orders_by_sale(&self.pool, &ids).await.inspect_err(warn_without_persisted).ok();
        let tallies = store::tally_by_sale(&self.pool, &ids).await.inspect_err(warn_without_persisted).ok();
        let sales = ids
            .into_iter()
            .zip(redis)
            .filter_map(|(sale, redis)| {
                let persisted = persisted.as_ref().map(|counts| counts.get(sale.as_str()).copied().unwrap_or(0));
                let tally = tallies.as_ref().map(|t| t.get(sale.as_str()).copied().unwrap_or_default());
                Some(SaleReport { redis: redis?, sale, persisted, tally })
            })
            .collect();
        let refusals = |decision| self.metrics.limiter_decisions.with_label_values(&[decision]).get();
        let webhooks = self.webhooks_report().await.inspect_err(warn_without_persisted).ok().flatten();
        Ok(SalesReport {
            webhooks,
            sales,
            unreadable,
            worker: self.worker_report(),
            sales_total,
            refused: refusals("refused"),
            refused_from_memory: refusals("refused_from_memory"),
            sampled_at,
        })
    }

    /// The deliveries' summary and the endpoints; `None` when no endpoint is registered and no
    /// delivery is kept (webhooks were never used).
    async fn webhooks_report(&self) -> Result<Option<WebhooksReport>, sqlx::Error> {
        let endpoints = endpoints::list(&self.pool).await?;
        let summary = webhook_store::summary(&self.pool).await?;
        let used = !endpoints.is_empty() || summary.open > 0 || summary.failed > 0;
        Ok(used.then_some(WebhooksReport { summary, endpoints }))
    }

    /// Retires the sale (`crate::retire`): once it has ended or sold out, its queue has drained
    /// and it reconciles, its Redis keys go; Postgres keeps its orders and its row. Recorded in the
    /// audit with `actor`.
    pub async fn retire(&self, sale: &SaleId, actor: Option<&str>) -> Result<RetireReport, Error> {
        self.existing_now(sale).await?;
        match self.retirer.retire(sale).await? {
            RetireOutcome::Retired(report) => {
                self.retired.mark(sale.as_str());
                self.sold_out.clear(sale.as_str());
                audit::record_retirement(&self.pool, sale, &report, actor).await;
                Ok(report)
            }
            RetireOutcome::Refused(reasons) => Err(Error::NotRetirable(reasons)),
            RetireOutcome::UnknownSale => Err(Error::UnknownSale),
            RetireOutcome::AlreadyRetired => Err(Error::SaleRetired),
        }
    }

    /// The differences between the sale's Redis buyers and its Postgres orders; with `repair`,
    /// after repairing what Redis can repair (missing orders, a missing `sales` row), the
    /// operator who asked (`actor`) named in the log.
    pub async fn reconcile(&self, sale: &SaleId, repair: bool, actor: Option<&str>) -> Result<ReconcileReport, Error> {
        self.existing_now(sale).await?;
        let report = if repair {
            // The repair's own line ("sale repaired") says what it did; this one, who asked.
            tracing::info!(actor, sale_id = %sale, "repair of the sale asked");
            reconcile::repair(&self.sales, &self.pool, sale).await?
        } else {
            reconcile::check(&self.sales, &self.pool, sale).await?
        };
        report.ok_or(Error::UnknownSale)
    }

    /// Whether Redis and Postgres answer (each given 2 s), and the worker's report.
    pub async fn readiness(&self) -> Readiness {
        let redis = tokio::time::timeout(PROBE_TIMEOUT, self.sales.keyspace().reach());
        let postgres = tokio::time::timeout(PROBE_TIMEOUT, db::ping(&self.pool));
        let (redis, postgres) = tokio::join!(redis, postgres);
        Readiness {
            redis: redis.ok().and_then(Result::ok),
            postgres_up: matches!(postgres, Ok(Ok(()))),
            worker: self.worker_report(),
        }
    }

    /// This process's worker's report on its streams (`None` without a worker).
    pub fn worker_report(&self) -> Option<WorkerReport> {
        self.worker_health.as_ref().map(|h| h.report())
    }
}

fn warn_without_persisted(err: &sqlx::Error) {
    tracing::warn!(error = %err, "sale status without the persisted count");
}
