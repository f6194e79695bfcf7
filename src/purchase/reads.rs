//! Reading a sale: its state (summed over its shards), the registered sales, and its buyers (the
//! union of its shards').

use std::collections::HashSet;

use futures::future::try_join_all;
use redis::{AsyncCommands, RedisResult};

use super::Sales;
use crate::domain::SaleId;
use crate::purchase::shards::Layout;
use crate::redis::PAGE;
use crate::redis::keys::{SaleKeys, sales_registry_key};
use crate::redis::lua::unexpected_reply;

/// A sale as Redis holds it (a sharded sale's figures are its shards' sums).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleState {
    /// The stock the sale was seeded with.
    pub stock_initial: i64,
    /// The stock not sold yet.
    pub stock_left: i64,
    /// Buyers in the buyer set(s).
    pub sold: i64,
    /// Orders whose units went back into the stock (cancelled or expired reservations).
    pub released: i64,
    /// Units the buyers bought (`sold` plus the units beyond one per order):
    /// `stock_initial = stock_left + units_sold - units_released`.
    pub units_sold: i64,
    /// Units the released orders gave back.
    pub units_released: i64,
    /// Units one buyer may buy in the sale (or across its group).
    pub per_buyer: u32,
    /// Confirmed orders still in the stream(s) (not yet committed to Postgres).
    pub queued: i64,
    /// The start, Unix milliseconds (`None`: open from the seed).
    pub starts_at_ms: Option<i64>,
    /// The end, Unix milliseconds (`None`: never ends).
    pub ends_at_ms: Option<i64>,
    /// Shards the stock is split over (1: unsharded).
    pub shards: u32,
    /// Milliseconds a reservation has to be paid; `None`: orders are final at once.
    pub payment_window_ms: Option<i64>,
    /// A queued sale's waiting room (`crate::admission`).
    pub queue: Option<QueueState>,
    /// Paused (`crate::controls`), with the operator's reason (maybe empty); `None`: not paused.
    pub paused: Option<String>,
    /// The proof of work a buyer solves to join (or, without a waiting room, to buy): the tries it
    /// takes on average (`crate::challenge`); `None`: no challenge.
    pub challenge_cost: Option<u32>,
    /// A size of a drop with a line (its meta's `line` = `drop`): only the drop's line admits to
    /// it (`crate::admission`), the sale has no line of its own.
    pub drop_line: bool,
    /// A size of a drop in draw mode (its meta's `line` = `draw`): nobody buys it (`crate::draw`).
    pub draw: bool,
}

/// A queued sale's waiting room, as its meta and state hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueState {
    /// When the pre-queue opened (opens), Unix ms.
    pub opens_at_ms: i64,
    /// Buyers admitted per second.
    pub rate: u32,
    /// The shuffle seed, 64 hex digits (secret until the start: only its SHA-256 is shown before).
    pub seed: String,
}

/// The meta's fields a sale's read takes, in one HMGET.
const META_FIELDS: [&str; 17] = [
    "stock_initial",
    "starts_at_ms",
    "ends_at_ms",
    "shards",
    "shard_suffixes",
    "payment_window_ms",
    "queue_opens_at_ms",
    "queue_rate",
    "queue_seed",
    "paused",
    "extra_units",
    "extra_released",
    "per_buyer",
    "challenge_cost",
    "line",
    "queued_extra",
    "restoring",
];

/// One shard's figures and its meta's layout fields, read in one MULTI.
struct ShardRead {
    stock_initial: Option<i64>,
    stock_left: Option<i64>,
    sold: i64,
    released: i64,
    extra_units: i64,
    extra_released: i64,
    per_buyer: u32,
    queued: i64,
    starts_at_ms: Option<i64>,
    ends_at_ms: Option<i64>,
    shards: Option<i64>,
    suffixes: Option<String>,
    payment_window_ms: Option<i64>,
    queue: Option<QueueState>,
    paused: Option<String>,
    challenge_cost: Option<u32>,
    drop_line: bool,
    draw: bool,
}

impl Sales {
    /// Reads the sale's state: each shard in one MULTI (its keys share a slot), shard 0 first,
    /// since it says where the others are. `None` if never seeded. Each shard keeps
    /// `stock_initial = stock_left + units_sold - units_released` at the moment it is read, so the sums keep it too,
    /// even though the shards are read at slightly different moments.
    pub async fn sale_state(&self, sale: &SaleId) -> RedisResult<Option<SaleState>> {
        let home = self.read_shard(&self.redis.sale_keys(sale)).await?;
        let (Some(stock_initial), Some(stock_left)) = (home.stock_initial, home.stock_left) else {
            return Ok(None);
        };
        let layout = Layout::from_meta(home.shards, home.suffixes.as_deref())
            .map_err(|why| unexpected_reply("the sale's meta", &why))?;
        let mut state = SaleState {
            stock_initial,
            stock_left,
            sold: home.sold,
            released: home.released,
            units_sold: home.sold + home.extra_units,
            units_released: home.released + home.extra_released,
            per_buyer: home.per_buyer,
            queued: home.queued,
            starts_at_ms: home.starts_at_ms,
            ends_at_ms: home.ends_at_ms,
            shards: layout.shards(),
            payment_window_ms: home.payment_window_ms,
            queue: home.queue,
            paused: home.paused,
            challenge_cost: home.challenge_cost,
            drop_line: home.drop_line,
            draw: home.draw,
        };
        let others = layout.keys(self.redis.prefix(), sale).split_off(1);
        for (keys, shard) in others.iter().zip(try_join_all(others.iter().map(|k| self.read_shard(k))).await?) {
            let (Some(initial), Some(left)) = (shard.stock_initial, shard.stock_left) else {
                return Err(unexpected_reply("a shard of the sale", &format!("{} is missing", keys.meta)));
            };
            state.stock_initial += initial;
            state.stock_left += left;
            state.sold += shard.sold;
            state.released += shard.released;
            state.units_sold += shard.sold + shard.extra_units;
            state.units_released += shard.released + shard.extra_released;
            state.queued += shard.queued;
        }
        Ok(Some(state))
    }

    async fn read_shard(&self, keys: &SaleKeys) -> RedisResult<ShardRead> {
        // One HMGET of every meta field (16: more than a tuple reply reads), then each parsed.
        let (meta, stock_left, sold, released, queued): (Vec<Option<String>>, Option<i64>, i64, i64, i64) =
            redis::pipe()
                .atomic()
                .cmd("HMGET")
                .arg(&keys.meta)
                .arg(&META_FIELDS)
                .get(&keys.stock)
                .scard(&keys.buyers)
                .scard(&keys.released)
                .xlen(&keys.orders)
                .query_async(&mut self.redis.conn())
                .await?;
        let field = |name: &str| meta.get(META_FIELDS.iter().position(|f| *f == name)?).cloned().flatten();
        let number = |name: &str| -> RedisResult<Option<i64>> {
            field(name)
                .map(|raw| raw.parse().map_err(|_| unexpected_reply(&format!("the sale's meta {name}"), &raw)))
                .transpose()
        };
        Ok(ShardRead {
            stock_initial: number("stock_initial")?,
            stock_left,
            sold,
            released,
            extra_units: number("extra_units")?.unwrap_or(0),
            extra_released: number("extra_released")?.unwrap_or(0),
            per_buyer: number("per_buyer")?.map_or(1, |n| n.clamp(1, i64::from(u32::MAX)) as u32),
            // An entry of several orders counts them all (the meta's queued_extra, lua/trim.lua):
            // never below the entries, should a lost meta's count have restarted, and none once
            // there is no entry, should the stream have been lost with its orders' count kept.
            queued: if queued == 0 { 0 } else { queued + number("queued_extra")?.unwrap_or(0).max(0) },
            starts_at_ms: number("starts_at_ms")?,
            ends_at_ms: number("ends_at_ms")?,
            shards: number("shards")?,
            suffixes: field("shard_suffixes"),
            payment_window_ms: number("payment_window_ms")?,
            // A sale the repair is restoring refuses purchases as a paused one does
            // (lua/purchase.lua), whatever an operator resumed meanwhile: so it reads.
            paused: field("paused").or_else(|| field("restoring").map(|_| super::REPAIR_HOLD.to_owned())),
            challenge_cost: number("challenge_cost")?.map(|n| n.clamp(1, i64::from(u32::MAX)) as u32),
            drop_line: field("line").as_deref() == Some("drop"),
            draw: field("line").as_deref() == Some("draw"),
            queue: match (number("queue_opens_at_ms")?, number("queue_rate")?, field("queue_seed")) {
                (Some(opens_at_ms), Some(rate), Some(seed)) => {
                    Some(QueueState { opens_at_ms, rate: rate.clamp(0, i64::from(u32::MAX)) as u32, seed })
                }
                _ => None,
            },
        })
    }

    /// Every registered sale.
    pub async fn sale_ids(&self) -> RedisResult<Vec<SaleId>> {
        let ids: Vec<String> = self.redis.conn().smembers(sales_registry_key(self.redis.prefix())).await?;
        Ok(ids.iter().filter_map(|id| SaleId::parse(id).ok()).collect())
    }

    /// Every buyer of the sale (of every shard), read with SSCAN (never SMEMBERS: a set of
    /// millions would block Redis). Buyers are never removed, so everyone in a set when its scan
    /// starts is returned; buyers added meanwhile may or may not be.
    pub async fn scan_buyers(&self, sale: &SaleId) -> RedisResult<HashSet<String>> {
        let mut buyers = HashSet::new();
        for keys in self.all_shard_keys(sale).await? {
            self.scan(&keys.buyers, "SSCAN", |member| {
                buyers.insert(member);
            })
            .await?;
        }
        Ok(buyers)
    }

    /// Calls `each` on every element SSCAN (of a set) or every field and value HSCAN (of a hash)
    /// returns, [`PAGE`] at a time.
    pub(super) async fn scan(&self, key: &str, scan: &str, mut each: impl FnMut(String)) -> RedisResult<()> {
        let mut cursor: u64 = 0;
        loop {
            let (next, page): (u64, Vec<String>) = redis::cmd(scan)
                .arg(key)
                .arg(cursor)
                .arg("COUNT")
                .arg(PAGE)
                .query_async(&mut self.redis.conn())
                .await?;
            page.into_iter().for_each(&mut each);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// How many buyers the sale has (over its shards).
    pub async fn count_buyers(&self, keys: &[SaleKeys]) -> RedisResult<u64> {
        let counts: Vec<u64> = try_join_all(keys.iter().map(|k| {
            let mut con = self.redis.conn();
            async move { con.scard(&k.buyers).await }
        }))
        .await?;
        Ok(counts.iter().sum())
    }
}
