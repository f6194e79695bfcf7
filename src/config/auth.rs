//! How `POST /buy` knows its buyer: `SECKILL_AUTH` and the JWT settings, and the verifier they
//! build.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;

use super::{duration, secret};
use crate::identity::{AuthMode, JwtAlgorithm, JwtKey, JwtSettings, Verifier};

/// How `POST /buy` knows its buyer (docs/http-api.md: "Identity").
#[derive(Debug, Clone, clap::Args)]
pub struct AuthConfig {
    /// none: the body's user_id is the buyer, unchecked (for a trusted gateway only); jwt: the
    /// buyer is a claim of the `Authorization: Bearer` JWT.
    #[arg(long = "auth", env = "SECKILL_AUTH", value_enum, default_value_t = AuthMode::None, global = true)]
    pub mode: AuthMode,

    /// HS256 secret for jwt (at least 32 bytes), used raw: the HMAC key is the value's own bytes,
    /// never base64- or hex-decoded; also what `seckill token` signs with.
    #[arg(long, env = "SECKILL_JWT_SECRET", value_parser = secret, hide_env_values = true, global = true)]
    pub jwt_secret: Option<SecretString>,

    /// PEM public key for jwt (RSA, EC P-256 or Ed25519), instead of a secret.
    #[arg(long, env = "SECKILL_JWT_PUBLIC_KEY_FILE", global = true)]
    pub jwt_public_key_file: Option<PathBuf>,

    /// The one algorithm accepted. Default: HS256 with a secret; with a public key, its type's
    /// (RSA: RS256, EC: ES256, Ed25519: EdDSA).
    #[arg(long, env = "SECKILL_JWT_ALGORITHM", value_enum, global = true)]
    pub jwt_algorithm: Option<JwtAlgorithm>,

    /// The token claim that names the buyer.
    #[arg(long, env = "SECKILL_JWT_USER_CLAIM", default_value = "sub", global = true)]
    pub jwt_user_claim: String,

    /// When set, tokens must carry this `iss`.
    #[arg(long, env = "SECKILL_JWT_ISSUER", global = true)]
    pub jwt_issuer: Option<String>,

    /// When set, tokens must carry this `aud` (the string, or an array of strings holding it).
    /// Unset, a token with any `aud` claim, of any type, is refused (it was issued for another
    /// application), and the service warns at start-up.
    #[arg(long, env = "SECKILL_JWT_AUDIENCE", global = true)]
    pub jwt_audience: Option<String>,

    /// Clock skew allowed on a token's `exp`, `nbf` and `iat`.
    #[arg(long, env = "SECKILL_JWT_LEEWAY", default_value = "30s", value_parser = duration, global = true)]
    pub jwt_leeway: Duration,

    /// The longest validity a token may have (`exp - iat`, and `exp - now`); longer ones are
    /// refused. Also the longest `seckill token --ttl`.
    #[arg(long, env = "SECKILL_JWT_MAX_LIFETIME", default_value = "1d", value_parser = duration, global = true)]
    pub jwt_max_lifetime: Duration,
}

/// The most clock skew `SECKILL_JWT_LEEWAY` may allow.
pub const MAX_LEEWAY: Duration = Duration::from_secs(300);

impl Default for AuthConfig {
    /// `none`, with the defaults of the jwt settings.
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            jwt_secret: None,
            jwt_public_key_file: None,
            jwt_algorithm: None,
            jwt_user_claim: "sub".into(),
            jwt_issuer: None,
            jwt_audience: None,
            jwt_leeway: Duration::from_secs(30),
            jwt_max_lifetime: Duration::from_secs(24 * 3600),
        }
    }
}

impl AuthConfig {
    /// The leeway's bound: at most [`MAX_LEEWAY`] and below the longest lifetime (a leeway of
    /// days took expired tokens for days, and one past the lifetime undid its check).
    pub fn validate(&self) -> Result<(), String> {
        if self.jwt_leeway > MAX_LEEWAY || self.jwt_leeway >= self.jwt_max_lifetime {
            return Err(format!(
                "SECKILL_JWT_LEEWAY ({:?}) must be at most {MAX_LEEWAY:?} and below SECKILL_JWT_MAX_LIFETIME ({:?})",
                self.jwt_leeway, self.jwt_max_lifetime
            ));
        }
        Ok(())
    }

    /// The verifier of `jwt` mode (built once, at start-up), `None` in `none` mode; an error for
    /// no key, both keys, an unreadable key file, or a key the verifier refuses.
    pub fn verifier(&self) -> Result<Option<Verifier>, String> {
        if self.mode == AuthMode::None {
            return Ok(None);
        }
        let key = match (&self.jwt_secret, &self.jwt_public_key_file) {
            (Some(secret), None) => JwtKey::Secret(secret.clone()),
            (None, Some(path)) => JwtKey::PublicKeyPem(
                std::fs::read(path)
                    .map_err(|e| format!("reading SECKILL_JWT_PUBLIC_KEY_FILE {}: {e}", path.display()))?,
            ),
            (None, None) => {
                return Err("SECKILL_AUTH=jwt needs SECKILL_JWT_SECRET or SECKILL_JWT_PUBLIC_KEY_FILE".into());
            }
            (Some(_), Some(_)) => {
                return Err("set only one of SECKILL_JWT_SECRET and SECKILL_JWT_PUBLIC_KEY_FILE".into());
            }
        };
        Verifier::new(JwtSettings {
            key,
            algorithm: self.jwt_algorithm,
            user_claim: self.jwt_user_claim.clone(),
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            leeway: self.jwt_leeway,
            max_lifetime: self.jwt_max_lifetime,
        })
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::config::Cli;

    #[test]
    fn jwt_mode_needs_exactly_one_usable_key() {
        let verifier = |args: &[&str]| {
            Cli::try_parse_from([&["seckill", "migrate", "--auth", "jwt"], args].concat())
                .unwrap()
                .config()
                .unwrap()
                .auth
                .verifier()
        };
        let secret = "0123456789abcdef0123456789abcdef";
        assert!(verifier(&[]).is_err(), "no key");
        assert!(verifier(&["--jwt-secret", "too-short"]).is_err(), "short secret");
        assert!(verifier(&["--jwt-secret", secret]).unwrap().is_some());
        assert!(verifier(&["--jwt-secret", secret, "--jwt-public-key-file", "/dev/null"]).is_err(), "both keys");
        assert!(verifier(&["--jwt-public-key-file", "/nonexistent.pem"]).is_err(), "unreadable key");
        let none = Cli::try_parse_from(["seckill", "migrate"]).unwrap().config().unwrap().auth;
        assert!(none.verifier().unwrap().is_none(), "none is the default");
    }
}
