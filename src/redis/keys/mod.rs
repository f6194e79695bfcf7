//! Redis key names. All keys of one sale share the hash tag `{sale:<id>}`, so a script that
//! touches them all runs in one Redis Cluster slot; the sales of a group (ids `<group>.<name>`,
//! [`SaleId::group`]) share their group's tag `{group:<group>}` with the group's own keys.

use std::net::IpAddr;

mod drop;

pub use self::drop::{DropKeys, LineKeys, drop_line_base, drop_line_bought_key};
use crate::domain::{SaleId, UserId};

/// The keys of one sale, in the order the sale scripts take them as KEYS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleKeys {
    /// Hash: stock_initial, starts_at_ms, ends_at_ms.
    pub meta: String,
    /// Integer: stock left.
    pub stock: String,
    /// Set: user ids that bought.
    pub buyers: String,
    /// Stream: confirmed orders not yet committed to Postgres.
    pub orders: String,
    /// Hash: each buyer's receipt, `"<order id> <created_at_ms> <stream entry id>"`
    /// ([`crate::purchase::Receipt`]).
    pub receipts: String,
    /// Set: order ids of cancelled or expired reservations whose unit went back into the stock
    /// (`lua/release.lua`'s gate: each unit returns once).
    pub released: String,
    /// Sorted set: the nonces of the proof-of-work solutions spent in the sale -> their challenge's
    /// expiry, Unix ms (`lua/challenge_spend.lua`, `lua/queue_join.lua`; `crate::challenge`).
    pub challenges: String,
    /// The waiting room of a queued sale (`crate::admission`), all in the sale's slot: the
    /// pre-queue, the later arrivals, the admitted buyers who bought, the admissions' times and
    /// the queue's state ([`QueueKeys`]).
    pub queue: QueueKeys,
    /// Hash: buyer -> units bought in the sale's group (`lua/buy.lua`'s KEYS[7]). The group's, shared
    /// by its sales; a sale without a group has one of its own that no script writes.
    pub held: String,
    /// Hash: the group's `per_buyer` (`lua/seed.lua`), likewise the group's or an unused one.
    pub group_meta: String,
    /// Set: the ids of the group's sales, likewise.
    pub group_sales: String,
}

/// A queued sale's waiting room (`lua/queue_join.lua`, `lua/admit.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// Sorted set: buyer -> shuffle score, the pre-queue (a place is its rank after the start).
    pub prequeue: String,
    /// Hash: buyer -> place, those who joined after the start.
    pub late: String,
    /// Sorted set: buyer -> place, the admitted buyers who bought (`lua/buy.lua`).
    pub bought: String,
    /// Sorted set: `"<upto>:<time_ms>"` scored by upto, when places were admitted.
    pub admits: String,
    /// Hash: the shuffle seed and the admission's progress.
    pub state: String,
}

impl QueueKeys {
    /// A waiting room's keys under `base` (a sale's, or a drop's line's).
    fn under(base: &str) -> Self {
        Self {
            prequeue: format!("{base}:queue"),
            late: format!("{base}:queue:late"),
            bought: format!("{base}:queue:bought"),
            admits: format!("{base}:queue:admits"),
            state: format!("{base}:queue:state"),
        }
    }
}

impl SaleKeys {
    /// The sale's own keys (shard 0 of a sharded sale).
    pub fn new(prefix: &str, sale: &SaleId) -> Self {
        Self::with_tag(prefix, &Self::tag(sale, None), sale)
    }

    /// The keys of shard `suffix` of a sharded sale (`crate::purchase::shards`), in a slot of their own.
    pub fn of_shard(prefix: &str, sale: &SaleId, suffix: u32) -> Self {
        Self::with_tag(prefix, &Self::tag(sale, Some(suffix)), sale)
    }

    /// The hash tag's content: `sale:<id>`, or `sale:<id>:<suffix>` for a shard (a sale id has
    /// no `:`, so a shard's tag is never another sale's); `group:<group>` for a sale of a group
    /// (never sharded).
    pub fn tag(sale: &SaleId, shard_suffix: Option<u32>) -> String {
        match (sale.group(), shard_suffix) {
            (Some(group), _) => format!("group:{group}"),
            (None, None) => format!("sale:{sale}"),
            (None, Some(suffix)) => format!("sale:{sale}:{suffix}"),
        }
    }

    /// What every key of the sale (shard 0's) starts with: `<prefix>:{sale:<id>}`, or, for a sale
    /// of a group, `<prefix>:{group:<group>}:sale:<id>` (its keys apart inside the group's slot).
    pub fn base(prefix: &str, sale: &SaleId) -> String {
        Self::base_of(&format!("{prefix}:{{{}}}", Self::tag(sale, None)), sale)
    }

    fn base_of(tagged: &str, sale: &SaleId) -> String {
        match sale.group() {
            Some(_) => format!("{tagged}:sale:{sale}"),
            None => tagged.to_owned(),
        }
    }

    fn with_tag(prefix: &str, tag: &str, sale: &SaleId) -> Self {
        let group = format!("{prefix}:{{{tag}}}");
        // A group's sales keep their keys apart inside the group's slot; a sale alone owns its tag.
        let base = Self::base_of(&group, sale);
        let (held, group_meta, group_sales) = match sale.group() {
            Some(_) => (format!("{group}:held"), format!("{group}:meta"), format!("{group}:sales")),
            None => (format!("{base}:held"), format!("{base}:group"), format!("{base}:group:sales")),
        };
        Self {
            held,
            group_meta,
            group_sales,
            meta: format!("{base}:meta"),
            stock: format!("{base}:stock"),
            buyers: format!("{base}:buyers"),
            orders: format!("{base}:orders"),
            receipts: format!("{base}:receipts"),
            released: format!("{base}:released"),
            challenges: format!("{base}:challenges"),
            queue: QueueKeys::under(&base),
        }
    }

    /// The seven keys, as KEYS[1..7] of buy.lua.
    pub fn all(&self) -> [&str; 7] {
        [&self.meta, &self.stock, &self.buyers, &self.orders, &self.receipts, &self.queue.bought, &self.held]
    }

    /// The sale's state without its order stream, as KEYS[1..6] of seed.lua.
    pub fn state(&self) -> [&str; 6] {
        [&self.meta, &self.stock, &self.buyers, &self.queue.state, &self.group_meta, &self.group_sales]
    }

    /// The group's keys (none for a sale without a group): removed with the group's last sale.
    pub fn group_keys(&self, sale: &SaleId) -> Option<[&str; 3]> {
        sale.group().map(|_| [self.held.as_str(), &self.group_meta, &self.group_sales])
    }

    /// The line of the sale's drop (its group's, whether or not it has one): removed with the
    /// group's last sale. `None` for a sale without a group.
    pub fn drop_line(&self, sale: &SaleId) -> Option<LineKeys> {
        sale.group()?;
        self.group_meta.strip_suffix(":meta").map(|group| LineKeys::under(&format!("{group}:line")))
    }

    /// The sale's own line: its meta, waiting room and spent challenges ([`LineKeys`]).
    pub fn line(&self) -> LineKeys {
        LineKeys { meta: self.meta.clone(), queue: self.queue.clone(), challenges: self.challenges.clone() }
    }

    /// Every key of the sale in its slot, for its removal and tests: not its group's, which its
    /// group's other sales share ([`Self::group_keys`]).
    pub fn every(&self) -> [&str; 12] {
        let q = &self.queue;
        let [meta, stock, buyers, orders, receipts, bought, _held] = self.all();
        let challenges = &self.challenges;
        [
            meta,
            stock,
            buyers,
            orders,
            receipts,
            &self.released,
            bought,
            &q.prequeue,
            &q.late,
            &q.admits,
            &q.state,
            challenges,
        ]
    }
}

/// The set of the ids of group `group`'s sales (a drop's sizes), as lua/seed.lua fills it.
pub fn group_sales_key(prefix: &str, group: &str) -> String {
    format!("{prefix}:{{group:{group}}}:sales")
}

/// The pub/sub channel on which a seed announces the sale id, so every instance drops its
/// sold-out flag for that sale (a channel, not a key: no hash slot).
pub fn events_channel(prefix: &str) -> String {
    format!("{prefix}:events")
}

/// The set of every seeded sale id: the streams the workers read. Written before a sale's first
/// seed, so no sale can take orders without its stream being known.
pub fn sales_registry_key(prefix: &str) -> String {
    format!("{prefix}:sales")
}

/// The set of every drop seeded in draw mode: the entry streams the workers read. Written before
/// the draw's seed, so no entry is accepted without its stream being known.
pub fn draws_registry_key(prefix: &str) -> String {
    format!("{prefix}:draws")
}

/// The set of every shard k >= 1 of every sharded sale, as `<sale id>:<suffix>`: with the sales
/// registry, the streams the workers read. Written before the shard is seeded.
pub fn shards_registry_key(prefix: &str) -> String {
    format!("{prefix}:shards")
}

/// The janitor's lock (`crate::retire::janitor`): the instance that sets it (`SET NX PX`) runs
/// the round; it lapses after one interval.
pub fn retire_lock_key(prefix: &str) -> String {
    format!("{prefix}:retire-lock")
}

/// One client address's count of the challenges it took lately (`lua/challenge_count.lua`;
/// `crate::challenge`), hash-tagged by the address (its limiting key, as the rate limits').
pub fn challenge_count_key(prefix: &str, client: IpAddr) -> String {
    format!("{prefix}:challenges:{{{client}}}")
}

/// The rate limiter's key for one client under one algorithm, by the algorithm's name
/// (switching algorithms starts every client afresh instead of reading another algorithm's
/// state). `client` is the client's limiting key: its IPv4 address, or its IPv6 network's first
/// address (`crate::limiter::client_key`).
pub fn rate_limit_key(prefix: &str, algorithm: &str, client: IpAddr) -> String {
    format!("{prefix}:ratelimit:{algorithm}:{{{client}}}")
}

/// The per-buyer rate limiter's key for one buyer under one algorithm, hash-tagged by the user
/// id (`:user:` keeps it apart from every address key).
pub fn buyer_rate_limit_key(prefix: &str, algorithm: &str, user: &UserId) -> String {
    format!("{prefix}:ratelimit:{algorithm}:user:{{{user}}}")
}

/// The rate limiter's key for one client under one algorithm, counted per sale
/// (`SECKILL_RATE_LIMIT_SCOPE=sale`): in the sale's hash slot, so the limit can join the
/// purchase's script on a Redis Cluster (a group's sale: the group's slot, still per sale).
pub fn sale_rate_limit_key(prefix: &str, sale: &SaleId, algorithm: &str, client: IpAddr) -> String {
    format!("{}:ratelimit:{algorithm}:{client}", SaleKeys::base(prefix, sale))
}

/// The per-buyer rate limiter's key for one buyer under one algorithm, counted per sale.
pub fn sale_buyer_rate_limit_key(prefix: &str, sale: &SaleId, algorithm: &str, user: &UserId) -> String {
    format!("{}:ratelimit:{algorithm}:user:{user}", SaleKeys::base(prefix, sale))
}

/// The part of `key` that Redis Cluster hashes: the text between the first `{` and the next
/// `}` if it is not empty, else the whole key. Keys with the same hash tag share a slot.
pub fn hash_tag(key: &str) -> &str {
    key.split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(tag, _)| tag)
        .filter(|tag| !tag.is_empty())
        .unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drops_line_is_in_its_sizes_slot_and_found_from_any_size() {
        let size = SaleId::parse("shoe.42").unwrap();
        let line = SaleKeys::new("seckill", &size).drop_line(&size).unwrap();
        assert_eq!(line.meta, LineKeys::of_drop("seckill", "shoe").meta);
        assert_eq!(line.meta, "seckill:{group:shoe}:line:meta");
        assert_eq!(line.queue.bought, drop_line_bought_key("seckill", "shoe"));
        for key in line.joining() {
            assert_eq!(hash_tag(key), "group:shoe", "{key}");
        }
        let alone = SaleId::parse("shoe").unwrap();
        assert!(SaleKeys::new("seckill", &alone).drop_line(&alone).is_none());
    }

    #[test]
    fn sale_keys_share_one_hash_tag() {
        let keys = SaleKeys::new("seckill", &SaleId::parse("demo").unwrap());
        assert_eq!(keys.meta, "seckill:{sale:demo}:meta");
        for key in keys.every() {
            assert!(key.contains("{sale:demo}"), "{key}");
            assert_eq!(key.matches('{').count(), 1, "{key}");
        }
        let shard = SaleKeys::of_shard("seckill", &SaleId::parse("demo").unwrap(), 7);
        assert_eq!(shard.orders, "seckill:{sale:demo:7}:orders");
    }

    #[test]
    fn a_groups_sales_share_its_slot_and_keep_their_keys_apart() {
        let size = |id| SaleKeys::new("seckill", &SaleId::parse(id).unwrap());
        let (nine, ten) = (size("shoe.9"), size("shoe.10"));
        assert_eq!(nine.meta, "seckill:{group:shoe}:sale:shoe.9:meta");
        assert_eq!(nine.held, "seckill:{group:shoe}:held");
        assert_eq!(nine.held, ten.held);
        let nine_keys: Vec<&str> =
            nine.every().into_iter().chain(nine.group_keys(&SaleId::parse("shoe.9").unwrap()).unwrap()).collect();
        for key in &nine_keys {
            assert_eq!(hash_tag(key), "group:shoe", "{key}");
        }
        assert!(ten.every().iter().all(|key| !nine.every().contains(key)), "two sizes share a key");
        let alone = size("shoe");
        assert_eq!(hash_tag(&alone.held), "sale:shoe");
        // Per-sale limits stay per sale inside the group's slot.
        let (nine_id, ten_id) = (SaleId::parse("shoe.9").unwrap(), SaleId::parse("shoe.10").unwrap());
        let client = "::1".parse().unwrap();
        let limit = sale_rate_limit_key("seckill", &nine_id, "gcra", client);
        assert_eq!(limit, "seckill:{group:shoe}:sale:shoe.9:ratelimit:gcra:::1");
        assert_ne!(limit, sale_rate_limit_key("seckill", &ten_id, "gcra", client));
        assert!(alone.group_keys(&SaleId::parse("shoe").unwrap()).is_none());
    }

    #[test]
    fn a_drops_keys_are_its_sizes_group_keys() {
        let drop = DropKeys::new("seckill", &crate::domain::DropId::parse("shoe").unwrap());
        let size = SaleKeys::new("seckill", &SaleId::parse("shoe.9").unwrap());
        assert_eq!((drop.meta.as_str(), drop.sales.as_str()), (size.group_meta.as_str(), size.group_sales.as_str()));
        assert_eq!(drop.line_meta, "seckill:{group:shoe}:line:meta");
        for key in [&drop.line_meta, &drop.line_state, &drop.draw, &drop.entries, &drop.entry_stream] {
            assert_eq!(hash_tag(key), "group:shoe", "{key}");
        }
    }

    #[test]
    fn rate_limit_key_tags_the_client() {
        assert_eq!(rate_limit_key("p", "gcra", "::1".parse().unwrap()), "p:ratelimit:gcra:{::1}");
        let user = UserId::parse("alice").unwrap();
        assert_eq!(buyer_rate_limit_key("p", "gcra", &user), "p:ratelimit:gcra:user:{alice}");
        let sale = SaleId::parse("demo").unwrap();
        let per_sale = sale_rate_limit_key("p", &sale, "gcra", "::1".parse().unwrap());
        assert_eq!(per_sale, "p:{sale:demo}:ratelimit:gcra:::1");
        assert_eq!(hash_tag(&per_sale), hash_tag(&SaleKeys::new("p", &sale).meta));
        assert_eq!(hash_tag(&sale_buyer_rate_limit_key("p", &sale, "gcra", &user)), "sale:demo");
        assert_eq!((hash_tag("a{}b{c}"), hash_tag("plain"), hash_tag("x{y")), ("a{}b{c}", "plain", "x{y"));
    }
}
