//! The proof of work at the door (issue 44): a sale's challenge is bound to its sale, buyer and
//! client address, short-lived, checked in process and spent once; a busy address pays more.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::common::Probe;
use crate::helpers::{assert_error, new_sale_id, spawn_app_with};

fn at(offset: time::Duration) -> String {
    (OffsetDateTime::now_utc() + offset).format(&Rfc3339).unwrap()
}

/// Every test's app: client addresses from `X-Forwarded-For` (one loopback proxy), `iterations`
/// PBKDF2 iterations per try, challenges valid for `ttl`.
async fn app(iterations: u32, ttl: Duration) -> crate::helpers::TestApp {
    spawn_app_with(
        |c| {
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
            c.challenge.challenge_iterations = iterations;
            c.challenge.challenge_ttl = ttl;
        },
        true,
    )
    .await
}

/// Seeds a sale asking `cost` tries: queued (pre-queue open now, start in a minute) or not.
async fn seed(app: &Probe, cost: u32, queued: bool) -> String {
    let sale = new_sale_id();
    let mut body = json!({"stock": 10_000, "challenge": {"cost": cost}});
    if queued {
        body["starts_at"] = json!(at(time::Duration::MINUTE));
        body["queue"] = json!({"opens_at": at(-time::Duration::SECOND), "rate": 100});
    }
    let response = app.seed(&sale, body).await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    sale
}

/// `GET /sales/{sale}/challenge` for `user` from client address `from`.
async fn challenge(app: &Probe, sale: &str, user: &str, from: &str) -> Value {
    let url = app.url(&format!("/sales/{sale}/challenge"));
    let response =
        app.client.get(url).query(&[("user_id", user)]).header("X-Forwarded-For", from).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    response.json().await.unwrap()
}

/// Solves a challenge as a script would (`seckill solve`'s solver, the altcha crate's): the
/// header to send, and the derivations it took.
fn solve(view: &Value) -> (String, u64) {
    let solved =
        seckill::challenge::solve::solve(&serde_json::to_vec(view).unwrap(), Duration::from_secs(600)).unwrap();
    (solved.header.clone(), solved.tries())
}

async fn join(app: &Probe, sale: &str, user: &str, from: &str, proof: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .post(app.url(&format!("/sales/{sale}/queue")))
        .query(&[("user_id", user)])
        .header("X-Forwarded-For", from);
    if let Some(proof) = proof {
        request = request.header("Seckill-Challenge", proof);
    }
    request.send().await.unwrap()
}

async fn refused(response: reqwest::Response, why: &str) {
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], "challenge_failed", "{body}");
    assert!(body["message"].as_str().unwrap().contains(why), "{why}: {body}");
}

#[tokio::test]
async fn a_join_needs_its_own_fresh_solution_and_spends_it_once() {
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 20, true).await;
    let other_sale = seed(&app, 20, true).await;
    let status: Value = app.client.get(app.url(&format!("/sales/{sale}"))).send().await.unwrap().json().await.unwrap();
    assert_eq!(status["challenge"]["cost"], 20, "the public status says the sale asks one: {status}");

    assert_error(join(&app, &sale, "alice", "10.0.0.1", None).await, 403, "challenge_required").await;
    let view = challenge(&app, &sale, "alice", "10.0.0.1").await;
    assert_eq!((view["factor"].as_u64(), view["tries"].as_u64()), (Some(1), Some(20)), "{view}");
    assert_eq!(view["parameters"]["algorithm"], "PBKDF2/SHA-256");
    assert_eq!(view["parameters"]["cost"], 10);
    let (proof, _) = solve(&view);

    refused(join(&app, &sale, "bob", "10.0.0.1", Some(&proof)).await, "another buyer").await;
    refused(join(&app, &other_sale, "alice", "10.0.0.1", Some(&proof)).await, "another sale").await;
    refused(join(&app, &sale, "alice", "10.0.0.2", Some(&proof)).await, "another client address").await;
    // A forged challenge: the data changed (another buyer's name) under the service's signature.
    let mut payload: Value = serde_json::from_slice(&STANDARD.decode(&proof).unwrap()).unwrap();
    payload["challenge"]["parameters"]["data"]["buyer"] = json!("mallory");
    let forged = STANDARD.encode(serde_json::to_vec(&payload).unwrap());
    refused(join(&app, &sale, "mallory", "10.0.0.1", Some(&forged)).await, "signature").await;
    // A wrong key: the challenge is the service's, the solution not.
    let mut payload: Value = serde_json::from_slice(&STANDARD.decode(&proof).unwrap()).unwrap();
    payload["solution"]["derivedKey"] = json!("00".repeat(32));
    let wrong = STANDARD.encode(serde_json::to_vec(&payload).unwrap());
    refused(join(&app, &sale, "alice", "10.0.0.1", Some(&wrong)).await, "does not solve").await;
    refused(join(&app, &sale, "alice", "10.0.0.1", Some("not base64 {")).await, "not base64").await;

    let joined = join(&app, &sale, "alice", "10.0.0.1", Some(&proof)).await;
    assert_eq!(joined.status(), 200, "{}", joined.text().await.unwrap());
    let first: Value = joined.json().await.unwrap();
    // Her join sent again with the same solution (its answer lost, say), here or on a second
    // instance (the nonce is spent in Redis): the standing she has, nothing spent again.
    let other = crate::helpers::spawn_instance_of(&app).await;
    for instance in [&*app, &*other] {
        let again = join(instance, &sale, "alice", "10.0.0.1", Some(&proof)).await;
        assert_eq!(again.status(), 200);
        let again: Value = again.json().await.unwrap();
        assert_eq!((&again["state"], &again["position"]), (&first["state"], &first["position"]), "{again}");
    }
    // A fresh solution joins again, to the same one place.
    let (again, _) = solve(&challenge(&other, &sale, "alice", "10.0.0.1").await);
    assert_eq!(join(&other, &sale, "alice", "10.0.0.1", Some(&again)).await.status(), 200);

    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for line in [
        r#"seckill_challenges_total{cost="1",event="issued"} 1"#,
        r#"seckill_challenges_total{cost="1",event="solved"} 1"#,
        r#"seckill_challenge_refusals_total{reason="other_buyer"} 1"#,
        r#"seckill_challenge_refusals_total{reason="forged"} 1"#,
        r#"seckill_challenge_refusals_total{reason="missing"} 1"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
}

/// `lua/queue_join.lua` with a nonce spent before: the buyer who has a place gets it back (its own
/// join sent again), marked replayed, and nothing changes; a buyer without one is refused and
/// not placed.
#[tokio::test]
async fn a_spent_nonce_tells_a_placed_buyer_their_place_and_places_nobody_else() {
    use seckill::domain::SaleId;
    use seckill::redis::keys::SaleKeys;
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 5, true).await;
    let line = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap()).line();
    let mut redis = app.redis.clone();
    let expires = (OffsetDateTime::now_utc().unix_timestamp() + 120) * 1000;
    let join = |buyer: &str, nonce: &str| {
        let mut call = seckill::redis::lua::QUEUE_JOIN.key(&line.joining()[..]);
        call.arg(buyer).arg("join").arg(nonce.to_owned()).arg(expires);
        call
    };
    let words = |reply: redis::Value| -> Vec<String> {
        match reply {
            redis::Value::Array(items) => {
                items.iter().map(|v| redis::from_redis_value_ref::<String>(v).unwrap()).collect()
            }
            other => vec![redis::from_redis_value_ref::<String>(&other).unwrap()],
        }
    };
    let first = words(join("alice", "n-alice").invoke_async(&mut redis).await.unwrap());
    assert_eq!(first, ["prequeue"], "alice joins, spending her nonce");
    let again = words(join("alice", "n-alice").invoke_async(&mut redis).await.unwrap());
    assert_eq!(again, ["prequeue", "replayed"], "her join sent again: her standing");
    let carol = words(join("carol", "n-alice").invoke_async(&mut redis).await.unwrap());
    assert_eq!(carol, ["challenge_replayed"], "a spent nonce places nobody new");
    let mut ask = seckill::redis::lua::QUEUE_JOIN.key(&line.joining()[..]);
    ask.arg("carol").arg("ask");
    assert_eq!(words(ask.invoke_async(&mut redis).await.unwrap()), ["not_in_queue"]);
    let queued: usize = redis::AsyncCommands::zcard(&mut redis, &line.queue.prequeue).await.unwrap();
    assert_eq!(queued, 1, "alice alone in the pre-queue");
}

/// A join refused by the script's own error (a queue state that lost its shuffle seed: damaged)
/// does not spend its nonce, so the same join sent once the sale is seeded again places the
/// buyer; it was refused `challenge_replayed`, the nonce spent by the call that failed.
#[tokio::test]
async fn a_join_that_fails_on_a_damaged_queue_state_leaves_its_nonce_unspent() {
    use seckill::domain::SaleId;
    use seckill::redis::keys::SaleKeys;
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 5, true).await;
    let line = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap()).line();
    let mut redis = app.redis.clone();
    let expires = (OffsetDateTime::now_utc().unix_timestamp() + 120) * 1000;
    let join = || {
        let mut call = seckill::redis::lua::QUEUE_JOIN.key(&line.joining()[..]);
        call.arg("dave").arg("join").arg("n-dave").arg(expires);
        call
    };
    let seed: String = redis::AsyncCommands::hget(&mut redis, &line.queue.state, "seed").await.unwrap();
    let _: i64 = redis::AsyncCommands::hdel(&mut redis, &line.queue.state, "seed").await.unwrap();
    let failed: redis::RedisResult<redis::Value> = join().invoke_async(&mut redis).await;
    assert!(failed.as_ref().is_err_and(|e| e.to_string().contains("no seed")), "{failed:?}");
    let _: i64 = redis::AsyncCommands::hset(&mut redis, &line.queue.state, "seed", seed).await.unwrap();
    let placed: Vec<String> = join().invoke_async(&mut redis).await.unwrap();
    assert_eq!(placed, ["prequeue"], "the same join, mended: placed, its nonce spent now");
}

#[tokio::test]
async fn an_expired_solution_is_refused() {
    let app = app(10, Duration::from_secs(1)).await;
    let sale = seed(&app, 5, true).await;
    let (proof, _) = solve(&challenge(&app, &sale, "alice", "10.0.0.1").await);
    // Expiry is in whole seconds: past it for sure after two.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    refused(join(&app, &sale, "alice", "10.0.0.1", Some(&proof)).await, "expired").await;
}

/// A solution an instance still takes (its clock behind Redis's) but whose challenge has expired
/// on the Redis clock is spent nowhere, however often it is sent: the nonces of expired challenges
/// are trimmed, so spending one again would succeed again (and leave the key without a TTL).
#[tokio::test]
async fn a_nonce_whose_challenge_expired_on_the_redis_clock_is_never_spent() {
    use seckill::domain::SaleId;
    use seckill::redis::keys::SaleKeys;
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 5, false).await;
    let spent_key = SaleKeys::new(&app.config.key_prefix, &SaleId::parse(&sale).unwrap()).challenges;
    let mut redis = app.redis.clone();
    let (secs, _): (i64, i64) = redis::cmd("TIME").query_async(&mut redis).await.unwrap();
    let expired = secs * 1000 - 1000;
    for attempt in 1..=2 {
        let mut call = seckill::redis::lua::CHALLENGE_SPEND.key(&spent_key);
        call.arg("0f1e2d3c4b5a69788796a5b4c3d2e1f0").arg(expired);
        let spent: i64 = call.invoke_async(&mut redis).await.unwrap();
        assert_eq!(spent, 0, "attempt {attempt}: an expired challenge spends nothing");
    }
    let kept: bool = redis::AsyncCommands::exists(&mut redis, &spent_key).await.unwrap();
    assert!(!kept, "no key without an end of life");
}

/// A re-seed that drops the sale's challenge reaches every instance's memory of the sales that ask
/// one (the seed's event): a purchase without a solution is no longer refused in process, where
/// it was for up to a minute while the sale's page showed no challenge.
#[tokio::test]
async fn a_re_seed_without_the_challenge_lets_purchases_without_a_solution_in_at_once() {
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 5, false).await;
    challenge(&app, &sale, "alice", "10.0.0.1").await; // this instance now knows the sale asks one
    let reseeded = app.seed(&sale, json!({"stock": 10_000, "challenge": {"cost": 0}})).await;
    assert_eq!(reseeded.status(), 200, "{}", reseeded.text().await.unwrap());
    let buy = || {
        let body = json!({"sale_id": sale, "user_id": "bob", "quantity": 1});
        app.client.post(app.url("/buy")).header("X-Forwarded-For", "10.0.0.2").json(&body).send()
    };
    // The event reaches the instance a moment after the seed's answer: wait for that state.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = buy().await.unwrap();
        if response.status() == 201 {
            break;
        }
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"], "challenge_required", "{body}");
        assert!(Instant::now() < deadline, "still refused in process 10 s after the re-seed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_sale_without_a_waiting_room_asks_it_on_buy_and_one_without_a_challenge_does_not() {
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 5, false).await;
    let buy = |user: &'static str, proof: Option<String>| {
        let mut request = app
            .client
            .post(app.url("/buy"))
            .header("X-Forwarded-For", "10.0.0.1")
            .json(&json!({"sale_id": sale, "user_id": user, "quantity": 1}));
        if let Some(proof) = proof {
            request = request.header("Seckill-Challenge", proof);
        }
        request.send()
    };
    // Before this instance issued a challenge of the sale, lua/buy.lua refuses; after, the
    // instance itself (it learned that the sale asks one).
    assert_error(buy("alice", None).await.unwrap(), 403, "challenge_required").await;
    let (proof, _) = solve(&challenge(&app, &sale, "alice", "10.0.0.1").await);
    assert_error(buy("bob", None).await.unwrap(), 403, "challenge_required").await;
    let bought = buy("alice", Some(proof.clone())).await.unwrap();
    assert_eq!(bought.status(), 201, "{}", bought.text().await.unwrap());
    let order: Value = bought.json().await.unwrap();
    // Her retry with the same solution (her answer lost, say) learns that she bought.
    let again = buy("alice", Some(proof)).await.unwrap();
    assert_eq!(again.status(), 409);
    let again: Value = again.json().await.unwrap();
    assert_eq!((&again["error"], &again["order_id"]), (&json!("already_purchased"), &order["order_id"]), "{again}");
    // A solution spent on a purchase that bought nothing and may be asked again (two units, one a
    // buyer) is given back: the same solution buys one unit.
    let (bobs, _) = solve(&challenge(&app, &sale, "bob", "10.0.0.1").await);
    let two = app
        .client
        .post(app.url("/buy"))
        .header("X-Forwarded-For", "10.0.0.1")
        .header("Seckill-Challenge", bobs.clone())
        .json(&json!({"sale_id": sale, "user_id": "bob", "quantity": 2}));
    assert_error(two.send().await.unwrap(), 409, "limit_reached").await;
    assert_eq!(buy("bob", Some(bobs)).await.unwrap().status(), 201);
    assert_eq!(app.status(&sale).await.stock_left, 9_998, "two units sold, one to each solution");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    for counted in [
        r#"{outcome="challenge_required"} 2"#,
        r#"{outcome="limit_reached"} 1"#,
        r#"{outcome="created"} 2"#,
        r#"{outcome="already_purchased"} 1"#,
    ] {
        let line = format!("seckill_purchases_total{counted}");
        assert!(metrics.lines().any(|l| l == line), "{line} in /metrics");
    }
    let invalid = r#"seckill_purchases_total{outcome="invalid_request"} 0"#;
    assert!(metrics.lines().any(|l| l == invalid), "no refused proof counted as bad input");

    let plain = new_sale_id();
    app.seed_stock(&plain, 3).await;
    let ask = || app.client.get(app.url(&format!("/sales/{plain}/challenge"))).query(&[("user_id", "alice")]).send();
    // The instance's registry of sales is at most 200 ms old: a sale seeded just now may be unknown.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut response = ask().await.unwrap();
    while response.status() == 404 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        response = ask().await.unwrap();
    }
    assert_error(response, 409, "no_challenge").await;
    assert_eq!(app.buy(&plain, "alice").await.status(), 201, "no challenge asked, none needed");
}

#[tokio::test]
async fn a_script_taking_1000_places_from_one_address_works_far_more_than_a_person() {
    // A hundredth of the default iterations and cost keep the run short; the ratios do not depend
    // on them (each try is one derivation, whatever its iterations; the curve multiplies the cost).
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 10, true).await;

    // People: each from an address of its own, once.
    let (mut person_tries, mut person_time) = (0, Duration::ZERO);
    for i in 0..20 {
        let from = format!("10.1.0.{i}");
        let view = challenge(&app, &sale, &format!("person-{i}"), &from).await;
        assert_eq!(view["factor"], 1, "{view}");
        let started = Instant::now();
        let (proof, tries) = solve(&view);
        person_time += started.elapsed();
        person_tries += tries;
        assert_eq!(join(&app, &sale, &format!("person-{i}"), &from, Some(&proof)).await.status(), 200);
    }
    let (person_tries, person_time) = (person_tries as f64 / 20.0, person_time / 20);

    // The script: a thousand accounts behind one address, one after another within the minute.
    let (mut script_tries, mut script_time, mut factors) = (0u64, Duration::ZERO, Vec::new());
    for i in 0..1000 {
        let view = challenge(&app, &sale, &format!("bot-{i}"), "10.2.0.1").await;
        factors.push(view["factor"].as_u64().unwrap());
        let started = Instant::now();
        let (proof, tries) = solve(&view);
        script_time += started.elapsed();
        script_tries += tries;
        let response = join(&app, &sale, &format!("bot-{i}"), "10.2.0.1", Some(&proof)).await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    let work = script_tries as f64 / person_tries;
    let cpu = script_time.as_secs_f64() / person_time.as_secs_f64();
    println!(
        "1,000 places from one address: {script_tries} tries in {:.2} s of solving; one person: {person_tries:.0} \
         tries in {:.2} ms; the script worked {work:.0}x a person's tries and {cpu:.0}x a person's solving time",
        script_time.as_secs_f64(),
        person_time.as_secs_f64() * 1000.0
    );
    assert_eq!(factors[..5], [1, 1, 1, 1, 1], "the first five of a minute at the sale's cost");
    assert!(factors.windows(2).all(|w| w[0] <= w[1]), "the cost only grows within the minute");
    assert_eq!(factors.last(), Some(&64), "up to the bound");
    assert!(work >= 50.0 && cpu >= 50.0, "work {work:.0}x, time {cpu:.0}x");
}

#[tokio::test]
async fn a_sale_redis_lost_comes_back_from_the_repair_still_asking_its_proof_of_work() {
    let app = app(10, Duration::from_secs(60)).await;
    let sale = seed(&app, 7, false).await;
    let (proof, _) = solve(&challenge(&app, &sale, "alice", "10.0.0.1").await);
    let request =
        app.client.post(app.url("/buy")).header("X-Forwarded-For", "10.0.0.1").header("Seckill-Challenge", proof);
    assert_eq!(request.json(&json!({"sale_id": sale, "user_id": "alice"})).send().await.unwrap().status(), 201);
    app.wait_for_drain(&sale).await;
    crate::redis_loss::lose_sale(&app, &sale).await;

    let url = app.url(&format!("/admin/sales/{sale}/reconcile"));
    let repaired = app.client.post(url).bearer_auth(crate::common::ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(repaired.status(), 200, "{}", repaired.text().await.unwrap());
    let url = app.url(&format!("/admin/sales/{sale}"));
    let status: Value =
        app.client.get(url).bearer_auth(crate::common::ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!((status["challenge_cost"].as_u64(), status["sold"].as_i64()), (Some(7), Some(1)), "{status}");
}

/// A client sending bogus solutions as fast as it can is refused by the in-process per-client
/// limit before any is checked: past `SECKILL_RATE_LIMIT`'s burst, 429 without a verification
/// (counted as `proof_check_refused`, none as a refused solution), while another address's
/// solution is still checked and passes.
#[tokio::test]
async fn bogus_solutions_are_limited_per_client_before_they_are_checked() {
    const LIMIT: u32 = 4;
    let app = spawn_app_with(
        |c| {
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
            c.challenge.challenge_iterations = 10;
            c.rate_limit = seckill::limiter::RateLimit { limit: LIMIT, window: Duration::from_secs(600) };
        },
        true,
    )
    .await;
    let sale = seed(&app, 5, true).await;
    let bogus = STANDARD.encode(br#"{"challenge":{},"solution":{}}"#);
    let mut statuses = vec![];
    for _ in 0..20 {
        statuses.push(join(&app, &sale, "mallory", "10.9.0.1", Some(&bogus)).await.status().as_u16());
    }
    let checked = statuses.iter().filter(|s| **s == 403).count();
    assert_eq!(checked, LIMIT as usize, "a burst of {LIMIT} checked, then refused unchecked: {statuses:?}");
    assert!(statuses[LIMIT as usize..].iter().all(|s| *s == 429), "{statuses:?}");
    let metrics = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
    let line = r#"seckill_limiter_decisions_total{decision="proof_check_refused"} 16"#;
    assert!(metrics.lines().any(|l| l == line), "{line} in /metrics");
    let malformed = r#"seckill_challenge_refusals_total{reason="malformed"} 4"#;
    assert!(metrics.lines().any(|l| l == malformed), "only {LIMIT} solutions were checked: {malformed}");

    let (proof, _) = solve(&challenge(&app, &sale, "alice", "10.9.0.2").await);
    assert_eq!(join(&app, &sale, "alice", "10.9.0.2", Some(&proof)).await.status(), 200, "another address");
}

/// A buyer answered 429 from the instance's memory of a refusal keeps the solution they sent:
/// the remembered refusal is looked at before the proof of work is spent.
#[tokio::test]
async fn a_buyer_refused_from_memory_keeps_their_solution() {
    let app = spawn_app_with(
        |c| {
            c.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap()];
            c.challenge.challenge_iterations = 10;
            // A challenge asked counts against the buyer's limit as a purchase does.
            c.user_rate_limit = Some(seckill::limiter::RateLimit { limit: 4, window: Duration::from_secs(600) });
        },
        true,
    )
    .await;
    let sale = seed(&app, 5, false).await;
    let app = &app;
    let buy = |quantity: u32, proof: String| {
        let body = json!({"sale_id": sale, "user_id": "carol", "quantity": quantity});
        let request = app.client.post(app.url("/buy")).header("X-Forwarded-For", "10.0.0.7");
        request.header("Seckill-Challenge", proof).json(&body).send()
    };
    let metric = |name: &'static str| async move {
        let text = app.client.get(app.url("/metrics")).send().await.unwrap().text().await.unwrap();
        let matching = text.lines().filter(|l| l.starts_with(name));
        matching.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum::<f64>()
    };
    const SOLVED: &str = r#"seckill_challenges_total{cost="1",event="solved"}"#;
    const FROM_MEMORY: &str = r#"seckill_limiter_decisions_total{decision="buyer_refused_from_memory"}"#;
    // Three solutions (three of her four requests), then an attempt asking more than a buyer may:
    // refused, and the fourth.
    let mut solutions = Vec::new();
    for _ in 0..3 {
        solutions.push(solve(&challenge(app, &sale, "carol", "10.0.0.7").await).0);
    }
    assert_error(buy(2, solutions[0].clone()).await.unwrap(), 409, "limit_reached").await;
    // The fifth is refused by her limit in Redis (its solution was spent before the call); the
    // instance remembers the refusal.
    assert_error(buy(1, solutions[1].clone()).await.unwrap(), 429, "rate_limited").await;
    assert_eq!(metric(SOLVED).await, 2.0, "both solutions spent");
    for _ in 0..3 {
        assert_error(buy(1, solutions[2].clone()).await.unwrap(), 429, "rate_limited").await;
    }
    assert_eq!(metric(FROM_MEMORY).await, 3.0, "answered from memory");
    assert_eq!(metric(SOLVED).await, 2.0, "the third solution is not spent");
}

/// A purchase that bought nothing and may be asked again as it was (paused here; also before the
/// start, refused by a limit, short of stock or never run) gives its solution back: the same
/// header buys once the sale resumes. It was spent before the call, and the retry was refused
/// as a replay (403 challenge_failed).
#[tokio::test]
async fn a_purchase_refused_while_paused_gives_its_solution_back_for_the_retry() {
    let app = app(10, Duration::from_secs(600)).await;
    let sale = seed(&app, 5, false).await;
    let (proof, _) = solve(&challenge(&app, &sale, "dora", "10.0.0.8").await);
    let buy = || {
        let request = app.client.post(app.url("/buy")).header("X-Forwarded-For", "10.0.0.8");
        request.header("Seckill-Challenge", &proof).json(&json!({"sale_id": sale, "user_id": "dora"})).send()
    };
    assert_eq!(crate::controls::control(&app, &sale, "pause", None).await.status(), 200);
    assert_error(buy().await.unwrap(), 403, "sale_paused").await;
    assert_eq!(crate::controls::control(&app, &sale, "resume", None).await.status(), 200);
    let bought = buy().await.unwrap();
    assert_eq!(bought.status(), 201, "{}", bought.text().await.unwrap());
}

/// `seckill solve`, the command a script runs: given a challenge another client fetched (on
/// stdin) it prints a header that joins; fetching one from a sale that asks none, it exits 1
/// with the service's answer on stderr and prints no header. (Fetching and solving, then
/// buying: docs/waiting-room.md's example, run by `tests/api/docs.rs`.)
#[tokio::test]
async fn seckill_solve_prints_a_header_that_joins_and_says_why_it_has_none() {
    use std::process::Stdio;
    use tokio::io::AsyncWriteExt;

    let app = app(1000, Duration::from_secs(120)).await;
    let sale = seed(&app, 50, true).await;
    let view = challenge(&app, &sale, "alice", "10.0.0.1").await;
    let mut solve = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["solve", "--challenge", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    solve.stdin.take().unwrap().write_all(&serde_json::to_vec(&view).unwrap()).await.unwrap();
    let solved = tokio::time::timeout(Duration::from_secs(120), solve.wait_with_output()).await;
    let solved = solved.expect("seckill solve ran past 120 s").unwrap();
    let (stdout, stderr) = (String::from_utf8(solved.stdout).unwrap(), String::from_utf8_lossy(&solved.stderr));
    assert!(solved.status.success(), "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "the header alone: {stdout}");
    assert!(stderr.contains(" tries (50 on average, 1x the sale's cost) of 1000 iterations each"), "{stderr}");
    let joined = join(&app, &sale, "alice", "10.0.0.1", Some(stdout.trim())).await;
    assert_eq!(joined.status(), 200, "{}", joined.text().await.unwrap());

    let plain = seed(&app, 0, false).await;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_seckill"));
    command.args(["solve", "--url", &app.url(""), "--sale", &plain, "--user", "alice"]);
    let refused = crate::common::output_within(command, Duration::from_secs(120)).await;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(refused.stdout.is_empty() && stderr.contains("HTTP 409") && stderr.contains("no_challenge"), "{stderr}");
}
