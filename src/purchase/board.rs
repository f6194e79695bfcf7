//! The public view of the sales (`GET /sales/{id}`), served from a per-instance snapshot. A crowd
//! polls it while it waits for a sale to open, so Redis must see a bounded number of reads
//! whatever the request rate: each sale's snapshot is read at most once per [`SNAPSHOT_TTL`]
//! (concurrent askers wait for the one read), and a sale id is looked up only if the registry of
//! sales, itself read at most once per [`SNAPSHOT_TTL`], holds it, so made-up ids cost no reads.
//! Per instance and second that is at most `2 × (1 + shards)` round trips per polled sale, plus
//! one registry read.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::future::Cache;
use redis::RedisResult;

use super::{SaleState, Sales};
use crate::domain::SaleId;

/// How long a snapshot (and the registry) is served before Redis is read again.
pub const SNAPSHOT_TTL: Duration = Duration::from_millis(200);

/// Most snapshots kept at once (the registry bounds which ids can have one).
const MAX_SNAPSHOTS: u64 = 10_000;

/// A read failed; shared by every request that waited for it.
pub type BoardError = Arc<redis::RedisError>;

/// One read of a sale, and the Redis server's clock at that read.
#[derive(Debug)]
pub struct Snapshot {
    pub state: SaleState,
    /// A sale of a group: the group's registered sales (its own included), by id, at most
    /// [`super::receipt::MAX_GROUP_SALES`]; empty for a sale without a group.
    pub group: Vec<String>,
    /// Redis `TIME` at the read, Unix milliseconds.
    redis_time_ms: i64,
    /// This instance's monotonic clock at the read.
    taken: Instant,
}

impl Snapshot {
    /// The Redis server's clock now, as this instance estimates it: the clock at the read
    /// advanced by the time since, so a snapshot served late still tells the current time.
    pub fn server_time_ms(&self) -> i64 {
        self.redis_time_ms + i64::try_from(self.taken.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

/// The sales' public snapshots of one instance.
#[derive(Clone)]
pub struct SaleBoard {
    sales: Sales,
    /// Sale id → its snapshot (`None`: not seeded).
    snapshots: Cache<Box<str>, Option<Arc<Snapshot>>>,
    /// The registered sale ids, in the one entry under `()`.
    registry: Cache<(), Arc<HashSet<String>>>,
}

impl SaleBoard {
    pub fn new(sales: Sales) -> Self {
        Self {
            sales,
            snapshots: Cache::builder().max_capacity(MAX_SNAPSHOTS).time_to_live(SNAPSHOT_TTL).build(),
            registry: Cache::builder().max_capacity(1).time_to_live(SNAPSHOT_TTL).build(),
        }
    }

    /// The sale's snapshot, at most [`SNAPSHOT_TTL`] old; `None` if the sale is not registered
    /// or not seeded.
    pub async fn snapshot(&self, sale: &SaleId) -> Result<Option<Arc<Snapshot>>, BoardError> {
        let registry = self.registry.try_get_with((), self.read_registry()).await?;
        if !registry.contains(sale.as_str()) {
            return Ok(None);
        }
        self.snapshots.try_get_with(sale.as_str().into(), self.read(sale, &registry)).await
    }

    /// Whether Redis's registry of sales holds `sale` (this instance's copy, at most
    /// [`SNAPSHOT_TTL`] old: no read of its own for a made-up id).
    pub async fn registered(&self, sale: &SaleId) -> Result<bool, BoardError> {
        let registry = self.registry.try_get_with((), self.read_registry()).await?;
        Ok(registry.contains(sale.as_str()))
    }

    /// The registered sales of `group` (a drop's sizes), by id, at most
    /// [`super::receipt::MAX_GROUP_SALES`]: from this instance's copy of the registry, so a
    /// made-up group costs no read of its own.
    pub async fn group_sales(&self, group: &str) -> Result<Vec<SaleId>, BoardError> {
        let registry = self.registry.try_get_with((), self.read_registry()).await?;
        Ok(members(&registry, group).iter().filter_map(|id| SaleId::parse(id).ok()).collect())
    }

    /// Whether the registry holds a sale of group `group` (a drop's size), from the same copy.
    pub async fn group_registered(&self, group: &str) -> Result<bool, BoardError> {
        let registry = self.registry.try_get_with((), self.read_registry()).await?;
        Ok(!members(&registry, group).is_empty())
    }

    /// Drops the sale's snapshot, so the next request reads it afresh (it just sold out).
    pub async fn invalidate(&self, sale: &SaleId) {
        self.snapshots.invalidate(sale.as_str()).await;
    }

    /// Drops the sale's snapshot and the registry, so the next request reads both afresh (the
    /// sale was just seeded here).
    pub async fn forget(&self, sale: &SaleId) {
        self.registry.invalidate(&()).await;
        self.invalidate(sale).await;
    }

    async fn read_registry(&self) -> RedisResult<Arc<HashSet<String>>> {
        let ids = self.sales.sale_ids().await?;
        Ok(Arc::new(ids.into_iter().map(|id| id.as_str().to_owned()).collect()))
    }

    async fn read(&self, sale: &SaleId, registry: &HashSet<String>) -> RedisResult<Option<Arc<Snapshot>>> {
        let (state, (secs, micros)) =
            tokio::try_join!(self.sales.sale_state(sale), self.sales.keyspace().server_time())?;
        let taken = Instant::now();
        let redis_time_ms = secs * 1000 + micros / 1000;
        // The group's sales, from the registry already in hand: no read of their own.
        let group = match sale.group() {
            None => Vec::new(),
            Some(group) => members(registry, group),
        };
        Ok(state.map(|state| Arc::new(Snapshot { state, group, redis_time_ms, taken })))
    }
}

/// The registry's sales of `group`, sorted, at most [`super::receipt::MAX_GROUP_SALES`].
fn members(registry: &HashSet<String>, group: &str) -> Vec<String> {
    let prefix = format!("{group}.");
    let mut ids: Vec<String> = registry.iter().filter(|id| id.starts_with(&prefix)).cloned().collect();
    ids.sort_unstable();
    ids.truncate(super::receipt::MAX_GROUP_SALES);
    ids
}
