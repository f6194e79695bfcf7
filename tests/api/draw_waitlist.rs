//! The draw's waitlist (`seckill::draw::offers`, `lua/draw_release.lua`): units that come back after
//! the draw go to the waitlisted entrants, in order, each once, before the stock; the script
//! against the pure rule (`seckill::draw::waitlist::offer`), the buyers' reads and events, and
//! releases racing each other.

use std::collections::{BTreeMap, BTreeSet};

use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use seckill::domain::{DropId, UserId};
use seckill::draw::offers::{self, Place};
use seckill::draw::waitlist::{Waiting, offer};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::draw_run::{SIZES, draw_drop, draw_drop_with_window, enter_each, results, run_now};
use crate::helpers::{TestApp, spawn_app};

/// The drawn waitlist as the rule's model holds it, in place order (the entrant is the user id).
async fn waitlist(app: &TestApp, drop: &str) -> Vec<Waiting> {
    let rows: Vec<(String, i32, Vec<String>)> = sqlx::query_as(
        "select r.user_id, r.quantity, e.sizes from draw_results r join draw_entries e using (drop_id, user_id)
         where r.drop_id = $1 and r.outcome = 'waitlisted' order by r.position",
    )
    .bind(drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    rows.into_iter().map(|(entrant, q, sizes)| Waiting { entrant, sizes, quantity: q as u32, waiting: true }).collect()
}

/// `n` entrants `e00`…, most of them listing two or three sizes, a fifth of them asking 2 units.
fn entries(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let sizes: Vec<&str> = (0..1 + (i + 1) % 3).map(|k| SIZES[(i + k) % 3]).collect();
            json!({"sizes": sizes, "quantity": 1 + (i % 5 == 0) as u32, "user_id": format!("e{i:02}")})
        })
        .collect()
}

/// Every size of the drop drained, then its oldest open reservation: (sale, user, units).
async fn oldest_reservation(app: &TestApp, drop: &str) -> Option<(String, String, i32)> {
    for size in SIZES {
        app.wait_for_drain(&format!("{drop}.{size}")).await;
    }
    sqlx::query_as(
        "select sale_id, user_id, quantity from orders where left(sale_id, length($1) + 1) = $1 || '.'
         and status = 'reserved' order by created_at, order_id limit 1",
    )
    .bind(drop)
    .fetch_optional(&app.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn units_given_back_go_down_the_waitlist_in_order_each_once_then_to_the_stock() {
    let app = spawn_app().await;
    // A disabled endpoint: nothing is sent, every event is written.
    sqlx::query("insert into webhook_endpoints (url, disabled_at) values ('http://127.0.0.1:9/hook', now())")
        .execute(&app.pool)
        .await
        .unwrap();
    let drop = draw_drop(&app, [3, 2, 2], 3600).await;
    enter_each(&app, &drop, entries(30)).await;
    assert_eq!(run_now(&app, &drop).await.status(), 200);
    let drawn = results(&app, &drop).await;
    let mut model = waitlist(&app, &drop).await;
    assert_eq!(model.len(), 10, "the drop's 10 places are taken");

    // Every reservation given back, the oldest first (the winners', then the offers' as they come),
    // each time checked against the rule.
    let (mut offered, mut to_stock) = (BTreeMap::new(), BTreeMap::<String, u32>::new());
    while let Some((sale, user, units)) = oldest_reservation(&app, &drop).await {
        let size = sale.rsplit('.').next().unwrap().to_owned();
        let expected = offer(&model, &size, units as u32);
        assert_eq!(app.cancel(&sale, &user).await.status(), 200);
        for o in &expected.offers {
            model[o.position as usize - 1].waiting = false;
            assert!(offered.insert(o.entrant.clone(), size.clone()).is_none(), "{} offered twice", o.entrant);
        }
        *to_stock.entry(size.clone()).or_default() += expected.to_stock;
        for (i, place) in model.iter().enumerate() {
            let entry = app.get_as(&format!("/drops/{drop}/entry"), &place.entrant).await;
            let at = json!(i + 1);
            match offered.get(&place.entrant) {
                Some(size) if expected.offers.iter().any(|o| o.entrant == place.entrant) => {
                    assert_eq!(
                        (&entry["state"], &entry["size"], &entry["position"]),
                        (&json!("offered"), &json!(size), &at)
                    );
                    assert!(entry["order_id"].is_string() && entry["pay_by"].is_string(), "{entry}");
                }
                Some(_) => assert_eq!(entry["state"], "offered", "{entry}"),
                None => assert_eq!((&entry["state"], &entry["position"]), (&json!("waitlisted"), &at), "{entry}"),
            }
        }
        let left = app.status(&sale).await.stock_left;
        assert_eq!(left, i64::from(to_stock[&size]), "{sale}: only what no place took is in the stock");
    }
    // How many places are offered a unit depends on the draw (its seed is the drop's own, random):
    // every offer was checked against the rule above, so here only that the waitlist was used.
    assert!(!offered.is_empty(), "places were offered units given back: {offered:?}");
    let url = app.url(&format!("/admin/drops/{drop}/draw/stats"));
    let stats: Value =
        app.client.get(url).bearer_auth(crate::helpers::ADMIN_TOKEN).send().await.unwrap().json().await.unwrap();
    let cancelled = json!({"reserved": 0, "paid": 0, "expired": 0, "cancelled": offered.len(), "refunded": 0});
    assert_eq!(stats["offered"], cancelled, "the live page's count of offers, each given back too: {stats}");
    for (size, stock) in SIZES.iter().zip([3, 2, 2]) {
        let status = app.assert_invariants(&format!("{drop}.{size}"), &BTreeSet::new()).await;
        assert_eq!(status.stock_left, stock, "every unit given back ends in the stock once: {status:?}");
    }

    // The events: one draw.lost per lost entrant; each offer's draw.offered before its order.created.
    let events: Vec<(i64, String, Option<Uuid>, Option<String>)> = sqlx::query_as(
        "select id, type, order_id, body::jsonb -> 'data' ->> 'user_id' from webhook_events
         where sale_id = $1 or left(sale_id, length($1) + 1) = $1 || '.' order by id",
    )
    .bind(&drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let lost: BTreeSet<&str> = drawn.iter().filter(|(_, r)| r.0 == "lost").map(|(u, _)| u.as_str()).collect();
    let lost_events: BTreeSet<&str> =
        events.iter().filter(|e| e.1 == "draw.lost").filter_map(|e| e.3.as_deref()).collect();
    assert_eq!(lost_events, lost);
    assert_eq!(events.iter().filter(|e| e.1 == "draw.lost").count(), lost.len(), "once each");
    let offers: Vec<_> = events.iter().filter(|e| e.1 == "draw.offered").collect();
    assert_eq!(
        offers.iter().filter_map(|e| e.3.as_deref()).collect::<BTreeSet<_>>(),
        offered.keys().map(String::as_str).collect()
    );
    for offer in offers {
        let created = events.iter().find(|e| e.1 == "order.created" && e.2 == offer.2).expect("its order.created");
        assert!(offer.0 < created.0, "draw.offered goes first: {offer:?} {created:?}");
    }
}

#[tokio::test]
async fn the_release_script_offers_what_the_waitlist_rule_says() {
    let app = spawn_app().await;
    let redis = app.store.keyspace();
    let sizes = proptest::sample::subsequence(SIZES.to_vec(), 1..=3).prop_shuffle();
    let places = proptest::collection::vec((sizes, 1..=2u32), 1..12);
    let releases = proptest::collection::vec((0..3usize, 1..=2u32), 1..15);
    let mut runner = TestRunner::deterministic();
    for case in 0..16 {
        let (places, releases) = (places.clone(), releases.clone()).new_tree(&mut runner).unwrap().current();
        let drop = draw_drop(&app, [5, 5, 5], 3600).await;
        let id = DropId::parse(&drop).unwrap();
        let mut model = vec![];
        let mut written = vec![];
        for (i, (sizes, quantity)) in places.into_iter().enumerate() {
            let user = format!("w{case}-{i}");
            let sizes: Vec<String> = sizes.into_iter().map(str::to_owned).collect();
            let position = i as u32 + 1;
            written.push(Place { position, user: UserId::parse(&user).unwrap(), quantity, sizes: sizes.clone() });
            model.push(Waiting { entrant: user, sizes, quantity, waiting: true });
        }
        assert_eq!(offers::put_waitlist(redis, &id, &written).await.unwrap(), written.len() as u64);
        assert_eq!(offers::put_waitlist(redis, &id, &written).await.unwrap(), 0, "each place once");
        for (size, units) in releases {
            let size = SIZES[size];
            let sale = id.size(size).unwrap();
            let order = (Uuid::now_v7(), units as i32);
            let got = offers::release(redis, &id, (&sale, size), &[order]).await.unwrap().unwrap();
            let expected = offer(&model, size, units);
            let got_offers: Vec<(u32, &str, u32)> =
                got.offers.iter().map(|o| (o.position, o.user.as_str(), o.quantity)).collect();
            let expected_offers: Vec<(u32, &str, u32)> =
                expected.offers.iter().map(|o| (o.position, o.entrant.as_str(), o.quantity)).collect();
            assert_eq!((got_offers, got.to_stock), (expected_offers, u64::from(expected.to_stock)), "case {case}");
            assert_eq!(got.units, u64::from(units));
            let again = offers::release(redis, &id, (&sale, size), &[order]).await.unwrap().unwrap();
            assert_eq!((again.units, again.offers.len()), (0, 0), "released once");
            for o in &expected.offers {
                model[o.position as usize - 1].waiting = false;
            }
        }
    }
}

/// A reservation given back while the drop is paused gives nothing back yet (to the stock, its
/// units would reach no one: only the draw's awards buy a draw's size): the release stays owed,
/// and once the drop is resumed the sweeper's re-drive offers them down the waitlist as the rule
/// says. Waits for that state, not for a time.
#[tokio::test]
async fn units_given_back_while_the_drop_is_paused_reach_the_waitlist_after_the_resume() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [3, 2, 2], 3600).await;
    enter_each(&app, &drop, entries(30)).await;
    assert_eq!(run_now(&app, &drop).await.status(), 200);
    let model = waitlist(&app, &drop).await;
    let (sale, user, units) = oldest_reservation(&app, &drop).await.expect("a winner's reservation");
    let size = sale.rsplit('.').next().unwrap().to_owned();
    let expected = offer(&model, &size, units as u32);
    let switch = async |action: &str| {
        let url = app.url(&format!("/admin/drops/{drop}/{action}"));
        app.client.post(url).bearer_auth(crate::helpers::ADMIN_TOKEN).send().await.unwrap().status()
    };
    let state = async || {
        let mut offered = vec![];
        for place in &model {
            let entry = app.get_as(&format!("/drops/{drop}/entry"), &place.entrant).await;
            if entry["state"] == "offered" {
                offered.push(place.entrant.clone());
            }
        }
        (offered, app.status(&sale).await.stock_left)
    };

    assert_eq!(switch("pause").await, 200);
    assert_eq!(app.cancel(&sale, &user).await.status(), 200);
    assert_eq!(state().await, (vec![], 0), "nothing given back while paused");
    assert_eq!(switch("resume").await, 200);
    let wanted: Vec<String> = expected.offers.iter().map(|o| o.entrant.clone()).collect();
    let wanted = (wanted, i64::from(expected.to_stock));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let now = state().await;
        if now == wanted {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "after the resume: {now:?}, the rule says {wanted:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The release reads the size's waiting places a page (64) at a time: a unit that only the 90th
/// place can take (the 89 before it want 2) still reaches it, and the places it passed stay
/// waiting.
#[tokio::test]
async fn a_release_walks_past_a_page_of_places_that_do_not_fit() {
    let app = spawn_app().await;
    let redis = app.store.keyspace();
    let drop = draw_drop(&app, [5, 5, 5], 3600).await;
    let id = DropId::parse(&drop).unwrap();
    let size = SIZES[1];
    let places: Vec<Place> = (1..=100u32)
        .map(|position| Place {
            position,
            user: UserId::parse(&format!("p{position}")).unwrap(),
            quantity: if position == 90 { 1 } else { 2 },
            sizes: vec![size.to_owned()],
        })
        .collect();
    assert_eq!(offers::put_waitlist(redis, &id, &places).await.unwrap(), 100);
    let sale = id.size(size).unwrap();
    let got = offers::release(redis, &id, (&sale, size), &[(Uuid::now_v7(), 1)]).await.unwrap().unwrap();
    let offered: Vec<(u32, &str, u32)> = got.offers.iter().map(|o| (o.position, o.user.as_str(), o.quantity)).collect();
    assert_eq!((offered, got.to_stock), (vec![(90, "p90", 1)], 0));
    let got = offers::release(redis, &id, (&sale, size), &[(Uuid::now_v7(), 2)]).await.unwrap().unwrap();
    let offered: Vec<u32> = got.offers.iter().map(|o| o.position).collect();
    assert_eq!(offered, [1], "the first place, passed over before, still waits");
}

#[tokio::test]
async fn releases_racing_each_other_offer_each_unit_once() {
    let app = spawn_app().await;
    let drop = draw_drop(&app, [3, 2, 2], 3600).await;
    enter_each(&app, &drop, entries(30)).await;
    assert_eq!(run_now(&app, &drop).await.status(), 200);
    for size in SIZES {
        app.wait_for_drain(&format!("{drop}.{size}")).await;
    }
    // Every winner's reservation cancelled at once, as a crash right after the commits leaves them.
    let cancelled: Vec<(String, Uuid, i32)> = sqlx::query_as(
        "update orders set status = 'cancelled', resolved_at = now(), resolved_by = 'buyer'
         where left(sale_id, length($1) + 1) = $1 || '.' and status = 'reserved'
         returning sale_id, order_id, quantity",
    )
    .bind(&drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let mut by_sale: BTreeMap<String, Vec<Uuid>> = BTreeMap::new();
    for (sale, order, _) in &cancelled {
        by_sale.entry(sale.clone()).or_default().push(*order);
    }
    let (store, pool) = (&app.store, &app.pool);
    let racers = by_sale
        .iter()
        .flat_map(|(sale, orders)| (0..8).map(move |_| seckill::reservations::release(store, pool, sale, orders)));
    let released: Vec<u64> = futures::future::join_all(racers).await.into_iter().map(Result::unwrap).collect();
    let units: i32 = cancelled.iter().map(|c| c.2).sum();
    assert_eq!(released.iter().sum::<u64>(), units as u64, "every unit given back once: {released:?}");

    // Each place offered at most once, and every offer is one stored reservation.
    let mut stored_offers = 0;
    for size in SIZES {
        app.assert_invariants(&format!("{drop}.{size}"), &BTreeSet::new()).await;
    }
    let twice: Vec<(String, i64)> = sqlx::query_as(
        "select user_id, count(*) from orders where left(sale_id, length($1) + 1) = $1 || '.'
         group by user_id having count(*) > 1",
    )
    .bind(&drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(twice.is_empty(), "an entrant holds orders in two sizes: {twice:?}");
    let drawn = results(&app, &drop).await;
    for (position, (user, _)) in drawn.iter().filter(|(_, r)| r.0 == "waitlisted").map(|(u, r)| (r.3.unwrap(), (u, r)))
    {
        let standing = offers::standing(app.store.keyspace(), &DropId::parse(&drop).unwrap(), position as u32).await;
        let order: Option<(String,)> = sqlx::query_as(
            "select status from orders where left(sale_id, length($1) + 1) = $1 || '.' and user_id = $2",
        )
        .bind(&drop)
        .bind(user)
        .fetch_optional(&app.pool)
        .await
        .unwrap();
        match standing.unwrap() {
            offers::Standing::Offered { .. } => {
                assert_eq!(order, Some(("reserved".to_owned(),)), "{user}");
                stored_offers += 1;
            }
            other => assert_eq!(order, None, "{user} is {other:?} and has an order"),
        }
    }
    assert!(stored_offers > 0, "the waitlist was offered units");
}

#[tokio::test]
async fn expired_reservations_reach_the_waitlist_in_order_until_it_is_empty() {
    let app = spawn_app().await;
    // One unit a size, 1 s to pay that nobody pays: each unit goes down the waitlist as each
    // reservation expires, until no waiting place wants it.
    let drop = draw_drop_with_window(&app, [1, 1, 1], 3600, "1s").await;
    let bodies: Vec<Value> = entries(16)
        .into_iter()
        .map(|mut e| {
            e["quantity"] = json!(1);
            e
        })
        .collect();
    enter_each(&app, &drop, bodies).await;
    assert_eq!(run_now(&app, &drop).await.status(), 200);
    let model = waitlist(&app, &drop).await;
    // Waits for the state: every size's unit back in the stock (where it stays: only a release
    // offers a unit, and a unit in the stock has none to come), no order queued, no reservation
    // open and no release owed. Open and queued alone are not it: an expiry's release offers the
    // unit to the next place in the same Redis call, and that order can move from the stream to
    // Postgres between the two reads, in neither.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let (mut queued, mut in_stock) = (0, 0);
        for size in SIZES {
            let status = app.status(&format!("{drop}.{size}")).await;
            queued += status.queued;
            in_stock += status.stock_left;
        }
        let open: i64 = sqlx::query_scalar(
            "select count(*) from orders where left(sale_id, length($1) + 1) = $1 || '.'
             and (status = 'reserved' or restocked_at is null)",
        )
        .bind(&drop)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if in_stock == SIZES.len() as i64 && open == 0 && queued == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "{open} reservations still open or owed, {queued} queued, {in_stock} units in stock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Each size's offers went to its waiting places in place order, each entrant once.
    let offers: Vec<(String, String)> = sqlx::query_as(
        "select o.sale_id, o.user_id from orders o join draw_results r
           on r.drop_id = $1 and r.user_id = o.user_id and r.outcome = 'waitlisted'
         where left(o.sale_id, length($1) + 1) = $1 || '.' order by o.created_at, o.order_id",
    )
    .bind(&drop)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let place = |user: &str| model.iter().position(|w| w.entrant == user).unwrap();
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (sale, user) in &offers {
        assert!(seen.insert(user.as_str()), "{user} offered twice");
        let at = place(user);
        assert!(last.get(sale.as_str()).is_none_or(|before| *before < at), "{sale}: place {at} after a later one");
        last.insert(sale.as_str(), at);
    }
    assert!(!offers.is_empty(), "expiries reached the waitlist");
    // Then the units are back in the stock, and no place still waiting wanted them.
    let waiting: Vec<&Waiting> = model.iter().filter(|w| !seen.contains(w.entrant.as_str())).collect();
    for size in SIZES {
        let status = app.assert_invariants(&format!("{drop}.{size}"), &BTreeSet::new()).await;
        assert_eq!(status.stock_left, 1, "{size}: its unit back in the stock once: {status:?}");
        let wanted: Vec<_> = waiting.iter().filter(|w| w.sizes.iter().any(|s| s == size)).collect();
        assert!(wanted.is_empty(), "{size} went to the stock while {wanted:?} waited for it");
    }
}

/// The waitlist's keys are written after the release gate has counted the orders released: a
/// damaged one (a key of the wrong type) used to fail the call there, the units neither offered
/// nor in the stock and the gate closed to every retry, so they were lost. Now the call fails with
/// nothing written, and once mended the same release gives its units once.
#[tokio::test]
async fn a_release_over_a_damaged_waitlist_counts_no_order_released() {
    let app = spawn_app().await;
    let redis = app.store.keyspace();
    let drop = draw_drop(&app, [5, 5, 5], 3600).await;
    let id = DropId::parse(&drop).unwrap();
    let size = SIZES[0];
    let sale = id.size(size).unwrap();
    let keys = seckill::redis::keys::DropKeys::new(redis.prefix(), &id);
    let order = (Uuid::now_v7(), 2);
    let mut con = app.redis.clone();
    for damaged in [keys.waiting(size), keys.waitlist.clone()] {
        let _: () = redis::AsyncCommands::set(&mut con, &damaged, "damaged").await.unwrap();
        let failed = offers::release(redis, &id, (&sale, size), &[order]).await;
        assert!(failed.is_err(), "{damaged} damaged: {failed:?}");
        let released: bool =
            redis::AsyncCommands::sismember(&mut con, &redis.sale_keys(&sale).released, order.0.to_string())
                .await
                .unwrap();
        assert!(!released, "{damaged} damaged: the order is not counted released");
        let _: () = redis::AsyncCommands::del(&mut con, &damaged).await.unwrap();
    }
    let got = offers::release(redis, &id, (&sale, size), &[order]).await.unwrap().unwrap();
    assert_eq!((got.units, got.to_stock, got.offers.len()), (2, 2, 0), "mended: the units go to the stock");
    assert_eq!(app.status(sale.as_str()).await.stock_left, got.stock_before + 2);
}
