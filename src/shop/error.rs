//! What a use case answers when it does not succeed: a refusal the caller can act on, or a
//! dependency's failure ([`Error`]), with its stable code. `http` maps each variant once to a
//! status code; the errors of the layers below become [`Error`]s once, in `error_from`; each
//! variant's code and cause are read in `error_code`.

use uuid::Uuid;

use crate::admission::token::Refused;
use crate::challenge::Refused as ChallengeRefused;
use crate::domain::Standing;
use crate::purchase::Receipt;
use crate::reservations::signature::SignatureError;
use crate::retire::Refusal;

/// Every way a use case can fail: each variant has its stable code ([`Error::code`]) and its
/// message (the `#[error]` text).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `invalid_request`: the input breaks a rule of the sale (a seed's stock, its dates).
    #[error("{0}")]
    Invalid(String),
    /// `unknown_sale`.
    #[error("no sale with that id")]
    UnknownSale,
    /// `unknown_drop`: no sale of the drop's group is known.
    #[error("no drop with that id")]
    UnknownDrop,
    /// `not_a_drop`: the group's sales were seeded one by one (`PUT /admin/sales`), not as a drop.
    #[error("the group's sales were seeded one by one with PUT /admin/sales/{{sale_id}}: it is not a drop")]
    NotADrop,
    /// `not_a_drop`: a drop's switch on a group of more sales than a drop may have.
    #[error("the group holds more than {} sales seeded one by one: switch them one by one", crate::drops::MAX_SIZES)]
    TooManySizes,
    /// `drop_in_progress`: a size of the drop has buyers; the drop cannot be re-seeded.
    #[error(
        "size {0} of the drop has buyers: the drop cannot be re-seeded (POST /admin/drops/{{drop_id}}/stock changes \
         its stock, /end ends it)"
    )]
    DropInProgress(String),
    /// `drop_size_missing`: a seed of a drop leaves out one of its sizes (a size is never removed).
    #[error("size {0} of the drop is missing from the seed: a drop's size cannot be removed (seed it with stock 0)")]
    DropSizeMissing(String),
    /// `drop_size`: a sale seed of a drop's size (a drop is seeded whole).
    #[error("this sale is a size of a drop: seed it with PUT /admin/drops/{{drop_id}}")]
    DropSize,
    /// `stock_below_zero` or `stock_too_large` of one size of a drop's stock change: no size changed.
    #[error("size {size}: {refusal}; no size changed")]
    DropStock {
        /// The size's sale id.
        size: String,
        /// The size's own refusal ([`Error::StockBelowZero`] or [`Error::StockTooLarge`]).
        refusal: Box<Error>,
    },
    /// `drop_line`: the sale is a size of a drop whose one line admits to every size; it has no
    /// line of its own.
    #[error("this sale is a size of drop {drop}, whose one line admits to every size: join POST /drops/{drop}/queue")]
    DropLine {
        /// The drop.
        drop: String,
    },
    /// `draw_only`: the sale is a size of a drop in draw mode; nothing was bought.
    #[error("this sale is a size of a drop in draw mode: enter the draw with POST /drops/{{drop_id}}/entries")]
    DrawOnly,
    /// `not_a_draw`: the drop is not in draw mode (buy its sizes with POST /buy).
    #[error("this drop is not in draw mode: buy its sizes with POST /buy")]
    NotADraw,
    /// `entries_not_open`: the draw's entries open later.
    #[error("the draw's entries are not open yet")]
    EntriesNotOpen,
    /// `entries_closed`: the draw's entries have closed.
    #[error("the draw's entries have closed")]
    EntriesClosed,
    /// `already_entered`: the buyer entered this draw before, with this entry.
    #[error("this buyer has already entered this draw (one entry per buyer)")]
    AlreadyEntered(crate::draw::entries::Entry),
    /// `no_entry`: the buyer has not entered this draw.
    #[error("this buyer has not entered this draw")]
    NoEntry,
    /// `entries_queued`: the draw cannot run yet, accepted entries are still on their way to
    /// Postgres; the automatic run retries, an operator may retry shortly.
    #[error("{stored} of {accepted} accepted entries are stored yet: the draw runs once all are; retry shortly")]
    EntriesQueued {
        /// Entries in Postgres.
        stored: i64,
        /// Entries Redis accepted.
        accepted: u64,
    },
    /// `orders_queued`: a repair's refusal, [`crate::reconcile::ReconcileError::OrdersQueued`].
    #[error("{}", crate::reconcile::ReconcileError::OrdersQueued { queued: *.queued })]
    OrdersQueued {
        /// Entries of those shards' streams not yet committed (an entry may hold several orders).
        queued: u64,
    },
    /// `draw_not_revealed`: the draw has not been drawn yet, its record is not published.
    #[error("the draw has not been drawn yet: its record is published once it is")]
    DrawNotRevealed,
    /// `draw_award_refused`: the purchase's rules refused a winner's reservation (its size ended,
    /// was paused or retired): the results stand; the operator mends the size and runs the draw
    /// again, which awards the rest.
    #[error("{0}: mend the size (resume it, extend its end) and run the draw again; the results stand")]
    AwardRefused(String),
    /// `sale_not_started`.
    #[error("the sale has not started yet")]
    SaleNotStarted,
    /// `sale_ended`.
    #[error("the sale has ended")]
    SaleEnded,
    /// `sale_paused`: an operator paused the sale (`crate::controls`); nothing was bought.
    #[error("the sale is paused; nothing was bought; retry later")]
    SalePaused,
    /// `stock_below_zero`: a stock change would take back more units than are left unsold.
    #[error("only {stock_left} unit(s) are left unsold; no more can be taken back")]
    StockBelowZero {
        /// Units left unsold.
        stock_left: i64,
    },
    /// `stock_too_large`: a stock change would make the sale hold more than `seed::MAX_STOCK`.
    #[error("the sale has {stock_initial} unit(s) in all; it may not hold more than 10,000,000")]
    StockTooLarge {
        /// Units the sale holds in all.
        stock_initial: i64,
    },
    /// `draw_stock_fixed`: a drop in draw mode keeps the terms it was seeded with (each size's
    /// stock, the limit, the waitlist's places), which the published record restates for anyone to
    /// recompute the results (docs/draw.md): a change would steer the allocation or break the record.
    #[error(
        "the drop sells by a draw: its sizes, their stock, per_buyer and waitlist are the draw's terms and cannot \
         change"
    )]
    DrawStockFixed,
    /// `sale_sharded`: a sharded sale's stock cannot change (docs/stock-sharding.md).
    #[error("the sale is split over shards; its stock cannot change (docs/stock-sharding.md)")]
    Sharded,
    /// `already_purchased`, with the buyer's order when Redis holds its receipt.
    #[error("this user has already bought in this sale")]
    AlreadyPurchased(Option<Receipt>),
    /// `sold_out`.
    #[error("the sale is sold out")]
    SoldOut,
    /// `limit_reached`: the quantity would take the buyer over the units one buyer may buy in
    /// the sale or its group; nothing was bought. The buyer's orders in the group's sales.
    #[error("one buyer may buy {per_buyer} unit(s) in this sale{}; this buyer holds {held}: nothing was bought",
        if orders.is_empty() { "" } else { " and the others of its group" })]
    LimitReached {
        /// Units one buyer may buy.
        per_buyer: u32,
        /// Units the buyer holds in the group (0 in a sale without one).
        held: u32,
        /// The buyer's orders in the group's sales.
        orders: Vec<(crate::domain::SaleId, Receipt)>,
    },
    /// `insufficient_stock`: fewer units are left than the quantity asked; nothing was bought (a
    /// purchase is never partly filled).
    #[error("only {stock_left} unit(s) are left; nothing was bought: ask for fewer")]
    InsufficientStock {
        /// Units left.
        stock_left: i64,
    },
    /// `sale_in_progress`: a re-seed of a sale with buyers.
    #[error("the sale already has buyers; it cannot be re-seeded")]
    SaleInProgress,
    /// `sale_has_orders`: a seed of a sale whose orders Postgres holds but Redis lost.
    #[error(
        "Postgres holds {orders} order(s) of this sale that Redis does not know (Redis lost the sale's state): \
         restore it with `seckill reconcile <sale_id> --repair` or POST /admin/sales/{{sale_id}}/reconcile instead"
    )]
    SaleHasOrders {
        /// Orders of the sale in Postgres.
        orders: i64,
    },
    /// `sale_has_orders`: a seed of a sale of a group whose buyers' holdings Redis lost while its
    /// other live sales hold units in Postgres's orders (they would not count against the limit).
    #[error(
        "Postgres holds {orders} order(s) of this sale's group that Redis does not know (Redis lost the group's \
         state): repair its sales first with `seckill reconcile <sale_id> --repair`, then seed"
    )]
    GroupHasOrders {
        /// Orders of the group's other sales in Postgres.
        orders: i64,
    },
    /// `group_limit_differs`: a seed of a group's sale with another `per_buyer` than the group's.
    #[error(
        "the sale's group allows {per_buyer} unit(s) per buyer; every sale of a group must seed the same per_buyer"
    )]
    GroupLimitDiffers {
        /// The group's per_buyer.
        per_buyer: u32,
    },
    /// `group_window_differs`: a seed of a group's sale with another payment window than the
    /// group's other sales.
    #[error(
        "the sale's group has other sales {}; every sale of a group must have the same payment window \
         (the body's payment_window, else SECKILL_PAYMENT_WINDOW)",
        window_words(*payment_window_ms)
    )]
    GroupWindowDiffers {
        /// Their payment window, ms (`None`: none).
        payment_window_ms: Option<i64>,
    },
    /// `sale_started`: a re-seed of a sharded sale that has started.
    #[error("the sale is sharded and has started; it cannot be re-seeded")]
    SaleStarted,
    /// `shards_fixed`: a seed asking another shard count than the sale has.
    #[error("the sale exists with {shards} shard(s); its shard count cannot change")]
    ShardsFixed {
        /// The sale's shard count.
        shards: u32,
    },
    /// `sale_retired`: the sale was retired (Postgres keeps its orders; a buyer still reads its
    /// order).
    #[error("the sale is over and was retired")]
    SaleRetired,
    /// `sale_retired`, to a seed: a retired sale has no second life (seed another sale id).
    #[error("the sale was retired; it cannot be seeded again (use another sale id)")]
    SeedRetired,
    /// `not_retirable`, with every reason.
    #[error("the sale cannot be retired yet: {}", reasons_text(.0))]
    NotRetirable(Vec<Refusal>),
    /// `invalid_signature`: a payment event's signature is missing, malformed, stale or wrong.
    #[error("the payment event's signature is refused: {0}")]
    InvalidSignature(SignatureError),
    /// `unknown_order`: a payment event names no order of the sale.
    #[error("no order of this sale has that id")]
    UnknownOrder,
    /// `unknown_event`: no order event with that id is kept.
    #[error("no event with that id (it may be past its retention)")]
    UnknownEvent,
    /// `unknown_endpoint`: no webhook endpoint with that id is registered.
    #[error("no webhook endpoint with that id (GET /admin/webhooks lists them)")]
    UnknownEndpoint,
    /// `too_many_endpoints`: as many webhook endpoints as allowed are registered.
    #[error("{max} webhook endpoints are registered, the most allowed: remove one first")]
    TooManyEndpoints {
        /// The most endpoints registered at once.
        max: i64,
    },
    /// `no_order`: the buyer has no order in the sale (nothing to cancel).
    #[error("this buyer has no order in this sale")]
    NoOrder,
    /// `not_reserved`: the order is not (or no longer) a reservation that can be cancelled.
    #[error("the order is not a reservation that can be cancelled: {}", not_reserved_text(*.0))]
    NotReserved(Standing),
    /// `unknown_order`: an operator's action names no order of a sale with a payment window (the
    /// orders of a sale without one are final; a queued order is stored within moments).
    #[error(
        "no order of a sale with a payment window has that id (an order of a sale without one is final; an order \
         just bought is stored within moments)"
    )]
    UnknownOrderId,
    /// `not_paid`: the order is not a paid order whose refund can be recorded.
    #[error("the order is not a paid order that can be refunded: {}", not_paid_text(*.0))]
    NotPaid(Standing),
    /// `sale_retired`, to a refund with restock: the order's sale was retired, its stock is gone
    /// (refund it without restock).
    #[error("the order's sale was retired: its stock is gone; refund it with \"restock\": false")]
    RestockRetired,
    /// `sale_restoring`, to a stock change: reconciliation's repair is restoring the sale's buyers
    /// (a sale Redis lost, seeded again and held): its stock still counts their units as unsold.
    #[error(
        "the repair is restoring this sale's buyers: change its stock once the repair has finished \
        (seckill reconcile SALE --repair finishes one that stopped half-way)"
    )]
    SaleRestoring,
    /// `event_reused`: a payment event id was used before for another order.
    #[error("this event id was used before for another order")]
    EventReused,
    /// `not_admitted`: a queued sale, and no valid admission token of this buyer for it.
    #[error("not admitted: {0}")]
    NotAdmitted(Refused),
    /// `challenge_required`: the sale asks a proof of work (`GET /sales/{sale_id}/challenge`)
    /// and the request carried no solution.
    #[error(
        "this sale asks a proof of work: solve GET /sales/{{sale_id}}/challenge and send the solution in the \
         Seckill-Challenge header"
    )]
    ChallengeRequired,
    /// `challenge_failed`: the solution is refused (forged, expired, another sale's, buyer's or
    /// address's, wrong, or used before).
    #[error("the proof of work is refused: {0}")]
    ChallengeFailed(ChallengeRefused),
    /// `no_challenge`: the sale asks no proof of work.
    #[error("this sale asks no proof of work")]
    NoChallenge,
    /// `queue_not_open`: the sale's waiting room opens later.
    #[error("the waiting room of this sale is not open yet")]
    QueueNotOpen,
    /// `not_in_queue`: the buyer has not joined the sale's waiting room.
    #[error("this buyer has not joined the waiting room of this sale (POST /sales/{{sale_id}}/queue)")]
    NotInQueue,
    /// `not_queued`: the sale has no waiting room (buy at once).
    #[error("this sale has no waiting room: buy with POST /buy")]
    NotQueued,
    /// `admission_disabled`: neither `SECKILL_ADMISSION_SECRET` nor `SECKILL_ADMIN_TOKEN` is set.
    #[error("waiting rooms are disabled: set SECKILL_ADMISSION_SECRET (or SECKILL_ADMIN_TOKEN)")]
    AdmissionDisabled,
    /// `payments_disabled`: no `SECKILL_PAYMENT_SECRET` is configured.
    #[error("payment events are disabled: no SECKILL_PAYMENT_SECRET is configured")]
    PaymentsDisabled,
    /// `rate_limited`, with the wait in whole seconds.
    #[error("too many requests from this client; retry after {retry_after_secs} s")]
    RateLimited {
        /// Whole seconds until a request can be admitted.
        retry_after_secs: u64,
    },
    /// `not_durable` (`SECKILL_CONFIRM_REPLICAS`): bought, with this order id, but fewer
    /// replicas than asked acknowledged it in time. The purchase stands.
    #[error(
        "the purchase is recorded but not yet confirmed on enough Redis replicas; it stands: ask \
         GET /sales/{{sale_id}}/order, or retry and get 409 already_purchased with this order_id"
    )]
    NotDurable {
        /// The order the purchase made.
        order_id: Uuid,
    },
    /// `unavailable`: Redis or Postgres cannot be reached, or Postgres cannot run the statement now
    /// ([`crate::db::is_postgres_outage`]: a statement timeout, a failover); the cause
    /// is logged, not shown. For a purchase: it never ran, nothing was bought.
    #[error("a service this request needs is unavailable; retry shortly")]
    Unavailable(#[source] anyhow::Error),
    /// `outcome_unknown`: the purchase was sent to Redis and no verdict came back; it may have
    /// bought, under `order_id`.
    #[error(
        "no verdict came back for this purchase: it may have been made under this order_id; retry it with the \
         same headers: 409 already_purchased with this order_id means it was made, a 201 or another refusal \
         that it was not (unless the refusal is of an admission token or proof that expired since, or of a \
         retired sale: then ask GET /sales/{sale_id}/order)"
    )]
    OutcomeUnknown {
        /// The order id the purchase was sent with.
        order_id: Uuid,
        /// The sale.
        sale_id: String,
        /// Why no verdict came back (logged, not shown).
        #[source]
        cause: anyhow::Error,
    },
    /// `too_many_exports`: this instance already streams its most order exports at once.
    #[error(
        "this instance is already streaming {} order exports; retry when one is done",
        crate::exports::MAX_CONCURRENT
    )]
    TooManyExports,
    /// `too_many_draw_records`: this instance already streams its most draw records at once, or
    /// one to this client.
    #[error(
        "this instance is already streaming {} draw records, or one to this client; retry when one is done",
        crate::draw::run::readers::MAX_CONCURRENT
    )]
    TooManyDrawRecords,
    /// `not_recorded`: a stock change was made in Redis, and Postgres did not record it (its
    /// update, the audit's insert or the commit failed): sent again it would be made twice.
    #[error(
        "the stock changed, but Postgres did not record the change: do not send it again; read the sale (or the \
         drop) for its stock; reconciliation reports its sales row until the next stock change records it"
    )]
    NotRecorded(#[source] anyhow::Error),
    /// `internal`: anything else (the cause is logged, not shown).
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

fn reasons_text(reasons: &[Refusal]) -> String {
    let words: Vec<String> = reasons
        .iter()
        .map(|r| serde_json::to_value(r).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default())
        .collect();
    words.join(", ")
}

/// A group's payment window, for `group_window_differs`.
fn window_words(payment_window_ms: Option<i64>) -> String {
    match payment_window_ms {
        Some(ms) => format!(
            "with a payment window of {}",
            humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64))
        ),
        None => "without a payment window".to_owned(),
    }
}

/// Why an order cannot be cancelled, for `not_reserved`.
fn not_reserved_text(standing: Standing) -> &'static str {
    match standing {
        Standing::Confirmed => "the order is final: the sale has no payment window",
        Standing::Reserved => "the reservation's deadline has passed; it is expiring",
        Standing::Paid => "the order is paid",
        Standing::Cancelled => "the reservation was cancelled",
        Standing::Expired => "the reservation expired",
        Standing::Refunded => "the order was refunded",
    }
}

/// Why a refund cannot be recorded, for `not_paid`.
fn not_paid_text(standing: Standing) -> &'static str {
    match standing {
        Standing::Reserved => "it is a reservation, not paid yet (cancel it instead)",
        Standing::Refunded => "its refund was recorded before",
        other => not_reserved_text(other),
    }
}
