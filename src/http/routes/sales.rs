//! The buyer's side of a sale: `GET /sales/{sale_id}`, its public status (countdown on the Redis
//! server's clock, stock). The caller's own order in it is `super::order`'s.

use std::hash::{Hash, Hasher};

use actix_web::http::header::{self, EntityTag, IfNoneMatch};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::responses::{RateLimited, UnknownSale};
use super::sale_of;
use crate::domain::{SaleId, ms_to_time};
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{SaleState, Snapshot, seed_commitment};

/// Where a sale stands, on the Redis server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SalePhase {
    /// Before `starts_at`.
    Upcoming,
    /// Started, not ended, stock left.
    Open,
    /// Started, not ended, no stock left.
    SoldOut,
    /// Started, not ended, and paused by an operator: purchases are refused (`sale_paused`).
    Paused,
    /// At or after `ends_at`.
    Ended,
}

/// A sale's public status.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicSale {
    pub sale_id: String,
    pub state: SalePhase,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub starts_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ends_at: Option<OffsetDateTime>,
    pub stock_initial: i64,
    pub stock_left: i64,
    /// The Redis server's clock now (as this instance estimates it from its snapshot's `TIME`):
    /// count down on `local clock + (server_time - local clock at receipt)`.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub server_time: OffsetDateTime,
    /// A queued sale's waiting room (`POST /sales/{sale_id}/queue`); absent for a sale without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<PublicQueue>,
    /// Units one buyer may buy (`POST /buy`'s `quantity`), in the sale or across its group.
    pub per_buyer: u32,
    /// A sale of a group (a product's sizes): the group, whose sales share `per_buyer`; absent
    /// for a sale without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<PublicGroup>,
    /// The proof of work the sale asks before a join (or, without a waiting room, a purchase):
    /// `GET /sales/{sale_id}/challenge`; absent for a sale that asks none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<PublicChallenge>,
}

/// A sale's proof of work (docs/waiting-room.md, "Proof of work").
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicChallenge {
    /// The tries (PBKDF2-SHA-256 derivations) a solve takes on average at the sale's own cost; a
    /// client address that took many challenges in the last minute is asked more.
    pub cost: u32,
}

/// A sale's group, as the buyer page shows its sizes.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicGroup {
    /// The group's name (the sale id's part before the `.`).
    pub name: String,
    /// The group's sales, by id (each one's status is `GET /sales/{sale_id}`), at most 100.
    pub sales: Vec<String>,
}

/// A queued sale's waiting room, and what lets anyone check its shuffle (docs/waiting-room.md).
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicQueue {
    /// When the pre-queue opened (or opens).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub opens_at: OffsetDateTime,
    /// Buyers admitted per second.
    pub rate: u32,
    /// SHA-256 of the shuffle seed's 64 hex digits, public from the seed on.
    pub seed_sha256: String,
    /// The shuffle seed, from `starts_at` on: a pre-queue buyer's place is the rank of the first
    /// 13 hex digits of SHA-1(seed ‖ 0x00 ‖ user id) among the pre-queue's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

impl PublicQueue {
    /// A line as the public reads it: the seed's commitment always, the seed itself once `started`.
    pub(super) fn of(opens_at_ms: i64, rate: u32, seed: &str, started: bool) -> Self {
        Self {
            opens_at: ms_to_time(opens_at_ms),
            rate,
            seed_sha256: seed_commitment(seed),
            seed: started.then(|| seed.to_owned()),
        }
    }
}

impl SalePhase {
    /// Where a sale in `state` stands at `now_ms` (the Redis server's clock).
    pub(super) fn at(state: &SaleState, now_ms: i64) -> Self {
        match (state.starts_at_ms, state.ends_at_ms) {
            (Some(start), _) if now_ms < start => Self::Upcoming,
            (_, Some(end)) if now_ms >= end => Self::Ended,
            _ if state.paused.is_some() => Self::Paused,
            _ if state.stock_left <= 0 => Self::SoldOut,
            _ => Self::Open,
        }
    }
}

impl PublicSale {
    fn of(sale: &SaleId, snapshot: &Snapshot) -> Self {
        let state = &snapshot.state;
        let now = snapshot.server_time_ms();
        let phase = SalePhase::at(state, now);
        Self {
            sale_id: sale.to_string(),
            state: phase,
            starts_at: state.starts_at_ms.map(ms_to_time),
            ends_at: state.ends_at_ms.map(ms_to_time),
            stock_initial: state.stock_initial,
            stock_left: state.stock_left.max(0),
            server_time: ms_to_time(now),
            queue: state.queue.as_ref().map(|queue| {
                let started = state.starts_at_ms.is_some_and(|start| now >= start);
                PublicQueue::of(queue.opens_at_ms, queue.rate, &queue.seed, started)
            }),
            per_buyer: state.per_buyer,
            group: sale.group().map(|name| PublicGroup { name: name.to_owned(), sales: snapshot.group.clone() }),
            challenge: state.challenge_cost.map(|cost| PublicChallenge { cost }),
        }
    }

    /// A weak validator of everything but `server_time` (which moves on every answer).
    fn etag(&self) -> EntityTag {
        let mut hasher = fnv::FnvHasher::default();
        (&self.sale_id, self.state, self.starts_at, self.ends_at, self.stock_initial, self.stock_left)
            .hash(&mut hasher);
        if let Some(queue) = &self.queue {
            (queue.opens_at, queue.rate, &queue.seed_sha256, &queue.seed).hash(&mut hasher);
        }
        (self.per_buyer, self.challenge.as_ref().map(|c| c.cost)).hash(&mut hasher);
        if let Some(group) = &self.group {
            (&group.name, &group.sales).hash(&mut hasher);
        }
        EntityTag::new_weak(format!("{:016x}", hasher.finish()))
    }
}

/// The public status of a sale, from this instance's snapshot (at most 200 ms old; read again at
/// once when the sale sells out here). Under a polling crowd Redis sees a bounded number of
/// reads per instance and second whatever the request rate (docs/http-api.md). Not rate-limited,
/// but an id that names no sale counts against the client's quota of unknown sales (429 beyond it).
#[utoipa::path(
    get,
    path = "/sales/{sale_id}",
    tag = "purchase",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$")),
    responses(
        (status = 200, description = "The sale's status", body = PublicSale,
            headers(("ETag" = String, description = "Weak validator of everything but `server_time`"),
                    ("Cache-Control" = String, description = "`public, max-age=1`"))),
        (status = 304, description = "Unchanged since the `If-None-Match` validator"),
        (status = 400, description = "`invalid_request`: the sale id is malformed", body = ErrorBody),
        UnknownSale,
        (status = 410, description = "`sale_retired`: the sale is over and was retired", body = ErrorBody),
        RateLimited,
        (status = 503, description = "`unavailable`: Redis is unreachable", body = ErrorBody),
    )
)]
pub async fn sale(
    req: HttpRequest,
    sale_id: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let sale = sale_of(&sale_id)?;
    let snapshot = state.shop.sale(&sale, state.clients.of(&req)).await?;
    let body = PublicSale::of(&sale, &snapshot);
    let etag = body.etag();
    let unchanged = match req.get_header::<IfNoneMatch>() {
        Some(IfNoneMatch::Any) => true,
        Some(IfNoneMatch::Items(tags)) => tags.iter().any(|tag| tag.weak_eq(&etag)),
        None => false,
    };
    let mut response = if unchanged { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    response.insert_header((header::CACHE_CONTROL, "public, max-age=1")).insert_header(header::ETag(etag));
    Ok(if unchanged { response.finish() } else { response.json(body) })
}
