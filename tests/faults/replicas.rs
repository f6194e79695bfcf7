//! `SECKILL_CONFIRM_REPLICAS`: a 201 only once a replica holds the purchase (`WAIT`). A private
//! master and its replica (testbed `Redis::launch_replica`) per test: the master is killed
//! (SIGKILL) and the replica promoted (`REPLICAOF NO ONE`), or the replica is cut off
//! (`REPLICAOF` a closed port: it keeps its data and its link is down).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use redis::AsyncCommands;
use seckill::domain::SaleId;
use serde_json::{Value, json};
use testbed::Redis;
use uuid::Uuid;

use crate::common::{self, Probe};
use crate::harness::Deployment;

/// A master and its replica in a directory of their own, both stopped when dropped.
struct Pair {
    master: Redis,
    replica: Redis,
}

impl Pair {
    fn launch() -> Self {
        let dir = common::testbed().dir().join(format!("replicas-{}", common::new_key_prefix()));
        let master = common::testbed().redis.launch_sibling(&dir.join("master")).expect("start a master");
        let replica = master.launch_replica(&dir.join("replica")).expect("start its replica");
        Self { master, replica }
    }

    /// Waits (up to 10 s) until the replica has everything the master wrote so far.
    fn wait_synced(&self) {
        let offset = |redis: &Redis, field| redis.info_field("replication", field);
        let synced = testbed_wait(Duration::from_secs(10), || {
            let master = offset(&self.master, "master_repl_offset");
            master.is_some() && offset(&self.replica, "slave_repl_offset") == master
        });
        assert!(synced, "the replica did not catch up:\n{}", self.replica.replication_info());
    }
}

fn testbed_wait(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while !done() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

impl Drop for Pair {
    fn drop(&mut self) {
        self.replica.stop();
        self.master.stop();
    }
}

/// One buy's answer: status, body.
type Answer = (u16, Value);

/// `users` buy at once (`<prefix>-<n>`); their answers by user.
async fn burst(service: &str, sale: &str, prefix: &str, users: usize) -> BTreeMap<String, Answer> {
    let client = common::http_client(Duration::from_secs(10));
    futures::stream::iter(0..users)
        .map(|n| {
            let (client, user) = (client.clone(), format!("{prefix}-{n}"));
            let request = client.post(format!("{service}/buy")).json(&json!({"sale_id": sale, "user_id": user}));
            async move {
                let response = request.send().await.expect("an answer");
                let status = response.status().as_u16();
                (user, (status, response.json::<Value>().await.unwrap_or(Value::Null)))
            }
        })
        .buffer_unordered(users)
        .collect()
        .await
}

fn order_id(body: &Value) -> Uuid {
    body["order_id"].as_str().and_then(|id| id.parse().ok()).unwrap_or_else(|| panic!("no order id in {body}"))
}

fn statuses(answers: &BTreeMap<String, Answer>) -> BTreeMap<u16, usize> {
    answers.values().fold(BTreeMap::new(), |mut counts, (status, _)| {
        *counts.entry(*status).or_default() += 1;
        counts
    })
}

/// The settings of these deployments: no worker, so the orders stay in Redis until the failover.
const HELD: (&str, &str) = ("SECKILL_NO_WORKER", "true");
/// A replica's acknowledgement waited for long enough that a loaded host's replica gives it
/// (the default 250 ms is an operator's choice, not a test's), under a Redis timeout above it.
const WAIT: (&str, &str) = ("SECKILL_CONFIRM_TIMEOUT", "2s");
const WAIT_UNDER: (&str, &str) = ("SECKILL_REDIS_TIMEOUT", "5s");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_201s_survive_a_master_kill_and_reach_postgres_from_the_promoted_replica() {
    let pair = Pair::launch();
    let mut deployment =
        Deployment::on_redis(&pair.master.url(), &[("SECKILL_CONFIRM_REPLICAS", "1"), HELD, WAIT, WAIT_UNDER]).await;
    let (mut first, sale) = deployment.start_with_sale(100).await;
    // The replica's first sync (a fork and a transfer) can outlast SECKILL_CONFIRM_TIMEOUT on a
    // loaded machine: the burst starts with the replica linked and caught up.
    pair.wait_synced();

    let started = Instant::now();
    let answers = burst(&first.address, &sale, "a", 20).await;
    let elapsed = started.elapsed();
    assert_eq!(statuses(&answers), BTreeMap::from([(201, 20)]), "{answers:?}");
    let confirmed: BTreeSet<Uuid> = answers.values().map(|(_, body)| order_id(body)).collect();
    eprintln!("20 confirmed 201s (WAIT 1) in {elapsed:?}");

    // The crash: the master dies with the orders still queued; its replica takes over.
    assert!(pair.master.kill(), "SIGKILL the master");
    pair.replica.promote().unwrap();
    first.kill().await;
    let on_replica =
        Probe::on_redis(first.address.clone(), &deployment.database_url, &deployment.key_prefix, &pair.replica.url());
    let buyers = on_replica.buyers(&sale).await;
    let expected: BTreeSet<String> = answers.keys().cloned().collect();
    assert_eq!(buyers, expected, "every confirmed buyer is on the promoted replica");
    let (stream, _) = on_replica.orders_stream(&sale);
    let entries: redis::streams::StreamRangeReply = on_replica.redis.clone().xrange_all(&stream).await.unwrap();
    let queued = entries.ids.iter().flat_map(seckill::redis::order_stream::users).count();
    assert_eq!(queued, 20, "every confirmed order is queued on the promoted replica");

    // The service and its worker, pointed at the promoted replica, store every one.
    let replica_url = pair.replica.url();
    let second = deployment.start_with(&[("SECKILL_REDIS_URL", &replica_url), ("SECKILL_NO_WORKER", "false")]).await;
    let on_replica =
        Probe::on_redis(second.address.clone(), &deployment.database_url, &deployment.key_prefix, &replica_url);
    let status = on_replica.assert_invariants(&sale, &confirmed).await;
    assert_eq!((status.sold, on_replica.order_ids(&sale).await), (20, confirmed));
    // A retry learns its order: 409 with the id of the 201.
    let (user, (_, body)) = answers.iter().next().unwrap();
    let retry = on_replica.buy(&sale, user).await;
    assert_eq!(retry.status(), 409);
    assert_eq!(order_id(&retry.json::<Value>().await.unwrap()), order_id(body));
}

/// The control: without confirmation, a 201 can exist only on the master. With the replica's
/// link down, every 201 is lost when the master dies and the replica is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unconfirmed_201s_are_lost_when_a_replica_without_them_is_promoted() {
    let pair = Pair::launch();
    let mut deployment = Deployment::on_redis(&pair.master.url(), &[HELD]).await;
    let (mut first, sale) = deployment.start_with_sale(100).await;
    pair.wait_synced();
    pair.replica.cut_off().unwrap();
    let answers = burst(&first.address, &sale, "b", 20).await;
    assert_eq!(statuses(&answers), BTreeMap::from([(201, 20)]), "{answers:?}");

    assert!(pair.master.kill(), "SIGKILL the master");
    pair.replica.promote().unwrap();
    first.kill().await;
    let on_replica =
        Probe::on_redis(first.address.clone(), &deployment.database_url, &deployment.key_prefix, &pair.replica.url());
    let kept = on_replica.buyers(&sale).await.len();
    let stock_left = on_replica.store.sale_state(&SaleId::parse(&sale).unwrap()).await.unwrap().map(|s| s.stock_left);
    eprintln!("unconfirmed: {kept} of 20 201s kept by the promoted replica; its stock left {stock_left:?} of 100");
    assert_eq!((kept, stock_left), (0, Some(100)), "the promoted replica has the sale but none of these 201s");
}

/// With the replica cut off, every purchase answers 503 `not_durable` with its order id after
/// the wait; the purchase stands (a retry is 409 with the same id, the order reaches Postgres);
/// once the replica is back, 201s again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_replica_makes_purchases_not_durable_until_it_is_back() {
    let pair = Pair::launch();
    let mut deployment =
        Deployment::on_redis(&pair.master.url(), &[("SECKILL_CONFIRM_REPLICAS", "1"), WAIT, WAIT_UNDER]).await;
    let (service, sale) = deployment.start_with_sale(100).await;
    pair.replica.cut_off().unwrap();

    let started = Instant::now();
    let answers = burst(&service.address, &sale, "c", 20).await;
    let elapsed = started.elapsed();
    assert_eq!(statuses(&answers), BTreeMap::from([(503, 20)]), "{answers:?}");
    assert!(elapsed >= Duration::from_secs(2), "each waited for the replica: {elapsed:?}");
    eprintln!("20 not_durable 503s in {elapsed:?}");
    let mut told = BTreeSet::new();
    for (user, (_, body)) in &answers {
        assert_eq!(body["error"], "not_durable", "{body}");
        let id = order_id(body);
        told.insert(id);
        let retry = deployment.buy(&sale, user).await;
        assert_eq!(retry.status(), 409, "a retry finds the purchase");
        let retry: Value = retry.json().await.unwrap();
        assert_eq!((retry["error"].as_str(), order_id(&retry)), (Some("already_purchased"), id));
    }
    let metrics = deployment.client.get(deployment.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("seckill_purchases_total{outcome=\"not_durable\"} 20"), "{metrics}");
    deployment.assert_invariants(&sale, &told).await;

    // The replica comes back: purchases are confirmed again.
    pair.replica.replicate(&pair.master).unwrap();
    pair.wait_synced();
    let answers = burst(&service.address, &sale, "d", 20).await;
    assert_eq!(statuses(&answers), BTreeMap::from([(201, 20)]), "{answers:?}");
    let status = deployment.wait_for_drain(&sale).await;
    assert_eq!(status.sold, 40);
}
