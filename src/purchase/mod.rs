//! Selling: a sale's stock in Redis and the purchases against it. [`Sales`] seeds sales
//! (`seed`, registering them first: `registry`), buys (`buy`, through `lua/buy.lua`, which
//! decrements the stock and appends the order to the sale's stream in one atomic step, and keeps
//! the buyer's `receipt`; what it decided is
//! read from the script's `reply`) and reads their state (`reads`); a hot sale's stock can be
//! split over shards (`shards`); once Redis said a sale is sold out, each instance answers that
//! itself (`sold_out`); a retired sale is answered from memory too (`retired`); the events
//! channel tells every instance when to drop what it holds (`events`).

pub mod batch;
pub mod board;
mod buy;
pub mod events;
mod reads;
pub mod receipt;
pub mod registry;
mod reply;
mod restore;
pub mod retired;
mod seed;
pub mod shards;
pub mod sold_out;

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult};

use self::shards::Layout;
use crate::domain::SaleId;
use crate::redis::Keyspace;
use crate::redis::confirm::ConfirmPool;
use crate::redis::keys::SaleKeys;
use crate::redis::lua::unexpected_reply;

pub use buy::Admitted;
pub use reads::{QueueState, SaleState};
pub use receipt::{OrderStatus, Purchase, Receipt};
pub use reply::{BuyOutcome, Verdict};
pub use restore::{CommittedOrder, Restored};
pub use seed::{REPAIR_HOLD, SaleSpec, SeedOutcome};

/// Why a purchase failed without a verdict: whether it may have run on Redis decides what its
/// buyer can be told.
#[derive(Debug, thiserror::Error)]
pub enum BuyError {
    /// Known never to have run: nothing was bought. The purchase call was not sent (no turn, its
    /// lane stopped, the connection refused), or Redis refused it before running it
    /// ([`crate::redis::connection::never_ran`]), or a call before it failed (a limit checked on
    /// its own, the sale's layout).
    #[error("the purchase did not run")]
    NotRun(#[source] RedisError),
    /// The purchase call was sent and no verdict came back (a timeout, a connection reset or
    /// dropped, an error the script raised, a reply not understood): it may have bought, under
    /// its order id. Everything that is not known to be [`Self::NotRun`] is this.
    #[error("the purchase may have run; its outcome is unknown")]
    OutcomeUnknown(#[source] RedisError),
}

impl BuyError {
    /// The failure of a purchase call: [`Self::NotRun`] only when the error proves it; on a
    /// `cluster`, whose client retries a failed call by itself, never.
    pub fn of_call(err: RedisError, cluster: bool) -> Self {
        if !cluster && crate::redis::connection::never_ran(&err) {
            Self::NotRun(err)
        } else {
            Self::OutcomeUnknown(err)
        }
    }
}

/// How long [`Sales`] keeps a sale's layout before reading it again.
pub const LAYOUT_TTL: Duration = Duration::from_secs(5);

/// Most layouts one instance keeps at once.
const MAX_KEPT_LAYOUTS: usize = 10_000;

/// A layout and until when it is kept.
type KeptLayout = (Instant, Arc<Layout>);

/// Most sales whose keys one instance keeps built ([`Sales::sale_keys`]): about 1 KB each.
const MAX_KEPT_KEYS: usize = 1_000;

/// The sales of one deployment in Redis, and the layouts of the sharded ones this instance keeps.
#[derive(Clone)]
pub struct Sales {
    /// The deployment's keys and the shared connection.
    redis: Keyspace,
    /// Layouts of seeded sales by sale id, each kept until the time with it.
    layouts: Arc<RwLock<HashMap<Box<str>, KeptLayout>>>,
    /// The keys of the sales bought lately (shard 0's), by sale id: a sale's key names depend on
    /// its id and the prefix alone, and building its sixteen names took about 4 % of the app's
    /// CPU per purchase in a profile (docs/benchmarks.md).
    keys: Arc<RwLock<HashMap<Box<str>, Arc<SaleKeys>>>>,
    /// With `SECKILL_CONFIRM_REPLICAS`: the connections purchases run and wait for replicas on.
    confirm: Option<Arc<ConfirmPool>>,
    /// Turns for purchases on Redis, `IN_FLIGHT_PURCHASES` (`buy.rs`) at once.
    turns: Arc<tokio::sync::Semaphore>,
    /// Purchases that queue up for a shard go together ([`batch`]); `None`: each alone.
    batcher: Option<Arc<batch::Batcher>>,
}

impl Sales {
    /// The sales under `redis`'s prefix, whose purchases go together when they queue up, up to
    /// [`batch::DEFAULT_PURCHASE_BATCH`] in a call.
    pub fn new(redis: Keyspace) -> Self {
        let turns = Arc::new(tokio::sync::Semaphore::new(buy::IN_FLIGHT_PURCHASES));
        let batcher = Some(Arc::new(batch::Batcher::new(batch::DEFAULT_PURCHASE_BATCH, None)));
        Self { redis, layouts: Arc::default(), keys: Arc::default(), confirm: None, turns, batcher }
    }

    /// The same sales, with at most `max` purchases in a call (1: each purchase in a call of its
    /// own), each call's size observed in `sizes`, bought from `threads` HTTP worker threads on
    /// `cpus` CPUs ([`batch::Batcher::shared_by`]).
    pub fn batching(self, max: u32, sizes: Option<prometheus::Histogram>, threads: usize, cpus: usize) -> Self {
        let batcher = (max > 1 && self.confirm.is_none())
            .then(|| Arc::new(batch::Batcher::new(max, sizes).shared_by(threads, cpus)));
        Self { batcher, ..self }
    }

    /// The same sales, whose purchases wait for replicas on `pool`'s connections
    /// ([`BuyOutcome::NotDurable`] when too few acknowledge in time). Each purchase then goes
    /// in a call of its own, on the connection that waits for its replicas.
    pub fn confirmed_by(self, pool: Arc<ConfirmPool>) -> Self {
        Self { confirm: Some(pool), batcher: None, ..self }
    }

    /// The keyspace the sales are in.
    pub fn keyspace(&self) -> &Keyspace {
        &self.redis
    }

    /// The sale's layout ([`shards`]) as its shard 0 records it, or `None` when the sale
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
        let meta = self.redis.sale_keys(sale).meta;
        let (stock_initial, shards, suffixes): (Option<i64>, Option<i64>, Option<String>) = redis::cmd("HMGET")
            .arg(&meta)
            .arg(&["stock_initial", "shards", "shard_suffixes"])
            .query_async(&mut self.redis.conn())
            .await?;
        if stock_initial.is_none() {
            self.forget_layout(sale.as_str());
            return Ok(None);
        }
        let layout =
            Layout::from_meta(shards, suffixes.as_deref()).map_err(|why| unexpected_reply("the sale's meta", &why))?;
        let layout = Arc::new(layout);
        let kept = (Instant::now() + LAYOUT_TTL, layout.clone());
        let mut layouts = self.layouts.write().unwrap_or_else(|e| e.into_inner());
        if layouts.len() >= MAX_KEPT_LAYOUTS {
            // Bounded: the lapsed ones go first (a year of sales leaves nothing behind).
            let now = Instant::now();
            layouts.retain(|_, (until, _)| now < *until);
        }
        if layouts.len() < MAX_KEPT_LAYOUTS {
            layouts.insert(sale.as_str().into(), kept);
        }
        Ok(Some(layout))
    }

    /// The keys of `sale` (shard 0's), built once and kept; at most 1,000 sales' (`MAX_KEPT_KEYS`;
    /// when full, all are let go and built again as they are bought: bounded, whatever ids come).
    pub fn sale_keys(&self, sale: &SaleId) -> Arc<SaleKeys> {
        if let Some(keys) = self.keys.read().unwrap_or_else(|e| e.into_inner()).get(sale.as_str()) {
            return keys.clone();
        }
        let keys = Arc::new(self.redis.sale_keys(sale));
        let mut kept = self.keys.write().unwrap_or_else(|e| e.into_inner());
        if kept.len() >= MAX_KEPT_KEYS {
            kept.clear();
        }
        kept.insert(sale.as_str().into(), keys.clone());
        keys
    }

    /// The layout this instance read less than [`LAYOUT_TTL`] ago, if any.
    fn cached_layout(&self, sale: &SaleId) -> Option<Arc<Layout>> {
        let layouts = self.layouts.read().unwrap_or_else(|e| e.into_inner());
        layouts.get(sale.as_str()).filter(|(until, _)| Instant::now() < *until).map(|(_, layout)| layout.clone())
    }

    /// Drops the layout this instance keeps of the sale (it was lost or retired).
    pub fn forget_layout(&self, sale: &str) {
        self.layouts.write().unwrap_or_else(|e| e.into_inner()).remove(sale);
    }

    /// The keys of every shard of the sale (one set for an unsharded or unknown sale), from a
    /// fresh read of its layout: for reconciliation and copies of the buyers, which must see
    /// every shard.
    pub async fn all_shard_keys(&self, sale: &SaleId) -> RedisResult<Vec<SaleKeys>> {
        let layout = self.read_layout(sale).await?.unwrap_or_default();
        Ok(layout.keys(self.redis.prefix(), sale))
    }

    /// The keys of the shards the shards registry lists for the sale beyond its layout (all it
    /// lists, for a sale Redis lost): the shards a repair found Redis kept of a sale whose shard 0
    /// it lost, ended and drained, and left registered for the sale's retirement to remove
    /// (`crate::reconcile`, `crate::retire`). None for an unsharded sale that never was sharded.
    pub async fn shards_outside_layout(&self, sale: &SaleId) -> RedisResult<Vec<SaleKeys>> {
        let layout = self.read_layout(sale).await?.unwrap_or_default();
        let registered = registry::registered_shards(&self.redis, sale).await?;
        let outside = registered.into_iter().filter(|suffix| !layout.suffixes().contains(suffix));
        Ok(outside.map(|suffix| SaleKeys::of_shard(self.redis.prefix(), sale, suffix)).collect())
    }
}
