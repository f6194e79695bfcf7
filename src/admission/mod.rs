//! Waiting rooms: a line (a queued sale's, or a drop's for every size of the drop: [`LineId`])
//! admits its buyers in a fair order at a set rate, and only an admitted buyer can buy
//! (docs/waiting-room.md has the picture).
//!
//! ```text
//!  opens_at        starts_at: the pre-queue is frozen; places by shuffle score, then arrivals
//!     │  pre-queue      │  line: 1 2 3 … N │ N+1 N+2 … (joined after the start, in order)
//!     ▼  (no places)    ▼       ▲ admission moves at `rate`/s, at most ceil(stock × FACTOR)
//!  POST …/queue ──► lua/queue_join.lua   unused open admissions (lua/admit.lua)
//!                                     │
//!  GET …/queue (ticket) ──► this instance's read of the line (≤ 1 per TICK) ──► admission token
//!  POST /buy + Seckill-Admission ──► checked here, in-process ──► lua/buy.lua (place recorded)
//! ```
//!
//! Everything in Redis is in the sale's slot (`crate::redis::keys::LineKeys`; a drop's line in the
//! drop's, beside its sizes, so a purchase's one call reaches both). The place a buyer
//! holds never changes: a pre-queue buyer's is the rank of its shuffle score (`lua/queue_join.lua`,
//! auditable from the seed the sale publishes), a later buyer's its arrival. The signed strings
//! are in [`token`]; where a buyer stands, worked out from one read of the line, in [`line`].

pub mod line;
mod line_id;
pub mod token;

use std::sync::Arc;
use std::time::Duration;

use moka::future::Cache;
use redis::{AsyncCommands, RedisResult, Value};
use sha2::{Digest, Sha256};

use self::line::{Line, Stand, Standing};
pub use self::line_id::{LineId, Subject};
use self::token::{Refused, Signer};
use crate::challenge::Spent;
use crate::domain::{SaleId, UserId};
use crate::purchase::Admitted;
use crate::redis::Keyspace;
use crate::redis::keys::{LineKeys, SaleKeys, group_sales_key};
use crate::redis::lua::{self, unexpected_reply};

/// How often one instance reads a polled sale's line (and admission may move), at most.
pub const TICK: Duration = Duration::from_millis(200);

/// Admitted buyers who have not bought and whose window is open are at most
/// `ceil(stock left × FACTOR)`: enough that buyers who drop out do not leave stock unsold for a
/// window's length, few enough that a crowd is not let in to find the sale sold out.
pub const FACTOR: f64 = 2.0;

/// Most lines (sales' and drops') and queued sales one instance keeps.
const MAX_SALES: u64 = 10_000;

/// Most sizes of a drop whose stock its line sums (a drop has at most 64).
const MAX_SIZES: usize = 256;

/// How long this instance remembers that a sale is queued (a re-seed can add or drop a queue;
/// until then a buy without a token is refused in-process, after it by `lua/buy.lua`).
const QUEUED_MEMORY: Duration = Duration::from_secs(60);

/// Highest admission rate a sale may have, buyers per second.
pub const MAX_RATE: u32 = 100_000;

/// A line read failed; shared by every request that waited for it.
pub type LineError = Arc<redis::RedisError>;

/// Why a join or a poll has no standing to give.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("the sale has no waiting room")]
    NotQueued,
    #[error("no such sale")]
    UnknownSale,
    #[error("the waiting room is not open yet")]
    NotOpen,
    #[error("the buyer has not joined the waiting room")]
    NotInQueue,
    #[error("the sale has ended")]
    Ended,
    #[error("no admission key: set SECKILL_ADMISSION_SECRET or SECKILL_ADMIN_TOKEN")]
    Disabled,
    #[error("the sale asks a proof of work and the join carried none")]
    ChallengeRequired,
    #[error("the proof of work's solution was spent before")]
    ChallengeReplayed,
    #[error(transparent)]
    Redis(#[from] LineError),
}

impl From<redis::RedisError> for QueueError {
    fn from(err: redis::RedisError) -> Self {
        Self::Redis(Arc::new(err))
    }
}

/// A buyer's standing with what it carries: the ticket for the next poll, the token once admitted.
#[derive(Debug, Clone)]
pub struct Answer {
    pub standing: Standing,
    /// The ticket to send with the next poll.
    pub ticket: String,
    /// The admission token, once admitted.
    pub admission: Option<String>,
}

/// The waiting rooms of one instance: their lines as last read, and the admission key.
#[derive(Clone)]
pub struct Admission {
    redis: Keyspace,
    signer: Option<Signer>,
    /// Line tag ([`LineId::tag`]) -> its line, read at most once per [`TICK`] (concurrent askers
    /// wait for the one read); `None`: the sale or drop has no line (or is not seeded).
    lines: Cache<Box<str>, Option<Arc<Line>>>,
    /// Sales known to be queued.
    queued: moka::sync::Cache<Box<str>, ()>,
}

impl Admission {
    /// The waiting rooms under `redis`'s prefix, signing with `key` (`None`: queued sales cannot
    /// be joined, and nobody can buy in them).
    pub fn new(redis: Keyspace, key: Option<&[u8]>) -> Self {
        Self {
            redis,
            signer: key.map(Signer::new),
            lines: Cache::builder().max_capacity(MAX_SALES).time_to_live(TICK).build(),
            queued: moka::sync::Cache::builder().max_capacity(MAX_SALES).time_to_live(QUEUED_MEMORY).build(),
        }
    }

    /// Joins `buyer` to the line (again: the same place) and tells its standing, spending
    /// `solution` (the proof of work `crate::challenge` verified) in the same call; and whether
    /// that solution was spent before by a buyer who has a place (its own join sent again, whose
    /// answer was lost: the place it has, nothing spent). A solution spent before by a buyer
    /// without a place is [`QueueError::ChallengeReplayed`].
    pub async fn join(
        &self,
        id: &LineId,
        buyer: &UserId,
        solution: Option<&Spent>,
    ) -> Result<(Answer, bool), QueueError> {
        let signer = self.signer.as_ref().ok_or(QueueError::Disabled)?;
        let (place, replayed) = self.place(id, buyer, Mode::Join(solution)).await?;
        let line = self.line(id).await?;
        Ok((self.answer(signer, &line, id, buyer, place), replayed))
    }

    /// The standing of `buyer` from its `ticket` alone (no Redis call beyond the instance's read
    /// of the line), or `None` when the ticket cannot tell: none, not the buyer's, or a
    /// pre-queue ticket after the start ([`Admission::ask`] then looks the place up).
    pub async fn from_ticket(&self, id: &LineId, buyer: &UserId, ticket: &str) -> Result<Option<Answer>, QueueError> {
        let signer = self.signer.as_ref().ok_or(QueueError::Disabled)?;
        let line = self.line(id).await?;
        let Some(place) = signer.place_of(ticket, id.subject(), &line.seed, buyer) else { return Ok(None) };
        let place = match place {
            0 if line.started() => return Ok(None),
            0 => None,
            place => Some(place),
        };
        Ok(Some(self.answer(signer, &line, id, buyer, place)))
    }

    /// The standing of `buyer`, its place looked up in Redis.
    pub async fn ask(&self, id: &LineId, buyer: &UserId) -> Result<Answer, QueueError> {
        let signer = self.signer.as_ref().ok_or(QueueError::Disabled)?;
        let line = self.line(id).await?;
        let (place, _) = self.place(id, buyer, Mode::Ask).await?;
        Ok(self.answer(signer, &line, id, buyer, place))
    }

    /// The admission an admission token (`Seckill-Admission`) gives `buyer` in `sale` (a sale's
    /// token, or its drop's for a size of a drop), checked in-process with one HMAC: `Ok(None)`
    /// for a sale this instance does not know to be queued and no token (`lua/buy.lua` then
    /// refuses it if the sale is queued, a place of the wrong line, and an expired one by Redis
    /// time, the clock the line admits by).
    pub fn admitted(&self, sale: &SaleId, buyer: &UserId, token: Option<&str>) -> Result<Option<Admitted>, Refused> {
        let Some(token) = token else {
            return if self.queued.contains_key(sale.as_str()) { Err(Refused::Missing) } else { Ok(None) };
        };
        let signer = self.signer.as_ref().ok_or(Refused::Forged)?;
        signer.admitted(token, sale, buyer).map(Some)
    }

    /// Remembers that `sale` is queued (`lua/buy.lua` said so).
    pub fn learn_queued(&self, sale: &SaleId) {
        self.queued.insert(sale.as_str().into(), ());
    }

    /// [`Self::line`] for an answer that stands without it: `None` when the line is not queued,
    /// or cannot be read now (one budgeted warning line).
    pub async fn line_if_readable(&self, id: &LineId) -> Option<Arc<Line>> {
        match self.line(id).await {
            Ok(line) => Some(line),
            Err(QueueError::NotQueued) => None,
            Err(error) => {
                if let Some(suppressed) = crate::telemetry::dependency_failure_line(Some("redis")) {
                    tracing::warn!(%error, line = %id, suppressed, "the line could not be read: left out");
                }
                None
            }
        }
    }

    /// The line as this instance read it within the last [`TICK`], if it did and it has one (no
    /// Redis call).
    pub async fn cached_line(&self, id: &LineId) -> Option<Arc<Line>> {
        self.lines.get(id.tag().as_str()).await.flatten()
    }

    /// The line, read at most once per [`TICK`] by this instance.
    pub async fn line(&self, id: &LineId) -> Result<Arc<Line>, QueueError> {
        let line = self.lines.try_get_with(id.tag().into(), self.read_line(id)).await?;
        let line = line.ok_or(QueueError::NotQueued)?;
        if let LineId::Sale(sale) = id {
            self.learn_queued(sale);
        }
        Ok(line)
    }

    /// `lua/admit.lua`; `None` for a line that is not queued or not seeded. A drop's line sums its
    /// sizes' stocks, but a size the repair holds: their ids are read first (the group's set of
    /// sales, in the drop's slot).
    async fn read_line(&self, id: &LineId) -> RedisResult<Option<Arc<Line>>> {
        let prefix = self.redis.prefix();
        let (stocks, metas) = match id {
            LineId::Sale(sale) => (vec![SaleKeys::new(prefix, sale).stock], vec![]),
            LineId::Drop(drop) => {
                let sizes: Vec<String> = self.redis.conn().smembers(group_sales_key(prefix, drop.as_str())).await?;
                let mut sizes: Vec<SaleKeys> = sizes
                    .iter()
                    .filter_map(|size| SaleId::parse(size).ok())
                    .filter(|size| size.group() == Some(drop.as_str()))
                    .map(|size| SaleKeys::new(prefix, &size))
                    .collect();
                if sizes.is_empty() {
                    return Ok(None);
                }
                sizes.sort_unstable_by(|a, b| a.stock.cmp(&b.stock));
                sizes.truncate(MAX_SIZES);
                sizes.into_iter().map(|keys| (keys.stock, keys.meta)).unzip()
            }
        };
        let keys = id.keys(prefix);
        let mut call = lua::ADMIT.key(&keys.admitting(&stocks, &metas)[..]);
        call.arg(FACTOR).arg(TICK.as_millis() as u64).arg(metas.len());
        let reply: Value = lua::run(&call, &mut self.redis.conn()).await?;
        match reply {
            Value::Array(_) => Ok(Some(Arc::new(Line::from_reply(reply)?))),
            other => match text(&other)?.as_str() {
                "not_queued" | "unknown_sale" => Ok(None),
                word => Err(unexpected_reply("admit.lua", word)),
            },
        }
    }

    /// `lua/queue_join.lua`: the buyer's place (`None`: in the pre-queue), and whether a join's
    /// solution was spent before.
    async fn place(&self, id: &LineId, buyer: &UserId, mode: Mode<'_>) -> Result<(Option<u64>, bool), QueueError> {
        let keys = id.keys(self.redis.prefix());
        let mut call = lua::QUEUE_JOIN.key(&keys.joining()[..]);
        call.arg(buyer.as_str());
        match mode {
            Mode::Ask => call.arg("ask"),
            Mode::Join(None) => call.arg("join").arg("").arg(""),
            Mode::Join(Some(spent)) => call.arg("join").arg(&spent.nonce).arg(spent.expires_ms),
        };
        let reply: Value = lua::run(&call, &mut self.redis.conn()).await?;
        match &reply {
            Value::Array(parts) => {
                let words = parts.iter().map(text).collect::<Result<Vec<_>, _>>()?;
                let replayed = words.last().is_some_and(|w| w == "replayed");
                let words = &words[..words.len() - usize::from(replayed)];
                match words {
                    [head] if head == "prequeue" => Ok((None, replayed)),
                    [head, place] if head == "placed" => match place.parse() {
                        Ok(place) => Ok((Some(place), replayed)),
                        Err(_) => Err(unexpected_reply("queue_join.lua", &format!("{reply:?}")).into()),
                    },
                    _ => Err(unexpected_reply("queue_join.lua", &format!("{reply:?}")).into()),
                }
            }
            other => Err(match text(other)?.as_str() {
                "not_in_queue" => QueueError::NotInQueue,
                "queue_not_open" => QueueError::NotOpen,
                "ended" => QueueError::Ended,
                "not_queued" => QueueError::NotQueued,
                "unknown_sale" => QueueError::UnknownSale,
                "challenge_required" => QueueError::ChallengeRequired,
                "challenge_replayed" => QueueError::ChallengeReplayed,
                word => unexpected_reply("queue_join.lua", word).into(),
            }),
        }
    }

    fn answer(&self, signer: &Signer, line: &Line, id: &LineId, buyer: &UserId, place: Option<u64>) -> Answer {
        let standing = line.standing(place, spread(id.as_str(), buyer));
        let admission = match standing.stand {
            Stand::Admitted { expires_ms } => {
                Some(signer.admission(id.subject(), buyer, place.unwrap_or(0), expires_ms.max(0) as u64))
            }
            _ => None,
        };
        Answer { standing, ticket: signer.ticket(id.subject(), &line.seed, buyer, place.unwrap_or(0)), admission }
    }
}

/// What `lua/queue_join.lua` is asked.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// Where the buyer stands; writes nothing.
    Ask,
    /// Join, with the proof of work's solution to spend, if the sale asks one.
    Join(Option<&'a Spent>),
}

/// A script's status word.
fn text(value: &Value) -> RedisResult<String> {
    Ok(redis::from_redis_value_ref(value)?)
}

/// The buyer's own share of a second, the same on every instance (pre-queue buyers come back
/// at the start spread over one second).
fn spread(line: &str, buyer: &UserId) -> f64 {
    let digest = Sha256::new().chain_update(line).chain_update([0]).chain_update(buyer.as_str()).finalize();
    f64::from(u16::from_be_bytes([digest[0], digest[1]])) / 65_536.0
}

/// A new shuffle seed: 32 random bytes (Redis holds them as 64 hex digits).
pub fn draw_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("the operating system's random source");
    seed
}

/// The shuffle seed a line's state keeps in Redis (a queued sale's, or a drop's line's): `None`
/// when it keeps none.
pub async fn kept_seed(redis: &Keyspace, line: &LineKeys) -> RedisResult<Option<[u8; 32]>> {
    let seed: Option<String> = redis.conn().hget(&line.queue.state, "seed").await?;
    Ok(seed.and_then(|seed| <[u8; 32]>::try_from(hex::decode(seed).ok()?).ok()))
}

/// The seed's public commitment: SHA-256 of its 64 hex digits, in hex
/// (`printf %s <seed> | sha256sum`).
pub fn commitment(seed: &str) -> String {
    hex::encode(Sha256::digest(seed.as_bytes()))
}
