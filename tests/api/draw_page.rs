//! The draw on the pages (issue 53), in headless Chromium: a buyer ranks sizes and enters a drop's
//! draw from the drop page (its proof of work solved in the page's Web Worker), sees the entry,
//! then, once the draw has run, the win with its order and deadline, and cancels it there; other
//! entrants' pages show the waitlist and the loss. The live page's draw view follows the entries,
//! the run, and the winners' conversions. Its counts' route, `GET /admin/drops/{drop}/draw/stats`,
//! is checked against Postgres. Screenshots: `target/tmp/draw-buyer-{form,entered,won,cancelled,
//! waitlisted,lost,offered}.png`, `target/tmp/draw-live-{open,drawn,offered}.png`: a winner's cancel
//! offers the unit to the waitlisted entrant, whose page and the live page show it.

use std::time::Duration;

use seckill::domain::{DropId, UserId};
use serde_json::{Value, json};

use crate::chromium::{Browser, PAGE_DEADLINE};
use crate::common::drops::new_drop_id;
use crate::draw_entries::at;
use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, spawn_app, spawn_app_with};

/// What the drop page's draw section shows (null for what is hidden).
const BUYER_VIEW: &str = r##"
    const $ = (id) => document.getElementById(id);
    const shown = (id) => $(id).checkVisibility() ? $(id).innerText.replace(/\s+/g, " ").trim() : null;
    return {
        draw: shown("draw-state"), form: $("draw-form").checkVisibility(), enter: $("enter").disabled ? null : $("enter").innerText,
        choices: [...document.querySelectorAll("#draw-sizes button[aria-pressed=true]")]
            .map((b) => [b.querySelector("small").innerText, b.dataset.size]).sort().map(([, size]) => size),
        state: shown("entry-state"), headline: shown("entry-headline"), what: shown("entry-what"),
        order: shown("entry-order-id"), order_state: shown("entry-order-state"), pay_by: shown("entry-pay-by"),
        cancel: shown("draw-cancel"), message: $("draw-message").innerText, pick: $("pick").checkVisibility(),
        commitment: shown("draw-commitment"), pseudonym: shown("draw-pseudonym"), record: shown("draw-record"),
    };"##;

/// What the live page's draw view of `arguments[0]` shows, field by field (null before it shows).
const LIVE_VIEW: &str = r##"
    const row = document.querySelector(`.drop[data-drop-id="${arguments[0]}"] .draw-view`);
    if (row === null || !row.checkVisibility()) return null;
    const fields = {};
    for (const f of row.querySelectorAll("[data-field]")) fields[f.dataset.field] = f.textContent.trim();
    fields.bars = row.querySelectorAll("svg rect").length;
    fields.draw_now = row.querySelector('[data-action="draw"]').checkVisibility();
    return fields;"##;

impl Browser {
    /// Runs `script` with `args` until `check` holds for its value, then returns it.
    async fn script_shows(&self, script: &str, args: Vec<Value>, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let found = tokio::time::timeout(PAGE_DEADLINE, async {
            loop {
                last = self.run(script, args.clone()).await;
                if check(&last) {
                    return last.clone();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("the page never showed {what}; last: {last}"))
    }

    async fn buyer_shows(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.script_shows(BUYER_VIEW, vec![], what, check).await
    }

    async fn live_shows(&self, drop: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        self.script_shows(LIVE_VIEW, vec![json!(drop)], what, check).await
    }

    /// Saves a screenshot of the drop page scrolled to its draw.
    async fn draw_screenshot(&self, name: &str) {
        self.run(r#"document.getElementById("draw").scrollIntoView();"#, vec![]).await;
        self.screenshot(name).await;
    }

    /// Opens the drop page as `user`.
    async fn open_as(&self, app: &TestApp, drop: &str, user: &str) {
        self.client.goto(&app.url(&format!("/drop/{drop}"))).await.unwrap();
        self.fill("user-id", user).await;
    }
}

/// A drop in draw mode, entries open for an hour: size 41 (1 unit), 42 (2 units), 2 per buyer,
/// a payment window, one waitlist place, a proof of work of cost 2 at each entry.
async fn seed_draw(app: &TestApp) -> String {
    let drop = new_drop_id();
    let draw = json!({"opens_at": at(-60), "closes_at": at(3600), "waitlist": 1});
    let body = json!({"sizes": {"41": {"stock": 1}, "42": {"stock": 2}}, "per_buyer": 2, "payment_window": "10m",
        "challenge": {"cost": 2}, "draw": draw});
    let url = app.url(&format!("/admin/drops/{drop}"));
    let response = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    drop
}

/// `user` enters `sizes` × 1 through the API, with a solved proof of work.
async fn enter_solved(app: &TestApp, drop: &str, user: &str, sizes: &[&str]) {
    let url = app.url(&format!("/drops/{drop}/challenge"));
    let view: Value = app.client.get(url).query(&[("user_id", user)]).send().await.unwrap().json().await.unwrap();
    let solved =
        seckill::challenge::solve::solve(&serde_json::to_vec(&view).unwrap(), Duration::from_secs(60)).unwrap();
    let response = app
        .client
        .post(app.url(&format!("/drops/{drop}/entries")))
        .header("Seckill-Challenge", solved.header)
        .json(&json!({"sizes": sizes, "user_id": user}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201, "{}", response.text().await.unwrap());
}

async fn stats(app: &TestApp, drop: &str) -> reqwest::Response {
    let url = app.url(&format!("/admin/drops/{drop}/draw/stats"));
    app.client.get(url).bearer_auth(ADMIN_TOKEN).send().await.unwrap()
}

/// The users of `outcome` in the drop's results.
async fn with_outcome(app: &TestApp, drop: &str, outcome: &str) -> Vec<String> {
    sqlx::query_scalar("select user_id from draw_results where drop_id = $1 and outcome = $2 order by user_id")
        .bind(drop)
        .bind(outcome)
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

/// The order `user` won in the drop's draw.
async fn order_of(app: &TestApp, drop: &str, user: &str) -> String {
    sqlx::query_scalar("select order_id::text from draw_results where drop_id = $1 and user_id = $2")
        .bind(drop)
        .bind(user)
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

/// A token's subject is read as UTF-8: the pseudonym the page shows for a token of "zoé" is
/// hers in the record (read as Latin-1, the page hashed "zoÃ©").
#[tokio::test]
async fn the_pseudonym_shown_for_a_token_whose_subject_is_not_ascii_is_the_records() {
    use base64::Engine;
    let app = spawn_app_with(|c| c.challenge.challenge_iterations = 1, false).await;
    let drop = seed_draw(&app).await;
    let part = |json: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string());
    // Only its subject is read by the page (the service verifies a token); this one is not signed.
    let token = format!("{}.{}.x", part(json!({"alg": "HS256", "typ": "JWT"})), part(json!({"sub": "zoé"})));
    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/drop/{drop}#token={token}"))).await.unwrap();
    let zoe = seckill::draw::rank::entrant(&DropId::parse(&drop).unwrap(), &UserId::parse("zoé").unwrap());
    browser.buyer_shows("her pseudonym", |v| v["pseudonym"] == zoe.as_str()).await;
}

#[tokio::test]
async fn a_buyer_enters_the_draw_from_the_page_and_sees_the_result_and_the_live_page_follows() {
    let app = spawn_app_with(|c| c.challenge.challenge_iterations = 1, true).await;
    let drop = seed_draw(&app).await;
    // Only alice and erin want 42 (2 units): both win it. Bob, carol and dave want 41 (1 unit):
    // one wins, one takes the waitlist's one place, one loses.
    for (user, sizes) in [("bob", &["41"][..]), ("carol", &["41"]), ("dave", &["41"]), ("erin", &["42"])] {
        enter_solved(&app, &drop, user, sizes).await;
    }

    let browser = Browser::start().await;
    browser.open_as(&app, &drop, "alice").await;
    let form = browser.buyer_shows("the entry form", |v| v["form"] == true).await;
    assert_eq!((form["draw"].as_str(), form["pick"].as_bool()), (Some("Entries open"), Some(false)), "{form}");
    assert_eq!(form["enter"], Value::Null, "no size picked, no entry: {form}");
    let commitment: String = sqlx::query_scalar("select commitment from draws where drop_id = $1")
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(form["commitment"], commitment.as_str());
    for size in ["42", "41"] {
        let click = r#"document.querySelector(`#draw-sizes button[data-size="${arguments[0]}"]`).click();"#;
        browser.run(click, vec![json!(size)]).await;
    }
    browser.buyer_shows("42 then 41 picked", |v| v["choices"] == json!(["42", "41"]) && v["enter"].is_string()).await;
    browser.draw_screenshot("draw-buyer-form.png").await;
    browser.click("enter").await;
    let entered = browser.buyer_shows("alice entered", |v| v["state"] == "Entered").await;
    assert_eq!(entered["headline"], "You are in the draw.", "{entered}");
    assert!(entered["what"].as_str().unwrap().starts_with("Sizes 42, 41 (best first) × 1"), "{entered}");
    assert_eq!(entered["form"], false, "one entry: {entered}");
    let alice = seckill::draw::rank::entrant(&DropId::parse(&drop).unwrap(), &UserId::parse("alice").unwrap());
    assert_eq!(entered["pseudonym"], alice.as_str(), "her pseudonym in the record: {entered}");
    browser.draw_screenshot("draw-buyer-entered.png").await;

    // The live page: five entries, open, no results yet.
    browser.client.goto(&app.url(&format!("/admin#token={ADMIN_TOKEN}"))).await.unwrap();
    let open = browser.live_shows(&drop, "the draw view with 5 entries", |v| v["entries"] == "5").await;
    assert_eq!((open["phase"].as_str(), open["bars"].as_u64()), (Some("entries open"), Some(24)), "{open}");
    assert_eq!(open["draw_now"], true, "{open}");
    browser.screenshot("draw-live-open.png").await;

    let run = app.client.post(app.url(&format!("/admin/drops/{drop}/draw"))).bearer_auth(ADMIN_TOKEN).send().await;
    assert_eq!(run.unwrap().status(), 200);
    let drawn = browser
        .live_shows(&drop, "the draw drawn, 3 winners' reservations stored", |v| {
            v["phase"] == "drawn" && v["awarded-text"] == "3 of 3 winners' reservations stored"
        })
        .await;
    assert_eq!((drawn["won"].as_str(), drawn["lost"].as_str()), (Some("3 (3 units)"), Some("1")), "{drawn}");
    assert_eq!((drawn["waitlisted"].as_str(), drawn["reserved"].as_str()), (Some("1 of 1"), Some("3")), "{drawn}");

    // Alice's page: won 42, her order and deadline; she cancels there.
    browser.open_as(&app, &drop, "alice").await;
    let won = browser.buyer_shows("alice's win", |v| v["state"] == "Won" && v["order_state"] == "reserved").await;
    assert_eq!(won["headline"], "You won size 42!", "{won}");
    assert_eq!(won["order"], order_of(&app, &drop, "alice").await.as_str(), "{won}");
    assert!(won["pay_by"].as_str().unwrap().starts_with("Pay by "), "{won}");
    assert!(won["record"].is_string(), "the record's link once drawn: {won}");
    browser.draw_screenshot("draw-buyer-won.png").await;
    browser.click("draw-cancel").await;
    let cancelled = browser.buyer_shows("the cancel", |v| v["order_state"] == "cancelled").await;
    assert_eq!(cancelled["cancel"], Value::Null, "{cancelled}");
    browser.draw_screenshot("draw-buyer-cancelled.png").await;

    // The others' pages: the waitlist's place, the loss.
    let waitlisted = with_outcome(&app, &drop, "waitlisted").await;
    browser.open_as(&app, &drop, &waitlisted[0]).await;
    let place = browser.buyer_shows("the waitlist", |v| v["state"] == "Waitlisted").await;
    assert_eq!(place["headline"], "You are on the waitlist, place #1.", "{place}");
    browser.draw_screenshot("draw-buyer-waitlisted.png").await;
    let lost = with_outcome(&app, &drop, "lost").await;
    browser.open_as(&app, &drop, &lost[0]).await;
    let loss = browser.buyer_shows("the loss", |v| v["state"] == "Not drawn").await;
    assert_eq!((loss["headline"].as_str(), loss["order"].as_str()), (Some("Not drawn this time."), None), "{loss}");
    browser.draw_screenshot("draw-buyer-lost.png").await;

    // Erin pays; the live page's conversions: one paid, one cancelled, one still reserved.
    let erin = order_of(&app, &drop, "erin").await;
    assert_eq!(app.pay(&format!("{drop}.42"), &erin, "evt-erin").await.status(), 200);
    browser.client.goto(&app.url(&format!("/admin#token={ADMIN_TOKEN}"))).await.unwrap();
    let converted = browser
        .live_shows(&drop, "the conversions", |v| v["paid"] == "1" && v["cancelled"] == "1" && v["reserved"] == "1")
        .await;
    assert_eq!(
        (converted["draw_now"].as_bool(), converted["conversion"].as_str()),
        (Some(false), Some("· 33% of winners paid"))
    );
    browser.screenshot("draw-live-drawn.png").await;

    // The winner of 41 gives it back: the waitlisted entrant (who listed 41) is offered it, a
    // reservation of their own, on their page and on the live page.
    let winner_41: String =
        sqlx::query_scalar("select user_id from draw_results where drop_id = $1 and outcome = 'won' and size = '41'")
            .bind(&drop)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(app.cancel(&format!("{drop}.41"), &winner_41).await.status(), 200);
    let offers = browser.live_shows(&drop, "the offer", |v| v["offered"] == "1" && v["offered-reserved"] == "1").await;
    assert_eq!(offers["cancelled"], "2", "{offers}");
    browser.screenshot("draw-live-offered.png").await;
    browser.open_as(&app, &drop, &waitlisted[0]).await;
    let offered = browser.buyer_shows("the offer", |v| v["state"] == "Offered" && v["order_state"] == "reserved").await;
    assert_eq!(offered["headline"], "A unit came back: you are offered size 41.", "{offered}");
    assert!(offered["pay_by"].is_string() && offered["cancel"].is_string(), "{offered}");
    browser.draw_screenshot("draw-buyer-offered.png").await;
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn the_draws_counts_are_postgres_counts_and_refuse_what_is_not_a_draw() {
    let app = spawn_app().await;
    let drop = new_drop_id();
    assert_error(stats(&app, &drop).await, 404, "unknown_drop").await;
    assert_error(stats(&app, "not a drop").await, 400, "invalid_request").await;
    let url = app.url(&format!("/admin/drops/{drop}/draw/stats"));
    assert_error(app.client.get(&url).send().await.unwrap(), 401, "unauthorized").await;
    let plain = json!({"sizes": {"41": {"stock": 3}}});
    let seeded = app.client.put(app.url(&format!("/admin/drops/{drop}"))).bearer_auth(ADMIN_TOKEN).json(&plain);
    assert_eq!(seeded.send().await.unwrap().status(), 200);
    assert_error(stats(&app, &drop).await, 409, "not_a_draw").await;

    let drop = crate::draw_entries::open_draw(&app).await;
    let before: Value = stats(&app, &drop).await.json().await.unwrap();
    assert_eq!((before["phase"].as_str(), before["entries"].as_u64()), (Some("open"), Some(0)), "{before}");
    for user in ["u1", "u2", "u3"] {
        let entry = json!({"sizes": ["41", "42"], "quantity": 2, "user_id": user});
        assert_eq!(crate::draw_entries::enter(&app, &drop, entry).await.status(), 201);
    }
    crate::draw_entries::wait_stored(&app, &drop, 3).await;
    let entered: Value = stats(&app, &drop).await.json().await.unwrap();
    let buckets = entered["entries_over_time"].as_array().unwrap();
    assert_eq!((entered["entries"].as_u64(), buckets.len()), (Some(3), 24), "{entered}");
    assert_eq!(buckets[0], 3, "entered a minute into an hour's window: the first slice: {entered}");
    let run = app.client.post(app.url(&format!("/admin/drops/{drop}/draw"))).bearer_auth(ADMIN_TOKEN).send().await;
    assert_eq!(run.unwrap().status(), 200);
    let drawn: Value = stats(&app, &drop).await.json().await.unwrap();
    // Sizes 41 and 42 of 5 units each: the three win 2 units each.
    assert_eq!(
        (drawn["phase"].as_str(), drawn["won"].as_u64(), drawn["units_awarded"].as_u64(), drawn["lost"].as_u64()),
        (Some("drawn"), Some(3), Some(6), Some(0)),
        "{drawn}"
    );
}
