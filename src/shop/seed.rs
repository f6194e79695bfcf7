//! Seeding a sale (creating it, or re-seeding one without buyers), in Redis and Postgres together.

use serde_json::json;
use time::OffsetDateTime;

use super::admin::SaleReport;
use super::{Error, Shop};
use crate::admission::{self, MAX_RATE};
use crate::challenge::MAX_COST as MAX_CHALLENGE_COST;
use crate::controls::audit;
use crate::db;
use crate::domain::{MAX_PER_BUYER, QueueSpec, SaleId, ms_to_time};
use crate::purchase::shards::MAX_SHARDS;
use crate::purchase::{SaleSpec, SeedOutcome};
use crate::reservations;

/// Largest stock one sale may hold (the buyer set grows to this many members).
pub const MAX_STOCK: i64 = 10_000_000;

/// What an operator asks a seed for, as the request said it (checked by [`Shop::seed`]).
#[derive(Debug, Clone)]
pub struct SeedOrder {
    /// Items for sale.
    pub stock: i64,
    /// When the sale opens; `None`: at once.
    pub starts_at: Option<OffsetDateTime>,
    /// When it ends; `None`: never.
    pub ends_at: Option<OffsetDateTime>,
    /// Shards to split the stock over; `None`: the sale's, or 1.
    pub shards: Option<u32>,
    /// The payment window as written (`"15m"`); `None`: `SECKILL_PAYMENT_WINDOW`'s.
    pub payment_window: Option<String>,
    /// A waiting room: when it opens, and buyers admitted per second.
    pub queue: Option<(OffsetDateTime, u32)>,
    /// Units one buyer may buy, in the sale or across its group; `None`: 1.
    pub per_buyer: Option<u32>,
    /// The group the sale belongs to, as the request named it; a sale of a group is named
    /// `<group>.<name>` ([`SaleId::group`]), so this only has to agree with the id.
    pub group: Option<String>,
    /// The proof of work a buyer solves to join or buy: the tries a solve takes on average
    /// (`Some(0)`: none); `None`: `SECKILL_CHALLENGE_COST`'s.
    pub challenge: Option<u32>,
}

impl Shop {
    /// Creates or re-seeds `sale`. The Postgres record and the Redis seed succeed together: the
    /// Postgres transaction commits only after Redis accepted the seed. A sale with buyers is
    /// never re-seeded, so nobody's purchase is erased; nor is a sale with orders in Postgres that
    /// Redis lost (`sale_has_orders`: reconciliation's repair restores it with its buyers), nor a
    /// retired sale (its row is locked in the transaction, so a retirement and a seed of one sale
    /// never interleave). Recorded in the audit with `actor`. Answers the sale's state after the seed.
    pub async fn seed(&self, sale: &SaleId, order: SeedOrder, actor: Option<&str>) -> Result<SaleReport, Error> {
        let SeedOrder { stock, starts_at, ends_at, shards, payment_window, queue, per_buyer, group, challenge } = order;
        let invalid = |message: String| Err(Error::Invalid(message));
        let per_buyer = checked_per_buyer(per_buyer)?;
        if let Some(group) = group
            && sale.group() != Some(group.as_str())
        {
            // The id names the group, so every instance finds the group's hash slot from the id alone.
            return invalid(format!("a sale of group {group:?} is named \"{group}.<name>\" (docs/stock-sharding.md)"));
        }
        checked_stock("stock", stock)?;
        if shards.is_some_and(|k| !(1..=MAX_SHARDS).contains(&k)) {
            return invalid(format!("shards must be between 1 and {MAX_SHARDS}"));
        }
        checked_times(starts_at, ends_at)?;
        let asked_window = checked_window(payment_window.as_deref())?;
        // A shard never gets stock back (docs/stock-sharding.md), which a window's releases would
        // break: a sharded sale has no window, and asking for both is refused.
        let sharded = shards.unwrap_or(1) > 1
            || (shards.is_none() && self.sales.layout(sale).await?.is_some_and(|layout| layout.is_sharded()));
        if sharded && asked_window.is_some() {
            return invalid("payment_window cannot be used with more than one shard".into());
        }
        // A shard's stock is its own: a purchase of several units, or a limit shared across a
        // group's slot, would span shards (docs/stock-sharding.md).
        if sharded && (per_buyer > 1 || sale.group().is_some()) {
            return invalid("per_buyer over 1 and groups cannot be used with more than one shard".into());
        }
        let challenge_cost = self.checked_challenge(challenge)?;
        let window = if sharded { None } else { asked_window.or(self.settings.default_payment_window) };
        let payment_window_ms = window.map(|w| w.as_millis() as i64);
        // A queued sale's purchases arrive at its rate: it never needs shards, and a shard's
        // purchases would not see the line, which lives in the sale's own slot.
        if sharded && queue.is_some() {
            return invalid("queue cannot be used with more than one shard".into());
        }
        let queue = self.checked_queue("queue", queue, starts_at)?;
        let mut spec = SaleSpec {
            hold: None,
            stock,
            starts_at_ms: starts_at.map(to_ms),
            ends_at_ms: ends_at.map(to_ms),
            shards,
            payment_window_ms,
            queue,
            per_buyer,
            challenge_cost: (challenge_cost > 0).then_some(challenge_cost),
        };

        // Checked first without a lock (a retired sale has orders Redis forgot: that is not what
        // to say), then again under the row's lock, without holding a connection across other
        // queries.
        if db::sale_retired(&self.pool, sale.as_str()).await? == Some(true) {
            return Err(Error::SeedRetired);
        }
        self.refuse_if_redis_forgot_orders(sale).await?;
        let mut tx = self.pool.begin().await?;
        if db::lock_retired(&mut tx, sale.as_str()).await? {
            return Err(Error::SeedRetired);
        }
        let challenge_cost = spec.challenge_cost;
        let row = db::SaleRow {
            stock_initial: stock,
            starts_at,
            ends_at,
            payment_window_ms,
            queue,
            per_buyer,
            challenge_cost,
        };
        let kept = db::upsert_sale(&mut tx, sale, &row).await?;
        if let (Some(queue), Some(seed)) = (spec.queue.as_mut(), kept) {
            queue.seed = seed; // the seed Postgres keeps: Redis takes it unless it keeps one already
        }
        match self.sales.seed(sale, spec).await? {
            SeedOutcome::Seeded => {
                if let Some(queue) = &spec.queue {
                    self.keep_redis_queue_seed(&mut tx, sale, queue.seed).await?;
                }
                let effect = json!({
                    "stock": stock,
                    "shards": shards,
                    "starts_at": audit::instant(spec.starts_at_ms.map(ms_to_time)),
                    "ends_at": audit::instant(spec.ends_at_ms.map(ms_to_time)),
                    "payment_window_ms": payment_window_ms,
                    "queue_rate": queue.map(|q| q.rate),
                    "per_buyer": per_buyer,
                    "challenge_cost": challenge_cost,
                });
                audit::record(&mut tx, sale, "seed", None, &effect, actor).await?;
                self.sold_out.clear(sale.as_str());
                tx.commit().await?
            }
            SeedOutcome::InProgress => return Err(Error::SaleInProgress),
            SeedOutcome::Started => return Err(Error::SaleStarted),
            SeedOutcome::ShardsFixed { shards } => return Err(Error::ShardsFixed { shards }),
            SeedOutcome::GroupLimitDiffers { per_buyer } => return Err(Error::GroupLimitDiffers { per_buyer }),
            SeedOutcome::DropSize => return Err(Error::DropSize),
            SeedOutcome::GroupWindowDiffers { payment_window_ms } => {
                return Err(Error::GroupWindowDiffers { payment_window_ms });
            }
        }
        tracing::info!(sale_id = %sale, stock, shards, payment_window_ms, queue_rate = queue.map(|q| q.rate),
            "sale seeded");
        // This instance serves the new sale at once; others within their registry's 200 ms.
        self.board.forget(sale).await;
        self.sale_report(sale).await
    }

    /// The row takes the shuffle seed Redis keeps when it is not `given` ([`db::set_queue_seed`]):
    /// Redis's is the one the line is shuffled with and whose SHA-256 is published.
    async fn keep_redis_queue_seed(
        &self,
        tx: &mut sqlx::PgConnection,
        sale: &SaleId,
        given: [u8; 32],
    ) -> Result<(), Error> {
        match admission::kept_seed(self.sales.keyspace(), &self.sales.sale_keys(sale).line()).await? {
            Some(kept) if kept != given => Ok(db::set_queue_seed(tx, sale, &kept).await?),
            _ => Ok(()),
        }
    }

    /// The proof of work asked (`None`: `SECKILL_CHALLENGE_COST`'s), within its bounds.
    pub(super) fn checked_challenge(&self, challenge: Option<u32>) -> Result<u32, Error> {
        let cost = challenge.unwrap_or(self.settings.challenge_cost);
        if cost > MAX_CHALLENGE_COST {
            return Err(Error::Invalid(format!("challenge.cost must be between 0 and {MAX_CHALLENGE_COST}")));
        }
        Ok(cost)
    }

    /// A waiting room (`field` names it in the message): its rate within bounds, opening before
    /// `starts_at`, with a fresh shuffle seed (a line that has one keeps it).
    pub(super) fn checked_queue(
        &self,
        field: &str,
        queue: Option<(OffsetDateTime, u32)>,
        starts_at: Option<OffsetDateTime>,
    ) -> Result<Option<QueueSpec>, Error> {
        let Some((opens_at, rate)) = queue else { return Ok(None) };
        if !(1..=MAX_RATE).contains(&rate) {
            return Err(Error::Invalid(format!("{field}.rate must be between 1 and {MAX_RATE}")));
        }
        if starts_at.is_none_or(|start| opens_at >= start) {
            return Err(Error::Invalid(format!("a {field} needs starts_at, after {field}.opens_at")));
        }
        Ok(Some(QueueSpec {
            opens_at_ms: to_ms(opens_at),
            rate,
            ttl_ms: self.settings.admission_ttl.as_millis() as i64,
            seed: admission::draw_seed(),
        }))
    }

    /// A seed must not start a second life over the orders Postgres holds: if the sale has orders
    /// there, it is refused, as `sale_in_progress` while Redis still knows buyers of it, else as
    /// `sale_has_orders` (Redis lost them; a seed would let them buy again and oversell). No buyer
    /// can appear in between: orders come only from buyers.
    pub(super) async fn refuse_if_redis_forgot_orders(&self, sale: &SaleId) -> Result<(), Error> {
        let orders = db::count_orders(&self.pool, sale).await?;
        if orders > 0 {
            return match self.sales.sale_state(sale).await? {
                Some(redis) if redis.sold > 0 => Err(Error::SaleInProgress),
                _ => Err(Error::SaleHasOrders { orders }),
            };
        }
        self.refuse_if_redis_forgot_the_group(sale).await
    }

    /// The same for the sale's group: a group whose buyers' holdings Redis does not have (new, or
    /// lost with its slot) must not start over the live orders Postgres holds in its other sales,
    /// or those units would not count against the group's limit (a repair of those sales raises
    /// the holdings again). A group that lost only its meta keeps its holdings: the seed writes
    /// the meta back.
    async fn refuse_if_redis_forgot_the_group(&self, sale: &SaleId) -> Result<(), Error> {
        let Some(group) = sale.group() else { return Ok(()) };
        let held = self.sales.keyspace().sale_keys(sale).held;
        let known: bool = redis::AsyncCommands::exists(&mut self.sales.keyspace().conn(), &held).await?;
        if known {
            return Ok(());
        }
        match db::count_group_orders_besides(&self.pool, group, sale).await? {
            0 => Ok(()),
            orders => Err(Error::GroupHasOrders { orders }),
        }
    }
}

/// Unix milliseconds of `t`.
pub(super) fn to_ms(t: OffsetDateTime) -> i64 {
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// `per_buyer` (`None`: 1), within 1 to [`MAX_PER_BUYER`].
pub(super) fn checked_per_buyer(per_buyer: Option<u32>) -> Result<u32, Error> {
    let per_buyer = per_buyer.unwrap_or(1);
    if !(1..=MAX_PER_BUYER).contains(&per_buyer) {
        return Err(Error::Invalid(format!("per_buyer must be between 1 and {MAX_PER_BUYER}")));
    }
    Ok(per_buyer)
}

/// A stock (`field` names it), within 0 to [`MAX_STOCK`].
pub(super) fn checked_stock(field: &str, stock: i64) -> Result<(), Error> {
    if !(0..=MAX_STOCK).contains(&stock) {
        return Err(Error::Invalid(format!("{field} must be between 0 and {MAX_STOCK}")));
    }
    Ok(())
}

/// A start before the end, and an end in the future: a sale that has ended before it is seeded is
/// a typo; seeded, the janitor would retire it and burn its id.
pub(super) fn checked_times(starts_at: Option<OffsetDateTime>, ends_at: Option<OffsetDateTime>) -> Result<(), Error> {
    if let (Some(start), Some(end)) = (starts_at, ends_at)
        && start >= end
    {
        return Err(Error::Invalid("starts_at must be before ends_at".into()));
    }
    if ends_at.is_some_and(|end| end <= OffsetDateTime::now_utc()) {
        return Err(Error::Invalid("ends_at must be in the future".into()));
    }
    Ok(())
}

/// The payment window as written (`"15m"`), parsed; `None`: none asked.
pub(super) fn checked_window(raw: Option<&str>) -> Result<Option<std::time::Duration>, Error> {
    raw.map(|raw| reservations::payment_window(raw).map_err(|e| Error::Invalid(format!("payment_window: {e}"))))
        .transpose()
}
