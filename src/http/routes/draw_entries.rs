//! A draw's entries (`crate::shop::Shop::enter_draw`, `draw_entry`): `POST /drops/{drop_id}/entries`
//! enters the buyer once while entries are open, `GET /drops/{drop_id}/entry` reads its entry back;
//! a drop's seed in draw mode (`draw` of `PUT /admin/drops/{drop_id}`) and the draw's public view.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::drops::{DropPath, drop_of};
use super::object::Object;
use super::order::OrderQuery;
use super::responses::{BuyerToken, JsonBody, RateLimited};
use super::user_id;
use crate::domain::{DropId, ms_to_time};
use crate::http::AppState;
use crate::http::buyer::Buyer;
use crate::http::error::{ApiError, ErrorBody};
use crate::shop::{DrawEntry, DrawInfo, DrawOrder, DrawResult, EntryOrder, Limited};

/// A drop's draw, as its seed asks it: entries for a window instead of purchases. Unknown
/// fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DrawRequest {
    /// When entries open (RFC 3339).
    #[serde(deserialize_with = "super::seed::instant")]
    #[schema(value_type = String, format = DateTime)]
    opens_at: OffsetDateTime,
    /// When entries close (RFC 3339), after `opens_at`.
    #[serde(deserialize_with = "super::seed::instant")]
    #[schema(value_type = String, format = DateTime)]
    closes_at: OffsetDateTime,
    /// Places on the waitlist for units that come back (0 to 10,000,000); default: the drop's stock.
    #[schema(value_type = Option<u32>, minimum = 0, maximum = 10_000_000)]
    #[serde(default, deserialize_with = "super::seed::integral_opt")]
    waitlist: Option<i64>,
}

impl DrawRequest {
    /// The use case's order.
    pub fn order(Object(request): Object<Self>) -> DrawOrder {
        DrawOrder { opens_at: request.opens_at, closes_at: request.closes_at, waitlist: request.waitlist }
    }
}

/// Where a draw's entries stand.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntriesState {
    /// Before `opens_at`.
    Upcoming,
    /// Taking entries.
    Open,
    /// After `closes_at`, or the draw has started.
    Closed,
}

/// A drop's draw, as the public and the operators read it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrawView {
    /// SHA-256 of the secret seed's 64 hex digits (`printf %s <seed> | sha256sum`), public before
    /// entries open; the seed is revealed after the draw.
    pub commitment: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub opens_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub closes_at: OffsetDateTime,
    pub state: EntriesState,
    /// Entries accepted so far.
    pub entries: u64,
    /// `drawn` once the draw has run (its record: `GET /drops/{drop_id}/draw`); absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "drawn")]
    pub draw_state: Option<&'static str>,
    /// The secret seed's 64 hex digits, revealed once drawn (public drop only); absent before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
}

impl DrawView {
    /// The draw as it stands at `now_ms` (the Redis server's clock).
    pub fn at(draw: DrawInfo, now_ms: i64) -> Self {
        let state = match draw.state.as_str() {
            _ if now_ms < draw.opens_at_ms => EntriesState::Upcoming,
            "open" if now_ms < draw.closes_at_ms => EntriesState::Open,
            _ => EntriesState::Closed,
        };
        Self {
            commitment: draw.commitment,
            opens_at: ms_to_time(draw.opens_at_ms),
            closes_at: ms_to_time(draw.closes_at_ms),
            state,
            entries: draw.entries,
            draw_state: (draw.state == "drawn").then_some("drawn"),
            seed: draw.seed,
        }
    }
}

/// An entry, as a JSON object. Unknown fields are refused.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EntryRequest {
    /// The sizes wanted, best first: 1 to 6 distinct size names of the drop (`42` for the sale
    /// `<drop_id>.42`).
    #[schema(min_items = 1, max_items = 6, example = json!(["42", "43"]))]
    sizes: Vec<String>,
    /// Units wanted, 1 (the default) to the drop's `per_buyer`.
    #[schema(value_type = Option<u32>, minimum = 1, maximum = 100, default = 1)]
    #[serde(default, deserialize_with = "super::seed::integral_opt")]
    quantity: Option<i64>,
    /// The buyer, as `POST /buy`'s `user_id`.
    #[schema(schema_with = user_id::schema)]
    #[serde(default)]
    user_id: Option<String>,
}

/// A buyer's entry, and its result once the draw is drawn (`state`: `entered` before; then `won`
/// with `size`, `order_id` and `pay_by`, `waitlisted` with `position`, or `lost`; a waitlisted
/// entrant offered units that came back is `offered`, with `position` and the reservation's
/// `size`, `order_id` and `pay_by`).
#[derive(Debug, Serialize, ToSchema)]
pub struct EntryView {
    pub drop_id: String,
    /// The sizes wanted, best first.
    pub sizes: Vec<String>,
    /// Units wanted (won: the units of the reservation).
    pub quantity: u32,
    /// When the entry was accepted (the Redis server's clock).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub entered_at: OffsetDateTime,
    /// `entered`, `won`, `waitlisted`, `offered` or `lost`.
    #[schema(example = "entered")]
    pub state: &'static str,
    /// Won or offered: the size of the reservation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// Won or offered: the reservation (`GET /sales/<drop_id>.<size>/order` reads it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<uuid::Uuid>,
    /// Won or offered: the reservation's payment deadline (absent in the moment before Redis made it).
    #[serde(skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub pay_by: Option<OffsetDateTime>,
    /// Waitlisted or offered: the place on the waitlist (1 first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
}

impl EntryView {
    fn of(drop: &DropId, entry: DrawEntry) -> Self {
        Self {
            drop_id: drop.to_string(),
            sizes: entry.sizes,
            quantity: entry.quantity,
            entered_at: ms_to_time(entry.entered_at_ms),
            state: "entered",
            size: None,
            order_id: None,
            pay_by: None,
            position: None,
        }
    }

    fn with(self, result: Option<DrawResult>) -> Self {
        match result {
            None => self,
            Some(DrawResult::Won { size, quantity, order_id, pay_by }) => {
                Self { state: "won", size: Some(size), quantity, order_id: Some(order_id), pay_by, ..self }
            }
            Some(DrawResult::Waitlisted { position }) => Self { state: "waitlisted", position: Some(position), ..self },
            Some(DrawResult::Offered { position, size, quantity, order_id, pay_by }) => Self {
                state: "offered",
                position: Some(position),
                size: Some(size),
                quantity,
                order_id: Some(order_id),
                pay_by,
                ..self
            },
            Some(DrawResult::Lost) => Self { state: "lost", ..self },
        }
    }
}

/// Enters the buyer in the drop's draw, once, while its entries are open: ranked sizes and a
/// quantity. The buyer as for `POST /buy`; shares the drop line's join rate limits; a draw that
/// asks a proof of work needs a solution of `GET /drops/{drop_id}/challenge` in the
/// `Seckill-Challenge` header. An accepted entry reaches Postgres as surely as an order.
#[utoipa::path(
    post,
    path = "/drops/{drop_id}/entries",
    tag = "draw",
    params(DropPath),
    request_body = EntryRequest,
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 201, description = "Entered", body = EntryView),
        (status = 400, description = "`invalid_request`: a size not the drop's, named twice, none or over 6, a \
            quantity out of 1 to the drop's `per_buyer`, bad JSON; nothing is stored", body = ErrorBody),
        BuyerToken,
        (status = 403, description = "`user_mismatch`; `challenge_required`; `challenge_failed`", body = ErrorBody),
        (status = 404, description = "`unknown_drop`", body = ErrorBody),
        (status = 409, description = "`already_entered`: the buyer's entry is in `entry`; `entries_not_open`; \
            `entries_closed`; `not_a_draw`: the drop is not in draw mode", body = ErrorBody),
        JsonBody,
        RateLimited,
        (status = 503, description = "`unavailable`: Redis is unreachable or did not answer in time; an entry whose \
            call timed out may have been kept: enter again with the same body, 409 `already_entered` says it was (an \
            entry is answered so before any other check, the close included)", body = ErrorBody),
    )
)]
pub async fn enter(
    req: HttpRequest,
    buyer: Buyer,
    path: web::Path<String>,
    body: web::Json<Object<EntryRequest>>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let EntryRequest { sizes, quantity, user_id } = body.into_inner().0;
    let (outcome, reported) = match buyer.named(user_id).and_then(|user| Ok((user, drop_of(&path)?))) {
        Err(refused) => (Err(refused), None),
        Ok((user, drop)) => {
            let order = EntryOrder { sizes, quantity: quantity.unwrap_or(1) };
            let proof = super::challenge::solution_of(&req);
            let client = state.clients.of(&req);
            let Limited { outcome, reported } = state.shop.enter_draw(&drop, &user, order, client, proof).await;
            let created = |entry| HttpResponse::Created().json(EntryView::of(&drop, entry));
            (outcome.map(created).map_err(ApiError::from), reported)
        }
    };
    state.rate_limit.respond(reported, outcome)
}

/// The buyer's entry in the drop's draw.
#[utoipa::path(
    get,
    path = "/drops/{drop_id}/entry",
    tag = "draw",
    params(DropPath, OrderQuery),
    security((), ("bearer_jwt" = [])),
    responses(
        (status = 200, description = "The buyer's entry; once drawn, its result", body = EntryView),
        (status = 400, description = "`invalid_request`", body = ErrorBody),
        BuyerToken,
        (status = 403, description = "`user_mismatch`", body = ErrorBody),
        (status = 404, description = "`unknown_drop`; `no_entry`: the buyer has not entered", body = ErrorBody),
        (status = 409, description = "`not_a_draw`: the drop is not in draw mode", body = ErrorBody),
        RateLimited,
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn entry(
    req: HttpRequest,
    buyer: Buyer,
    path: web::Path<String>,
    query: web::Query<OrderQuery>,
    state: web::Data<AppState>,
) -> HttpResponse {
    let (outcome, reported) = match buyer.named(query.into_inner().user_id).and_then(|u| Ok((u, drop_of(&path)?))) {
        Err(refused) => (Err(refused), None),
        Ok((user, drop)) => {
            let Limited { outcome, reported } = state.shop.draw_entry(&drop, &user, state.clients.of(&req)).await;
            let found = |(entry, result)| {
                let view = EntryView::of(&drop, entry).with(result);
                HttpResponse::Ok().insert_header(("Cache-Control", "no-store")).json(view)
            };
            (outcome.map(found).map_err(ApiError::from), reported)
        }
    };
    state.rate_limit.respond(reported, outcome)
}
