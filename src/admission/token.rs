//! The waiting room's two signed strings, HMAC-SHA256 under the admission key, each bound to
//! its line (a queued sale's, or a drop's) and buyer (the MAC covers them; the request names them,
//! so they are not repeated):
//!
//! - the **ticket** `<place>.<mac>` says where a buyer stands (`0`: in the pre-queue, no place
//!   yet). A poll that carries it is answered from the instance's snapshot, without Redis. Its
//!   MAC also covers the line's shuffle seed, new whenever a line starts again from nothing (a
//!   drop seeded again under its name after its retirement), so it holds in its own line only.
//! - the **admission token** `<place>.<expires_ms>.<mac>` lets its buyer buy in its sale until
//!   `expires_ms` (Unix ms, the Redis server's clock): `POST /buy` checks its MAC in-process, and
//!   `lua/buy.lua` its expiry against Redis `TIME` (an instance's clock may differ from the one
//!   the line admits by). A drop's is `d<place>.<expires_ms>.<mac>` and lets its buyer buy any
//!   size `<drop>.<size>` of the drop.
//!
//! A label in the MAC keeps one kind from passing for another: a ticket for a token, a sale's
//! string for a drop's (a sale and a drop may have the same id) and back. Compared in constant
//! time (`Mac::verify_slice`); one HMAC per check, a forged token's included.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::line_id::Subject;
use crate::domain::{SaleId, UserId};
use crate::purchase::Admitted;

/// The request header that carries the admission token to `POST /buy`.
pub const ADMISSION_HEADER: &str = "Seckill-Admission";

/// Longest ticket or token accepted (a place and a time are at most 20 digits each).
const MAX_LEN: usize = 128;

/// The admission key and what it signs.
#[derive(Clone)]
pub struct Signer {
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer under `key` (any length; the settings ask for 32 bytes or more).
    pub fn new(key: &[u8]) -> Self {
        Self { key: key.to_vec() }
    }

    /// The ticket of `buyer` in `line`, at `place` (0: in the pre-queue). `seed` is the line's
    /// shuffle seed, which a line gets anew when it starts again from nothing (a drop seeded again
    /// under its name after its retirement): a ticket holds only in the line that gave it.
    pub fn ticket(&self, line: Subject<'_>, seed: &str, buyer: &UserId, place: u64) -> String {
        let mac = self.ticket_mac(line, seed, buyer, place).finalize().into_bytes();
        format!("{place}.{}", hex::encode(mac))
    }

    /// The place a ticket carries, if it is `buyer`'s in `line` as seeded with `seed`.
    pub fn place_of(&self, ticket: &str, line: Subject<'_>, seed: &str, buyer: &UserId) -> Option<u64> {
        if ticket.len() > MAX_LEN {
            return None;
        }
        let (place_text, mac) = ticket.rsplit_once('.')?;
        let place: u64 = place_text.parse().ok()?;
        verify(self.ticket_mac(line, seed, buyer, place), mac).then_some(place)
    }

    fn ticket_mac(&self, line: Subject<'_>, seed: &str, buyer: &UserId, place: u64) -> Hmac<Sha256> {
        let mut mac = self.mac(label(line, Kind::Ticket), line.id, buyer, &[place]);
        mac.update(b"\0"); // the seed is hex: no NUL
        mac.update(seed.as_bytes());
        mac
    }

    /// The admission token of `buyer` in `line`, at `place`, valid until `expires_ms`.
    pub fn admission<'a>(&self, line: impl Into<Subject<'a>>, buyer: &UserId, place: u64, expires_ms: u64) -> String {
        let line = line.into();
        let mac = self.mac(label(line, Kind::Admission), line.id, buyer, &[place, expires_ms]).finalize().into_bytes();
        let mark = if line.drop { "d" } else { "" };
        format!("{mark}{place}.{expires_ms}.{}", hex::encode(mac))
    }

    /// The place and expiry an admission token carries for a purchase in `sale`, if it is
    /// `buyer`'s: a sale's token for the sale itself, a drop's (`d…`) for any sale of the drop
    /// (`sale`'s group). Which one the token is, its mark says: one HMAC either way. The expiry is
    /// not checked here: `lua/buy.lua` compares it with Redis `TIME`, the clock it was set by.
    pub fn admitted(&self, token: &str, sale: &SaleId, buyer: &UserId) -> Result<Admitted, Refused> {
        let (line, token) = match token.strip_prefix('d') {
            Some(rest) => (Subject { drop: true, id: sale.group().ok_or(Refused::Forged)? }, rest),
            None => (Subject { drop: false, id: sale.as_str() }, token),
        };
        let (place, expires_ms) = self.admitted_in(token, line, buyer)?;
        Ok(Admitted { place, expires_ms, by_drop: line.drop })
    }

    /// The place and expiry a token (its mark taken off) carries in `line`.
    fn admitted_in(&self, token: &str, line: Subject<'_>, buyer: &UserId) -> Result<(u64, u64), Refused> {
        if token.len() > MAX_LEN {
            return Err(Refused::Malformed);
        }
        let mut parts = token.split('.');
        let (Some(place), Some(expires), Some(mac), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refused::Malformed);
        };
        let (Ok(place), Ok(expires_ms)) = (place.parse::<u64>(), expires.parse::<u64>()) else {
            return Err(Refused::Malformed);
        };
        if !verify(self.mac(label(line, Kind::Admission), line.id, buyer, &[place, expires_ms]), mac) {
            return Err(Refused::Forged);
        }
        Ok((place, expires_ms))
    }

    fn mac(&self, label: &[u8], line: &str, buyer: &UserId, numbers: &[u64]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        // Neither id holds a NUL (both refuse control characters), so the fields cannot run together.
        for part in [label, line.as_bytes(), buyer.as_str().as_bytes()] {
            mac.update(part);
            mac.update(b"\0");
        }
        for number in numbers {
            mac.update(&number.to_be_bytes());
        }
        mac
    }
}

/// Whether `mac_hex` is the hex of `mac`'s result (compared in constant time).
fn verify(mac: Hmac<Sha256>, mac_hex: &str) -> bool {
    hex::decode(mac_hex).is_ok_and(|given| mac.verify_slice(&given).is_ok())
}

/// Which of the two signed strings.
#[derive(Clone, Copy)]
enum Kind {
    Ticket,
    Admission,
}

/// The MAC's label of a kind of string in a kind of line (a sale's labels are the ones sales had
/// before drops: their strings stay valid).
fn label(line: Subject<'_>, kind: Kind) -> &'static [u8] {
    match (line.drop, kind) {
        (false, Kind::Ticket) => b"ticket",
        (false, Kind::Admission) => b"admission",
        (true, Kind::Ticket) => b"drop-ticket",
        (true, Kind::Admission) => b"drop-admission",
    }
}

/// Why an admission token is refused (403 `not_admitted` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no Seckill-Admission header: this sale has a waiting room (POST /sales/{{sale_id}}/queue)")]
    Missing,
    #[error("the Seckill-Admission token is not [d]<place>.<expires_ms>.<hex>")]
    Malformed,
    #[error("the Seckill-Admission token is not this buyer's for this sale or its drop")]
    Forged,
    /// Its admission ended, by Redis time (`lua/buy.lua` says so).
    #[error("the Seckill-Admission token has expired")]
    Expired,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(sale: &str, buyer: &str) -> (SaleId, UserId) {
        (SaleId::parse(sale).unwrap(), UserId::parse(buyer).unwrap())
    }

    fn sale(id: &str) -> Subject<'_> {
        Subject { drop: false, id }
    }

    fn drop(id: &str) -> Subject<'_> {
        Subject { drop: true, id }
    }

    fn place(place: u64) -> Result<Admitted, Refused> {
        Ok(Admitted { place, expires_ms: 2_000, by_drop: false })
    }

    #[test]
    fn a_token_admits_its_buyer_in_its_sale_and_carries_its_expiry() {
        let signer = Signer::new(b"k");
        let (s1, alice) = ids("s1", "alice");
        let token = signer.admission(sale("s1"), &alice, 7, 2_000);
        assert_eq!(signer.admitted(&token, &s1, &alice), place(7), "the expiry goes to lua/buy.lua");
        let (other_sale, bob) = ids("s2", "bob");
        assert_eq!(signer.admitted(&token, &s1, &bob), Err(Refused::Forged));
        assert_eq!(signer.admitted(&token, &other_sale, &alice), Err(Refused::Forged));
        assert_eq!(Signer::new(b"other").admitted(&token, &s1, &alice), Err(Refused::Forged));
        let later = token.replacen(".2000.", ".9000.", 1);
        assert_eq!(signer.admitted(&later, &s1, &alice), Err(Refused::Forged), "the expiry is signed");
        assert_eq!(signer.admitted("7.2000.zz", &s1, &alice), Err(Refused::Forged), "no valid MAC");
        for bad in ["", "7", "7.2000", "x.2000.00", "7.2000.00.00", "dd7.2000.00", &"7".repeat(200)] {
            let expected = if bad.starts_with('d') { Refused::Forged } else { Refused::Malformed };
            assert_eq!(signer.admitted(bad, &s1, &alice), Err(expected), "{bad:?}");
        }
    }

    #[test]
    fn a_drop_token_admits_its_buyer_to_every_size_and_never_passes_for_a_sale_token() {
        let signer = Signer::new(b"k");
        let alice = UserId::parse("alice").unwrap();
        let (size40, size41) = (SaleId::parse("shoe.40").unwrap(), SaleId::parse("shoe.41").unwrap());
        let token = signer.admission(drop("shoe"), &alice, 3, 2_000);
        assert!(token.starts_with("d3.2000."), "{token}");
        for size in [&size40, &size41] {
            assert_eq!(
                signer.admitted(&token, size, &alice),
                Ok(Admitted { place: 3, expires_ms: 2_000, by_drop: true })
            );
        }
        let other_drop = SaleId::parse("boot.40").unwrap();
        assert_eq!(signer.admitted(&token, &other_drop, &alice), Err(Refused::Forged));
        assert_eq!(signer.admitted(&token, &size40, &UserId::parse("bob").unwrap()), Err(Refused::Forged));
        let alone = SaleId::parse("shoe").unwrap();
        assert_eq!(signer.admitted(&token, &alone, &alice), Err(Refused::Forged), "a sale has no drop");
        // The same numbers and id under a sale's label: the mark or the label refuses each way.
        let unmarked = token.strip_prefix('d').unwrap();
        assert_eq!(signer.admitted(unmarked, &alone, &alice), Err(Refused::Forged));
        let sale_token = signer.admission(sale("shoe"), &alice, 3, 2_000);
        assert_eq!(signer.admitted(&format!("d{sale_token}"), &size40, &alice), Err(Refused::Forged));
        let size_token = signer.admission(sale("shoe.40"), &alice, 3, 2_000);
        assert_eq!(signer.admitted(&size_token, &size40, &alice), place(3), "a size queued alone: Lua decides");
    }

    #[test]
    fn a_ticket_carries_its_place_and_is_no_admission() {
        let signer = Signer::new(b"k");
        let (s1, alice) = ids("s1", "alice");
        let ticket = signer.ticket(sale("s1"), "5eed", &alice, 42);
        assert_eq!(signer.place_of(&ticket, sale("s1"), "5eed", &alice), Some(42));
        assert_eq!(signer.place_of(&ticket, sale("s1"), "5eed", &ids("s1", "bob").1), None);
        assert_eq!(signer.place_of(&ticket, drop("s1"), "5eed", &alice), None, "a sale's ticket is no drop's");
        assert_eq!(signer.place_of(&ticket.replacen("42.", "1.", 1), sale("s1"), "5eed", &alice), None);
        assert_eq!(signer.place_of(&ticket, sale("s1"), "0ther", &alice), None, "another line of the same name");
        // Same numbers, other label: a ticket never passes for a token, nor a token for a ticket.
        let (place_text, mac) = ticket.split_once('.').unwrap();
        assert_ne!(signer.admitted(&format!("{place_text}.0.{mac}"), &s1, &alice), place(42));
        let token = signer.admission(sale("s1"), &alice, 42, 0);
        assert_eq!(signer.place_of(&token, sale("s1"), "5eed", &alice), None);
    }
}
