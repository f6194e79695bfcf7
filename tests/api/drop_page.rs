//! The drop's one buyer page in headless Chromium (issue 52): the buyer names themselves, joins the
//! drop's line once (its proof of work solved in the page's Web Worker), is admitted, and buys two
//! sizes with the one admission token, a sold-out size not pickable; then Postgres and Redis agree
//! with what the page showed. Screenshots: `target/tmp/drop-page-{named,joined,admitted,bought}.png`.

use redis::AsyncCommands;
use seckill::redis::keys::LineKeys;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::chromium::Browser;
use crate::helpers::{ADMIN_TOKEN, spawn_app};

fn at(offset: time::Duration) -> String {
    (OffsetDateTime::now_utc() + offset).format(&Rfc3339).unwrap()
}

impl Browser {
    /// What the page's line, size buttons, Buy and orders show.
    async fn drop_view(&self) -> Value {
        let script = r##"
            const $ = (id) => document.getElementById(id);
            const shown = (id) => $(id).checkVisibility() ? $(id).innerText : null;
            return {
                queue_state: shown("queue-state"), join: $("join").checkVisibility() ? !$("join").disabled : null,
                sizes: [...document.querySelectorAll("#size-buttons button")].map((b) => [b.dataset.sale, !b.disabled]),
                buy: $("buy").innerText, buy_enabled: !$("buy").disabled, message: $("message").innerText,
                orders: [...document.querySelectorAll("#order-list li")].map((li) => li.innerText.replace(/\s+/g, " ").trim()),
            };"##;
        self.run(script, vec![]).await
    }

    async fn drop_view_shows(&self, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        let found = tokio::time::timeout(crate::chromium::PAGE_DEADLINE, async {
            loop {
                last = self.drop_view().await;
                if check(&last) {
                    return last.clone();
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("the drop page never showed {what}"))
    }

    /// Picks the size `sale`, sets the quantity and clicks Buy.
    async fn buy_size(&self, sale: &str, quantity: u32) {
        let pick = r#"document.querySelector(`#size-buttons button[data-sale="${arguments[0]}"]`).click();"#;
        self.run(pick, vec![json!(sale)]).await;
        self.drop_view_shows("the size picked", |v| v["buy_enabled"] == true).await;
        let set = r#"document.getElementById("quantity").value = arguments[0];"#;
        self.run(set, vec![json!(quantity.to_string())]).await;
        self.click("buy").await;
    }
}

#[tokio::test]
async fn a_buyer_joins_the_drops_line_once_and_buys_two_sizes_from_the_page() {
    let app = spawn_app().await;
    let drop = format!("drop-{}", &uuid::Uuid::now_v7().simple().to_string()[..20]);
    let body = json!({
        "sizes": {"40": {"stock": 3}, "41": {"stock": 2}, "42": {"stock": 0}},
        "per_buyer": 3,
        "starts_at": at(time::Duration::seconds(4)),
        "waiting_room": {"opens_at": at(-time::Duration::SECOND), "rate": 100},
        "challenge": {"cost": 50},
    });
    let url = app.url(&format!("/admin/drops/{drop}"));
    let seeded = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());
    let (size40, size41, size42) = (format!("{drop}.40"), format!("{drop}.41"), format!("{drop}.42"));

    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/drop/{drop}"))).await.unwrap();
    browser.fill("user-id", "alice").await;
    let named = browser.drop_view_shows("Join offered", |v| v["join"] == true).await;
    assert_eq!((named["buy"].as_str(), named["buy_enabled"].as_bool()), (Some("Join the line first"), Some(false)));
    browser.screenshot("drop-page-named.png").await;

    browser.click("join").await;
    let joined = browser.drop_view_shows("alice in the line", |v| v["queue_state"].is_string()).await;
    assert_eq!(joined["join"], Value::Null, "one join: the button is gone: {joined}");
    browser.screenshot("drop-page-joined.png").await;

    // The start: alice's turn; the sold-out size cannot be picked, the others can.
    browser.drop_view_shows("alice's turn", |v| v["queue_state"] == "Your turn").await;
    let sizes = json!([[size40, true], [size41, true], [size42, false]]);
    browser.drop_view_shows("the sizes open, the sold-out one not pickable", |v| v["sizes"] == sizes).await;
    browser.screenshot("drop-page-admitted.png").await;

    browser.buy_size(&size40, 2).await;
    browser.drop_view_shows("the first order", |v| v["orders"].as_array().unwrap().len() == 1).await;
    browser.buy_size(&size41, 1).await;
    let bought = browser
        .drop_view_shows("both orders confirmed", |v| {
            let orders = v["orders"].as_array().unwrap();
            orders.len() == 2 && orders.iter().all(|o| o.as_str().unwrap().contains("confirmed"))
        })
        .await;
    assert_eq!((bought["buy"].as_str(), bought["buy_enabled"].as_bool()), (Some("Limit reached"), Some(false)));
    assert!(bought["orders"][0].as_str().unwrap().starts_with("Size 40 × 2"), "{bought}");
    assert!(bought["orders"][1].as_str().unwrap().starts_with("Size 41 × 1"), "{bought}");
    browser.screenshot("drop-page-bought.png").await;
    browser.client.close().await.unwrap();

    // Postgres and Redis agree with the page: alice's units in each size, the stock left, and her
    // one place in the drop's line marked bought.
    for (sale, units, left) in [(&size40, 2, 1), (&size41, 1, 1), (&size42, 0, 0)] {
        let status = app.wait_for_drain(sale).await;
        assert_eq!(status.stock_left, left, "{sale} in Redis");
        let rows: Vec<(String, i32)> = sqlx::query_as("select user_id, quantity from orders where sale_id = $1")
            .bind(sale)
            .fetch_all(&app.pool)
            .await
            .unwrap();
        let expected: Vec<(String, i32)> = if units > 0 { vec![("alice".into(), units)] } else { vec![] };
        assert_eq!(rows, expected, "{sale} in Postgres");
    }
    let line = LineKeys::of_drop(app.store.keyspace().prefix(), &drop);
    let place: Option<f64> = app.redis.clone().zscore(&line.queue.bought, "alice").await.unwrap();
    assert!(place.is_some(), "alice's one place is marked bought");
}

/// A reservation bought from the page is followed until it settles: cancelled (here by the buyer
/// through the API, as another tab would), it no longer counts against the limit, and the page
/// offers Buy again. The page followed only queued orders, so a reservation stayed "reserved" and
/// the page said "Limit reached" where the service would sell.
#[tokio::test]
async fn a_reservation_bought_from_the_page_is_followed_until_it_settles() {
    let app = spawn_app().await;
    let drop = format!("drop-{}", &uuid::Uuid::now_v7().simple().to_string()[..20]);
    let body = json!({"sizes": {"40": {"stock": 2}}, "per_buyer": 1, "payment_window": "10m"});
    let url = app.url(&format!("/admin/drops/{drop}"));
    let seeded = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());
    let size40 = format!("{drop}.40");

    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/drop/{drop}"))).await.unwrap();
    browser.fill("user-id", "alice").await;
    browser.drop_view_shows("the size offered", |v| v["sizes"] == json!([[size40, true]])).await;
    browser.buy_size(&size40, 1).await;
    let reserved = browser
        .drop_view_shows("the reservation", |v| {
            v["orders"].as_array().unwrap().iter().any(|o| o.as_str().unwrap().contains("reserved"))
        })
        .await;
    assert_eq!(reserved["buy"].as_str(), Some("Limit reached"), "{reserved}");
    app.wait_for_drain(&size40).await;
    assert_eq!(app.cancel(&size40, "alice").await.status(), 200);
    let cancelled = browser
        .drop_view_shows("the order cancelled and Buy offered again", |v| {
            v["orders"][0].as_str().unwrap_or("").contains("cancelled") && v["buy_enabled"] == true
        })
        .await;
    browser.screenshot("drop-page-cancelled.png").await;
    browser.client.close().await.unwrap();
    assert_ne!(cancelled["buy"].as_str(), Some("Limit reached"), "{cancelled}");
}
