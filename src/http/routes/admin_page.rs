//! `GET /admin`: the live sale page, one HTML file (`admin_page.html`, with its CSS and JS inline)
//! compiled into the binary. The page itself holds no data: it asks for the admin token, keeps it
//! in the tab's `sessionStorage` only, and polls `GET /admin/sales` with it once a second.

use std::sync::LazyLock;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

use crate::http::AppState;
use crate::http::error::{ApiError, ErrorBody};

const PAGE: &str = include_str!("admin_page.html");

/// The page's Content-Security-Policy: its one inline script and one inline style, allowed by
/// hash; requests only to this origin; no framing, no forms posted anywhere.
static CONTENT_SECURITY_POLICY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; img-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        inline_hash(PAGE, "script"),
        inline_hash(PAGE, "style"),
    )
});

/// The CSP source (`sha256-…`) of the text of the page's one `<tag>` element.
fn inline_hash(page: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = page.find(&open).map(|i| i + open.len()).expect("the page has the inline element");
    let end = start + page[start..].find(&close).expect("the inline element is closed");
    format!("sha256-{}", BASE64.encode(Sha256::digest(&page[start..end])))
}

/// The live sale page: stock bars, sold / persisted / queued, purchases per second, limiter
/// refusals and Redis-Postgres disagreement alerts. The HTML needs no token; the data it polls
/// (`GET /admin/sales`) does.
#[utoipa::path(
    get,
    path = "/admin",
    tag = "admin",
    responses(
        (status = 200, description = "The live sale page", content_type = "text/html"),
        (status = 403, description = "`admin_disabled`: no admin token is configured", body = ErrorBody),
    )
)]
pub async fn page(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    if state.admin_token.is_none() {
        return Err(ApiError::AdminDisabled);
    }
    Ok(HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY.as_str()))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .body(PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_exactly_the_pages_one_script_and_one_style() {
        assert_eq!(PAGE.matches("<script").count(), 1, "one script element, inline");
        assert_eq!(PAGE.matches("<style").count(), 1, "one style element, inline");
        assert!(!PAGE.contains(" style=\""), "no style attributes (the policy would block them)");
        let script = &PAGE[PAGE.find("<script>").unwrap() + 8..PAGE.find("</script>").unwrap()];
        let expected = format!("'sha256-{}'", BASE64.encode(Sha256::digest(script)));
        assert!(CONTENT_SECURITY_POLICY.contains(&format!("script-src {expected};")), "{}", *CONTENT_SECURITY_POLICY);
        assert!(CONTENT_SECURITY_POLICY.contains("style-src 'sha256-"));
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
