//! Everything the service asks of Redis: purchases and seeding (`sales`), sale state,
//! reconciliation reads and re-enqueues (`reads`), and rate limiting (here).
//! One multiplexed connection (`crate::redis_conn`, a single server's or a cluster's) is shared by
//! all requests; it reconnects by itself after an outage.

mod reads;
mod sales;
pub mod shards;
pub mod sold_out;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::RedisResult;
use uuid::Uuid;

use crate::domain::SaleId;
use crate::limiter::{Decision, Policy};
use crate::purchase::shards::Layout;
use crate::redis::connection::RedisConnection;
use crate::redis::keys::{SaleKeys, events_channel, rate_limit_key};
use crate::redis::lua;

pub use reads::SaleState;
pub use sales::{BuyOutcome, SaleSpec, SeedOutcome};

/// The consumer group every worker of every instance reads orders with.
pub const CONSUMER_GROUP: &str = "seckill-workers";

/// How long a store keeps a sale's layout before reading it again.
pub const LAYOUT_TTL: Duration = Duration::from_secs(5);

/// Members per SSCAN call, entries per XRANGE page and XADDs per pipeline: big sales are read
/// and written in steps this size, so no single command blocks Redis for long.
const PAGE: usize = 1000;

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

/// A layout and until when it is kept.
type KeptLayout = (Instant, Arc<Layout>);

/// Redis operations of the service, under one key prefix.
#[derive(Clone)]
pub struct RedisStore {
    conn: HomeRuntimeConnection,
    prefix: String,
    /// Layouts of seeded sales by sale id, each kept until the time with it.
    layouts: Arc<RwLock<HashMap<Box<str>, KeptLayout>>>,
}

impl RedisStore {
    /// Must be called inside a Tokio runtime that outlives the store's users (the process's
    /// main runtime): the connection's tasks run there.
    pub fn new(conn: RedisConnection, prefix: impl Into<String>) -> Self {
        let conn = HomeRuntimeConnection { inner: conn, home: tokio::runtime::Handle::current() };
        Self { conn, prefix: prefix.into(), layouts: Arc::default() }
    }

    /// The channel on which seeds announce their sale id.
    pub fn events_channel(&self) -> String {
        events_channel(&self.prefix)
    }

    /// The keys of `sale` under this store's prefix.
    pub fn sale_keys(&self, sale: &SaleId) -> SaleKeys {
        SaleKeys::new(&self.prefix, sale)
    }

    /// The sale's layout (`crate::shards`) as its shard 0 records it, or `None` when the sale
    /// has not been seeded. A layout is fixed by the sale's first seed, so it is kept for
    /// [`LAYOUT_TTL`] rather than read each time; the time limit covers a sale whose keys were
    /// lost and that was seeded anew.
    pub async fn layout(&self, sale: &SaleId) -> RedisResult<Option<Arc<Layout>>> {
        match self.cached_layout(sale) {
            Some(layout) => Ok(Some(layout)),
            None => self.read_layout(sale).await,
        }
    }

    /// Reads the sale's layout from its shard 0 (and keeps it).
    pub async fn read_layout(&self, sale: &SaleId) -> RedisResult<Option<Arc<Layout>>> {
        let meta = self.sale_keys(sale).meta;
        let (stock_initial, shards, suffixes): (Option<i64>, Option<i64>, Option<String>) = redis::cmd("HMGET")
            .arg(&meta)
            .arg(&["stock_initial", "shards", "shard_suffixes"])
            .query_async(&mut self.conn.clone())
            .await?;
        if stock_initial.is_none() {
            self.forget_layout(sale);
            return Ok(None);
        }
        let layout =
            Layout::from_meta(shards, suffixes.as_deref()).map_err(|why| unexpected("the sale's meta", &why))?;
        let layout = Arc::new(layout);
        let kept = (Instant::now() + LAYOUT_TTL, layout.clone());
        self.layouts.write().unwrap_or_else(|e| e.into_inner()).insert(sale.as_str().into(), kept);
        Ok(Some(layout))
    }

    /// The layout this store read less than [`LAYOUT_TTL`] ago, if any.
    fn cached_layout(&self, sale: &SaleId) -> Option<Arc<Layout>> {
        let layouts = self.layouts.read().unwrap_or_else(|e| e.into_inner());
        layouts.get(sale.as_str()).filter(|(until, _)| Instant::now() < *until).map(|(_, layout)| layout.clone())
    }

    fn forget_layout(&self, sale: &SaleId) {
        self.layouts.write().unwrap_or_else(|e| e.into_inner()).remove(sale.as_str());
    }

    /// The keys of every shard of the sale (one set for an unsharded or unknown sale), from a
    /// fresh read of its layout: for reconciliation and copies of the buyers, which must see
    /// every shard.
    async fn all_shard_keys(&self, sale: &SaleId) -> RedisResult<Vec<SaleKeys>> {
        let layout = self.read_layout(sale).await?.unwrap_or_default();
        Ok(layout.keys(&self.prefix, sale))
    }

    /// Runs the policy's limiter script for `client`: admits and records the request, or
    /// refuses it (writing nothing).
    pub async fn rate_limit(&self, client: IpAddr, policy: &Policy) -> RedisResult<Decision> {
        let key = rate_limit_key(&self.prefix, policy.algorithm, client);
        let nonce = Uuid::now_v7().simple().to_string();
        let reply = lua::run(&policy.invocation(&key, &nonce, None), &mut self.conn.clone()).await?;
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
