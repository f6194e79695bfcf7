//! A line's waiting room (`crate::shop::Shop::join`, `standing`), a queued sale's or a drop's:
//! `POST /sales/{sale_id}/queue` (`POST /drops/{drop_id}/queue`) joins, `GET …/queue` asks where
//! the buyer stands; both hand out the ticket for the next poll and, once admitted, the admission
//! token `POST /buy` wants (a drop's buys any size of the drop).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::{IntoParams, ToSchema};

use super::order::OrderQuery;
use super::responses::{BadBuyerQuery, BuyerToken, RateLimited, SaleRetired, UnknownSale};
use super::{drop_line_of, sale_of};
use crate::domain::ms_to_time;
use crate::http::AppState;
use crate::http::buyer::Buyer;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{Limited, LineId, QueueAnswer as Answer, Stand};

/// Where the buyer stands.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QueueState {
    /// Joined before the start: places are drawn at `starts_at`.
    Prequeue,
    /// In line, not yet admitted.
    Waiting,
    /// Admitted: `admission` lets this buyer buy until `admission_expires_at`.
    Admitted,
    /// Not admitted, and the sale has no stock left; admission resumes if units come back.
    SoldOut,
    /// The sale has ended, or the buyer's admission lapsed unused (there is no second one).
    Closed,
}

/// A buyer's standing in a queued sale's line.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueueView {
    pub state: QueueState,
    /// The buyer's place in line, 1 = first (`null` in the pre-queue); it never changes.
    pub position: Option<u64>,
    /// Buyers before this one not yet admitted (`null` in the pre-queue).
    pub ahead: Option<u64>,
    /// Seconds to admission at the sale's rate, if admission does not pause (`null` in the
    /// pre-queue, 0 once admitted).
    pub wait_s: Option<u64>,
    /// When to ask again, in seconds.
    pub refresh_after_s: f64,
    /// The Redis server's clock now.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub server_time: OffsetDateTime,
    /// Send it back as `ticket` with the next `GET`: that poll is answered without Redis.
    pub ticket: String,
    /// Once admitted: the `Seckill-Admission` header of `POST /buy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<String>,
    /// Once admitted: until when `admission` is valid.
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub admission_expires_at: Option<OffsetDateTime>,
}

impl From<Answer> for QueueView {
    fn from(Answer { standing, ticket, admission }: Answer) -> Self {
        let (state, expires) = match standing.stand {
            Stand::Prequeue => (QueueState::Prequeue, None),
            Stand::Waiting => (QueueState::Waiting, None),
            Stand::Admitted { expires_ms } => (QueueState::Admitted, Some(ms_to_time(expires_ms))),
            Stand::SoldOut => (QueueState::SoldOut, None),
            Stand::Closed => (QueueState::Closed, None),
        };
        Self {
            state,
            position: standing.position,
            ahead: standing.ahead,
            wait_s: standing.wait_s,
            refresh_after_s: (standing.refresh_after_s * 1000.0).round() / 1000.0,
            server_time: ms_to_time(standing.server_time_ms),
            ticket,
            admission,
            admission_expires_at: expires,
        }
    }
}

/// Whose standing, and the ticket of the last answer.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct QueueQuery {
    /// The buyer, as for `GET /sales/{sale_id}/order`: required with `SECKILL_AUTH=none`; with
    /// `jwt` the token's, and another user is refused (403 `user_mismatch`).
    #[param(min_length = 1, max_length = 128)]
    user_id: Option<String>,
    /// The `ticket` of the buyer's last answer: with it the answer comes from this instance's
    /// view of the line, without Redis and without the rate limits.
    #[param(max_length = 128)]
    ticket: Option<String>,
}

/// Joins the sale's waiting room: from `queue.opens_at` to `starts_at` the pre-queue (no
/// places yet; at the start they are drawn by the published seed), after it the end of the
/// line. Joining again, from any tab, device or instance, keeps the buyer's one place. The buyer
/// as for `GET …/order`; shares `POST /buy`'s rate limits. A sale that asks a proof of work
/// (`challenge` in `GET /sales/{sale_id}`) needs a solution of `GET /sales/{sale_id}/challenge`
/// in the `Seckill-Challenge` header, each usable once.
#[utoipa::path(
    post,
    path = "/sales/{sale_id}/queue",
    tag = "waiting room",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "In the waiting room: where the buyer stands", body = QueueView),
        BadBuyerQuery,
        BuyerToken,
        (status = 403, description = "`queue_not_open`: before `queue.opens_at`; `sale_ended`; `user_mismatch`; \
            `challenge_required`: the sale asks a proof of work and the request has no `Seckill-Challenge` header; \
            `challenge_failed`: its solution is refused (malformed, forged, expired, another sale's, buyer's or client \
            address's, wrong, or used before: each join spends one)", body = ErrorBody),
        UnknownSale,
        (status = 409, description = "`not_queued`: the sale has no waiting room (buy at once); `drop_line`: the sale \
            is a size of a drop whose one line admits to every size (`POST /drops/{drop_id}/queue`)", body = ErrorBody),
        SaleRetired,
        RateLimited,
        (status = 503, description = "`unavailable`: Redis is unreachable; `admission_disabled`: no admission key is \
            configured", body = ErrorBody),
    )
)]
pub async fn join(
    req: HttpRequest,
    buyer: Buyer,
    sale_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let line = sale_of(&sale_id).map(LineId::Sale);
    join_line(req, buyer, line, query.into_inner(), state).await
}

/// Joins the drop's one line, for every size of the drop: as `POST /sales/{sale_id}/queue`, with
/// the drop's waiting room and proof of work (one solution per join, whatever the sizes bought).
/// Once admitted, the admission token buys any size `<drop_id>.<size>` with `POST /buy`, within
/// the drop's `per_buyer` and once per size.
#[utoipa::path(
    post,
    path = "/drops/{drop_id}/queue",
    tag = "waiting room",
    params(("drop_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$"), OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "In the drop's line: where the buyer stands", body = QueueView),
        BadBuyerQuery,
        BuyerToken,
        (status = 403, description = "`queue_not_open`; `sale_ended`: the drop's line has ended; `user_mismatch`; \
            `challenge_required`; `challenge_failed` (as for a sale; a challenge of `GET /drops/{drop_id}/challenge`)",
            body = ErrorBody),
        (status = 404, description = "`unknown_drop`: no size of this drop is seeded", body = ErrorBody),
        (status = 409, description = "`not_queued`: the drop has no line (buy each size at once)", body = ErrorBody),
        RateLimited,
        (status = 503, description = "`unavailable`; `admission_disabled`", body = ErrorBody),
    )
)]
pub async fn drop_join(
    req: HttpRequest,
    buyer: Buyer,
    drop_id: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let line = drop_line_of(&drop_id);
    join_line(req, buyer, line, query.into_inner(), state).await
}

async fn join_line(
    req: HttpRequest,
    buyer: Buyer,
    line: Result<LineId, ApiError>,
    query: OrderQuery,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (outcome, reported) = match buyer.named(query.user_id).and_then(|u| Ok((u, line?))) {
        Err(refused) => (Err(refused), None),
        Ok((user, line)) => {
            let proof = super::challenge::solution_of(&req);
            let Limited { outcome, reported } = state.shop.join(&line, &user, state.clients.of(&req), proof).await;
            (outcome.map(answer_of).map_err(ApiError::from), reported)
        }
    };
    state.shop.metrics().queue_request("join", outcome_label(&outcome));
    state.rate_limit.respond(reported, outcome)
}

/// Where the buyer stands in the sale's line. With the last answer's `ticket` the answer comes
/// from this instance's view of the line (read from Redis at most every 200 ms, whatever the
/// number of pollers) and skips the rate limits; without one, or with a pre-queue ticket after
/// the start, the place is looked up in Redis under `POST /buy`'s rate limits. Poll after
/// `refresh_after_s`.
#[utoipa::path(
    get,
    path = "/sales/{sale_id}/queue",
    tag = "waiting room",
    params(("sale_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`, or `<group>.<name>`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)?$"), QueueQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "Where the buyer stands", body = QueueView),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
        BuyerToken,
        (status = 403, description = "`user_mismatch`; `sale_ended`", body = ErrorBody),
        (status = 404, description = "`unknown_sale`; `not_in_queue`: the buyer never joined", body = ErrorBody),
        (status = 409, description = "`not_queued`: the sale has no waiting room; `drop_line`: the sale is a size of a \
            drop with a line (`GET /drops/{drop_id}/queue`)", body = ErrorBody),
        SaleRetired,
        (status = 429, description = "`rate_limited` (lookups without a ticket only)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds until a request can be admitted"))),
        (status = 503, description = "`unavailable`; `admission_disabled`", body = ErrorBody),
    )
)]
pub async fn standing(
    req: HttpRequest,
    buyer: Buyer,
    sale_id: web::Path<String>,
    query: web::Query<QueueQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let line = sale_of(&sale_id).map(LineId::Sale);
    line_standing(req, buyer, line, query.into_inner(), state).await
}

/// Where the buyer stands in the drop's line: as `GET /sales/{sale_id}/queue`.
#[utoipa::path(
    get,
    path = "/drops/{drop_id}/queue",
    tag = "waiting room",
    params(("drop_id" = String, Path, description = "1-64 characters of `[A-Za-z0-9_-]`",
        min_length = 1, max_length = 64, pattern = "^[A-Za-z0-9_-]+$"), QueueQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "Where the buyer stands", body = QueueView),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
        BuyerToken,
        (status = 403, description = "`user_mismatch`; `sale_ended`", body = ErrorBody),
        (status = 404, description = "`unknown_drop`; `not_in_queue`: the buyer never joined", body = ErrorBody),
        (status = 409, description = "`not_queued`: the drop has no line", body = ErrorBody),
        (status = 429, description = "`rate_limited` (lookups without a ticket only)", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds until a request can be admitted"))),
        (status = 503, description = "`unavailable`; `admission_disabled`", body = ErrorBody),
    )
)]
pub async fn drop_standing(
    req: HttpRequest,
    buyer: Buyer,
    drop_id: web::Path<String>,
    query: web::Query<QueueQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let line = drop_line_of(&drop_id);
    line_standing(req, buyer, line, query.into_inner(), state).await
}

async fn line_standing(
    req: HttpRequest,
    buyer: Buyer,
    line: Result<LineId, ApiError>,
    QueueQuery { user_id, ticket }: QueueQuery,
    state: web::Data<AppState>,
) -> HttpResponse {
    // The request's own fields first (400 / 401 / 403 whatever the line), then the line.
    let asked = buyer.named(user_id).and_then(|user| {
        if ticket.as_ref().is_some_and(|t| t.len() > MAX_TICKET_BYTES) {
            return Err(ApiError::InvalidRequest(format!("ticket must be at most {MAX_TICKET_BYTES} bytes")));
        }
        Ok((user, line?))
    });
    let (outcome, reported) = match asked {
        Err(refused) => (Err(refused), None),
        Ok((user, line)) => {
            let client = state.clients.of(&req);
            let Limited { outcome, reported } = state.shop.standing(&line, &user, client, ticket.as_deref()).await;
            (outcome.map(answer_of).map_err(ApiError::from), reported)
        }
    };
    state.shop.metrics().queue_request("ask", outcome_label(&outcome));
    state.rate_limit.respond(reported, outcome)
}

/// The longest ticket taken (they are about 60 bytes); the document says the same.
const MAX_TICKET_BYTES: usize = 128;

fn answer_of(answer: Answer) -> HttpResponse {
    HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(QueueView::from(answer))
}

/// The `outcome` label of `seckill_queue_requests_total`: the state answered, or the error code.
fn outcome_label(outcome: &Result<HttpResponse, ApiError>) -> &'static str {
    match outcome {
        Ok(_) => "answered",
        Err(err) => err.code(),
    }
}
