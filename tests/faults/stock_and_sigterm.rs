//! Storms: exactly the stock is sold, and graceful shutdown loses nothing.

use std::time::Duration;

use tokio::time::Instant;

use crate::harness::{Deployment, JWT_ENV, JWT_SECRET};
use crate::storm_client::Storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_sells_exactly_the_stock_with_no_server_errors() {
    storm_sells_exactly_the_stock(false).await;
}

/// The same with `SECKILL_AUTH=jwt`: every user buys with its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_with_jwt_sells_exactly_the_stock_with_no_server_errors() {
    storm_sells_exactly_the_stock(true).await;
}

async fn storm_sells_exactly_the_stock(jwt: bool) {
    let mut deployment = Deployment::new(if jwt { &JWT_ENV } else { &[] }).await;
    let (_service, sale) = deployment.start_with_sale(500).await;

    let storm = Storm::new(&deployment.address, &sale, 5_000, 20_000).with_jwt(jwt.then_some(JWT_SECRET));
    let report = storm.run().await;

    assert_eq!(report.sent, 20_000);
    assert!(report.interrupted.is_empty() && report.refused == 0, "every request answered: {report:?}");
    assert_eq!(report.server_errors(), 0, "no 5xx: {:?}", report.server_error_bodies);
    assert!(report.unexpected_statuses().is_empty(), "{:?}", report.statuses);
    assert_eq!(report.count(201), 500, "exactly the stock is sold: {:?}", report.statuses);
    let drain = Instant::now();
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert_eq!((status.stock_left, status.sold), (0, 500));
    assert_eq!(deployment.order_ids(&sale).await, report.confirmed, "Postgres holds exactly the confirmed orders");
    eprintln!(
        "figures storm (jwt {jwt}): sent={} answered_201={} expected_orders=500 found_orders={} storm_ms={} drain_after_storm_ms={}",
        report.sent,
        report.count(201),
        status.persisted.unwrap_or_default(),
        report.elapsed.as_millis(),
        drain.elapsed().as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_storm_answers_every_request_in_flight_and_exits_0() {
    let mut deployment = Deployment::new(&[]).await;
    let (mut service, sale) = deployment.start_with_sale(10_000).await;

    // One user per request, so a request cut off after the purchase would show as a buyer.
    let (storm, running) = Storm::new(&deployment.address, &sale, 6_000, 6_000).spawn();
    storm.wait_for_created(200).await;
    // Strike while the worker is busy with this sale too.
    let until = Instant::now() + Duration::from_secs(15);
    while deployment.status(&sale).await.persisted.unwrap_or_default() == 0 {
        assert!(Instant::now() < until, "the worker never started on the sale");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    service.terminate();
    let exit = service.wait(Duration::from_secs(40)).await;
    let report = running.await.unwrap();

    assert_eq!(exit.code(), Some(0), "clean exit; log:\n{}", service.log_text());
    // A request on a keep-alive connection the server closes at stop never reaches it (the usual
    // keep-alive race); one that reached it must have been answered.
    let buyers = deployment.buyers(&sale).await;
    let cut_off: Vec<_> = report.interrupted.iter().filter(|(user, _)| buyers.contains(user)).collect();
    assert!(cut_off.is_empty(), "purchases made but never answered: {cut_off:?}");
    assert_eq!(report.server_errors(), 0, "no 5xx: {:?}", report.server_error_bodies);
    assert!(report.unexpected_statuses().is_empty(), "{:?}", report.statuses);
    // Nothing was acknowledged without being committed: every buyer is in Postgres or still queued.
    let (stream, _) = deployment.orders_stream(&sale);
    let entries: redis::streams::StreamRangeReply =
        redis::AsyncCommands::xrange_all(&mut deployment.redis.clone(), &stream).await.unwrap();
    let queued: std::collections::BTreeSet<String> =
        entries.ids.iter().flat_map(seckill::redis::order_stream::users).collect();
    let persisted: std::collections::BTreeSet<String> =
        deployment.order_users(&sale).await.into_iter().map(|(u, _)| u).collect();
    let accounted: std::collections::BTreeSet<String> = queued.union(&persisted).cloned().collect();
    assert_eq!(buyers, accounted, "a buyer is neither in Postgres nor queued");

    let _restarted = deployment.start().await;
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    eprintln!(
        "figures sigterm: sent={} answered={} refused_after_stop={} unanswered_never_processed={} confirmed={} sold={} queued_at_exit={} persisted_at_exit={}",
        report.sent,
        report.statuses.values().sum::<usize>(),
        report.refused,
        report.interrupted.len(),
        report.confirmed.len(),
        status.sold,
        queued.len(),
        persisted.len()
    );
}
