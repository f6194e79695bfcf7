//! Who gets which size: the walk down the ranking, and the check an entry passes at entry time.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What a draw gives out: each size's units, the most units an entrant may ask, the waitlist's length.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terms {
    /// Size name -> units in the draw.
    pub stock: BTreeMap<String, u32>,
    /// The most units one entrant may ask for (an entry's `quantity`, 1 to this).
    pub limit: u32,
    /// Places on the waitlist (0: no waitlist).
    pub waitlist_places: u32,
}

/// One entrant's entry: its pseudonym ([`super::rank::entrant`]), sizes best first, units wanted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The entrant's public pseudonym (64 hex digits).
    pub entrant: String,
    /// The sizes the entrant would take, best first: distinct, each a size of the drop.
    pub sizes: Vec<String>,
    /// Units wanted, all of one size: 1 to the draw's limit.
    pub quantity: u32,
}

/// What one entrant got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `quantity` units of `size`.
    Won { size: String, quantity: u32 },
    /// The waitlist's place `position` (1 first).
    Waitlisted { position: u32 },
    /// Nothing.
    Lost,
}

/// The draw's result: every entrant's outcome in rank order, and the units no one won.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `(entrant, outcome)`, one per ranked entry, in rank order.
    pub results: Vec<(String, Outcome)>,
    /// Size -> units left after the draw.
    pub left: BTreeMap<String, u32>,
}

/// Why an entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("quantity must be 1 to {limit}, not {quantity}")]
    Quantity { quantity: u32, limit: u32 },
    #[error("an entry names at least one size")]
    NoSizes,
    #[error("the drop has no size {0:?}")]
    UnknownSize(String),
    #[error("size {0:?} is named twice")]
    RepeatedSize(String),
}

/// Checks an entry against the draw's terms, as the entries side does before accepting it.
pub fn validate(entry: &Entry, terms: &Terms) -> Result<(), Invalid> {
    if entry.quantity == 0 || entry.quantity > terms.limit {
        return Err(Invalid::Quantity { quantity: entry.quantity, limit: terms.limit });
    }
    if entry.sizes.is_empty() {
        return Err(Invalid::NoSizes);
    }
    let mut seen = BTreeSet::new();
    for size in &entry.sizes {
        if !terms.stock.contains_key(size) {
            return Err(Invalid::UnknownSize(size.clone()));
        }
        if !seen.insert(size.as_str()) {
            return Err(Invalid::RepeatedSize(size.clone()));
        }
    }
    Ok(())
}

/// Walks `ranked` (the entries in rank order, [`super::rank::ranking`]): each entrant gets
/// `quantity` units of the first size in their order with at least that many left; failing that,
/// the next waitlist place while there is one; else nothing.
///
/// Never panics. An entry [`validate`] refuses, and a second entry of an entrant already walked,
/// is [`Outcome::Lost`] and takes no unit and no place (the entries side refuses both at entry time,
/// and `verify` reports an invalid entry in a record).
pub fn allocate(terms: &Terms, ranked: &[Entry]) -> Allocation {
    let mut left = terms.stock.clone();
    let mut seen = BTreeSet::new();
    let mut waitlisted = 0;
    let mut results = Vec::with_capacity(ranked.len());
    for entry in ranked {
        let valid = seen.insert(entry.entrant.as_str()) && validate(entry, terms).is_ok();
        let size = entry.sizes.iter().find(|size| left.get(*size).is_some_and(|units| *units >= entry.quantity));
        let outcome = match size {
            _ if !valid => Outcome::Lost,
            Some(size) => {
                *left.get_mut(size).expect("found in left") -= entry.quantity;
                Outcome::Won { size: size.clone(), quantity: entry.quantity }
            }
            None if waitlisted < terms.waitlist_places => {
                waitlisted += 1;
                Outcome::Waitlisted { position: waitlisted }
            }
            None => Outcome::Lost,
        };
        results.push((entry.entrant.clone(), outcome));
    }
    Allocation { results, left }
}
