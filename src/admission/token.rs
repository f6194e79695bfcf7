//! The waiting room's two signed strings, HMAC-SHA256 under the admission key, each bound to
//! its sale and buyer (the MAC covers them; the request names them, so they are not repeated):
//!
//! - the **ticket** `<place>.<mac>` says where a buyer stands (`0`: in the pre-queue, no place
//!   yet). A poll that carries it is answered from the instance's snapshot, without Redis.
//! - the **admission token** `<place>.<expires_ms>.<mac>` lets its buyer buy in its sale until
//!   `expires_ms` (Unix ms, the Redis server's clock): `POST /buy` checks it in-process.
//!
//! A label in the MAC keeps one kind from passing for the other. Compared in constant time
//! (`Mac::verify_slice`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::{SaleId, UserId};

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

    /// The ticket of `buyer` in `sale`, at `place` (0: in the pre-queue).
    pub fn ticket(&self, sale: &SaleId, buyer: &UserId, place: u64) -> String {
        format!("{place}.{}", hex::encode(self.mac(b"ticket", sale, buyer, &[place]).finalize().into_bytes()))
    }

    /// The place a ticket carries, if it is `buyer`'s in `sale`.
    pub fn place_of(&self, ticket: &str, sale: &SaleId, buyer: &UserId) -> Option<u64> {
        if ticket.len() > MAX_LEN {
            return None;
        }
        let (place_text, mac) = ticket.rsplit_once('.')?;
        let place: u64 = place_text.parse().ok()?;
        self.verify(b"ticket", sale, buyer, &[place], mac).then_some(place)
    }

    /// The admission token of `buyer` in `sale`, at `place`, valid until `expires_ms`.
    pub fn admission(&self, sale: &SaleId, buyer: &UserId, place: u64, expires_ms: u64) -> String {
        let mac = self.mac(b"admission", sale, buyer, &[place, expires_ms]).finalize().into_bytes();
        format!("{place}.{expires_ms}.{}", hex::encode(mac))
    }

    /// The place an admission token carries, if it is `buyer`'s in `sale` and valid at `now_ms`.
    pub fn admitted(&self, token: &str, sale: &SaleId, buyer: &UserId, now_ms: u64) -> Result<u64, Refused> {
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
        if !self.verify(b"admission", sale, buyer, &[place, expires_ms], mac) {
            return Err(Refused::Forged);
        }
        if now_ms >= expires_ms {
            return Err(Refused::Expired);
        }
        Ok(place)
    }

    fn verify(&self, label: &[u8], sale: &SaleId, buyer: &UserId, numbers: &[u64], mac_hex: &str) -> bool {
        match hex::decode(mac_hex) {
            Ok(given) => self.mac(label, sale, buyer, numbers).verify_slice(&given).is_ok(),
            Err(_) => false,
        }
    }

    fn mac(&self, label: &[u8], sale: &SaleId, buyer: &UserId, numbers: &[u64]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes a key of any length");
        // Neither id holds a NUL (both refuse control characters), so the fields cannot run together.
        for part in [label, sale.as_str().as_bytes(), buyer.as_str().as_bytes()] {
            mac.update(part);
            mac.update(b"\0");
        }
        for number in numbers {
            mac.update(&number.to_be_bytes());
        }
        mac
    }
}

/// Why an admission token is refused (403 `not_admitted` names it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("no Seckill-Admission header: this sale has a waiting room (POST /sales/{{sale_id}}/queue)")]
    Missing,
    #[error("the Seckill-Admission token is not <place>.<expires_ms>.<hex>")]
    Malformed,
    #[error("the Seckill-Admission token is not this buyer's for this sale")]
    Forged,
    #[error("the Seckill-Admission token has expired")]
    Expired,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(sale: &str, buyer: &str) -> (SaleId, UserId) {
        (SaleId::parse(sale).unwrap(), UserId::parse(buyer).unwrap())
    }

    #[test]
    fn a_token_admits_its_buyer_in_its_sale_until_it_expires() {
        let signer = Signer::new(b"k");
        let (sale, alice) = ids("s1", "alice");
        let token = signer.admission(&sale, &alice, 7, 2_000);
        assert_eq!(signer.admitted(&token, &sale, &alice, 1_999), Ok(7));
        assert_eq!(signer.admitted(&token, &sale, &alice, 2_000), Err(Refused::Expired));
        let (other_sale, bob) = ids("s2", "bob");
        assert_eq!(signer.admitted(&token, &sale, &bob, 0), Err(Refused::Forged));
        assert_eq!(signer.admitted(&token, &other_sale, &alice, 0), Err(Refused::Forged));
        assert_eq!(Signer::new(b"other").admitted(&token, &sale, &alice, 0), Err(Refused::Forged));
        let later = token.replacen(".2000.", ".9000.", 1);
        assert_eq!(signer.admitted(&later, &sale, &alice, 0), Err(Refused::Forged), "the expiry is signed");
        assert_eq!(signer.admitted("7.2000.zz", &sale, &alice, 0), Err(Refused::Forged), "no valid MAC");
        for bad in ["", "7", "7.2000", "x.2000.00", "7.2000.00.00", &"7".repeat(200)] {
            assert_eq!(signer.admitted(bad, &sale, &alice, 0), Err(Refused::Malformed), "{bad:?}");
        }
    }

    #[test]
    fn a_ticket_carries_its_place_and_is_no_admission() {
        let signer = Signer::new(b"k");
        let (sale, alice) = ids("s1", "alice");
        let ticket = signer.ticket(&sale, &alice, 42);
        assert_eq!(signer.place_of(&ticket, &sale, &alice), Some(42));
        assert_eq!(signer.place_of(&ticket, &sale, &ids("s1", "bob").1), None);
        assert_eq!(signer.place_of(&ticket.replacen("42.", "1.", 1), &sale, &alice), None);
        // Same numbers, other label: a ticket never passes for a token, nor a token for a ticket.
        let (place, mac) = ticket.split_once('.').unwrap();
        assert_ne!(signer.admitted(&format!("{place}.0.{mac}"), &sale, &alice, 0), Ok(42));
        let token = signer.admission(&sale, &alice, 42, 0);
        assert_eq!(signer.place_of(&token, &sale, &alice), None);
    }
}
