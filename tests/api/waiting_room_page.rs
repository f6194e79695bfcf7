//! The buyer page of a queued sale in headless Chromium (issue 27): the countdown to the
//! waiting room, the pre-queue, the place drawn at the start, a later buyer's place at the end of
//! the line with the people ahead and the wait, Buy lit only on the buyer's turn, and the order.
//! Screenshots: `target/tmp/waiting-room-{prequeue,position,admitted,bought}.png`.

use std::time::Duration;

use serde::Deserialize;
use serde_json::json;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::chromium::{Browser, PAGE_DEADLINE};
use crate::helpers::{ADMIN_TOKEN, assert_error, new_sale_id, spawn_app_with};

/// Buyers who join the pre-queue through the API, besides the page's.
const RIVALS: u64 = 59;
/// Buyers who join after the start through the API, just before bob: bob's place is then
/// RIVALS + LATE + 2 = 101.
const LATE: u64 = 40;
/// Buyers let in per second.
const RATE: u64 = 20;
/// The stock until bob's turn: admission holds while ceil(2 × stock left) admitted buyers have
/// not bought, so the two first places hold the line (nobody buys) however slowly the steps
/// before bob's join run; a top-up then lets it move on to him.
const STOCK: u64 = 1;
/// How long bob may wait for his turn once the line moves: his place at RATE, and a margin.
const TURN_DEADLINE: Duration = Duration::from_secs(60);

/// What the page's waiting room shows; `None` for an element that is hidden.
#[derive(Debug, Deserialize)]
struct Room {
    countdown_label: Option<String>,
    queue_state: Option<String>,
    position: Option<String>,
    ahead: Option<String>,
    wait: Option<String>,
    note: Option<String>,
    join_enabled: Option<bool>,
    buy: String,
    buy_enabled: bool,
    order_status: Option<String>,
}

impl Browser {
    async fn room(&self) -> Room {
        let script = r#"
            const $ = (id) => document.getElementById(id);
            const shown = (id) => $(id).checkVisibility() ? $(id).innerText : null;
            return {
                countdown_label: shown("countdown-label"), queue_state: shown("queue-state"),
                position: shown("queue-position"), ahead: shown("queue-ahead"), wait: shown("queue-wait"),
                note: shown("queue-note"), join_enabled: $("join").checkVisibility() ? !$("join").disabled : null,
                buy: $("buy").innerText, buy_enabled: !$("buy").disabled, order_status: shown("order-status"),
            };"#;
        serde_json::from_value(self.run(script, vec![]).await).unwrap()
    }

    /// Waits (at most `limit`) until the waiting room passes `check`; fails with what it showed.
    async fn room_within(&self, what: &str, limit: Duration, check: impl Fn(&Room) -> bool) -> Room {
        let until = tokio::time::Instant::now() + limit;
        loop {
            let room = self.room().await;
            if check(&room) {
                return room;
            }
            let message = self.text("message").await;
            if tokio::time::Instant::now() >= until {
                let script = "return JSON.stringify({line, lineSeq, lineApplied, joining, identity, lineAsked})";
                let state = self.run(script, vec![]).await;
                panic!("the page never showed {what}: {room:?}, message {message:?}, page state {state}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn room_shows(&self, what: &str, check: impl Fn(&Room) -> bool) -> Room {
        self.room_within(what, PAGE_DEADLINE, check).await
    }
}

fn at(offset: time::Duration) -> String {
    (OffsetDateTime::now_utc() + offset).format(&Rfc3339).unwrap()
}

/// Seeds (again: nobody has bought, so a re-seed keeps the line) the sale with its room opening
/// and its start `opens_in` and `starts_in` from now. The test moves the sale from one state to
/// the next this way, when the page has shown the one before: no step races a clock.
async fn seed_at(app: &crate::helpers::TestApp, sale: &str, opens_in: time::Duration, starts_in: time::Duration) {
    let queue = json!({"opens_at": at(opens_in), "rate": RATE});
    let body = json!({"stock": STOCK, "starts_at": at(starts_in), "queue": queue});
    let seeded = app.seed(sale, body).await;
    assert_eq!(seeded.status(), 200, "{}", seeded.text().await.unwrap());
}

#[tokio::test]
async fn the_page_is_a_waiting_room_from_the_pre_queue_to_the_order() {
    let app = spawn_app_with(|_| {}, true).await;
    let browser = Browser::start().await;
    let sale = new_sale_id();
    let hour = time::Duration::HOUR;
    seed_at(&app, &sale, hour, 2 * hour).await;
    browser.client.goto(&app.url(&format!("/sale/{sale}"))).await.unwrap();
    browser.fill("user-id", "alice").await;

    // Before the room opens: its countdown, Join and Buy disabled.
    let closed = browser.room_shows("the room's countdown", |r| r.join_enabled.is_some()).await;
    assert_eq!(closed.countdown_label.as_deref(), Some("Waiting room opens in"), "{closed:?}");
    assert_eq!((closed.join_enabled, closed.buy_enabled), (Some(false), false), "{closed:?}");

    // The room opens: alice joins the pre-queue; 59 rivals join through the API.
    seed_at(&app, &sale, -time::Duration::SECOND, hour).await;
    browser.room_shows("Join enabled", |r| r.join_enabled == Some(true)).await;
    browser.click("join").await;
    let prequeue =
        browser.room_shows("alice in the pre-queue", |r| r.queue_state.as_deref() == Some("Pre-queue")).await;
    assert_eq!(
        (prequeue.position.as_deref(), prequeue.join_enabled),
        (None, None),
        "no place before the draw: {prequeue:?}"
    );
    assert_eq!(prequeue.countdown_label.as_deref(), Some("Starts in"));
    assert!(!prequeue.buy_enabled && prequeue.note.unwrap().contains("drawn at random"));
    for i in 0..RIVALS {
        let url = app.url(&format!("/sales/{sale}/queue"));
        let joined = app.client.post(url).query(&[("user_id", format!("rival-{i}"))]).send().await.unwrap();
        assert_eq!(joined.status(), 200);
    }
    browser.screenshot("waiting-room-prequeue.png").await;

    // The start: alice's place is drawn, the one the API gives her.
    seed_at(&app, &sale, -time::Duration::SECOND, time::Duration::SECOND).await;
    let placed = browser.room_shows("alice's place", |r| r.position.is_some()).await;
    let asked = app.get_as(&format!("/sales/{sale}/queue"), "alice").await;
    assert_eq!(placed.position, Some(format!("#{}", asked["position"])), "{asked}");

    // bob joins after the start: the end of the line, behind all sixty and forty later ones.
    for i in 0..LATE {
        let url = app.url(&format!("/sales/{sale}/queue"));
        let joined = app.client.post(url).query(&[("user_id", format!("late-{i}"))]).send().await.unwrap();
        assert_eq!(joined.status(), 200);
    }
    browser.fill("user-id", "bob").await;
    // The page's poll of the public status (cached up to a second) may still say `upcoming` just
    // after the start, while the line already drew alice's place: wait for it to say open.
    let fresh =
        browser.room_shows("bob without a place", |r| r.join_enabled.is_some() && r.buy != "Not open yet").await;
    assert_eq!((fresh.buy.as_str(), fresh.buy_enabled), ("Join the waiting room first", false));
    assert_error(
        app.client.post(app.url("/buy")).json(&json!({"sale_id": sale, "user_id": "bob"})).send().await.unwrap(),
        403,
        "not_admitted",
    )
    .await;
    browser.click("join").await;
    let waiting = browser.room_shows("bob in line", |r| r.queue_state.as_deref() == Some("In line")).await;
    assert_eq!(waiting.position.as_deref(), Some(&*format!("#{}", RIVALS + LATE + 2)), "{waiting:?}");
    let ahead: u64 = waiting.ahead.as_deref().unwrap().parse().unwrap();
    assert!((1..=RIVALS + LATE + 1).contains(&ahead), "{waiting:?}");
    assert!(waiting.wait.as_deref().unwrap().starts_with("~00:00:"), "under a minute at {RATE}/s: {waiting:?}");
    assert_eq!((waiting.buy.as_str(), waiting.buy_enabled), ("Wait for your turn", false));
    browser.screenshot("waiting-room-position.png").await;

    // His turn: more stock lets the line move; Buy lights up with the time left, and buys.
    let top_up = app.client.post(app.url(&format!("/admin/sales/{sale}/stock"))).bearer_auth(ADMIN_TOKEN);
    assert_eq!(top_up.json(&json!({"add": 100})).send().await.unwrap().status(), 200);
    let turn = browser.room_within("bob's turn", TURN_DEADLINE, |r| r.buy_enabled).await;
    assert_eq!((turn.queue_state.as_deref(), turn.ahead.as_deref()), (Some("Your turn"), Some("0")), "{turn:?}");
    assert!(turn.note.unwrap().starts_with("Your turn: buy within 00:"));
    browser.screenshot("waiting-room-admitted.png").await;
    browser.click("buy").await;
    let bought = browser.room_shows("bob's order", |r| r.order_status.as_deref() == Some("confirmed")).await;
    assert_eq!(bought.queue_state, None, "the room gives way to the order: {bought:?}");
    browser.screenshot("waiting-room-bought.png").await;
    app.wait_for_drain(&sale).await;
    assert_eq!(app.order_users(&sale).await, [("bob".into(), 1)]);
    browser.client.close().await.unwrap();
}
