//! Reconciliation of one sale: do its Redis buyers and its Postgres orders name the same users,
//! does its stock add up, does it have its `sales` row? And, on request, repair what Redis can
//! repair.
//!
//! Once a sale's queue has drained, its buyer set and its Postgres orders hold the same users.
//! They drift apart only behind the service's back: order rows deleted by hand, a Redis failover
//! that lost writes Postgres already has, a seed whose Postgres commit failed after Redis had
//! accepted it. [`check`] finds these on a live sale without false alarms by reading, after one
//! atomic read of the sale's stock ([`Sales::sale_state`], which also says whether the sale
//! exists), in this order:
//!
//! 1. the buyers `B` (SSCAN, never SMEMBERS: a sale can have millions of buyers);
//! 2. the users `S` of the orders still queued in the stream (XRANGE, in pages);
//! 3. the users `P` with an order in Postgres;
//! 4. the buyers again, `B2`.
//!
//! `missing_in_postgres = B − S − P`. The purchase script adds the buyer and appends the order in
//! one atomic step, and the worker removes an order from the stream only after Postgres committed
//! it. So the order of a buyer seen in (1) is either still in the stream when (2) reads it, or
//! was committed before it left the stream, hence before (3) reads Postgres: a buyer in neither
//! has really lost its order. (Reading Postgres before the stream would flag every order
//! committed and acknowledged between the two reads.)
//!
//! `unknown_to_redis = P − B2`. Every order was appended after its user joined the buyer set,
//! and buyers are never removed, so every user seen in (3) is in the set read at (4). (Comparing
//! with `B` would flag everyone who bought between (1) and (3).)
//!
//! [`repair`] makes Redis whole again from what Postgres remembers. A sale Redis lost entirely is
//! seeded again from its `sales` row; buyers Postgres has and Redis lost (`unknown_to_redis`) go
//! back into the buyer set with their receipts, the stock lowered by as many
//! (`lua/restore.lua`), so nobody buys twice and `stock_initial = stock_left + sold - released` (in units)
//! holds across the loss; the units of cancelled or expired orders are released again (each
//! returns at most once: `lua/release.lua`'s gate); missing orders are re-enqueued; a missing
//! `sales` row is restored. It deletes
//! nothing.

use std::collections::HashSet;

use sqlx::PgPool;

use crate::controls;
use crate::db;
use crate::domain::{DropId, SaleId, UserId};
use crate::draw::entries::store as draw_store;
use crate::draw::run as draw_run;
use crate::drops::{self, DropSpec};
use crate::orders::queue;
use crate::purchase::{CommittedOrder, SaleSpec, SaleState, Sales, SeedOutcome};
use crate::reservations::{self, ReservationError};

mod kept;
mod report;

pub use self::report::ReconcileReport;

/// A reconciliation could not read or write what it needed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A Redis call failed.
    #[error("redis")]
    Redis(#[from] redis::RedisError),
    /// A Postgres call failed.
    #[error("postgres")]
    Postgres(#[from] sqlx::Error),
    /// A repair of a sale whose row is marked retired (retired, or being retired: the mark comes
    /// first): nothing was done.
    #[error("the sale is retired, or being retired: a repair would write back what the retirement removes")]
    Retired,
    /// A repair of a sharded sale whose shard 0 Redis lost, while orders of the shards it kept are
    /// still on their way to Postgres ([`kept`]): those shards are ended, nothing was seeded.
    #[error(
        "orders of the shards Redis kept of this sale are still on their way to Postgres ({queued} stream \
         entries): those shards are ended (nothing more sells there) and nothing was seeded; repair again once \
         the workers have copied them"
    )]
    OrdersQueued {
        /// Entries of those shards' streams not yet committed (an entry may hold several orders).
        queued: u64,
    },
}

impl From<ReservationError> for ReconcileError {
    /// A release fails only on Redis or Postgres (it names no order a caller chose).
    fn from(err: ReservationError) -> Self {
        match err {
            ReservationError::Redis(err) => Self::Redis(err),
            ReservationError::Postgres(err) => Self::Postgres(err),
            other => Self::Postgres(sqlx::Error::Protocol(other.to_string())),
        }
    }
}

/// Compares the sale's Redis buyers with its Postgres orders, in the read order described in the
/// module documentation. `None` if the sale was never seeded in Redis.
pub async fn check(sales: &Sales, pool: &PgPool, sale: &SaleId) -> Result<Option<ReconcileReport>, ReconcileError> {
    Ok(inspect(sales, pool, sale).await?.map(|(report, _)| report))
}

/// Repairs the sale (module documentation), then reports what the check before the repair found
/// and what the repair did. `None` if neither Redis nor the `sales` table knows the sale.
///
/// A re-enqueued order keeps the id and time the buyer was given, from its receipt
/// ([`queue::requeue`]); only a buyer without a receipt gets a new id (UUID v7) and the time of
/// the repair. Repeating a repair is harmless: re-enqueued orders are queued and restored buyers
/// are buyers, so the next check reports neither; should two repairs race, the worker keeps the
/// first order of a user (primary key `(sale_id, user_id)`) and drops the other as a conflict.
pub async fn repair(sales: &Sales, pool: &PgPool, sale: &SaleId) -> Result<Option<ReconcileReport>, ReconcileError> {
    // A retired sale has no second life, not even through a repair; nor does one being retired
    // (its row is marked first), whose keys a repair running beside the retirement would write
    // back, lost or not (a drop's size is restored whenever its meta lacks a field).
    if db::sale_retired(pool, sale.as_str()).await? == Some(true) {
        return Err(ReconcileError::Retired);
    }
    // A lost sale comes back held (REPAIR_HOLD: paused, no purchase nor release) until its buyers,
    // holdings and orders are back, below: never sold over the orders Postgres holds, nor given
    // back units its new stock never lost.
    let sale_restored = reseed_lost_sale(sales, pool, sale).await?;
    let Some((mut report, state)) = inspect(sales, pool, sale).await? else {
        return Ok(None);
    };
    report.sale_restored = sale_restored;
    let lost = db::orders_of_users(pool, sale, &report.unknown_to_redis).await?;
    let lost: Vec<CommittedOrder> = lost
        .into_iter()
        .filter_map(|order| {
            let created_at_ms = (order.created_at.unix_timestamp_nanos() / 1_000_000) as i64;
            Some(CommittedOrder {
                user_id: valid_user(sale, &order.user_id)?,
                order_id: order.order_id,
                created_at_ms,
                released: order.returns_units,
                quantity: order.quantity,
            })
        })
        .collect();
    let restored = sales.restore_buyers(sale, &lost).await?;
    (report.buyers_restored, report.overdrawn) = (restored.buyers, restored.overdrawn);
    report.releases_restored = restored.released;
    restore_group_holdings(sales, pool, sale).await?;
    let users: Vec<UserId> = report.missing_in_postgres.iter().filter_map(|user| valid_user(sale, user)).collect();
    let orders = queue::requeue(sales, sale, &users).await?;
    report.reenqueued = orders.len();
    if report.sales_row_stock.is_none() {
        let at = |ms: Option<i64>| ms.map(db::ms_to_time);
        report.sales_row_restored = db::insert_sale_if_missing(
            pool,
            sale,
            state.stock_initial,
            at(state.starts_at_ms),
            at(state.ends_at_ms),
            state.payment_window_ms,
            state.per_buyer,
        )
        .await?;
    }
    tracing::info!(
        sale_id = %sale,
        sale_restored = report.sale_restored,
        buyers_restored = report.buyers_restored,
        overdrawn = report.overdrawn,
        reenqueued = report.reenqueued,
        sales_row_restored = report.sales_row_restored,
        "sale repaired"
    );
    if report.overdrawn > 0 {
        tracing::error!(sale_id = %sale, overdrawn = report.overdrawn, "Postgres holds more orders than the sale's \
            stock");
    }
    // Also lifts the hold of an earlier repair that stopped half-way. The releases Postgres owes
    // run after it: a held sale gives nothing back.
    controls::lift_hold(sales, sale, REPAIR_HOLD).await?;
    report.units_released = reservations::release_all(sales, pool, sale).await?;
    Ok(Some(report))
}

pub use crate::purchase::REPAIR_HOLD;

/// Seeds a sale Redis does not know from its `sales` row, if it has one (unsharded, with the
/// row's stock and schedule); true if it did. Its buyers are restored next.
async fn reseed_lost_sale(sales: &Sales, pool: &PgPool, sale: &SaleId) -> Result<bool, ReconcileError> {
    let lost = sales.sale_state(sale).await?.is_none();
    if let Some(drop) = sale.group().and_then(|group| DropId::parse(group).ok())
        && let Some(row) = drops::store::row(pool, &drop).await?
    {
        return restore_drop_size(sales, pool, sale, &drop, row).await;
    }
    if !lost {
        return Ok(false);
    }
    let Some(row) = db::sale_row(pool, sale).await? else {
        return Ok(false);
    };
    kept::settle(sales, sale).await?;
    let ms = |t: Option<time::OffsetDateTime>| t.map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
    let spec = SaleSpec {
        stock: row.stock_initial,
        starts_at_ms: ms(row.starts_at),
        ends_at_ms: ms(row.ends_at),
        shards: None,
        payment_window_ms: row.payment_window_ms,
        // A queued sale comes back queued, with its seed: a repair never opens it to everyone.
        queue: row.queue,
        per_buyer: row.per_buyer,
        // A sale that asked a proof of work asks it again: a repair never opens the door wider.
        challenge_cost: row.challenge_cost,
        hold: Some(REPAIR_HOLD),
    };
    let outcome = sales.seed(sale, spec).await?;
    tracing::warn!(sale_id = %sale, ?outcome, "sale lost by Redis seeded again from its Postgres row");
    Ok(outcome == SeedOutcome::Seeded)
}

/// Writes again what the drop's seed wrote for `sale`, one of its sizes, from the `drops` row and
/// the size's `sales` row, if Redis lost it (`drops::restore`): the size with its line mark
/// (`queue_rate`, `line` = "drop": it sells to admitted buyers only), held as a lost sale is
/// ([`REPAIR_HOLD`]), the group's `per_buyer` (the buyers' units held in the group are raised by
/// [`restore_group_holdings`] later) and the drop's line with its seed, whichever Redis lost; true
/// if the size itself was lost. The drop's other sizes are left for their own repair: a size
/// written back before its buyers would sell to them again.
async fn restore_drop_size(
    sales: &Sales,
    pool: &PgPool,
    sale: &SaleId,
    drop: &DropId,
    row: drops::store::DropRow,
) -> Result<bool, ReconcileError> {
    let Some(size) = db::sale_row(pool, sale).await? else {
        return Ok(false);
    };
    let ms = |t: Option<time::OffsetDateTime>| t.map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
    let spec = DropSpec {
        sizes: vec![(sale.clone(), size.stock_initial)],
        starts_at_ms: ms(size.starts_at),
        ends_at_ms: ms(size.ends_at),
        payment_window_ms: row.payment_window_ms,
        per_buyer: row.per_buyer,
        challenge_cost: row.challenge_cost,
        line: row.line,
        draw: match draw_store::row(pool, drop).await? {
            // A draw meta written back takes the state Postgres records: a draw run (early) keeps
            // its entries closed and its seed revealed.
            Some(draw) => Some(drops::DropDraw {
                opens_at_ms: ms(Some(draw.opens_at)).unwrap_or_default(),
                closes_at_ms: ms(Some(draw.closes_at)).unwrap_or_default(),
                commitment: draw.commitment,
                waitlist: draw.waitlist_places,
                state: draw_run::store::draw(pool, drop).await?.map(|run| run.state),
            }),
            None => None,
        },
    };
    let line_stock = drops::store::stock(pool, drop).await?;
    let written = drops::restore(sales, drop, &spec, line_stock, REPAIR_HOLD).await?;
    if written > 0 {
        tracing::warn!(sale_id = %sale, drop_id = %drop, "size of a drop lost by Redis seeded again from Postgres");
    }
    Ok(written > 0)
}

/// Buyers per page of [`restore_group_holdings`].
const HOLDINGS_PAGE: i64 = 500;

/// Raises every buyer's units held in the sale's group to what Postgres holds over all the group's
/// sales (a group's holdings are one key: a loss of it, or of the whole slot, takes the units of
/// sizes not yet repaired too; this is the only step of a repair that writes them). Pages of
/// [`HOLDINGS_PAGE`] buyers: bounded memory however many buyers the group has.
async fn restore_group_holdings(sales: &Sales, pool: &PgPool, sale: &SaleId) -> Result<(), ReconcileError> {
    let Some(group) = sale.group() else { return Ok(()) };
    let mut after = String::new();
    loop {
        let page = db::group_units_page(pool, group, &after, HOLDINGS_PAGE).await?;
        let Some((last, _)) = page.last() else { return Ok(()) };
        after = last.clone();
        let units: Vec<(UserId, u32)> = page
            .iter()
            .filter_map(|(user, units)| Some((valid_user(sale, user)?, u32::try_from(*units).ok()?)))
            .collect();
        sales.hold_at_least(sale, &units).await?;
        if page.len() < HOLDINGS_PAGE as usize {
            return Ok(());
        }
    }
}

fn valid_user(sale: &SaleId, user: &str) -> Option<UserId> {
    UserId::stored(user)
        .inspect_err(|why| tracing::warn!(sale_id = %sale, user_id = user, why, "invalid user id: not repaired"))
        .ok()
}

async fn inspect(
    sales: &Sales,
    pool: &PgPool,
    sale: &SaleId,
) -> Result<Option<(ReconcileReport, SaleState)>, ReconcileError> {
    // Before Redis: a release records `restocked_at` only after its script ran.
    let restocked = reservations::store::restocked_count(pool, sale).await?;
    let Some(state) = sales.sale_state(sale).await? else {
        return Ok(None);
    };
    let buyers = sales.scan_buyers(sale).await?; // (1)
    let queued = queue::queued_users(sales, sale).await?; // (2)
    let persisted: HashSet<String> = db::order_users(pool, sale).await?.into_iter().collect(); // (3)
    let missing_in_postgres = sorted(buyers.into_iter().filter(|u| !queued.contains(u) && !persisted.contains(u)));
    drop(queued);
    let buyers_after = sales.scan_buyers(sale).await?; // (4)
    let unknown_to_redis = sorted(persisted.iter().filter(|u| !buyers_after.contains(*u)).cloned());
    let sales_row_stock = db::sales_row_stock(pool, sale).await?;

    let stock_balanced =
        state.stock_initial == state.stock_left + state.units_sold - state.units_released && state.stock_left >= 0;
    let releases_owed = reservations::store::tally(pool, sale).await?.releases_owed;
    let releases_lost = (restocked - state.released).max(0);
    let consistent = stock_balanced
        && sales_row_stock == Some(state.stock_initial)
        && missing_in_postgres.is_empty()
        && unknown_to_redis.is_empty()
        && releases_lost == 0;
    let report = ReconcileReport {
        sale_id: sale.to_string(),
        stock_initial: state.stock_initial,
        stock_left: state.stock_left,
        buyers: state.sold,
        released: state.released,
        releases_owed,
        releases_lost,
        persisted: persisted.len() as i64,
        queued: state.queued,
        units_sold: state.units_sold,
        units_returned: state.units_released,
        stock_balanced,
        sales_row_stock,
        missing_in_postgres,
        unknown_to_redis,
        reenqueued: 0,
        sales_row_restored: false,
        sale_restored: false,
        buyers_restored: 0,
        releases_restored: 0,
        overdrawn: 0,
        units_released: 0,
        consistent,
    };
    Ok(Some((report, state)))
}

fn sorted(users: impl Iterator<Item = String>) -> Vec<String> {
    let mut users: Vec<String> = users.collect();
    users.sort_unstable();
    users
}
