//! Anyone's check of a published draw: the seed is the one committed to, and the ranking and the
//! allocation recomputed from it and the entries are the announced results.

use std::collections::HashMap;
use std::fmt;

use super::allocate::{Invalid, Outcome, allocate, validate};
use super::rank::ranking;
use super::record::Record;
use crate::admission::commitment;

/// What a verified draw gave: entries and outcomes counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Summary {
    /// Entries drawn.
    pub entries: usize,
    /// Entrants who won.
    pub won: usize,
    /// Entrants given a waitlist place.
    pub waitlisted: usize,
    /// Entrants who got nothing.
    pub lost: usize,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self { entries, won, waitlisted, lost } = *self;
        let n = thousands;
        write!(f, "{} entries, {} won, {} waitlisted, {} lost", n(entries), n(won), n(waitlisted), n(lost))
    }
}

/// `n` with a comma every three digits (1,000).
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// How a record fails to verify: the first difference found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the seed's SHA-256 is {computed}, not the commitment {committed}")]
    Commitment { committed: String, computed: String },
    #[error("entrant {entrant}: the entry is invalid ({why}); it should have been refused")]
    InvalidEntry { entrant: String, why: Invalid },
    #[error("entrant {entrant}: no result announced; the draw gives {expected}")]
    Missing { entrant: String, expected: Outcome },
    #[error("entrant {entrant}: announced {announced}; the draw gives {expected}")]
    Differs { entrant: String, announced: Outcome, expected: Outcome },
    #[error("entrant {entrant}: more than one result announced")]
    Twice { entrant: String },
    #[error("entrant {entrant}: announced {announced}, but there is no such entry")]
    NoEntry { entrant: String, announced: Outcome },
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Won { size, quantity } => write!(f, "won {quantity} of size {size}"),
            Self::Waitlisted { position } => write!(f, "waitlisted at {position}"),
            Self::Lost => f.write_str("lost"),
        }
    }
}

/// Checks `record`: the seed hashes to the commitment, every entry is valid, and each entrant's
/// announced result is the one the ranking and allocation recomputed from the seed give, one
/// result per entrant and none for an entrant who did not enter. The first difference (in rank
/// order, then in the record's order of results) is the error.
pub fn verify(record: &Record) -> Result<Summary, Mismatch> {
    let computed = commitment(&record.seed);
    if computed != record.commitment {
        return Err(Mismatch::Commitment { committed: record.commitment.clone(), computed });
    }
    for entry in &record.entries {
        validate(entry, &record.terms).map_err(|why| Mismatch::InvalidEntry { entrant: entry.entrant.clone(), why })?;
    }
    let mut announced: HashMap<&str, &Outcome> = HashMap::with_capacity(record.results.len());
    for (entrant, outcome) in &record.results {
        if announced.insert(entrant, outcome).is_some() {
            return Err(Mismatch::Twice { entrant: entrant.clone() });
        }
    }
    let drawn = allocate(&record.terms, &ranking(&record.seed, record.entries.clone()));
    let mut summary = Summary { entries: drawn.results.len(), ..Summary::default() };
    for (entrant, expected) in drawn.results {
        match announced.remove(entrant.as_str()) {
            None => return Err(Mismatch::Missing { entrant, expected }),
            Some(announced) if *announced != expected => {
                return Err(Mismatch::Differs { entrant, announced: announced.clone(), expected });
            }
            Some(_) => {}
        }
        *match expected {
            Outcome::Won { .. } => &mut summary.won,
            Outcome::Waitlisted { .. } => &mut summary.waitlisted,
            Outcome::Lost => &mut summary.lost,
        } += 1;
    }
    match record.results.iter().find(|(entrant, _)| announced.contains_key(entrant.as_str())) {
        Some((entrant, outcome)) => Err(Mismatch::NoEntry { entrant: entrant.clone(), announced: outcome.clone() }),
        None => Ok(summary),
    }
}
