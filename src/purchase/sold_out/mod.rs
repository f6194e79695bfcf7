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
mod tests;
