//! `GET /admin`: the live sale page, one HTML file (`admin_page.html`, with its CSS and JS inline)
//! compiled into the binary. The page itself holds no data: it asks for an operator's token (or
//! the admin token), keeps it in the tab's `sessionStorage` only, and polls `GET /admin/sales`
//! with it once a second; `GET /admin/me` says who is signed in. A drop in draw mode gets a draw
//! view (`draw_live.js`: `GET /admin/drops/{drop_id}/draw/stats`).

use std::sync::LazyLock;

use actix_web::{HttpResponse, web};

use super::page::{InlinePage, with_part};
use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};

pub(super) static PAGE: LazyLock<InlinePage> = LazyLock::new(|| {
    InlinePage::new(with_part(include_str!("admin_page.html"), "// @draw-live\n", include_str!("draw_live.js")))
});

/// The live sale page: stock bars, sold / persisted / queued, purchases per second, limiter
/// refusals and Redis-Postgres disagreement alerts. The HTML needs no token; the data it polls
/// (`GET /admin/sales`) does.
#[utoipa::path(
    get,
    path = "/admin",
    tag = "admin",
    responses(
        (status = 200, description = "The live sale page", content_type = "text/html"),
        (status = 403, description = "`admin_disabled`: no admin credential is configured", body = ErrorBody),
    )
)]
pub async fn page(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.operators.is_empty() {
        return Err(ApiError::AdminDisabled);
    }
    Ok(PAGE.response())
}
