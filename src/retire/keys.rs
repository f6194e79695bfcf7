//! A retired sale's place in its group, its drop's line and its draw: the keys that outlive one
//! sale go with the group's last (the sale's own keys: `crate::redis::removal`).

use redis::RedisResult;

use crate::domain::{DropId, SaleId};
use crate::redis::connection::SharedConnection;
use crate::redis::keys::{DropKeys, SaleKeys, draws_registry_key};
use crate::redis::removal::{drain_hash, drain_sorted_set};

/// Takes a retired sale of a group out of its group; the group's last sale takes the group's
/// keys with it (its buyers' holdings drained in pages, its drop's line if it has one, then its
/// meta). A sale without a group
/// has nothing to leave. (A seed of a new sale of the group racing the last retirement can lose
/// the group's holdings: seed a group's sales before retiring its last.)
pub async fn leave_group(con: &mut SharedConnection, sale: &SaleId, keys: &SaleKeys) -> RedisResult<()> {
    let Some([held, group_meta, group_sales]) = keys.group_keys(sale) else {
        return Ok(());
    };
    let _: i64 = redis::cmd("SREM").arg(group_sales).arg(sale.as_str()).query_async(con).await?;
    let left: i64 = redis::cmd("SCARD").arg(group_sales).query_async(con).await?;
    if left == 0 {
        drain_hash(con, held).await?;
        if let Some(line) = keys.drop_line(sale) {
            // The meta first: from then on a join finds no line and writes nothing, so none lands
            // behind the drains below (a line has no end of its own: its sizes end, it does not).
            let _: i64 = redis::cmd("DEL").arg(&line.meta).query_async(con).await?;
            let queue = &line.queue;
            drain_sorted_set(con, &queue.prequeue).await?;
            drain_hash(con, &queue.late).await?;
            drain_sorted_set(con, &queue.bought).await?;
            drain_sorted_set(con, &line.challenges).await?;
            for key in [&queue.admits, &queue.state] {
                let _: i64 = redis::cmd("DEL").arg(key).query_async(con).await?;
            }
        }
        let draw_gone = match (sale.group(), group_meta.strip_suffix(":meta")) {
            (Some(group), Some(base)) => leave_draw(con, group, base).await?,
            _ => true,
        };
        // Last: a group with no sale and its meta left has a teardown to finish
        // ([`group_unfinished`]), which the retirement's next try (the janitor's) does again.
        if draw_gone {
            let _: i64 = redis::cmd("DEL").arg(group_meta).query_async(con).await?;
        }
    }
    Ok(())
}

/// Whether the sale's group (if it has one) has no sale left but its meta: a teardown that
/// stopped midway (an error, a shutdown) or waits for its draw's entries to be stored. A new sale
/// of the group is seeded with its place in the group in one script, so a live group always has
/// a sale.
pub async fn group_unfinished(con: &mut SharedConnection, sale: &SaleId, keys: &SaleKeys) -> RedisResult<bool> {
    let Some([_, group_meta, group_sales]) = keys.group_keys(sale) else {
        return Ok(false);
    };
    let left: i64 = redis::cmd("SCARD").arg(group_sales).query_async(con).await?;
    let meta: bool = redis::cmd("EXISTS").arg(group_meta).query_async(con).await?;
    Ok(left == 0 && meta)
}

/// A retired drop's draw (`crate::draw`), if it had one: its entries hash and waitlist (drained in
/// pages), meta and entry stream go, and the registry forgets it, once the worker stored every entry (an
/// empty stream: it trims what it committed). Entries still queued keep it all (logged), and the
/// group's meta with it, for the retirement's next try to finish. True when the draw is gone.
async fn leave_draw(con: &mut SharedConnection, group: &str, base: &str) -> RedisResult<bool> {
    let (Some((prefix, _)), Ok(drop)) = (base.split_once(":{group:"), DropId::parse(group)) else {
        return Ok(true);
    };
    let keys = DropKeys::new(prefix, &drop);
    let queued: u64 = redis::cmd("XLEN").arg(&keys.entry_stream).query_async(con).await?;
    if queued > 0 {
        tracing::warn!(drop_id = group, queued, "draw entries not yet stored: the draw's keys are kept");
        return Ok(false);
    }
    let _: i64 = redis::cmd("SREM").arg(draws_registry_key(prefix)).arg(group).query_async(con).await?;
    drain_hash(con, &keys.entries).await?;
    let sizes: Option<String> = redis::cmd("HGET").arg(&keys.draw).arg("sizes").query_async(con).await?;
    for size in sizes.iter().flat_map(|sizes| sizes.split(',')) {
        drain_sorted_set(con, &keys.waiting(size)).await?;
    }
    drain_hash(con, &keys.waitlist).await?;
    for key in [&keys.draw, &keys.entry_stream] {
        let _: i64 = redis::cmd("DEL").arg(key).query_async(con).await?;
    }
    Ok(true)
}
