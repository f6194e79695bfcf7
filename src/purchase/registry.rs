//! The registries a seed writes before its script (so no sale or draw is live without its stream
//! known to the workers), and their undoing when the script refuses a new one.
//!
//! A refused seed of a sale that did not exist must leave nothing behind: a registered sale with no
//! meta is what a sale Redis lost looks like (the workers report it `lost` on every survey, the
//! janitor never finds it due, a retirement answers unknown_sale), so it would stay for good.

use redis::{AsyncCommands, RedisResult};

use crate::domain::{DropId, SaleId};
use crate::redis::keys::{DropKeys, draws_registry_key, sales_registry_key, shards_registry_key};
use crate::redis::{Keyspace, PAGE};

/// Registers `sales` (their streams are read by the workers); answers those that were not
/// registered before.
pub async fn register_sales<'a>(redis: &Keyspace, sales: &[&'a SaleId]) -> RedisResult<Vec<&'a SaleId>> {
    let registry = sales_registry_key(redis.prefix());
    let mut pipe = redis::pipe();
    for sale in sales {
        pipe.sadd(&registry, sale.as_str());
    }
    let added: Vec<i64> = pipe.query_async(&mut redis.conn()).await?;
    Ok(sales.iter().zip(added).filter(|(_, added)| *added == 1).map(|(sale, _)| *sale).collect())
}

/// The suffixes of the shards of `sale` the shards registry lists (`<sale>:<suffix>`, by SSCAN with
/// MATCH: the registry holds every live sharded sale's shards, and a sale id has no `:` nor glob
/// character). Its layout's, and any a repair left of an earlier layout (`crate::reconcile`).
pub async fn registered_shards(redis: &Keyspace, sale: &SaleId) -> RedisResult<Vec<u32>> {
    let (registry, pattern) = (shards_registry_key(redis.prefix()), format!("{sale}:*"));
    let mut suffixes = vec![];
    let mut cursor: u64 = 0;
    loop {
        let (next, page): (u64, Vec<String>) = redis::cmd("SSCAN")
            .arg(&registry)
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(PAGE)
            .query_async(&mut redis.conn())
            .await?;
        let of_sale = |member: &String| member.strip_prefix(sale.as_str())?.strip_prefix(':')?.parse::<u32>().ok();
        suffixes.extend(page.iter().filter_map(of_sale));
        if next == 0 {
            suffixes.sort_unstable();
            suffixes.dedup();
            return Ok(suffixes);
        }
        cursor = next;
    }
}

/// Registers the drop's draw; answers whether it was not registered before.
pub async fn register_draw(redis: &Keyspace, drop: &DropId) -> RedisResult<bool> {
    let added: i64 = redis.conn().sadd(draws_registry_key(redis.prefix()), drop.as_str()).await?;
    Ok(added == 1)
}

/// Takes back the registration of `added` sales (registered by a seed its script then refused)
/// that have no meta: each leaves the registry, and its stream goes if it holds no entry. A sale
/// with a meta was seeded meanwhile and is kept. Nothing can append to a stream whose sale has no
/// meta (the scripts refuse an unknown sale), and the caller holds the sale's row, so no other
/// seed of it runs.
pub async fn unregister_unseeded(redis: &Keyspace, added: &[&SaleId]) -> RedisResult<()> {
    for sale in added {
        let keys = redis.sale_keys(sale);
        forget_if_unseeded(redis, &sales_registry_key(redis.prefix()), sale.as_str(), &keys.meta, &keys.orders).await?;
    }
    Ok(())
}

/// [`unregister_unseeded`] for a drop's draw registered by a refused seed.
pub async fn unregister_unseeded_draw(redis: &Keyspace, drop: &DropId) -> RedisResult<()> {
    let keys = DropKeys::new(redis.prefix(), drop);
    forget_if_unseeded(redis, &draws_registry_key(redis.prefix()), drop.as_str(), &keys.draw, &keys.entry_stream).await
}

async fn forget_if_unseeded(
    redis: &Keyspace,
    registry: &str,
    member: &str,
    meta: &str,
    stream: &str,
) -> RedisResult<()> {
    let mut con = redis.conn();
    if con.exists::<_, bool>(meta).await? {
        return Ok(());
    }
    let _: i64 = con.srem(registry, member).await?;
    if con.xlen::<_, u64>(stream).await? == 0 {
        let _: i64 = con.del(stream).await?;
    }
    Ok(())
}
