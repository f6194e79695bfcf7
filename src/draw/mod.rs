//! The draw: a drop's raffle that anyone can verify (issue 53; docs/draw.md has the method and a
//! worked example). A drop seeded in draw mode takes entries for a window ([`entries`]: a buyer's
//! one entry in one Redis call, `lua/draw_enter.lua`, copied to Postgres by the order worker
//! exactly once; the `draws` row). The rest is pure, no Redis, Postgres or HTTP: who an entrant is
//! in public ([`rank::entrant`]), the order of the entries ([`rank`]), who gets which size
//! ([`allocate`]), who is offered a unit that comes back ([`waitlist`]), the published record
//! ([`record`]) and its check ([`verify`]); the draw's run calls them, and so does
//! `seckill draw verify`. The waitlist's Redis side, the offers of units that come back, is
//! [`offers`]; the live page's counts of a draw are [`stats`].
//!
//! ```text
//!  before entries open: seed = 32 random bytes (64 hex digits, admission::draw_seed), kept secret;
//!                       commitment = SHA-256(seed hex) published (admission::commitment)
//!        │
//!  entries open:        each entry {entrant = SHA-256("<drop>\n<user>"), sizes best first, quantity}
//!        │              (validated at entry time: allocate::validate)
//!  entries close ──► ranking: ascending ticket = HMAC-SHA256(key = seed hex, entrant)   (rank)
//!        │
//!        ▼         allocation: walk the ranking; first preferred size with `quantity` units left,
//!        │         else the next waitlist place, else lost                             (allocate)
//!  reveal:          the record: seed, commitment, stock, entries, results (NDJSON)      (record)
//!        │
//!        ▼
//!  anyone:          SHA-256(seed) = commitment? ranking and allocation recomputed = results?
//!                   `seckill draw verify draw.ndjson`                                  (verify)
//!  later:           a unit that comes back goes down the waitlist                       (waitlist)
//! ```
//!
//! The seed is fixed (committed) before anyone enters, and unknown to entrants until the entries
//! are closed: nobody can pick a pseudonym with a good ticket, and the operator cannot change the
//! seed once entries are seen without the commitment giving it away.

pub mod allocate;
pub mod entries;
pub mod offers;
pub mod rank;
pub mod record;
pub mod run;
pub mod stats;
pub mod verify;
pub mod waitlist;

#[cfg(test)]
mod tests;

pub use allocate::{Allocation, Entry, Outcome, Terms, allocate};
pub use rank::{entrant, ranking, ticket};
pub use verify::verify;
