//! Redis access shared by every part of the service: where Redis is and how to reach it
//! ([`connection`]), dedicated connections for purchases that wait for replicas ([`confirm`]),
//! the name of every key ([`keys`]), the Lua scripts compiled into the binary ([`lua`]), an order
//! stream's entries and consumer group ([`order_stream`]), the removal of a sale's keys in pages
//! ([`removal`]), and [`Keyspace`], one deployment's keys and the connection to them.
//!
//! What the service does with Redis lives with the part that does it: purchases and seeding in
//! `purchase`, the order queue in `orders`, the limiter's call in `limiter`.

pub mod confirm;
pub mod connection;
pub mod keys;
pub mod lua;
pub mod order_stream;
pub mod removal;

use redis::RedisResult;

use self::connection::{PurchaseConnection, Reach, RedisConnection, SharedConnection};
use self::keys::{SaleKeys, events_channel};
use crate::domain::SaleId;

/// Members per SSCAN call, entries per XRANGE page and XADDs per pipeline: big sales are read
/// and written in steps this size, so no single command blocks Redis for long.
pub const PAGE: usize = 1000;

/// One deployment's keys (all under one prefix) and the shared connection that reaches them.
/// Cheap to clone: the connection is a multiplexed handle, and it reconnects by itself after an
/// outage.
#[derive(Clone)]
pub struct Keyspace {
    conn: SharedConnection,
    prefix: String,
}

impl Keyspace {
    /// Must be called inside a Tokio runtime that outlives the keyspace's users (the process's
    /// main runtime): the connection's commands run there ([`SharedConnection`]).
    pub fn new(conn: RedisConnection, prefix: impl Into<String>) -> Self {
        Self { conn: SharedConnection::on_current_runtime(conn), prefix: prefix.into() }
    }

    /// A handle on the shared connection, to run commands with.
    pub fn conn(&self) -> SharedConnection {
        self.conn.clone()
    }

    /// Whether the connection is a cluster's.
    pub fn is_cluster(&self) -> bool {
        self.conn.is_cluster()
    }

    /// The connection a purchase runs on ([`SharedConnection::for_purchase`]).
    pub async fn purchase_conn(&self) -> PurchaseConnection {
        self.conn.for_purchase().await
    }

    /// The prefix every key of the deployment starts with.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of `sale` (shard 0's, for a sharded sale).
    pub fn sale_keys(&self, sale: &SaleId) -> SaleKeys {
        SaleKeys::new(&self.prefix, sale)
    }

    /// The channel on which seeds announce their sale id.
    pub fn events_channel(&self) -> String {
        events_channel(&self.prefix)
    }

    /// The Redis server's clock (`TIME`): seconds and microseconds since the Unix epoch. On a
    /// cluster, one node's.
    pub async fn server_time(&self) -> RedisResult<(i64, i64)> {
        redis::cmd("TIME").query_async(&mut self.conn()).await
    }

    /// For readiness: which part of Redis answers (an error when none does; [`Reach`]).
    pub async fn reach(&self) -> RedisResult<Reach> {
        self.conn().reach().await
    }
}
