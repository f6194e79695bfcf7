//! The payment events' signature, the scheme payment providers use for webhooks:
//! `Seckill-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed by
//! `SECKILL_PAYMENT_SECRET`. Several `v1=` may be sent (a sender rotating its secret signs with
//! both); one matching is enough. Compared in constant time (`Mac::verify_slice`); a timestamp
//! more than [`TOLERANCE_SECS`] from this host's clock is refused, so a captured event cannot be
//! replayed later (a replay within the tolerance is the same event id: answered, not applied
//! again).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Largest distance between the signature's timestamp and this host's clock.
pub const TOLERANCE_SECS: i64 = 300;

/// The header's name.
pub const HEADER: &str = "Seckill-Signature";

/// Most `v1=` signatures one header may carry.
const MAX_SIGNATURES: usize = 8;

/// Why a signature is refused (the answer names it; none of them says which byte differed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("no Seckill-Signature header")]
    Missing,
    #[error("the Seckill-Signature header is not t=<unix seconds>,v1=<hex>[,v1=<hex>...]")]
    Malformed,
    #[error("the signature's timestamp is more than 300 s from the server's clock")]
    Stale,
    #[error("no v1 signature matches the body")]
    Mismatch,
}

/// Checks `header` (the `Seckill-Signature` value) against `body` and `secret` at `now` (Unix
/// seconds).
pub fn verify(header: Option<&str>, body: &[u8], secret: &[u8], now: i64) -> Result<(), SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) if timestamp.is_none() => {
                timestamp = Some(t.parse::<i64>().map_err(|_| SignatureError::Malformed)?);
            }
            Some(("v1", hex)) if signatures.len() < MAX_SIGNATURES => {
                signatures.push(hex::decode(hex).map_err(|_| SignatureError::Malformed)?);
            }
            // Other schemes (a future v2) are skipped, as providers' receivers do.
            Some((scheme, _)) if scheme != "t" && scheme != "v1" => {}
            _ => return Err(SignatureError::Malformed),
        }
    }
    let timestamp = timestamp.ok_or(SignatureError::Malformed)?;
    if signatures.is_empty() {
        return Err(SignatureError::Malformed);
    }
    // The distance without overflow: `now - timestamp` wraps for a timestamp near i64::MIN.
    if now.abs_diff(timestamp) > TOLERANCE_SECS.unsigned_abs() {
        return Err(SignatureError::Stale);
    }
    let mac = mac(secret, timestamp, body);
    let matches = signatures.iter().any(|signature| mac.clone().verify_slice(signature).is_ok());
    if matches { Ok(()) } else { Err(SignatureError::Mismatch) }
}

/// The header value signing `body` with `secret` at `timestamp` (Unix seconds).
pub fn sign(body: &[u8], secret: &[u8], timestamp: i64) -> String {
    let signature = hex::encode(mac(secret, timestamp, body).finalize().into_bytes());
    format!("t={timestamp},v1={signature}")
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn a_signed_body_verifies_and_any_change_is_refused() {
        let body = br#"{"id":"evt_1","type":"order.paid"}"#;
        let header = sign(body, b"secret", NOW);
        assert_eq!(verify(Some(&header), body, b"secret", NOW + 10), Ok(()));
        assert_eq!(verify(Some(&header), b"{}", b"secret", NOW), Err(SignatureError::Mismatch));
        assert_eq!(verify(Some(&header), body, b"other", NOW), Err(SignatureError::Mismatch));
        assert_eq!(verify(Some(&header), body, b"secret", NOW + 301), Err(SignatureError::Stale));
        assert_eq!(verify(Some(&header), body, b"secret", NOW - 301), Err(SignatureError::Stale));
        // The timestamp is signed: moving it forward breaks the signature.
        let moved = header.replacen(&format!("t={NOW}"), &format!("t={}", NOW + 1), 1);
        assert_eq!(verify(Some(&moved), body, b"secret", NOW), Err(SignatureError::Mismatch));
    }

    /// Issue 39: `now - t` overflowed for a `t` near `i64::MIN` (wrapping in release, where
    /// `abs()` of the result stayed negative and passed the tolerance).
    #[test]
    fn a_timestamp_ages_away_is_stale_not_an_overflow() {
        let body = b"{}";
        for t in [NOW - (1 << 62) - (1 << 62), i64::MIN, i64::MIN + 1, i64::MAX, -NOW] {
            let header = sign(body, b"secret", t);
            assert_eq!(verify(Some(&header), body, b"secret", NOW), Err(SignatureError::Stale), "t={t}");
        }
        for now in [i64::MIN, i64::MAX] {
            let header = sign(body, b"secret", NOW);
            assert_eq!(verify(Some(&header), body, b"secret", now), Err(SignatureError::Stale), "now={now}");
        }
    }

    #[test]
    fn one_matching_signature_of_several_is_enough_for_a_rotation() {
        let body = b"{}";
        let new = sign(body, b"new", NOW);
        let old = sign(body, b"old", NOW);
        let both = format!("{new},{}", old.split_once(',').unwrap().1);
        assert_eq!(verify(Some(&both), body, b"old", NOW), Ok(()));
        assert_eq!(verify(Some(&both), body, b"new", NOW), Ok(()));
        assert_eq!(verify(Some(&format!("{both},v2=abc")), body, b"new", NOW), Ok(()), "unknown schemes skipped");
    }

    #[test]
    fn malformed_headers_are_named() {
        let body = b"{}";
        assert_eq!(verify(None, body, b"s", NOW), Err(SignatureError::Missing));
        for bad in ["", "t=1", "v1=00", "t=x,v1=00", "t=1,v1=zz", "t=1,t=2,v1=00", "garbage"] {
            assert_eq!(verify(Some(bad), body, b"s", NOW), Err(SignatureError::Malformed), "{bad:?}");
        }
    }
}
