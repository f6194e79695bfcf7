//! The in-process sold-out flag. Once Redis has answered "sold out" for a sale, this instance
//! answers itself: no limiter call, no purchase script, no Redis round trip. That is the path
//! most of a flash crowd takes once the stock is gone. The flag holds a copy of the sale's buyers
//! (final once it is sold out) and their receipts, so a buyer who asks again still hears 409 with
//! its order id, not 410. The copy says "queued" for an order it did not see confirmed, and is
//! copied again each time Redis renews the flag until every order in it is confirmed. A flag
//! that lapsed and is set again is a new flag: its old copy may predate a reopening this instance
//! did not hear of, so it is copied afresh, and a copy made for an earlier flag is never kept.
//!
//! A sold-out sale comes back by a re-seed (possible while it has no buyers, e.g. after a seed
//! with stock 0) or when its stock rises (a top-up, `crate::controls`; a reservation's unit given
//! back). Each publishes the sale id on the deployment's events channel, and every instance's
//! listener (`super::events`) clears its flag at once; a sold-out answer that raced the clear (its
//! purchase asked before it) does not set the flag again ([`SoldOutFlags::set_since`]). A flag
//! also lapses after its time to live, so an instance that missed the event (a dropped
//! subscription) catches up within that time.
//!
//! The flags are bounded: they live in a `moka` cache weighed by the buyers each one holds
//! ([`MAX_HELD_BUYERS`] in all, least recently used first out), and a flag nobody asked about for
//! [`FLAG_IDLE`] is dropped with its copy, so a year of sales leaves nothing behind.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::domain::{SaleId, UserId};
use crate::purchase::Sales;
use crate::purchase::receipt::{BuyerCopy, Receipt};

/// How long a flag holds without being confirmed by Redis again: `SECKILL_SOLD_OUT_FLAG_TTL`'s
/// default.
pub const FLAG_TTL: Duration = Duration::from_secs(5);

/// Largest buyer set an instance copies into memory for a sold-out sale (about 150 bytes each
/// with its receipt).
pub const MAX_LOCAL_BUYERS: u64 = 100_000;

/// Buyers (with their receipts) held in all the flags of one instance, about 75 MB at most; a
/// flag weighs 1 plus its copy's buyers.
pub const MAX_HELD_BUYERS: u64 = 500_000;

/// A flag (and its copy) nobody asked about for this long is dropped.
pub const FLAG_IDLE: Duration = Duration::from_secs(600);

/// What the flags say about one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flagged {
    /// Sold out, and this user is not one of its buyers.
    SoldOut,
    /// Sold out, and this user bought: its order, as the copy holds it.
    AlreadyPurchased(Option<Receipt>),
    /// Sold out, but the buyers are not in memory (still loading, or too many): ask Redis.
    AskRedis,
}

/// A sold-out sale's buyers, as this instance holds them. They never change once the sale is
/// sold out: nobody can buy, and a sale with buyers cannot be re-seeded. Only their orders'
/// status moves on, from queued to confirmed.
#[derive(Debug, Clone)]
enum Buyers {
    /// Not copied: not yet, more than `MAX_LOCAL_BUYERS`, or the copy failed.
    Absent,
    Loaded(Arc<BuyerCopy>),
}

#[derive(Debug, Clone)]
struct Flag {
    until: Instant,
    buyers: Buyers,
    /// A copy is being made (the previous one, if any, answers meanwhile).
    loading: bool,
    /// Which flag this is: new whenever a flag is set afresh (first, or after it lapsed). A copy
    /// is stored only into the flag it was made for.
    epoch: u64,
    /// Cleared ([`SoldOutFlags::clear`]): the flag answers nothing, and nothing is stored in it.
    /// A caller holding it from before the clear may put it back in the cache (a set or a copy
    /// stored re-inserts its flag); so marked, it cannot bring the flag back.
    cleared: bool,
}

impl Flag {
    /// The flag's weight in the cache: itself and the buyers it holds.
    fn weight(&self) -> u32 {
        match &self.buyers {
            Buyers::Absent => 1,
            Buyers::Loaded(copy) => u32::try_from(copy.buyers.len()).unwrap_or(u32::MAX).saturating_add(1),
        }
    }
}

/// One sale's flag, changed in place (a cache hands out clones of its values).
type FlagCell = Arc<RwLock<Flag>>;

/// The sales this instance knows to be sold out, each until its flag lapses.
pub struct SoldOutFlags {
    flags: moka::sync::Cache<Box<str>, FlagCell>,
    ttl: Duration,
    /// When each sale's flag was last cleared, kept for a time to live: an answer to a purchase
    /// asked before then may be older than the clear.
    cleared: moka::sync::Cache<Box<str>, Instant>,
    /// When every flag was last cleared.
    all_cleared: RwLock<Option<Instant>>,
    /// The last flag's epoch (unique across sales and clears).
    epochs: AtomicU64,
}

impl std::fmt::Debug for SoldOutFlags {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoldOutFlags").field("flags", &self.flags.entry_count()).field("ttl", &self.ttl).finish()
    }
}

impl Default for SoldOutFlags {
    fn default() -> Self {
        Self::with_ttl(FLAG_TTL)
    }
}

impl SoldOutFlags {
    /// Flags that lapse after `ttl` unless Redis confirms them again.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self::bounded(ttl, MAX_HELD_BUYERS, FLAG_IDLE)
    }

    /// Flags holding at most `max_buyers` buyers in all, each dropped after `idle` unasked.
    pub fn bounded(ttl: Duration, max_buyers: u64, idle: Duration) -> Self {
        let flags = moka::sync::Cache::builder()
            .max_capacity(max_buyers)
            .weigher(|_, cell: &FlagCell| read(cell).weight())
            .time_to_idle(idle)
            .build();
        let cleared = moka::sync::Cache::builder().max_capacity(10_000).time_to_live(ttl).build();
        Self { flags, ttl, cleared, all_cleared: RwLock::new(None), epochs: AtomicU64::new(0) }
    }

    /// `None` unless the sale's flag is set and has not lapsed.
    pub fn check(&self, sale: &SaleId, user: &UserId) -> Option<Flagged> {
        let cell = self.flags.get(sale.as_str())?;
        let flag = read(&cell);
        if flag.cleared || Instant::now() >= flag.until {
            return None;
        }
        Some(match &flag.buyers {
            Buyers::Loaded(copy) => match copy.buyers.get(user.as_str()) {
                Some(receipt) => Flagged::AlreadyPurchased(*receipt),
                None => Flagged::SoldOut,
            },
            Buyers::Absent => Flagged::AskRedis,
        })
    }

    /// Redis said the sale is sold out: sets or renews its flag. Returns the flag's epoch when
    /// the caller should copy the buyers into it ([`load_buyers`]), unless a copy is already being
    /// made for it: none are held, none were bought yet (a sale seeded with stock 0 may be
    /// re-seeded, so its empty set is not final), or some of the copied orders were still queued.
    /// A flag that had lapsed starts afresh, without its copy: the sale may have sold again since
    /// (a top-up whose event this instance missed).
    pub fn set(&self, sale: &SaleId) -> Option<u64> {
        let now = Instant::now();
        let fresh = || {
            Arc::new(RwLock::new(Flag { until: now, buyers: Buyers::Absent, loading: false, epoch: 0, cleared: false }))
        };
        let mut cell = self.flags.get_with(sale.as_str().into(), fresh);
        if read(&cell).cleared {
            // Put back by a caller that held it across a clear: this one replaces it.
            cell = fresh();
            self.flags.insert(sale.as_str().into(), cell.clone());
        }
        let mut flag = write(&cell);
        if flag.cleared {
            return None; // cleared this moment: the answer may predate it
        }
        let lapsed = now >= flag.until; // or new
        if lapsed {
            let epoch = self.epochs.fetch_add(1, Ordering::Relaxed) + 1;
            *flag = Flag { until: now, buyers: Buyers::Absent, loading: false, epoch, cleared: false };
        }
        flag.until = now + self.ttl;
        let load = !flag.loading
            && match &flag.buyers {
                Buyers::Loaded(copy) => copy.buyers.is_empty() || !copy.settled,
                Buyers::Absent => true,
            };
        flag.loading |= load;
        let epoch = load.then_some(flag.epoch);
        drop(flag);
        if lapsed {
            self.flags.insert(sale.as_str().into(), cell); // weighed again, without the old copy
        }
        epoch
    }

    fn store_buyers(&self, sale: &SaleId, epoch: u64, buyers: Buyers) {
        let Some(cell) = self.flags.get(sale.as_str()) else { return };
        {
            let mut flag = write(&cell);
            if flag.epoch != epoch || flag.cleared {
                return; // made for a flag since cleared or lapsed: it may miss later buyers
            }
            flag.loading = false;
            // A failed copy leaves the previous one answering.
            if matches!(buyers, Buyers::Loaded(_)) || matches!(flag.buyers, Buyers::Absent) {
                flag.buyers = buyers;
            }
        }
        // Inserted again, so the cache weighs the flag with its new copy.
        self.flags.insert(sale.as_str().into(), cell);
    }

    /// The sale was re-seeded (or retired).
    pub fn clear(&self, sale: &str) {
        self.cleared.insert(sale.into(), Instant::now());
        self.drop_flag(sale);
    }

    /// Marks the sale's flag cleared (its copy let go) and takes it out of the cache.
    fn drop_flag(&self, sale: &str) {
        if let Some(cell) = self.flags.get(sale) {
            mark_cleared(&cell);
        }
        self.flags.invalidate(sale);
    }

    /// Events may have been missed: forget every flag.
    pub fn clear_all(&self) {
        *self.all_cleared.write().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        for (_, cell) in self.flags.iter() {
            mark_cleared(&cell);
        }
        self.flags.invalidate_all();
    }

    /// [`Self::set`] for Redis's answer to a purchase asked at `asked`, unless the flag was
    /// cleared since (the answer may predate a top-up or a re-seed): then `None`, nothing set.
    pub fn set_since(&self, sale: &SaleId, asked: Instant) -> Option<u64> {
        if self.cleared_since(sale, asked) {
            return None;
        }
        let epoch = self.set(sale);
        // A clear that ran between the check and the set, after its mark found no flag: the flag
        // just set stands on an answer older than the clear. (A clear records its time before it
        // marks, so one this look misses marks what the set wrote.)
        if self.cleared_since(sale, asked) {
            self.drop_flag(sale.as_str());
            return None;
        }
        epoch
    }

    /// Whether the sale's flag (or every flag) was cleared at or after `asked`.
    fn cleared_since(&self, sale: &SaleId, asked: Instant) -> bool {
        let all = *self.all_cleared.read().unwrap_or_else(|e| e.into_inner());
        self.cleared.get(sale.as_str()).into_iter().chain(all).any(|at| at >= asked)
    }

    /// Buyers held in all the flags (the cache's weight; eviction is applied lazily, so this
    /// may briefly exceed [`MAX_HELD_BUYERS`]).
    pub fn held_buyers(&self) -> u64 {
        self.flags.run_pending_tasks();
        self.flags.weighted_size()
    }
}

fn read(cell: &FlagCell) -> std::sync::RwLockReadGuard<'_, Flag> {
    cell.read().unwrap_or_else(|e| e.into_inner())
}

fn write(cell: &FlagCell) -> std::sync::RwLockWriteGuard<'_, Flag> {
    cell.write().unwrap_or_else(|e| e.into_inner())
}

/// A flag cleared: it answers nothing any more, and lets its copy go.
fn mark_cleared(cell: &FlagCell) {
    let mut flag = write(cell);
    flag.cleared = true;
    flag.buyers = Buyers::Absent;
}

/// Copies a sold-out sale's buyers into its flag of `epoch` (as [`SoldOutFlags::set`] answered),
/// so a buyer who asks again hears 409 `already_purchased` with its order without a Redis call.
/// Sales with more than `MAX_LOCAL_BUYERS` buyers are not copied; their buyers are asked about in
/// Redis.
pub async fn load_buyers(flags: Arc<SoldOutFlags>, sales: Sales, sale: SaleId, epoch: u64) {
    let buyers = match sales.buyer_copy(&sale, MAX_LOCAL_BUYERS).await {
        Ok(Some(copy)) => Buyers::Loaded(Arc::new(copy)),
        Ok(None) => Buyers::Absent,
        Err(err) => {
            tracing::warn!(sale_id = %sale, error = %err, "sold-out sale's buyers not copied; asking Redis instead");
            Buyers::Absent
        }
    };
    flags.store_buyers(&sale, epoch, buyers);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::purchase::OrderStatus;

    fn sale(id: &str) -> SaleId {
        SaleId::parse(id).unwrap()
    }

    fn user(id: &str) -> UserId {
        UserId::parse(id).unwrap()
    }

    fn receipt(status: OrderStatus) -> Receipt {
        Receipt { order_id: uuid::Uuid::now_v7(), created_at_ms: 1, status, pay_by_ms: None, quantity: 1 }
    }

    fn loaded(ids: &[&str], status: OrderStatus) -> Buyers {
        let buyers = ids.iter().map(|u| (Box::from(*u), Some(receipt(status)))).collect();
        Buyers::Loaded(Arc::new(BuyerCopy { buyers, settled: status == OrderStatus::Confirmed }))
    }

    #[test]
    fn a_flag_answers_from_the_buyers_it_holds_until_cleared() {
        let flags = SoldOutFlags::default();
        assert_eq!(flags.check(&sale("a"), &user("u")), None);
        let epoch = flags.set(&sale("a")).expect("the first flag asks for the buyers");
        assert_eq!(flags.check(&sale("a"), &user("u")), Some(Flagged::AskRedis), "while they load");
        assert!(flags.set(&sale("a")).is_none(), "one load at a time");
        let confirmed = loaded(&["u"], OrderStatus::Confirmed);
        let Buyers::Loaded(copy) = &confirmed else { unreachable!() };
        let receipt = copy.buyers["u"];
        flags.store_buyers(&sale("a"), epoch, confirmed);
        assert_eq!(flags.check(&sale("a"), &user("u")), Some(Flagged::AlreadyPurchased(receipt)));
        assert_eq!(flags.check(&sale("a"), &user("v")), Some(Flagged::SoldOut));
        assert!(flags.set(&sale("a")).is_none(), "a sale with buyers keeps them");
        assert_eq!(flags.check(&sale("b"), &user("u")), None);
        flags.clear("a");
        assert_eq!(flags.check(&sale("a"), &user("u")), None);
        flags.set(&sale("b"));
        flags.clear_all();
        assert_eq!(flags.check(&sale("b"), &user("u")), None);
    }

    #[test]
    fn an_empty_or_missing_copy_is_loaded_again_on_the_next_sold_out() {
        let flags = SoldOutFlags::default();
        let epoch = flags.set(&sale("a")).unwrap();
        flags.store_buyers(&sale("a"), epoch, loaded(&[], OrderStatus::Confirmed));
        assert!(flags.set(&sale("a")).is_some(), "no buyers yet: a re-seed could still add some");
        flags.store_buyers(&sale("a"), epoch, Buyers::Absent);
        assert!(flags.set(&sale("a")).is_some());
    }

    #[test]
    fn a_copy_with_queued_orders_is_copied_again_and_answers_meanwhile() {
        let flags = SoldOutFlags::default();
        let epoch = flags.set(&sale("a")).unwrap();
        flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Queued));
        assert!(flags.set(&sale("a")).is_some(), "queued orders: copy again");
        fn queued(f: Option<Flagged>) -> bool {
            matches!(f, Some(Flagged::AlreadyPurchased(Some(r))) if r.status == OrderStatus::Queued)
        }
        assert!(queued(flags.check(&sale("a"), &user("u"))), "the old copy answers while the new one loads");
        flags.store_buyers(&sale("a"), epoch, Buyers::Absent);
        assert!(queued(flags.check(&sale("a"), &user("u"))), "a failed copy keeps the old one");
        assert!(flags.set(&sale("a")).is_some());
        flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
        assert!(flags.set(&sale("a")).is_none(), "all confirmed: the copy is final");
    }

    #[test]
    fn the_flags_hold_a_bounded_number_of_buyers_and_drop_idle_ones() {
        let flags = SoldOutFlags::bounded(Duration::from_secs(60), 1_000, Duration::from_secs(60));
        for i in 0..20 {
            let sale = sale(&format!("s{i}"));
            let epoch = flags.set(&sale).unwrap();
            let ids: Vec<String> = (0..100).map(|u| format!("u{u}")).collect();
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            flags.store_buyers(&sale, epoch, loaded(&ids, OrderStatus::Confirmed));
        }
        let held = flags.held_buyers();
        assert!(held <= 1_000, "20 copies of 100 buyers, bound 1,000: {held} held");
        assert!(held >= 101, "the latest copy stays: {held} held");

        let idle = SoldOutFlags::bounded(Duration::from_secs(60), 1_000, Duration::from_millis(500));
        let epoch = idle.set(&sale("a")).unwrap();
        idle.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
        assert_eq!(idle.held_buyers(), 2);
        std::thread::sleep(Duration::from_millis(1_200));
        assert_eq!(idle.held_buyers(), 0, "an idle flag is dropped with its copy");
        assert_eq!(idle.check(&sale("a"), &user("u")), None);
    }

    #[test]
    fn an_answer_asked_before_a_clear_does_not_set_the_flag_again() {
        let flags = SoldOutFlags::default();
        let asked = Instant::now();
        flags.clear("a");
        assert!(flags.set_since(&sale("a"), asked).is_none(), "sold out before the top-up");
        assert_eq!(flags.check(&sale("a"), &user("u")), None);
        assert!(flags.set_since(&sale("a"), Instant::now()).is_some(), "sold out after it");
        let asked = Instant::now();
        flags.clear_all();
        assert!(flags.set_since(&sale("b"), asked).is_none());
    }

    /// A set or a copy stored that held the flag across a clear puts it back in the cache: it
    /// must not answer (it did, sold out, until it lapsed), and the next set replaces it.
    #[test]
    fn a_flag_put_back_after_its_clear_answers_nothing() {
        let flags = SoldOutFlags::default();
        let epoch = flags.set(&sale("a")).unwrap();
        let held = flags.flags.get("a").unwrap(); // what a racing set or store_buyers holds
        flags.clear("a");
        flags.flags.insert("a".into(), held); // its late re-insert
        assert_eq!(flags.check(&sale("a"), &user("u")), None, "a cleared flag put back");
        flags.store_buyers(&sale("a"), epoch, loaded(&["u"], OrderStatus::Confirmed));
        assert_eq!(flags.check(&sale("a"), &user("v")), None, "nor does a copy revive it (sold out, it said)");
        assert!(flags.set(&sale("a")).is_some(), "a later sold-out sets a new flag");
        assert_eq!(flags.check(&sale("a"), &user("v")), Some(Flagged::AskRedis));

        flags.set(&sale("b"));
        let held = flags.flags.get("b").unwrap();
        flags.clear_all();
        flags.flags.insert("b".into(), held);
        assert_eq!(flags.check(&sale("b"), &user("u")), None, "after a clear of every flag too");
    }

    #[test]
    fn a_flag_lapses_after_its_time_to_live() {
        let flags = SoldOutFlags::with_ttl(Duration::from_millis(300));
        flags.set(&sale("a"));
        assert!(flags.check(&sale("a"), &user("u")).is_some());
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(flags.check(&sale("a"), &user("u")), None);
    }

    #[test]
    fn a_flag_set_again_after_it_lapsed_drops_its_copy_and_keeps_none_made_for_the_old_flag() {
        let flags = SoldOutFlags::with_ttl(Duration::from_millis(100));
        let first = flags.set(&sale("a")).unwrap();
        flags.store_buyers(&sale("a"), first, loaded(&["u"], OrderStatus::Confirmed));
        assert_eq!(flags.held_buyers(), 2);
        while flags.check(&sale("a"), &user("u")).is_some() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let second = flags.set(&sale("a")).expect("a lapsed flag set again is copied afresh");
        assert_eq!(flags.held_buyers(), 1, "without the old copy (the sale may have sold since)");
        flags.store_buyers(&sale("a"), first, loaded(&["u"], OrderStatus::Confirmed));
        assert_eq!(flags.held_buyers(), 1, "a copy made for the lapsed flag is not kept");
        flags.store_buyers(&sale("a"), second, loaded(&["u", "v"], OrderStatus::Confirmed));
        assert_eq!(flags.held_buyers(), 3);
    }
}
