//! `GET /favicon.ico`: the pages' icon, a small SVG compiled into the binary (linked from both
//! pages' `<head>`, and answered at the path browsers ask by default, so no page logs a 404).

use actix_web::HttpResponse;
use actix_web::http::header;

/// The icon: a white bolt on the pages' accent blue.
const ICON: &str = concat!(
    r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">"##,
    r##"<rect width="32" height="32" rx="7" fill="#2f6fde"/><path d="M18 3 7 18h7l-2 11 11-15h-7z" fill="#fff"/>"##,
    "</svg>"
);

/// The pages' icon (SVG), cached for a day.
#[utoipa::path(
    get,
    path = "/favicon.ico",
    tag = "buyer",
    responses((status = 200, description = "The pages' icon", content_type = "image/svg+xml"))
)]
pub async fn icon() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("image/svg+xml")
        .insert_header((header::CACHE_CONTROL, "public, max-age=86400"))
        .body(ICON)
}
