//! Standard Webhooks signatures (<https://www.standardwebhooks.com/>): `webhook-signature` is
//! `v1,<base64 of HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.<body>")>`, one per key,
//! space-separated, the key being the base64 after `whsec_`.
//!
//! Written here on `hmac`, `sha2` and `base64` (already in the tree) rather than with the
//! `standardwebhooks` crate: that crate has had one release (1.0.1, March 2024) and would bring a
//! second `base64` (0.21) and `hmac-sha256` for twenty lines; the spec's test vector is checked below.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::Sha256;

/// The secrets' prefix.
pub const PREFIX: &str = "whsec_";
/// Key lengths the spec allows, in bytes.
const KEY_BYTES: std::ops::RangeInclusive<usize> = 24..=64;

/// The keys events are signed with: the current secret's, then an older one's during a rotation.
#[derive(Clone)]
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({} key(s))", self.keys.len())
    }
}

impl Signer {
    /// The signer of `current` (and `previous`, while receivers move to the new secret). The
    /// error names the setting, never the secret.
    pub fn new(current: &SecretString, previous: Option<&SecretString>) -> Result<Self, String> {
        let mut keys = vec![key_of(current).map_err(|why| format!("SECKILL_WEBHOOK_SECRET {why}"))?];
        if let Some(previous) = previous {
            keys.push(key_of(previous).map_err(|why| format!("SECKILL_WEBHOOK_SECRET_PREVIOUS {why}"))?);
        }
        Ok(Self { keys })
    }

    /// The `webhook-signature` value of one attempt.
    pub fn sign(&self, id: &str, timestamp: i64, body: &str) -> String {
        let signed = format!("{id}.{timestamp}.{body}");
        let signatures: Vec<String> = self
            .keys
            .iter()
            .map(|key| {
                let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
                mac.update(signed.as_bytes());
                format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
            })
            .collect();
        signatures.join(" ")
    }
}

/// The key of a `whsec_<base64>` secret, 24 to 64 bytes.
fn key_of(secret: &SecretString) -> Result<Vec<u8>, String> {
    let encoded = secret.expose_secret().strip_prefix(PREFIX).ok_or("must start with whsec_")?;
    let key =
        STANDARD.decode(encoded).map_err(|_| "must be whsec_ and base64 (e.g. whsec_$(openssl rand -base64 32))")?;
    if !KEY_BYTES.contains(&key.len()) {
        return Err(format!("must hold 24 to 64 bytes after whsec_, got {}", key.len()));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(s: &str) -> SecretString {
        SecretString::from(s.to_owned())
    }

    /// The test vector of the Standard Webhooks reference libraries.
    #[test]
    fn the_spec_test_vector_signs_as_published() {
        let signer = Signer::new(&secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), None).unwrap();
        let signature = signer.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, r#"{"test": 2432232314}"#);
        assert_eq!(signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_rotation_sends_both_signatures_the_current_first() {
        let (current, previous) = (
            secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
            secret(&format!("whsec_{}", STANDARD.encode([7u8; 32]))),
        );
        let both = Signer::new(&current, Some(&previous)).unwrap().sign("msg_1", 1, "{}");
        let alone = Signer::new(&current, None).unwrap().sign("msg_1", 1, "{}");
        let parts: Vec<&str> = both.split(' ').collect();
        assert_eq!((parts.len(), parts[0]), (2, alone.as_str()));
        assert!(parts[1].starts_with("v1,") && parts[1] != parts[0]);
    }

    #[test]
    fn malformed_secrets_are_refused_without_being_shown() {
        for bad in ["MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_not base64!", "whsec_c2hvcnQ="] {
            let why = Signer::new(&secret(bad), None).unwrap_err();
            assert!(why.starts_with("SECKILL_WEBHOOK_SECRET ") && !why.contains(bad), "{why}");
        }
    }
}
