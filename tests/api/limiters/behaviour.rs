//! What sets the algorithms apart at the edges: the fixed window's burst, the most any true
//! sliding window holds, requests in one microsecond, and memory after a crowd of clients.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use futures::{StreamExt, future::join_all, stream};
use seckill::limiter::{Algorithm, Decision, Policy, RateLimit};
use seckill::redis::Keyspace;
use seckill::redis::connection::{self, RedisConnection};

use super::models::Reply;
use crate::helpers::redis_url;

fn policy(algorithm: Algorithm, limit: u32, window: Duration) -> Policy {
    Policy::new(algorithm, RateLimit { limit, window }, None).expect("valid policy")
}

async fn connection() -> RedisConnection {
    connection::connect(&redis_url().into(), Duration::from_secs(5)).expect("redis")
}

/// Runs one request of `policy` on `key` at the simulated time `now_us`.
async fn request(con: &RedisConnection, policy: &Policy, key: &str, now_us: u64, nonce: &str) -> Reply {
    policy.invocation(key, nonce, Some(now_us)).invoke_async(&mut con.clone()).await.expect("script runs")
}

#[tokio::test]
async fn only_the_fixed_window_admits_twice_its_limit_across_a_window_edge() {
    let con = connection().await;
    let prefix = crate::common::new_key_prefix();
    let edge: u64 = 1_800_000_000_000_000; // a multiple of the 1 s window
    let mut admitted = HashMap::new();
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 5, Duration::from_secs(1));
        let key = format!("{prefix}:edge:{algorithm}:{{c}}");
        let mut count = 0;
        // 5 requests 1 ms before the edge, 5 more 1 ms after it: 10 requests within 2 ms.
        for (i, now) in [edge - 1_000; 5].into_iter().chain([edge + 1_000; 5]).enumerate() {
            count += request(&con, &policy, &key, now, &i.to_string()).await.0;
        }
        admitted.insert(algorithm, count);
    }
    let expected = HashMap::from(Algorithm::ALL.map(|a| (a, if a == Algorithm::FixedWindow { 10 } else { 5 })));
    assert_eq!(admitted, expected, "requests admitted within 2 ms around the edge, limit 5 per second");
}

/// A limiter given the time as its caller read Redis TIME (ARGV[6], as `lua/buy_batch.lua` gives
/// it, once for all its limits) decides at that time, not at one it reads again, and its key gets
/// no test clock's slack: at a time years back, a limit of one admits, refuses at the same
/// instant, admits two windows later (the real clock has not moved that far), and the key lives
/// no longer than what it holds.
#[tokio::test]
async fn every_limiter_decides_at_the_time_its_caller_read() {
    let con = connection().await;
    let prefix = crate::common::new_key_prefix();
    let read_at: u64 = 1_700_000_000_000_000;
    let window = Duration::from_secs(1);
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 1, window);
        let key = format!("{prefix}:given-time:{algorithm}:{{c}}");
        let mut admitted = vec![];
        for (i, now) in [read_at, read_at, read_at + 2 * window.as_micros() as u64].into_iter().enumerate() {
            let mut call = policy.invocation(&key, &i.to_string(), None);
            call.arg(now);
            let reply: Reply = call.invoke_async(&mut con.clone()).await.expect("script runs");
            admitted.push(reply.0);
        }
        assert_eq!(admitted, [1, 0, 1], "{algorithm}: admitted at the given time, the same time, two windows on");
        let ttl = pttls(&con, std::slice::from_ref(&key)).await[0];
        assert!((1..=2 * window.as_millis() as i64 + 1).contains(&ttl), "{algorithm}: PTTL {ttl} ms, no slack");
    }
}

/// Why the default is the sliding log (issue 25): a client that spends its limit at the end of
/// one window and then keeps asking gets almost twice the limit into one true window (any span of
/// WINDOW) from every algorithm but the log, which holds every such window to the limit.
#[tokio::test]
async fn only_the_sliding_log_holds_every_true_window_to_the_limit() {
    let con = connection().await;
    let prefix = crate::common::new_key_prefix();
    let start: u64 = 1_800_000_000_000_000; // a multiple of the 1 s window
    let mut most = HashMap::new();
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 20, Duration::from_secs(1));
        let key = format!("{prefix}:true-window:{algorithm}:{{c}}");
        // 20 requests in the last millisecond of a window, then one every 5 ms for a window.
        let times = (0..20).map(|i| start + 999_000 + i).chain((0..200).map(|i| start + 1_000_000 + i * 5_000));
        let mut admitted = vec![];
        for (i, now) in times.enumerate() {
            if request(&con, &policy, &key, now, &i.to_string()).await.0 == 1 {
                admitted.push(now);
            }
        }
        let in_window = |end: u64| admitted.iter().filter(|&&t| t + 1_000_000 > end && t <= end).count();
        most.insert(algorithm, admitted.iter().map(|&end| in_window(end)).max().unwrap_or(0));
    }
    assert_eq!(most[&Algorithm::SlidingLog], 20, "the log: never more than the limit in any window");
    for algorithm in Algorithm::ALL.into_iter().filter(|a| *a != Algorithm::SlidingLog) {
        assert!(most[&algorithm] >= 35, "{algorithm}: {} in one window (expected close to 2 × 20)", most[&algorithm]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_in_one_microsecond_admit_exactly_the_limit() {
    let con = connection().await;
    let prefix = crate::common::new_key_prefix();
    let now: u64 = 1_800_000_000_123_456;
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 10, Duration::from_secs(60));
        let key = format!("{prefix}:same-us:{algorithm}:{{c}}");
        let nonces: Vec<String> = (0..50).map(|i| format!("n{i}")).collect();
        let replies = join_all(nonces.iter().map(|n| request(&con, &policy, &key, now, n))).await;
        let mut remaining: Vec<i64> = replies.iter().filter(|r| r.0 == 1).map(|r| r.1).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..10).collect::<Vec<_>>(), "{algorithm}: 10 of 50 admitted, each counted once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_on_the_real_clock_admit_exactly_the_limit() {
    let redis = Keyspace::new(connection().await, crate::common::new_key_prefix());
    let client: IpAddr = "192.0.2.10".parse().unwrap();
    for algorithm in Algorithm::ALL {
        let policy = policy(algorithm, 10, Duration::from_secs(60));
        let decisions = join_all((0..60).map(|_| policy.check(&redis, client))).await;
        let admitted = decisions.into_iter().map(|d| d.expect("limiter answers")).filter(|d| d.allowed).count();
        assert_eq!(admitted, 10, "{algorithm}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_burst_from_10000_clients_every_limiter_key_expires_with_its_window() {
    let con = connection().await;
    let prefix = crate::common::new_key_prefix();
    join_all(Algorithm::ALL.map(|algorithm| burst_then_expiry(&con, &prefix, algorithm))).await;
}

/// 10,000 clients send one request each; every key they leave has a TTL no longer than the
/// state it holds lasts, and once that time has passed no key is left.
async fn burst_then_expiry(con: &RedisConnection, prefix: &str, algorithm: Algorithm) {
    const CLIENTS: u32 = 10_000;
    let window = Duration::from_secs(1);
    let policy = policy(algorithm, 5, window);
    let redis = Keyspace::new(con.clone(), prefix.to_owned());
    let clients = (0..CLIENTS).map(|i| IpAddr::from((0x0A00_0000 + i).to_be_bytes()));
    let decisions: Vec<Decision> = stream::iter(clients)
        .map(|client| {
            let redis = &redis;
            async move { policy.check(redis, client).await.expect("limiter answers") }
        })
        .buffer_unordered(128)
        .collect()
        .await;
    assert!(decisions.iter().all(|d| d.allowed), "{algorithm}: first request of each client admitted");

    // What a key holds lasts one window (two for the sliding counter, whose count still weighs
    // in the next window); its TTL is that plus at most 1 ms. Keys of clients served first may
    // already be gone (-2): the ones still here are checked.
    let lifetime = if algorithm == Algorithm::SlidingCounter { 2 * window } else { window };
    let pattern = format!("{prefix}:ratelimit:{algorithm}:*");
    let ttls = pttls(con, &scan(&pattern).await).await;
    let longest = lifetime.as_millis() as i64 + 1;
    let wrong: Vec<_> = ttls.iter().filter(|&&t| t == -1 || t > longest).collect();
    assert!(wrong.is_empty(), "{algorithm}: keys without expiry (-1) or outliving their window: {wrong:?}");

    tokio::time::sleep(lifetime + Duration::from_millis(100)).await;
    let left = scan(&pattern).await;
    assert!(left.is_empty(), "{algorithm}: {} keys outlived their window, e.g. {:?}", left.len(), left.first());
}

/// Every key matching `pattern`, on every node.
async fn scan(pattern: &str) -> Vec<String> {
    let pattern = pattern.to_owned();
    tokio::task::spawn_blocking(move || crate::common::scan_keys(&pattern)).await.unwrap()
}

/// The PTTL of each key (one command each: on a cluster the keys are in different slots).
async fn pttls(con: &RedisConnection, keys: &[String]) -> Vec<i64> {
    stream::iter(keys)
        .map(|key| {
            let mut con = con.clone();
            async move { redis::cmd("PTTL").arg(key).query_async::<i64>(&mut con).await.expect("pttl") }
        })
        .buffer_unordered(256)
        .collect()
        .await
}
