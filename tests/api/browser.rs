//! The live sale page (`GET /admin`) in a real browser: headless Chromium driven through
//! chromedriver (WebDriver, `fantoccini`) during a small storm, and a sale with a payment window.
//! Screenshots are written to `target/tmp/admin-page-{live,alert,reservations,fragment-sold-out,
//! paused,marks,webhooks,webhooks-quiet,webhook-disabled,viewer}.png` (cargo's `CARGO_TARGET_TMPDIR`).

use std::time::Duration;

use fantoccini::Locator;
use futures::StreamExt;
use seckill::limiter::RateLimit;
use serde::Deserialize;
use serde_json::json;
use tokio::time::{Instant, sleep};

use crate::chromium::{Browser, PAGE_DEADLINE};
use crate::helpers::{ADMIN_TOKEN, TestApp, new_sale_id, spawn_app_with};

/// The page's sessionStorage key for the token.
const TOKEN_KEY: &str = "seckill.admin-token";

/// What the live page shows.
impl Browser {
    async fn log_in(&self, token: &str) {
        self.fill("token", token).await;
        self.client.find(Locator::Css("#login button[type=submit]")).await.unwrap().click().await.unwrap();
    }

    /// What the page's card for `sale_id` shows, as rendered text; `None` without a card.
    async fn sale(&self, sale_id: &str) -> Option<PageSale> {
        let script = r#"
            const card = [...document.querySelectorAll(".sale")].find((c) => c.dataset.saleId === arguments[0]);
            if (!card) return null;
            const text = (name) => card.querySelector(`[data-field="${name}"]`).innerText;
            const bar = card.querySelector("progress");
            return {
                stock_left: text("stock_left"), stock_initial: text("stock_initial"), sold: text("sold"),
                persisted: text("persisted"), queued: text("queued"), peak: text("peak"), state: text("state"),
                window: text("window"),
                shards: card.querySelector('[data-field="shards"]').checkVisibility() ? text("shards") : "",
                bar: [bar.value, bar.max], chart: card.querySelector("polyline").getAttribute("points"),
                alerts: [...card.querySelectorAll(".alerts li")].map((li) => li.innerText),
                audit: [...card.querySelectorAll('[data-field="audit"] li')].map((li) => li.innerText),
                marks: [...card.querySelectorAll('[data-field="marks"] li')].map((li) => li.className + " " + li.innerText),
                mark_lines: card.querySelectorAll("svg .lines line").length,
                limit: card.querySelector('[data-field="limit"]').checkVisibility() ? text("limit") : "",
                units_sold: card.querySelector('[data-field="units_box"]').checkVisibility() ? text("units_sold") : "",
            };"#;
        serde_json::from_value(self.run(script, vec![json!(sale_id)]).await).unwrap()
    }
}

/// One sale's card as the page renders it.
#[derive(Debug, Deserialize)]
struct PageSale {
    stock_left: String,
    stock_initial: String,
    sold: String,
    persisted: String,
    queued: String,
    peak: String,
    state: String,
    /// The sale's times ("opened … · no end set").
    window: String,
    /// The shard badge's text, "" while it is hidden (an unsharded sale).
    shards: String,
    bar: (f64, f64),
    chart: String,
    alerts: Vec<String>,
    /// The operator actions listed on the card, newest first.
    audit: Vec<String>,
    /// The chart's marks as listed below it, `"<kind> <label>"`, oldest first, and the lines drawn.
    marks: Vec<String>,
    mark_lines: usize,
    /// The per-buyer badge ("" while hidden) and the units sold ("" while they are the orders).
    limit: String,
    units_sold: String,
}

/// A number as the page prints it (`1,234`).
fn shown(text: &str) -> i64 {
    text.replace(',', "").parse().unwrap_or_else(|_| panic!("not a count: {text:?}"))
}

impl PageSale {
    /// (stock_initial, stock_left, sold, persisted, queued), as shown.
    fn counts(&self) -> (i64, i64, i64, i64, i64) {
        let (initial, left, sold, queued) =
            (shown(&self.stock_initial), shown(&self.stock_left), shown(&self.sold), shown(&self.queued));
        (initial, left, sold, shown(&self.persisted), queued)
    }
}

/// The users `buyers` buy, each from its own address, in waves of 10 every 200 ms, so a page
/// polling once a second sees the counts climb. Returns how many got 201.
async fn paced_storm(app: &TestApp, sale: &str, buyers: std::ops::Range<usize>) -> usize {
    let first = buyers.start;
    futures::stream::iter(buyers.clone())
        .map(|i| async move {
            sleep(Duration::from_millis(200 * ((i - first) / 10) as u64)).await;
            let response = app
                .client
                .post(app.url("/buy"))
                .header("x-forwarded-for", format!("10.0.{}.{}", i / 200, i % 200 + 1))
                .json(&json!({"sale_id": sale, "user_id": format!("storm-{i}")}))
                .send()
                .await
                .unwrap();
            response.status() == 201
        })
        .buffer_unordered(buyers.len())
        .filter(|created| std::future::ready(*created))
        .count()
        .await
}

#[tokio::test]
async fn the_live_page_follows_a_storm_matches_the_status_endpoint_and_raises_a_disagreement() {
    let app = spawn_app_with(
        |c| {
            c.rate_limit = RateLimit { limit: 3, window: Duration::from_secs(60) };
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
        },
        true,
    )
    .await;
    let sale = new_sale_id();
    let quiet = format!("{sale}-quiet");
    app.seed_stock(&sale, 150).await;
    let seeded = app.seed(&quiet, json!({"stock": 40, "shards": 2})).await;
    assert_eq!(seeded.status(), 200);
    let browser = Browser::start().await;

    // The page asks for the token, refuses a wrong one, and keeps the right one in the tab only.
    browser.client.goto(&app.url("/admin")).await.unwrap();
    assert!(browser.visible("login").await && !browser.visible("dashboard").await);
    browser.log_in("not-the-token").await;
    browser.wait_for("the refusal", async |b| (b.text("login-error").await.contains("token")).then_some(())).await;
    assert_eq!(browser.run(&format!("return sessionStorage.getItem('{TOKEN_KEY}')"), vec![]).await, json!(null));
    browser.log_in(ADMIN_TOKEN).await;
    let before = browser.wait_for("the sale", async |b| b.sale(&sale).await).await;
    assert_eq!(before.counts(), (150, 150, 0, 0, 0));
    assert_eq!((before.state.as_str(), before.shards.as_str()), ("open", ""), "no shard badge when unsharded");
    assert_eq!(browser.run(&format!("return sessionStorage.getItem('{TOKEN_KEY}')"), vec![]).await, json!(ADMIN_TOKEN));
    assert_eq!(browser.run("return [localStorage.length, document.cookie]", vec![]).await, json!([0, ""]));
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.wait_for("the sale after a reload", async |b| b.sale(&sale).await).await;

    // One client over its limit: 3 buy, 7 are refused (the limiter counts them, the page shows them).
    let mut refused = 0;
    for i in 0..10 {
        let response = app
            .client
            .post(app.url("/buy"))
            .header("x-forwarded-for", "203.0.113.7")
            .json(&json!({"sale_id": sale, "user_id": format!("eager-{i}")}))
            .send()
            .await
            .unwrap();
        refused += usize::from(response.status() == 429);
    }
    assert_eq!(refused, 7);

    // A paced storm of 200 buyers for the 147 items left, in two halves: the page shows the count
    // between them (whatever the machine's speed), and is read while the second runs.
    let first = paced_storm(&app, &sale, 0..100).await;
    assert_eq!(first, 100);
    let between = |s: &PageSale| shown(&s.sold) == 103;
    browser.wait_for("the first half's count", async |b| b.sale(&sale).await.filter(between)).await;
    browser.screenshot("admin-page-live.png").await;
    let storm_ended = std::cell::Cell::new(None::<Instant>);
    let storm = async {
        let created = paced_storm(&app, &sale, 100..200).await;
        storm_ended.set(Some(Instant::now()));
        created
    };
    let watch = async {
        let mut seen = vec![103];
        // Until the page shows sold out, at most PAGE_DEADLINE after the storm's last answer.
        while seen.last() != Some(&150) && storm_ended.get().is_none_or(|at| at.elapsed() < PAGE_DEADLINE) {
            seen.push(shown(&browser.sale(&sale).await.unwrap().sold));
            sleep(Duration::from_millis(150)).await;
        }
        seen
    };
    let (created, seen) = tokio::join!(storm, watch);
    assert_eq!(first + created, 147);
    seen.windows(2).for_each(|w| assert!(w[0] <= w[1], "sold never goes down on the page: {seen:?}"));
    let mut distinct = seen.clone();
    distinct.dedup();
    assert_eq!(seen.last(), Some(&150), "the page reached sold out: {distinct:?}");

    // Once the queue drains, every number on the page is the status endpoint's.
    let status = app.wait_for_drain(&sale).await;
    let expected = (status.stock_initial, status.stock_left, status.sold, status.persisted.unwrap(), status.queued);
    assert_eq!(expected, (150, 0, 150, 150, 0));
    let settled =
        browser.wait_for("the drained sale", async |b| b.sale(&sale).await.filter(|s| s.counts() == expected)).await;
    assert_eq!(settled.bar, (0.0, 150.0), "an empty stock bar");
    assert_eq!(settled.state, "sold out");
    let peak: f64 = settled.peak.replace(',', "").parse().unwrap();
    assert!(peak > 0.0, "purchases per second peaked above 0: {peak}");
    assert!(settled.chart.split(' ').count() >= 2, "the chart has points: {:?}", settled.chart);
    assert!(settled.alerts.is_empty(), "no alert while Redis and Postgres agree: {:?}", settled.alerts);
    let quiet_card = browser.sale(&quiet).await.expect("the quiet sale has a card");
    let quiet_status = app.status(&quiet).await;
    assert_eq!(quiet_card.counts(), (40, 40, 0, 0, 0));
    assert_eq!(quiet_card.shards, "2 shards");
    assert_eq!((quiet_status.stock_left, quiet_status.sold), (40, 0));
    browser.wait_for("7 refusals", async |b| (b.text("limiter-refused").await == "7").then_some(())).await;

    // Two orders vanish from Postgres behind the service's back: the page raises an alert for
    // that sale only, and the reconcile repair clears it.
    let deleted =
        sqlx::query("delete from orders where order_id in (select order_id from orders where sale_id = $1 limit 2)")
            .bind(&sale)
            .execute(&app.pool)
            .await
            .unwrap();
    assert_eq!(deleted.rows_affected(), 2);
    let alerting = browser
        .wait_for("the disagreement alert", async |b| {
            b.sale(&sale).await.filter(|s| s.alerts.iter().any(|a| a.contains("2 sold order(s) are neither queued")))
        })
        .await;
    assert_eq!(alerting.alerts.len(), 1, "{:?}", alerting.alerts);
    assert_eq!(alerting.counts(), (150, 0, 150, 148, 0), "Postgres holds 2 orders fewer");
    assert!(browser.sale(&quiet).await.unwrap().alerts.is_empty(), "the other sale is fine");
    let alert_shot = browser.screenshot("admin-page-alert.png").await;
    let repair = app
        .client
        .post(app.url(&format!("/admin/sales/{sale}/reconcile")))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(repair.status(), 200);
    browser
        .wait_for("the alert cleared", async |b| {
            b.sale(&sale).await.filter(|s| s.alerts.is_empty() && s.counts() == expected)
        })
        .await;

    // Signing out forgets the token.
    browser.click("sign-out").await;
    assert!(browser.visible("login").await);
    assert_eq!(browser.run(&format!("return sessionStorage.getItem('{TOKEN_KEY}')"), vec![]).await, json!(null));
    assert!(alert_shot.exists());
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn a_sale_with_a_payment_window_shows_its_reservations_and_released_units_add_up() {
    let app = spawn_app_with(|_| {}, true).await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 3, "payment_window": "10m"})).await.status(), 200);
    for user in ["alice", "bob"] {
        assert_eq!(app.buy(&sale, user).await.status(), 201);
    }
    assert_eq!(app.cancel(&sale, "alice").await.status(), 200);
    app.wait_for_drain(&sale).await;
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(ADMIN_TOKEN).await;
    let card = browser.wait_for("the sale's card", async |b| b.sale(&sale).await.filter(|s| s.stock_left == "2")).await;
    assert_eq!((card.sold.as_str(), card.stock_initial.as_str()), ("2", "3"));
    assert!(card.alerts.is_empty(), "2 left + 2 sold − 1 released = 3: no alert, got {:?}", card.alerts);
    let text = |field: &'static str| {
        let script = format!(
            "return [...document.querySelectorAll('.sale')].find((c) => c.dataset.saleId === arguments[0])\
             .querySelector('[data-field=\"{field}\"]').innerText"
        );
        let browser = &browser;
        let sale = sale.clone();
        async move { browser.run(&script, vec![json!(sale)]).await }
    };
    assert_eq!(
        (text("reserved").await, text("paid").await, text("released").await, text("late_payments").await),
        (json!("1"), json!("0"), json!("1"), json!("0"))
    );
    browser.screenshot("admin-page-reservations.png").await;
    browser.client.close().await.unwrap();
}

/// `/admin#token=…` signs in (the token leaves the URL for the tab's sessionStorage), and a sale
/// that appears and sells out between two of the page's samples still has a purchase rate.
#[tokio::test]
async fn a_token_in_the_fragment_signs_in_and_a_sale_sold_out_between_two_samples_has_a_peak() {
    let app = spawn_app_with(|_| {}, false).await;
    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/admin#token={ADMIN_TOKEN}"))).await.unwrap();
    browser.wait_for("the dashboard", async |b| b.visible("no-sales").await.then_some(())).await;
    assert!(!browser.visible("login").await, "signed in without the form");
    let stored = browser.run(&format!("return [location.href, sessionStorage.getItem('{TOKEN_KEY}')]"), vec![]).await;
    assert_eq!(stored, json!([app.url("/admin"), ADMIN_TOKEN]), "the token left the URL for this tab");

    // Seeded and sold out at once, between two samples (one a second) most likely.
    let sale = new_sale_id();
    app.seed_stock(&sale, 30).await;
    let bought = futures::stream::iter(0..30)
        .map(|i| {
            let (app, sale) = (&app, &sale);
            async move { app.buy(sale, &format!("u{i}")).await.status().as_u16() }
        })
        .buffer_unordered(30)
        .collect::<Vec<_>>()
        .await;
    assert!(bought.iter().all(|s| *s == 201), "{bought:?}");
    let card =
        browser.wait_for("the sold-out card", async |b| b.sale(&sale).await.filter(|s| s.stock_left == "0")).await;
    // Seeded without times: the card says so, and the badge says sold out (not "open now").
    assert_eq!((card.window.as_str(), card.state.as_str()), ("no start or end time set", "sold out"), "{card:?}");
    let peak: f64 = card.peak.replace(',', "").parse().unwrap();
    assert!(peak > 0.0, "the 30 purchases have a rate: peak {peak}");
    browser.screenshot("admin-page-fragment-sold-out.png").await;
    browser.client.close().await.unwrap();
}

#[tokio::test]
async fn the_live_page_shows_a_pause_with_its_reason_until_the_sale_resumes() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 10).await;
    let switch = |action: &str, body: serde_json::Value| {
        let url = app.url(&format!("/admin/sales/{sale}/{action}"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    assert_eq!(switch("pause", json!({"reason": "price typo"})).await.unwrap().status(), 200);
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(ADMIN_TOKEN).await;
    let state = async |b: &Browser| b.sale(&sale).await.map(|s| s.state);
    let paused =
        browser.wait_for("the paused sale", async |b| state(b).await.filter(|s| s.starts_with("paused"))).await;
    assert_eq!(paused, "paused: price typo");
    // The card lists the operator's actions: the seed, then the pause with its reason.
    let audit = browser
        .wait_for("the pause in the trail", async |b| b.sale(&sale).await.map(|s| s.audit).filter(|a| a.len() == 2))
        .await;
    let (pause, seed) = (" UTC pause: price typo by admin-token", " UTC seed by admin-token");
    assert!(audit[0].ends_with(pause) && audit[1].ends_with(seed), "{audit:?}");
    browser.screenshot("admin-page-paused.png").await;
    assert_eq!(switch("resume", json!({})).await.unwrap().status(), 200);
    browser.wait_for("the sale open again", async |b| state(b).await.filter(|s| s == "open")).await;
    let audit = browser
        .wait_for("the resume in the trail", async |b| b.sale(&sale).await.map(|s| s.audit).filter(|a| a.len() == 3))
        .await;
    assert!(audit[0].ends_with(" UTC resume by admin-token"), "{audit:?}");
}

#[tokio::test]
async fn the_chart_marks_a_pause_a_resume_and_a_top_up_and_the_card_counts_units() {
    let app = spawn_app_with(|_| {}, false).await;
    let group = format!("g{}", uuid::Uuid::now_v7().simple());
    let sale = format!("{group}.42");
    let seeded = app.seed(&sale, json!({"stock": 10, "group": group, "per_buyer": 2})).await;
    assert_eq!(seeded.status(), 200);
    let buy = |user: &'static str, quantity: u32| {
        app.client.post(app.url("/buy")).json(&json!({"sale_id": sale, "user_id": user, "quantity": quantity})).send()
    };
    assert_eq!(buy("ann", 2).await.unwrap().status(), 201);
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(ADMIN_TOKEN).await;
    let card = browser.wait_for("the card", async |b| b.sale(&sale).await.filter(|s| s.sold == "1")).await;
    assert_eq!((card.limit.as_str(), card.units_sold.as_str()), (format!("2 per buyer across {group}").as_str(), "2"));
    assert!(card.marks.is_empty(), "{:?}", card.marks);

    let switch = |action: &str, body: serde_json::Value| {
        let url = app.url(&format!("/admin/sales/{sale}/{action}"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    let marked = async |what: &str, n: usize| {
        browser.wait_for(what, async |b| b.sale(&sale).await.filter(|s| s.marks.len() == n)).await
    };
    assert_eq!(switch("pause", json!({"reason": "price typo"})).await.unwrap().status(), 200);
    marked("the pause's mark", 1).await;
    assert_eq!(switch("stock", json!({"add": 5})).await.unwrap().status(), 200);
    marked("the top-up's mark", 2).await;
    assert_eq!(switch("resume", json!({})).await.unwrap().status(), 200);
    let card = marked("the resume's mark", 3).await;
    let kinds: Vec<&str> = card.marks.iter().map(|m| m.split(' ').next().unwrap()).collect();
    assert_eq!(kinds, ["mark-pause", "mark-stock", "mark-resume"], "{:?}", card.marks);
    assert!(card.alerts.is_empty(), "the units add up: {:?}", card.alerts);
    assert!(card.marks[0].contains("paused (price typo)") && card.marks[1].contains("stock +5"), "{:?}", card.marks);
    assert_eq!(card.mark_lines, 3, "each mark drawn on the chart");
    assert_eq!(card.stock_initial, "15", "the top-up kept the history: {card:?}");
    browser.screenshot("admin-page-marks.png").await;
}

#[tokio::test]
async fn the_live_page_shows_the_order_events_deliveries_and_their_failures() {
    let receiver = crate::common::receiver::Receiver::start(crate::common::receiver::Mode::Down).await;
    let app = spawn_app_with(|c| crate::webhooks::webhooks_to(c, &receiver.url, 1), true).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(ADMIN_TOKEN).await;
    let line = async |b: &Browser| -> String {
        let script = r#"const p = document.getElementById("webhooks"); return p.checkVisibility() ? p.innerText : "";"#;
        serde_json::from_value(b.run(script, vec![]).await).unwrap()
    };
    // Before any event: the sentence closes without the hint, and without a space before its stop.
    let quiet = browser.wait_for("the webhooks' line", async |b| Some(line(b).await).filter(|l| !l.is_empty())).await;
    assert_eq!(quiet, "Order events out: 0 deliveries open, delivery lag 0 s, 0 failed for good.");
    browser.screenshot("admin-page-webhooks-quiet.png").await;
    assert_eq!(app.buy(&sale, "ann").await.status(), 201);
    let shown = browser
        .wait_for("the failed delivery", async |b| Some(line(b).await).filter(|l| l.contains("1 failed for good")))
        .await;
    assert!(shown.starts_with("Order events out: 0 deliveries open"), "{shown}");
    assert!(shown.ends_with("failed for good (GET /admin/events?status=failed lists them, POST /admin/events/{id}/retry sends one again)."), "{shown}");
    assert!(shown.contains("GET /admin/events?status=failed"), "the way to the failures: {shown}");
    browser.screenshot("admin-page-webhooks.png").await;
}

#[tokio::test]
async fn the_live_page_says_which_webhook_endpoint_is_disabled_and_why() {
    let disable_after = |c: &mut seckill::config::Config| c.webhooks.webhook_disable_after = Duration::from_secs(1);
    let (receiver, _app, browser) = live_page_with_a_receiver_down(200, disable_after).await;
    let shown = browser
        .wait_for("the disabled endpoint", async |b| {
            Some(visible_text(b, "webhooks-disabled").await).filter(|l| !l.is_empty())
        })
        .await;
    let expected = format!("Webhook endpoint {} disabled since ", receiver.url);
    assert!(shown.starts_with(&expected), "{shown}");
    assert!(shown.contains("no attempt accepted since") && shown.contains("(1s or more); the last: "), "why: {shown}");
    assert!(shown.contains("until POST /admin/webhooks/1/enable"), "the way back: {shown}");
    browser.screenshot("admin-page-webhook-disabled.png").await;
}

/// The text of the element `id` while it is visible ("" while hidden).
async fn visible_text(browser: &Browser, id: &str) -> String {
    let script =
        format!(r#"const e = document.getElementById("{id}"); return e.checkVisibility() ? e.innerText : "";"#);
    serde_json::from_value(browser.run(&script, vec![]).await).unwrap()
}

/// The live page, logged in, of a service that sends webhooks to a receiver that is down
/// (`attempts` each, `tweak` on top of that), after one order.
async fn live_page_with_a_receiver_down(
    attempts: usize,
    tweak: impl FnOnce(&mut seckill::config::Config),
) -> (crate::common::receiver::Receiver, TestApp, Browser) {
    let receiver = crate::common::receiver::Receiver::start(crate::common::receiver::Mode::Down).await;
    let app = spawn_app_with(
        |c| {
            crate::webhooks::webhooks_to(c, &receiver.url, attempts);
            tweak(c);
        },
        true,
    )
    .await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 3).await;
    assert_eq!(app.buy(&sale, "ann").await.status(), 201);
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(ADMIN_TOKEN).await;
    (receiver, app, browser)
}

/// A viewer signs in with a named token: the header names them and their role, every write
/// control is hidden, and the card's export buttons download the sale's and the drop's orders.
#[tokio::test]
async fn a_viewer_signs_in_by_name_sees_no_write_control_and_exports_the_orders() {
    let crew = crate::operators::Crew::new();
    let app = spawn_app_with(|c| crew.enlist(c), true).await;
    let group = format!("g{}", uuid::Uuid::now_v7().simple());
    let sale = format!("{group}.42");
    app.seed(&sale, json!({"stock": 10, "group": group, "per_buyer": 2})).await;
    assert_eq!(app.buy(&sale, "ann").await.status(), 201);
    app.wait_for_drain(&sale).await;
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.log_in(&crew.viewer).await;
    browser.wait_for("the sale's card", async |b| b.sale(&sale).await).await;
    let who = browser.wait_for("who is signed in", async |b| Some(b.text("who").await).filter(|t| !t.is_empty())).await;
    assert_eq!(who.split_whitespace().collect::<Vec<_>>(), ["Signed", "in", "as", "vera", "viewer"]);
    // A write control (as the drop's switch buttons are marked) is not shown to a viewer.
    let hidden = browser
        .run(
            r#"const b = Object.assign(document.createElement("button"), { textContent: "Pause" });
               b.dataset.needs = "operator"; document.body.appendChild(b);
               const shown = b.checkVisibility(); b.remove();
               return [shown, document.body.className];"#,
            vec![],
        )
        .await;
    assert_eq!(hidden, json!([false, "role-viewer"]));
    let exports = browser
        .run(
            r#"const card = [...document.querySelectorAll(".sale")].find((c) => c.dataset.saleId === arguments[0]);
               return [...card.querySelectorAll("button[data-export]")].filter((b) => b.checkVisibility())
                   .map((b) => b.dataset.export + "." + b.dataset.format);"#,
            vec![json!(sale)],
        )
        .await;
    assert_eq!(exports, json!(["sale.csv", "sale.ndjson", "drop.csv", "drop.ndjson"]));
    // The page's download (fetch with the token, then a file): what it fetched is the export.
    let fetched = browser
        .run(
            r#"const token = sessionStorage.getItem("seckill.admin-token");
               const xhr = new XMLHttpRequest();
               xhr.open("GET", `/admin/drops/${arguments[0]}/orders?format=csv`, false);
               xhr.setRequestHeader("Authorization", "Bearer " + token);
               xhr.send();
               return [xhr.status, xhr.responseText.split("\r\n").length];"#,
            vec![json!(group)],
        )
        .await;
    assert_eq!(fetched, json!([200, 3]), "the header, ann's order and the final line end");
    browser.screenshot("admin-page-viewer.png").await;
}

/// A sale's state is judged on the service's clock, not on the operator's: with the browser's
/// clock two days ahead, a sale that ends tomorrow shows open (it showed ended).
#[tokio::test]
async fn live_page_judges_a_sale_on_the_services_clock() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    let tomorrow = time::OffsetDateTime::now_utc() + time::Duration::days(1);
    let ends_at = tomorrow.format(&time::format_description::well_known::Rfc3339).unwrap();
    assert_eq!(app.seed(&sale, json!({"stock": 10, "ends_at": ends_at})).await.status(), 200);
    let browser = Browser::start().await;
    browser.client.goto(&app.url("/admin")).await.unwrap();
    browser.run("const real = Date.now; Date.now = () => real() + 2 * 86400000;", vec![]).await;
    browser.log_in(ADMIN_TOKEN).await;
    let shown = browser.wait_for("the sale", async |b| b.sale(&sale).await).await;
    assert_eq!(shown.state, "open", "{:?}", shown.window);
    assert!(shown.window.starts_with("closes "), "{:?}", shown.window);
}
