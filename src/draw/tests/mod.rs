//! The draw's tests: the model against a sequential reference (`model`), fairness (`fairness`),
//! the record and its verification (`record`), the worked example of docs/draw.md (`doc`).

mod doc;
mod fairness;
mod model;
mod record;

use sha2::{Digest, Sha256};

use super::allocate::Entry;
use super::rank::entrant;
use crate::domain::{DropId, UserId};

/// A small xorshift64* generator: the tests' inputs, the same on every run.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `low..=high`.
    fn range(&mut self, low: u32, high: u32) -> u32 {
        low + u32::try_from(self.next() % u64::from(high - low + 1)).unwrap()
    }

    /// Fisher-Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.range(0, u32::try_from(i).unwrap()) as usize);
        }
    }
}

/// The `n`th fixed seed: 64 hex digits, as a drawn seed is held.
fn seed(n: u64) -> String {
    hex::encode(Sha256::digest(format!("draw test seed {n}")))
}

/// The pseudonym of the user `name` in the drop `sneaker`.
fn pseudonym(name: &str) -> String {
    entrant(&DropId::parse("sneaker").unwrap(), &UserId::parse(name).unwrap())
}

/// An entry of the user `name`.
fn entry(name: &str, sizes: &[&str], quantity: u32) -> Entry {
    Entry { entrant: pseudonym(name), sizes: sizes.iter().map(|s| (*s).to_owned()).collect(), quantity }
}
