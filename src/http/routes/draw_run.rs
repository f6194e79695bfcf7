//! The draw's run (`crate::shop::Shop::run_draw`, `draw_record`): `POST /admin/drops/{drop_id}/draw`
//! runs it now (early, or again after a crash), `GET /drops/{drop_id}/draw` publishes its record
//! once drawn and `GET /admin/drops/{drop_id}/draw/stats` counts it for the live page.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::AdminErrors;
use super::drops::{DropPath, UnknownDrop, drop_of};
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};
use crate::http::operators::{Operator, Viewer};
use crate::shop::{DrawStats, DrawSummary, DrawWinners};

/// What a draw's run gave out.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DrawRun {
    /// `drawn`.
    #[schema(example = "drawn")]
    pub state: String,
    /// Entries drawn.
    pub entries: u64,
    /// Entrants who won (each a reservation).
    pub won: u64,
    /// Entrants on the waitlist.
    pub waitlisted: u64,
    pub lost: u64,
    /// Units the winners' reservations hold.
    pub units_awarded: u64,
}

impl From<DrawSummary> for DrawRun {
    fn from(summary: DrawSummary) -> Self {
        let DrawSummary { entries, won, waitlisted, lost, units_awarded } = summary;
        Self { state: "drawn".into(), entries, won, waitlisted, lost, units_awarded }
    }
}

/// Runs the drop's draw now: its entries close at once (an early run), every accepted entry is
/// awaited in Postgres, the entries are ranked and allocated with the committed seed, the winners
/// get their reservations and the seed is revealed. A draw that stopped midway is finished with the
/// same results; a drawn draw answers its summary again and changes nothing. One audit entry
/// (`draw`). The automatic runner does the same once `closes_at` has passed.
#[utoipa::path(
    post,
    path = "/admin/drops/{drop_id}/draw",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    responses(
        // First: an entry below with the same status replaces its generic one.
        AdminErrors,
        (status = 200, description = "Drawn; what it gave out", body = DrawRun),
        UnknownDrop,
        (status = 409, description = "`not_a_draw`: the drop is not in draw mode; `draw_award_refused`: a \
            winner's size refused its reservation (ended, paused, retired): mend it and run again, the results \
            stand", body = ErrorBody),
        (status = 503, description = "`entries_queued`: accepted entries are still on their way to Postgres \
            (`Retry-After`); `unavailable`", body = ErrorBody),
    )
)]
pub async fn run(
    operator: Operator,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let summary = state.shop.run_draw(&drop, operator.actor()).await?;
    Ok(HttpResponse::Ok().json(DrawRun::from(summary)))
}

/// The draw's published record, once drawn: newline-delimited JSON, the draw line first (the
/// seed, its commitment, each size's stock, the limit, the waitlist's places), then every entry
/// and every result by pseudonym (docs/draw.md). `seckill draw verify` checks it.
#[utoipa::path(
    get,
    path = "/drops/{drop_id}/draw",
    tag = "draw",
    params(DropPath),
    responses(
        (status = 200, description = "The record", content((String = "application/x-ndjson"))),
        (status = 400, description = "`invalid_request`: the drop id is malformed", body = ErrorBody),
        UnknownDrop,
        (status = 409, description = "`not_a_draw`; `draw_not_revealed`: not drawn yet", body = ErrorBody),
        (status = 429, description = "`rate_limited`: too many requests naming unknown sales; \
            `too_many_draw_records`: this instance streams 16 records already, or one to this client \
            (`Retry-After: 5`)", body = ErrorBody),
        (status = 503, description = "`unavailable`", body = ErrorBody),
    )
)]
pub async fn record(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let chunks = state.shop.draw_record(&drop, state.clients.of(&req)).await?;
    let body = chunks.map_ok(web::Bytes::from).map_err(|err| {
        tracing::error!(error = %err, "a draw's record failed mid-way; its answer is cut short");
        actix_web::error::ErrorServiceUnavailable("record failed")
    });
    let mut answer = HttpResponse::Ok();
    answer.content_type("application/x-ndjson").insert_header((header::CACHE_CONTROL, "public, max-age=60"));
    Ok(super::streamed(&req, answer, body))
}

/// A draw's counts, for the live page: where it stands, its entries over the window, its results
/// and what became of the winners' reservations. Counts only, whatever the number of entries.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DrawCounts {
    pub drop_id: String,
    /// `upcoming` (before `opens_at`), `open`, `closed` (entries over, not drawn yet), `drawing`
    /// (the run has started: closed, results, awards) or `drawn` (the seed revealed).
    #[schema(example = "open")]
    pub phase: String,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub opens_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub closes_at: OffsetDateTime,
    /// Places on the waitlist.
    pub waitlist_places: u32,
    /// Entries stored in Postgres (an accepted entry reaches it within moments).
    pub entries: u64,
    /// Entries per equal slice of the window `[opens_at, closes_at]`: 24 counts, earliest first.
    pub entries_over_time: Vec<u64>,
    /// Entrants who won (each a reservation), once the results are drawn; 0 before.
    pub won: u64,
    /// Entrants on the waitlist.
    pub waitlisted: u64,
    pub lost: u64,
    /// Units the winners won.
    pub units_awarded: u64,
    /// The winners' orders in Postgres by status (a winner whose reservation is not stored yet is
    /// in none): the draw's conversions.
    pub winners: WinnerCounts,
    /// The waitlist's offers of units given back after the draw: the waitlisted entrants' orders
    /// in Postgres by status.
    pub offered: WinnerCounts,
}

/// The winners' orders by status.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WinnerCounts {
    /// Awaiting payment.
    pub reserved: u64,
    pub paid: u64,
    /// Not paid by the deadline.
    pub expired: u64,
    /// Cancelled by the buyer or an operator.
    pub cancelled: u64,
    pub refunded: u64,
}

impl DrawCounts {
    fn of(drop: String, stats: DrawStats) -> Self {
        let counts = |w: DrawWinners| WinnerCounts {
            reserved: w.reserved,
            paid: w.paid,
            expired: w.expired,
            cancelled: w.cancelled,
            refunded: w.refunded,
        };
        Self {
            drop_id: drop,
            phase: stats.phase.into(),
            opens_at: stats.opens_at,
            closes_at: stats.closes_at,
            waitlist_places: stats.waitlist_places,
            entries: stats.entries,
            entries_over_time: stats.entries_over_time,
            won: stats.won,
            waitlisted: stats.waitlisted,
            lost: stats.lost,
            units_awarded: stats.units_awarded,
            winners: counts(stats.winners),
            offered: counts(stats.offered),
        }
    }
}

/// The drop's draw in counts, for the live page (`GET /admin`): its phase, its entries over the
/// window, its results and its winners' orders by status. Read from Postgres, bounded whatever the
/// number of entries; a viewer may read it.
#[utoipa::path(
    get,
    path = "/admin/drops/{drop_id}/draw/stats",
    tag = "admin",
    params(DropPath),
    security(("bearer" = [])),
    responses(
        // First: an entry below with the same status replaces its generic one.
        AdminErrors,
        (status = 200, description = "The draw's counts", body = DrawCounts,
            headers(("Cache-Control" = String, description = "`no-store`"))),
        UnknownDrop,
        (status = 409, description = "`not_a_draw`: the drop is not in draw mode", body = ErrorBody),
        (status = 503, description = "`unavailable`: Postgres is unreachable", body = ErrorBody),
    )
)]
pub async fn stats(
    _viewer: Viewer,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let drop = drop_of(&path)?;
    let stats = state.shop.draw_stats(&drop).await?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(DrawCounts::of(drop.to_string(), stats)))
}
