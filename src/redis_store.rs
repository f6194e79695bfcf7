//! Everything the service asks of Redis: purchases, seeding, sale state, reconciliation reads and
//! re-enqueues, and rate limiting.
//! One multiplexed connection (`crate::redis_conn`, a single server's or a cluster's) is shared by
//! all requests; it reconnects by itself after an outage.

use std::collections::HashSet;
use std::net::IpAddr;

use redis::streams::StreamRangeReply;
use redis::{AsyncCommands, RedisResult};
use uuid::Uuid;

use crate::domain::{Order, SaleId, UserId};
use crate::keys::{SaleKeys, events_channel, rate_limit_key, sales_registry_key};
use crate::limiter::{Decision, Policy};
use crate::redis_conn::RedisConnection;
use crate::scripts;

/// The consumer group every worker of every instance reads orders with.
pub const CONSUMER_GROUP: &str = "seckill-workers";

/// Members per SSCAN call, entries per XRANGE page and XADDs per pipeline: big sales are read
/// and written in steps this size, so no single command blocks Redis for long.
const PAGE: usize = 1000;

/// What the purchase script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuyOutcome {
    Purchased,
    UnknownSale,
    NotStarted,
    Ended,
    AlreadyPurchased,
    SoldOut,
}

/// What the seed script decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedOutcome {
    Seeded,
    /// The sale has buyers; nothing was changed.
    InProgress,
}

/// A sale as Redis holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleState {
    pub stock_initial: i64,
    pub stock_left: i64,
    /// Buyers in the buyer set.
    pub sold: i64,
    /// Confirmed orders still in the stream (not yet committed to Postgres).
    pub queued: i64,
    pub starts_at_ms: Option<i64>,
    pub ends_at_ms: Option<i64>,
}

/// A sale's schedule and stock, as an admin seeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleSpec {
    pub stock: i64,
    pub starts_at_ms: Option<i64>,
    pub ends_at_ms: Option<i64>,
}

/// The shared connection, with every command run by a task of the runtime that created the
/// store. actix-web serves each worker thread from a runtime of its own, and the connection
/// manager spawns its connection's I/O task on the runtime of whichever call (re)connects: on a
/// worker's runtime, that task would die when actix stops that worker at shutdown, breaking the
/// connection for the requests the other workers are still finishing.
#[derive(Clone)]
struct HomeRuntimeConnection {
    inner: RedisConnection,
    home: tokio::runtime::Handle,
}

impl HomeRuntimeConnection {
    async fn on_home<T: Send + 'static>(
        &self,
        call: impl Future<Output = RedisResult<T>> + Send + 'static,
    ) -> RedisResult<T> {
        self.home.spawn(call).await.unwrap_or_else(|joined| {
            Err(redis::RedisError::from((redis::ErrorKind::Io, "redis call aborted", joined.to_string())))
        })
    }
}

impl redis::aio::ConnectionLike for HomeRuntimeConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        let (mut conn, cmd) = (self.inner.clone(), cmd.clone());
        Box::pin(self.on_home(async move { conn.req_packed_command(&cmd).await }))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let (mut conn, pipeline) = (self.inner.clone(), pipeline.clone());
        Box::pin(self.on_home(async move { conn.req_packed_commands(&pipeline, offset, count).await }))
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// Redis operations of the service, under one key prefix.
#[derive(Clone)]
pub struct RedisStore {
    conn: HomeRuntimeConnection,
    prefix: String,
}

impl RedisStore {
    /// Must be called inside a Tokio runtime that outlives the store's users (the process's
    /// main runtime): the connection's tasks run there.
    pub fn new(conn: RedisConnection, prefix: impl Into<String>) -> Self {
        let conn = HomeRuntimeConnection { inner: conn, home: tokio::runtime::Handle::current() };
        Self { conn, prefix: prefix.into() }
    }

    /// The channel on which seeds announce their sale id.
    pub fn events_channel(&self) -> String {
        events_channel(&self.prefix)
    }

    /// The keys of `sale` under this store's prefix.
    pub fn sale_keys(&self, sale: &SaleId) -> SaleKeys {
        SaleKeys::new(&self.prefix, sale)
    }

    /// Runs `lua/buy.lua`: one atomic decision, and on success the order is in the stream.
    pub async fn buy(&self, sale: &SaleId, user: &UserId, order_id: Uuid) -> RedisResult<BuyOutcome> {
        let keys = self.sale_keys(sale);
        let status: String = scripts::run(
            scripts::BUY.key(&keys.all()[..]).arg(sale.as_str()).arg(user.as_str()).arg(order_id.to_string()),
            &mut self.conn.clone(),
        )
        .await?;
        Ok(match status.as_str() {
            "ok" => BuyOutcome::Purchased,
            "unknown_sale" => BuyOutcome::UnknownSale,
            "not_started" => BuyOutcome::NotStarted,
            "ended" => BuyOutcome::Ended,
            "already_purchased" => BuyOutcome::AlreadyPurchased,
            "sold_out" => BuyOutcome::SoldOut,
            other => return Err(unexpected("buy.lua", other)),
        })
    }

    /// Registers the sale (so workers read its stream), then runs `lua/seed.lua`: creates or
    /// re-seeds the sale unless it has buyers. The registry is a separate key (another Cluster
    /// slot), so it is written first: a sale is never live without being registered.
    pub async fn seed(&self, sale: &SaleId, spec: SaleSpec) -> RedisResult<SeedOutcome> {
        let _: i64 = self.conn.clone().sadd(sales_registry_key(&self.prefix), sale.as_str()).await?;
        let keys = self.sale_keys(sale);
        let opt = |v: Option<i64>| v.map(|ms| ms.to_string()).unwrap_or_default();
        let status: String = scripts::run(
            scripts::SEED
                .key(&keys.all()[..])
                .arg(spec.stock)
                .arg(opt(spec.starts_at_ms))
                .arg(opt(spec.ends_at_ms))
                .arg(CONSUMER_GROUP),
            &mut self.conn.clone(),
        )
        .await?;
        match status.as_str() {
            "ok" => {
                // Every instance drops its sold-out flag for the sale. Should this fail, the flags
                // lapse by themselves (crate::sold_out::FLAG_TTL); the seed itself has happened.
                let published: RedisResult<i64> = self.conn.clone().publish(self.events_channel(), sale.as_str()).await;
                if let Err(err) = published {
                    tracing::warn!(sale_id = %sale, error = %err, "seed event not published");
                }
                Ok(SeedOutcome::Seeded)
            }
            "sale_in_progress" => Ok(SeedOutcome::InProgress),
            other => Err(unexpected("seed.lua", other)),
        }
    }

    /// Reads the sale's state in one MULTI (all keys share a slot). `None` if never seeded.
    pub async fn sale_state(&self, sale: &SaleId) -> RedisResult<Option<SaleState>> {
        let keys = self.sale_keys(sale);
        let (meta, stock_left, sold, queued): ([Option<i64>; 3], Option<i64>, i64, i64) = redis::pipe()
            .atomic()
            .cmd("HMGET")
            .arg(&keys.meta)
            .arg(&["stock_initial", "starts_at_ms", "ends_at_ms"])
            .get(&keys.stock)
            .scard(&keys.buyers)
            .xlen(&keys.orders)
            .query_async(&mut self.conn.clone())
            .await?;
        let [stock_initial, starts_at_ms, ends_at_ms] = meta;
        Ok(match (stock_initial, stock_left) {
            (Some(stock_initial), Some(stock_left)) => {
                Some(SaleState { stock_initial, stock_left, sold, queued, starts_at_ms, ends_at_ms })
            }
            _ => None,
        })
    }

    /// Every registered sale.
    pub async fn sale_ids(&self) -> RedisResult<Vec<SaleId>> {
        let ids: Vec<String> = self.conn.clone().smembers(sales_registry_key(&self.prefix)).await?;
        Ok(ids.iter().filter_map(|id| SaleId::parse(id).ok()).collect())
    }

    /// Every member of the sale's buyer set, read with SSCAN (never SMEMBERS: a set of millions
    /// would block Redis). Buyers are never removed, so everyone in the set when the scan starts
    /// is returned; buyers added meanwhile may or may not be.
    pub async fn scan_buyers(&self, sale: &SaleId) -> RedisResult<HashSet<String>> {
        let key = self.sale_keys(sale).buyers;
        let mut buyers = HashSet::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, members): (u64, Vec<String>) = redis::cmd("SSCAN")
                .arg(&key)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.conn.clone())
                .await?;
            buyers.extend(members);
            if next == 0 {
                return Ok(buyers);
            }
            cursor = next;
        }
    }

    /// The sale's buyers, unless there are more than `limit` (then `None`).
    pub async fn buyers_if_at_most(&self, sale: &SaleId, limit: u64) -> RedisResult<Option<HashSet<String>>> {
        let count: u64 = self.conn.clone().scard(self.sale_keys(sale).buyers).await?;
        if count > limit {
            return Ok(None);
        }
        self.scan_buyers(sale).await.map(Some)
    }

    /// Whether `user` is among the sale's buyers.
    pub async fn is_buyer(&self, sale: &SaleId, user: &UserId) -> RedisResult<bool> {
        self.conn.clone().sismember(self.sale_keys(sale).buyers, user.as_str()).await
    }

    /// The users of the orders still in the sale's stream (queued, not yet committed), read with
    /// XRANGE in pages. Entries without a `user_id` field are skipped.
    pub async fn queued_users(&self, sale: &SaleId) -> RedisResult<HashSet<String>> {
        let key = self.sale_keys(sale).orders;
        let mut users = HashSet::new();
        let mut start = "-".to_owned();
        loop {
            let page: StreamRangeReply = self.conn.clone().xrange_count(&key, &start, "+", PAGE).await?;
            users.extend(page.ids.iter().filter_map(|entry| entry.get::<String>("user_id")));
            match page.ids.last() {
                Some(last) if page.ids.len() == PAGE => start = format!("({}", last.id),
                _ => return Ok(users),
            }
        }
    }

    /// Appends `orders` to their sales' streams with the fields `lua/buy.lua` writes, pipelined
    /// in steps. Each sale is first (re-)added to the registry, so a worker reads its stream.
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

    /// Runs the policy's limiter script for `client`: admits and records the request, or
    /// refuses it (writing nothing).
    pub async fn rate_limit(&self, client: IpAddr, policy: &Policy) -> RedisResult<Decision> {
        let key = rate_limit_key(&self.prefix, policy.algorithm, client);
        let nonce = Uuid::now_v7().simple().to_string();
        let reply = scripts::run(&policy.invocation(&key, &nonce, None), &mut self.conn.clone()).await?;
        Ok(Decision::from_reply(reply))
    }

    /// PING, for readiness.
    pub async fn ping(&self) -> RedisResult<()> {
        redis::cmd("PING").query_async::<String>(&mut self.conn.clone()).await.map(drop)
    }
}

fn unexpected(script: &str, reply: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::Client,
        "unexpected script reply",
        format!("{script} answered {reply:?}"),
    ))
}
