//! The order queue in Redis: the order stream of every registered sale and shard, the users of
//! the orders still queued, and appending orders (for reconciliation's repair).
//!
//! Orders are appended by `lua/buy.lua` as part of the purchase; here only the worker's and
//! reconciliation's side.

use std::collections::HashSet;

use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, RedisResult};

use time::OffsetDateTime;
use uuid::Uuid;

use crate::domain::{Order, SaleId, UserId};
use crate::purchase::Sales;
use crate::purchase::receipt::StoredReceipt;
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
/// with XRANGE in pages. Entries with neither a `user_id` nor an `orders` field are skipped.
pub async fn queued_users(sales: &Sales, sale: &SaleId) -> RedisResult<HashSet<String>> {
    let mut users = HashSet::new();
    for keys in sales.all_shard_keys(sale).await? {
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply = sales.keyspace().conn().xrange_count(&keys.orders, &start, "+", PAGE).await?;
            users.extend(page.ids.iter().flat_map(order_stream::users));
            match page.ids.last() {
                Some(last) if page.ids.len() == PAGE => start = format!("({}", last.id),
                _ => break,
            }
        }
    }
    Ok(users)
}

/// The first order still queued in the sale's streams that `wanted` accepts, read with XRANGE
/// in pages (a stream holds only the orders not yet committed, so this reads the backlog at
/// most). Entries that are no order are skipped.
pub async fn find_queued(sales: &Sales, sale: &SaleId, wanted: impl Fn(&Order) -> bool) -> RedisResult<Option<Order>> {
    for keys in sales.all_shard_keys(sale).await? {
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply = sales.keyspace().conn().xrange_count(&keys.orders, &start, "+", PAGE).await?;
            if let Some(order) =
                page.ids.iter().filter_map(|entry| order_stream::decode(entry, sale).ok()).flatten().find(&wanted)
            {
                return Ok(Some(order));
            }
            match page.ids.last() {
                Some(last) if page.ids.len() == PAGE => start = format!("({}", last.id),
                _ => break,
            }
        }
    }
    Ok(None)
}

/// `user`'s order in `sale` while it is still queued, read at its own entry: the buyer's receipt
/// (in whichever shard holds it) names the entry, so this costs a few commands however long the
/// backlog. `None` when the entry has left the stream (committed). A buyer without a receipt (one
/// restored by hand) is looked for in the whole backlog ([`find_queued`]).
pub async fn queued_order_of(sales: &Sales, sale: &SaleId, user: &UserId) -> RedisResult<Option<Order>> {
    for keys in sales.all_shard_keys(sale).await? {
        let receipt: Option<String> = sales.keyspace().conn().hget(&keys.receipts, user.as_str()).await?;
        let Some(receipt) = receipt.and_then(|value| StoredReceipt::parse(&value).ok()) else {
            continue;
        };
        let (ms, seq) = receipt.entry;
        let id = format!("{ms}-{seq}");
        let entry: StreamRangeReply = sales.keyspace().conn().xrange_count(&keys.orders, &id, &id, 1).await?;
        let orders = entry.ids.first().and_then(|entry| order_stream::decode(entry, sale).ok()).unwrap_or_default();
        return Ok(orders.into_iter().find(|order| order.user_id == *user));
    }
    find_queued(sales, sale, |order| order.user_id == *user).await
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

/// Appends a new order for each of `users`, buyers of `sale` whose orders were lost, and returns
/// them. A buyer whose receipt Redis holds gets back the order id and time it was told (its 201
/// stays true), in its receipt's shard, and the receipt is pointed at the new entry so it reads
/// `queued` again; a buyer without one gets a new order id (UUID v7), the time of the repair, and
/// shard 0's stream. In a sale with a payment window each is a reservation again (deadline:
/// its time plus the window). Not atomic: should it stop half-way, a repeated repair finishes the job, and
/// the worker keeps the first of two orders of one user.
pub async fn requeue(sales: &Sales, sale: &SaleId, users: &[UserId]) -> RedisResult<Vec<Order>> {
    let shards = sales.all_shard_keys(sale).await?;
    // In a sale with a payment window a re-enqueued order is a reservation again, its deadline
    // counted from its time (one already past expires as soon as it is stored).
    let window = sales.sale_state(sale).await?.and_then(|state| state.payment_window_ms);
    let now_ms = (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64;
    let mut placed: Vec<(usize, Order, bool)> = Vec::with_capacity(users.len());
    for chunk in users.chunks(PAGE) {
        let mut found: Vec<Option<(usize, StoredReceipt)>> = vec![None; chunk.len()];
        for (shard, keys) in shards.iter().enumerate() {
            let mut pipe = redis::pipe();
            for user in chunk {
                pipe.hget(&keys.receipts, user.as_str());
            }
            let values: Vec<Option<String>> = pipe.query_async(&mut sales.keyspace().conn()).await?;
            for (slot, value) in found.iter_mut().zip(values) {
                if let Some(receipt) = value.and_then(|v| StoredReceipt::parse(&v).ok()) {
                    slot.get_or_insert((shard, receipt));
                }
            }
        }
        for (user, found) in chunk.iter().zip(found) {
            let (shard, order_id, created_at_ms, quantity) = match found {
                Some((shard, r)) => (shard, r.order_id, r.created_at_ms, r.quantity),
                None => (0, Uuid::now_v7(), now_ms, 1),
            };
            let pay_by_ms = window.map(|window| created_at_ms + window);
            let user_id = user.clone();
            let order = Order { order_id, sale_id: sale.clone(), user_id, created_at_ms, pay_by_ms, quantity };
            placed.push((shard, order, found.is_some()));
        }
    }
    let _: i64 = sales.keyspace().conn().sadd(sales_registry_key(sales.keyspace().prefix()), sale.as_str()).await?;
    // One shard's keys share a slot; a cluster refuses a pipeline that spans slots.
    for (shard, keys) in shards.iter().enumerate() {
        let orders: Vec<&(usize, Order, bool)> = placed.iter().filter(|(s, _, _)| *s == shard).collect();
        for chunk in orders.chunks(PAGE) {
            let mut append = redis::pipe();
            for (_, order, _) in chunk {
                append.xadd(&keys.orders, "*", &order_stream::encode(order));
            }
            let entries: Vec<String> = append.query_async(&mut sales.keyspace().conn()).await?;
            let mut point = redis::pipe();
            for ((_, order, has_receipt), entry) in chunk.iter().zip(entries) {
                if *has_receipt {
                    let receipt = StoredReceipt::value(order.order_id, order.created_at_ms, &entry, order.quantity);
                    point.hset(&keys.receipts, order.user_id.as_str(), receipt).ignore();
                }
            }
            if chunk.iter().any(|(_, _, has_receipt)| *has_receipt) {
                point.query_async::<()>(&mut sales.keyspace().conn()).await?;
            }
        }
    }
    Ok(placed.into_iter().map(|(_, order, _)| order).collect())
}
