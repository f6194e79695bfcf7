//! The buyer page (`GET /sale/{sale_id}`, `GET /`) in headless Chromium: the countdown on the
//! server's clock, Buy enabled only while the sale is open, the order followed from "queued" to
//! "confirmed", a second buy that shows the same order, sold out; and the token taken from the URL
//! fragment; a reservation's deadline, its cancel and its payment. Screenshots:
//! `target/tmp/buyer-page-{countdown,confirmed,already-bought,sold-out,reserved,cancelled,paid,paused,sizes,limit}.png`; a group's sizes and a quantity.

use std::time::Duration;

use seckill::domain::UserId;
use seckill::identity::AuthMode;
use secrecy::SecretString;
use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use uuid::Uuid;

use crate::chromium::Browser;
use crate::helpers::{TestApp, assert_error, new_sale_id, spawn_app_with};

/// The page's sessionStorage key for the buyer's token.
const TOKEN_KEY: &str = "seckill.buyer-token";

/// What the buyer page shows; `None` for an element that is hidden.
#[derive(Debug, Deserialize)]
struct Shown {
    state: String,
    countdown_label: Option<String>,
    countdown: Option<String>,
    stock_left: String,
    stock_initial: String,
    buy_enabled: bool,
    /// The Buy button's text.
    buy: String,
    /// "Signed in as …": the buyer the page names, if shown.
    who: Option<String>,
    order_id: Option<String>,
    order_status: Option<String>,
    message: String,
    /// "server time HH:MM:SS UTC": the server's clock as the page keeps it, rendered with the rest.
    server_time: String,
}

/// Seconds of an `HH:MM:SS` text.
fn clock_secs(text: &str) -> u64 {
    text.split(':').map(|p| p.parse::<u64>().unwrap()).fold(0, |total, part| total * 60 + part)
}

impl Shown {
    /// The countdown in seconds (`HH:MM:SS`), if one is shown.
    fn countdown_secs(&self) -> Option<u64> {
        self.countdown.as_deref().map(clock_secs)
    }

    /// The server's time of day the page shows, in seconds.
    fn server_secs(&self) -> u64 {
        clock_secs(self.server_time.trim_start_matches("server time ").trim_end_matches(" UTC"))
    }
}

/// `at` to the whole second before it.
fn whole_second(at: OffsetDateTime) -> OffsetDateTime {
    at.replace_nanosecond(0).unwrap()
}

/// What the buyer page shows.
impl Browser {
    async fn shown(&self) -> Shown {
        let script = r#"
            const $ = (id) => document.getElementById(id);
            const shown = (id) => $(id).checkVisibility() ? $(id).innerText : null;
            return {
                state: $("state").innerText, countdown_label: shown("countdown-label"), countdown: shown("countdown"),
                stock_left: $("stock-left").innerText, stock_initial: $("stock-initial").innerText,
                buy_enabled: !$("buy").disabled, buy: $("buy").innerText,
                who: $("signed-in").checkVisibility() ? $("who").innerText : null,
                order_id: shown("order-id"), order_status: shown("order-status"),
                message: $("message").innerText, server_time: $("server-time").innerText,
            };"#;
        serde_json::from_value(self.run(script, vec![]).await).unwrap()
    }

    /// Waits until what the page shows passes `check`.
    async fn shows(&self, what: &str, check: impl Fn(&Shown) -> bool) -> Shown {
        self.wait_for(what, async |b| Some(b.shown().await).filter(|s| check(s))).await
    }

    /// From now on, records every order status the page shows in `window.statuses`.
    async fn record_statuses(&self) {
        let script = r#"
            window.statuses = [];
            const status = document.getElementById("order-status");
            new MutationObserver(() => window.statuses.push(status.textContent))
                .observe(status, { childList: true, characterData: true, subtree: true });"#;
        self.run(script, vec![]).await;
    }

    /// The statuses recorded since `record_statuses`, repeats merged.
    async fn recorded_statuses(&self) -> Vec<String> {
        let mut statuses: Vec<String> =
            serde_json::from_value(self.run("return window.statuses", vec![]).await).unwrap();
        statuses.dedup();
        statuses
    }
}

/// The order id Postgres holds for `user` in `sale`, once the worker has written it.
async fn stored_order(app: &TestApp, sale: &str, user: &str) -> String {
    let order: Uuid = sqlx::query_scalar("select order_id from orders where sale_id = $1 and user_id = $2")
        .bind(sale)
        .bind(user)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    order.to_string()
}

#[tokio::test]
async fn the_page_is_served_at_the_root_and_per_sale_under_a_strict_policy() {
    let app = spawn_app_with(|_| {}, false).await;
    let root = app.client.get(app.url("/")).send().await.unwrap();
    assert_eq!(root.status(), 200);
    let headers = root.headers().clone();
    let root_page = root.text().await.unwrap();
    let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
    assert_eq!(header("content-type"), "text/html; charset=utf-8");
    let csp = header("content-security-policy");
    for directive in ["default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "connect-src 'self'"] {
        assert!(csp.contains(directive), "{csp}");
    }
    for directive in ["form-action 'none'", "frame-ancestors 'none'", "base-uri 'none'"] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(
        (header("x-content-type-options"), header("referrer-policy"), header("cache-control")),
        ("nosniff".into(), "no-referrer".into(), "no-store".into())
    );
    let admin_csp =
        app.client.get(app.url("/admin")).send().await.unwrap().headers()["content-security-policy"].clone();
    assert_ne!(csp, admin_csp.to_str().unwrap(), "each page's policy names its own inline script");

    let per_sale = app.client.get(app.url("/sale/any-sale_1")).send().await.unwrap();
    assert_eq!(per_sale.status(), 200, "the sale need not exist");
    assert_eq!(per_sale.headers()["content-security-policy"].to_str().unwrap(), csp);
    assert_eq!(per_sale.text().await.unwrap(), root_page, "the same page");
    let bad = app.client.get(app.url("/sale/no%20spaces")).send().await.unwrap();
    assert_error(bad, 400, "invalid_request").await;
    let post = app.client.post(app.url("/sale/any")).send().await.unwrap();
    assert_eq!((post.status().as_u16(), post.headers()["allow"].to_str().unwrap()), (405, "GET, HEAD"));

    // Both pages link the icon, which is served (the browser's default /favicon.ico, not a 404),
    // and the policy lets them load it.
    let admin_page = app.client.get(app.url("/admin")).send().await.unwrap().text().await.unwrap();
    for page in [&root_page, &admin_page] {
        assert!(page.contains(r#"<link rel="icon" href="/favicon.ico" type="image/svg+xml">"#), "the icon is linked");
    }
    assert!(csp.contains("img-src 'self'"), "{csp}");
    let icon = app.client.get(app.url("/favicon.ico")).send().await.unwrap();
    assert_eq!((icon.status().as_u16(), icon.headers()["content-type"].to_str().unwrap()), (200, "image/svg+xml"));
    assert!(icon.text().await.unwrap().starts_with("<svg "), "an SVG");
}

#[tokio::test]
async fn a_buyer_sees_the_countdown_buys_once_sees_the_order_confirmed_and_then_sold_out() {
    let app = spawn_app_with(|_| {}, true).await;
    let browser = Browser::start().await;
    let sale = new_sale_id();
    // The start an hour out, on a whole second, however slowly the page loads; brought near once
    // the page has shown the countdown (a re-seed: nobody has bought).
    let seed = async |starts_at: OffsetDateTime| {
        let seeded = app.seed(&sale, json!({"stock": 2, "starts_at": starts_at.format(&Rfc3339).unwrap()})).await;
        assert_eq!(seeded.status(), 200);
    };
    let starts_at = whole_second(OffsetDateTime::now_utc() + time::Duration::HOUR);
    seed(starts_at).await;
    browser.client.goto(&app.url(&format!("/sale/{sale}"))).await.unwrap();

    // Before the start: the countdown to starts_at on the server's clock, ticking; Buy disabled.
    // The countdown (rounded up) and the server time the page shows (rounded down), rendered
    // together, add up to the start, however late the page renders.
    let before = browser.shows("the countdown", |s| s.countdown.is_some()).await;
    let start_of_day = u64::from(starts_at.hour()) * 3600 + u64::from(starts_at.minute()) * 60;
    let start_of_day = start_of_day + u64::from(starts_at.second());
    let shown_start = (before.server_secs() + before.countdown_secs().unwrap()) % 86_400;
    assert_eq!(shown_start, start_of_day, "the countdown counts to the start on the server's clock: {before:?}");
    assert_eq!((before.state.as_str(), before.countdown_label.as_deref()), ("Upcoming", Some("Starts in")));
    assert_eq!((before.stock_left.as_str(), before.stock_initial.as_str()), ("2", "2"));
    assert!(!before.buy_enabled, "Buy is disabled before the start: {before:?}");
    assert_eq!(before.order_id, None);
    let shown_secs = before.countdown_secs();
    let ticked = browser.shows("the countdown ticking", |s| s.countdown_secs() < shown_secs).await;
    assert!(!ticked.buy_enabled && ticked.countdown_secs() > Some(0), "still before the start: {ticked:?}");
    browser.screenshot("buyer-page-countdown.png").await;

    // At the start the page asks again: Buy is enabled, never before starts_at.
    let starts_at = whole_second(OffsetDateTime::now_utc() + time::Duration::seconds(3));
    seed(starts_at).await;
    let open = browser.shows("Buy enabled", |s| s.buy_enabled).await;
    let late = OffsetDateTime::now_utc() - starts_at;
    assert!(late.is_positive(), "Buy enabled {late} after the start");
    assert_eq!((open.state.as_str(), open.countdown.as_deref()), ("Open", None), "no end, no countdown");
    let colour = browser.run("return getComputedStyle(document.getElementById('buy')).backgroundColor", vec![]).await;
    assert_eq!(colour, json!("rgb(47, 111, 222)"), "the inline style applies (the policy allows it)");

    // alice buys: her order is shown queued, then confirmed, and it is the order Postgres holds.
    browser.fill("user-id", "alice").await;
    browser.record_statuses().await;
    browser.click("buy").await;
    let confirmed = browser.shows("alice's order confirmed", |s| s.order_status.as_deref() == Some("confirmed")).await;
    assert_eq!(browser.recorded_statuses().await, ["queued", "confirmed"]);
    assert_eq!(confirmed.message, "You got one!");
    let alices = confirmed.order_id.clone().unwrap();
    assert_eq!(alices, stored_order(&app, &sale, "alice").await);
    browser.shows("1 left", |s| s.stock_left == "1").await;
    browser.screenshot("buyer-page-confirmed.png").await;

    // With her order shown, Buy has become the order: nothing more to buy (the service would
    // answer a repeat 409 with the same order).
    assert_eq!(confirmed.who.as_deref(), Some("alice"), "the page says who buys");
    assert!(!confirmed.buy_enabled && confirmed.buy == "Bought: your order is below", "{confirmed:?}");
    assert_eq!(app.buy(&sale, "alice").await.status(), 409);
    browser.screenshot("buyer-page-already-bought.png").await;

    // bob buys the last one; the page forgot alice's order the moment the user id changed.
    browser.fill("user-id", "bob").await;
    let bob = browser.shown().await;
    assert_eq!((bob.order_id, bob.message.as_str()), (None, ""), "alice's order is not bob's");
    browser.click("buy").await;
    let bobs = browser.shows("bob's order confirmed", |s| s.order_status.as_deref() == Some("confirmed")).await;
    assert_ne!(bobs.order_id.as_deref(), Some(&*alices));
    assert_eq!(bobs.order_id.unwrap(), stored_order(&app, &sale, "bob").await);

    // carol comes too late: sold out, Buy disabled, no order; the service agrees.
    browser.fill("user-id", "carol").await;
    let sold_out = browser.shows("sold out", |s| s.state == "Sold out").await;
    assert!(!sold_out.buy_enabled, "{sold_out:?}");
    assert_eq!((sold_out.stock_left.as_str(), sold_out.order_id), ("0", None));
    browser.screenshot("buyer-page-sold-out.png").await;
    assert_error(app.buy(&sale, "carol").await, 410, "sold_out").await;
    app.wait_for_drain(&sale).await;
    assert_eq!(app.order_users(&sale).await, [("alice".into(), 1), ("bob".into(), 1)]);
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn a_token_in_the_url_fragment_names_the_buyer_and_stays_in_the_tab_only() {
    let secret = SecretString::from("buyer-page-test-secret-of-32-bytes");
    let app = spawn_app_with(
        |c| {
            c.auth.mode = AuthMode::Jwt;
            c.auth.jwt_secret = Some(secret.clone());
        },
        true,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 5).await;
    let alice = UserId::parse("alice").unwrap();
    let token = seckill::identity::sign_hs256(&secret, &alice, "sub", Duration::from_secs(600), None, None).unwrap();
    let browser = Browser::start().await;

    // The fragment's token moves into sessionStorage and out of the URL; the user id is not used.
    browser.client.goto(&app.url(&format!("/sale/{sale}#token={token}"))).await.unwrap();
    browser.shows("the open sale", |s| s.buy_enabled).await;
    let storage =
        format!("return [location.href, sessionStorage.getItem('{TOKEN_KEY}'), localStorage.length, document.cookie]");
    let (url, stored) = (app.url(&format!("/sale/{sale}")), browser.run(&storage, vec![]).await);
    assert_eq!(stored, json!([url, token, 0, ""]), "the token left the URL and is in this tab only");
    let user_field = browser.run("return document.getElementById('user-id').disabled", vec![]).await;
    assert_eq!(user_field, json!(true), "with a token the user id field is off");
    assert_eq!(browser.shown().await.who.as_deref(), Some("alice"), "signed in as the token's sub");

    browser.click("buy").await;
    let confirmed = browser.shows("the order confirmed", |s| s.order_status.as_deref() == Some("confirmed")).await;
    let order = confirmed.order_id.unwrap();
    assert_eq!(order, stored_order(&app, &sale, "alice").await, "the token's buyer bought");

    // Reopened without the fragment, the tab still holds the token and finds alice's order:
    // Buy is the order at once, without a click.
    browser.client.goto(&url).await.unwrap();
    let reopened = browser.shows("alice's order", |s| s.order_id.is_some()).await;
    assert_eq!((reopened.order_id.as_deref(), reopened.message.as_str()), (Some(&*order), ""));
    assert!(!reopened.buy_enabled && reopened.buy.starts_with("Bought"), "{reopened:?}");
    browser.screenshot("buyer-page-signed-in.png").await;

    // Switch buyer forgets the token: nobody is signed in, and alice's order is gone from the page.
    browser.click("switch").await;
    let switched = browser.shows("no buyer", |s| s.who.is_none() && s.order_id.is_none()).await;
    assert!(switched.buy_enabled, "a new buyer may buy: {switched:?}");
    assert_eq!(browser.run(&storage, vec![]).await[1], json!(null), "Switch forgot the token");

    // Without the token, a jwt service refuses the buy and the page asks for one.
    browser.fill("token", "").await;
    browser.fill("user-id", "mallory").await;
    browser.click("buy").await;
    let refused = browser.shows("the refusal", |s| !s.message.is_empty()).await;
    assert!(refused.message.starts_with("Paste your token"), "{refused:?}");
    assert_eq!(refused.order_id, None);
    assert_eq!(browser.run(&storage, vec![]).await[1], json!(null), "an emptied field forgets the token");
    assert_eq!(app.order_users(&sale).await, [("alice".into(), 1)]);
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn a_reservation_counts_down_to_its_deadline_and_can_be_cancelled_or_paid() {
    let app = spawn_app_with(|_| {}, true).await;
    let browser = Browser::start().await;
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": 1, "payment_window": "10m"})).await;
    assert_eq!(seeded.status(), 200);
    browser.client.goto(&app.url(&format!("/sale/{sale}"))).await.unwrap();
    browser.shows("the open sale", |s| s.buy_enabled).await;

    // alice's win is a reservation: the deadline counts down, Cancel is offered.
    browser.fill("user-id", "alice").await;
    browser.click("buy").await;
    let reserved = browser.shows("alice's reservation", |s| s.order_status.as_deref() == Some("reserved")).await;
    app.wait_for_drain(&sale).await;
    assert_eq!(reserved.order_id.clone().unwrap(), stored_order(&app, &sale, "alice").await);
    // The time left (rounded up) and the server time the page shows (rounded down), rendered
    // together, add up to the deadline it shows, however late the page renders.
    let script = r#"const $ = (id) => document.getElementById(id).innerText;
        return [$("pay-by-left"), $("server-time"), $("pay-by-time")];"#;
    let [left, now, deadline]: [String; 3] = serde_json::from_value(browser.run(script, vec![]).await).unwrap();
    let secs = clock_secs(&left);
    let now = clock_secs(now.trim_start_matches("server time ").trim_end_matches(" UTC"));
    let deadline = clock_secs(deadline.trim_end_matches(" UTC"));
    // The page's estimate of the server's clock may lag it by half a round trip (the midpoint
    // of the status request), so the time left, rounded up, may read one second over the window
    // on a loaded host (00:10:01 seen at load 12), never more.
    assert!(0 < secs && secs <= 601, "a 10-minute window shows {left} left");
    // Within a second: the deadline has milliseconds, and the time left may be drawn a tick after.
    let off_by = (now + secs + 86_400 + 1 - deadline) % 86_400;
    assert!(off_by <= 2, "{left} left at {now} s of the day, by {deadline} s");
    assert!(browser.visible("cancel").await && browser.visible("pay-by").await);
    browser.shows("sold out", |s| s.state == "Sold out").await;
    browser.screenshot("buyer-page-reserved.png").await;

    // Cancelled: the unit is back for the next buyer; the deadline and the button are gone.
    browser.click("cancel").await;
    let cancelled = browser.shows("the cancel", |s| s.order_status.as_deref() == Some("cancelled")).await;
    assert_eq!(cancelled.message, "Cancelled: the unit went back to the sale.");
    // One order per buyer per sale: the button stays off and says why, not "Bought".
    assert!(!cancelled.buy_enabled && cancelled.buy == "Cancelled: one order per buyer in this sale", "{cancelled:?}");
    assert!(!browser.visible("cancel").await && !browser.visible("pay-by").await);
    browser.shows("the unit back", |s| s.stock_left == "1" && s.state == "Open").await;
    browser.screenshot("buyer-page-cancelled.png").await;

    // bob reserves it and the shop's payment arrives: the page shows it paid.
    browser.fill("user-id", "bob").await;
    browser.click("buy").await;
    let bobs = browser.shows("bob's reservation", |s| s.order_status.as_deref() == Some("reserved")).await;
    let paid = app.pay(&sale, &bobs.order_id.unwrap(), "evt-bob").await;
    assert_eq!(paid.status(), 200);
    browser.shows("bob's order paid", |s| s.order_status.as_deref() == Some("paid")).await;
    assert!(!browser.visible("cancel").await);
    browser.screenshot("buyer-page-paid.png").await;
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn a_pause_shows_on_the_page_disables_buy_and_a_resume_enables_it_again() {
    let app = spawn_app_with(|_| {}, false).await;
    let browser = Browser::start().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    browser.client.goto(&app.url(&format!("/sale/{sale}"))).await.unwrap();
    browser.fill("user-id", "dana").await;
    browser.shows("the open sale", |s| s.state == "Open" && s.buy_enabled).await;

    let switch = |action: &str| {
        let url = app.url(&format!("/admin/sales/{sale}/{action}"));
        app.client.post(url).bearer_auth(crate::helpers::ADMIN_TOKEN).json(&json!({"reason": "price typo"})).send()
    };
    assert_eq!(switch("pause").await.unwrap().status(), 200);
    let paused = browser.shows("the paused sale", |s| s.state == "Paused").await;
    assert!(!paused.buy_enabled, "Buy is disabled while paused: {paused:?}");
    assert_eq!((paused.buy.as_str(), paused.stock_left.as_str(), paused.order_id), ("Paused", "3", None));
    browser.screenshot("buyer-page-paused.png").await;
    assert_error(app.buy(&sale, "dana").await, 403, "sale_paused").await;

    assert_eq!(switch("resume").await.unwrap().status(), 200);
    browser.shows("the sale open again", |s| s.state == "Open" && s.buy_enabled).await;
    browser.click("buy").await;
    // The stock shown follows on the page's next status poll.
    let bought =
        browser.shows("dana's order and the stock after it", |s| s.order_id.is_some() && s.stock_left == "2").await;
    assert_eq!(bought.message, "You got one!", "{bought:?}");
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn a_groups_sizes_show_with_their_stock_and_a_buyer_picks_a_quantity_up_to_the_limit() {
    let app = spawn_app_with(|_| {}, false).await;
    let group = format!("g{}", Uuid::now_v7().simple());
    for (size, stock) in [("40", 3), ("41", 1), ("42", 3)] {
        let seeded =
            app.seed(&format!("{group}.{size}"), json!({"stock": stock, "group": group, "per_buyer": 2})).await;
        assert_eq!(seeded.status(), 200);
    }
    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/sale/{group}.40"))).await.unwrap();
    browser.fill("user-id", "erin").await;
    let sizes = async |b: &Browser| -> Vec<String> {
        let script =
            r##"return [...document.querySelectorAll("#sizes button")].map((b) => b.innerText.replace(/\s+/g, " "));"##;
        serde_json::from_value(b.run(script, vec![]).await).unwrap()
    };
    let listed = browser
        .wait_for("the three sizes with their stock", async |b| {
            Some(sizes(b).await).filter(|s| s.iter().all(|size| size.ends_with("left")) && s.len() == 3)
        })
        .await;
    assert_eq!(listed, ["40 3 left", "41 1 left", "42 3 left"]);
    assert!(browser.visible("quantity-box").await, "per_buyer 2: a quantity picker");
    let options =
        browser.run(r#"return [...document.getElementById("quantity").options].map((o) => o.value);"#, vec![]).await;
    assert_eq!(options, json!(["1", "2"]));

    browser.run(r#"document.getElementById("quantity").value = "2";"#, vec![]).await;
    browser.shows("the open sale", |s| s.state == "Open" && s.buy_enabled).await;
    browser.click("buy").await;
    let bought = browser.shows("erin's two units", |s| s.order_id.is_some() && s.stock_left == "1").await;
    assert!(bought.order_id.as_deref().is_some_and(|id| id.ends_with(" × 2")), "{bought:?}");
    browser.screenshot("buyer-page-sizes.png").await;

    // Another size: the limit across the group refuses, and says where the units are.
    browser
        .run(
            r##"[...document.querySelectorAll("#sizes button")].find((b) => b.innerText.startsWith("42")).click();"##,
            vec![],
        )
        .await;
    browser.shows("size 42 open", |s| s.state == "Open" && s.buy_enabled && s.stock_left == "3").await;
    browser.click("buy").await;
    let refused = browser.shows("the limit", |s| s.message.starts_with("At most 2 per customer")).await;
    let listed = sizes(&browser).await;
    assert_eq!(listed, ["40 1 left", "41 1 left", "42 3 left"], "the size left keeps its stock on its button");
    assert_eq!(refused.message, format!("At most 2 per customer: you hold 2 in {group}.40. Nothing was bought."));
    assert_eq!(refused.order_id, None, "nothing bought in size 42");
    browser.screenshot("buyer-page-limit.png").await;
    browser.client.close().await.unwrap();
}
