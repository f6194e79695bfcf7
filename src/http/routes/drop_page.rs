//! `GET /drop/{drop_id}`: the buyer's page of a drop, one HTML file (`drop_page.html`, its CSS and
//! JS inline) compiled into the binary. It holds no data: it polls the public `GET /drops/{drop_id}`
//! once a second and shows each size's state (in stock, sold out, paused, ended) and stock left,
//! each with a link to the size's buyer page (`/sale/<drop_id>.<size>`). A drop in draw mode
//! takes entries there instead, and shows the buyer's entry and its result (`draw_entry.js`).

use std::sync::LazyLock;

use actix_web::{HttpResponse, web};

use super::drops::DropPath;
use super::page::{InlinePage, with_buyer_kit, with_part};
use crate::domain::DropId;
use crate::http::error::{ApiError, ErrorBody};

pub(super) static PAGE: LazyLock<InlinePage> = LazyLock::new(|| {
    let page = with_buyer_kit(include_str!("drop_page.html"));
    InlinePage::new(with_part(page, "// @draw-entry\n", include_str!("draw_entry.js")))
});

/// The buyer page of a drop: each size's state and stock left. The drop need not exist yet: the
/// page says so until it is seeded.
#[utoipa::path(
    get,
    path = "/drop/{drop_id}",
    tag = "buyer",
    params(DropPath),
    responses(
        (status = 200, description = "The drop's buyer page", content_type = "text/html"),
        (status = 400, description = "`invalid_request`: a bad drop id", body = ErrorBody),
    )
)]
pub async fn page(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    DropId::parse(&path).map_err(ApiError::InvalidRequest)?;
    Ok(PAGE.response())
}
