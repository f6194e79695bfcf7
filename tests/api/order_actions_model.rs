//! A stateful model of one sale with a payment window under random sequences of purchases,
//! payments, buyers' cancels, operators' cancels and refunds with and without restock, through the
//! whole service: every answer is the one the model predicts, the stock and the released units
//! follow it after every step, and at the end the sale balances in units in Redis and in Postgres
//! (`stock_initial = stock_left + reserved + paid + refunded-not-restocked`, each released order's
//! units back once).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::controls_service_model::{app, runtime};
use crate::helpers::{ADMIN_TOKEN, TestApp, new_sale_id};

/// One step of a buyer's, the payment system's or an operator's, on buyer `u<n>`'s order.
#[derive(Debug, Clone)]
enum Op {
    Buy(u8),
    Pay(u8),
    BuyerCancel(u8),
    OperatorCancel(u8),
    Refund { user: u8, restock: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Buy),
        3 => (0u8..6).prop_map(Op::Pay),
        1 => (0u8..6).prop_map(Op::BuyerCancel),
        2 => (0u8..6).prop_map(Op::OperatorCancel),
        3 => ((0u8..6), any::<bool>()).prop_map(|(user, restock)| Op::Refund { user, restock }),
    ]
}

/// Where a buyer's order stands in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Reserved,
    Paid,
    Cancelled,
    Refunded { restock: bool },
}

/// The sale as the model has it.
#[derive(Debug, Default)]
struct Model {
    stock_initial: i64,
    stock_left: i64,
    orders: BTreeMap<u8, Held>,
    /// Orders whose units went back.
    released: i64,
}

impl Model {
    /// The answer `op` must get (status, error code or `""`), and the model after; `None`: the
    /// op names no order (an operator's action or a payment needs its id) and is not sent.
    fn step(&mut self, op: &Op) -> Option<(u16, &'static str)> {
        fn back(model: &mut Model, user: u8, to: Held) {
            model.orders.insert(user, to);
            model.stock_left += 1;
            model.released += 1;
        }
        Some(match *op {
            Op::Buy(user) if self.orders.contains_key(&user) => (409, "already_purchased"),
            Op::Buy(_) if self.stock_left == 0 => (410, "sold_out"),
            Op::Buy(user) => {
                self.stock_left -= 1;
                self.orders.insert(user, Held::Reserved);
                (201, "")
            }
            Op::Pay(user) => match self.orders.get(&user)? {
                Held::Reserved => {
                    self.orders.insert(user, Held::Paid);
                    (200, "")
                }
                _ => (200, "late"),
            },
            Op::BuyerCancel(user) => match self.orders.get(&user) {
                None => (404, "no_order"),
                Some(Held::Reserved) => {
                    back(self, user, Held::Cancelled);
                    (200, "")
                }
                Some(_) => (409, "not_reserved"),
            },
            Op::OperatorCancel(user) => match self.orders.get(&user)? {
                Held::Reserved => {
                    back(self, user, Held::Cancelled);
                    (200, "")
                }
                _ => (409, "not_reserved"),
            },
            Op::Refund { user, restock } => match self.orders.get(&user)? {
                Held::Paid if restock => {
                    back(self, user, Held::Refunded { restock });
                    (200, "")
                }
                Held::Paid => {
                    self.orders.insert(user, Held::Refunded { restock });
                    (200, "")
                }
                _ => (409, "not_paid"),
            },
        })
    }

    fn count(&self, wanted: impl Fn(Held) -> bool) -> i64 {
        self.orders.values().filter(|held| wanted(**held)).count() as i64
    }
}

/// Sends `op` (step `i`); `ids` holds each buyer's order id.
async fn send(app: &TestApp, sale: &str, ids: &BTreeMap<u8, String>, i: usize, op: &Op) -> reqwest::Response {
    let act = |user: u8, action: &str, body: Value| {
        let url = app.url(&format!("/admin/orders/{}/{action}", ids[&user]));
        app.client.post(url).bearer_auth(ADMIN_TOKEN).json(&body).send()
    };
    match *op {
        Op::Buy(user) => app.buy(sale, &format!("u{user}")).await,
        Op::Pay(user) => app.pay(sale, &ids[&user], &format!("{sale}-evt-{i}")).await,
        Op::BuyerCancel(user) => app.cancel(sale, &format!("u{user}")).await,
        Op::OperatorCancel(user) => act(user, "cancel", json!({"reason": "model"})).await.unwrap(),
        Op::Refund { user, restock } => act(user, "refund", json!({"restock": restock})).await.unwrap(),
    }
}

async fn run(app: &TestApp, stock: i64, ops: &[Op]) -> Result<(), TestCaseError> {
    let sale = new_sale_id();
    let seeded = app.seed(&sale, json!({"stock": stock, "payment_window": "1h"})).await;
    prop_assert_eq!(seeded.status().as_u16(), 200);
    let mut model = Model { stock_initial: stock, stock_left: stock, ..Model::default() };
    let mut ids = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let Some(expected) = model.step(op) else { continue };
        let asked = Instant::now();
        let (status, body) = loop {
            let response = send(app, &sale, &ids, i, op).await;
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            // A unit given back reaches this instance's sold-out flag through the events channel:
            // a purchase may be answered from the flag for a moment (the models' app's flags
            // never lapse: only the event ends it), and such an answer changes nothing.
            let stale = expected == (201, "") && status == 410 && asked.elapsed() < Duration::from_secs(20);
            if !stale {
                break (status, body);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let code = match expected.1 {
            "late" => body["late_payment"].as_bool().filter(|late| *late).map_or("", |_| "late"),
            _ => body["error"].as_str().unwrap_or(""),
        };
        prop_assert_eq!((status, code), expected, "step {} {:?}: {} ({:?})", i, op, body, model);
        if let Op::Buy(user) = op
            && status == 201
        {
            ids.insert(*user, body["order_id"].as_str().unwrap().to_owned());
            // An operator names a stored order.
            app.wait_for_drain(&sale).await;
        }
        let figures = app.status(&sale).await;
        prop_assert_eq!(
            (figures.stock_initial, figures.stock_left, figures.released),
            (model.stock_initial, model.stock_left, model.released),
            "after step {} {:?}",
            i,
            op
        );
    }
    let (figures, standings) = app.assert_released(&sale, Duration::from_secs(20)).await;
    let held = |h: Held| model.count(|x| x == h);
    prop_assert_eq!(
        (standings.reserved, standings.paid, standings.cancelled),
        (held(Held::Reserved), held(Held::Paid), held(Held::Cancelled))
    );
    prop_assert_eq!(standings.refunded, model.count(|h| matches!(h, Held::Refunded { .. })));
    // In units, as docs/reservations.md reads it.
    let refunded_held = held(Held::Refunded { restock: false });
    prop_assert_eq!(
        figures.stock_initial,
        figures.stock_left + standings.reserved + standings.paid + refunded_held,
        "{:?} {:?}",
        figures,
        standings
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Each case a fresh sale of 0-4 units and 1-40 steps against the one app.
    #[test]
    fn cancels_and_refunds_keep_a_sale_balanced_in_units(stock in 0i64..5, ops in prop::collection::vec(op(), 1..40)) {
        let app = app();
        runtime().block_on(run(app, stock, &ops))?;
    }
}
