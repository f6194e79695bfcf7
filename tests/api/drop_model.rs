//! A model of a drop: a group of three sales (a product's sizes) sharing each buyer's limit,
//! seeded whole (`lua/drop_seed.lua`), under purchases of several units, releases (a reservation
//! cancelled or expired: its units back, `lua/release.lua`, asked again at random), pauses and
//! stock changes of one size and of the whole drop (`lua/drop_control.lua`, `lua/drop_restock.lua`:
//! all or nothing), and re-seeds of the whole drop (refused once anyone bought), in any order. The
//! scripts answer as the model does at every step; no sale is ever oversold, no buyer holds more
//! than `per_buyer` units across the group, each released order's units come back exactly once,
//! and `stock_initial = stock + units sold - units released` holds in every sale.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use redis::Value;
use seckill::domain::{DropId, SaleId};
use seckill::redis::keys::{DropKeys, SaleKeys};
use seckill::redis::lua;

const SIZES: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    /// Size, buyer, quantity.
    Buy(usize, u8, u32),
    /// Size, buyer: that buyer's order there, released (if it has one).
    Release(usize, u8),
    Pause(usize),
    Resume(usize),
    Add(usize, i64),
    /// The drop's switch, every size at once.
    DropPause,
    DropResume,
    /// Units added to (or taken back from) each size at once, all or nothing (0: the size is not named).
    DropAdd([i64; SIZES]),
    /// The whole drop seeded again with these stocks.
    Reseed([i64; SIZES]),
}

fn op() -> impl Strategy<Value = Op> {
    let size = 0..SIZES;
    prop_oneof![
        8 => (size.clone(), 0..6u8, 1..=3u32).prop_map(|(s, u, q)| Op::Buy(s, u, q)),
        3 => (size.clone(), 0..6u8).prop_map(|(s, u)| Op::Release(s, u)),
        1 => size.clone().prop_map(Op::Pause),
        1 => size.clone().prop_map(Op::Resume),
        2 => (size, prop_oneof![-3..=-1i64, 1..=3i64]).prop_map(|(s, n)| Op::Add(s, n)),
        1 => Just(Op::DropPause),
        1 => Just(Op::DropResume),
        2 => prop::array::uniform3(-3..=3i64).prop_map(Op::DropAdd),
        1 => prop::array::uniform3(0..6i64).prop_map(Op::Reseed),
    ]
}

/// One size as the rules say it should be.
#[derive(Debug, Default)]
struct Size {
    initial: i64,
    stock: i64,
    /// Buyer -> (order id, units).
    orders: BTreeMap<u8, (String, u32)>,
    released: BTreeSet<u8>,
    paused: bool,
}

/// The group as the rules say it should be.
struct Model {
    per_buyer: u32,
    sizes: Vec<Size>,
    /// Units each buyer took across the group (a release gives stock back, not the allowance).
    held: BTreeMap<u8, u32>,
}

impl Model {
    /// The reply's first word the scripts must give to `op`, the model moved on; `None` for a
    /// release of an order that does not exist (nothing is run).
    fn apply(&mut self, op: &Op, order_id: &str) -> Option<&'static str> {
        let held = |m: &Self, user| m.held.get(&user).copied().unwrap_or(0);
        Some(match *op {
            Op::Buy(s, user, _) if self.sizes[s].orders.contains_key(&user) => "already_purchased",
            Op::Buy(_, user, q) if held(self, user) + q > self.per_buyer => "limit_reached",
            Op::Buy(s, ..) if self.sizes[s].paused => "paused",
            Op::Buy(s, ..) if self.sizes[s].stock <= 0 => "sold_out",
            Op::Buy(s, _, q) if self.sizes[s].stock < i64::from(q) => "insufficient_stock",
            Op::Buy(s, user, q) => {
                let size = &mut self.sizes[s];
                size.orders.insert(user, (order_id.to_owned(), q));
                size.stock -= i64::from(q);
                *self.held.entry(user).or_default() += q;
                "ok"
            }
            Op::Release(s, user) => {
                let size = &mut self.sizes[s];
                let (_, q) = size.orders.get(&user)?;
                if size.released.insert(user) {
                    size.stock += i64::from(*q);
                }
                "released"
            }
            Op::Pause(s) | Op::Resume(s) => {
                self.sizes[s].paused = matches!(op, Op::Pause(_));
                "ok"
            }
            Op::DropPause | Op::DropResume => {
                self.sizes.iter_mut().for_each(|size| size.paused = matches!(op, Op::DropPause));
                "ok"
            }
            Op::DropAdd(adds) if self.sizes.iter().zip(adds).any(|(size, add)| size.stock + add < 0) => "below_zero",
            Op::DropAdd(adds) => {
                for (size, add) in self.sizes.iter_mut().zip(adds) {
                    size.stock += add;
                    size.initial += add;
                }
                "ok"
            }
            Op::Reseed(_) if self.sizes.iter().any(|size| !size.orders.is_empty()) => "drop_in_progress",
            Op::Reseed(stocks) => {
                self.sizes = stocks.iter().map(|&stock| Size { initial: stock, stock, ..Size::default() }).collect();
                "ok"
            }
            Op::Add(s, add) if self.sizes[s].stock + add < 0 => "below_zero",
            Op::Add(s, add) => {
                self.sizes[s].stock += add;
                self.sizes[s].initial += add;
                "ok"
            }
        })
    }
}

/// The first word of a script's reply (a status, or an array's first element); a release's
/// reply `{released, stock_before, units}` reads "released".
fn first_word(reply: &Value) -> String {
    match reply {
        Value::Array(words) if matches!(words[0], Value::Int(_)) => "released".into(),
        Value::Array(words) => redis::from_redis_value_ref(&words[0]).unwrap(),
        other => redis::from_redis_value_ref(other).unwrap(),
    }
}

/// `lua/drop_seed.lua`'s call: every size with its stock, `per_buyer`, open now, no line.
fn drop_seed<'a>(
    drop: &DropKeys,
    keys: &'a [SaleKeys],
    sales: &[SaleId],
    stocks: &[i64],
    per_buyer: u32,
) -> redis::ScriptInvocation<'a> {
    let mut call = lua::DROP_SEED.key(&drop.meta);
    call.key(&drop.sales).key(&drop.line_meta).key(&drop.line_state).key(&drop.draw);
    for size in keys {
        call.key(&size.meta).key(&size.stock).key(&size.buyers);
    }
    let group = sales[0].group().unwrap();
    call.arg(group).arg("").arg("").arg("").arg(per_buyer).arg("").arg("").arg("").arg("").arg("");
    // A seed (not a repair's restore); the line's stock is unused without a line.
    call.arg("seed").arg(stocks.iter().sum::<i64>()).arg("").arg("").arg("").arg("");
    for (sale, stock) in sales.iter().zip(stocks) {
        call.arg(sale.as_str()).arg(stock);
    }
    call
}

/// Runs `op` (a purchase under `order_id`, the id the model recorded if it bought).
fn run(
    con: &mut dyn redis::ConnectionLike,
    (drop, keys): (&DropKeys, &[SaleKeys]),
    sales: &[SaleId],
    op: &Op,
    model: &Model,
    order_id: &str,
) -> Value {
    let call = match *op {
        Op::DropPause | Op::DropResume => {
            let mut call = lua::DROP_CONTROL.key(&drop.sales);
            call.key(&drop.line_meta);
            for size in keys {
                call.key(&size.meta);
            }
            call.arg(if matches!(op, Op::DropPause) { "pause" } else { "resume" }).arg("");
            for sale in sales {
                call.arg(sale.as_str());
            }
            call
        }
        Op::DropAdd(adds) => {
            let mut call = lua::DROP_RESTOCK.key(&drop.sales);
            call.key(&drop.line_meta).arg(10_000_000);
            for ((size, sale), add) in keys.iter().zip(sales).zip(adds).filter(|(_, add)| *add != 0) {
                call.key(&size.meta).key(&size.stock).arg(sale.as_str()).arg(add);
            }
            call
        }
        Op::Reseed(stocks) => drop_seed(drop, keys, sales, &stocks, model.per_buyer),
        Op::Buy(s, user, q) => {
            let mut call = lua::BUY.key(&keys[s].all()[..]);
            call.arg(sales[s].as_str()).arg(format!("u{user}")).arg(order_id).arg(1).arg("").arg("").arg(q);
            call
        }
        Op::Release(s, user) => {
            let (order, q) = &model.sizes[s].orders[&user];
            let mut call = lua::RELEASE.key(&keys[s].stock);
            call.key(&keys[s].released).key(&keys[s].meta).arg(order).arg(*q);
            call
        }
        Op::Pause(s) | Op::Resume(s) => {
            let mut call = lua::CONTROL.key(&keys[s].meta);
            call.arg(if matches!(op, Op::Pause(_)) { "pause" } else { "resume" }).arg("");
            call
        }
        Op::Add(s, add) => {
            let mut call = lua::RESTOCK.key(&keys[s].meta);
            call.key(&keys[s].stock).arg(add).arg(10_000_000);
            call
        }
    };
    call.invoke(con).unwrap()
}

/// The sale's figures as Redis holds them: stock_initial, stock, units sold, units released.
fn figures(con: &mut dyn redis::ConnectionLike, keys: &SaleKeys) -> (i64, i64, i64, i64) {
    let (initial, extra_units, extra_released): (i64, Option<i64>, Option<i64>) = redis::cmd("HMGET")
        .arg(&keys.meta)
        .arg(&["stock_initial", "extra_units", "extra_released"])
        .query(con)
        .unwrap();
    let stock: i64 = redis::cmd("GET").arg(&keys.stock).query(con).unwrap();
    let buyers: i64 = redis::cmd("SCARD").arg(&keys.buyers).query(con).unwrap();
    let released: i64 = redis::cmd("SCARD").arg(&keys.released).query(con).unwrap();
    (initial, stock, buyers + extra_units.unwrap_or(0), released + extra_released.unwrap_or(0))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn a_drops_seeds_purchases_releases_switches_and_top_ups_in_any_order_keep_every_limit(
        seeded in prop::collection::vec(0..6i64, SIZES),
        per_buyer in 1..=3u32,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let group = format!("drop{}", CASE.fetch_add(1, Ordering::Relaxed));
        let prefix = crate::common::new_key_prefix();
        let sales: Vec<SaleId> = (0..SIZES).map(|s| SaleId::parse(&format!("{group}.{s}")).unwrap()).collect();
        let keys: Vec<SaleKeys> = sales.iter().map(|sale| SaleKeys::new(&prefix, sale)).collect();
        let drop = DropKeys::new(&prefix, &DropId::parse(&group).unwrap());
        let mut con = crate::common::sync_connection();
        let reply: String = drop_seed(&drop, &keys, &sales, &seeded, per_buyer).invoke(&mut *con).unwrap();
        prop_assert_eq!(reply, "ok");
        let sizes = seeded.iter().map(|&stock| Size { initial: stock, stock, ..Size::default() }).collect();
        let mut model = Model { per_buyer, sizes, held: BTreeMap::new() };
        for (step, op) in ops.iter().enumerate() {
            let order_id = uuid::Uuid::now_v7().to_string();
            let before = match op {
                Op::Release(s, user) => model.sizes[*s].orders.get(user).cloned(),
                _ => None,
            };
            let was_released = matches!(op, Op::Release(s, user) if model.sizes[*s].released.contains(user));
            let Some(expected) = model.apply(op, &order_id) else { continue };
            let reply = run(&mut *con, (&drop, &keys), &sales, op, &model, &order_id);
            prop_assert_eq!(first_word(&reply), expected, "step {}: {:?}", step, op);
            if let (Some((_, q)), Value::Array(words)) = (before, &reply) {
                let units: i64 = redis::from_redis_value_ref(&words[2]).unwrap();
                let want = if was_released { 0 } else { i64::from(q) };
                prop_assert_eq!(units, want, "step {}: a release's units come back once", step);
            }
            for (s, size) in model.sizes.iter().enumerate() {
                let (initial, stock, sold, released) = figures(&mut *con, &keys[s]);
                prop_assert!(stock >= 0, "step {}: size {} stock {}", step, s, stock);
                prop_assert_eq!((initial, stock), (size.initial, size.stock), "step {}: size {}", step, s);
                prop_assert_eq!(initial, stock + sold - released, "step {}: size {} units", step, s);
            }
            let held: BTreeMap<String, u32> =
                redis::cmd("HGETALL").arg(&keys[0].held).query(&mut *con).unwrap();
            let modelled: BTreeMap<String, u32> =
                model.held.iter().map(|(user, units)| (format!("u{user}"), *units)).collect();
            prop_assert_eq!(&held, &modelled, "step {}: the units each buyer holds in the group", step);
            prop_assert!(held.values().all(|&units| units <= per_buyer), "step {}: over the limit {:?}", step, held);
        }
        for (sale, keys) in sales.iter().zip(&keys) {
            let _: () = redis::cmd("DEL").arg(&keys.every()[..]).query(&mut *con).unwrap();
            let _: () = redis::cmd("DEL").arg(&keys.group_keys(sale).unwrap()[..]).query(&mut *con).unwrap();
        }
        let _: () = redis::cmd("DEL").arg(&[&drop.line_meta, &drop.line_state]).query(&mut *con).unwrap();
    }
}
