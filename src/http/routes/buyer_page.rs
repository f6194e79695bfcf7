//! `GET /` and `GET /sale/{sale_id}`: the buyer's page, one HTML file (`buyer_page.html`, with its
//! CSS and JS inline) compiled into the binary. It holds no data: it polls the public
//! `GET /sales/{sale_id}` once a second, counts down to the start on the server's clock, buys
//! with `POST /buy` and follows the order with `GET /sales/{sale_id}/order`. The buyer's token
//! (from a field or the URL fragment `#token=…`) stays in the tab's `sessionStorage`.

use std::sync::LazyLock;

use actix_web::{HttpResponse, web};

use super::admin::SalePath;
use super::page::{InlinePage, with_buyer_kit};
use crate::domain::SaleId;
use crate::http::error::{ApiError, ErrorBody};

pub(super) static PAGE: LazyLock<InlinePage> =
    LazyLock::new(|| InlinePage::new(with_buyer_kit(include_str!("buyer_page.html"))));

/// The buyer page for the sale named in its field (`demo` until changed).
#[utoipa::path(
    get,
    path = "/",
    tag = "buyer",
    responses((status = 200, description = "The buyer page; the sale id is typed into it (`demo` by default)",
        content_type = "text/html"))
)]
pub async fn home() -> HttpResponse {
    PAGE.response()
}

/// The buyer page for `sale_id`: countdown, stock left, the Buy button, then the order's status.
/// The sale need not exist yet: the page says so until it is seeded.
#[utoipa::path(
    get,
    path = "/sale/{sale_id}",
    tag = "buyer",
    params(SalePath),
    responses(
        (status = 200, description = "The buyer page for this sale", content_type = "text/html"),
        (status = 400, description = "`invalid_request`: a bad sale id", body = ErrorBody),
    )
)]
pub async fn sale(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    SaleId::parse(&path).map_err(ApiError::InvalidRequest)?;
    Ok(PAGE.response())
}
