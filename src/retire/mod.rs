//! Retiring a sale: once it has ended (or sold out), its queue has drained, no reservation is
//! open and it reconciles,
//! its Redis state goes away for good and Postgres keeps the orders and the `sales` row, marked
//! retired (`sales.retired_at`). Nothing else of it is left: not its keys, not its registration,
//! not the workers' reads of its streams, not the instances' caches, not its metric series.
//!
//! [`Retirer::retire`] checks with reconciliation's [`reconcile::check`] and refuses with every
//! reason that applies ([`Refusal`]); then, in this order:
//!
//! 1. marks the `sales` row retired (the row lock orders it against a concurrent seed, which
//!    refuses a retired sale), then checks again that the sale is neither open nor queued (else
//!    takes the mark back and refuses);
//! 2. ends the sale now, on every shard (`crate::controls`' end): from then on nothing
//!    sells, even units a restock or a release that passed its own checks before the mark gives
//!    back, which would otherwise sell into a stream step 5 deletes. It then looks once more for
//!    orders that sold before the end and are still queued or pending (found: takes the mark back
//!    and refuses; the sale stays ended, in its `sales` row too, so a repair after a later Redis
//!    loss seeds it again ended, and retires once they drain);
//! 3. removes the sale and its shards (with any a repair left of an earlier layout:
//!    `crate::reconcile`) from the registries, so every worker drops their streams
//!    at its next registry refresh, and publishes `retired:<id>` on the events channel, so every
//!    instance answers 410 `sale_retired` from memory and frees what it held of the sale;
//! 4. waits a grace ([`Retirer::grace`]: the worker's registry refresh, one blocking read, and a
//!    margin), after which no worker reads the sale's streams any more;
//! 5. removes the keys in steps (`crate::redis::removal`; its group's in [`keys`]), never one
//!    command blocking Redis on a big set, and removes them again should a lagging worker have
//!    recreated a stream meanwhile;
//! 6. removes the sale's metric series from this process (each worker does so in its own
//!    process when it drops the streams).
//!
//! A retirement that stopped after step 1 is finished by the next one ([`Retirer::retire`] of a
//! sale marked retired with something of it left in Redis).
//!
//! The janitor ([`janitor`]) retires sales automatically after `SECKILL_RETIRE_AFTER`.

pub mod janitor;
pub mod keys;
mod registration;

use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::controls::{self, Switch};
use crate::db;
use crate::domain::{DropId, SaleId};
use crate::draw;
use crate::metrics::Metrics;
use crate::orders::worker::SALES_REFRESH;
use crate::purchase::{SaleState, Sales};
use crate::reconcile;
use crate::redis::keys::{SaleKeys, sales_registry_key};
use crate::redis::order_stream;
use crate::redis::removal;
use crate::reservations;

/// Margin added to the grace, for the worker's step in progress.
pub const GRACE_MARGIN: Duration = Duration::from_millis(250);

/// Why a sale cannot be retired (several may apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Not ended and not sold out: it can still sell.
    Open,
    /// Orders are still queued in its streams (not yet in Postgres).
    Queued,
    /// Its consumer group has orders read but not yet acknowledged.
    Pending,
    /// `stock_initial != stock_left + sold - released` in Redis.
    StockUnbalanced,
    /// Reservations are still open (not yet paid, cancelled or expired), or a released unit is
    /// not yet back in the stock: the sale's stock can still change.
    Reserved,
    /// Buyers with no order in Postgres nor queued (reconcile --repair re-enqueues them).
    MissingInPostgres,
    /// Postgres orders of users Redis does not know (reconcile --repair restores them).
    UnknownToRedis,
    /// No `sales` row in Postgres, or one with another `stock_initial`.
    SalesRow,
    /// A size of a drop in draw mode whose draw has not been drawn: its awards need the size
    /// (retired, it could never be awarded, and the draw would fail at every run).
    DrawPending,
}

/// What a retirement removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireReport {
    pub sale_id: String,
    /// Shards the sale had (1: unsharded).
    pub shards: u32,
    pub stock_initial: i64,
    /// Buyers in Redis before the removal (as many orders as Postgres keeps).
    pub sold: i64,
    /// Orders of the sale in Postgres (kept).
    pub persisted: i64,
    /// Members removed from the buyer sets.
    pub buyers_removed: u64,
    /// Receipts removed.
    pub receipts_removed: u64,
    /// Redis keys removed.
    pub keys_removed: u64,
    /// How long the retirement waited for the workers to stop reading the sale's streams.
    pub grace_ms: u64,
}

/// What [`Retirer::retire`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetireOutcome {
    /// Retired; what was removed.
    Retired(RetireReport),
    /// Not retirable, for these reasons; nothing changed.
    Refused(Vec<Refusal>),
    /// Redis does not know the sale (never seeded, or lost: `reconcile --repair` restores it).
    UnknownSale,
    /// The sale was retired before.
    AlreadyRetired,
}

/// A retirement could not read or write what it needed.
#[derive(Debug, thiserror::Error)]
pub enum RetireError {
    /// A Redis call failed.
    #[error("redis")]
    Redis(#[from] redis::RedisError),
    /// A Postgres call failed.
    #[error("postgres")]
    Postgres(#[from] sqlx::Error),
}

impl From<reconcile::ReconcileError> for RetireError {
    fn from(err: reconcile::ReconcileError) -> Self {
        match err {
            reconcile::ReconcileError::Redis(err) => Self::Redis(err),
            reconcile::ReconcileError::Postgres(err) => Self::Postgres(err),
            // Only a repair says so; a retirement only checks.
            other @ (reconcile::ReconcileError::Retired | reconcile::ReconcileError::OrdersQueued { .. }) => {
                Self::Postgres(sqlx::Error::Protocol(other.to_string()))
            }
        }
    }
}

/// Retires sales of one deployment.
#[derive(Clone)]
pub struct Retirer {
    sales: Sales,
    pool: PgPool,
    metrics: Arc<Metrics>,
    grace: Duration,
}

impl Retirer {
    /// `worker_block` is the workers' `SECKILL_WORKER_BLOCK` (every instance's, as configured here).
    pub fn new(sales: Sales, pool: PgPool, metrics: Arc<Metrics>, worker_block: Duration) -> Self {
        Self { sales, pool, metrics, grace: Self::grace(worker_block) }
    }

    /// The wait between unregistering a sale and removing its keys: the worker's registry
    /// refresh period, one blocking read and [`GRACE_MARGIN`].
    pub fn grace(worker_block: Duration) -> Duration {
        SALES_REFRESH + worker_block + GRACE_MARGIN
    }

    /// Retires the sale (module documentation); finishes the retirement of a sale marked retired
    /// whose keys are not all gone ([`Self::finish`]).
    pub async fn retire(&self, sale: &SaleId) -> Result<RetireOutcome, RetireError> {
        if db::sale_retired(&self.pool, sale.as_str()).await? == Some(true) {
            return self.finish(sale).await;
        }
        let Some(report) = reconcile::check(&self.sales, &self.pool, sale).await? else {
            return Ok(RetireOutcome::UnknownSale);
        };
        let Some(state) = self.sales.sale_state(sale).await? else {
            return Ok(RetireOutcome::UnknownSale);
        };
        let shards = self.shards(sale).await?;
        let mut refusals = self.busy(&state, &shards).await?;
        let checks = [
            (!report.stock_balanced || report.releases_lost > 0, Refusal::StockUnbalanced),
            (!report.missing_in_postgres.is_empty(), Refusal::MissingInPostgres),
            (!report.unknown_to_redis.is_empty(), Refusal::UnknownToRedis),
            (report.sales_row_stock != Some(report.stock_initial), Refusal::SalesRow),
            (
                report.releases_owed > 0 || reservations::store::tally(&self.pool, sale).await?.reserved > 0,
                Refusal::Reserved,
            ),
            (self.draw_pending(sale).await?, Refusal::DrawPending),
        ];
        refusals.extend(checks.into_iter().filter(|(refused, _)| *refused).map(|(_, why)| why));
        if !refusals.is_empty() {
            return Ok(RetireOutcome::Refused(refusals));
        }
        if !db::mark_retired(&self.pool, sale.as_str()).await? {
            return Ok(RetireOutcome::AlreadyRetired);
        }
        // A seed that committed before the mark may have reopened the sale. If not, nothing sells
        // from here on (step 2), and what sold before is found queued.
        let last = match self.busy_now(sale, &shards).await {
            Ok(refusals) if refusals.is_empty() => match self.end(sale).await {
                Ok(()) => self.busy_after_end(sale, &shards).await,
                Err(err) => Err(err),
            },
            other => other,
        };
        match last {
            Ok(refusals) if refusals.is_empty() => {}
            other => {
                db::unmark_retired(&self.pool, sale.as_str()).await?;
                return Ok(RetireOutcome::Refused(other?));
            }
        }
        let figures = (state.shards, state.stock_initial, state.sold);
        let retired = self.take_down(sale, &shards, figures, report.persisted).await?;
        tracing::info!(sale_id = %sale, report = ?retired, "sale retired");
        Ok(RetireOutcome::Retired(retired))
    }

    /// Steps 3 to 6 (module documentation), once the sale is marked, ended and found idle: what
    /// they removed, with the sale's `(shards, stock_initial, sold)` before and `persisted` orders.
    async fn take_down(
        &self,
        sale: &SaleId,
        shards: &[SaleKeys],
        (shard_count, stock_initial, sold): (u32, i64, i64),
        persisted: i64,
    ) -> Result<RetireReport, RetireError> {
        self.unregister(sale, shards).await?;
        tokio::time::sleep(self.grace).await;
        let mut con = self.sales.keyspace().conn();
        let mut removed = removal::remove_all(&mut con, shards).await?;
        // A worker that had not yet dropped a stream may have recreated it (its group): once more.
        let mut left = 0;
        for keys in shards {
            left += removal::exists(&mut con, keys).await?;
        }
        if left > 0 {
            tracing::warn!(sale_id = %sale, left, "keys of the retired sale came back; removing them again");
            removed.keys += removal::remove_all(&mut con, shards).await?.keys;
        }
        // Last, so a retirement stopped before this finds them again (`Self::shards`).
        self.unregister_kept(sale).await?;
        keys::leave_group(&mut con, sale, &shards[0]).await?;
        self.sales.forget_layout(sale.as_str());
        self.metrics.forget_sale(sale.as_str());
        Ok(RetireReport {
            sale_id: sale.to_string(),
            shards: shard_count,
            stock_initial,
            sold,
            persisted,
            buyers_removed: removed.buyers,
            receipts_removed: removed.receipts,
            keys_removed: removed.keys,
            grace_ms: self.grace.as_millis() as u64,
        })
    }

    /// A sale marked retired whose retirement stopped before its keys were gone (an error, or a
    /// shutdown during the grace): a registered sale, keys, or a place in its group left. With
    /// none left, its group's teardown left unfinished ([`keys::group_unfinished`]) is finished
    /// and the answer is [`RetireOutcome::AlreadyRetired`].
    /// [`RetireOutcome::AlreadyRetired`] when nothing is. Otherwise it is ended in Redis again and
    /// looked at once more, as step 2 does (orders queued or pending, or a reservation: refused,
    /// the mark kept, so nothing reopens it, until they are done), then steps 3 to 6 run.
    async fn finish(&self, sale: &SaleId) -> Result<RetireOutcome, RetireError> {
        let shards = self.shards(sale).await?;
        let keyspace = self.sales.keyspace();
        let mut con = keyspace.conn();
        let mut left = 0;
        for keys in &shards {
            left += removal::exists(&mut con, keys).await?;
        }
        let registered: bool = con.sismember(sales_registry_key(keyspace.prefix()), sale.as_str()).await?;
        let grouped: bool = match shards[0].group_keys(sale) {
            Some([_, _, group_sales]) => con.sismember(group_sales, sale.as_str()).await?,
            None => false,
        };
        if left == 0 && !registered && !grouped {
            // Nothing of the sale is left, but its group's teardown may be (its last sale's,
            // stopped midway or waiting for its draw's entries): finished here, the sale itself
            // not retired a second time.
            if keys::group_unfinished(&mut con, sale, &shards[0]).await? {
                tracing::warn!(sale_id = %sale, "finishing its group's teardown");
                keys::leave_group(&mut con, sale, &shards[0]).await?;
            }
            return Ok(RetireOutcome::AlreadyRetired);
        }
        tracing::warn!(sale_id = %sale, left, registered, grouped, "finishing a retirement stopped after its mark");
        let state = self.sales.sale_state(sale).await?;
        if state.is_some() {
            self.end(sale).await?;
        }
        let refusals = self.busy_after_end(sale, &shards).await?;
        if !refusals.is_empty() {
            return Ok(RetireOutcome::Refused(refusals));
        }
        let persisted = db::count_orders(&self.pool, sale).await?;
        // Redis may have lost the figures with the keys removed before the stop: Postgres's then.
        let figures = match state {
            Some(state) => (state.shards, state.stock_initial, state.sold),
            None => (shards.len() as u32, db::sales_row_stock(&self.pool, sale).await?.unwrap_or(0), persisted),
        };
        let retired = self.take_down(sale, &shards, figures, persisted).await?;
        tracing::info!(sale_id = %sale, report = ?retired, "retirement finished");
        Ok(RetireOutcome::Retired(retired))
    }

    /// Ends the sale now on every shard (step 2), and in its `sales` row: a retirement refused
    /// after this leaves the sale ended, and a sale Redis then loses is seeded again ended by a
    /// repair, not open (`db::set_ended`).
    async fn end(&self, sale: &SaleId) -> Result<(), RetireError> {
        let switched = controls::switch(&self.sales, sale, Switch::End, "").await?;
        if let Some(ends_at) = switched.and_then(|switched| switched.ends_at_ms) {
            db::set_ended(&mut *self.pool.acquire().await?, sale, db::ms_to_time(ends_at)).await?;
        }
        Ok(())
    }

    /// Whether the sale is a size of a drop whose draw has not been drawn yet.
    async fn draw_pending(&self, sale: &SaleId) -> Result<bool, RetireError> {
        let Some(drop) = sale.group().and_then(|group| DropId::parse(group).ok()) else { return Ok(false) };
        Ok(draw::run::store::draw(&self.pool, &drop).await?.is_some_and(|draw| draw.state != "drawn"))
    }

    /// The last look, once the sale has ended in Redis: [`Self::busy_now`], and a reservation or a
    /// release owed that committed before the mark (a refund with restock holds the row's lock
    /// only until it commits, so it can pass the first checks' moment and the mark's).
    async fn busy_after_end(&self, sale: &SaleId, shards: &[SaleKeys]) -> Result<Vec<Refusal>, RetireError> {
        let mut refusals = self.busy_now(sale, shards).await?;
        let tally = reservations::store::tally(&self.pool, sale).await?;
        if tally.releases_owed > 0 || tally.reserved > 0 {
            refusals.push(Refusal::Reserved);
        }
        Ok(refusals)
    }

    /// [`Self::busy`] of the sale as Redis holds it now. Should Redis have lost its meta, its
    /// streams may still hold orders (a meta removed by hand, or last of a retirement's steps):
    /// an entry there is queued (the worker trims only after its commit), one pending is pending,
    /// and the streams are looked at directly, since the step after this one deletes them.
    async fn busy_now(&self, sale: &SaleId, shards: &[SaleKeys]) -> Result<Vec<Refusal>, RetireError> {
        if let Some(state) = self.sales.sale_state(sale).await? {
            return self.busy(&state, shards).await;
        }
        let mut con = self.sales.keyspace().conn();
        let (mut queued, mut pending) = (0, 0);
        for keys in shards {
            queued += con.xlen::<_, u64>(&keys.orders).await?;
            pending += order_stream::pending(&mut con, &keys.orders).await?;
        }
        Ok([(queued > 0, Refusal::Queued), (pending > 0, Refusal::Pending)]
            .into_iter()
            .filter_map(|(busy, why)| busy.then_some(why))
            .collect())
    }

    /// The reasons a sale is still in use: open (Redis clock), queued, pending.
    async fn busy(&self, state: &SaleState, shards: &[SaleKeys]) -> Result<Vec<Refusal>, RetireError> {
        let (secs, micros) = self.sales.keyspace().server_time().await?;
        let now_ms = secs * 1000 + micros / 1000;
        let ended = state.ends_at_ms.is_some_and(|end| now_ms >= end);
        let mut refusals = vec![];
        if !ended && state.stock_left > 0 {
            refusals.push(Refusal::Open);
        }
        if state.queued > 0 {
            refusals.push(Refusal::Queued);
        }
        let mut pending = 0;
        for keys in shards {
            pending += order_stream::pending(&mut self.sales.keyspace().conn(), &keys.orders).await?;
        }
        if pending > 0 {
            refusals.push(Refusal::Pending);
        }
        Ok(refusals)
    }
}
