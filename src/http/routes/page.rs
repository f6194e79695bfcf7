//! What the HTML pages compiled into the binary (`GET /admin`, the buyer page) share: one file
//! each, with its CSS and JS in one inline `<style>` and one inline `<script>`, allowed by hash in
//! a strict Content-Security-Policy, and the response headers that go with it.

use actix_web::HttpResponse;
use actix_web::http::header;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use sha2::{Digest, Sha256};

/// A page and its Content-Security-Policy, computed once.
pub struct InlinePage {
    html: &'static str,
    /// Its one inline script and one inline style, allowed by hash; requests and Web Workers
    /// (the proof-of-work solver) only from this origin; no framing, no forms posted anywhere.
    csp: String,
}

impl InlinePage {
    /// Panics if the page lacks its inline `<script>` or `<style>` (a unit test opens each page).
    pub fn new(html: &'static str) -> Self {
        let csp = format!(
            "default-src 'none'; script-src '{}'; style-src '{}'; connect-src 'self'; img-src 'self'; \
             worker-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            inline_hash(html, "script"),
            inline_hash(html, "style"),
        );
        Self { html, csp }
    }

    /// 200 with the page: never cached, never sniffed, no referrer sent from it.
    pub fn response(&self) -> HttpResponse {
        HttpResponse::Ok()
            .content_type("text/html; charset=utf-8")
            .insert_header((header::CONTENT_SECURITY_POLICY, self.csp.as_str()))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
            .insert_header((header::REFERRER_POLICY, "no-referrer"))
            .body(self.html)
    }
}

/// `page` with the buyer pages' shared script (`buyer_kit.js`) where its script says
/// `// @buyer-kit`; made once per page (the pages are built once, in a `LazyLock`).
pub fn with_buyer_kit(page: &'static str) -> &'static str {
    with_part(page, "// @buyer-kit\n", include_str!("buyer_kit.js"))
}

/// `page` with `part` (a script kept in a file of its own, such as the draw's) where its one
/// inline script has the line `mark`; made once per page. The page stays one inline script.
pub fn with_part(page: &'static str, mark: &str, part: &str) -> &'static str {
    assert!(page.contains(mark), "the page names where {mark:?} goes");
    Box::leak(page.replacen(mark, part, 1).into_boxed_str())
}

/// The CSP source (`sha256-…`) of the text of the page's one `<tag>` element.
fn inline_hash(page: &str, tag: &str) -> String {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = page.find(&open).map(|i| i + open.len()).expect("the page has the inline element");
    let end = start + page[start..].find(&close).expect("the inline element is closed");
    format!("sha256-{}", BASE64.encode(Sha256::digest(&page[start..end])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_policy_allows_exactly_its_pages_one_script_and_one_style() {
        for page in
            [&*super::super::admin_page::PAGE, &*super::super::buyer_page::PAGE, &*super::super::drop_page::PAGE]
        {
            let (html, csp) = (page.html, &page.csp);
            assert_eq!(html.matches("<script").count(), 1, "one script element, inline");
            assert_eq!(html.matches("<style").count(), 1, "one style element, inline");
            assert!(!html.contains(" style=\""), "no style attributes (the policy would block them)");
            let script = &html[html.find("<script>").unwrap() + 8..html.find("</script>").unwrap()];
            let expected = format!("'sha256-{}'", BASE64.encode(Sha256::digest(script)));
            assert!(csp.contains(&format!("script-src {expected};")), "{csp}");
            assert!(csp.contains("style-src 'sha256-"));
            assert!(!csp.contains("unsafe"));
            assert!(!html.contains("// @"), "the shared scripts are in place");
        }
    }
}
