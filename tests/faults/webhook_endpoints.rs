//! Webhook endpoints as data, each with its own sender (issue 51), against the real binary: an
//! endpoint that accepts and never answers delays no event to a healthy one, and two instances
//! configured differently (one with `SECKILL_WEBHOOK_URL` and the secret, one with neither) lose
//! no event, whichever of them stores the orders.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

use crate::common;
use crate::common::receiver::{Mode, Receiver, WEBHOOK_SECRET};
use crate::harness::Deployment;
use crate::storm_client::Storm;

/// The distinct events of type `kind` `receiver` accepted (200).
fn accepted_of(receiver: &Receiver, kind: &str) -> BTreeSet<String> {
    let type_of = |body: &str| serde_json::from_str::<serde_json::Value>(body).unwrap()["type"].clone();
    receiver.attempts().into_iter().filter(|a| a.answered == 200 && type_of(&a.body) == kind).map(|a| a.id).collect()
}

/// Waits until `receiver` accepted the `order.created` of `orders` orders, within `limit`;
/// returns how long that took.
async fn wait_for_created(deployment: &Deployment, receiver: &Receiver, orders: usize, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let accepted = accepted_of(receiver, "order.created").len();
        assert!(accepted <= orders, "{accepted} order.created accepted for {orders} orders");
        if accepted == orders {
            return started.elapsed();
        }
        if started.elapsed() >= limit {
            let outbox: (i64, i64, i64, i64) = sqlx::query_as(
                "select (select count(*) from orders), (select count(*) from webhook_events),
                        (select count(*) from webhook_deliveries where endpoint = $1),
                        (select count(*) from webhook_deliveries where endpoint = $1 and delivered_at is not null)",
            )
            .bind(&receiver.url)
            .fetch_one(&deployment.pool)
            .await
            .unwrap();
            panic!(
                "{accepted} of {orders} order.created accepted after {limit:?}; (orders, events, deliveries to it, \
                 delivered) = {outbox:?}; {} attempts",
                receiver.attempts().len()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 300 orders, two endpoints, one of them hung (accepts the connection, reads the request, never
/// answers, so every attempt to it lasts the 5 s timeout): the healthy one receives every order's
/// event within 30 s of the last purchase. On 02cca84 both shared one claim loop, whose rounds of
/// 200 waited on the hung one's timeouts 32 at a time (the attack: 605 of 2,001 events after
/// 126 s; alone, all in 13.5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_endpoint_delays_no_event_to_a_healthy_one() {
    const ORDERS: usize = 300;
    let hung = Receiver::start(Mode::Hang).await;
    let healthy = Receiver::start(Mode::Accept).await;
    let urls = format!("{},{}", hung.url, healthy.url);
    let env = [("SECKILL_WEBHOOK_URL", urls.as_str()), ("SECKILL_WEBHOOK_SECRET", WEBHOOK_SECRET)];
    let mut deployment = Deployment::new(&env).await;
    let (_service, sale) = deployment.start_with_sale(ORDERS as i64).await;

    let report = Storm::new(&deployment.address, &sale, ORDERS, ORDERS).run().await;
    assert_eq!(report.count(201), ORDERS, "{:?}", report.statuses);
    let took = wait_for_created(&deployment, &healthy, ORDERS, Duration::from_secs(30)).await;

    // The hung endpoint was tried all along, and its deliveries wait for it (it is not disabled
    // after seconds: SECKILL_WEBHOOK_DISABLE_AFTER is 3 days).
    assert!(!hung.attempts().is_empty(), "the hung endpoint was attempted");
    let open_to_hung: i64 = sqlx::query_scalar(
        "select count(*) from webhook_deliveries where endpoint = $1 and delivered_at is null and failed_at is null",
    )
    .bind(&hung.url)
    .fetch_one(&deployment.pool)
    .await
    .unwrap();
    assert!(open_to_hung > 0, "the hung endpoint's deliveries stay open");
    deployment.assert_invariants(&sale, &report.confirmed).await;
    eprintln!(
        "figures webhooks hung endpoint: orders={ORDERS} healthy_received_all_in_ms={} hung_attempts={} \
         open_to_hung={open_to_hung}",
        took.as_millis(),
        hung.attempts().len()
    );
}

/// Two instances on one Redis and Postgres: the first with `SECKILL_WEBHOOK_URL` and the secret
/// and no worker, the second with neither and the worker that stores every order. 400 orders,
/// bought through both: the receiver gets every order's `order.created` and the sale's
/// `sale.sold_out`. On 02cca84 the second instance's worker wrote no event at all (it passed the
/// writers its own, empty, endpoints): 0 of 400 (the attack: 2,455 of 20,000 with both workers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_configured_differently_lose_no_event() {
    const ORDERS: usize = 400;
    let receiver = Receiver::start(Mode::Accept).await;
    let mut deployment = Deployment::new(&[]).await;
    let configured = [
        ("SECKILL_WEBHOOK_URL", receiver.url.as_str()),
        ("SECKILL_WEBHOOK_SECRET", WEBHOOK_SECRET),
        ("SECKILL_NO_WORKER", "true"),
    ];
    let _sender = deployment.start_with(&configured).await;
    let plain = deployment.start_instance(&[]).await;
    let sale = common::new_sale_id();
    deployment.seed_stock(&sale, ORDERS as i64).await;

    let halves = [
        Storm::new(&deployment.address, &sale, ORDERS / 2, ORDERS / 2).users_named("via-sender"),
        Storm::new(&plain.address, &sale, ORDERS / 2, ORDERS / 2).users_named("via-plain"),
    ];
    let (first, second) = tokio::join!(halves[0].run(), halves[1].run());
    assert_eq!(first.count(201) + second.count(201), ORDERS, "{:?} {:?}", first.statuses, second.statuses);
    let took = wait_for_created(&deployment, &receiver, ORDERS, Duration::from_secs(60)).await;

    let (created, sold_out): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where type = 'order.created'), count(*) filter (where type = 'sale.sold_out')
         from webhook_events where sale_id = $1",
    )
    .bind(&sale)
    .fetch_one(&deployment.pool)
    .await
    .unwrap();
    assert_eq!((created, sold_out), (ORDERS as i64, 1), "every order's event written once, and the sell-out");
    let until = Instant::now() + Duration::from_secs(30);
    while accepted_of(&receiver, "sale.sold_out").is_empty() {
        assert!(Instant::now() < until, "sale.sold_out never accepted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("figures webhooks two configurations: orders={ORDERS} created_accepted_in_ms={}", took.as_millis());
}
