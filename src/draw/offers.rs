//! The waitlist's Redis side: the draw's run puts the waitlist in Redis before it awards anyone
//! (`lua/draw_waitlist.lua`, [`put_waitlist`]), and a drawn size's release offers the units that
//! come back to it before the stock (`lua/draw_release.lua`, [`release`]: the rule of
//! [`crate::draw::waitlist::offer`], each unit once, behind `lua/release.lua`'s gate). The offer is
//! a reservation like a winner's (`order.created` as `reserved`, after `draw.offered`: both written
//! by the worker's insert of its order).

use std::collections::BTreeSet;

use redis::{AsyncCommands, RedisResult};
use uuid::Uuid;

use crate::domain::{DropId, SaleId, UserId};
use crate::redis::Keyspace;
use crate::redis::keys::DropKeys;
use crate::redis::lua::{self, unexpected_reply};

/// Places written per `lua/draw_waitlist.lua` call.
const PLACES_PER_CALL: usize = 500;

/// One place of the waitlist, as the run writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// 1 first.
    pub position: u32,
    pub user: UserId,
    pub quantity: u32,
    /// The entry's sizes (short names), best first.
    pub sizes: Vec<String>,
}

/// Writes the waitlist's places (each once: a place written before keeps its state). Returns the
/// places written now.
pub async fn put_waitlist(redis: &Keyspace, drop: &DropId, places: &[Place]) -> RedisResult<u64> {
    let keys = DropKeys::new(redis.prefix(), drop);
    let mut written = 0;
    for chunk in places.chunks(PLACES_PER_CALL) {
        let sizes: BTreeSet<&str> = chunk.iter().flat_map(|p| p.sizes.iter().map(String::as_str)).collect();
        let mut call = lua::DRAW_WAITLIST.key(&keys.waitlist);
        for size in &sizes {
            call.key(keys.waiting(size));
        }
        call.arg(sizes.len());
        for size in &sizes {
            call.arg(*size);
        }
        for place in chunk {
            call.arg(place.position).arg(place.user.as_str()).arg(place.quantity).arg(place.sizes.join(","));
        }
        let n: u64 = lua::run(&call, &mut redis.conn()).await?;
        written += n;
    }
    Ok(written)
}

/// A unit given to a waitlisted entrant: a new reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub position: u32,
    pub user: String,
    pub order_id: Uuid,
    pub quantity: u32,
}

/// What one `lua/draw_release.lua` call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Units the call's orders gave back (0: released before).
    pub units: u64,
    /// The stock before the call.
    pub stock_before: i64,
    /// Of those units, the ones no place took: back in the stock.
    pub to_stock: u64,
    pub offers: Vec<Offered>,
}

/// Releases `orders` (order id, units) of `sale`, the size `size` of the drawn drop `drop`,
/// offering their units to the waitlist first. `None` when Redis does not know the sale, or while
/// the drop is paused and not ended (the release stays owed, as `lua/release.lua`'s
/// `unknown_sale`: the sweeper re-drives it, and after the resume its units reach the waitlist).
pub async fn release(
    redis: &Keyspace,
    drop: &DropId,
    (sale, size): (&SaleId, &str),
    orders: &[(Uuid, i32)],
) -> RedisResult<Option<Released>> {
    let keys = redis.sale_keys(sale);
    let drop_keys = DropKeys::new(redis.prefix(), drop);
    let mut call = lua::DRAW_RELEASE.prepare_invoke();
    for key in keys.all() {
        call.key(key);
    }
    call.key(&keys.released).key(&drop_keys.waitlist).key(drop_keys.waiting(size));
    call.arg(Uuid::now_v7().to_string()).arg(size);
    for (order, units) in orders {
        call.arg(order.to_string()).arg(units);
    }
    let reply: redis::Value = lua::run(&call, &mut redis.conn()).await?;
    let items: Vec<redis::Value> = match reply {
        redis::Value::Array(items) => items,
        other => {
            let word: String = redis::from_redis_value(other)?;
            return match word.as_str() {
                "unknown_sale" | "paused" => Ok(None),
                _ => Err(unexpected_reply("draw_release.lua", &word)),
            };
        }
    };
    let number =
        |i: usize| -> RedisResult<i64> { Ok(redis::from_redis_value_ref(items.get(i).unwrap_or(&redis::Value::Nil))?) };
    let mut released = Released {
        units: number(2)?.max(0) as u64,
        stock_before: number(1)?,
        to_stock: number(3)?.max(0) as u64,
        offers: vec![],
    };
    for offer in items[4.min(items.len())..].chunks_exact(4) {
        let text = |v: &redis::Value| -> RedisResult<String> { Ok(redis::from_redis_value_ref(v)?) };
        let order_id =
            Uuid::parse_str(&text(&offer[2])?).map_err(|_| unexpected_reply("draw_release.lua", "order id"))?;
        released.offers.push(Offered {
            position: text(&offer[0])?.parse().unwrap_or(0),
            user: text(&offer[1])?,
            order_id,
            quantity: text(&offer[3])?.parse().unwrap_or(0),
        });
    }
    Ok(Some(released))
}

/// Where a waitlist place stands once drawn: still waiting, or offered `size` as `order_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Waiting,
    Offered {
        size: String,
        order_id: Uuid,
    },
    /// Could not take a unit (it stopped waiting), or Redis has no such place.
    Passed,
}

/// The waitlist place `position` of the drop, as Redis holds it.
pub async fn standing(redis: &Keyspace, drop: &DropId, position: u32) -> RedisResult<Standing> {
    let kept: Option<String> = redis.conn().hget(DropKeys::new(redis.prefix(), drop).waitlist, position).await?;
    let state = kept.as_deref().and_then(|kept| kept.split(' ').nth(2));
    Ok(match state {
        Some("w") => Standing::Waiting,
        Some(offered) => match offered.strip_prefix("o:").and_then(|rest| rest.split_once(':')) {
            Some((size, order)) => match Uuid::parse_str(order) {
                Ok(order_id) => Standing::Offered { size: size.to_owned(), order_id },
                Err(_) => Standing::Passed,
            },
            None => Standing::Passed,
        },
        None => Standing::Passed,
    })
}
