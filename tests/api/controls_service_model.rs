//! A stateful model of one sale with a payment window, through the whole service (HTTP, the in-
//! process flags, the worker, Postgres; `controls_model.rs` holds the scripts alone to a model),
//! under random sequences of purchases, cancels, pauses, resumes, top-ups and take-backs: every
//! answer is the one the model predicts, the admin figures follow it after every step, and once settled the
//! sale balances in Redis and in Postgres (never oversold, each released unit back once, the
//! buyers and the orders the same users). Expiries are left to `reservations.rs`, whose storms
//! wait on real deadlines.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use secrecy::ExposeSecret;
use serde_json::{Value, json};

use crate::helpers::{ADMIN_TOKEN, TestApp, new_sale_id, spawn_app_with};

/// One step of an operator's or a buyer's.
#[derive(Debug, Clone)]
enum Op {
    Buy(u8),
    Cancel(u8),
    Pause,
    Resume,
    /// `POST …/stock {"add": n}`, n > 0.
    TopUp(i64),
    /// `POST …/stock {"add": -n}`, n > 0.
    TakeBack(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..8).prop_map(Op::Buy),
        2 => (0u8..8).prop_map(Op::Cancel),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        1 => (1i64..4).prop_map(Op::TopUp),
        1 => (1i64..5).prop_map(Op::TakeBack),
    ]
}

/// Where a buyer stands in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Reserved,
    Cancelled,
}

/// The sale as the model has it.
#[derive(Debug, Default)]
struct Model {
    stock_initial: i64,
    stock_left: i64,
    paused: bool,
    buyers: BTreeMap<u8, Held>,
    released: i64,
}

impl Model {
    /// The answers `op` may get (status and error code, `""` for a success), and the model after.
    fn step(&mut self, op: &Op) -> Vec<(u16, &'static str)> {
        match *op {
            Op::Buy(user) if self.buyers.contains_key(&user) => vec![(409, "already_purchased")],
            // A sale this instance knows sold out is answered from memory, before the pause.
            Op::Buy(_) if self.paused && self.stock_left == 0 => vec![(403, "sale_paused"), (410, "sold_out")],
            Op::Buy(_) if self.paused => vec![(403, "sale_paused")],
            Op::Buy(_) if self.stock_left == 0 => vec![(410, "sold_out")],
            Op::Buy(user) => {
                self.stock_left -= 1;
                self.buyers.insert(user, Held::Reserved);
                vec![(201, "")]
            }
            Op::Cancel(user) => match self.buyers.get(&user) {
                None => vec![(404, "no_order")],
                Some(Held::Cancelled) => vec![(409, "not_reserved")],
                Some(Held::Reserved) => {
                    self.buyers.insert(user, Held::Cancelled);
                    self.stock_left += 1;
                    self.released += 1;
                    vec![(200, "")]
                }
            },
            Op::Pause => {
                self.paused = true;
                vec![(200, "")]
            }
            Op::Resume => {
                self.paused = false;
                vec![(200, "")]
            }
            Op::TopUp(n) => {
                self.stock_initial += n;
                self.stock_left += n;
                vec![(200, "")]
            }
            Op::TakeBack(n) if n > self.stock_left => vec![(409, "stock_below_zero")],
            Op::TakeBack(n) => {
                self.stock_initial -= n;
                self.stock_left -= n;
                vec![(200, "")]
            }
        }
    }

    fn sold(&self) -> i64 {
        self.buyers.len() as i64
    }
}

/// One process-wide runtime and app for every case (each case seeds its own sale; the other
/// service models share them).
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap())
}

/// The models' one app, whose sold-out flags never lapse during the tests: only a unit given
/// back (its event) clears one, so a stale 410 is waited out for as long as the event may take.
pub(crate) fn app() -> &'static TestApp {
    static APP: OnceLock<TestApp> = OnceLock::new();
    APP.get_or_init(|| {
        let app = runtime().block_on(spawn_app_with(|c| c.sold_out_flag_ttl = Duration::from_secs(3600), true));
        // Shared by the model tests: its database outlives the test whose thread started it.
        crate::common::keep_database(app.config.database_url.expose_secret());
        app
    })
}

async fn send(app: &TestApp, sale: &str, op: &Op) -> reqwest::Response {
    let control = |action: &str, body: Value| {
        let url = app.url(&format!("/admin/sales/{sale}/{action}"));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    match *op {
        Op::Buy(user) => app.buy(sale, &format!("u{user}")).await,
        Op::Cancel(user) => app.cancel(sale, &format!("u{user}")).await,
        Op::Pause => control("pause", json!({"reason": "model"})).await.unwrap(),
        Op::Resume => control("resume", json!({})).await.unwrap(),
        Op::TopUp(n) => control("stock", json!({"add": n})).await.unwrap(),
        Op::TakeBack(n) => control("stock", json!({"add": -n})).await.unwrap(),
    }
}

async fn run(app: &TestApp, stock: i64, ops: &[Op]) -> Result<(), TestCaseError> {
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": stock, "payment_window": "1h"})).await;
    prop_assert_eq!(seeded.status().as_u16(), 200);
    let mut model = Model { stock_initial: stock, stock_left: stock, ..Model::default() };
    for (i, op) in ops.iter().enumerate() {
        let expected = model.step(op);
        let asked = Instant::now();
        let (status, body) = loop {
            let response = send(app, &sale, op).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            // A unit given back by a cancel reaches this instance's sold-out flag through the
            // events channel: a purchase may be answered from the flag for a moment (the flag
            // never lapses here: only the event ends it), and such an answer changes nothing.
            let stale = expected == [(201, "")] && status == 410 && asked.elapsed() < Duration::from_secs(20);
            if !stale {
                break (status, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let code = body["error"].as_str().unwrap_or("");
        prop_assert!(
            expected.iter().any(|&(s, c)| s == status && c == code),
            "step {} {:?}: {} {:?}, the model expects one of {:?} ({:?})",
            i,
            op,
            status,
            code,
            expected,
            model
        );
        let figures = app.status(&sale).await;
        prop_assert_eq!(
            (figures.stock_initial, figures.stock_left, figures.sold, figures.released, figures.paused),
            (model.stock_initial, model.stock_left, model.sold(), model.released, model.paused),
            "after step {} {:?}",
            i,
            op
        );
    }
    let (figures, standings) = app.assert_released(&sale, Duration::from_secs(20)).await;
    let cancelled = model.buyers.values().filter(|held| **held == Held::Cancelled).count() as i64;
    prop_assert_eq!((standings.reserved, standings.cancelled), (model.sold() - cancelled, cancelled));
    prop_assert!(figures.stock_left >= 0 && figures.stock_left <= figures.stock_initial);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Each case a fresh sale of 0-4 units and 1-40 steps against the one app.
    #[test]
    fn the_controls_keep_a_sale_balanced_under_any_sequence(stock in 0i64..5, ops in prop::collection::vec(op(), 1..40)) {
        let app = app();
        runtime().block_on(run(app, stock, &ops))?;
    }
}
