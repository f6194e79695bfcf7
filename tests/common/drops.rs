//! Drops through their real admin routes: `PUT /admin/drops/{drop}` seeds one (its sizes, the
//! limit across them, and with `waiting_room` its one line), `POST /admin/drops/{drop}/pause`
//! switches every size and the line at once.

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::{ADMIN_TOKEN, Probe};

/// A fresh drop id (no `.`).
pub fn new_drop_id() -> String {
    format!("drop-{}", uuid::Uuid::now_v7().simple())
}

/// Seeds a fresh drop with a line through `PUT /admin/drops/{drop}`: sizes `<drop>.<size>` of
/// `stock` each, `per_buyer` across them, started a second ago with a waiting room opened two
/// seconds ago admitting `rate` buyers a second, and a proof of work of `challenge_cost` tries
/// per join (`None`: none).
pub async fn seed_drop_line(
    app: &Probe,
    sizes: &[&str],
    stock: i64,
    per_buyer: u32,
    (rate, challenge_cost): (u32, Option<u32>),
) -> String {
    let now = OffsetDateTime::now_utc();
    let at = |seconds: i64| (now + time::Duration::seconds(seconds)).format(&Rfc3339).unwrap();
    let drop = new_drop_id();
    let body = json!({
        "sizes": sized(sizes, stock),
        "per_buyer": per_buyer,
        "starts_at": at(-1),
        "waiting_room": {"opens_at": at(-2), "rate": rate},
        "challenge": {"cost": challenge_cost.unwrap_or(0)},
    });
    put_drop(app, &drop, body).await;
    drop
}

/// A fresh drop without a line, open now, through `PUT /admin/drops/{drop}`.
pub async fn seed_drop_sizes(app: &Probe, sizes: &[&str], stock: i64, per_buyer: u32) -> String {
    let drop = new_drop_id();
    let body = json!({"sizes": sized(sizes, stock), "per_buyer": per_buyer, "challenge": {"cost": 0}});
    put_drop(app, &drop, body).await;
    drop
}

/// `POST /admin/drops/{drop}/pause`: every size and the line paused in one call; asserts a 200.
pub async fn pause_drop(app: &Probe, drop: &str, reason: &str) {
    let url = app.url(&format!("/admin/drops/{drop}/pause"));
    let response = app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&json!({"reason": reason})).send().await.unwrap();
    assert_eq!(response.status(), 200, "pausing {drop}: {}", response.text().await.unwrap());
}

pub fn sized(sizes: &[&str], stock: i64) -> Value {
    sizes.iter().map(|size| (size.to_string(), json!({"stock": stock}))).collect::<serde_json::Map<_, _>>().into()
}

pub async fn put_drop(app: &Probe, drop: &str, body: Value) {
    let url = app.url(&format!("/admin/drops/{drop}"));
    let response = app.client.put(url).bearer_auth(ADMIN_TOKEN).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "seeding {drop}: {}", response.text().await.unwrap());
}
