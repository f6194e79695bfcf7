//! Reading a sale: its state (summed over its shards), its buyers and queued orders (the union
//! of its shards'), and re-enqueueing orders for reconciliation.

use std::collections::HashSet;

use futures::future::try_join_all;
use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, RedisResult};

use super::{PAGE, RedisStore, unexpected};
use crate::domain::{Order, SaleId, UserId};
use crate::purchase::shards::Layout;
use crate::redis::keys::{SaleKeys, sales_registry_key, shards_registry_key};

/// A sale as Redis holds it (a sharded sale's figures are its shards' sums).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleState {
    pub stock_initial: i64,
    pub stock_left: i64,
    /// Buyers in the buyer set(s).
    pub sold: i64,
    /// Confirmed orders still in the stream(s) (not yet committed to Postgres).
    pub queued: i64,
    pub starts_at_ms: Option<i64>,
    pub ends_at_ms: Option<i64>,
    /// Shards the stock is split over (1: unsharded).
    pub shards: u32,
}

/// One shard's figures and its meta's layout fields, read in one MULTI.
struct ShardRead {
    stock_initial: Option<i64>,
    stock_left: Option<i64>,
    sold: i64,
    queued: i64,
    starts_at_ms: Option<i64>,
    ends_at_ms: Option<i64>,
    shards: Option<i64>,
    suffixes: Option<String>,
}

impl RedisStore {
    /// Reads the sale's state: each shard in one MULTI (its keys share a slot), shard 0 first,
    /// since it says where the others are. `None` if never seeded. Each shard keeps
    /// `stock_initial = stock_left + sold` at the moment it is read, so the sums keep it too,
    /// even though the shards are read at slightly different moments.
    pub async fn sale_state(&self, sale: &SaleId) -> RedisResult<Option<SaleState>> {
        let home = self.read_shard(&self.sale_keys(sale)).await?;
        let (Some(stock_initial), Some(stock_left)) = (home.stock_initial, home.stock_left) else {
            return Ok(None);
        };
        let layout = Layout::from_meta(home.shards, home.suffixes.as_deref())
            .map_err(|why| unexpected("the sale's meta", &why))?;
        let mut state = SaleState {
            stock_initial,
            stock_left,
            sold: home.sold,
            queued: home.queued,
            starts_at_ms: home.starts_at_ms,
            ends_at_ms: home.ends_at_ms,
            shards: layout.shards(),
        };
        let others = layout.keys(&self.prefix, sale).split_off(1);
        for (keys, shard) in others.iter().zip(try_join_all(others.iter().map(|k| self.read_shard(k))).await?) {
            let (Some(initial), Some(left)) = (shard.stock_initial, shard.stock_left) else {
                return Err(unexpected("a shard of the sale", &format!("{} is missing", keys.meta)));
            };
            state.stock_initial += initial;
            state.stock_left += left;
            state.sold += shard.sold;
            state.queued += shard.queued;
        }
        Ok(Some(state))
    }

    async fn read_shard(&self, keys: &SaleKeys) -> RedisResult<ShardRead> {
        type Meta = (Option<i64>, Option<i64>, Option<i64>, Option<i64>, Option<String>);
        let ((stock_initial, starts_at_ms, ends_at_ms, shards, suffixes), stock_left, sold, queued): (
            Meta,
            Option<i64>,
            i64,
            i64,
        ) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(&keys.meta)
            .arg(&["stock_initial", "starts_at_ms", "ends_at_ms", "shards", "shard_suffixes"])
            .get(&keys.stock)
            .scard(&keys.buyers)
            .xlen(&keys.orders)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(ShardRead { stock_initial, stock_left, sold, queued, starts_at_ms, ends_at_ms, shards, suffixes })
    }

    /// Every registered sale.
    pub async fn sale_ids(&self) -> RedisResult<Vec<SaleId>> {
        let ids: Vec<String> = self.conn.clone().smembers(sales_registry_key(&self.prefix)).await?;
        Ok(ids.iter().filter_map(|id| SaleId::parse(id).ok()).collect())
    }

    /// The order stream of every registered sale and shard, with the sale it belongs to.
    pub async fn order_streams(&self) -> RedisResult<Vec<(String, SaleId)>> {
        let mut streams: Vec<(String, SaleId)> =
            self.sale_ids().await?.into_iter().map(|sale| (self.sale_keys(&sale).orders, sale)).collect();
        let shards: Vec<String> = self.conn.clone().smembers(shards_registry_key(&self.prefix)).await?;
        for shard in shards {
            let parsed = shard
                .rsplit_once(':')
                .and_then(|(sale, suffix)| Some((SaleId::parse(sale).ok()?, suffix.parse().ok()?)));
            if let Some((sale, suffix)) = parsed {
                streams.push((SaleKeys::of_shard(&self.prefix, &sale, suffix).orders, sale));
            }
        }
        Ok(streams)
    }

    /// Every buyer of the sale (of every shard), read with SSCAN (never SMEMBERS: a set of
    /// millions would block Redis). Buyers are never removed, so everyone in a set when its scan
    /// starts is returned; buyers added meanwhile may or may not be.
    pub async fn scan_buyers(&self, sale: &SaleId) -> RedisResult<HashSet<String>> {
        let mut buyers = HashSet::new();
        for keys in self.all_shard_keys(sale).await? {
            let mut cursor: u64 = 0;
            loop {
                let (next, members): (u64, Vec<String>) = redis::cmd("SSCAN")
                    .arg(&keys.buyers)
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(PAGE)
                    .query_async(&mut self.conn.clone())
                    .await?;
                buyers.extend(members);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(buyers)
    }

    /// The sale's buyers, unless there are more than `limit` (then `None`).
    pub async fn buyers_if_at_most(&self, sale: &SaleId, limit: u64) -> RedisResult<Option<HashSet<String>>> {
        let keys = self.all_shard_keys(sale).await?;
        let counts: Vec<u64> = try_join_all(keys.iter().map(|k| {
            let mut con = self.conn.clone();
            async move { con.scard(&k.buyers).await }
        }))
        .await?;
        if counts.iter().sum::<u64>() > limit {
            return Ok(None);
        }
        self.scan_buyers(sale).await.map(Some)
    }

    /// Whether `user` is among the sale's buyers (in any shard). On the sold-out path, so it
    /// goes by the layout this store keeps.
    pub async fn is_buyer(&self, sale: &SaleId, user: &UserId) -> RedisResult<bool> {
        let keys = self.layout(sale).await?.unwrap_or_default().keys(&self.prefix, sale);
        let found: Vec<bool> = try_join_all(keys.iter().map(|k| {
            let mut con = self.conn.clone();
            async move { con.sismember(&k.buyers, user.as_str()).await }
        }))
        .await?;
        Ok(found.contains(&true))
    }

    /// The users of the orders still in the sale's streams (queued, not yet committed), read
    /// with XRANGE in pages. Entries without a `user_id` field are skipped.
    pub async fn queued_users(&self, sale: &SaleId) -> RedisResult<HashSet<String>> {
        let mut users = HashSet::new();
        for keys in self.all_shard_keys(sale).await? {
            let mut start = "-".to_owned();
            loop {
                let page: StreamRangeReply = self.conn.clone().xrange_count(&keys.orders, &start, "+", PAGE).await?;
                users.extend(page.ids.iter().filter_map(|entry| entry.get::<String>("user_id")));
                match page.ids.last() {
                    Some(last) if page.ids.len() == PAGE => start = format!("({}", last.id),
                    _ => break,
                }
            }
        }
        Ok(users)
    }

    /// Appends `orders` to their sales' streams (shard 0's) with the fields `lua/buy.lua` writes,
    /// pipelined in steps. Each sale is first (re-)added to the registry, so a worker reads its
    /// stream.
    pub async fn enqueue_orders(&self, orders: &[Order]) -> RedisResult<()> {
        if orders.is_empty() {
            return Ok(());
        }
        let sales: HashSet<&str> = orders.iter().map(|o| o.sale_id.as_str()).collect();
        let _: i64 = self.conn.clone().sadd(sales_registry_key(&self.prefix), sales).await?;
        for chunk in orders.chunks(PAGE) {
            let mut pipe = redis::pipe();
            for order in chunk {
                let fields = [
                    ("order_id", order.order_id.to_string()),
                    ("sale_id", order.sale_id.to_string()),
                    ("user_id", order.user_id.to_string()),
                    ("created_at_ms", order.created_at_ms.to_string()),
                ];
                pipe.xadd(self.sale_keys(&order.sale_id).orders, "*", &fields).ignore();
            }
            pipe.query_async::<()>(&mut self.conn.clone()).await?;
        }
        Ok(())
    }
}
