//! The order of a draw's entries: an entrant's public pseudonym, its ticket (a keyed hash of the
//! seed and the pseudonym) and the ranking by ascending ticket.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::allocate::Entry;
use crate::domain::{DropId, UserId};

/// The entrant's public pseudonym in a drop's draw: hex SHA-256 of `"<drop>\n<user>"`.
///
/// The published record names entrants only by this, never by user id; a buyer computes their own
/// (`printf '%s\n%s' sneaker alice | sha256sum`). It is pseudonymity, not anonymity: whoever can
/// guess a user id can hash it and find that buyer's entry and result.
pub fn entrant(drop: &DropId, user: &UserId) -> String {
    let digest = Sha256::new().chain_update(drop.as_str()).chain_update("\n").chain_update(user.as_str()).finalize();
    hex::encode(digest)
}

/// The entrant's ticket: HMAC-SHA256 keyed by the seed's 64 hex digits (the bytes of the hex text,
/// as the commitment hashes them) over the entrant's pseudonym. Lower tickets rank first.
pub fn ticket(seed_hex: &str, entrant: &str) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(seed_hex.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(entrant.as_bytes());
    mac.finalize().into_bytes().into()
}

/// The entries in the draw's order: ascending ticket, equal tickets (never seen in practice) by
/// entrant. The order the entries arrived in plays no part.
pub fn ranking(seed_hex: &str, mut entries: Vec<Entry>) -> Vec<Entry> {
    entries.sort_by_cached_key(|entry| (ticket(seed_hex, &entry.entrant), entry.entrant.clone()));
    entries
}
