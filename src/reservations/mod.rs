//! Payment windows: in a sale seeded with one, a win is a reservation that must be paid by its
//! deadline, or its unit goes back to the crowd (docs/reservations.md has the picture).
//!
//! ```text
//!            POST /buy (lua/buy.lua: stock - 1, entry with pay_by_ms)
//!                 │
//!                 ▼  worker inserts the row
//!            ┌──────────┐  payment event before pay_by ┌──────┐
//!            │ reserved │ ───────────────────────────► │ paid │
//!            └──────────┘                              └──────┘
//!   DELETE …/order │    │ pay_by passed (sweeper, or the late event itself)
//!                  ▼    ▼
//!           ┌───────────┐ ┌─────────┐   restocked_at null: release owed (the outbox)
//!           │ cancelled │ │ expired │ ──► lua/release.lua: SADD released (the gate), stock + 1
//!           └───────────┘ └─────────┘     ──► restocked_at = now()
//! ```
//!
//! Postgres is the authority: each transition is one compare-and-set from `reserved`
//! ([`store`]). A cancelled or expired order's unit returns through `lua/release.lua`, whose
//! released set admits each order id once, so the release may be repeated (the [`sweeper`]'s
//! re-drive of the outbox after a crash, two sweepers, a lost reply) and still returns one unit.
//! A payment after the deadline never revives the order: it is stored as a late payment, to
//! refund. A buyer whose reservation was cancelled or expired stays in the buyer set: one order
//! per user per sale, so a scalper cannot hold a unit forever by buying it again as it expires.
//! The payment events' signature is in [`signature`].

pub mod actions;
pub mod signature;
pub mod store;
pub mod sweeper;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use sqlx::PgPool;
use tracing::Instrument;
use uuid::Uuid;

use self::store::{Cancel, PaymentError, Settled};
use crate::db;
use crate::domain::{DropId, SaleId, Standing, UserId};
use crate::draw::offers;
use crate::draw::run::store as draw_store;
use crate::metrics::Metrics;
use crate::orders::queue;
use crate::purchase::Sales;
use crate::redis::lua::{self, unexpected_reply};
use crate::telemetry::{LimitedLines, traces};

/// Longest payment window a sale may have.
pub const MAX_PAYMENT_WINDOW: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Parses a payment window (`"15m"`, `"3s"`): at least 1 s (a deadline closer than the sweeper's
/// tick is no window), at most [`MAX_PAYMENT_WINDOW`].
pub fn payment_window(s: &str) -> Result<std::time::Duration, String> {
    let window = humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 15m or 3s: {e}"))?;
    if window < std::time::Duration::from_secs(1) || window > MAX_PAYMENT_WINDOW {
        return Err(format!("a payment window must be between 1s and 7d, got {s:?}"));
    }
    Ok(window)
}

/// Order ids released per script call.
const RELEASE_PAGE: usize = 500;

/// Why a reservation's step failed.
#[derive(Debug, thiserror::Error)]
pub enum ReservationError {
    /// No order of the sale with that id, in Postgres or in the queue.
    #[error("no such order")]
    UnknownOrder,
    /// A payment event id was used before for another order.
    #[error("the event id was used for another order")]
    EventReused,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Postgres(#[from] sqlx::Error),
}

impl From<PaymentError> for ReservationError {
    fn from(err: PaymentError) -> Self {
        match err {
            PaymentError::UnknownOrder => Self::UnknownOrder,
            PaymentError::EventReused => Self::EventReused,
            PaymentError::Postgres(err) => Self::Postgres(err),
        }
    }
}

/// Gives the units of `orders` (cancelled or expired orders of `sale`) back to its stock, each
/// order's quantity once (`lua/release.lua`; the quantities read from Postgres), then records them
/// restocked. A size of a drop in draw mode offers them to the draw's waitlist first
/// (`crate::draw::offers`, behind the same gate). A sale that was sold out and has stock again is
/// announced on the events channel, so every instance drops its sold-out flag. Returns the units
/// that came back (0 for orders released before). A sale Redis does not know keeps its releases
/// owed.
pub async fn release(sales: &Sales, pool: &PgPool, sale: &str, orders: &[Uuid]) -> Result<u64, ReservationError> {
    let Ok(sale_id) = SaleId::parse(sale) else {
        tracing::error!(sale_id = sale, "an order row names an invalid sale id: its release stays owed");
        return Ok(0);
    };
    let drawn = match sale_id.group().map(DropId::parse) {
        Some(Ok(drop)) if draw_store::is_draw(pool, &drop).await? => {
            let size = drop.size_of(&sale_id).unwrap_or_default().to_owned();
            Some((drop, size))
        }
        _ => None,
    };
    let mut released = 0;
    let mut reopened = false;
    for page in orders.chunks(RELEASE_PAGE) {
        let quantities = store::quantities(pool, sale, page).await?;
        // An order Postgres does not hold is not released here (every caller read it there).
        let page: Vec<(Uuid, i32)> = page.iter().filter_map(|o| quantities.get(o).map(|q| (*o, *q))).collect();
        let step = match &drawn {
            Some((drop, size)) => offered(sales, drop, (&sale_id, size), &page).await?,
            None => to_stock(sales, &sale_id, &page).await?,
        };
        let Some((units, stock_before, to_stock)) = step else {
            // Re-driven every second until Redis takes it: one line a minute for all such sales.
            static LINES: LazyLock<LimitedLines> = LazyLock::new(|| LimitedLines::every(Duration::from_secs(60)));
            if let Some(suppressed) = LINES.admit() {
                tracing::warn!(
                    sale_id = sale,
                    suppressed,
                    "release owed: Redis does not know the sale (reconcile restores it), or holds it (a repair's \
                     hold; a drawn drop's pause, until its resume offers the units to its waitlist)"
                );
            }
            return Ok(released);
        };
        released += units;
        reopened |= to_stock > 0 && stock_before <= 0;
        let ids: Vec<Uuid> = page.iter().map(|(id, _)| *id).collect();
        store::mark_restocked(pool, sale, &ids).await?;
    }
    if reopened {
        sales.announce(&sale_id, "restock").await;
    }
    Ok(released)
}

/// One `lua/release.lua` call: the units that came back, the stock before, and the units that
/// went to the stock (all of them); `None` for a sale Redis does not know.
async fn to_stock(
    sales: &Sales,
    sale: &SaleId,
    page: &[(Uuid, i32)],
) -> Result<Option<(u64, i64, u64)>, ReservationError> {
    let keys = sales.keyspace().sale_keys(sale);
    let mut call = lua::RELEASE.key(&keys.stock);
    call.key(&keys.released).key(&keys.meta);
    for (order, quantity) in page {
        call.arg(order.to_string()).arg(quantity);
    }
    let reply: redis::Value = lua::run(&call, &mut sales.keyspace().conn()).await?;
    match reply {
        redis::Value::Array(_) => {
            let (_orders, stock_before, units): (u64, i64, u64) =
                redis::from_redis_value(reply).map_err(redis::RedisError::from)?;
            Ok(Some((units, stock_before, units)))
        }
        other => match redis::from_redis_value::<String>(other).map_err(redis::RedisError::from)?.as_str() {
            "unknown_sale" => Ok(None),
            word => Err(unexpected_reply("release.lua", word).into()),
        },
    }
}

/// One `lua/draw_release.lua` call, as [`to_stock`]'s answer; each offer logged.
async fn offered(
    sales: &Sales,
    drop: &DropId,
    (sale, size): (&SaleId, &str),
    page: &[(Uuid, i32)],
) -> Result<Option<(u64, i64, u64)>, ReservationError> {
    let Some(released) = offers::release(sales.keyspace(), drop, (sale, size), page).await? else { return Ok(None) };
    for offer in &released.offers {
        let (place, order_id, quantity) = (offer.position, offer.order_id, offer.quantity);
        tracing::info!(sale_id = %sale, place, %order_id, quantity, "units given back offered to the waitlist");
    }
    Ok(Some((released.units, released.stock_before, released.to_stock)))
}

/// Releases every cancelled or expired order of the sale again (reconciliation's repair: the
/// gate returns only the units Redis has not had back). Returns the units that went back.
pub async fn release_all(sales: &Sales, pool: &PgPool, sale: &SaleId) -> Result<u64, ReservationError> {
    let orders = store::released_orders(pool, sale).await?;
    release(sales, pool, sale.as_str(), &orders).await
}

/// The reservations of one deployment: Postgres for their fate, Redis for their units.
#[derive(Clone)]
pub struct Reservations {
    sales: Sales,
    pool: PgPool,
    metrics: Arc<Metrics>,
}

impl Reservations {
    pub fn new(sales: Sales, pool: PgPool, metrics: Arc<Metrics>) -> Self {
        Self { sales, pool, metrics }
    }

    /// Applies a payment event (`store::pay`). An order still in the queue is stored from its
    /// stream entry first, so an event that overtakes the worker is not lost. A reservation the
    /// event found past its deadline is expired here and its unit released.
    ///
    /// Postgres is asked again after the queue even when the queue no longer holds the order:
    /// the worker commits a batch and only then removes its entries, so an order missed in
    /// Postgres and then in the queue was committed in between.
    pub async fn pay(&self, event_id: &str, sale: &SaleId, order_id: Uuid) -> Result<Settled, ReservationError> {
        let span = span("reservation.pay", sale, order_id);
        let settled = self.pay_traced(event_id, sale, order_id).instrument(span.clone()).await;
        span.record("seckill.outcome", settled.as_ref().map_or("refused", |s| s.outcome.as_str()));
        settled
    }

    async fn pay_traced(&self, event_id: &str, sale: &SaleId, order_id: Uuid) -> Result<Settled, ReservationError> {
        let settled = match store::pay(&self.pool, event_id, sale, order_id).await {
            Err(PaymentError::UnknownOrder) => {
                self.store_queued(sale, |o| o.order_id == order_id).await?;
                store::pay(&self.pool, event_id, sale, order_id).await?
            }
            settled => settled?,
        };
        if settled.expired_now {
            self.metrics.reservations.with_label_values(&["expired"]).inc();
            self.release_now(sale.as_str(), &[order_id]).await;
        }
        if !settled.repeat {
            match settled.outcome {
                store::PaymentOutcome::Paid => self.metrics.reservations.with_label_values(&["paid"]).inc(),
                outcome => {
                    self.metrics.late_payments.with_label_values(&[outcome.as_str()]).inc();
                    let status = settled.standing.as_str();
                    let outcome = outcome.as_str();
                    tracing::warn!(sale_id = %sale, %order_id, event_id, outcome, status, "payment to refund");
                }
            }
        }
        Ok(settled)
    }

    /// The buyer gives the reservation back: `reserved` → `cancelled` and its unit released. An
    /// order still in the queue is stored from its stream entry first; Postgres is asked again
    /// after the queue in any case, as for [`Reservations::pay`]. A queued order that is no
    /// reservation (a sale without a payment window) is `confirmed` once stored: not cancelled.
    pub async fn cancel(&self, sale: &SaleId, user: &UserId) -> Result<Cancel, ReservationError> {
        let cancelled = match store::cancel(&self.pool, sale, user).await? {
            Cancel::Missing => match queue::queued_order_of(&self.sales, sale, user).await? {
                Some(order) if order.pay_by_ms.is_none() => Cancel::Not(Standing::Confirmed),
                queued => {
                    if let Some(order) = queued {
                        db::insert_orders(&self.pool, &[order], db::Hint::Quiet).await?;
                    }
                    store::cancel(&self.pool, sale, user).await?
                }
            },
            other => other,
        };
        if let Cancel::Cancelled(order_id) = cancelled {
            self.metrics.reservations.with_label_values(&["cancelled"]).inc();
            self.release_now(sale.as_str(), &[order_id]).await;
        }
        Ok(cancelled)
    }

    /// Releases at once what a transition just freed; a failure leaves the release owed, for
    /// the sweeper's re-drive.
    async fn release_now(&self, sale: &str, orders: &[Uuid]) {
        if let Err(err) = self.release(sale, orders).await {
            tracing::warn!(sale_id = sale, error = %err, "release owed: the sweeper retries it");
        }
    }

    /// Gives the units of `orders` back ([`release`]) and counts them.
    pub async fn release(&self, sale: &str, orders: &[Uuid]) -> Result<u64, ReservationError> {
        let released = release(&self.sales, &self.pool, sale, orders).await?;
        self.metrics.units_released.inc_by(released);
        Ok(released)
    }

    /// Stores the first queued order of `sale` matching `wanted` that is a reservation, as the
    /// worker would (idempotent: the worker's own insert of it later is a redelivery), if there
    /// is one.
    async fn store_queued(
        &self,
        sale: &SaleId,
        wanted: impl Fn(&crate::domain::Order) -> bool,
    ) -> Result<(), ReservationError> {
        if let Some(order) = queue::find_queued(&self.sales, sale, |o| o.pay_by_ms.is_some() && wanted(o)).await? {
            db::insert_orders(&self.pool, &[order], db::Hint::Quiet).await?;
        }
        Ok(())
    }

    /// The sale's orders by standing and its payments to refund.
    pub async fn tally(&self, sale: &SaleId) -> Result<store::Tally, sqlx::Error> {
        store::tally(&self.pool, sale).await
    }
}

/// A span of a reservation's transition when traces are on (`crate::telemetry::traces`): a child
/// of the request (a payment event) or of the sweeper's round (an expiry).
fn span(name: &'static str, sale: &SaleId, order_id: Uuid) -> tracing::Span {
    match traces::on() {
        true => tracing::info_span!(
            "reservation",
            otel.name = name,
            seckill.sale_id = %sale,
            seckill.order_id = %order_id,
            seckill.outcome = tracing::field::Empty,
        ),
        false => tracing::Span::none(),
    }
}
