//! The soak test (issue 16, "nothing shrinks"): 200 small sales are created, sold out, drained
//! and retired in rounds by three `seckill serve` processes, while one live sale stays. Afterwards
//! Redis holds only the live sale's keys, the registries and every worker's stream list are back
//! to their baseline, Postgres holds every order exactly once, and each process's resident memory
//! (VmRSS, read from /proc after a warm-up of two rounds and at the end) grew less than 8 MiB.

use std::collections::BTreeSet;

use tokio::time::Instant;

use crate::common;
use crate::harness::Deployment;
use crate::lifecycle::{
    STOCK, assert_orders_once, deployment_keys, registries, rss_kib, sale_lives, wait_for_ready_streams,
};

const SALES: usize = 200;
const PER_ROUND: usize = 20;
const WARM_UP_ROUNDS: usize = 2;
/// Most a process's resident memory may grow between the warm-up and the end.
const MAX_GROWTH_KIB: u64 = 8 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_sales_created_sold_drained_and_retired_leave_nothing_behind() {
    let mut deployment = Deployment::new(&[("SECKILL_RETIRE_AFTER", "0")]).await;
    let processes =
        [deployment.start().await, deployment.start_instance(&[]).await, deployment.start_instance(&[]).await];
    let addresses: Vec<String> = processes.iter().map(|p| p.address.clone()).collect();
    let all: Vec<&_> = processes.iter().collect();
    let live = common::new_sale_id();
    deployment.seed_stock(&live, 1_000).await;
    wait_for_ready_streams(&deployment, &all, 1).await;
    let baseline_keys = deployment_keys(&deployment);
    let baseline_registries = registries(&deployment).await;
    let registry = seckill::redis::keys::sales_registry_key(&deployment.key_prefix);
    assert!(baseline_keys.iter().all(|k| k.contains(&live) || *k == registry), "{baseline_keys:?}");

    let started = Instant::now();
    let (mut sales, mut orders, mut warm) = (vec![], BTreeSet::new(), vec![]);
    for round in 0..SALES / PER_ROUND {
        if round == WARM_UP_ROUNDS {
            warm = processes.iter().map(rss_kib).collect();
        }
        let batch: Vec<String> = (0..PER_ROUND).map(|_| common::new_sale_id()).collect();
        orders.extend(sale_lives(&deployment, &addresses, &batch).await);
        sales.extend(batch);
    }
    let elapsed = started.elapsed();

    wait_for_ready_streams(&deployment, &all, 1).await;
    let end: Vec<u64> = processes.iter().map(rss_kib).collect();
    let keys = deployment_keys(&deployment);
    assert_eq!(keys, baseline_keys, "Redis holds only the live sale's keys");
    assert_eq!(registries(&deployment).await, baseline_registries, "the registries are back to their baseline");
    assert_eq!(orders.len(), SALES * STOCK);
    assert_orders_once(&deployment, &sales, &orders).await;
    let retired: i64 = sqlx::query_scalar("select count(*) from sales where retired_at is not null")
        .fetch_one(&deployment.pool)
        .await
        .unwrap();
    assert_eq!(retired, SALES as i64, "every sale's row is kept, marked retired");
    assert_eq!(deployment.buy(&live, "still-open").await.status(), 201, "the live sale still sells");

    let growth: Vec<i64> = warm.iter().zip(&end).map(|(w, e)| *e as i64 - *w as i64).collect();
    eprintln!(
        "figures soak: {SALES} sales, {} orders over 3 processes in {:.1} s; keys before {} after {} \
         (limiter keys excluded); VmRSS KiB after warm-up {warm:?}, at the end {end:?}, growth {growth:?}",
        orders.len(),
        elapsed.as_secs_f64(),
        baseline_keys.len(),
        keys.len(),
    );
    for (process, grew) in growth.iter().enumerate() {
        assert!(*grew < MAX_GROWTH_KIB as i64, "process {process} grew {grew} KiB (warm {warm:?}, end {end:?})");
    }
}
