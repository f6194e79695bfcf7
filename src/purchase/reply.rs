//! What a purchase decided ([`BuyOutcome`], [`Verdict`]), read from the purchase scripts'
//! replies (`lua/buy.lua`'s, and `lua/buy_limited.lua`'s with the limits' decisions first).

use redis::{RedisResult, Value};
use uuid::Uuid;

use super::receipt::{OrderStatus, Receipt};
use crate::limiter::Decision;
use crate::redis::lua::unexpected_reply;

/// What the purchase decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuyOutcome {
    /// Bought: stock decremented, the order in the shard's stream. In a sale with a payment
    /// window the order is a reservation, to be paid by `pay_by_ms` (Redis time, Unix ms).
    Purchased { pay_by_ms: Option<i64> },
    /// The sale was never seeded.
    UnknownSale,
    /// Before the sale's start (Redis time).
    NotStarted,
    /// At or after the sale's end (Redis time).
    Ended,
    /// The sale is paused (`crate::controls`): nothing was bought.
    Paused,
    /// The user is already a buyer: the order it was given (none for a buyer without a receipt).
    AlreadyPurchased(Option<Receipt>),
    /// Every shard answered sold out.
    SoldOut,
    /// The quantity would take the buyer over the sale's (or its group's) `per_buyer`: the buyer
    /// holds `held` units of the group (0 in a sale without one). Nothing was bought.
    LimitReached { held: u32, per_buyer: u32 },
    /// Fewer units are left than the quantity asked (`left` > 0): nothing was bought (a purchase
    /// is never partly filled).
    InsufficientStock { left: i64 },
    /// A queued sale (`crate::admission`), and no place was given: the buyer was not admitted.
    NotAdmitted,
    /// A queued sale, and the admission the place came with ended (Redis time): nothing was bought.
    AdmissionExpired,
    /// A size of a drop in draw mode (`crate::draw`): its units go to the draw's winners only.
    DrawOnly,
    /// A sale without a waiting room that asks a proof of work (`crate::challenge`), and none was
    /// proven: nothing was bought.
    ChallengeRequired,
    /// Bought, but fewer than `SECKILL_CONFIRM_REPLICAS` replicas acknowledged it in time (how
    /// many did; 0 as well when the `WAIT` itself failed). The purchase stands.
    NotDurable {
        /// Replicas that acknowledged it.
        replicas: u32,
    },
}

impl BuyOutcome {
    /// The outcome's name, as the purchase script says it (a trace's `seckill.outcome`).
    pub fn label(&self) -> &'static str {
        match self {
            Self::Purchased { pay_by_ms: None } => "ok",
            Self::Purchased { pay_by_ms: Some(_) } => "reserved",
            Self::UnknownSale => "unknown_sale",
            Self::NotStarted => "not_started",
            Self::Ended => "ended",
            Self::Paused => "paused",
            Self::AlreadyPurchased(_) => "already_purchased",
            Self::SoldOut => "sold_out",
            Self::LimitReached { .. } => "limit_reached",
            Self::InsufficientStock { .. } => "insufficient_stock",
            Self::NotAdmitted => "not_admitted",
            Self::AdmissionExpired => "admission_expired",
            Self::DrawOnly => "draw_only",
            Self::ChallengeRequired => "challenge_required",
            Self::NotDurable { .. } => "not_durable",
        }
    }
}

/// A purchase's answer: each limit's decision, in the order of the gates given (up to the one that
/// refused), and the outcome, `None` when a limit refused (then nothing was bought).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The limits' decisions.
    pub limits: Vec<Decision>,
    /// What the purchase decided, if the limits admitted it.
    pub outcome: Option<BuyOutcome>,
}

/// One shard's answer to `lua/buy.lua`.
pub(super) enum ShardReply {
    Decided(BuyOutcome),
    /// The shard records another shard count than the caller assumed.
    WrongShards,
    /// A limit refused the request.
    Limited,
}

/// One shard's reply to the purchase call with `checked` limits in it (their decisions go to
/// `decisions`): `None` if a limit refused, `SoldOut` for that shard's `sold_out`.
pub(super) fn shard_reply(
    mut reply: Value,
    checked: usize,
    decisions: &mut Vec<Decision>,
) -> RedisResult<Option<ShardReply>> {
    if checked > 0 {
        match limited_reply(reply, checked, decisions)? {
            Some(purchase) => reply = purchase,
            None => return Ok(None),
        }
    }
    let status = match reply {
        Value::Array(words) => return Ok(Some(ShardReply::Decided(array_reply(&words)?))),
        other => redis::from_redis_value::<String>(other)?,
    };
    let outcome = match status.as_str() {
        "sold_out" => BuyOutcome::SoldOut,
        "wrong_shards" => return Ok(Some(ShardReply::WrongShards)),
        "ok" => BuyOutcome::Purchased { pay_by_ms: None },
        "unknown_sale" => BuyOutcome::UnknownSale,
        "not_started" => BuyOutcome::NotStarted,
        "ended" => BuyOutcome::Ended,
        "paused" => BuyOutcome::Paused,
        "not_admitted" => BuyOutcome::NotAdmitted,
        "admission_expired" => BuyOutcome::AdmissionExpired,
        "draw_only" => BuyOutcome::DrawOnly,
        "challenge_required" => BuyOutcome::ChallengeRequired,
        other => return Err(unexpected_reply("buy.lua", other)),
    };
    Ok(Some(ShardReply::Decided(outcome)))
}

/// Splits the `{client, buyer, purchase}` reply of `lua/buy_limited.lua` for `checked` limits:
/// their decisions go to `decisions`; the purchase's reply is returned, `None` if a limit refused.
fn limited_reply(reply: Value, checked: usize, decisions: &mut Vec<Decision>) -> RedisResult<Option<Value>> {
    let mut parts = match reply {
        Value::Array(parts) if parts.len() == 3 => parts,
        other => return Err(unexpected_reply("buy_limited.lua", &format!("{other:?}"))),
    };
    let purchase = parts.pop().expect("three parts");
    for decision in parts.iter().take(checked) {
        if let Value::Int(0) = decision {
            break; // not checked: the one before refused
        }
        decisions.push(Decision::from_reply(redis::from_redis_value_ref(decision)?));
    }
    match purchase {
        Value::Int(0) => Ok(None),
        purchase => Ok(Some(purchase)),
    }
}

/// The array replies of `lua/buy.lua`: `{"reserved", pay_by_ms}`,
/// `{"already_purchased", order id, created_at_ms, status, quantity}` (or just
/// `{"already_purchased"}` for a buyer without a receipt), `{"limit_reached", held, per_buyer}` and
/// `{"insufficient_stock", left}`.
fn array_reply(words: &[Value]) -> RedisResult<BuyOutcome> {
    let words: Vec<String> = words.iter().map(redis::from_redis_value_ref).collect::<Result<_, _>>()?;
    let bad = || unexpected_reply("buy.lua", &words.join(" "));
    match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["reserved", pay_by_ms] => Ok(BuyOutcome::Purchased { pay_by_ms: Some(pay_by_ms.parse().map_err(|_| bad())?) }),
        ["already_purchased"] => Ok(BuyOutcome::AlreadyPurchased(None)),
        ["already_purchased", order_id, created_at_ms, status, quantity] => {
            Ok(BuyOutcome::AlreadyPurchased(Some(Receipt {
                order_id: Uuid::parse_str(order_id).map_err(|_| bad())?,
                created_at_ms: created_at_ms.parse().map_err(|_| bad())?,
                status: OrderStatus::parse(status).ok_or_else(bad)?,
                pay_by_ms: None,
                quantity: quantity.parse().map_err(|_| bad())?,
            })))
        }
        ["limit_reached", held, per_buyer] => Ok(BuyOutcome::LimitReached {
            held: held.parse().map_err(|_| bad())?,
            per_buyer: per_buyer.parse().map_err(|_| bad())?,
        }),
        ["insufficient_stock", left] => Ok(BuyOutcome::InsufficientStock { left: left.parse().map_err(|_| bad())? }),
        _ => Err(bad()),
    }
}
