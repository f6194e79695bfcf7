//! Structured logs of the real binary: with `SECKILL_LOG_FORMAT=json` every line is a JSON object,
//! a line logged while serving a request carries that request's id (also in `x-request-id`), and
//! successful purchases log nothing at the default level; a failed one is logged once.

use std::time::Duration;

use seckill::domain::SaleId;
use seckill::limiter::Algorithm;
use seckill::redis::keys::sale_rate_limit_key;

use crate::harness::Deployment;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_request_id_and_purchases_log_nothing() {
    let mut deployment = Deployment::new(&[("SECKILL_LOG_FORMAT", "json")]).await;
    let (service, sale) = deployment.start_with_sale(10).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let quiet = service.log_text().lines().count();
    for i in 0..5 {
        assert_eq!(deployment.buy(&sale, &format!("u{i}")).await.status(), 201);
    }
    deployment.wait_for_drain(&sale).await;
    let after_purchases: Vec<String> = service.log_text().lines().skip(quiet).map(str::to_owned).collect();
    assert!(after_purchases.is_empty(), "lines logged for successful purchases: {after_purchases:?}");

    // A request that logs a warning: its limiter key (the default algorithm's, sliding-log: a
    // sorted set) holds the wrong type, so the limiter fails inside the purchase's call (503
    // outcome_unknown: the error reply does not say which part of the script failed).
    let id = SaleId::parse(&sale).unwrap();
    let key =
        sale_rate_limit_key(&deployment.key_prefix, &id, Algorithm::SlidingLog.name(), "127.0.0.1".parse().unwrap());
    // (The purchases above left it a sorted set: replaced by a hash.)
    let _: () = redis::pipe()
        .del(&key)
        .hset(&key, "not", "a sorted set")
        .query_async(&mut deployment.redis.clone())
        .await
        .unwrap();
    let refused = deployment.buy(&sale, "u-refused").await;
    assert_eq!(refused.status(), 503);
    let request_id = refused.headers()["x-request-id"].to_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let lines: Vec<serde_json::Value> = service
        .log_text()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string()), "{lines:?}");
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN" && l["fields"]["message"] == "purchase outcome unknown")
        .expect("the limiter failure is logged");
    assert_eq!(warning["span"]["request_id"], request_id.as_str(), "{warning}");
    assert_eq!(warning["span"]["name"], "request");
    // Once: not again by tracing-actix-web's error event (a `{:?}` that, with RUST_BACKTRACE set,
    // resolved the error's backtrace on every 5xx).
    let of_request: Vec<_> = lines.iter().filter(|l| l["span"]["request_id"] == request_id.as_str()).collect();
    assert_eq!(of_request.len(), 1, "a failed request is logged once: {of_request:?}");
}
