//! A sale's proof of work (`crate::shop::Shop::challenge`): `GET /sales/{sale_id}/challenge`
//! hands out an ALTCHA PoW v2 challenge; its solution goes in the `Seckill-Challenge` header of
//! `POST /sales/{sale_id}/queue` (or of `POST /buy` in a sale without a waiting room).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::order::OrderQuery;
use super::responses::{BadBuyerQuery, BuyerToken, RateLimited, SaleRetired, UnknownSale};
use super::{drop_line_of, sale_of};
use crate::http::AppState;
use crate::http::buyer::Buyer;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{CHALLENGE_HEADER, IssuedChallenge, Limited, LineId};

/// A challenge to solve: ALTCHA's `parameters` and `signature` (what the ALTCHA widget and
/// libraries take), with what it asks.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChallengeView {
    /// ALTCHA PoW v2 parameters: `algorithm` (`PBKDF2/SHA-256`), `cost` (ALTCHA's name for the
    /// PBKDF2 iterations of one try, not the sale's cost in tries),
    /// `nonce`, `salt`, `keyLength`, `keyPrefix` (the first half of the key to find),
    /// `keySignature`, `expiresAt` (Unix seconds) and `data` (the sale, buyer and client address it
    /// is bound to). Find the counter `c` from 0 up whose PBKDF2(password = nonce bytes ‖ c as 4
    /// big-endian bytes, salt bytes, cost, keyLength) starts with `keyPrefix`'s bytes
    /// (docs/waiting-room.md, "Solving it outside a browser"; `seckill solve` does it).
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
    /// The HMAC-SHA-256 of the parameters, the service's.
    pub signature: String,
    /// Tries (derivations) a solve takes on average, at most twice that: the sale's cost times
    /// `factor`.
    pub tries: u64,
    /// How many times the sale's cost this client address is asked, for the challenges it took in
    /// the last minute (docs/waiting-room.md, "Proof of work").
    pub factor: u32,
    /// Until when the challenge can be solved and used.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: OffsetDateTime,
}

/// A proof of work for the buyer in this sale, bound to the sale, the buyer and the client's
/// address, valid for `SECKILL_CHALLENGE_TTL`. Solve it and send the ALTCHA payload (`{"challenge":
/// {"parameters", "signature"}, "solution": {"counter", "derivedKey"}}`, base64 JSON) in the
/// `Seckill-Challenge` header of `POST /sales/{sale_id}/queue` (or `POST /buy` in a sale without a
/// waiting room); each solution is spent once. The work grows for an address that took many
/// challenges in the last minute. The buyer as for `GET …/order`; shares `POST /buy`'s rate limits.
#[utoipa::path(
    get,
    path = "/sales/{sale_id}/challenge",
    tag = "waiting room",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "A challenge to solve", body = ChallengeView),
        BadBuyerQuery,
        BuyerToken,
        (status = 403, description = "`user_mismatch`", body = ErrorBody),
        UnknownSale,
        (status = 409, description = "`no_challenge`: the sale asks no proof of work", body = ErrorBody),
        SaleRetired,
        RateLimited,
        (status = 503, description = "`unavailable`: Redis is unreachable; `admission_disabled`: no key to sign \
            with is configured", body = ErrorBody),
    )
)]
pub async fn challenge(
    req: HttpRequest,
    buyer: Buyer,
    sale_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    issue(req, buyer, sale_of(&sale_id).map(LineId::Sale), query.into_inner(), state).await
}

/// A proof of work for the buyer at the drop's line: as `GET /sales/{sale_id}/challenge`, bound
/// to the drop's line (`data.sale` is `drop:<drop_id>`); its solution goes in the
/// `Seckill-Challenge` header of `POST /drops/{drop_id}/queue`: one per join, whatever the sizes.
#[utoipa::path(
    get,
    path = "/drops/{drop_id}/challenge",
    tag = "waiting room",
    params(("drop_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "A challenge to solve", body = ChallengeView),
        BadBuyerQuery,
        BuyerToken,
        (status = 403, description = "`user_mismatch`", body = ErrorBody),
        (status = 404, description = "`unknown_drop`", body = ErrorBody),
        (status = 409, description = "`not_queued`: the drop has no line; `no_challenge`: its line asks no proof of \
            work", body = ErrorBody),
        RateLimited,
        (status = 503, description = "`unavailable`; `admission_disabled`", body = ErrorBody),
    )
)]
pub async fn drop_challenge(
    req: HttpRequest,
    buyer: Buyer,
    drop_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    issue(req, buyer, drop_line_of(&drop_id), query.into_inner(), state).await
}

async fn issue(
    req: HttpRequest,
    buyer: Buyer,
    line: Result<LineId, ApiError>,
    query: OrderQuery,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (outcome, reported) = match buyer.named(query.user_id).and_then(|u| Ok((u, line?))) {
        Err(refused) => (Err(refused), None),
        Ok((user, line)) => {
            let Limited { outcome, reported } = state.shop.challenge(&line, &user, state.clients.of(&req)).await;
            (outcome.map(answer_of).map_err(ApiError::from), reported)
        }
    };
    state.rate_limit.respond(reported, outcome)
}

fn answer_of(issued: IssuedChallenge) -> HttpResponse {
    let IssuedChallenge { challenge, tries, factor, .. } = issued;
    let expires_at = challenge.parameters.expires_at.unwrap_or(0);
    let view = ChallengeView {
        parameters: serde_json::to_value(&challenge.parameters).unwrap_or_default(),
        signature: challenge.signature.unwrap_or_default(),
        tries,
        factor,
        expires_at: OffsetDateTime::from_unix_timestamp(expires_at).unwrap_or(OffsetDateTime::UNIX_EPOCH),
    };
    HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(view)
}

/// The buyer page's proof-of-work solver, run as a Web Worker (the pages' Content-Security-Policy
/// allows workers from this origin only).
const WORKER: &str = include_str!("challenge_worker.js");

/// The buyer page's solver of a sale's proof of work: a Web Worker script that solves an ALTCHA
/// PoW v2 challenge of `GET /sales/{sale_id}/challenge` with WebCrypto's PBKDF2.
#[utoipa::path(
    get,
    path = "/challenge-worker.js",
    tag = "buyer",
    responses((status = 200, description = "The solver's JavaScript", content_type = "text/javascript")),
)]
pub async fn worker() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/javascript; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(WORKER)
}

/// The `Seckill-Challenge` header, if the request has one (one that is not text reads as empty:
/// refused as malformed).
pub(super) fn solution_of(req: &HttpRequest) -> Option<&str> {
    req.headers().get(CHALLENGE_HEADER).map(|value| value.to_str().unwrap_or(""))
}
