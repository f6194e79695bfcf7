//! Removing a sale's Redis keys in steps: no command may block Redis on a big key. A buyer set
//! (and a released set) is emptied by `SPOP <key> 1000` until it is gone, a waiting room's sorted
//! sets (and the spent challenges) by `ZPOPMIN <key> 1000`, a receipts hash (and the later
//! arrivals) by `HSCAN` + `HDEL` of each page; the small keys (stock, the drained stream) by `DEL`;
//! the meta last, since shard 0's meta is what says where the other shards are. Every command names
//! one key, so on a Redis Cluster each goes to that key's own slot. For a retirement
//! (`crate::retire`), which also takes the shards a repair left of a sale whose shard 0 Redis
//! lost (`crate::reconcile`).

use redis::RedisResult;

use super::PAGE;
use super::connection::SharedConnection;
use super::keys::SaleKeys;

/// What removing one sale's keys took away.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removed {
    /// Members popped from the buyer sets.
    pub buyers: u64,
    /// Fields deleted from the receipts hashes.
    pub receipts: u64,
    /// Members popped from the released sets.
    pub released: u64,
    /// Members popped from a queued sale's waiting room (pre-queue, later arrivals, its buyers).
    pub queued: u64,
    /// Keys that existed and are gone (each shard's twelve at most).
    pub keys: u64,
}

/// Removes every key of every shard, shard 0 (`shards[0]`) last, its meta the very last.
pub async fn remove_all(con: &mut SharedConnection, shards: &[SaleKeys]) -> RedisResult<Removed> {
    let mut removed = Removed::default();
    for keys in shards.iter().rev() {
        removed.keys += exists(con, keys).await?;
        removed.buyers += drain_set(con, &keys.buyers).await?;
        removed.receipts += drain_hash(con, &keys.receipts).await?;
        removed.released += drain_set(con, &keys.released).await?;
        let queue = &keys.queue;
        removed.queued += drain_sorted_set(con, &queue.prequeue).await?;
        removed.queued += drain_hash(con, &queue.late).await?;
        removed.queued += drain_sorted_set(con, &queue.bought).await?;
        drain_sorted_set(con, &keys.challenges).await?;
        for key in [&queue.admits, &queue.state, &keys.stock, &keys.orders, &keys.meta] {
            let _: i64 = redis::cmd("DEL").arg(key).query_async(con).await?;
        }
    }
    Ok(removed)
}

/// How many of the shard's keys exist (one EXISTS per key: they share a slot, but counting one
/// by one works on any client).
pub async fn exists(con: &mut SharedConnection, keys: &SaleKeys) -> RedisResult<u64> {
    let mut count = 0;
    for key in keys.every() {
        let n: u64 = redis::cmd("EXISTS").arg(key).query_async(con).await?;
        count += n;
    }
    Ok(count)
}

/// Pops the set's members [`PAGE`] at a time until it is empty (Redis deletes an empty set).
pub async fn drain_set(con: &mut SharedConnection, key: &str) -> RedisResult<u64> {
    let mut popped = 0;
    loop {
        let page: Vec<String> = redis::cmd("SPOP").arg(key).arg(PAGE).query_async(con).await?;
        popped += page.len() as u64;
        if page.len() < PAGE {
            return Ok(popped);
        }
    }
}

/// Pops the sorted set's members [`PAGE`] at a time until it is empty.
pub async fn drain_sorted_set(con: &mut SharedConnection, key: &str) -> RedisResult<u64> {
    let mut popped = 0;
    loop {
        let page: Vec<(String, f64)> = redis::cmd("ZPOPMIN").arg(key).arg(PAGE).query_async(con).await?;
        popped += page.len() as u64;
        if page.len() < PAGE {
            return Ok(popped);
        }
    }
}

/// Deletes the hash's fields a page at a time: HSCAN through the table, HDEL what each page
/// returned, and again until HLEN is 0 (fields added behind the cursor are found next round).
pub async fn drain_hash(con: &mut SharedConnection, key: &str) -> RedisResult<u64> {
    let mut deleted = 0;
    loop {
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<String>) =
                redis::cmd("HSCAN").arg(key).arg(cursor).arg("COUNT").arg(PAGE).query_async(con).await?;
            let fields: Vec<&String> = page.iter().step_by(2).collect();
            if !fields.is_empty() {
                let n: u64 = redis::cmd("HDEL").arg(key).arg(&fields).query_async(con).await?;
                deleted += n;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let left: u64 = redis::cmd("HLEN").arg(key).query_async(con).await?;
        if left == 0 {
            return Ok(deleted);
        }
    }
}
