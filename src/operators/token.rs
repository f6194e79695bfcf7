//! An operator's token: 32 random bytes, base64url, behind the prefix `sko_` (which a secret
//! scanner can look for); seckill stores only its SHA-256.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

/// The prefix of every token `seckill operator-token` makes.
pub const TOKEN_PREFIX: &str = "sko_";

/// A fresh random token: 256 bits from the operating system's generator.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("the system's random generator failed: {e}"))?;
    Ok(format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes)))
}

/// The SHA-256 of a token, as the roster holds it.
pub fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// The SHA-256 of a token in lowercase hex, as a roster line writes it.
pub fn hash_hex(token: &str) -> String {
    hex::encode(sha256(token))
}
