//! A model of one sale under purchases, pauses, resumes and stock changes in any order: the
//! scripts (`lua/buy.lua`, `lua/control.lua`, `lua/restock.lua`) answer as the model does at every
//! step, the stock never goes below 0 and `stock_initial = stock + buyers` always holds.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use redis::Value;
use seckill::domain::SaleId;
use seckill::redis::keys::SaleKeys;
use seckill::redis::lua;

#[derive(Debug, Clone)]
enum Op {
    Buy(u8),
    Pause,
    Resume,
    Add(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..8u8).prop_map(Op::Buy),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        2 => prop_oneof![-3..=-1i64, 1..=3i64].prop_map(Op::Add),
    ]
}

/// The sale as the rules say it should be.
struct Model {
    initial: i64,
    stock: i64,
    buyers: BTreeSet<u8>,
    paused: bool,
}

impl Model {
    /// The reply's first word the scripts must give to `op`, the model moved on.
    fn apply(&mut self, op: &Op) -> &'static str {
        match *op {
            Op::Buy(user) if self.buyers.contains(&user) => "already_purchased",
            Op::Buy(_) if self.paused => "paused",
            Op::Buy(_) if self.stock <= 0 => "sold_out",
            Op::Buy(user) => {
                self.buyers.insert(user);
                self.stock -= 1;
                "ok"
            }
            Op::Pause | Op::Resume => {
                self.paused = matches!(op, Op::Pause);
                "ok"
            }
            Op::Add(add) if self.stock + add < 0 => "below_zero",
            Op::Add(add) => {
                self.stock += add;
                self.initial += add;
                "ok"
            }
        }
    }
}

/// The first word of a script's reply (a status, or an array's first element).
fn first_word(reply: &Value) -> String {
    match reply {
        Value::Array(words) => redis::from_redis_value_ref(&words[0]).unwrap(),
        other => redis::from_redis_value_ref(other).unwrap(),
    }
}

fn run(con: &mut dyn redis::ConnectionLike, keys: &SaleKeys, sale: &SaleId, op: &Op) -> Value {
    let call = match op {
        Op::Buy(user) => {
            let mut call = lua::BUY.key(&keys.all()[..]);
            let order = uuid::Uuid::now_v7().to_string();
            call.arg(sale.as_str()).arg(format!("u{user}")).arg(order).arg(1).arg("").arg("");
            call
        }
        Op::Pause | Op::Resume => {
            let mut call = lua::CONTROL.key(&keys.meta);
            call.arg(if matches!(op, Op::Pause) { "pause" } else { "resume" }).arg("");
            call
        }
        Op::Add(add) => {
            let mut call = lua::RESTOCK.key(&keys.meta);
            call.key(&keys.stock).arg(*add).arg(10_000_000);
            call
        }
    };
    call.invoke(con).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn purchases_pauses_and_stock_changes_in_any_order_never_oversell(
        seeded in 0..4i64,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        static CASE: AtomicU64 = AtomicU64::new(0);
        let sale = SaleId::parse(&format!("model-{}", CASE.fetch_add(1, Ordering::Relaxed))).unwrap();
        let keys = SaleKeys::new(&crate::common::new_key_prefix(), &sale);
        let mut con = crate::common::sync_connection();
        let mut seed = lua::SEED.key(&keys.state()[..]);
        seed.arg(seeded).arg("").arg("").arg(1).arg("").arg(0).arg("").arg("").arg("").arg("").arg("");
        let seeded_reply: String = seed.invoke(&mut *con).unwrap();
        prop_assert_eq!(seeded_reply, "ok");
        let mut model = Model { initial: seeded, stock: seeded, buyers: BTreeSet::new(), paused: false };
        for (step, op) in ops.iter().enumerate() {
            let expected = model.apply(op);
            let reply = run(&mut *con, &keys, &sale, op);
            prop_assert_eq!(first_word(&reply), expected, "step {}: {:?}", step, op);
            let initial: i64 = redis::cmd("HGET").arg(&keys.meta).arg("stock_initial").query(&mut *con).unwrap();
            let stock: i64 = redis::cmd("GET").arg(&keys.stock).query(&mut *con).unwrap();
            let buyers: i64 = redis::cmd("SCARD").arg(&keys.buyers).query(&mut *con).unwrap();
            prop_assert!(stock >= 0, "step {}: stock {}", step, stock);
            prop_assert_eq!((initial, stock, buyers), (model.initial, model.stock, model.buyers.len() as i64));
            prop_assert_eq!(initial, stock + buyers, "stock_initial = stock + buyers");
        }
        let _: () = redis::cmd("DEL").arg(&keys.every()[..]).query(&mut *con).unwrap();
    }
}
