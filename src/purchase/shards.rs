//! Stock sharding: one hot sale's stock split over K sub-sales ("shards") in different Redis
//! Cluster slots, so that one sale can use K masters instead of one. The design, its invariants
//! and its limits are in `docs/stock-sharding.md`.
//!
//! Shard 0 is the sale's own keys (`{sale:<id>}`); its meta records the layout: the shard count
//! and the other shards' suffixes. Shard k >= 1 has the keys `{sale:<id>:<suffix>}` (a sale id
//! cannot contain `:`, so these never collide with another sale). Every shard is a complete sale
//! of the unsharded kind, run by the same `lua/buy.lua`. A user visits the shards in a fixed
//! order, starting at a home shard chosen by a hash of the user id, and moves to the next shard
//! only after a `sold_out` answer. The layout is fixed by the sale's first seed.

use std::collections::HashMap;
use std::hash::Hasher;

use crate::domain::{SaleId, UserId};
use crate::redis::keys::SaleKeys;

/// Most shards one sale may have.
pub const MAX_SHARDS: u32 = 16;

/// Where a sale's shards are: shard 0 is the sale's own keys, shard k >= 1 has suffix
/// `suffixes[k - 1]`. An unsharded sale has no suffixes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    suffixes: Vec<u32>,
}

impl Layout {
    /// The layout of an unsharded sale (K = 1).
    pub fn unsharded() -> Self {
        Self::default()
    }

    /// The layout with the given suffixes for shards 1..K.
    pub fn new(suffixes: Vec<u32>) -> Self {
        Self { suffixes }
    }

    /// K, the number of shards (1 when unsharded).
    pub fn shards(&self) -> u32 {
        self.suffixes.len() as u32 + 1
    }

    /// The suffixes of shards 1..K.
    pub fn suffixes(&self) -> &[u32] {
        &self.suffixes
    }

    /// Whether the sale has more than one shard.
    pub fn is_sharded(&self) -> bool {
        !self.suffixes.is_empty()
    }

    /// The keys of every shard, shard 0 first.
    pub fn keys(&self, prefix: &str, sale: &SaleId) -> Vec<SaleKeys> {
        (0..self.shards() as usize).map(|k| self.shard_keys(prefix, sale, k)).collect()
    }

    /// The keys of shard `k` (0: the sale's own keys). Panics unless `k` < K.
    pub fn shard_keys(&self, prefix: &str, sale: &SaleId, k: usize) -> SaleKeys {
        match k {
            0 => SaleKeys::new(prefix, sale),
            k => SaleKeys::of_shard(prefix, sale, self.suffixes[k - 1]),
        }
    }

    /// The shards `user` visits, in order: the home shard, then the next ones, wrapping around.
    pub fn visit_order(&self, user: &UserId) -> impl Iterator<Item = usize> + use<> {
        visit_order(user, self.shards())
    }

    /// The items of a sale of `stock` that shard `k` holds: an even split, the remainder going
    /// one each to the first shards.
    pub fn stock_of(&self, stock: i64, k: usize) -> i64 {
        let shards = i64::from(self.shards());
        stock / shards + i64::from((k as i64) < stock % shards)
    }

    /// The suffixes as shard 0's meta records them: comma-separated, "" when unsharded.
    pub fn suffixes_field(&self) -> String {
        self.suffixes.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    }

    /// The layout recorded in shard 0's meta (fields `shards` and `shard_suffixes`; a sale seeded
    /// before sharding existed has neither and is unsharded).
    pub fn from_meta(shards: Option<i64>, suffixes: Option<&str>) -> Result<Self, String> {
        let suffixes: Vec<u32> = match suffixes.filter(|s| !s.is_empty()) {
            None => vec![],
            Some(field) => field
                .split(',')
                .map(|s| s.parse().map_err(|_| format!("shard_suffixes {field:?} is not a list of integers")))
                .collect::<Result<_, _>>()?,
        };
        let layout = Self { suffixes };
        match shards {
            Some(k) if k != i64::from(layout.shards()) => {
                Err(format!("the meta records {k} shards but {} suffixes", layout.suffixes.len()))
            }
            _ => Ok(layout),
        }
    }
}

/// The shards of `shards` that `user` visits, in order: the home shard, then the next ones,
/// wrapping around.
pub fn visit_order(user: &UserId, shards: u32) -> impl Iterator<Item = usize> + use<> {
    let home = home_shard(user, shards);
    let shards = shards.max(1) as usize;
    (0..shards).map(move |i| (home + i) % shards)
}

/// The shard a user visits first: FNV-1a (64 bit) of the user id's bytes, modulo K. Stable across
/// processes, platforms and versions, so every instance routes a user the same way.
pub fn home_shard(user: &UserId, shards: u32) -> usize {
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(user.as_str().as_bytes());
    (hasher.finish() % u64::from(shards.max(1))) as usize
}

/// The Redis Cluster slot of a hash tag: CRC16 (XMODEM) modulo 16384, as the cluster
/// specification defines it.
pub fn slot_of_tag(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % 16384
}

/// How many candidate suffixes [`spread`] tries before it takes whatever comes.
const SUFFIX_CANDIDATES: u32 = 10_000;

/// Chooses the suffixes of shards 1..K so the K shards spread evenly over the masters:
/// `master_of(slot)` names the master serving a slot (`None` on a single server, where any
/// suffixes do). Each shard takes the first unused suffix whose master holds the fewest shards
/// so far, so K shards land on K masters when there are that many.
pub fn spread(sale: &SaleId, shards: u32, master_of: impl Fn(u16) -> Option<String>) -> Layout {
    let wanted = shards.saturating_sub(1) as usize;
    let master = |tag: &str| master_of(slot_of_tag(tag));
    let Some(home) = master(&SaleKeys::tag(sale, None)) else {
        return Layout::new((1..=wanted as u32).collect());
    };
    let mut load: HashMap<String, usize> = HashMap::from([(home, 1)]);
    for suffix in 1..=SUFFIX_CANDIDATES {
        if let Some(m) = master(&SaleKeys::tag(sale, Some(suffix))) {
            load.entry(m).or_insert(0);
        }
    }
    let mut suffixes = Vec::with_capacity(wanted);
    for suffix in 1..=SUFFIX_CANDIDATES {
        if suffixes.len() == wanted {
            break;
        }
        let Some(m) = master(&SaleKeys::tag(sale, Some(suffix))) else { continue };
        let least = load.values().copied().min().unwrap_or(0);
        if load[&m] == least {
            *load.get_mut(&m).expect("counted above") += 1;
            suffixes.push(suffix);
        }
    }
    // Only a cluster whose masters serve no candidate slot at all gets here short.
    let mut next = suffixes.last().copied().unwrap_or(0) + 1;
    while suffixes.len() < wanted {
        suffixes.push(next);
        next += 1;
    }
    Layout::new(suffixes)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn user(id: &str) -> UserId {
        UserId::parse(id).unwrap()
    }

    #[test]
    fn stock_is_split_evenly_and_adds_up() {
        let layout = Layout::new(vec![1, 2]);
        for stock in [0, 1, 2, 3, 100, 1001] {
            let parts: Vec<i64> = (0..3).map(|k| layout.stock_of(stock, k)).collect();
            assert_eq!(parts.iter().sum::<i64>(), stock, "{stock}: {parts:?}");
            assert!(parts.iter().max().unwrap() - parts.iter().min().unwrap() <= 1, "{stock}: {parts:?}");
        }
        assert_eq!(Layout::unsharded().stock_of(7, 0), 7);
    }

    #[test]
    fn every_user_visits_every_shard_once_starting_at_home() {
        let layout = Layout::new(vec![4, 9]);
        let mut homes = [0; 3];
        for i in 0..3000 {
            let u = user(&format!("user-{i}"));
            let order: Vec<usize> = layout.visit_order(&u).collect();
            assert_eq!(order.len(), 3);
            assert_eq!(order.iter().copied().collect::<HashSet<_>>().len(), 3, "{order:?}");
            assert_eq!(order[0], home_shard(&u, 3));
            homes[order[0]] += 1;
        }
        assert!(homes.iter().all(|&n| n > 900), "homes are spread evenly: {homes:?}");
        assert_eq!(Layout::unsharded().visit_order(&user("a")).collect::<Vec<_>>(), vec![0]);
    }

    #[test]
    fn the_home_shard_is_fnv1a_of_the_user_id() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (the published test vector).
        assert_eq!(home_shard(&user("a"), 1_000_000_007), (0xaf63dc4c8601ec8c_u64 % 1_000_000_007) as usize);
    }

    #[test]
    fn the_layout_round_trips_through_the_meta_and_bad_meta_is_refused() {
        let layout = Layout::new(vec![3, 17]);
        assert_eq!(Layout::from_meta(Some(3), Some(&layout.suffixes_field())), Ok(layout));
        assert_eq!(Layout::from_meta(None, None), Ok(Layout::unsharded()));
        assert_eq!(Layout::from_meta(Some(1), Some("")), Ok(Layout::unsharded()));
        assert!(Layout::from_meta(Some(3), Some("3")).is_err());
        assert!(Layout::from_meta(Some(2), Some("x")).is_err());
    }

    #[test]
    fn slots_match_the_cluster_specification() {
        // CLUSTER KEYSLOT of "123456789" is 12739 (CRC16/XMODEM 0x31C3), and of "foo" 12182.
        assert_eq!(slot_of_tag("123456789"), 12739);
        assert_eq!(slot_of_tag("foo"), 12182);
    }

    #[test]
    fn shards_spread_over_the_masters() {
        // Three masters with the slot ranges `redis-cli --cluster create` gives three masters.
        let master = |slot: u16| Some(["m1", "m2", "m3"][(slot as usize * 3) / 16384].to_owned());
        let sale = SaleId::parse("hot").unwrap();
        // (K, masters used, most shards on one master)
        for (shards, masters, most) in [(2, 2, 1), (3, 3, 1), (6, 3, 2), (7, 3, 3)] {
            let layout = spread(&sale, shards, master);
            assert_eq!(layout.shards(), shards);
            let mut counts: HashMap<String, usize> = HashMap::new();
            for k in 0..shards as usize {
                let suffix = (k > 0).then(|| layout.suffixes[k - 1]);
                *counts.entry(master(slot_of_tag(&SaleKeys::tag(&sale, suffix))).unwrap()).or_default() += 1;
            }
            let used = (counts.len(), counts.values().copied().max().unwrap());
            assert_eq!(used, (masters, most), "{shards} shards: {counts:?}");
        }
        assert_eq!(spread(&sale, 3, |_| None), Layout::new(vec![1, 2]), "single server: first suffixes");
        assert_eq!(spread(&sale, 1, master), Layout::unsharded());
    }
}
