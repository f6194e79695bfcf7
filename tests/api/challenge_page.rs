//! The buyer page of a queued sale that asks a proof of work (issue 44), in headless Chromium:
//! a person joining from the page solves the default cost in a Web Worker and gets the place
//! the same join gets in a sale that asks none; in a sale without a waiting room Buy sends it; the
//! live page counts the challenges; a change of buyer stops the last one's solver. Screenshots:
//! `target/tmp/challenge-{joined,bought,live}.png`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::chromium::{Browser, PAGE_DEADLINE};
use crate::common::ADMIN_TOKEN;
use crate::helpers::{new_sale_id, spawn_app_with};

/// People joining, one after another, each sale.
const PEOPLE: usize = 20;

fn at(offset: time::Duration) -> String {
    (OffsetDateTime::now_utc() + offset).format(&Rfc3339).unwrap()
}

/// Opens the sale's page as `user`, clicks Join, and waits for the place: the place shown, the
/// seconds from the click to it, and the small print on the proof of work (if shown).
async fn join_from_page(browser: &Browser, app_url: &str, sale: &str, user: &str) -> (String, f64, Option<String>) {
    browser.client.goto(&format!("{app_url}/sale/{sale}")).await.unwrap();
    browser.fill("user-id", user).await;
    let ready = "const j = document.getElementById('join'); return j.checkVisibility() && !j.disabled;";
    browser.wait_for("Join enabled", async |b| b.run(ready, vec![]).await.as_bool().unwrap().then_some(())).await;
    let clicked = Instant::now();
    browser.click("join").await;
    let shown = "const $ = (id) => document.getElementById(id); \
        return $('queue-position').checkVisibility() ? $('queue-position').innerText : null;";
    let until = Instant::now() + PAGE_DEADLINE;
    let place = loop {
        if let Value::String(place) = browser.run(shown, vec![]).await {
            break place;
        }
        let message = browser.text("message").await;
        assert!(Instant::now() < until, "{user} never got a place in {sale}: {message:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let took = clicked.elapsed().as_secs_f64();
    // The small print, once it says how the join's solve went (a sale without a challenge: hidden).
    let print = "const p = document.getElementById('proof'); return p.checkVisibility() ? p.innerText : null;";
    let until = Instant::now() + PAGE_DEADLINE;
    let proof = loop {
        let proof = browser.run(print, vec![]).await.as_str().map(str::to_owned);
        if proof.as_ref().is_none_or(|p| p.contains("solved in")) || Instant::now() >= until {
            break proof;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (place, took, proof)
}

#[tokio::test]
async fn a_person_joins_from_the_page_with_the_default_proof_of_work_to_the_same_place() {
    // The people share the browser's address: the curve lets them all in at the sale's cost.
    let app = spawn_app_with(|c| c.challenge.challenge_free = 1000, true).await;
    let browser = Browser::start().await;
    let (with, without) = (new_sale_id(), new_sale_id());
    for (sale, challenge) in [(&with, json!({})), (&without, json!({"cost": 0}))] {
        let queue = json!({"opens_at": at(-time::Duration::SECOND), "rate": 1});
        let body =
            json!({"stock": 100, "starts_at": at(time::Duration::SECOND), "queue": queue, "challenge": challenge});
        assert_eq!(app.seed(sale, body).await.status(), 200);
    }
    let status: Value = app.client.get(app.url(&format!("/sales/{with}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["challenge"]["cost"], 1000, "the default cost: {status}");
    // After the start each join takes the end of the line: the places are the order of the joins.
    for sale in [&with, &without] {
        let until = Instant::now() + PAGE_DEADLINE;
        loop {
            let status: Value =
                app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap();
            if status["state"] == "open" {
                break;
            }
            assert!(Instant::now() < until, "the sale never opened: {status}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    let (mut with_places, mut without_places, mut times, mut solves) = (vec![], vec![], vec![], vec![]);
    for i in 0..PEOPLE {
        let user = format!("person-{i}");
        let (place, took, proof) = join_from_page(&browser, &app.url(""), &with, &user).await;
        let proof = proof.expect("the small print tells the solve");
        let seconds: f64 = proof
            .split("solved in ")
            .nth(1)
            .and_then(|s| s.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("the solve time in {proof:?}"));
        assert!(proof.contains("(1,000 tries on average)"), "{proof}");
        with_places.push(place);
        times.push(took);
        solves.push(seconds);
        if i == 0 {
            browser.screenshot("challenge-joined.png").await;
        }
        let (place, _, proof) = join_from_page(&browser, &app.url(""), &without, &user).await;
        assert_eq!(proof, None, "no proof of work where the sale asks none");
        without_places.push(place);
    }
    assert_eq!(with_places, without_places, "the same places with the proof of work as without");
    assert_eq!(with_places[0], "#1");
    let p95 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[(v.len() * 95).div_ceil(100) - 1]
    };
    let (join_p95, solve_p95) = (p95(times.clone()), p95(solves.clone()));
    // A measurement, printed (docs/waiting-room.md quotes it), not a bound: speed targets live in
    // benchmarks, and this machine may be loaded by other tests.
    println!(
        "{PEOPLE} joins from the page at the default cost: click to place p95 {join_p95:.2} s, solve p95 {solve_p95:.2} s \
         (solves {solves:?}, joins {times:?})"
    );
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let spent = format!(r#"seckill_challenges_total{{cost="1",event="solved"}} {PEOPLE}"#);
    assert!(metrics.lines().any(|l| l == spent), "{spent} in:\n{metrics}");

    // A sale without a waiting room: Buy sends the proof, solved while the buyer looked.
    let shop = new_sale_id();
    assert_eq!(app.seed(&shop, json!({"stock": 5, "challenge": {}})).await.status(), 200);
    browser.client.goto(&app.url(&format!("/sale/{shop}"))).await.unwrap();
    browser.fill("user-id", "shopper").await;
    let ready = "const b = document.getElementById('buy'); return !b.disabled;";
    browser.wait_for("Buy enabled", async |b| b.run(ready, vec![]).await.as_bool().unwrap().then_some(())).await;
    browser.click("buy").await;
    let bought = "const s = document.getElementById('order-status'); return s.checkVisibility() ? s.innerText : null;";
    browser.wait_for("the order", async |b| b.run(bought, vec![]).await.as_str().map(str::to_owned)).await;
    let solved = "const p = document.getElementById('proof').innerText; return p.includes('solved in') ? p : null;";
    let proof =
        browser.wait_for("the solve time", async |b| b.run(solved, vec![]).await.as_str().map(str::to_owned)).await;
    assert!(proof.contains("(1,000 tries on average)"), "{proof}");
    browser.screenshot("challenge-bought.png").await;
    app.wait_for_drain(&shop).await;
    assert_eq!(app.order_users(&shop).await, [("shopper".into(), 1)]);

    // The live page: this instance's challenges by cost, none refused.
    browser.client.goto(&app.url(&format!("/admin#token={ADMIN_TOKEN}"))).await.unwrap();
    let live = "const p = document.getElementById('challenges'); return p.checkVisibility() ? p.innerText : null;";
    let shown =
        browser.wait_for("the challenges", async |b| b.run(live, vec![]).await.as_str().map(str::to_owned)).await;
    let solved = format!("{} solved", PEOPLE + 1);
    assert!(shown.contains("×1: ") && shown.contains(&solved) && shown.contains(" 0 refused"), "{shown}");
    browser.screenshot("challenge-live.png").await;
    browser.client.close().await.unwrap();
}

/// A buyer who changes while the page solves their proof of work stops its solver: the old
/// buyer's solution is of no use (it ran on to the end, about 1,000 times the default work here),
/// and the change says nothing of it.
#[tokio::test]
async fn changing_the_buyer_stops_the_solver_of_the_last_one() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    assert_eq!(app.seed(&sale, json!({"stock": 5, "challenge": {"cost": 1_000_000}})).await.status(), 200);
    let browser = Browser::start().await;
    browser.client.goto(&app.url(&format!("/sale/{sale}"))).await.unwrap();
    // Counts the solvers the page starts and stops (it constructs each at the time it solves).
    let count = r#"const Real = window.Worker;
        window.solvers = { started: 0, stopped: 0 };
        window.Worker = class extends Real {
          constructor(url) { super(url); window.solvers.started += 1; }
          terminate() { window.solvers.stopped += 1; super.terminate(); }
        };"#;
    browser.run(count, vec![]).await;
    browser.fill("user-id", "first").await;
    let solvers = async |b: &Browser| {
        let counts = b.run("return [window.solvers.started, window.solvers.stopped];", vec![]).await;
        (counts[0].as_u64().unwrap(), counts[1].as_u64().unwrap())
    };
    browser.wait_for("the first solver", async |b| Some(solvers(b).await).filter(|(started, _)| *started >= 1)).await;
    browser.fill("user-id", "second").await;
    let (_, stopped) =
        browser.wait_for("the first solver stopped", async |b| Some(solvers(b).await).filter(|(_, s)| *s >= 1)).await;
    assert_eq!(stopped, 1);
    assert!(!browser.text("message").await.contains("could not"), "{}", browser.text("message").await);
}
