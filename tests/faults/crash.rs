//! SIGKILL mid-storm with orders delivered to the worker but not committed: nothing is lost or
//! written twice once a new process has reclaimed them.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::AsyncCommands;
use redis::streams::StreamPendingReply;
use sqlx::Connection;
use tokio::time::Instant;

use crate::harness::{Deployment, JWT_ENV, JWT_SECRET};
use crate::storm_client::Storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_storm_loses_and_duplicates_nothing_after_restart() {
    sigkill_mid_storm(false).await;
}

/// The same with `SECKILL_AUTH=jwt`: every user buys with its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_storm_with_jwt_loses_and_duplicates_nothing_after_restart() {
    sigkill_mid_storm(true).await;
}

async fn sigkill_mid_storm(jwt: bool) {
    // The new process gets a consumer name of its own (the default, <host>-<port>, would be the
    // dead one's, whose pending entries it would then read as its own): it must claim what the
    // dead one left pending.
    let mut env = vec![("SECKILL_WORKER_CLAIM_TIMEOUT", "1s")];
    if jwt {
        env.extend(JWT_ENV);
    }
    let secret = jwt.then_some(JWT_SECRET);
    let mut deployment = Deployment::new(&env).await;
    let stock = 1_000;
    let (mut first, sale) = deployment.start_with_sale(stock).await;

    // Hold the orders table so the worker's insert blocks: its batch is delivered, not committed.
    let mut blocker = sqlx::PgConnection::connect(&deployment.database_url).await.unwrap();
    let mut lock = blocker.begin().await.unwrap();
    sqlx::query("lock table orders in exclusive mode").execute(&mut *lock).await.unwrap();

    // One order the worker takes and gets stuck on: its insert waits for the lock.
    let first_buy = Storm::new(&deployment.address, &sale, 1, 1).users_named("first").with_jwt(secret).run().await;
    assert_eq!(first_buy.count(201), 1, "{first_buy:?}");
    deployment.wait_for_a_lock_waiter("the worker never took the first order").await;

    let (storm, running) =
        Storm::new(&deployment.address, &sale, 1_500, 3_000).users_named("early").with_jwt(secret).spawn();
    storm.wait_for_created(300).await;
    first.kill().await;
    let mut report = running.await.unwrap();
    report.confirmed.extend(first_buy.confirmed);

    let (stream, group) = deployment.orders_stream(&sale);
    let queued: usize = deployment.redis.clone().xlen(&stream).await.unwrap();
    let pending: StreamPendingReply = deployment.redis.clone().xpending(&stream, group).await.unwrap();
    assert!(queued > 0, "the kill must strike with orders still queued");
    // The dead process's insert dies with it, as in a real crash, instead of committing once
    // the lock is released.
    sqlx::query(
        "select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and pid <> pg_backend_pid()",
    )
    .execute(&mut *lock)
    .await
    .unwrap();
    lock.rollback().await.unwrap();

    let second = deployment.start_with(&[("SECKILL_WORKER_CONSUMER", "second-process")]).await;
    let late = Storm::new(&deployment.address, &sale, 1_500, 3_000).users_named("late").with_jwt(secret).run().await;
    assert!(late.interrupted.is_empty() && late.refused == 0, "{late:?}");
    report.merge(late);
    let drain = Instant::now();
    let status = deployment.wait_for_drain_within(&sale, Duration::from_secs(30)).await;
    let drain_ms = drain.elapsed().as_millis();
    let status_after = deployment.assert_invariants(&sale, &report.confirmed).await;

    assert_eq!(status, status_after);
    assert_eq!(report.server_errors(), 0, "no 5xx: {:?}", report.server_error_bodies);
    assert_eq!(status.sold, stock, "the stock sold out across the restart");
    assert!(second.log_lines("claimed orders left pending by another consumer") > 0, "the new process reclaimed");
    // An order nobody was told about must come from a request the kill cut off.
    let cut_off: BTreeSet<&String> = report.interrupted.iter().map(|(user, _)| user).collect();
    let stored: Vec<(uuid::Uuid, String)> = sqlx::query_as("select order_id, user_id from orders where sale_id = $1")
        .bind(&sale)
        .fetch_all(&deployment.pool)
        .await
        .unwrap();
    let unexplained: Vec<_> =
        stored.iter().filter(|(id, user)| !report.confirmed.contains(id) && !cut_off.contains(user)).collect();
    assert!(unexplained.is_empty(), "orders no client was told about: {unexplained:?}");
    eprintln!(
        "figures crash (jwt {jwt}): sent={} confirmed={} cut_off_by_kill={} queued_at_kill={} pending_at_kill={} expected_orders={} found_orders={} drain_after_storm_ms={}",
        report.sent,
        report.confirmed.len(),
        report.interrupted.len() + report.refused,
        queued,
        pending.count(),
        status.sold,
        stored.len(),
        drain_ms
    );
}
