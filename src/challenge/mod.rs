//! Proof of work at the door (docs/waiting-room.md, "Proof of work"): a sale may ask every
//! buyer to solve an ALTCHA PoW v2 challenge (PBKDF2-SHA-256) before it joins the sale's waiting
//! room, or buys in a sale without one.
//!
//! ```text
//!  GET /sales/{id}/challenge ──► lua/challenge_count.lua (the address's challenges this minute)
//!        │                        ──► cost = the sale's × curve(count)   (curve)
//!        ▼                        ──► signed challenge, bound to sale, buyer and address, short-lived
//!  the page solves it (a Web Worker: ~cost PBKDF2 derivations)
//!        │
//!  POST …/queue or POST /buy + Seckill-Challenge ──► checked here, in process: one HMAC
//!        ──► its nonce spent once (lua/queue_join.lua, in the join's own call; lua/challenge_spend.lua)
//! ```
//!
//! A challenge is *deterministic* (ALTCHA's term): the server draws the counter the solver has to
//! find, uniformly in `1..2·tries`, so a solve takes `tries` derivations on average and at most
//! twice that, and a solution is checked by one HMAC of the key it found (`keySignature`), not by
//! deriving the key again. Issuing costs one derivation.

mod curve;
pub mod solve;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use altcha::{Challenge, CreateChallengeOptions, Payload, VerifySolutionOptions};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use redis::RedisResult;
use serde_json::Value;
use sha2::Sha256;

pub use self::curve::Curve;
use crate::domain::{SaleId, UserId};
use crate::limiter::client_key;
use crate::redis::Keyspace;
use crate::redis::keys::challenge_count_key;
use crate::redis::lua;

/// The request header that carries a solution to `POST /sales/{id}/queue` and `POST /buy`: the
/// ALTCHA payload (`{"challenge": …, "solution": {"counter", "derivedKey"}}`) as base64 JSON, as
/// the ALTCHA widget sends it.
pub const CHALLENGE_HEADER: &str = "Seckill-Challenge";

/// Longest header accepted (a solution is about 900 bytes with a 128-byte buyer id).
pub const MAX_SOLUTION_BYTES: usize = 2048;

/// The key derivation asked: PBKDF2 with HMAC-SHA-256, which WebCrypto runs natively in a browser.
pub const ALGORITHM: &str = "PBKDF2/SHA-256";

/// The highest cost a sale may ask (tries on average); times the largest factor (1024) it stays
/// below the counter's 2^32.
pub const MAX_COST: u32 = 1_000_000;

/// A sale's cost when its seed asks a challenge without naming one (`"challenge": {}`): about a
/// quarter of a second of a browser's solving on a 2-core host (docs/waiting-room.md).
pub const DEFAULT_COST: u32 = 1000;

/// Most sales one instance remembers to ask a proof of work.
const MAX_SALES: u64 = 10_000;

/// How long it remembers that, at most: a seed's event makes it forget the sale at once (a re-seed
/// can drop the challenge), else a purchase without a solution is refused in process until then.
const ASKED_MEMORY: Duration = Duration::from_secs(60);

/// The challenges' settings (`SECKILL_CHALLENGE_*`).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// PBKDF2 iterations of one try.
    pub iterations: u32,
    /// How long a challenge can be solved and used.
    pub ttl: Duration,
    /// How a busy address's cost grows.
    pub curve: Curve,
}

/// A challenge issued, with what it asks.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The signed challenge, as the client solves it and sends it back.
    pub challenge: Challenge,
    /// The derivations a solve takes on average (the sale's cost times `factor`).
    pub tries: u64,
    /// How many times the sale's cost this address was asked ([`Curve`]).
    pub factor: u32,
    /// The address's challenges in the last minute, this one included.
    pub recent: u64,
}

/// A solution that passed, to be spent once in Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spent {
    /// The challenge's nonce (32 hex digits).
    pub nonce: String,
    /// Until when it could be used, Unix ms: the spent nonce is kept that long.
    pub expires_ms: i64,
    /// The factor it was issued at (the metrics' `cost` label).
    pub factor: u32,
}

/// Why a solution is refused (403 `challenge_failed`, with this as the message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the challenge header is not base64 JSON of an ALTCHA payload")]
    Malformed,
    #[error("the challenge's signature is not this service's")]
    Forged,
    #[error("the challenge has expired: ask for a new one")]
    Expired,
    #[error("the challenge was issued for another sale or drop")]
    OtherSale,
    #[error("the challenge was issued to another buyer")]
    OtherBuyer,
    #[error("the challenge was issued to another client address")]
    OtherAddress,
    #[error("the solution does not solve the challenge")]
    Wrong,
    #[error("the solution was used already: ask for a new challenge")]
    Replayed,
}

impl Refused {
    /// The metrics' `reason` label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Malformed => "malformed",
            Self::Forged => "forged",
            Self::Expired => "expired",
            Self::OtherSale => "other_sale",
            Self::OtherBuyer => "other_buyer",
            Self::OtherAddress => "other_address",
            Self::Wrong => "wrong",
            Self::Replayed => "replayed",
        }
    }
}

/// The challenges of one deployment: their keys, their settings, the addresses' counts in Redis.
#[derive(Clone)]
pub struct Challenges {
    redis: Keyspace,
    /// Signs the challenge (`signature`), and the key a solve finds (`keySignature`).
    keys: Option<([u8; 32], [u8; 32])>,
    curve: Curve,
    iterations: u32,
    ttl: Duration,
    ipv6_prefix: u8,
    /// Sales this instance knows to ask a proof of work (a purchase without one is refused in
    /// process; `lua/buy.lua` refuses it for the others).
    asked: moka::sync::Cache<Box<str>, ()>,
}

impl Challenges {
    /// The challenges under `redis`'s prefix, signed with keys derived from `admission_key`
    /// (`None`: no sale can ask for one: issuing answers [`IssueError::Disabled`]).
    pub fn new(redis: Keyspace, admission_key: Option<&[u8]>, settings: Settings, ipv6_prefix: u8) -> Self {
        let derive = |key: &[u8], label: &[u8]| -> [u8; 32] {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
            mac.update(label);
            mac.finalize().into_bytes().into()
        };
        Self {
            redis,
            keys: admission_key
                .map(|key| (derive(key, b"seckill challenge v1"), derive(key, b"seckill challenge key v1"))),
            curve: settings.curve,
            iterations: settings.iterations,
            ttl: settings.ttl,
            ipv6_prefix,
            asked: moka::sync::Cache::builder().max_capacity(MAX_SALES).time_to_live(ASKED_MEMORY).build(),
        }
    }

    /// Whether this instance knows `sale` to ask a proof of work.
    pub fn asks(&self, sale: &SaleId) -> bool {
        self.asked.contains_key(sale.as_str())
    }

    /// Remembers that `sale` asks a proof of work (it issued one, or `lua/buy.lua` said so).
    pub fn learn_asked(&self, sale: &SaleId) {
        self.asked.insert(sale.as_str().into(), ());
    }

    /// Forgets whether `sale` asks a proof of work (it was seeded again, perhaps without one):
    /// the script says so again at its next purchase without a solution.
    pub fn forget_asked(&self, sale: &str) {
        self.asked.invalidate(sale);
    }

    /// Forgets it of every sale (seeds may have been missed).
    pub fn forget_all_asked(&self) {
        self.asked.invalidate_all();
    }

    /// The curve that raises a busy address's cost.
    pub fn curve(&self) -> &Curve {
        &self.curve
    }

    /// A challenge for `buyer` at `door` (a sale's id, or a drop line's `drop:<drop>`) from
    /// `client`, asking `cost` derivations on average times the address's factor (one Redis call:
    /// the address's count).
    pub async fn issue(&self, door: &str, buyer: &UserId, client: IpAddr, cost: u32) -> Result<Issued, IssueError> {
        let (secret, key_secret) = self.keys.as_ref().ok_or(IssueError::Disabled)?;
        let address = client_key(client, self.ipv6_prefix);
        let recent = self.count(address).await?;
        let factor = self.curve.factor(recent);
        let tries = u64::from(cost.max(1)) * u64::from(factor);
        let counter = draw_counter(tries);
        let expires_at = unix_now().as_secs() + self.ttl.as_secs();
        let data = BTreeMap::from([
            ("sale".to_owned(), Value::from(door)),
            ("buyer".to_owned(), Value::from(buyer.as_str())),
            ("address".to_owned(), Value::from(address.to_string())),
            ("factor".to_owned(), Value::from(factor)),
        ]);
        let challenge = altcha::create_challenge(CreateChallengeOptions {
            algorithm: ALGORITHM.to_owned(),
            cost: self.iterations,
            counter: Some(counter),
            data: Some(data),
            expires_at: Some(i64::try_from(expires_at).unwrap_or(i64::MAX)),
            hmac_signature_secret: Some(hex::encode(secret)),
            hmac_key_signature_secret: Some(hex::encode(key_secret)),
            ..Default::default()
        })
        .map_err(|err| IssueError::Internal(err.to_string()))?;
        Ok(Issued { challenge, tries, factor, recent })
    }

    /// Checks `header` (the [`CHALLENGE_HEADER`]) in process, without Redis: signed by this
    /// deployment, not expired, issued for `door` (as [`Challenges::issue`]), `buyer` and
    /// `client`'s address, and solved. The nonce it returns is still to be spent (once) in Redis.
    pub fn verify(&self, header: &str, door: &str, buyer: &UserId, client: IpAddr) -> Result<Spent, Refused> {
        let (secret, key_secret) = self.keys.as_ref().ok_or(Refused::Forged)?;
        if header.len() > MAX_SOLUTION_BYTES {
            return Err(Refused::Malformed);
        }
        let json = STANDARD.decode(header.trim()).map_err(|_| Refused::Malformed)?;
        let payload: Payload = serde_json::from_slice(&json).map_err(|_| Refused::Malformed)?;
        let mut options = VerifySolutionOptions::new(&payload.challenge, &payload.solution, hex::encode(secret));
        options.hmac_key_signature_secret = Some(hex::encode(key_secret));
        let verdict = altcha::verify_solution(options).map_err(|_| Refused::Malformed)?;
        if verdict.expired {
            return Err(Refused::Expired);
        }
        if verdict.invalid_signature != Some(false) || payload.challenge.parameters.key_signature.is_none() {
            return Err(Refused::Forged);
        }
        // Signed by us, so the data is ours: compare it with the request.
        let params = &payload.challenge.parameters;
        let field = |name: &str| params.data.as_ref().and_then(|data| data.get(name)).and_then(Value::as_str);
        if field("sale") != Some(door) {
            return Err(Refused::OtherSale);
        }
        if field("buyer") != Some(buyer.as_str()) {
            return Err(Refused::OtherBuyer);
        }
        if field("address") != Some(client_key(client, self.ipv6_prefix).to_string().as_str()) {
            return Err(Refused::OtherAddress);
        }
        if !verdict.verified {
            return Err(Refused::Wrong);
        }
        let factor = params.data.as_ref().and_then(|data| data.get("factor")).and_then(Value::as_u64).unwrap_or(1);
        let expires_ms = params.expires_at.unwrap_or(0).saturating_mul(1000);
        Ok(Spent { nonce: params.nonce.clone(), expires_ms, factor: u32::try_from(factor).unwrap_or(u32::MAX) })
    }

    /// Spends `spent` in `sale` (`lua/challenge_spend.lua`): `false` if it was spent before.
    /// (A join spends its solution in its own call instead: `lua/queue_join.lua`.)
    pub async fn spend(&self, sale: &SaleId, spent: &Spent) -> RedisResult<bool> {
        let keys = self.redis.sale_keys(sale);
        let mut call = lua::CHALLENGE_SPEND.key(&keys.challenges);
        call.arg(&spent.nonce).arg(spent.expires_ms);
        let fresh: i64 = lua::run(&call, &mut self.redis.conn()).await?;
        Ok(fresh == 1)
    }

    /// Gives `spent` back in `sale` (ZREM of its nonce): it was spent for a purchase that bought
    /// nothing and may be asked again, so the same solution may be sent again. A failure leaves
    /// it spent (logged, budgeted): the buyer then solves a new challenge.
    pub async fn give_back(&self, sale: &SaleId, spent: &Spent) {
        let keys = self.redis.sale_keys(sale);
        let given: RedisResult<i64> =
            redis::cmd("ZREM").arg(&keys.challenges).arg(&spent.nonce).query_async(&mut self.redis.conn()).await;
        if let Err(error) = given
            && let Some(suppressed) = crate::telemetry::dependency_failure_line(Some("redis"))
        {
            tracing::warn!(%error, sale_id = %sale, suppressed, "a spent proof of work was not given back");
        }
    }

    /// `lua/challenge_count.lua`: this address's challenges in the last minute, this one included.
    async fn count(&self, address: IpAddr) -> RedisResult<u64> {
        let key = challenge_count_key(self.redis.prefix(), address);
        let call = lua::CHALLENGE_COUNT.key(&key);
        lua::run(&call, &mut self.redis.conn()).await
    }
}

/// Why no challenge could be issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("no admission key: set SECKILL_ADMISSION_SECRET or SECKILL_ADMIN_TOKEN")]
    Disabled,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
    #[error("the challenge could not be made: {0}")]
    Internal(String),
}

/// The counter a solver has to find: uniform in `1..2·tries` (mean `tries`, never more than
/// twice it), below 2^32.
fn draw_counter(tries: u64) -> u32 {
    let span = tries.max(1).saturating_mul(2).saturating_sub(1).clamp(1, u64::from(u32::MAX) - 1);
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    let counter = 1 + u64::from_le_bytes(bytes) % span;
    u32::try_from(counter).unwrap_or(u32::MAX)
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

#[cfg(test)]
mod tests;
