//! Sale-day controls, their Redis side: the kill switch (pause, resume, end now: `lua/control.lua`
//! on every shard's meta, which `lua/purchase.lua` reads in the purchase's own call) and stock on
//! the fly (`lua/restock.lua`, atomic with purchases, `stock_initial` following); and the
//! operators' audit trail in Postgres (`audit`). Which of them a use case runs, and in what order
//! with Postgres, is `crate::shop`'s.

pub mod audit;

use redis::RedisResult;

use crate::domain::SaleId;
use crate::purchase::Sales;
use crate::redis::keys::SaleKeys;
use crate::redis::lua::{self, unexpected_reply};

/// The sale's figures (`stock_initial`, stock left) if its last stock change is `change`: `None`
/// if another, or if they cannot be read. Only the change itself writes its id, so a `Some` is
/// true whenever it comes.
async fn made(sales: &Sales, meta: &str, stock: &str, change: &str) -> Option<(i64, i64)> {
    let ((last, initial), left): ((Option<String>, Option<i64>), Option<i64>) = redis::pipe()
        .cmd("HMGET")
        .arg(meta)
        .arg("restock_op")
        .arg("stock_initial")
        .get(stock)
        .query_async(&mut sales.keyspace().conn())
        .await
        .ok()?;
    if last.as_deref() != Some(change) {
        return None;
    }
    Some((initial?, left?))
}

/// The kill switch's three positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// Purchases refused (`sale_paused`), admission stopped.
    Pause,
    /// Purchases and admission go on.
    Resume,
    /// The sale ends now.
    End,
}

impl Switch {
    /// `lua/control.lua`'s action, and the audit trail's.
    pub fn action(self) -> &'static str {
        match self {
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::End => "end",
        }
    }
}

/// What a switch found and left (shard 0's meta, the one the sale's state is read from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switched {
    /// The sale was paused before.
    pub was_paused: bool,
    /// The sale's end afterwards, Unix ms (`None`: never ends).
    pub ends_at_ms: Option<i64>,
    /// Shards switched (1: unsharded).
    pub shards: usize,
}

/// What a stock change decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restock {
    /// Done: the figures after it.
    Done { stock_initial: i64, stock_left: i64 },
    /// Taking back more than is left unsold: nothing changed.
    BelowZero { stock_left: i64 },
    /// `stock_initial` would pass the largest stock a sale may hold: nothing changed.
    TooMuch { stock_initial: i64 },
    /// A sharded sale's stock does not change (docs/stock-sharding.md).
    Sharded,
    /// Reconciliation's repair is restoring the sale: its stock changes once it has finished.
    Restoring,
    /// Redis does not know the sale.
    UnknownSale,
}

/// Turns the sale's switch on every shard (shard 0 last, so its figures are the final ones);
/// `None` if Redis does not know the sale. Each shard obeys from its own call on: a purchase on
/// it is refused from the moment its meta says so.
pub async fn switch(sales: &Sales, sale: &SaleId, switch: Switch, reason: &str) -> RedisResult<Option<Switched>> {
    let keys = sales.all_shard_keys(sale).await?;
    let mut last = None;
    for shard in keys.iter().rev() {
        let mut call = lua::CONTROL.key(&shard.meta);
        call.arg(switch.action()).arg(reason);
        let reply: Vec<String> = lua::run(&call, &mut sales.keyspace().conn()).await?;
        last = match reply.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["unknown_sale"] => return Ok(None),
            ["ok", was_paused, ends_at_ms] => Some(Switched {
                was_paused: was_paused == "1",
                ends_at_ms: ends_at_ms.parse().ok(),
                shards: keys.len(),
            }),
            _ => return Err(unexpected_reply("control.lua", &reply.join(" "))),
        };
    }
    Ok(last)
}

/// Resumes the sale on every shard whose pause is `hold` (reconciliation's repair lifting the pause
/// it seeded a lost sale with, [`crate::purchase::SaleSpec::hold`]); a pause an operator made
/// meanwhile, with another reason, stays. Nothing for a sale Redis does not know.
pub async fn lift_hold(sales: &Sales, sale: &SaleId, hold: &str) -> RedisResult<()> {
    for shard in sales.all_shard_keys(sale).await? {
        let mut call = lua::CONTROL.key(&shard.meta);
        call.arg(Switch::Resume.action()).arg("").arg(hold);
        let _: Vec<String> = lua::run(&call, &mut sales.keyspace().conn()).await?;
    }
    Ok(())
}

/// Ends each of `shards` now (`lua/control.lua`'s `end`), shards not in the sale's layout: those a
/// repair found Redis kept of a sale whose shard 0 it lost (`crate::reconcile`). A shard with no
/// meta is skipped.
pub async fn end_shards(sales: &Sales, shards: &[SaleKeys]) -> RedisResult<()> {
    for shard in shards {
        let mut call = lua::CONTROL.key(&shard.meta);
        call.arg(Switch::End.action()).arg("");
        let _: Vec<String> = lua::run(&call, &mut sales.keyspace().conn()).await?;
    }
    Ok(())
}

/// Adds `add` units to the sale's stock (takes `-add` back when negative), never beyond `max`
/// units seeded in all nor below 0 left. On success, every instance drops its sold-out flag
/// ([`Sales::announce`]), so a sale that was sold out sells again.
pub async fn restock(sales: &Sales, sale: &SaleId, add: i64, max: i64) -> RedisResult<Restock> {
    let keys = sales.keyspace().sale_keys(sale);
    let mut call = lua::RESTOCK.key(&keys.meta);
    // The change's id: a Redis Cluster client re-sends a call that timed out, and the change is
    // made once however often it arrives.
    let change = uuid::Uuid::now_v7().to_string();
    call.key(&keys.stock).arg(add).arg(max).arg(&change);
    let reply: Vec<redis::Value> = match lua::run(&call, &mut sales.keyspace().conn()).await {
        Ok(reply) => reply,
        // The call may have run all the same (it timed out, its connection dropped): the change
        // id it writes says so, read on the same connection, after the call if it is still queued.
        Err(err) => match made(sales, &keys.meta, &keys.stock, &change).await {
            Some((stock_initial, stock_left)) => {
                sales.announce(sale, "stock change").await;
                return Ok(Restock::Done { stock_initial, stock_left });
            }
            None => return Err(err),
        },
    };
    let bad = || unexpected_reply("restock.lua", &format!("{reply:?}"));
    let status: String = redis::from_redis_value_ref(reply.first().ok_or_else(bad)?)?;
    if status == "unknown_sale" {
        return Ok(Restock::UnknownSale);
    }
    let figure = |i: usize| -> RedisResult<i64> { Ok(redis::from_redis_value_ref(reply.get(i).ok_or_else(bad)?)?) };
    let (stock_initial, stock_left) = (figure(1)?, figure(2)?);
    let outcome = match status.as_str() {
        "ok" => Restock::Done { stock_initial, stock_left },
        "below_zero" => Restock::BelowZero { stock_left },
        "too_much" => Restock::TooMuch { stock_initial },
        "sharded" => Restock::Sharded,
        "restoring" => Restock::Restoring,
        _ => return Err(bad()),
    };
    if matches!(outcome, Restock::Done { .. }) {
        sales.announce(sale, "stock change").await;
    }
    Ok(outcome)
}
