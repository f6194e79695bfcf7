//! Property tests: each limiter script and its reference model see the same requests at the same
//! (simulated) times and must give the same decision, field by field, every time. Each script is
//! run in its three forms: alone (`lua/<algorithm>.lua`), joined with the purchase
//! (`lua/buy_limited.lua`, here before a purchase of a sale that does not exist, so the purchase
//! answers `unknown_sale` whenever the limit admits and is not reached when it refuses), and in
//! calls of several purchases (`lua/buy_batch.lua`, three requests a call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use redis::Value;
use seckill::domain::SaleId;
use seckill::limiter::{Algorithm, Gate, Policy, RateLimit};
use seckill::redis::keys::SaleKeys;

use super::models::{Model, Reply};

/// One generated scenario: a policy and the request times, in microseconds since the epoch.
#[derive(Debug, Clone)]
struct Scenario {
    policy: Policy,
    times: Vec<u64>,
}

fn scenario(algorithm: Algorithm) -> impl Strategy<Value = Scenario> {
    // Mostly small limits, where refusals happen; sometimes the largest ones the policy allows
    // (limit or burst x window up to 2^50 us), where inexact arithmetic would show.
    let count = || prop_oneof![4 => 1..=8u32, 1 => 250_000..=1_000_000u32];
    let window_ms = prop_oneof![2 => 1..=20u64, 2 => 900..=1_100u64, 1 => 1_000_000..=3_600_000u64];
    let start = 1_700_000_000_000_000..1_900_000_000_000_000u64;
    (count(), window_ms, count(), start)
        .prop_filter_map("within the policy's bounds", move |(limit, window_ms, burst, start)| {
            let rate = RateLimit { limit, window: Duration::from_millis(window_ms) };
            let policy = Policy::new(algorithm, rate, algorithm.has_burst().then_some(burst)).ok()?;
            Some((policy, start))
        })
        .prop_flat_map(|(policy, start)| {
            let window_us = policy.window.as_micros() as u64;
            // Mostly bursts and gaps around the window's scale, so every state is reached.
            let gap = prop_oneof![3 => Just(0u64), 3 => 0..=50u64, 3 => 0..=window_us, 1 => 0..=3 * window_us];
            prop::collection::vec(gap, 1..40).prop_map(move |gaps| Scenario {
                policy,
                times: gaps
                    .iter()
                    .scan(start, |t, gap| {
                        *t += gap;
                        Some(*t)
                    })
                    .collect(),
            })
        })
}

/// A scenario for each algorithm of `Algorithm::ALL`.
fn one_scenario_each() -> Vec<impl Strategy<Value = Scenario>> {
    Algorithm::ALL.into_iter().map(scenario).collect()
}

/// The two ways a limiter script runs.
#[derive(Debug, Clone, Copy)]
enum Form {
    Alone,
    WithPurchase,
}

/// A fresh sale (never seeded) and limiter key for one scenario's run.
struct Fresh {
    sale: SaleId,
    sale_keys: SaleKeys,
    key: String,
}

fn fresh(scenario: &Scenario) -> Fresh {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let case = CASE.fetch_add(1, Ordering::Relaxed);
    let sale = SaleId::parse(&format!("prop-{case}")).expect("a valid sale id");
    let sale_keys = SaleKeys::new(prefix(), &sale);
    let key = format!("{}:{{sale:prop-{case}}}:ratelimit:{}", prefix(), scenario.policy.algorithm);
    Fresh { sale, sale_keys, key }
}

/// Runs the scenario through the script in `form` (on a fresh key) and through the model;
/// compares.
fn check(scenario: &Scenario, form: Form) -> Result<(), TestCaseError> {
    let Fresh { sale, sale_keys, key } = fresh(scenario);
    let gate = Gate { policy: &scenario.policy, key: key.clone() };
    let mut redis = connection();
    let mut model = Model::new(&scenario.policy);
    for (i, &now) in scenario.times.iter().enumerate() {
        let nonce = format!("n{i}");
        let script: Reply = match form {
            Form::Alone => {
                scenario.policy.invocation(&key, &nonce, Some(now)).invoke(&mut *redis).expect("script runs")
            }
            Form::WithPurchase => {
                let mut call = scenario.policy.algorithm.with_purchase().key(&sale_keys.all()[..]);
                call.arg(sale.as_str())
                    .arg("prop-user")
                    .arg(&nonce)
                    .arg(1)
                    .arg("")
                    .arg("")
                    .arg(1)
                    .arg("")
                    .arg(1)
                    .key(&key);
                gate.policy.push_args(&mut call, &nonce, Some(now));
                let (decision, buyer, purchase): (Value, Value, Value) = call.invoke(&mut *redis).expect("script runs");
                let decision: Reply = redis::from_redis_value(decision).expect("a decision");
                prop_assert_eq!(buyer, Value::Int(0), "no buyer limit asked");
                let expected_purchase =
                    if decision.0 == 1 { Value::BulkString(b"unknown_sale".to_vec()) } else { Value::Int(0) };
                prop_assert_eq!(purchase, expected_purchase, "the purchase runs exactly when admitted");
                decision
            }
        };
        let expected = model.decide(now);
        prop_assert_eq!(
            script,
            expected,
            "{} ({:?}): request {} at {} (us since start {})",
            scenario.policy.algorithm,
            form,
            i,
            now,
            now - scenario.times[0]
        );
    }
    let _: () = redis::cmd("DEL").arg(&key).query(&mut *redis).expect("del");
    Ok(())
}

/// The scenario through `lua/buy_batch.lua`, up to three requests in a call, each with its own
/// time (on a fresh key); each decision compared with the model's.
fn check_in_batches(scenario: &Scenario) -> Result<(), TestCaseError> {
    let Fresh { sale, sale_keys, key } = fresh(scenario);
    let mut redis = connection();
    let mut model = Model::new(&scenario.policy);
    for (c, chunk) in scenario.times.chunks(3).enumerate() {
        let mut call = scenario.policy.algorithm.with_purchases().key(&sale_keys.all()[..]);
        call.arg(sale.as_str()).arg(1).arg(chunk.len());
        for (j, &now) in chunk.iter().enumerate() {
            let nonce = format!("n{}", c * 3 + j);
            call.arg("prop-user").arg(&nonce).arg("").arg("").arg(1).arg("").arg(1).key(&key);
            scenario.policy.push_args(&mut call, &nonce, Some(now));
        }
        let replies: Vec<(Value, Value, Value)> = call.invoke(&mut *redis).expect("script runs");
        for (j, ((decision, buyer, purchase), &now)) in replies.into_iter().zip(chunk).enumerate() {
            let decision: Reply = redis::from_redis_value(decision).expect("a decision");
            prop_assert_eq!(buyer, Value::Int(0), "no buyer limit asked");
            let expected_purchase =
                if decision.0 == 1 { Value::BulkString(b"unknown_sale".to_vec()) } else { Value::Int(0) };
            prop_assert_eq!(purchase, expected_purchase, "the purchase runs exactly when admitted");
            let expected = model.decide(now);
            prop_assert_eq!(
                decision,
                expected,
                "{} (in a batch): request {} at {}",
                scenario.policy.algorithm,
                c * 3 + j,
                now
            );
        }
    }
    let _: () = redis::cmd("DEL").arg(&key).query(&mut *redis).expect("del");
    Ok(())
}

fn prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(crate::common::new_key_prefix)
}

fn connection() -> Box<dyn redis::ConnectionLike> {
    crate::common::sync_connection()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Each case is one scenario per algorithm, so every algorithm gets as many cases.
    #[test]
    fn every_limiter_script_matches_its_model(scenarios in one_scenario_each()) {
        for s in &scenarios {
            check(s, Form::Alone)?;
            check(s, Form::WithPurchase)?;
            check_in_batches(s)?;
        }
    }
}
