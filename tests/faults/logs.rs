//! Structured logs of the real binary: with `SECKILL_LOG_FORMAT=json` every line is a JSON object,
//! a line logged while serving a request carries that request's id (also in `x-request-id`), and
//! successful purchases log nothing at the default level; a failed one is logged once, and a
//! dependency's outage a few times, however many requests fail.

use std::time::Duration;

use seckill::domain::SaleId;
use seckill::limiter::Algorithm;
use seckill::redis::keys::sale_rate_limit_key;
use seckill::telemetry::DEPENDENCY_WARN_INTERVAL;

use crate::harness::{Deployment, RedisOutage};
use crate::storm_client::Storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_log_lines_carry_the_request_id_and_purchases_log_nothing() {
    let mut deployment = Deployment::new(&[("SECKILL_LOG_FORMAT", "json")]).await;
    let (service, sale) = deployment.start_with_sale(10).await;
    service.wait_for_log("worker started").await; // the start's last line
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
    service.wait_for_log("purchase outcome unknown").await;

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

/// A Redis outage under a storm: every failing request logged a WARN line of its own (about
/// 6,900 in 2 s). Now the requests log the outage's first failure at once, then at most one line
/// every `DEPENDENCY_WARN_INTERVAL`, which counts the failures held back since the line before:
/// a few lines, and together they account for every failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_under_a_storm_logs_a_few_warn_lines_not_one_per_request() {
    const REQUESTS: usize = 1_000;
    let mut deployment = Deployment::new(&[("SECKILL_LOG_FORMAT", "json")]).await;
    let (service, sale) = deployment.start_with_sale(10).await;
    service.wait_for_log("worker started").await;
    let before = service.log_text().lines().count();

    let outage = RedisOutage::begin();
    let began = std::time::Instant::now();
    let mut storm = Storm::new(&deployment.address, &sale, REQUESTS, REQUESTS).users_named("outage");
    storm.concurrency = 128; // each failure waits up to ~1 s for the connection's reconnection attempts
    let storm = storm.run().await;
    assert_eq!(storm.count(503), REQUESTS, "{:?}", storm.statuses);
    // A quiet interval, then one more failure: its line carries the count of those held back.
    tokio::time::sleep(DEPENDENCY_WARN_INTERVAL + Duration::from_millis(100)).await;
    assert_eq!(deployment.buy(&sale, "after-the-interval").await.status(), 503);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let outage_secs = began.elapsed().as_secs();
    outage.end();

    let warnings: Vec<serde_json::Value> = service
        .log_text()
        .lines()
        .skip(before)
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .filter(|line: &serde_json::Value| line["level"] == "WARN")
        .collect();
    let of_requests: Vec<&serde_json::Value> = warnings
        .iter()
        .filter(|l| {
            ["dependency unavailable", "purchase outcome unknown"]
                .contains(&l["fields"]["message"].as_str().unwrap_or(""))
        })
        .collect();
    // One line when the outage starts, one per interval the storm lasted, and the last one.
    let most = 2 + (storm.elapsed.as_secs_f64() / DEPENDENCY_WARN_INTERVAL.as_secs_f64()).ceil() as usize;
    assert!(
        (2..=most).contains(&of_requests.len()),
        "{} WARN lines for {} failed requests (at most {most}): {:?}",
        of_requests.len(),
        REQUESTS + 1,
        of_requests.iter().take(5).collect::<Vec<_>>()
    );
    assert!(of_requests.iter().all(|l| l["fields"]["dependency"] == "redis"), "{of_requests:?}");
    let held_back: u64 = of_requests.iter().map(|l| l["fields"]["suppressed"].as_u64().expect("suppressed")).sum();
    assert_eq!(
        held_back as usize + of_requests.len(),
        REQUESTS + 1,
        "every failure is logged or counted: {of_requests:?}"
    );
    // The other warnings come from background tasks, not requests: the worker's, one per failed
    // step with its backoff, and the sold-out flags' subscription, retried once a second.
    let others = warnings.len() - of_requests.len();
    assert!(others as u64 <= outage_secs + 12, "{others} other WARN lines in {outage_secs} s: {warnings:?}");
    eprintln!(
        "figures redis-outage-logs: requests={} storm_ms={} outage_s={outage_secs} request_warn_lines={} other_warn_lines={others}",
        REQUESTS + 1,
        storm.elapsed.as_millis(),
        of_requests.len()
    );
}

/// A request that ends in a 500 `internal` (here a restock over a damaged stock, which the script
/// refuses) logged an ERROR line each: a client that could cause one at will could flood the log.
/// Now at most one a second, each carrying how many were held back before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_log_at_most_one_line_a_second() {
    const REQUESTS: usize = 40;
    let mut deployment = Deployment::new(&[("SECKILL_LOG_FORMAT", "json")]).await;
    let (service, sale) = deployment.start_with_sale(10).await;
    service.wait_for_log("worker started").await;
    let stock = deployment.store.keyspace().sale_keys(&SaleId::parse(&sale).unwrap()).stock;
    let _: () = redis::cmd("SET").arg(&stock).arg("5.0").query_async(&mut deployment.redis.clone()).await.unwrap();

    let began = std::time::Instant::now();
    let url = deployment.url(&format!("/admin/sales/{sale}/stock"));
    for _ in 0..REQUESTS {
        let refused = deployment
            .client
            .post(&url)
            .bearer_auth(crate::common::ADMIN_TOKEN)
            .json(&serde_json::json!({"add": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 500);
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["error"], "internal", "{body}");
    }
    let elapsed = began.elapsed();
    service.wait_for_log("internal error").await;
    let lines: Vec<serde_json::Value> = service
        .log_text()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .filter(|line: &serde_json::Value| line["fields"]["message"] == "internal error")
        .collect();
    let most = 1 + elapsed.as_secs_f64().ceil() as usize;
    assert!((1..=most).contains(&lines.len()), "{} lines for {REQUESTS} errors in {elapsed:?}", lines.len());
    let held_back: u64 = lines.iter().map(|l| l["fields"]["suppressed"].as_u64().expect("a count")).sum();
    assert!(lines.len() as u64 + held_back <= REQUESTS as u64, "{lines:?}");
}
