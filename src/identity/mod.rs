//! Who is buying: the verification of the bearer JWT that names the buyer (`SECKILL_AUTH=jwt`),
//! built once at start-up ([`Verifier::new`]) and used by every `POST /buy`, and the signing of
//! HS256 tokens for `seckill token`. It knows nothing of HTTP (the header is read in `http`) and
//! touches no state: a token is checked from its bytes and the configured key alone.
//!
//! Only the configured algorithm is accepted: a token whose header names another (`none`, HS256
//! against a public key, RS256 against a secret, ...) is refused. `exp` is required; `nbf`, and
//! `iss` and `aud` when an issuer or audience is configured, are checked too, with a leeway for
//! clock skew. A token that names an audience is refused when none is configured (RFC 7519
//! §4.1.3: it was issued for some other application), whatever the `aud` claim's type; with one
//! configured, `aud` must be that string or an array of strings holding it. A token valid for longer than the maximum
//! lifetime (`exp - iat`, and `exp - now`) is refused, and so is any header with `crit` (RFC 7515
//! §4.1.11: no extension is understood here). Verification is `jsonwebtoken`'s, with its
//! pure-Rust crypto backend.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Map, Value};

use crate::domain::UserId;

/// Whether `POST /buy` takes its buyer from a verified token or trusts the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AuthMode {
    /// The body's `user_id` is the buyer, unchecked: only behind a gateway that authenticates.
    #[default]
    None,
    /// The buyer is a claim of the `Authorization: Bearer` JWT.
    Jwt,
}

/// The signature algorithms a verifier can be configured with (one at a time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JwtAlgorithm {
    /// HMAC-SHA256 with the shared secret.
    #[value(name = "HS256")]
    Hs256,
    /// RSASSA-PKCS1-v1_5 SHA-256, with an RSA public key.
    #[value(name = "RS256")]
    Rs256,
    /// ECDSA P-256 SHA-256, with a P-256 public key.
    #[value(name = "ES256")]
    Es256,
    /// Ed25519, with an Ed25519 public key.
    #[value(name = "EdDSA")]
    EdDsa,
}

impl JwtAlgorithm {
    fn algorithm(self) -> Algorithm {
        match self {
            Self::Hs256 => Algorithm::HS256,
            Self::Rs256 => Algorithm::RS256,
            Self::Es256 => Algorithm::ES256,
            Self::EdDsa => Algorithm::EdDSA,
        }
    }
}

/// The shortest HS256 secret accepted, in bytes (the hash's output size, RFC 7518 §3.2).
pub const MIN_SECRET_BYTES: usize = 32;

/// The key tokens are verified with.
pub enum JwtKey {
    /// An HS256 shared secret.
    Secret(SecretString),
    /// A public key in PEM (SPKI `PUBLIC KEY`, or `RSA PUBLIC KEY`).
    PublicKeyPem(Vec<u8>),
}

/// What a [`Verifier`] checks.
pub struct JwtSettings {
    /// The key (exactly one).
    pub key: JwtKey,
    /// The one algorithm accepted. `None`: HS256 with a secret; with a public key, its type's
    /// (RSA: RS256, EC: ES256, Ed25519: EdDSA).
    pub algorithm: Option<JwtAlgorithm>,
    /// The claim that names the buyer (`sub` by default).
    pub user_claim: String,
    /// When set, tokens must carry this `iss`.
    pub issuer: Option<String>,
    /// When set, tokens must carry this `aud` (one of theirs); unset, tokens must carry none.
    pub audience: Option<String>,
    /// Clock skew allowed on `exp`, `nbf` and `iat`.
    pub leeway: Duration,
    /// The longest validity accepted: `exp - iat`, and `exp - now`.
    pub max_lifetime: Duration,
}

/// Why a token was refused: a short sentence for the client (nothing secret in it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidToken(pub &'static str);

/// Checks tokens against one key and algorithm; built once, shared by every request.
pub struct Verifier {
    key: DecodingKey,
    validation: Validation,
    user_claim: String,
    /// Whether an audience is configured (then `validation` checks `aud`; unset, no `aud` at all).
    audience: bool,
    max_lifetime: u64,
    leeway: u64,
}

impl Verifier {
    /// Builds the verifier, or says why the settings cannot work (too short a secret, a PEM
    /// that is no public key of the algorithm's type, a secret with a public-key algorithm).
    pub fn new(settings: JwtSettings) -> Result<Self, String> {
        let (key, algorithm) = match (&settings.key, settings.algorithm) {
            (JwtKey::Secret(secret), None | Some(JwtAlgorithm::Hs256)) => {
                let bytes = secret.expose_secret().as_bytes();
                if bytes.len() < MIN_SECRET_BYTES {
                    return Err(format!("the JWT secret must be at least {MIN_SECRET_BYTES} bytes"));
                }
                (DecodingKey::from_secret(bytes), JwtAlgorithm::Hs256)
            }
            (JwtKey::Secret(_), Some(other)) => {
                return Err(format!("{other:?} needs a public key (SECKILL_JWT_PUBLIC_KEY_FILE), not a secret"));
            }
            (JwtKey::PublicKeyPem(pem), algorithm) => public_key(pem, algorithm)?,
        };
        let mut validation = Validation::new(algorithm.algorithm());
        validation.leeway = settings.leeway.as_secs();
        validation.validate_exp = true;
        validation.validate_nbf = true;
        let mut required = vec!["exp"];
        if let Some(issuer) = &settings.issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        // Without an audience configured, validate_aud stays on: a token naming one as a string
        // or an array of strings is refused (and `verify` refuses an `aud` of any other type).
        // With one, jsonwebtoken accepts only that string or an array of strings holding it: an
        // `aud` of another type does not parse, and counts as missing.
        if let Some(audience) = &settings.audience {
            validation.set_audience(&[audience]);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        if settings.user_claim.is_empty() {
            return Err("the user claim name must not be empty".into());
        }
        if settings.max_lifetime.is_zero() {
            return Err("the maximum token lifetime must be positive".into());
        }
        Ok(Self {
            key,
            validation,
            user_claim: settings.user_claim,
            audience: settings.audience.is_some(),
            max_lifetime: settings.max_lifetime.as_secs(),
            leeway: settings.leeway.as_secs(),
        })
    }

    /// The buyer the token names, if its signature, algorithm and time and issuer/audience
    /// claims hold and its user claim is a valid [`UserId`].
    pub fn verify(&self, token: &str) -> Result<UserId, InvalidToken> {
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &self.key, &self.validation)
            .map_err(|err| InvalidToken(reason(err.kind())))?;
        if data.header.crit.is_some() {
            return Err(InvalidToken("the token's header has critical extensions (crit), none of which is understood"));
        }
        // jsonwebtoken skips an `aud` it cannot read (`5`, `true`, `{}`, `[5]`): it names an
        // audience all the same.
        if !self.audience && data.claims.contains_key("aud") {
            return Err(InvalidToken(reason(&ErrorKind::InvalidAudience)));
        }
        self.check_lifetime(&data.claims)?;
        let user = match data.claims.get(&self.user_claim) {
            Some(Value::String(user)) => user,
            Some(_) => return Err(InvalidToken("the token's user claim is not a string")),
            None => return Err(InvalidToken("the token has no user claim")),
        };
        UserId::parse(user).map_err(|_| InvalidToken("the token's user claim is not a valid user_id"))
    }
}

impl Verifier {
    /// `exp` (already checked present and unexpired) at most the maximum lifetime after `iat`
    /// and after now; `iat`, when present, a number and not in the future beyond the leeway.
    fn check_lifetime(&self, claims: &Map<String, Value>) -> Result<(), InvalidToken> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let exp = claims.get("exp").and_then(|exp| seconds(exp, f64::ceil));
        let exp = exp.ok_or(InvalidToken("a claim of the token is malformed"))?;
        let issued = match claims.get("iat") {
            None => now,
            Some(iat) => seconds(iat, f64::floor).ok_or(InvalidToken("the token's iat is not a number of seconds"))?,
        };
        if issued > now + self.leeway {
            return Err(InvalidToken("the token was issued in the future (iat)"));
        }
        if exp.saturating_sub(issued.min(now)) > self.max_lifetime {
            return Err(InvalidToken("the token's lifetime (exp - iat) is longer than this service accepts"));
        }
        Ok(())
    }
}

/// A NumericDate claim in whole seconds (RFC 7519: a JSON number, not always an integer, as the
/// signature's check reads it too): an integer as it is, a fraction rounded by `round` (up for an
/// end, down for a start: the lifetime checked is never shorter than the token's).
fn seconds(value: &Value, round: fn(f64) -> f64) -> Option<u64> {
    value.as_u64().or_else(|| {
        let secs = round(value.as_f64()?);
        (secs.is_finite() && (0.0..9.0e15).contains(&secs)).then_some(secs as u64)
    })
}

/// The key of a PEM and the algorithm it is used with: the one given, or its type's.
fn public_key(pem: &[u8], algorithm: Option<JwtAlgorithm>) -> Result<(DecodingKey, JwtAlgorithm), String> {
    let parse = |algorithm| match algorithm {
        JwtAlgorithm::Rs256 => DecodingKey::from_rsa_pem(pem),
        JwtAlgorithm::Es256 => DecodingKey::from_ec_pem(pem),
        JwtAlgorithm::EdDsa => DecodingKey::from_ed_pem(pem),
        JwtAlgorithm::Hs256 => Err(ErrorKind::InvalidKeyFormat.into()),
    };
    match algorithm {
        Some(JwtAlgorithm::Hs256) => Err("HS256 needs a secret (SECKILL_JWT_SECRET), not a public key".into()),
        Some(algorithm) => parse(algorithm)
            .map(|key| (key, algorithm))
            .map_err(|err| format!("the public key is not a {algorithm:?} public key in PEM: {err}")),
        None => [JwtAlgorithm::Rs256, JwtAlgorithm::Es256, JwtAlgorithm::EdDsa]
            .into_iter()
            .find_map(|algorithm| parse(algorithm).ok().map(|key| (key, algorithm)))
            .ok_or_else(|| "the public key file holds no RSA, EC or Ed25519 public key in PEM".into()),
    }
}

/// The client's sentence for a refusal.
fn reason(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "the token has expired",
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)",
        ErrorKind::InvalidIssuer => "the token's issuer is not the one accepted",
        ErrorKind::InvalidAudience => "the token's audience (aud) is not this service's",
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName | ErrorKind::MissingAlgorithm => {
            "the token's algorithm is not the one accepted"
        }
        ErrorKind::InvalidSignature => "the token's signature does not verify",
        ErrorKind::MissingRequiredClaim(_) => "the token lacks a required claim (exp, or the iss/aud configured)",
        ErrorKind::InvalidClaimFormat(_) => "a claim of the token is malformed",
        _ => "the token is malformed",
    }
}

/// An HS256 token naming `user` in `user_claim`, valid for `ttl` from now, with `iss` and `aud`
/// when given: what `seckill token` prints (and what tests and load generators sign).
pub fn sign_hs256(
    secret: &SecretString,
    user: &UserId,
    user_claim: &str,
    ttl: Duration,
    issuer: Option<&str>,
    audience: Option<&str>,
) -> Result<String, String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?.as_secs();
    let mut claims = Map::new();
    claims.insert(user_claim.to_owned(), Value::from(user.as_str()));
    claims.insert("iat".into(), Value::from(now));
    claims.insert("exp".into(), Value::from(now + ttl.as_secs()));
    if let Some(issuer) = issuer {
        claims.insert("iss".into(), Value::from(issuer));
    }
    if let Some(audience) = audience {
        claims.insert("aud".into(), Value::from(audience));
    }
    let key = EncodingKey::from_secret(secret.expose_secret().as_bytes());
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests;
