//! The order queue in Redis: the order stream of every registered sale and shard, the users of
//! the orders still queued, and appending orders (for reconciliation's repair).
//!
//! Orders are appended by `lua/buy.lua` as part of the purchase; here only the worker's and
//! reconciliation's side.

use std::collections::HashSet;

use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, RedisResult};

use crate::domain::{Order, SaleId};
use crate::purchase::Sales;
use crate::redis::keys::{SaleKeys, sales_registry_key, shards_registry_key};
use crate::redis::{Keyspace, PAGE, order_stream};

/// The order stream of every registered sale and shard, with the sale it belongs to.
pub async fn streams(sales: &Sales) -> RedisResult<Vec<(String, SaleId)>> {
    let keyspace = sales.keyspace();
    let mut streams: Vec<(String, SaleId)> =
        sales.sale_ids().await?.into_iter().map(|sale| (keyspace.sale_keys(&sale).orders, sale)).collect();
    let shards: Vec<String> = keyspace.conn().smembers(shards_registry_key(keyspace.prefix())).await?;
    for shard in shards {
        let parsed =
            shard.rsplit_once(':').and_then(|(sale, suffix)| Some((SaleId::parse(sale).ok()?, suffix.parse().ok()?)));
        if let Some((sale, suffix)) = parsed {
            streams.push((SaleKeys::of_shard(keyspace.prefix(), &sale, suffix).orders, sale));
        }
    }
    Ok(streams)
}

/// The users of the orders still in the sale's streams (queued, not yet committed), read
/// with XRANGE in pages. Entries without a `user_id` field are skipped.
pub async fn queued_users(sales: &Sales, sale: &SaleId) -> RedisResult<HashSet<String>> {
    let mut users = HashSet::new();
    for keys in sales.all_shard_keys(sale).await? {
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply = sales.keyspace().conn().xrange_count(&keys.orders, &start, "+", PAGE).await?;
            users.extend(page.ids.iter().filter_map(order_stream::user));
            match page.ids.last() {
                Some(last) if page.ids.len() == PAGE => start = format!("({}", last.id),
                _ => break,
            }
        }
    }
    Ok(users)
}

/// Appends `orders` to their sales' streams (shard 0's) as `lua/buy.lua` does ([`order_stream`]),
/// pipelined in steps. Each sale is first (re-)added to the registry, so a worker reads its
/// stream.
pub async fn enqueue(keyspace: &Keyspace, orders: &[Order]) -> RedisResult<()> {
    if orders.is_empty() {
        return Ok(());
    }
    let sales: HashSet<&str> = orders.iter().map(|o| o.sale_id.as_str()).collect();
    let _: i64 = keyspace.conn().sadd(sales_registry_key(keyspace.prefix()), sales).await?;
    for chunk in orders.chunks(PAGE) {
        let mut pipe = redis::pipe();
        for order in chunk {
            pipe.xadd(keyspace.sale_keys(&order.sale_id).orders, "*", &order_stream::encode(order)).ignore();
        }
        pipe.query_async::<()>(&mut keyspace.conn()).await?;
    }
    Ok(())
}
