//! Seeding: `lua/seed.lua` on one shard or on each shard of a sharded sale ([`super::shards`]).

use redis::{AsyncCommands, RedisResult};

use super::{Sales, registry};
use crate::domain::{QueueSpec, SaleId};
use crate::purchase::shards::{self, Layout};
use crate::redis::connection;
use crate::redis::keys::{SaleKeys, shards_registry_key};
use crate::redis::lua::{self, unexpected_reply};
use crate::redis::order_stream;

/// What the seed decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedOutcome {
    /// The sale is seeded on every shard.
    Seeded,
    /// The sale has buyers; nothing was changed.
    InProgress,
    /// A sharded sale that has started is never re-seeded.
    Started,
    /// The sale exists with this many shards; its shard count cannot change.
    ShardsFixed {
        /// The sale's shard count.
        shards: u32,
    },
    /// The sale's group allows another `per_buyer` (its first seed's); nothing was changed.
    GroupLimitDiffers {
        /// The group's per_buyer.
        per_buyer: u32,
    },
    /// The sale's group is a drop, whose sizes are seeded together (`crate::drops`); nothing was
    /// changed.
    DropSize,
    /// The sale's group has other sales with another payment window; nothing was changed.
    GroupWindowDiffers {
        /// Their payment window, ms (`None`: orders final at once).
        payment_window_ms: Option<i64>,
    },
}

/// The reason a sale reconciliation's repair seeds again is paused with until the repair ends
/// (`sale_paused` to buyers, with it in the sale's status), and held by its meta's `restoring`
/// mark, which no operator's resume lifts: purchases would otherwise take units that orders in
/// Postgres hold, from a buyer set not yet restored, and releases Postgres owes would give back
/// units the new stock never lost ([`SaleSpec::hold`]).
pub const REPAIR_HOLD: &str = "being repaired: Redis lost this sale, its buyers are being restored";

/// A sale's schedule and stock, as an admin seeds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleSpec {
    /// Items for sale.
    pub stock: i64,
    /// The start, Unix milliseconds (`None`: open at once).
    pub starts_at_ms: Option<i64>,
    /// The end, Unix milliseconds (`None`: never ends).
    pub ends_at_ms: Option<i64>,
    /// Shards to split the stock over; `None` keeps the sale's (1 for a new sale).
    pub shards: Option<u32>,
    /// Milliseconds a reservation has to be paid (`crate::reservations`); `None`: orders are
    /// final at once. Not with shards: the caller refuses the two together (a shard never gets
    /// stock back, docs/stock-sharding.md, which released units would break).
    pub payment_window_ms: Option<i64>,
    /// A waiting room in front of the sale (`crate::admission`); `None`: anyone may buy from
    /// the start. Not with shards (the caller refuses the two together).
    pub queue: Option<QueueSpec>,
    /// Units one buyer may buy in the sale or, for a sale of a group ([`SaleId::group`]), across
    /// the group's sales: 1 to [`crate::domain::MAX_PER_BUYER`]. Not with shards, over 1 or in a
    /// group (the caller refuses them together).
    pub per_buyer: u32,
    /// The proof of work a buyer solves to join or buy (`crate::challenge`): the tries a solve
    /// takes on average; `None`: none.
    pub challenge_cost: Option<u32>,
    /// Seeded paused with this reason (reconciliation's repair of a lost sale, until it has put
    /// the buyers back: [`crate::controls::lift_hold`]); `None`: not paused.
    pub hold: Option<&'static str>,
}

impl SaleSpec {
    /// Whether a sharded sale may have these settings: no payment window, no waiting room, one unit
    /// a buyer (docs/stock-sharding.md).
    fn fits_shards(&self) -> bool {
        self.payment_window_ms.is_none() && self.queue.is_none() && self.per_buyer == 1
    }
}

impl Sales {
    /// Registers the sale and its shards (so workers read their streams), then runs
    /// `lua/seed.lua` on each shard: creates or re-seeds the sale unless it has buyers (or,
    /// sharded, has started). The registries are separate keys (other Cluster slots), so they are
    /// written first: no shard is ever live without its stream being registered.
    ///
    /// A new sale's shard 0, which records the layout, is seeded last, so no instance can find a
    /// shard before it is seeded; a re-seed starts with shard 0, whose refusal (buyers, started)
    /// then changes nothing. Should a later shard refuse or fail, the shards before it keep the
    /// new seed: each shard is still a consistent sale, and a new seed before the start evens
    /// them out (docs/stock-sharding.md).
    ///
    /// A sale this seed registered and its script then refused is taken out of the registry again
    /// ([`registry::unregister_unseeded`]): a refusal leaves nothing behind.
    pub async fn seed(&self, sale: &SaleId, spec: SaleSpec) -> RedisResult<SeedOutcome> {
        let added = registry::register_sales(&self.redis, &[sale]).await?;
        let outcome = self.seed_registered(sale, spec).await?;
        if outcome != SeedOutcome::Seeded
            && !added.is_empty()
            && let Err(err) = registry::unregister_unseeded(&self.redis, &added).await
        {
            tracing::warn!(sale_id = %sale, error = %err, "a refused seed's registration was not taken back");
        }
        Ok(outcome)
    }

    async fn seed_registered(&self, sale: &SaleId, spec: SaleSpec) -> RedisResult<SeedOutcome> {
        let existing = self.read_layout(sale).await?;
        let layout = match (&existing, spec.shards) {
            (Some(layout), Some(shards)) if shards != layout.shards() => {
                return Ok(SeedOutcome::ShardsFixed { shards: layout.shards() });
            }
            // Made sharded since the caller looked (another first seed of the sale won the race):
            // what a shard cannot hold is refused, as the caller refuses it when it sees shards.
            (Some(layout), _) if layout.is_sharded() && !spec.fits_shards() => {
                return Ok(SeedOutcome::ShardsFixed { shards: layout.shards() });
            }
            (Some(layout), _) => Layout::clone(layout),
            (None, shards) => self.spread(sale, shards.unwrap_or(1)).await?,
        };
        if layout.is_sharded() {
            let shards = layout.suffixes().iter().map(|suffix| format!("{sale}:{suffix}"));
            let _: i64 =
                self.redis.conn().sadd(shards_registry_key(self.redis.prefix()), shards.collect::<Vec<_>>()).await?;
        }
        let keys = layout.keys(self.redis.prefix(), sale);
        let others = 1..keys.len();
        let order: Vec<usize> =
            if existing.is_some() { std::iter::once(0).chain(others).collect() } else { others.chain([0]).collect() };
        for shard in order {
            let reply: redis::Value =
                self.seed_shard(sale, &keys[shard], &layout, shard, spec, existing.is_some()).await?;
            match reply {
                redis::Value::Array(words) => {
                    let (word, fixed) = redis::from_redis_value::<(String, String)>(redis::Value::Array(words))?;
                    let bad = || unexpected_reply("seed.lua", &format!("{word} {fixed}"));
                    return match word.as_str() {
                        "group_limit_differs" => {
                            Ok(SeedOutcome::GroupLimitDiffers { per_buyer: fixed.parse().map_err(|_| bad())? })
                        }
                        "drop_size" => Ok(SeedOutcome::DropSize),
                        "group_window_differs" => Ok(SeedOutcome::GroupWindowDiffers {
                            payment_window_ms: match fixed.as_str() {
                                "" => None,
                                ms => Some(ms.parse().map_err(|_| bad())?),
                            },
                        }),
                        _ => Err(bad()),
                    };
                }
                word => match redis::from_redis_value::<String>(word)?.as_str() {
                    "ok" => {}
                    "sale_in_progress" => return Ok(SeedOutcome::InProgress),
                    "sale_started" => return Ok(SeedOutcome::Started),
                    other => return Err(unexpected_reply("seed.lua", other)),
                },
            }
        }
        // Every instance drops its sold-out flag for the sale; the seed itself has happened.
        self.announce(sale, "seed").await;
        Ok(SeedOutcome::Seeded)
    }

    async fn seed_shard(
        &self,
        sale: &SaleId,
        keys: &SaleKeys,
        layout: &Layout,
        shard: usize,
        spec: SaleSpec,
        reseed: bool,
    ) -> RedisResult<redis::Value> {
        let opt = |v: Option<i64>| v.map(|ms| ms.to_string()).unwrap_or_default();
        let suffixes = if shard == 0 { layout.suffixes_field() } else { String::new() };
        // The group exists before the shard can take an order, so its orders reach the worker.
        order_stream::create_group(&mut self.redis.conn(), &keys.orders).await?;
        let mut call = lua::SEED.key(&keys.state()[..]);
        call.arg(layout.stock_of(spec.stock, shard))
            .arg(opt(spec.starts_at_ms))
            .arg(opt(spec.ends_at_ms))
            .arg(layout.shards())
            .arg(suffixes)
            .arg(if reseed { "1" } else { "0" })
            .arg(opt(spec.payment_window_ms));
        match &spec.queue {
            Some(queue) => call.arg(queue.opens_at_ms).arg(queue.rate).arg(queue.ttl_ms).arg(hex::encode(queue.seed)),
            None => call.arg("").arg("").arg("").arg(""),
        };
        call.arg(spec.per_buyer)
            .arg(sale.group().unwrap_or(""))
            .arg(sale.as_str())
            .arg(opt(spec.challenge_cost.map(i64::from)))
            .arg(spec.hold.unwrap_or(""));
        lua::run(&call, &mut self.redis.conn()).await
    }

    /// A new layout of `shards` shards, spread over the cluster's masters.
    async fn spread(&self, sale: &SaleId, shards: u32) -> RedisResult<Layout> {
        if shards <= 1 {
            return Ok(Layout::unsharded());
        }
        if !self.redis.conn().is_cluster() {
            return Ok(shards::spread(sale, shards, |_| None));
        }
        let masters = connection::slot_masters(&mut self.redis.conn()).await?;
        Ok(shards::spread(sale, shards, |slot| masters.master_of(slot)))
    }
}
