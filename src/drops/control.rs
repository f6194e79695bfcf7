//! A drop's one switch and its stock: `lua/drop_control.lua` and `lua/drop_restock.lua`, one
//! call each over every size named.

use redis::RedisResult;

use super::{keys, members};
use crate::controls::Switch;
use crate::domain::{DropId, SaleId};
use crate::purchase::Sales;
use crate::redis::lua::{self, unexpected_reply};

/// What a drop's switch found and left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropSwitched {
    /// The sizes switched, by id.
    pub sizes: Vec<SaleId>,
    /// How many of them were paused before.
    pub paused_before: usize,
    /// Redis's time at the switch, Unix ms (an end's time; an earlier end is kept).
    pub at_ms: i64,
}

/// What a drop's stock change decided: all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropRestock {
    /// Done: each size's `(stock_initial, stock_left)` after it, in the order asked.
    Done(Vec<(SaleId, i64, i64)>),
    /// Not a size of the drop (or Redis lost its keys): nothing changed.
    UnknownSize(String),
    /// That size has fewer units unsold than taken back: nothing changed.
    BelowZero { size: String, stock_left: i64 },
    /// That size would hold more than the largest stock: nothing changed.
    TooMuch { size: String, stock_initial: i64 },
    /// Reconciliation's repair is restoring that size: nothing changed.
    Restoring(String),
}

/// Why a drop's switch changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotSwitched {
    /// Redis knows no sale of the group.
    UnknownDrop,
    /// A size's meta is gone (Redis lost it).
    SizeMissing(String),
    /// The group holds more sales than [`super::MAX_SIZES`] (seeded one by one): switched one by
    /// one.
    NotADrop,
}

/// Calls read the sizes, then name them all; a size added in between makes the script refuse, and
/// the sizes are read again, this many times at most.
const ATTEMPTS: usize = 3;

/// Turns every size's switch (and the line's) in one call: from the call on, no purchase of any
/// size is made after a pause or an end, on any instance (the purchase script reads its meta in
/// its own call).
pub async fn switch(
    sales: &Sales,
    drop: &DropId,
    switch: Switch,
    reason: &str,
) -> RedisResult<Result<DropSwitched, NotSwitched>> {
    let drop_keys = keys(sales, drop);
    for _ in 0..ATTEMPTS {
        let members = members(sales, drop).await?;
        if members.sizes.is_empty() {
            return Ok(Err(NotSwitched::UnknownDrop));
        }
        if !members.only_sizes {
            return Ok(Err(NotSwitched::NotADrop));
        }
        let sizes = members.sizes;
        let mut call = lua::DROP_CONTROL.key(&drop_keys.sales);
        call.key(&drop_keys.line_meta);
        for sale in &sizes {
            call.key(sales.keyspace().sale_keys(sale).meta);
        }
        call.arg(switch.action()).arg(reason);
        for sale in &sizes {
            call.arg(sale.as_str());
        }
        let reply: Vec<String> = lua::run(&call, &mut sales.keyspace().conn()).await?;
        match reply.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["ok", paused_before, at_ms] => {
                let bad = || unexpected_reply("drop_control.lua", &reply.join(" "));
                return Ok(Ok(DropSwitched {
                    sizes,
                    paused_before: paused_before.parse().map_err(|_| bad())?,
                    at_ms: at_ms.parse().map_err(|_| bad())?,
                }));
            }
            ["unknown_drop"] => return Ok(Err(NotSwitched::UnknownDrop)),
            ["size_missing", size] => return Ok(Err(NotSwitched::SizeMissing(size.to_owned()))),
            ["sizes_changed"] => continue,
            _ => return Err(unexpected_reply("drop_control.lua", &reply.join(" "))),
        }
    }
    Err(unexpected_reply("drop_control.lua", "the drop's sizes kept changing during the switch"))
}

/// Each size's figures if the drop's last stock change is `change` (the first size's meta says
/// so): `None` if another, or if they cannot be read. Only the change writes its id.
async fn made(sales: &Sales, adds: &[(SaleId, i64)], change: &str) -> Option<Vec<(SaleId, i64, i64)>> {
    let first = sales.keyspace().sale_keys(&adds.first()?.0);
    let mut pipe = redis::pipe();
    pipe.hget(&first.meta, "drop_restock_op");
    for (sale, _) in adds {
        let size = sales.keyspace().sale_keys(sale);
        pipe.hget(&size.meta, "stock_initial").get(&size.stock);
    }
    let values: Vec<Option<String>> = pipe.query_async(&mut sales.keyspace().conn()).await.ok()?;
    if values.first()?.as_deref() != Some(change) {
        return None;
    }
    let figure = |i: usize| values.get(i)?.as_deref()?.parse::<i64>().ok();
    adds.iter().enumerate().map(|(i, (sale, _))| Some((sale.clone(), figure(1 + 2 * i)?, figure(2 + 2 * i)?))).collect()
}

/// Adds `add` units to each size named (takes them back when negative), all or nothing, never
/// beyond `max` units in a size nor below 0 left. On success every instance drops its sold-out
/// flags of those sizes.
pub async fn restock(sales: &Sales, drop: &DropId, adds: &[(SaleId, i64)], max: i64) -> RedisResult<DropRestock> {
    let drop_keys = keys(sales, drop);
    let mut call = lua::DROP_RESTOCK.key(&drop_keys.sales);
    call.key(&drop_keys.line_meta).arg(max);
    for (sale, add) in adds {
        let size = sales.keyspace().sale_keys(sale);
        call.key(size.meta).key(size.stock).arg(sale.as_str()).arg(add);
    }
    // The change's id: made once however often the call arrives (lua/restock.lua's).
    let change = uuid::Uuid::now_v7().to_string();
    call.arg(&change);
    let reply: Vec<redis::Value> = match lua::run(&call, &mut sales.keyspace().conn()).await {
        Ok(reply) => reply,
        // The call may have run all the same: its change id says so (`crate::controls::restock`).
        Err(err) => match made(sales, adds, &change).await {
            Some(figures) => {
                for (sale, _) in adds {
                    sales.announce(sale, "drop stock change").await;
                }
                return Ok(DropRestock::Done(figures));
            }
            None => return Err(err),
        },
    };
    let bad = || unexpected_reply("drop_restock.lua", &format!("{reply:?}"));
    let text = |i: usize| -> RedisResult<String> { Ok(redis::from_redis_value_ref(reply.get(i).ok_or_else(bad)?)?) };
    let figure = |i: usize| -> RedisResult<i64> { Ok(redis::from_redis_value_ref(reply.get(i).ok_or_else(bad)?)?) };
    let outcome = match text(0)?.as_str() {
        "ok" => DropRestock::Done(
            adds.iter()
                .enumerate()
                .map(|(i, (sale, _))| Ok((sale.clone(), figure(1 + 2 * i)?, figure(2 + 2 * i)?)))
                .collect::<RedisResult<_>>()?,
        ),
        "unknown_size" => DropRestock::UnknownSize(text(1)?),
        "below_zero" => DropRestock::BelowZero { size: text(1)?, stock_left: figure(2)? },
        "too_much" => DropRestock::TooMuch { size: text(1)?, stock_initial: figure(2)? },
        "restoring" => DropRestock::Restoring(text(1)?),
        _ => return Err(bad()),
    };
    if matches!(outcome, DropRestock::Done(_)) {
        for (sale, _) in adds {
            sales.announce(sale, "drop stock change").await;
        }
    }
    Ok(outcome)
}
