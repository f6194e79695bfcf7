//! Retiring sales while a storm of buys hits another sale loses nothing: every 201 of the storm
//! is in Postgres exactly once and the promises hold, and the retired sales leave no key behind.

use crate::common;
use crate::harness::Deployment;
use crate::lifecycle::{assert_orders_once, deployment_keys, sale_lives};
use crate::storm_client::Storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retiring_sales_during_a_storm_on_another_sale_loses_nothing() {
    let mut deployment = Deployment::new(&[("SECKILL_RETIRE_AFTER", "0")]).await;
    let processes = [deployment.start().await, deployment.start_instance(&[]).await];
    let addresses: Vec<String> = processes.iter().map(|p| p.address.clone()).collect();
    let hot = common::new_sale_id();
    deployment.seed_stock(&hot, 500).await;

    let (storm, running) = Storm::new(&addresses[1], &hot, 3_000, 20_000).spawn();
    storm.wait_for_created(50).await;
    let sales: Vec<String> = (0..8).map(|_| common::new_sale_id()).collect();
    let orders = sale_lives(&deployment, &addresses, &sales).await;
    let still_running = !running.is_finished();
    let report = running.await.unwrap();

    assert!(still_running, "the retirements happened during the storm");
    assert!(report.interrupted.is_empty() && report.refused == 0, "every request answered: {report:?}");
    assert_eq!(report.server_errors(), 0, "no 5xx: {:?}", report.server_error_bodies);
    assert_eq!(report.count(201), 500, "{:?}", report.statuses);
    let status = deployment.assert_invariants(&hot, &report.confirmed).await;
    assert_eq!(deployment.order_ids(&hot).await, report.confirmed, "every 201 in Postgres exactly once");
    assert_eq!((status.stock_left, status.sold), (0, 500));
    assert_orders_once(&deployment, &sales, &orders).await;
    let left: Vec<String> =
        deployment_keys(&deployment).into_iter().filter(|k| sales.iter().any(|s| k.contains(s))).collect();
    assert!(left.is_empty(), "keys of retired sales left: {left:?}");
    eprintln!(
        "figures retire-storm: {} sales retired during a storm of {} requests ({} created) in {:.1} s",
        sales.len(),
        report.sent,
        report.count(201),
        report.elapsed.as_secs_f64()
    );
}

/// `seckill retire SALE` and its exit statuses: 2 unknown, 1 refused (with the reasons as JSON),
/// 0 retired (with the report), 4 already retired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retire_command_reports_with_its_exit_status() {
    let mut deployment = Deployment::new(&[("SECKILL_RETIRE_AFTER", "0")]).await;
    let _service = deployment.start().await;
    let (redis_url, database_url, key_prefix) =
        (deployment.redis_url.clone(), deployment.database_url.clone(), deployment.key_prefix.clone());
    // Killed and failed past its deadline, as the other CLI calls of the tests.
    let retire = async |sale: &str| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
        command
            .args(["retire", sale])
            .env("SECKILL_REDIS_URL", &redis_url)
            .env("SECKILL_DATABASE_URL", &database_url)
            .env("SECKILL_KEY_PREFIX", &key_prefix)
            .env("SECKILL_WORKER_BLOCK", "200ms");
        let output = common::output_within(command, std::time::Duration::from_secs(120)).await;
        (output.status.code(), String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let sale = common::new_sale_id();
    assert_eq!(retire(&sale).await.0, Some(2), "unknown sale");
    deployment.seed_stock(&sale, 1).await;
    let (code, stdout) = retire(&sale).await;
    assert_eq!(code, Some(1), "open: {stdout}");
    let refused: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(refused["reasons"], serde_json::json!(["open"]), "{stdout}");
    assert_eq!(deployment.buy(&sale, "a").await.status(), 201);
    deployment.wait_for_drain(&sale).await;
    let (code, stdout) = retire(&sale).await;
    assert_eq!(code, Some(0), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!((&report["sold"], &report["persisted"]), (&serde_json::json!(1), &serde_json::json!(1)), "{stdout}");
    assert_eq!(retire(&sale).await.0, Some(4), "already retired");
    assert_eq!(deployment.buy(&sale, "b").await.status(), 410, "the running service learned it from the event");
}
